// im2col CPU reference (im2col.h): every element against the definition written out directly on odd geometries
// (stride 2, pad 3, dilation 2, C = 1 and 3, non-square inputs and kernels), a row range equal to the same rows
// of the whole matrix, the (r, s, c) column order tied to the KRSC filter (cols * W^T = the conv forward, dY^T *
// cols = the weight gradient of the float64 reference), and the selection rule.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/im2col.h"
#include "tests/support/conv_geom.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using trctl::testing::conv_geom;

namespace {

std::vector<std::pair<const char*, Conv2dGeom>> cases() {
  return {{"7x7 stride 2 pad 3 C=3 (stem)", conv_geom(2, 13, 11, 3, 8, 7, 7, 2, 2, 3, 3)},
          {"3x3 pad 1 C=3 (vgg)", conv_geom(2, 6, 7, 3, 8, 3, 3, 1, 1, 1, 1)},
          {"3x3 dilation 2 pad 3 C=1", conv_geom(3, 9, 8, 1, 8, 3, 3, 1, 1, 3, 3, 2, 2)},
          {"5x3 stride 2x1 pad 2x0 dil 1x2 C=3", conv_geom(2, 10, 9, 3, 16, 5, 3, 2, 1, 2, 0, 1, 2)},
          {"2x4 stride 3x2 pad 0x3 C=5", conv_geom(1, 7, 12, 5, 8, 2, 4, 3, 2, 0, 3)}};
}

// n values uniform in [-1, 1) (tests/support/gradcheck.h's generator).
std::vector<double> draw(int64_t n, uint32_t seed) { return testing::random_vec(static_cast<size_t>(n), seed); }

// The definition, one element at a time.
double cols_at(const Conv2dGeom& g, const std::vector<double>& x, int64_t row, int64_t j) {
  if (j >= g.c * g.r * g.s) return 0.0;
  const int64_t r = j / (g.s * g.c), s = j / g.c % g.s, c = j % g.c;
  const int64_t n = row / (g.p * g.q), p = row / g.q % g.p, q = row % g.q;
  const int64_t ih = p * g.stride_h - g.pad_h + r * g.dil_h, iw = q * g.stride_w - g.pad_w + s * g.dil_w;
  if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) return 0.0;
  return x[static_cast<size_t>(((n * g.h + ih) * g.w + iw) * g.c + c)];
}

}  // namespace

TEST_CASE("im2col CPU reference equals the direct definition, padding taps and tail columns zero", "[im2col][conv2d]") {
  uint32_t seed = 10;
  for (const auto& [name, g] : cases()) {
    INFO(name << ": " << conv2d_geom_str(g));
    const int64_t kc = im2col_cols(g), rows = g.n * g.p * g.q;
    CHECK(kc % 8 == 0);
    CHECK(kc >= g.c * g.r * g.s);
    CHECK(kc < g.c * g.r * g.s + 8);
    const std::vector<double> x = draw(g.n * g.h * g.w * g.c, ++seed);
    std::vector<double> cols(static_cast<size_t>(rows * kc), 99.0);
    im2col_cpu<double>(g, x.data(), 0, rows, kc, cols.data());
    int64_t bad = 0, zeros = 0, first = -1;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < kc; ++j) {
        const double want = cols_at(g, x, i, j), got = cols[static_cast<size_t>(i * kc + j)];
        if (got != want && bad++ == 0) first = i * kc + j;
        zeros += want == 0.0;
      }
    INFO("differences " << bad << ", first at row " << first / kc << " col " << first % kc);
    CHECK(bad == 0);
    CHECK(zeros > 0);  // every case has padding taps or tail columns
    // A wider row stride leaves the extra columns zero too.
    std::vector<double> wide(static_cast<size_t>(rows * (kc + 8)), 99.0);
    im2col_cpu<double>(g, x.data(), 0, rows, kc + 8, wide.data());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = kc; j < kc + 8; ++j) CHECK(wide[static_cast<size_t>(i * (kc + 8) + j)] == 0.0);
  }
}

TEST_CASE("im2col CPU reference of a row range equals those rows of the whole matrix", "[im2col][conv2d]") {
  const Conv2dGeom g = cases()[0].second;
  const int64_t kc = im2col_cols(g), rows = g.n * g.p * g.q;
  const std::vector<double> x = draw(g.n * g.h * g.w * g.c, 77);
  std::vector<double> all(static_cast<size_t>(rows * kc));
  im2col_cpu<double>(g, x.data(), 0, rows, kc, all.data());
  for (int64_t row0 : {int64_t{0}, int64_t{5}, rows / 2 + 1, rows - 3}) {
    const int64_t cnt = std::min<int64_t>(17, rows - row0);
    std::vector<double> part(static_cast<size_t>(cnt * kc));
    im2col_cpu<double>(g, x.data(), row0, cnt, kc, part.data());
    CHECK(std::equal(part.begin(), part.end(), all.begin() + row0 * kc));
  }
}

TEST_CASE("im2col columns follow the KRSC filter: cols * W^T is the forward, dY^T * cols the weight gradient",
          "[im2col][conv2d]") {
  uint32_t seed = 500;
  for (const auto& [name, g] : cases()) {
    INFO(name << ": " << conv2d_geom_str(g));
    const int64_t kc = im2col_cols(g), rows = g.n * g.p * g.q, crs = g.c * g.r * g.s;
    const std::vector<double> x = draw(g.n * g.h * g.w * g.c, ++seed), w = draw(g.k * crs, ++seed),
                              dy = draw(rows * g.k, ++seed);
    std::vector<double> cols(static_cast<size_t>(rows * kc));
    im2col_cpu<double>(g, x.data(), 0, rows, kc, cols.data());
    std::vector<double> y_ref(static_cast<size_t>(rows * g.k)), dw_ref(static_cast<size_t>(g.k * crs));
    conv2d_fwd_cpu<double>(g, x.data(), w.data(), nullptr, y_ref.data(), nullptr);
    conv2d_grad_weight_cpu<double>(g, dy.data(), x.data(), dw_ref.data(), nullptr);
    double err_y = 0, err_w = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < g.k; ++k) {
        double acc = 0;
        for (int64_t j = 0; j < crs; ++j)
          acc += cols[static_cast<size_t>(i * kc + j)] * w[static_cast<size_t>(k * crs + j)];
        err_y = std::max(err_y, std::abs(acc - y_ref[static_cast<size_t>(i * g.k + k)]));
      }
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t j = 0; j < kc; ++j) {
        double acc = 0;
        for (int64_t i = 0; i < rows; ++i)
          acc += dy[static_cast<size_t>(i * g.k + k)] * cols[static_cast<size_t>(i * kc + j)];
        if (j < crs) err_w = std::max(err_w, std::abs(acc - dw_ref[static_cast<size_t>(k * crs + j)]));
        else CHECK(acc == 0.0);  // the tail columns contribute nothing
      }
    CHECK(err_y < 1e-12);
    CHECK(err_w < 1e-11);
  }
}

TEST_CASE("im2col conv rule: groups 1, C < 8, C*R*S <= 256, K % 8 == 0", "[im2col][conv2d]") {
  CHECK(im2col_conv_eligible(conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)));  // ResNet-50 stem: 147 columns
  CHECK(im2col_cols(conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)) == 152);
  CHECK(im2col_conv_eligible(conv_geom(2, 224, 224, 3, 64, 3, 3, 1, 1, 1, 1)));  // VGG16 features_0: 27 columns
  CHECK(im2col_cols(conv_geom(2, 224, 224, 3, 64, 3, 3, 1, 1, 1, 1)) == 32);
  CHECK(im2col_conv_eligible(conv_geom(2, 28, 28, 1, 32, 5, 5, 1, 1, 2, 2)));    // MNIST-style C = 1
  CHECK_FALSE(im2col_conv_eligible(conv_geom(2, 56, 56, 8, 64, 3, 3, 1, 1, 1, 1)));   // C = 8: cuDNN's tensor cores
  CHECK_FALSE(im2col_conv_eligible(conv_geom(2, 64, 64, 6, 64, 7, 7, 1, 1, 3, 3)));   // 294 columns
  CHECK_FALSE(im2col_conv_eligible(conv_geom(2, 32, 32, 3, 10, 3, 3, 1, 1, 1, 1)));   // K % 8 != 0
  Conv2dGeom grouped = conv_geom(2, 16, 16, 4, 8, 3, 3, 1, 1, 1, 1);
  grouped.groups = 2;
  CHECK_FALSE(im2col_conv_eligible(grouped));
}
