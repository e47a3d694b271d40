// Pooling CPU references: hand-checked forward values (padding, stride != kernel, overlapping k3 s2 p1 windows,
// NHWC channels), float64 finite-difference gradients, the first-max tie rule, NaN, and geometry errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "runtime/ops/pool/pool.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

Pool2dGeom make_geom(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                     int64_t ph = 0, int64_t pw = 0) {
  Pool2dGeom g;
  g.n = n, g.h = h, g.w = w, g.c = c, g.kh = kh, g.kw = kw, g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw;
  REQUIRE(pool2d_geom_finish(g));
  return g;
}

std::vector<double> iota_vec(size_t n, double start = 0, double step = 1) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<double>(i);
  return v;
}

// Pairwise distinct values 0.01 apart in random order: a finite-difference step of 1e-6 never changes an argmax.
std::vector<double> distinct_vec(size_t n, uint32_t seed) {
  std::vector<double> v = iota_vec(n, -0.01 * static_cast<double>(n) / 2, 0.01);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}

size_t in_size(const Pool2dGeom& g) { return static_cast<size_t>(g.n * g.h * g.w * g.c); }
size_t out_size(const Pool2dGeom& g) { return static_cast<size_t>(g.n * g.p * g.q * g.c); }

// Geometries the gradient checks cover: non-overlapping, ResNet's stem (overlap + padding), stride 1 with padding,
// stride > kernel (uncovered inputs), and a non-square kernel.
std::vector<Pool2dGeom> grad_geoms() {
  return {make_geom(2, 4, 6, 3, 2, 2, 2, 2),    make_geom(2, 7, 6, 3, 3, 3, 2, 2, 1, 1),
          make_geom(1, 5, 5, 2, 3, 3, 1, 1, 1, 1), make_geom(1, 7, 8, 2, 2, 2, 3, 3),
          make_geom(2, 5, 7, 3, 3, 2, 2, 1, 1, 0)};
}

}  // namespace

TEST_CASE("max and average pooling k2 s2 take each 2x2 block's max and mean", "[ops][pool]") {
  const Pool2dGeom g = make_geom(1, 4, 4, 1, 2, 2, 2, 2);
  CHECK((g.p == 2 && g.q == 2));
  const std::vector<double> x = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};  // (1, 4, 4, 1)
  std::vector<double> y(4);
  maxpool2d_fwd_cpu(g, x.data(), y.data());
  CHECK(y == std::vector<double>{9, 6, 9, 9});
  avgpool2d_fwd_cpu(g, x.data(), y.data());
  CHECK(y == std::vector<double>{4.5, 3.25, 6, 6.25});
}

TEST_CASE("max pooling k3 s2 p1 ignores padding even when every input is negative", "[ops][pool]") {
  const Pool2dGeom g = make_geom(1, 5, 5, 1, 3, 3, 2, 2, 1, 1);
  CHECK((g.p == 3 && g.q == 3));
  const std::vector<double> x = iota_vec(25, 0, -1);  // x[h][w] = -(5h + w): the max is the window's top-left
  std::vector<double> y(9);
  maxpool2d_fwd_cpu(g, x.data(), y.data());
  CHECK(y == std::vector<double>{0, -1, -3, -5, -6, -8, -15, -16, -18});
}

TEST_CASE("average pooling k3 s2 p1 counts the padding (divides by 9 everywhere)", "[ops][pool]") {
  const Pool2dGeom g = make_geom(1, 5, 5, 1, 3, 3, 2, 2, 1, 1);
  const std::vector<double> x = iota_vec(25);  // x[h][w] = 5h + w
  std::vector<double> y(9);
  avgpool2d_fwd_cpu(g, x.data(), y.data());
  const std::vector<double> sums = {12, 27, 24, 63, 108, 81, 72, 117, 84};
  for (size_t i = 0; i < 9; ++i) CHECK(y[i] == Approx(sums[i] / 9).epsilon(1e-15));
}

TEST_CASE("pooling with stride larger than the kernel and a non-square kernel picks the right windows",
          "[ops][pool]") {
  const std::vector<double> x = iota_vec(25);  // (1, 5, 5, 1): max of a window is its bottom-right element
  std::vector<double> y(4);
  const Pool2dGeom skip = make_geom(1, 5, 5, 1, 2, 2, 3, 3);
  CHECK((skip.p == 2 && skip.q == 2));
  maxpool2d_fwd_cpu(skip, x.data(), y.data());
  CHECK(y == std::vector<double>{6, 9, 21, 24});
  const Pool2dGeom rect = make_geom(1, 3, 5, 1, 2, 3, 1, 2);  // (1, 3, 5, 1) -> (1, 2, 2, 1)
  CHECK((rect.p == 2 && rect.q == 2));
  maxpool2d_fwd_cpu(rect, x.data(), y.data());
  CHECK(y == std::vector<double>{7, 9, 12, 14});
}

TEST_CASE("pooling treats NHWC channels and batch entries independently", "[ops][pool]") {
  const std::vector<double> plane = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
  const Pool2dGeom g = make_geom(2, 4, 4, 2, 2, 2, 2, 2);
  std::vector<double> x(in_size(g));  // (2, 4, 4, 2): channel 1 = -channel 0; batch 1 = batch 0 + 100
  for (int64_t n = 0; n < 2; ++n)
    for (size_t i = 0; i < 16; ++i) {
      x[(n * 16 + i) * 2 + 0] = plane[i] + 100.0 * n;
      x[(n * 16 + i) * 2 + 1] = -(plane[i] + 100.0 * n);
    }
  std::vector<double> y(out_size(g));
  maxpool2d_fwd_cpu(g, x.data(), y.data());
  CHECK(y == std::vector<double>{9, -1, 6, -1, 9, -3, 9, -3, 109, -101, 106, -101, 109, -103, 109, -103});
}

TEST_CASE("global average pooling is the mean over HW per (n, c)", "[ops][pool]") {
  const std::vector<double> x = {1, 10, 2, 20, 3, 30, 6, 60,    // n = 0: (HW = 4, C = 2)
                                 -1, 0, -2, 0, -3, 0, -2, 4};   // n = 1
  std::vector<double> y(4), dx(16);
  global_avgpool_fwd_cpu(x.data(), y.data(), 2, 4, 2);
  CHECK(y == std::vector<double>{3, 30, -2, 1});
  const std::vector<double> dy = {4, 8, -4, 2};
  global_avgpool_grad_cpu(dy.data(), dx.data(), 2, 4, 2);
  for (int64_t i = 0; i < 4; ++i) {
    CHECK((dx[i * 2] == 1 && dx[i * 2 + 1] == 2));
    CHECK((dx[8 + i * 2] == -1 && dx[8 + i * 2 + 1] == 0.5));
  }
}

TEST_CASE("max pooling backward matches float64 finite differences", "[ops][pool][gradcheck]") {
  uint32_t seed = 1;
  for (const Pool2dGeom& g : grad_geoms()) {
    INFO("kh " << g.kh << " kw " << g.kw << " sh " << g.sh << " sw " << g.sw << " ph " << g.ph << " pw " << g.pw);
    std::vector<double> x = distinct_vec(in_size(g), seed++);  // (N, H, W, C)
    const std::vector<double> dy = random_vec(out_size(g), seed++);  // (N, P, Q, C)
    auto loss = [&] {
      std::vector<double> y(out_size(g));
      maxpool2d_fwd_cpu(g, x.data(), y.data());
      return dot(y, dy);
    };
    std::vector<double> dx(in_size(g), 123.0);  // overwritten, not accumulated
    maxpool2d_grad_cpu(g, dy.data(), x.data(), dx.data());
    const Diff d = diff(dx, numeric_grad(loss, x));
    INFO(d.str());
    CHECK(d.rel < 1e-7);
  }
}

TEST_CASE("average pooling backward matches float64 finite differences", "[ops][pool][gradcheck]") {
  uint32_t seed = 100;
  for (const Pool2dGeom& g : grad_geoms()) {
    INFO("kh " << g.kh << " kw " << g.kw << " sh " << g.sh << " sw " << g.sw << " ph " << g.ph << " pw " << g.pw);
    std::vector<double> x = random_vec(in_size(g), seed++);
    const std::vector<double> dy = random_vec(out_size(g), seed++);
    auto loss = [&] {
      std::vector<double> y(out_size(g));
      avgpool2d_fwd_cpu(g, x.data(), y.data());
      return dot(y, dy);
    };
    std::vector<double> dx(in_size(g), 123.0);
    avgpool2d_grad_cpu(g, dy.data(), dx.data());
    const Diff d = diff(dx, numeric_grad(loss, x));
    INFO(d.str());
    CHECK(d.rel < 1e-7);
  }
}

TEST_CASE("global average pooling backward matches float64 finite differences", "[ops][pool][gradcheck]") {
  const int64_t n = 3, hw = 5, c = 4;
  std::vector<double> x = random_vec(n * hw * c, 7);  // (N, HW, C)
  const std::vector<double> dy = random_vec(n * c, 8);  // (N, C)
  auto loss = [&] {
    std::vector<double> y(n * c);
    global_avgpool_fwd_cpu(x.data(), y.data(), n, hw, c);
    return dot(y, dy);
  };
  std::vector<double> dx(n * hw * c);
  global_avgpool_grad_cpu(dy.data(), dx.data(), n, hw, c);
  const Diff d = diff(dx, numeric_grad(loss, x));
  INFO(d.str());
  CHECK(d.rel < 1e-7);
}

TEST_CASE("max pooling backward gives a tied window's gradient to its first maximal element", "[ops][pool]") {
  // (1, 2, 4, 1) all equal, k2 s2: each window's first element in row-major scan order.
  const Pool2dGeom g = make_geom(1, 2, 4, 1, 2, 2, 2, 2);
  const std::vector<double> x(8, 1.0), dy = {5, 7};
  std::vector<double> dx(8);
  maxpool2d_grad_cpu(g, dy.data(), x.data(), dx.data());
  CHECK(dx == std::vector<double>{5, 0, 7, 0, 0, 0, 0, 0});
  // Overlapping windows over {5, 5, 5} with k (1, 2) s 1: window 0 -> x0, window 1 -> x1.
  const Pool2dGeom o = make_geom(1, 1, 3, 1, 1, 2, 1, 1);
  const std::vector<double> xo(3, 5.0), dyo = {2, 3};
  std::vector<double> dxo(3);
  maxpool2d_grad_cpu(o, dyo.data(), xo.data(), dxo.data());
  CHECK(dxo == std::vector<double>{2, 3, 0});
  // Overlapping windows with one shared maximum add up: {0, 9, 0}, k (1, 2) s 1 -> both windows pick x1.
  const std::vector<double> xs = {0, 9, 0};
  maxpool2d_grad_cpu(o, dyo.data(), xs.data(), dxo.data());
  CHECK(dxo == std::vector<double>{0, 5, 0});
}

TEST_CASE("max pooling over an all -inf padded window gives the first real element the gradient", "[ops][pool]") {
  const Pool2dGeom g = make_geom(1, 3, 3, 1, 3, 3, 2, 2, 1, 1);  // (1, 3, 3, 1) -> (1, 2, 2, 1)
  const std::vector<double> x(9, -std::numeric_limits<double>::infinity()), dy = {1, 2, 3, 4};
  std::vector<double> y(4), dx(9);
  maxpool2d_fwd_cpu(g, x.data(), y.data());
  for (double v : y) CHECK(v == -std::numeric_limits<double>::infinity());
  maxpool2d_grad_cpu(g, dy.data(), x.data(), dx.data());
  // Window starts (clipped): (0,0), (0,1), (1,0), (1,1).
  CHECK(dx == std::vector<double>{1, 2, 0, 3, 4, 0, 0, 0, 0});
}

TEST_CASE("max pooling propagates NaN and sends its gradient to the last NaN, as PyTorch does", "[ops][pool]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Pool2dGeom g = make_geom(1, 1, 6, 1, 1, 3, 1, 3);  // two windows of 3
  const std::vector<double> x = {1, nan, 3, nan, 5, nan}, dy = {2, 4};
  std::vector<double> y(2), dx(6);
  maxpool2d_fwd_cpu(g, x.data(), y.data());
  CHECK((std::isnan(y[0]) && std::isnan(y[1])));
  maxpool2d_grad_cpu(g, dy.data(), x.data(), dx.data());
  CHECK(dx == std::vector<double>{0, 2, 0, 0, 0, 4});
}

TEST_CASE("pool geometry computes VGG and ResNet output sizes and rejects invalid windows", "[ops][pool]") {
  Pool2dGeom g;
  g.n = 4, g.h = 224, g.w = 224, g.c = 64, g.kh = g.kw = 2, g.sh = g.sw = 2;
  REQUIRE(pool2d_geom_finish(g));
  CHECK((g.p == 112 && g.q == 112));
  g.h = g.w = 112, g.kh = g.kw = 3, g.ph = g.pw = 1;
  REQUIRE(pool2d_geom_finish(g));
  CHECK((g.p == 56 && g.q == 56));
  g.ph = 2;  // padding over half the kernel
  CHECK_FALSE(pool2d_geom_finish(g));
  CHECK((g.p == 0 && g.q == 0));

  auto rejects = [](Pool2dGeom b) {
    b.p = b.q = 7;  // stale values must be cleared
    const bool ok = pool2d_geom_finish(b);
    return !ok && b.p == 0 && b.q == 0;
  };
  Pool2dGeom base;
  base.n = 1, base.h = 4, base.w = 4, base.c = 1, base.kh = base.kw = 2, base.sh = base.sw = 2;
  REQUIRE(pool2d_geom_finish(base));
  Pool2dGeom b = base;
  b.kh = 2, b.ph = 2;
  CHECK(rejects(b));  // padding 2 > kernel 2 / 2
  b = base, b.h = 2, b.kh = 3;
  CHECK(rejects(b));  // window larger than the input: empty output
  b = base, b.sw = 0;
  CHECK(rejects(b));
  b = base, b.kw = 0;
  CHECK(rejects(b));
  b = base, b.pw = -1;
  CHECK(rejects(b));
  b = base, b.n = 0;
  CHECK(rejects(b));
  b = base, b.c = 0;
  CHECK(rejects(b));
  b = base, b.kh = 2, b.ph = 1;  // padding exactly half the kernel is allowed: (4 + 2 - 2) / 2 + 1 = 3
  REQUIRE(pool2d_geom_finish(b));
  CHECK(b.p == 3);
}

TEST_CASE("max-pool argmax offsets route each window's gradient exactly as maxpool2d_grad_cpu does", "[ops][pool]") {
  Pool2dGeom g;
  g.n = 2, g.h = 9, g.w = 8, g.c = 3, g.kh = 3, g.kw = 3, g.sh = 2, g.sw = 2, g.ph = 1, g.pw = 1;
  REQUIRE(pool2d_geom_finish(g));
  const int64_t nin = g.n * g.h * g.w * g.c, nout = g.n * g.p * g.q * g.c;
  std::vector<double> x = random_vec(static_cast<size_t>(nin), 31), dy = random_vec(static_cast<size_t>(nout), 32);
  for (int64_t i = 0; i < nin; i += 5) x[static_cast<size_t>(i)] = 0.0;  // ties (ReLU zeros) in overlapping windows
  std::vector<uint8_t> idx(static_cast<size_t>(nout));
  maxpool2d_argmax_cpu(g, x.data(), idx.data());
  // Scatter dy through the offsets in (p, q) order: the reference's result, bit for bit.
  std::vector<double> via_idx(static_cast<size_t>(nin), 0.0), ref(static_cast<size_t>(nin));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t p = 0; p < g.p; ++p)
      for (int64_t q = 0; q < g.q; ++q)
        for (int64_t c = 0; c < g.c; ++c) {
          const int64_t o = ((n * g.p + p) * g.q + q) * g.c + c, k = idx[static_cast<size_t>(o)];
          const int64_t ih = p * g.sh - g.ph + k / g.kw, iw = q * g.sw - g.pw + k % g.kw;
          REQUIRE(ih >= 0);
          REQUIRE(iw >= 0);
          REQUIRE(ih < g.h);
          REQUIRE(iw < g.w);
          via_idx[static_cast<size_t>(((n * g.h + ih) * g.w + iw) * g.c + c)] += dy[static_cast<size_t>(o)];
        }
  maxpool2d_grad_cpu(g, dy.data(), x.data(), ref.data());
  CHECK(via_idx == ref);
}
