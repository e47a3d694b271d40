// The few-input-channel tensor-core conv's rule and tiling on the CPU (fewc.h): which geometries fewc_conv_eligible
// and fewc_wgrad_eligible accept (the RGB stems, C = 1..4, K = 16/32/64) and refuse (groups, dilation, C, K, R,
// stride, shared memory); the tiling numbers of the ResNet-50 stem and VGG's first conv; and a float64 model of the
// kernel's addressing (the filter as B in fewc.h's reduction order, each task's input patch, the A operands read
// from it) that equals the direct conv, forward and weight gradient, and never reads outside the patch; the weight
// gradient kernel's walks by additions (copies, prologue words, tiles) in integers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/fewc.h"
#include "tests/support/conv_geom.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using trctl::testing::conv_geom;

namespace {

const Conv2dGeom kResnetStem = conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3);  // 224x224x3 -> 112x112x64
const Conv2dGeom kVggConv0 = conv_geom(2, 224, 224, 3, 64, 3, 3, 1, 1, 1, 1);    // 224x224x3 -> 224x224x64
// Weight-gradient geometries for the addressing and walk models: the two stems, TP 2 with odd P and Q, SG 2, the
// largest filters, a 1x1 (more tile groups than row tiles), one row tile (MT 1), stride 2.
const std::pair<const char*, Conv2dGeom> kWgradCases[] = {
    {"VGG conv0 3x3/1", kVggConv0},
    {"ResNet stem 7x7/2", kResnetStem},
    {"3x3/1 37x45 (TP 2, odd P and Q)", conv_geom(2, 37, 45, 3, 64, 3, 3, 1, 1, 1, 1)},
    {"5x5/1 C=1 29x130 (SG 2)", conv_geom(1, 29, 130, 1, 64, 5, 5, 1, 1, 2, 2)},
    {"7x7/1 C=4 20x33", conv_geom(1, 20, 33, 4, 64, 7, 7, 1, 1, 3, 3)},
    {"8x8/1 C=2 19x21", conv_geom(1, 19, 21, 2, 64, 8, 8, 1, 1, 3, 3)},
    {"1x1/1 C=2 9x17 (tgroups > MT)", conv_geom(1, 9, 17, 2, 64, 1, 1, 1, 1, 0, 0)},
    {"3x3/1 C=3 9x12 (MT 1)", conv_geom(2, 9, 12, 3, 64, 3, 3, 1, 1, 1, 1)},
    {"3x3/2 C=4 33x20", conv_geom(1, 33, 20, 4, 64, 3, 3, 2, 2, 1, 1)}};

// The kernel's view of one conv in float64: per task (n, TP output rows from p0) the input patch (patch_rows,
// patch_cols, 4), zero outside the image and for c >= C, and for every output pixel of the task's TP x 16 MT tiles
// (those past P or Q included: the kernel computes them and drops them on the store) the reduction over
// kk = ((r SG + sg) 4 + s4) 4 + c4 of A (read from the patch; taps s >= S read as 0, like the kernel) times
// B = w[k, r, sg 4 + s4, c4] (0 for s >= S or c4 >= C). y (N, P, Q, K) and, from dy (N, P, Q, K), the weight
// gradient dw (K, R, S, C) = sum over pixels of dy * A, mapped back from kk. *outside counts patch reads past the
// patch's rows or columns (the kernel's shared-memory patch would be overrun).
struct ModelOut {
  std::vector<double> y, dw;
  int64_t outside = 0;
};
ModelOut fewc_model(const Conv2dGeom& g, const FewcTiling& t, const std::vector<double>& x,
                    const std::vector<double>& w, const std::vector<double>& dy) {
  ModelOut o;
  o.y.assign(static_cast<size_t>(g.n * g.p * g.q * g.k), 0.0);
  const int64_t kred = 16 * t.ksteps;
  std::vector<double> b(static_cast<size_t>(g.k * kred), 0.0), dwx(static_cast<size_t>(g.k * kred), 0.0);
  for (int64_t k = 0; k < g.k; ++k)
    for (int64_t kk = 0; kk < kred; ++kk) {
      const int64_t ks = kk / 16, s4 = (kk / 4) % 4, c4 = kk % 4, r = ks / t.sg, s = (ks % t.sg) * 4 + s4;
      if (s < g.s && c4 < g.c) b[k * kred + kk] = w[((k * g.r + r) * g.s + s) * g.c + c4];
    }
  std::vector<double> patch(static_cast<size_t>(t.patch_rows * t.patch_cols * 4));
  std::vector<double> a(static_cast<size_t>(kred));
  const int64_t row_tasks = (g.p + t.tp - 1) / t.tp;
  CHECK(t.tasks == g.n * row_tasks);
  for (int64_t task = 0; task < t.tasks; ++task) {
    const int64_t n = task / row_tasks, p0 = (task % row_tasks) * t.tp;
    for (int64_t pr = 0; pr < t.patch_rows; ++pr)
      for (int64_t pc = 0; pc < t.patch_cols; ++pc)
        for (int64_t c4 = 0; c4 < 4; ++c4) {
          const int64_t ih = p0 * g.stride_h - g.pad_h + pr, iw = pc - g.pad_w;
          const bool in = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w && c4 < g.c;
          patch[(pr * t.patch_cols + pc) * 4 + c4] = in ? x[((n * g.h + ih) * g.w + iw) * g.c + c4] : 0.0;
        }
    for (int64_t pl = 0; pl < t.tp; ++pl)
      for (int64_t q = 0; q < 16 * t.mt; ++q) {
        for (int64_t kk = 0; kk < kred; ++kk) {
          const int64_t ks = kk / 16, s4 = (kk / 4) % 4, c4 = kk % 4, r = ks / t.sg, s0 = (ks % t.sg) * 4;
          a[kk] = 0.0;
          if (s0 + s4 >= g.s) continue;
          const int64_t row = pl * g.stride_h + r, col = q * g.stride_w + s0 + s4;
          if (row >= t.patch_rows || col >= t.patch_cols) {
            ++o.outside;
            continue;
          }
          a[kk] = patch[(row * t.patch_cols + col) * 4 + c4];
        }
        const int64_t p = p0 + pl;
        if (p >= g.p || q >= g.q) continue;
        for (int64_t k = 0; k < g.k; ++k) {
          double acc = 0.0;
          for (int64_t kk = 0; kk < kred; ++kk) acc += a[kk] * b[k * kred + kk];
          o.y[((n * g.p + p) * g.q + q) * g.k + k] = acc;
          const double d = dy[((n * g.p + p) * g.q + q) * g.k + k];
          for (int64_t kk = 0; kk < kred; ++kk) dwx[k * kred + kk] += d * a[kk];
        }
      }
  }
  o.dw.assign(static_cast<size_t>(g.k * g.r * g.s * g.c), 0.0);
  for (int64_t k = 0; k < g.k; ++k)
    for (int64_t kk = 0; kk < kred; ++kk) {
      const int64_t ks = kk / 16, s4 = (kk / 4) % 4, c4 = kk % 4, r = ks / t.sg, s = (ks % t.sg) * 4 + s4;
      if (s < g.s && c4 < g.c) o.dw[((k * g.r + r) * g.s + s) * g.c + c4] = dwx[k * kred + kk];
    }
  return o;
}

}  // namespace

TEST_CASE("fewc rule accepts the RGB stems and C = 1..4 convs with K = 16, 32 or 64", "[fewc][conv2d]") {
  CHECK(fewc_conv_eligible(kResnetStem));
  CHECK(fewc_conv_eligible(kVggConv0));
  for (int64_t c : {1, 2, 3, 4})
    for (int64_t k : {16, 32, 64}) {
      INFO("C=" << c << " K=" << k);
      CHECK(fewc_conv_eligible(conv_geom(2, 32, 32, c, k, 3, 3, 1, 1, 1, 1)));
      CHECK(fewc_conv_eligible(conv_geom(2, 32, 32, c, k, 7, 7, 2, 2, 3, 3)));
      CHECK(fewc_conv_eligible(conv_geom(3, 37, 37, c, k, 5, 5, 1, 1, 2, 2)));
    }
  CHECK(fewc_conv_eligible(conv_geom(1, 9, 9, 3, 16, 1, 1, 1, 1, 0, 0)));    // 1x1
  CHECK(fewc_conv_eligible(conv_geom(1, 40, 40, 3, 16, 8, 8, 2, 2, 3, 3)));  // R = S = 8
  CHECK(fewc_conv_eligible(conv_geom(1, 40, 30, 2, 32, 5, 3, 2, 2, 2, 1)));  // R != S, H != W
}

TEST_CASE("fewc rule refuses groups, dilation, C > 4, other K, R or S > 8, other strides and an unfinished geometry",
          "[fewc][conv2d]") {
  Conv2dGeom grouped = conv_geom(2, 32, 32, 4, 16, 3, 3, 1, 1, 1, 1);
  grouped.groups = 2;
  CHECK_FALSE(fewc_conv_eligible(grouped));
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 64, 3, 3, 1, 1, 2, 2, 2, 2)));  // dilation 2
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 64, 3, 3, 1, 1, 2, 2, 2, 1)));  // dilation 2x1
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 5, 64, 3, 3, 1, 1, 1, 1)));        // C = 5
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 8, 64, 3, 3, 1, 1, 1, 1)));        // C = 8
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 48, 3, 3, 1, 1, 1, 1)));        // K = 48
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 128, 3, 3, 1, 1, 1, 1)));       // K = 128
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 8, 3, 3, 1, 1, 1, 1)));         // K = 8
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 64, 9, 9, 1, 1, 4, 4)));        // R = S = 9
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 64, 9, 3, 1, 1, 4, 1)));        // R = 9
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 64, 3, 9, 1, 1, 1, 4)));        // S = 9
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 64, 3, 3, 3, 3, 1, 1)));        // stride 3
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 64, 3, 3, 2, 1, 1, 1)));        // stride 2x1
  CHECK_FALSE(fewc_conv_eligible(conv_geom(2, 32, 32, 3, 64, 3, 3, 1, 2, 1, 1)));        // stride 1x2
  Conv2dGeom unfinished = kResnetStem;
  unfinished.p = unfinished.q = 0;
  CHECK_FALSE(fewc_conv_eligible(unfinished));
}

TEST_CASE("fewc rule refuses a conv whose shared memory exceeds kFewcMaxSmemBytes", "[fewc][conv2d]") {
  // 8x8/2 over a 1024-wide image: Q = 512, 32 row tiles, one output row per task, a 8 x 1030 patch.
  const Conv2dGeom k64 = conv_geom(1, 16, 1024, 3, 64, 8, 8, 2, 2, 3, 3);
  const Conv2dGeom k16 = conv_geom(1, 16, 1024, 3, 16, 8, 8, 2, 2, 3, 3);
  const FewcTiling t64 = fewc_conv_tiling(k64), t16 = fewc_conv_tiling(k16);
  CHECK(t64.patch_cols == 1030);
  CHECK(t64.warps == 8);
  CHECK(t64.raw_elems == 0);
  CHECK(t64.smem_bytes == 2 * (64 * 264 + 8 * 1030 * 4 + 8 * 2 * 16 * 72));
  CHECK(t64.smem_bytes > kFewcMaxSmemBytes);
  CHECK_FALSE(fewc_conv_eligible(k64));
  CHECK(t16.raw_elems == 0);  // the 8 x 3072 raw rows (48 KiB) would not fit: each task loads its patch
  CHECK(t16.smem_bytes == 2 * (16 * 264 + 8 * 1030 * 4 + 8 * 2 * 16 * 24));
  CHECK(t16.smem_bytes <= kFewcMaxSmemBytes);
  CHECK(fewc_conv_eligible(k16));
}

TEST_CASE("fewc tiling of the ResNet-50 stem: 14 reduction steps, 7 row tiles, 2 output rows per task, 7 warps",
          "[fewc][conv2d]") {
  const FewcTiling t = fewc_conv_tiling(kResnetStem);
  CHECK(t.sg == 2);
  CHECK(t.ksteps == 14);
  CHECK(t.mt == 7);
  CHECK(t.tp == 2);
  CHECK(t.tasks == 2 * 56);
  CHECK(t.patch_rows == 9);   // (TP - 1) * 2 + 7
  CHECK(t.patch_cols == 230);  // (16 * 7 - 1) * 2 + 4 * 2
  CHECK(t.w_stride == 232);   // 16 * 14 + 8
  CHECK(t.warps == 7);
  CHECK(t.raw_elems == 9 * 224 * 3);  // the next task's input rows, pipelined
  CHECK(t.smem_bytes == 2 * (64 * 232 + 9 * 230 * 4 + 7 * 2 * 16 * 72 + 9 * 224 * 3));
  CHECK(t.smem_bytes <= kFewcMaxSmemBytes);
}

TEST_CASE("fewc tiling of VGG's 3x3/1 first conv at 224x224: 3 reduction steps, 14 row tiles, 1 output row per task",
          "[fewc][conv2d]") {
  const FewcTiling t = fewc_conv_tiling(kVggConv0);
  CHECK(t.sg == 1);
  CHECK(t.ksteps == 3);
  CHECK(t.mt == 14);
  CHECK(t.tp == 1);
  CHECK(t.tasks == 2 * 224);
  CHECK(t.patch_rows == 3);
  CHECK(t.patch_cols == 227);  // (16 * 14 - 1) * 1 + 4
  CHECK(t.w_stride == 56);
  CHECK(t.warps == 7);
  CHECK(t.raw_elems == 3 * 224 * 3);
  CHECK(t.smem_bytes == 2 * (64 * 56 + (3 * 227 * 4 + 7) / 8 * 8 + 7 * 2 * 16 * 72 + 3 * 224 * 3));
  CHECK(t.smem_bytes <= kFewcMaxSmemBytes);
}

TEST_CASE("fewc weight-gradient rule: the forward's and K = 64; its tiling for the ResNet-50 stem and VGG's conv0",
          "[fewc][conv2d]") {
  CHECK(fewc_wgrad_eligible(kResnetStem));
  CHECK(fewc_wgrad_eligible(kVggConv0));                                               // stride 1
  CHECK_FALSE(fewc_wgrad_eligible(conv_geom(2, 224, 224, 3, 32, 7, 7, 2, 2, 3, 3)));  // K = 32
  CHECK_FALSE(fewc_wgrad_eligible(conv_geom(2, 224, 224, 5, 64, 7, 7, 2, 2, 3, 3)));  // C = 5: not the forward's
  // Forward-eligible, but 1024 output columns of staged dy (two buffers of 1024 x 72 elements) exceed the cap.
  const Conv2dGeom wide = conv_geom(1, 8, 1024, 4, 64, 3, 3, 1, 1, 1, 1);
  CHECK(fewc_conv_eligible(wide));
  CHECK_FALSE(fewc_wgrad_eligible(wide));
  const FewcWgradTiling w = fewc_wgrad_tiling(kResnetStem);
  const FewcTiling f = fewc_conv_tiling(kResnetStem);
  CHECK((w.t.tasks == f.tasks && w.t.mt == f.mt && w.t.tp == f.tp && w.t.patch_rows == f.patch_rows &&
         w.t.patch_cols == f.patch_cols));  // 230: even already
  CHECK(w.dy_stride == 72);
  CHECK(w.warps == 7);  // reduction steps 2w, 2w + 1 each
  CHECK((w.kwarps == 7 && w.tgroups == 1));
  CHECK((w.patches == 1 && w.odd_pad == 0));
  CHECK(w.t.raw_elems == 9 * 224 * 3);
  CHECK(w.smem_bytes == 2 * (9 * 230 * 4 + 2 * 2 * 7 * 16 * 72 + 9 * 224 * 3 + 8));  // two dy buffers
  CHECK(w.smem_bytes <= kFewcMaxSmemBytes);
  // VGG's conv0: 3 steps on 2 warps per tile group, 4 groups over one output row of 14 tiles per task, the patch
  // (3 x 228: 227 columns padded to an even pitch) twice (stride 1: the copy shifted by one column).
  const FewcWgradTiling v = fewc_wgrad_tiling(kVggConv0);
  CHECK((v.kwarps == 2 && v.tgroups == 4 && v.warps == 8));
  CHECK(v.patches == 2);
  CHECK((v.t.tp == 1 && v.t.mt == 14 && v.t.patch_rows == 3 && v.t.patch_cols == 228));
  CHECK(v.t.raw_elems == 3 * 224 * 3);
  // The copy starts 64 bytes past a 128-byte multiple: the patch is 2736 elements = 5472 B = 42 * 128 + 96, so 48
  // pad elements (96 B) put it at 5568 B = 43 * 128 + 64.
  CHECK(v.odd_pad == 48);
  CHECK((2 * (3 * 228 * 4 + v.odd_pad)) % 128 == 64);
  CHECK(v.smem_bytes == 2 * (2 * 3 * 228 * 4 + 48 + 2 * 14 * 16 * 72 + 3 * 224 * 3 + 8));
  CHECK(v.smem_bytes <= kFewcMaxSmemBytes);
  CHECK(v.smem_bytes >= 4 * 3 * 64 * 48);  // three groups' sums at the end
  // With the batch-norm prologue: one staging buffer of x (224 pixels x 64, unpadded) and the (5, K) f32 constants
  // on top: still two CTAs per SM.
  CHECK(v.bn_smem_bytes == v.smem_bytes + 2 * 224 * 64 + 5 * 64 * 4);
  CHECK(v.bn_smem_bytes == 109552);
  CHECK(v.bn_smem_bytes <= kFewcMaxSmemBytes);
  // A 1x1 conv: one step, up to 8 groups of one warp, but no more groups than the task's 2 x 2 tiles; rows of
  // 17 x 2 elements are not pipelined (no raw rows); 2 x 36 patch columns.
  const FewcWgradTiling o = fewc_wgrad_tiling(conv_geom(2, 9, 17, 2, 64, 1, 1, 1, 1, 0, 0));
  CHECK((o.kwarps == 1 && o.t.tp == 2 && o.t.mt == 2 && o.tgroups == 4 && o.warps == 4));
  CHECK(o.t.raw_elems == 0);
  CHECK(o.odd_pad == 0);  // the patch is 576 B = 4 * 128 + 64: the copy is aligned so already
  CHECK(o.smem_bytes == 2 * (2 * 2 * 36 * 4 + o.odd_pad + 2 * 2 * 2 * 16 * 72 + 8));
  CHECK(o.smem_bytes >= 4 * 3 * 64 * 16);
}

TEST_CASE("fewc weight gradient's B rows: 16-byte aligned, inside their buffer, the patch's two columns of a pixel",
          "[fewc][conv2d]") {
  // fewc_wgrad.cu's addressing in integers: the patch (rows, patch_cols, 4) holds its element index + 1 (the
  // rounding to 8 elements 0); stride 1 adds odd[i] = patch[i + 4] for every pixel but the last (-1 there). For each
  // output row pl < TP, pixel q < Q (a lane's pixels keep one parity), reduction step ks = (r, sg) and half h
  // (s0 = sg * 4 + 2 h) the lane reads 8 elements at src + base + boff with base = (pl stride cols + q stride) * 4,
  // boff = (r cols + s0) * 4 and src = odd - 4 for odd q at stride 1, else the patch.
  for (const auto& [name, g] : kWgradCases) {
    INFO(name << ": " << conv2d_geom_str(g));
    REQUIRE(fewc_wgrad_eligible(g));
    const FewcWgradTiling w = fewc_wgrad_tiling(g);
    const int64_t cols = w.t.patch_cols, px = w.t.patch_rows * cols, elems = (px * 4 + 7) / 8 * 8;
    const int64_t stride = g.stride_w;
    CHECK(cols % 2 == 0);
    CHECK(w.patches == (stride == 1 ? 2 : 1));
    std::vector<int64_t> patch(static_cast<size_t>(elems), 0), odd(static_cast<size_t>(elems), -1);
    for (int64_t e = 0; e < px * 4; ++e) patch[e] = e + 1;
    for (int64_t e = 0; e + 4 < px * 4; ++e) odd[e] = patch[e + 4];
    int64_t reads = 0, bad = 0;
    for (int64_t pl = 0; pl < w.t.tp; ++pl)
      for (int64_t q = 0; q < g.q; ++q)
        for (int64_t ks = 0; ks < w.t.ksteps; ++ks)
          for (int64_t h = 0; h < 2; ++h) {
            const int64_t r = ks / w.t.sg, s0 = (ks % w.t.sg) * 4 + 2 * h;
            const int64_t off = (pl * stride * cols + q * stride) * 4 + (r * cols + s0) * 4;
            const bool shifted = stride == 1 && q % 2 == 1;
            const std::vector<int64_t>& buf = shifted ? odd : patch;
            const int64_t at = shifted ? off - 4 : off;  // the element index within buf
            ++reads;
            if (at % 8 != 0 || at < 0 || at + 8 > elems) {
              ++bad;
              continue;
            }
            const int64_t row = pl * stride + r, col = q * stride + s0;
            if (row >= w.t.patch_rows || col + 1 >= cols) {
              ++bad;
              continue;
            }
            for (int64_t e = 0; e < 8; ++e)
              if (buf[at + e] != patch[(row * cols + col + e / 4) * 4 + e % 4]) ++bad;
          }
    CHECK(reads > 0);
    CHECK(bad == 0);
  }
}

// fewc_wgrad.cu's walks by additions, in integers, for every thread of the planned block (warps x 32) and tasks at
// the start, middle and end of an image (TP 2 with odd P: the last task's second row lies past P):
//   stage_dy: thread t copies piece t % 8 of pixels q = t / 8 + k (blockDim / 8) of each output row pl, source and
//     destination advanced by their steps; a copy while q < Q and the row is inside P, then zero fills up to 16 MT;
//   bn_dx_words: thread t's word t % 32 (two channels) of pixels q = t / 32 + k (blockDim / 32) of each output row
//     pl, while q < Q and the row is inside P;
//   the MMA loop: warp group tg's tiles tg + k tgroups, (output row, column tile) moved by tgroups with wraps, the A
//     address stepped by tgroups tiles.
// Each (row, pixel, piece) of a task is covered exactly once, at the offsets the per-piece formulas give.
TEST_CASE("fewc weight gradient's copies, prologue words and tiles walked by additions cover each piece once",
          "[fewc][conv2d]") {
  constexpr int64_t K = 64;
  for (const auto& [name, g] : kWgradCases) {
    INFO(name << ": " << conv2d_geom_str(g));
    REQUIRE(fewc_wgrad_eligible(g));
    const FewcWgradTiling w = fewc_wgrad_tiling(g);
    const int64_t threads = w.warps * 32, step = threads >> 3, row_px = w.t.mt * 16, tile_px = w.t.tp * row_px;
    const int64_t row_tasks = (g.p + w.t.tp - 1) / w.t.tp, stride = w.dy_stride;
    REQUIRE(threads % 32 == 0);
    REQUIRE(stride % 8 == 0);  // 16-byte staged rows: whole words
    for (int64_t task : {int64_t{0}, row_tasks / 2, row_tasks - 1, g.n * row_tasks - 1}) {
      INFO("task " << task);
      const int64_t n = task / row_tasks, p0 = (task - n * row_tasks) * w.t.tp;
      // stage_dy: counts per (pl, q, piece); copies at the right source and destination, zero fills elsewhere.
      std::vector<int> seen(static_cast<size_t>(tile_px * 8), 0);
      int64_t bad = 0;
      for (int64_t t = 0; t < threads; ++t) {
        const int64_t q0 = t >> 3, ck = t & 7;
        for (int64_t pl = 0; pl < w.t.tp; ++pl) {
          const int64_t q_end = p0 + pl < g.p ? std::min(g.q, row_px) : 0;
          int64_t s = ((n * g.p + p0 + pl) * g.q + q0) * K + ck * 8, d = (pl * row_px + q0) * stride + ck * 8;
          int64_t q = q0;
          for (; q < q_end; q += step, s += step * K, d += step * stride) {
            ++seen[static_cast<size_t>((pl * row_px + q) * 8 + ck)];
            if (s != ((n * g.p + p0 + pl) * g.q + q) * K + ck * 8 || d != (pl * row_px + q) * stride + ck * 8) ++bad;
            if (!(p0 + pl < g.p && q < g.q)) ++bad;  // a copy only of a pixel inside the image
          }
          for (; q < row_px; q += step, d += step * stride) {
            ++seen[static_cast<size_t>((pl * row_px + q) * 8 + ck)];
            if (d != (pl * row_px + q) * stride + ck * 8 || (p0 + pl < g.p && q < g.q)) ++bad;
          }
        }
      }
      CHECK(bad == 0);
      CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<int64_t>(seen.size()));
      // bn_dx_words: exactly the in-range words, once each, at (pixel * dy_stride) / 2 + cw of g and
      // (pixel * K) / 2 + cw of x.
      std::vector<int> words(static_cast<size_t>(tile_px * 32), 0);
      const int64_t wstep = threads >> 5;
      for (int64_t t = 0; t < threads; ++t) {
        const int64_t q0 = t >> 5, cw = t & 31;
        for (int64_t pl = 0; pl < w.t.tp; ++pl) {
          const int64_t q_end = p0 + pl < g.p ? std::min(g.q, row_px) : 0;
          int64_t gp = (pl * row_px + q0) * stride / 2 + cw, xp = (pl * row_px + q0) * K / 2 + cw;
          for (int64_t q = q0; q < q_end; q += wstep, gp += wstep * (stride / 2), xp += wstep * (K / 2)) {
            const int64_t px = pl * row_px + q;
            ++words[static_cast<size_t>(px * 32 + cw)];
            if (gp != px * stride / 2 + cw || xp != px * K / 2 + cw) ++bad;
          }
        }
      }
      int64_t want = 0, wrong = 0;
      for (int64_t px = 0; px < tile_px; ++px) {
        const int64_t pl = px / row_px, q = px % row_px;
        const int in = p0 + pl < g.p && q < g.q ? 1 : 0;
        want += 32 * in;
        for (int64_t cw = 0; cw < 32; ++cw) wrong += words[static_cast<size_t>(px * 32 + cw)] != in ? 1 : 0;
      }
      CHECK(bad == 0);
      CHECK(wrong == 0);
      CHECK(want > 0);
    }
    // The MMA loop's tiles: warp group tg's (row, column tile) and A offset against tile / MT, tile % MT.
    const int64_t tiles = w.t.tp * w.t.mt;
    std::vector<int> tile_seen(static_cast<size_t>(tiles), 0);
    int64_t bad = 0;
    for (int64_t tg = 0; tg < w.tgroups; ++tg) {
      int64_t pl = tg / w.t.mt, qt = tg - pl * w.t.mt, a = tg * 16 * stride * 2;
      for (int64_t tile = tg; tile < tiles; tile += w.tgroups) {
        ++tile_seen[static_cast<size_t>(tile)];
        if (pl != tile / w.t.mt || qt != tile % w.t.mt || a != tile * 16 * stride * 2) ++bad;
        a += w.tgroups * 16 * stride * 2;
        qt += w.tgroups;
        while (qt >= w.t.mt) qt -= w.t.mt, ++pl;
      }
    }
    CHECK(bad == 0);
    CHECK(std::count(tile_seen.begin(), tile_seen.end(), 1) == tiles);
  }
}

TEST_CASE("fewc's reduction order and patches reproduce the direct conv in float64, never reading past the patch",
          "[fewc][conv2d]") {
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"7x7/2 pad 3 C=3 K=16 37x37 (Q=19, P odd)", conv_geom(2, 37, 37, 3, 16, 7, 7, 2, 2, 3, 3)},
      {"3x3/1 pad 1 C=3 K=16 20x18", conv_geom(2, 20, 18, 3, 16, 3, 3, 1, 1, 1, 1)},
      {"3x3/1 pad 1 C=2 K=16 3x150 (Q > 128: TP 1)", conv_geom(1, 3, 150, 2, 16, 3, 3, 1, 1, 1, 1)},
      {"5x5/1 pad 2 C=1 K=16 13x17", conv_geom(2, 13, 17, 1, 16, 5, 5, 1, 1, 2, 2)},
      {"4x4/2 pad 1 C=4 K=32 12x10", conv_geom(2, 12, 10, 4, 32, 4, 4, 2, 2, 1, 1)},
      {"8x8/2 pad 3 C=3 K=16 21x19", conv_geom(1, 21, 19, 3, 16, 8, 8, 2, 2, 3, 3)},
      {"5x3/2 pad 2x1 C=3 K=16 11x10", conv_geom(2, 11, 10, 3, 16, 5, 3, 2, 2, 2, 1)},
      {"1x1/1 C=2 K=16 7x5", conv_geom(2, 7, 5, 2, 16, 1, 1, 1, 1, 0, 0)}};
  uint32_t seed = 700;
  for (const auto& [name, g] : cases) {
    INFO(name << ": " << conv2d_geom_str(g));
    REQUIRE(fewc_conv_eligible(g));
    const FewcTiling t = fewc_conv_tiling(g);
    const std::vector<double> x = testing::random_vec(static_cast<size_t>(g.n * g.h * g.w * g.c), ++seed);
    const std::vector<double> w = testing::random_vec(static_cast<size_t>(g.k * g.r * g.s * g.c), ++seed);
    const std::vector<double> dy = testing::random_vec(static_cast<size_t>(g.n * g.p * g.q * g.k), ++seed);
    const ModelOut m = fewc_model(g, t, x, w, dy);
    CHECK(m.outside == 0);
    std::vector<double> y(m.y.size()), dw(m.dw.size());
    conv2d_fwd_cpu<double>(g, x.data(), w.data(), nullptr, y.data(), nullptr);
    conv2d_grad_weight_cpu<double>(g, dy.data(), x.data(), dw.data(), nullptr);
    const testing::Diff dfwd = testing::diff(m.y, y), dwg = testing::diff(m.dw, dw);
    INFO("forward " << dfwd.str() << "; weight gradient " << dwg.str());
    CHECK(dfwd.rel < 1e-12);
    CHECK(dwg.rel < 1e-12);
  }
}
