// Few-input-channel convolutions as a hand-written tensor-core implicit GEMM (fewc_cuda.h): the rule that selects
// them and the kernel's tiling, plain C++ (tested on the CPU). cuDNN runs a C = 3 stem far from its roofline (the
// ResNet-50 7x7/2 stem 0.75 ms through space-to-depth, VGG16-BN's 3x3/1 1.57 ms through im2col, against 0.12 and
// 0.43 ms of output traffic at batch 256); this kernel builds its operand tiles in shared memory instead.
//
// The GEMM: y[n,p,q,k] = sum over the reduction index kk = ((r * SG + sg) * 4 + s4) * 4 + c4 of
//   A[(n,p,q), kk] = x[n, p*stride - pad_h + r, q*stride - pad_w + sg*4 + s4, c4]   (0 outside the image, c4 >= C)
//   B[kk, k]       = w[k, r, sg*4 + s4, c4]                                          (0 for s >= S or c4 >= C)
// with SG = ceil(S / 4) groups of 4 filter columns per filter row, so the reduction is R * SG steps of 16 (one
// m16n8k16 MMA step each): ResNet's 7x7 stem 14 steps, a 3x3 conv 3. Accumulation in fp32, one rounding to the io
// type per output (plus the bias in fp32 before it); every output is summed in one fixed order: deterministic.
//
// Tiling: a CTA holds B for all k (K x (16 R SG + 8) elements) and, per task, the input patch of TP output rows:
// ((TP-1) stride + R) rows x ((16 MT - 1) stride + 4 SG) columns x 4 channels, MT = ceil(Q / 16) MMA row tiles
// of 16 output columns per output row. Warps take pairs of row tiles; a task is (n, TP output rows).
#pragma once
#include <cstdint>

#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

// The rule: g finished, groups 1, dilation 1, 1 <= C <= 4, K in {16, 32, 64}, R and S in 1..8, stride 1 or 2
// (the same in both dimensions), and the shared memory of fewc_conv_tiling within kFewcMaxSmemBytes.
bool fewc_conv_eligible(const Conv2dGeom& g);

// The weight gradient's rule: fewc_conv_eligible, K = 64 and the tiling's shared memory within kFewcMaxSmemBytes.
// Its B rows are a pixel's two patch columns q * stride + s0 .. +1 (s0 even), read with ldmatrix as 16 bytes: aligned
// when q * stride is even, so stride 1 keeps a second copy of the patch shifted by one column for the odd pixels.
bool fewc_wgrad_eligible(const Conv2dGeom& g);

constexpr int64_t kFewcMaxSmemBytes = 112 * 1024;  // two CTAs per H100/H200 SM (228 KB)
constexpr int64_t kFewcMaxBnSmemBytes = 227 * 1024;  // the weight gradient with its batch-norm prologue: one CTA

struct FewcTiling {
  int64_t sg = 1;          // ceil(S / 4)
  int64_t ksteps = 1;      // R * SG reduction steps of 16
  int64_t mt = 1;          // row tiles of 16 output columns per output row: ceil(Q / 16)
  int64_t tp = 1;          // output rows per task
  int64_t tasks = 1;       // N * ceil(P / TP)
  int64_t patch_rows = 1, patch_cols = 1;  // the input patch of a task (4 channels per element)
  int64_t w_stride = 24;   // elements per filter row in shared memory: 16 ksteps + 8 (conflict-free ldmatrix)
  int64_t warps = 1;       // ceil(TP * MT / 2), at most 8
  int64_t raw_elems = 0;   // patch_rows x W * C when W * C % 8 == 0 and it fits kFewcMaxSmemBytes (else 0):
                           // the next task's input rows as they are, copied with cp.async while the current task
                           // computes (fewc_kernels.cuh); 0: each task loads its patch before computing
  int64_t smem_bytes = 0;  // filter + patch (rounded up to 8 elements) + the warps' output staging
                           // (2 x 16 x (K + 8) elements each) + raw_elems
};
// The weight gradient dW[k, kk] = sum over output pixels (n,p,q) of dy[n,p,q,k] * A[(n,p,q), kk] (A as above)
// runs over the same tasks and patches; a CTA stages the task's dy (TP * MT * 16 pixels x (K + 8)) in one of two
// buffers (the next task's dy and raw input rows are copied while the current one computes); a tile group of
// ceil(ksteps / 2) warps owns 2 reduction steps per warp for all K channels, and tgroups groups split the task's
// row tiles (group i takes tiles i, i + tgroups, ...; the groups' sums added in group order at the end); each CTA
// writes its fp32 partial (K, 16 ksteps) to a workspace that a second kernel sums in CTA order into dW
// (K, R, S, C): deterministic.
// Stride 1: after the patch is built, a copy shifted by one column (odd[i] = patch[i + 1] per 4-channel pixel) that
// the lanes of odd pixels read their 16-byte B rows from.
struct FewcWgradTiling {
  FewcTiling t;            // tasks, patch, mt, tp, raw_elems as the forward's (its warps and smem_bytes unused),
                           // but patch_cols rounded up to even (16-byte aligned B rows, see fewc_wgrad_eligible)
  int64_t kwarps = 1;      // warps of a tile group: ceil(ksteps / 2)
  int64_t tgroups = 1;     // tile groups: min(8 / kwarps, TP * MT), at least 1 (a ResNet stem 1, a 3x3 conv 4)
  int64_t warps = 1;       // kwarps * tgroups
  int64_t dy_stride = 72;  // elements per staged dy pixel: K + 8 (conflict-free ldmatrix.trans rows)
  int64_t patches = 1;     // 2 for stride 1 (the patch and its copy shifted by one column), else 1
  int64_t odd_pad = 0;     // stride 1: elements between the patch and its shifted copy, so that the copy starts 64
                           // bytes past a 128-byte multiple of the patch: an 8x8 B matrix's 4 even-pixel rows (the
                           // patch) and 4 odd-pixel rows (the copy) then fall in disjoint banks
  int64_t smem_bytes = 0;  // patches x patch (rounded up to 8 elements) + odd_pad + 2 x staged dy + raw_elems + a zero
                           // row of 8,
                           // at least the groups' fp32 sums at the end ((tgroups - 1) x K x 16 ksteps)
  int64_t bn_smem_bytes = 0;  // with the batch-norm prologue (fewc_cuda.h's FewcBnGradIn): one staged x (the batch
                              // norm's input, tile pixels x K, unpadded) after the dy buffers, and the (5, K) f32
                              // constants after the zero row; at least the groups' sums. VGG's conv0: 109,552 B,
                              // two CTAs per SM
};
FewcWgradTiling fewc_wgrad_tiling(const Conv2dGeom& g);

// The tiling of a finished geometry with 2-byte io elements: TP = 2 when Q <= 128 (a ResNet stem: 7 row tiles per
// output row), else 1.
FewcTiling fewc_conv_tiling(const Conv2dGeom& g);

}  // namespace trctl
