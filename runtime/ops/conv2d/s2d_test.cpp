// Space-to-depth CPU reference (s2d.h): the stride-1 conv over the blocked input and filter equals the direct
// stride-2 conv (forward within float64 rounding, with and without bias) and its regathered weight gradient the
// direct weight gradient, on the stems and odd geometries (7x7/2 pad 3, 3x3/2 pad 1, 4x4/2 pad 1, 5x3/2, odd and
// even H/W, C = 1..4, K = 8/16); z and w2 element by element against the definition (padding taps and tail
// channels zero, every element overwritten); the filter-gradient gather as the exact left inverse of the filter
// transform; the f16/bf16-bits copies equal to the float ones; the rule and the stride-1 geometry.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/s2d.h"
#include "tests/support/conv_geom.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using trctl::testing::conv_geom;

namespace {

std::vector<std::pair<const char*, Conv2dGeom>> cases() {
  return {{"7x7/2 pad 3 C=3 K=8 (stem) even 16x14", conv_geom(2, 16, 14, 3, 8, 7, 7, 2, 2, 3, 3)},
          {"7x7/2 pad 3 C=3 K=16 (stem) odd 13x11", conv_geom(2, 13, 11, 3, 16, 7, 7, 2, 2, 3, 3)},
          {"3x3/2 pad 1 C=1 K=8 odd 9x7", conv_geom(2, 9, 7, 1, 8, 3, 3, 2, 2, 1, 1)},
          {"3x3/2 pad 1 C=2 K=16 even 10x12", conv_geom(2, 10, 12, 2, 16, 3, 3, 2, 2, 1, 1)},
          {"4x4/2 pad 1 C=4 K=8 even 12x10", conv_geom(2, 12, 10, 4, 8, 4, 4, 2, 2, 1, 1)},
          {"4x4/2 pad 1 C=3 K=16 odd 11x9", conv_geom(2, 11, 9, 3, 16, 4, 4, 2, 2, 1, 1)},
          {"5x3/2 pad 2x1 C=3 K=8 odd/even 11x10", conv_geom(2, 11, 10, 3, 8, 5, 3, 2, 2, 2, 1)},
          {"2x6/2 pad 0x3 C=4 K=16 even/odd 8x13", conv_geom(2, 8, 13, 4, 16, 2, 6, 2, 2, 0, 3)},
          {"7x7/2 pad 0 C=1 K=8 odd 15x15", conv_geom(2, 15, 15, 1, 8, 7, 7, 2, 2, 0, 0)}};
}

// n values uniform in [-1, 1) (tests/support/gradcheck.h's generator).
std::vector<double> draw(int64_t n, uint32_t seed) { return testing::random_vec(static_cast<size_t>(n), seed); }

std::vector<double> abs_of(const std::vector<double>& v) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
  return a;
}

// Largest |got - want| / mag over the elements (mag: the same computation on |inputs|, so the bound is relative to
// the size of the sum's terms, not of its possibly cancelled value), and where.
struct RelErr {
  double worst = 0;
  int64_t at = -1;
};
RelErr rel_err(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& mag) {
  RelErr r;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(got[i] - want[i]) / std::max(mag[i], 1e-300);
    if (!(e <= r.worst)) r.worst = e, r.at = static_cast<int64_t>(i);
  }
  return r;
}

// z and w2 by the definition, one element at a time.
double z_at(const Conv2dGeom& g, const std::vector<double>& x, int64_t n, int64_t u, int64_t v, int64_t j) {
  if (j >= 4 * g.c) return 0.0;
  const int64_t bh = j / g.c / 2, bw = j / g.c % 2, c = j % g.c;
  const int64_t ih = 2 * u + bh - g.pad_h, iw = 2 * v + bw - g.pad_w;
  if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) return 0.0;
  return x[static_cast<size_t>(((n * g.h + ih) * g.w + iw) * g.c + c)];
}
double w2_at(const Conv2dGeom& g, const std::vector<double>& w, int64_t k, int64_t a, int64_t e, int64_t j) {
  if (j >= 4 * g.c) return 0.0;
  const int64_t r = 2 * a + j / g.c / 2, s = 2 * e + j / g.c % 2, c = j % g.c;
  if (r >= g.r || s >= g.s) return 0.0;
  return w[static_cast<size_t>(((k * g.r + r) * g.s + s) * g.c + c)];
}

}  // namespace

TEST_CASE("s2d conv (blocked input and filter, stride-1 conv) equals the direct stride-2 conv in float64",
          "[s2d][conv2d]") {
  uint32_t seed = 40;
  for (const auto& [name, g] : cases()) {
    INFO(name << ": " << conv2d_geom_str(g));
    REQUIRE(s2d_conv_eligible(g));
    const Conv2dGeom zg = s2d_conv_geom(g);
    INFO("stride-1 geometry: " << conv2d_geom_str(zg));
    REQUIRE(zg.p == g.p);
    REQUIRE(zg.q == g.q);
    const int64_t nz = zg.n * zg.h * zg.w * zg.c, nw2 = zg.k * zg.r * zg.s * zg.c, ny = g.n * g.p * g.q * g.k;
    const std::vector<double> x = draw(g.n * g.h * g.w * g.c, ++seed), w = draw(g.k * g.r * g.s * g.c, ++seed),
                              b = draw(g.k, ++seed), dy = draw(ny, ++seed);
    const std::vector<double> ax = abs_of(x), aw = abs_of(w), ab = abs_of(b), ady = abs_of(dy);
    // Forward, with and without bias: the direct conv, the s2d conv, and the magnitude (direct conv of |inputs|).
    for (bool bias : {false, true}) {
      INFO((bias ? "with bias" : "without bias"));
      std::vector<double> want(ny), mag(ny), got(ny, 99.0), z(nz, 99.0), w2(nw2, 99.0);
      conv2d_fwd_cpu<double>(g, x.data(), w.data(), bias ? b.data() : nullptr, want.data(), nullptr);
      conv2d_fwd_cpu<double>(g, ax.data(), aw.data(), bias ? ab.data() : nullptr, mag.data(), nullptr);
      s2d_input_cpu<double>(g, x.data(), z.data());
      s2d_filter_cpu<double>(g, w.data(), w2.data());
      conv2d_fwd_cpu<double>(zg, z.data(), w2.data(), bias ? b.data() : nullptr, got.data(), nullptr);
      const RelErr e = rel_err(got, want, mag);
      INFO("forward: worst relative difference " << e.worst << " at y index " << e.at);
      CHECK(e.worst < 1e-12);
    }
    // Weight gradient: the stride-1 conv's wgrad over z, regathered, against the direct wgrad.
    std::vector<double> z(nz), dw2(nw2, 99.0), got(w.size(), 99.0), want(w.size()), mag(w.size());
    s2d_input_cpu<double>(g, x.data(), z.data());
    conv2d_grad_weight_cpu<double>(zg, dy.data(), z.data(), dw2.data(), nullptr);
    s2d_filter_grad_cpu<double>(g, dw2.data(), got.data());
    conv2d_grad_weight_cpu<double>(g, dy.data(), x.data(), want.data(), nullptr);
    conv2d_grad_weight_cpu<double>(g, ady.data(), ax.data(), mag.data(), nullptr);
    const RelErr e = rel_err(got, want, mag);
    INFO("weight gradient: worst relative difference " << e.worst << " at dw index " << e.at);
    CHECK(e.worst < 1e-12);
  }
}

TEST_CASE("s2d input and filter transforms equal the definition element by element, zeros included",
          "[s2d][conv2d]") {
  uint32_t seed = 900;
  for (const auto& [name, g] : cases()) {
    INFO(name << ": " << conv2d_geom_str(g));
    const Conv2dGeom zg = s2d_conv_geom(g);
    const std::vector<double> x = draw(g.n * g.h * g.w * g.c, ++seed), w = draw(g.k * g.r * g.s * g.c, ++seed);
    std::vector<double> z(static_cast<size_t>(zg.n * zg.h * zg.w * zg.c), 99.0),
        w2(static_cast<size_t>(zg.k * zg.r * zg.s * zg.c), 99.0);
    s2d_input_cpu<double>(g, x.data(), z.data());
    s2d_filter_cpu<double>(g, w.data(), w2.data());
    int64_t bad_z = 0, bad_w = 0, zeros_z = 0, zeros_w = 0;
    size_t i = 0;
    for (int64_t n = 0; n < zg.n; ++n)
      for (int64_t u = 0; u < zg.h; ++u)
        for (int64_t v = 0; v < zg.w; ++v)
          for (int64_t j = 0; j < zg.c; ++j, ++i) {
            const double want = z_at(g, x, n, u, v, j);
            bad_z += z[i] != want;
            zeros_z += want == 0.0;
          }
    i = 0;
    for (int64_t k = 0; k < zg.k; ++k)
      for (int64_t a = 0; a < zg.r; ++a)
        for (int64_t e = 0; e < zg.s; ++e)
          for (int64_t j = 0; j < zg.c; ++j, ++i) {
            const double want = w2_at(g, w, k, a, e, j);
            bad_w += w2[i] != want;
            zeros_w += want == 0.0;
          }
    CHECK(bad_z == 0);
    CHECK(bad_w == 0);
    CHECK(zeros_z > 0);  // every case has padding or tail channels
    if (g.r % 2 || g.s % 2 || 4 * g.c < zg.c) CHECK(zeros_w > 0);
  }
}

TEST_CASE("s2d filter-gradient gather is the exact left inverse of the filter transform", "[s2d][conv2d]") {
  uint32_t seed = 3000;
  for (const auto& [name, g] : cases()) {
    INFO(name << ": " << conv2d_geom_str(g));
    const Conv2dGeom zg = s2d_conv_geom(g);
    const std::vector<double> w = draw(g.k * g.r * g.s * g.c, ++seed);
    std::vector<double> w2(static_cast<size_t>(zg.k * zg.r * zg.s * zg.c)), back(w.size(), 99.0);
    s2d_filter_cpu<double>(g, w.data(), w2.data());
    s2d_filter_grad_cpu<double>(g, w2.data(), back.data());
    CHECK(back == w);
  }
}

TEST_CASE("s2d transforms of f16/bf16 bits and of floats are the same copies as of doubles", "[s2d][conv2d]") {
  for (const auto& [name, g] : cases()) {
    INFO(name << ": " << conv2d_geom_str(g));
    const Conv2dGeom zg = s2d_conv_geom(g);
    const int64_t nx = g.n * g.h * g.w * g.c, nw = g.k * g.r * g.s * g.c, nz = zg.n * zg.h * zg.w * zg.c,
                  nw2 = zg.k * zg.r * zg.s * zg.c;
    // Distinct non-zero small integers (exact in every type; bits = value for uint16_t).
    auto ramp = [](int64_t n, int64_t start) {
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(1 + (start + i) % 60000);
      return v;
    };
    const std::vector<double> x = ramp(nx, 0), w = ramp(nw, 17), dw2 = ramp(nw2, 5);
    auto as = [](const std::vector<double>& v, auto zero) {
      return std::vector<decltype(zero)>(v.begin(), v.end());
    };
    std::vector<double> zd(nz), w2d(nw2), dwd(nw);
    s2d_input_cpu<double>(g, x.data(), zd.data());
    s2d_filter_cpu<double>(g, w.data(), w2d.data());
    s2d_filter_grad_cpu<double>(g, dw2.data(), dwd.data());
    {
      const std::vector<float> xf = as(x, 0.0f), wf = as(w, 0.0f), dw2f = as(dw2, 0.0f);
      std::vector<float> z(nz, -1.0f), w2(nw2, -1.0f), dw(nw, -1.0f);
      s2d_input_cpu<float>(g, xf.data(), z.data());
      s2d_filter_cpu<float>(g, wf.data(), w2.data());
      s2d_filter_grad_cpu<float>(g, dw2f.data(), dw.data());
      CHECK(as(zd, 0.0f) == z);
      CHECK(as(w2d, 0.0f) == w2);
      CHECK(as(dwd, 0.0f) == dw);
    }
    {
      const uint16_t u0 = 0;
      const std::vector<uint16_t> xb = as(x, u0), wb = as(w, u0), dw2b = as(dw2, u0);
      std::vector<uint16_t> z(nz, 0xFFFF), w2(nw2, 0xFFFF), dw(nw, 0xFFFF);
      s2d_input_cpu<uint16_t>(g, xb.data(), z.data());
      s2d_filter_cpu<uint16_t>(g, wb.data(), w2.data());
      s2d_filter_grad_cpu<uint16_t>(g, dw2b.data(), dw.data());
      CHECK(as(zd, u0) == z);
      CHECK(as(w2d, u0) == w2);
      CHECK(as(dwd, u0) == dw);
    }
  }
}

TEST_CASE("s2d rule: stride 2x2, dilation 1, groups 1, 4C <= 16, R, S >= 2, K % 8 == 0; its stride-1 geometry",
          "[s2d][conv2d]") {
  const Conv2dGeom stem = conv_geom(256, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3);  // ResNet-50
  CHECK(s2d_conv_eligible(stem));
  CHECK(s2d_channels(stem) == 16);
  const Conv2dGeom zg = s2d_conv_geom(stem);
  CHECK(zg.n == 256);
  CHECK(zg.h == 115);
  CHECK(zg.w == 115);
  CHECK(zg.c == 16);
  CHECK(zg.k == 64);
  CHECK(zg.r == 4);
  CHECK(zg.s == 4);
  CHECK((zg.stride_h == 1 && zg.stride_w == 1 && zg.pad_h == 0 && zg.pad_w == 0 && zg.dil_h == 1 && zg.dil_w == 1 &&
         zg.groups == 1));
  CHECK(zg.p == 112);
  CHECK(zg.q == 112);
  CHECK(s2d_channels(conv_geom(2, 16, 16, 1, 8, 3, 3, 2, 2, 1, 1)) == 8);
  CHECK(s2d_channels(conv_geom(2, 16, 16, 2, 8, 3, 3, 2, 2, 1, 1)) == 8);
  CHECK(s2d_channels(conv_geom(2, 16, 16, 4, 8, 3, 3, 2, 2, 1, 1)) == 16);
  CHECK_FALSE(s2d_conv_eligible(conv_geom(2, 32, 32, 3, 64, 3, 3, 1, 1, 1, 1)));     // stride 1 (VGG's first conv)
  CHECK_FALSE(s2d_conv_eligible(conv_geom(2, 32, 32, 3, 64, 3, 3, 2, 1, 1, 1)));     // stride 2x1
  CHECK_FALSE(s2d_conv_eligible(conv_geom(2, 32, 32, 5, 64, 3, 3, 2, 2, 1, 1)));     // 4C = 20 > 16
  CHECK_FALSE(s2d_conv_eligible(conv_geom(2, 32, 32, 3, 12, 7, 7, 2, 2, 3, 3)));     // K % 8 != 0
  CHECK_FALSE(s2d_conv_eligible(conv_geom(2, 32, 32, 3, 64, 1, 1, 2, 2, 0, 0)));     // 1x1/2
  CHECK_FALSE(s2d_conv_eligible(conv_geom(2, 32, 32, 3, 64, 1, 3, 2, 2, 0, 1)));     // R = 1
  CHECK_FALSE(s2d_conv_eligible(conv_geom(2, 32, 32, 3, 64, 3, 3, 2, 2, 2, 2, 2, 2)));  // dilation 2
  Conv2dGeom grouped = conv_geom(2, 32, 32, 4, 16, 3, 3, 2, 2, 1, 1);
  grouped.groups = 2;
  CHECK_FALSE(s2d_conv_eligible(grouped));
}
