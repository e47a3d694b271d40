// The data gradient as a forward convolution (dgrad_fwd.h) on the CPU: the forward over the transformed filters
// equals the data gradient (float64, within rounding) on 3x3 pad 1 (VGG's and ResNet's layers, C != K both ways),
// 5x5 pad 2, 3x3 pad 0 (pad' 2), a 1x3 filter with pads 0x2, dilation 2, odd and non-square images; the filter
// transform as the definition and as its own inverse; the f16-bits copy equal to the float one; the rule.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/dgrad_fwd.h"
#include "tests/support/conv_geom.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using trctl::testing::conv_geom;

TEST_CASE("the data gradient equals the forward conv over the flipped, transposed filters", "[conv2d][dgrad_fwd]") {
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"3x3 pad 1 C=8 K=16 9x7", conv_geom(2, 9, 7, 8, 16, 3, 3, 1, 1, 1, 1)},
      {"3x3 pad 1 C=16 K=8 6x6", conv_geom(3, 6, 6, 16, 8, 3, 3, 1, 1, 1, 1)},
      {"5x5 pad 2 C=4 K=4 8x5", conv_geom(2, 8, 5, 4, 4, 5, 5, 1, 1, 2, 2)},
      {"3x3 pad 0 C=3 K=5 7x9", conv_geom(2, 7, 9, 3, 5, 3, 3, 1, 1, 0, 0)},
      {"1x3 pad 0x2 C=6 K=2 5x4", conv_geom(1, 5, 4, 6, 2, 1, 3, 1, 1, 0, 2)},
      {"3x3 dil 2 pad 2 C=4 K=6 9x8", conv_geom(2, 9, 8, 4, 6, 3, 3, 1, 1, 2, 2, 2, 2)},
      {"2x2 pad 1 C=5 K=3 4x6", conv_geom(2, 4, 6, 5, 3, 2, 2, 1, 1, 1, 1)}};
  uint32_t seed = 11;
  for (const auto& [name, g] : cases) {
    CAPTURE(name);
    REQUIRE(dgrad_fwd_eligible(g));
    const Conv2dGeom f = dgrad_fwd_geom(g);
    CHECK(f.n == g.n);
    CHECK(f.h == g.p);
    CHECK(f.w == g.q);
    CHECK(f.c == g.k);
    CHECK(f.k == g.c);
    CHECK(f.p == g.h);
    CHECK(f.q == g.w);
    CHECK(f.stride_h == 1);
    CHECK(f.stride_w == 1);
    const std::vector<double> dy = testing::random_vec(static_cast<size_t>(g.n * g.p * g.q * g.k), seed++);
    const std::vector<double> w = testing::random_vec(static_cast<size_t>(g.k * g.r * g.s * g.c), seed++);
    std::vector<double> wf(w.size(), -7.0), dx(static_cast<size_t>(g.n * g.h * g.w * g.c), -7.0), dx_f(dx);
    dgrad_fwd_filter_cpu(g, w.data(), wf.data());
    for (int64_t k = 0; k < g.k; ++k)  // the definition, every element written
      for (int64_t r = 0; r < g.r; ++r)
        for (int64_t s = 0; s < g.s; ++s)
          for (int64_t c = 0; c < g.c; ++c)
            REQUIRE(wf[((c * g.r + (g.r - 1 - r)) * g.s + (g.s - 1 - s)) * g.k + k] ==
                    w[((k * g.r + r) * g.s + s) * g.c + c]);
    conv2d_grad_input_cpu(g, dy.data(), w.data(), dx.data(), nullptr);
    conv2d_fwd_cpu<double>(f, dy.data(), wf.data(), nullptr, dx_f.data(), nullptr);
    double worst = 0.0;
    for (size_t i = 0; i < dx.size(); ++i) worst = std::max(worst, std::fabs(dx[i] - dx_f[i]));
    CHECK(worst < 1e-12);
    // Transforming wf with f's sizes gives w back (f's C and K are g's K and C).
    std::vector<double> back(w.size());
    dgrad_fwd_filter_cpu(f, wf.data(), back.data());
    CHECK(back == w);
  }
}

TEST_CASE("the data-gradient filter transform copies f16 bits as it copies floats", "[conv2d][dgrad_fwd]") {
  const Conv2dGeom g = conv_geom(1, 5, 5, 24, 40, 3, 3, 1, 1, 1, 1);
  const size_t n = static_cast<size_t>(g.k * g.r * g.s * g.c);
  std::vector<uint16_t> w(n), wf(n);
  std::vector<float> wv(n), wfv(n);
  for (size_t i = 0; i < n; ++i) w[i] = static_cast<uint16_t>(i * 2654435761u >> 16), wv[i] = static_cast<float>(w[i]);
  dgrad_fwd_filter_cpu(g, w.data(), wf.data());
  dgrad_fwd_filter_cpu(g, wv.data(), wfv.data());
  for (size_t i = 0; i < n; ++i) REQUIRE(static_cast<float>(wf[i]) == wfv[i]);
}

TEST_CASE("dgrad_fwd_eligible: stride 1, one group, pad within the dilated filter", "[conv2d][dgrad_fwd]") {
  CHECK(dgrad_fwd_eligible(conv_geom(1, 8, 8, 8, 8, 3, 3, 1, 1, 1, 1)));
  CHECK(dgrad_fwd_eligible(conv_geom(1, 8, 8, 8, 8, 1, 1, 1, 1, 0, 0)));     // 1x1: pad' 0
  CHECK_FALSE(dgrad_fwd_eligible(conv_geom(1, 8, 8, 8, 8, 3, 3, 2, 2, 1, 1)));  // stride 2
  CHECK_FALSE(dgrad_fwd_eligible(conv_geom(1, 8, 8, 8, 8, 3, 3, 1, 2, 1, 1)));  // stride 2 in one dim
  CHECK_FALSE(dgrad_fwd_eligible(conv_geom(1, 8, 8, 8, 8, 3, 3, 1, 1, 3, 1)));  // pad 3 > R - 1
  CHECK_FALSE(dgrad_fwd_eligible(conv_geom(1, 8, 8, 8, 8, 1, 1, 1, 1, 0, 1)));  // 1x1 with padding
  CHECK(dgrad_fwd_eligible(conv_geom(1, 12, 12, 8, 8, 3, 3, 1, 1, 4, 4, 2, 2)));  // dilation 2: pad' 0
  Conv2dGeom grouped = conv_geom(1, 8, 8, 8, 8, 3, 3, 1, 1, 1, 1);
  grouped.groups = 2;
  CHECK_FALSE(dgrad_fwd_eligible(grouped));
}
