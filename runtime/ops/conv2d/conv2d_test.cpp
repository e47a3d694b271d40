// Conv2d CPU reference: geometry arithmetic, forward vs a direct 7-loop float64 loop for PyTorch-style geometries,
// both backward pieces vs float64 finite differences, and bitwise independence from the thread count.
#include <catch2/catch.hpp>

#include "runtime/ops/conv2d/conv2d.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

struct GeomCase {
  const char* name;
  Conv2dGeom g;
};

Conv2dGeom geom(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t r, int64_t s, int64_t stride,
                int64_t pad, int64_t dil = 1, int64_t groups = 1) {
  Conv2dGeom g;
  g.n = n, g.h = h, g.w = w, g.c = c, g.k = k, g.r = r, g.s = s;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  g.dil_h = g.dil_w = dil;
  g.groups = groups;
  return g;
}

// The geometries named in the op's contract: every one is finished (p, q filled) before use.
std::vector<GeomCase> geom_cases() {
  Conv2dGeom asym = geom(2, 7, 9, 3, 4, 3, 2, 1, 0);  // non-square input and kernel, mixed stride/pad
  asym.stride_h = 2, asym.stride_w = 1, asym.pad_h = 1, asym.pad_w = 2, asym.dil_w = 2;
  std::vector<GeomCase> cs = {
      {"1x1", geom(2, 5, 4, 6, 5, 1, 1, 1, 0)},
      {"1x1 stride 2", geom(2, 6, 7, 4, 3, 1, 1, 2, 0)},
      {"3x3 pad 1", geom(2, 6, 5, 4, 6, 3, 3, 1, 1)},
      {"7x7 stride 2 pad 3", geom(2, 11, 10, 3, 4, 7, 7, 2, 3)},
      {"3x3 dilation 2 pad 2", geom(2, 8, 7, 3, 4, 3, 3, 1, 2, 2)},
      {"3x3 groups 2", geom(2, 6, 6, 4, 6, 3, 3, 1, 1, 1, 2)},
      {"3x3 depthwise", geom(2, 6, 5, 4, 4, 3, 3, 1, 1, 1, 4)},
      {"non-square, mixed stride/pad/dilation", asym},
  };
  for (auto& c : cs) {
    std::string why;
    REQUIRE(conv2d_geom_finish(c.g, &why));
  }
  return cs;
}

// y (N,P,Q,K) by the definition: seven nested loops in float64.
std::vector<double> conv_naive(const Conv2dGeom& g, const std::vector<double>& x, const std::vector<double>& w,
                               const double* bias) {
  const int64_t cg = g.c / g.groups, kg = g.k / g.groups;
  std::vector<double> y(g.n * g.p * g.q * g.k);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t p = 0; p < g.p; ++p)
      for (int64_t q = 0; q < g.q; ++q)
        for (int64_t k = 0; k < g.k; ++k) {
          const int64_t grp = k / kg;
          double sum = bias ? bias[k] : 0.0;
          for (int64_t r = 0; r < g.r; ++r)
            for (int64_t s = 0; s < g.s; ++s)
              for (int64_t c = 0; c < cg; ++c) {
                const int64_t ih = p * g.stride_h - g.pad_h + r * g.dil_h, iw = q * g.stride_w - g.pad_w + s * g.dil_w;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                sum += x[((n * g.h + ih) * g.w + iw) * g.c + grp * cg + c] * w[((k * g.r + r) * g.s + s) * cg + c];
              }
          y[((n * g.p + p) * g.q + q) * g.k + k] = sum;
        }
  return y;
}

size_t x_size(const Conv2dGeom& g) { return static_cast<size_t>(g.n * g.h * g.w * g.c); }
size_t w_size(const Conv2dGeom& g) { return static_cast<size_t>(g.k * g.r * g.s * (g.c / g.groups)); }
size_t y_size(const Conv2dGeom& g) { return static_cast<size_t>(g.n * g.p * g.q * g.k); }

}  // namespace

TEST_CASE("conv2d geometry gives PyTorch's output size and rejects impossible shapes", "[ops][conv2d]") {
  Conv2dGeom g = geom(1, 224, 224, 3, 64, 7, 7, 2, 3);
  std::string why;
  REQUIRE(conv2d_geom_finish(g, &why));
  CHECK(g.p == 112);
  CHECK(g.q == 112);
  Conv2dGeom d = geom(1, 10, 9, 2, 2, 3, 3, 3, 0, 2);  // (10 - 4 - 1) / 3 + 1 = 2, (9 - 4 - 1) / 3 + 1 = 2
  REQUIRE(conv2d_geom_finish(d, &why));
  CHECK(d.p == 2);
  CHECK(d.q == 2);
  Conv2dGeom big = geom(1, 2, 2, 1, 1, 5, 5, 1, 1);  // 2 + 2 - 5 < 0: empty, though the C++ quotient would be 0
  CHECK_FALSE(conv2d_geom_finish(big, &why));
  CHECK(why.find("empty output") != std::string::npos);
  Conv2dGeom grp = geom(1, 4, 4, 6, 4, 3, 3, 1, 1, 1, 4);  // C = 6 not divisible by 4 groups
  CHECK_FALSE(conv2d_geom_finish(grp, &why));
  CHECK(why.find("groups") != std::string::npos);
  Conv2dGeom zero_stride = geom(1, 4, 4, 1, 1, 1, 1, 0, 0);
  CHECK_FALSE(conv2d_geom_finish(zero_stride, nullptr));
}

TEST_CASE("conv2d forward equals the direct definition, with and without bias, in float64 and float",
          "[ops][conv2d]") {
  uint32_t seed = 100;
  for (const GeomCase& gc : geom_cases()) {
    const Conv2dGeom& g = gc.g;
    INFO(gc.name << ": " << conv2d_geom_str(g));
    auto x = random_vec(x_size(g), ++seed), w = random_vec(w_size(g), ++seed), b = random_vec(g.k, ++seed);
    for (bool with_bias : {false, true}) {
      const double* bias = with_bias ? b.data() : nullptr;
      const std::vector<double> ref = conv_naive(g, x, w, bias);
      std::vector<double> y(y_size(g), NAN);
      conv2d_fwd_cpu<double>(g, x.data(), w.data(), bias, y.data(), nullptr);
      Diff d = diff(y, ref);
      INFO("bias " << with_bias << ", double: " << d.str());
      CHECK(d.rel < 1e-14);
      std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end());
      std::vector<float> yf(y_size(g), NAN);
      conv2d_fwd_cpu<float>(g, xf.data(), wf.data(), with_bias ? bf.data() : nullptr, yf.data(), nullptr);
      Diff df = diff(yf, ref);
      INFO("float: " << df.str());
      CHECK(df.rel < 1e-6);
    }
  }
}

TEST_CASE("conv2d input and weight gradients match float64 finite differences", "[ops][conv2d][gradcheck]") {
  uint32_t seed = 200;
  for (const GeomCase& gc : geom_cases()) {
    const Conv2dGeom& g = gc.g;
    INFO(gc.name << ": " << conv2d_geom_str(g));
    auto x = random_vec(x_size(g), ++seed), w = random_vec(w_size(g), ++seed), b = random_vec(g.k, ++seed);
    auto r = random_vec(y_size(g), ++seed);  // L = sum(y * r), so dL/dy = r
    auto loss = [&] {
      std::vector<double> y(y_size(g));
      conv2d_fwd_cpu<double>(g, x.data(), w.data(), b.data(), y.data(), nullptr);
      return dot(y, r);
    };
    std::vector<double> dx(x_size(g), NAN), dw(w_size(g), NAN);  // NaN: both must be overwritten, not accumulated
    conv2d_grad_input_cpu<double>(g, r.data(), w.data(), dx.data(), nullptr);
    conv2d_grad_weight_cpu<double>(g, r.data(), x.data(), dw.data(), nullptr);
    Diff ex = diff(dx, numeric_grad(loss, x)), ew = diff(dw, numeric_grad(loss, w));
    INFO("dx " << ex.str() << "; dw " << ew.str());
    CHECK(ex.rel < 1e-7);
    CHECK(ew.rel < 1e-7);
  }
}

TEST_CASE("conv2d float results do not depend on the thread count", "[ops][conv2d]") {
  ThreadPool p1(1), p4(4);
  // N = 9 spreads images over the pool (uneven chunks); N = 2 runs images in order with a threaded GEMM.
  for (int64_t n : {int64_t{9}, int64_t{2}}) {
    for (Conv2dGeom g : {geom(n, 12, 11, 8, 16, 3, 3, 1, 1), geom(n, 10, 10, 16, 24, 1, 1, 1, 0),
                         geom(n, 13, 12, 8, 12, 5, 5, 2, 2, 1, 2)}) {
      REQUIRE(conv2d_geom_finish(g, nullptr));
      INFO(conv2d_geom_str(g));
      auto xd = random_vec(x_size(g), 301), wd = random_vec(w_size(g), 302), bd = random_vec(g.k, 303);
      auto dyd = random_vec(y_size(g), 304);
      std::vector<float> x(xd.begin(), xd.end()), w(wd.begin(), wd.end()), b(bd.begin(), bd.end()),
          dy(dyd.begin(), dyd.end());
      std::vector<float> y1(y_size(g)), y4(y_size(g)), dx1(x_size(g)), dx4(x_size(g)), dw1(w_size(g)),
          dw4(w_size(g));
      conv2d_fwd_cpu<float>(g, x.data(), w.data(), b.data(), y1.data(), &p1);
      conv2d_fwd_cpu<float>(g, x.data(), w.data(), b.data(), y4.data(), &p4);
      conv2d_grad_input_cpu<float>(g, dy.data(), w.data(), dx1.data(), &p1);
      conv2d_grad_input_cpu<float>(g, dy.data(), w.data(), dx4.data(), &p4);
      conv2d_grad_weight_cpu<float>(g, dy.data(), x.data(), dw1.data(), &p1);
      conv2d_grad_weight_cpu<float>(g, dy.data(), x.data(), dw4.data(), &p4);
      CHECK(y1 == y4);
      CHECK(dx1 == dx4);
      CHECK(dw1 == dw4);
      // And the float path agrees with the float64 one.
      std::vector<double> dwd(w_size(g));
      conv2d_grad_weight_cpu<double>(g, dyd.data(), xd.data(), dwd.data(), nullptr);
      Diff d = diff(dw4, dwd);
      INFO(d.str());
      CHECK(d.rel < 1e-5);
    }
  }
}
