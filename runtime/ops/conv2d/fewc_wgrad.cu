// The few-input-channel tensor-core convolution weight gradient (fewc_cuda.h; the GEMM and the tiling in fewc.h):
// dW (K=64, kred) = dy^T (64, pixels) x A (pixels, kred), the reduction over the output pixels of each task.
// A persistent CTA of tgroups x ceil(ksteps / 2) warps (fewc.h) loops over its tasks (image n, output rows p0 ..
// p0+TP-1): the task's dy pixels (TP * MT * 16, K + 8) and raw input rows were copied with cp.async while the
// previous task computed (dy in one of two buffers, issued right after the previous task's first barrier; the rows
// once its patch was built); the raw rows are scattered into the patch (as the forward's).
// Then for every 16-pixel row tile of its tile group, warp (group, w) (reduction steps 2w and 2w + 1, all 64
// channels) loads
//   A = dy^T fragments of its 4 row tiles of 16 channels with 4 ldmatrix.x4.trans of the staged dy (rows =
//     pixels, 8 channels each), and
//   per reduction step (r, sg) B = A-matrix fragments with one ldmatrix.x4.trans of the patch: a patch row of
//     pixel q at columns q*stride + s0 .. +1 holds the 8 elements (s4 in {s0, s0+1}) x (c4 < 4) contiguously,
//     16-byte aligned when q*stride + s0 is even (s0 is): always for stride 2; for stride 1 the lanes of odd pixels
//     (a lane's pixels q = bpx + 16 i keep one parity) read the same 8 elements from a copy of the patch shifted by
//     one column, at the even column q - 1 + s0; pixels past Q read a zero row;
// and runs 16 independent mma.sync m16n8k16 (fp32). At the end the tile groups' sums are added in group order
// (through shared memory) and each CTA writes its (K, kred) fp32 partial; a
// second kernel sums the partials in CTA order and scatters them into dW (K, R, S, C) (taps s >= S and channels
// >= C dropped). The grid is fixed by the plan: deterministic.
// With the batch-norm prologue (BNP; fewc_cuda.h's FewcBnGradIn) the staged "dy" is the batch norm's incoming
// gradient g, x (the batch norm's input) is staged beside it in one buffer (rows of K, unpadded: it is read once,
// right after it lands, and the next task's copy is issued only after that), and once both are in, the block
// rewrites each staged 8-channel piece of an in-range pixel into the batch norm's dx with bn_elem.cuh's relu_grad_in
// and bn_bwd_dx and the per-channel BnBwdConsts computed once per CTA: the values batchnorm_bwd_cuda would have
// stored, bitwise. The single x buffer keeps VGG's conv0 at two CTAs per SM (fewc.h), so one CTA's prologue runs
// while the other's copies land or its MMAs run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/cuda/ldmatrix.cuh"
#include "runtime/ops/batchnorm/bn_elem.cuh"
#include "runtime/ops/conv2d/fewc_cuda.h"
#include "runtime/ops/conv2d/fewc_kernels.cuh"

namespace trctl {
namespace {

constexpr int kWgradK = 64;        // output channels (fewc_wgrad_eligible)
constexpr int kWgradMaxWarps = 8;  // ceil(16 ksteps / 2): R, S <= 8
constexpr int kWgradMt = kWgradK / 16;  // row tiles of 16 channels

struct FewcWgradArgs {
  const uint16_t* x;   // (N, H, W, C)
  const uint16_t* dy;  // (N, P, Q, K)
  float* partial;      // (grid, K, kred)
  int h, w_in, c, stride, pad_h, pad_w, p, q;
  int sg, ksteps, mt, tp, row_tasks, tasks, patch_rows, patch_cols, dy_stride, raw_elems;
  int kwarps, tgroups;  // FewcWgradTiling: warps of one tile group (ceil(ksteps / 2)), tile groups
  int odd_pad;          // FewcWgradTiling::odd_pad
  int vec;   // PatchGeom::vec
  int pipe;  // vec and raw_elems > 0: the raw input rows are prefetched (else each task loads its patch)
  // BNP: dy is the batch norm's incoming gradient g; bn_x (N, P, Q, K) its input; the (K) f32 parameters and rows.
  const uint16_t* bn_x;
  const float *gamma, *mean, *invstd, *dgamma, *dbeta, *relu_beta;
  int64_t bn_rows;
};

// The end of output row p0 + pl's pixels inside the image in a task's staged rows of row_px = 16 MT pixels:
// min(Q, row_px), 0 for a row past P (stage_dy zero-fills the rest, bn_dx_words skips it).
__device__ __forceinline__ int staged_row_end(const FewcWgradArgs& a, int p0, int pl, int row_px) {
  return p0 + pl < a.p ? min(a.q, row_px) : 0;
}

// cp.async of the task's pixels of src (N, P, Q, K: dy, or BNP's x) into dys, stride elements per pixel (tile pixel
// i: output row p0 + i / (16 MT), column i % (16 MT)); pixels past P or Q are zero-filled. Thread t copies piece
// t % 8 of pixels t / 8, t / 8 + blockDim / 8, ... of each row (blockDim is a multiple of 8), its source and
// destination advanced by additions, one run of copies and one of zero fills per row: no piece's position or 64-bit
// address rebuilt per copy (~27 instructions a copy before; Nsight Compute, RESULTS.md run 76: those copies were
// ~2,900 of a task's ~15,000 warp instructions in the batch-norm prologue's kernel, ~1,500 in the plain one's).
__device__ __forceinline__ void stage_dy(const FewcWgradArgs& a, const uint16_t* src, int task, uint16_t* dys,
                                         int stride) {
  const int n = task / a.row_tasks, p0 = (task - n * a.row_tasks) * a.tp;
  const int row_px = a.mt * 16, q0 = static_cast<int>(threadIdx.x) >> 3, ck = static_cast<int>(threadIdx.x) & 7;
  const int step = static_cast<int>(blockDim.x) >> 3;
  const int64_t s_step = static_cast<int64_t>(step) * kWgradK;
  const uint32_t d_step = static_cast<uint32_t>(step * stride * 2);  // bytes
  for (int pl = 0; pl < a.tp; ++pl) {
    const int q_end = staged_row_end(a, p0, pl, row_px);  // pixels [q_end, row_px) are zero-filled
    const uint16_t* s = src + ((static_cast<int64_t>(n) * a.p + p0 + pl) * a.q + q0) * kWgradK + ck * 8;
    uint32_t d = smem_addr(dys + (pl * row_px + q0) * stride + ck * 8);
    int q = q0;
    for (; q < q_end; q += step, s += s_step, d += d_step) cp_async16(d, s, 16);
    for (; q < row_px; q += step, d += d_step) cp_async16(d, src, 0);
  }
}

// A task's copies in two commit groups: its dy into dys (prefetch_dy), then BNP's x into xs (else nullptr) and,
// when pipelined, its raw input rows (prefetch_rows). The task loop issues the next task's dy as soon as its buffer is
// free (every warp past the loop's first barrier) and the rest once the scatter and BNP's prologue are done with raw
// and xs.
__device__ __forceinline__ void prefetch_dy(const FewcWgradArgs& a, int task, uint16_t* dys) {
  stage_dy(a, a.dy, task, dys, a.dy_stride);
  cp_async_commit();
}
__device__ __forceinline__ void prefetch_rows(const FewcWgradArgs& a, const PatchGeom& pg, int task, uint16_t* xs,
                                              uint16_t* raw) {
  if (xs) stage_dy(a, a.bn_x, task, xs, kWgradK);
  if (a.pipe) {
    const int n = task / a.row_tasks;
    prefetch_patch_rows(a.x + static_cast<int64_t>(n) * a.h * a.w_in * a.c, pg, (task - n * a.row_tasks) * a.tp,
                        raw);
  }
  cp_async_commit();
}

// BNP: the staged g of the task's in-range pixels (p0 + pl < P, q < Q; the others stay 0) rewritten into the batch
// norm's dx in place, from the staged x (rows of K) and the constants bnc: K float4 (m, a, mg, k) then K floats (b),
// channel order, by the whole block. Thread t works on one 32-bit word of two channels, cw = t % 32 (channels 2 cw,
// 2 cw + 1), of pixels q = t / 32, t / 32 + warps, ... of each output row pl (a warp: the 32 words of one pixel,
// conflict-free), with its two channels' constants in registers for the task (read from bnc once) and its g and x
// addresses advanced by additions: per two elements a word of g and one of x loaded, two conversions each way and
// the arithmetic of bn_elem.cuh, one word stored. (Run 77, Nsight Compute: the previous form -- a thread's 8
// channels of a pixel, their constants read from shared memory per element -- issued 89 instructions a piece of 8
// elements, 10 of them shared loads.) kMask (the ReLU mask recomputed from x: relu_beta) is a template argument,
// so the loop holds no branch on it.
template <class T, bool kMask>
__device__ __forceinline__ void bn_dx_words(const FewcWgradArgs& a, int p0, uint16_t* dys, const uint16_t* xs,
                                            const float* bnc) {
  const int cw = static_cast<int>(threadIdx.x) & 31, q0 = static_cast<int>(threadIdx.x) >> 5;
  const int step = static_cast<int>(blockDim.x) >> 5, row_px = a.mt * 16;
  BnBwdConsts k[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float4 c = reinterpret_cast<const float4*>(bnc)[2 * cw + h];
    k[h] = BnBwdConsts{c.x, c.y, c.z, c.w, kMask ? bnc[4 * kWgradK + 2 * cw + h] : 0.0f};
  }
  const int gstep = step * (a.dy_stride / 2);  // words (dy_stride is even: 16-byte rows)
  constexpr int kXstep = kWgradK / 2;
  for (int pl = 0; pl < a.tp; ++pl) {
    const int q_end = staged_row_end(a, p0, pl, row_px);
    uint32_t* gp = reinterpret_cast<uint32_t*>(dys + (pl * row_px + q0) * a.dy_stride) + cw;
    const uint32_t* xp = reinterpret_cast<const uint32_t*>(xs + (pl * row_px + q0) * kWgradK) + cw;
#pragma unroll 2
    for (int q = q0; q < q_end; q += step, gp += gstep, xp += step * kXstep) {
      const uint32_t gw = *gp, xw = *xp;
      float r[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float xf = to_f32(t_of(static_cast<uint16_t>(xw >> (16 * h)), T{}));
        const float gf = to_f32(t_of(static_cast<uint16_t>(gw >> (16 * h)), T{}));
        // relu_grad_in<T>(gt, xt, xt, kMask, false, ...) with g converted first: a select, not a branch around
        // the conversion (the batch-norm kernels keep relu_grad_in's own form, and their code)
        const float gin = kMask && !relu_kept<T>(xf, k[h].m, k[h].a, k[h].b) ? 0.0f : gf;
        r[h] = bn_bwd_dx_f32(gin, xf, k[h]);
      }
      *gp = pack2<T>(r[0], r[1]);
    }
  }
}

// BNP: 0 no batch-norm prologue; 1 the prologue without a ReLU mask, 2 with the mask recomputed from x (relu_beta):
// one prologue loop per kernel (both in one kernel spilled the accumulators).
template <class T, int BNP>
__global__ void __launch_bounds__(kWgradMaxWarps * 32, 2) fewc_wgrad_kernel(FewcWgradArgs a) {
  extern __shared__ __align__(16) uint16_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
  // Warp (tile group tg, kwarp): reduction steps 2 kwarp, 2 kwarp + 1 of the task's row tiles tg, tg + tgroups, ...
  const int tg = (tid >> 5) / a.kwarps, kwarp = (tid >> 5) - tg * a.kwarps;
  const int tile_px = a.tp * a.mt * 16;
  uint16_t* patch = smem;  // (patch_rows, patch_cols, 4)
  const int patch_elems = (a.patch_rows * a.patch_cols * 4 + 7) / 8 * 8;
  const bool shifted = a.stride == 1;               // FewcWgradTiling::patches == 2
  uint16_t* odd = patch + patch_elems + a.odd_pad;  // stride 1: odd[i] = patch[i + 4] (one pixel further)
  uint16_t* dys0 = shifted ? odd + patch_elems : odd;  // 2 x (tile_px, dy_stride)
  uint16_t* xs = dys0 + 2 * tile_px * a.dy_stride;  // BNP: (tile_px, K) of x, one buffer
  uint16_t* raw = xs + (BNP ? tile_px * kWgradK : 0);  // (patch_rows, W * C)
  uint16_t* zero_row = raw + a.raw_elems;            // 8 zeros: B rows of pixels past Q
  float* bnc = reinterpret_cast<float*>(zero_row + 8);  // BNP: K float4 + K floats in channel order
                                                        // (16-byte aligned: every region is 8 elements whole)
  if (tid < 8) zero_row[tid] = 0;
  if constexpr (BNP) {  // written before the task loop's first barrier, read after it
    const float inv_n = 1.0f / static_cast<float>(a.bn_rows);  // as bn_bwd_apply_kernel computes it
    for (int ch = tid; ch < kWgradK; ch += static_cast<int>(blockDim.x)) {
      const BnBwdConsts k = bn_bwd_consts(ch, a.gamma, a.mean, a.invstd, a.dgamma, a.dbeta, a.relu_beta, inv_n);
      reinterpret_cast<float4*>(bnc)[ch] = make_float4(k.m, k.a, k.mg, k.k);
      bnc[4 * kWgradK + ch] = k.b;
    }
  }

  // This warp's reduction steps 2 kwarp and 2 kwarp + 1 (the second repeats the first past ksteps; not written).
  int boff[2];  // per step: the patch offset (elements) of B row (pixel 0, output row 0) for this lane's half
  const int mi = lane >> 3, bpx = (mi & 1) * 8 + (lane & 7), bhalf = mi >> 1;
  // The buffer this lane's B rows come from: element e of the patch is odd[e - 4], so for an odd pixel (stride 1)
  // the row at patch offset (row, q + s0) is read at odd - 4 + that offset = odd column q - 1 + s0 (even).
  const uint16_t* bsrc = shifted && (bpx & 1) ? odd - 4 : patch;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int ks = min(2 * kwarp + j, a.ksteps - 1);
    const int r = ks / a.sg, s0 = (ks - r * a.sg) * 4 + bhalf * 2;
    boff[j] = (r * a.patch_cols + s0) * 4;
  }
  // The tile walk's per-warp constants (the MMA loop below): tile tg's output row and column tile, this lane's A
  // offset in a task's staged dy (bytes), the A step between its tiles, the B patch row pitch, B's and the zero row's
  // addresses.
  const int tg_pl = tg / a.mt, tg_qt = tg - tg_pl * a.mt;
  const uint32_t a_lane = static_cast<uint32_t>((((mi >> 1) * 8 + (lane & 7)) * a.dy_stride + (mi & 1) * 8) * 2);
  const uint32_t a_step = static_cast<uint32_t>(a.tgroups * 16 * a.dy_stride * 2);
  const int b_row = a.stride * a.patch_cols * 8;
  const uint32_t b_lane = smem_addr(bsrc), zero_addr = smem_addr(zero_row);
  float acc[2][kWgradMt][2][4];
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int m = 0; m < kWgradMt; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][m][h][e] = 0.0f;

  const PatchGeom pg{a.h, a.w_in, a.c, a.stride, a.pad_h, a.pad_w, a.patch_rows, a.patch_cols, a.vec != 0};
  zero_patch(pg, patch);  // ordered before the first patch write by the task loop's first barrier
  if (static_cast<int>(blockIdx.x) < a.tasks) {
    prefetch_dy(a, blockIdx.x, dys0);
    prefetch_rows(a, pg, blockIdx.x, BNP ? xs : nullptr, raw);
  }
  const int tiles = a.tp * a.mt;
  int buf = 0;
  for (int task = blockIdx.x; task < a.tasks; task += gridDim.x, buf ^= 1) {
    const int n = task / a.row_tasks, p0 = (task - n * a.row_tasks) * a.tp;
    const int next = task + static_cast<int>(gridDim.x);
    cp_async_wait_all();  // this task's dy and rows (this thread's copies), then everyone's; the previous task's
    __syncthreads();      // fragments are read (its dy buffer is free)
    // The next task's dy (its buffer is free) in flight during the scatter, BNP's prologue and the MMAs.
    if (next < a.tasks) prefetch_dy(a, next, dys0 + (buf ^ 1) * tile_px * a.dy_stride);
    if (a.pipe)
      scatter_patch(raw, pg, p0, patch);
    else
      load_patch(a.x + static_cast<int64_t>(n) * a.h * a.w_in * a.c, pg, p0, patch);
    if constexpr (BNP != 0) bn_dx_words<T, BNP == 2>(a, p0, dys0 + buf * tile_px * a.dy_stride, xs, bnc);
    __syncthreads();  // the patch (and BNP's dx) is complete; raw and BNP's x buffer are free
    if (next < a.tasks) prefetch_rows(a, pg, next, BNP ? xs : nullptr, raw);
    if (shifted) {
      // odd := the patch one pixel (4 elements, 8 bytes) further; its last pixel is never read (fewc.h).
      const uint2* src = reinterpret_cast<const uint2*>(patch);
      uint2* dst = reinterpret_cast<uint2*>(odd);
      for (int i = tid, last = a.patch_rows * a.patch_cols - 1; i < last; i += static_cast<int>(blockDim.x))
        dst[i] = src[i + 1];
      __syncthreads();
    }
    const uint16_t* dys = dys0 + buf * tile_px * a.dy_stride;

    // The tiles tg, tg + tgroups, ... walked by additions (Nsight Compute, RESULTS.md run 76: the per-tile division
    // tile / MT and the rebuilt addresses were ~49 of a tile's 71 instructions a warp, beside 6 ldmatrix and 16
    // MMAs): (pl, qt) the tile's output row and 16-pixel column tile, a_addr its A address.
    uint32_t a_addr = smem_addr(dys + tg * 16 * a.dy_stride) + a_lane;
    int pl = tg_pl, qt = tg_qt;
    for (int tile = tg; tile < tiles; tile += a.tgroups) {
      const int q = qt * 16 + bpx;  // this lane's pixel of output row pl of the task
      // A of row tile m: matrix mi of lane's address: pixels (mi >> 1) * 8 + (lane & 7), channels
      // m * 16 + (mi & 1) * 8 (a_lane); as mma's (a0a1, a2a3, a4a5, a6a7): (ch g, px 2t), (ch g+8, px 2t),
      // (ch g, px 2t+8), (ch g+8, px 2t+8).
      uint32_t af[kWgradMt][4];
#pragma unroll
      for (int m = 0; m < kWgradMt; ++m) ldsm_x4_trans(af[m], a_addr + m * 32);
      // B: (px 0-7, half 0), (px 8-15, half 0), (px 0-7, half 1), (px 8-15, half 1); the patch offset
      // (pl stride patch_cols + q stride) * 4 elements, in bytes.
      uint32_t bf[2][4];
      const uint32_t bb = b_lane + static_cast<uint32_t>(pl * b_row + q * a.stride * 8);
      const bool in_q = q < a.q;
#pragma unroll
      for (int j = 0; j < 2; ++j) ldsm_x4_trans(bf[j], in_q ? bb + boff[j] * 2 : zero_addr);
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int m = 0; m < kWgradMt; ++m) {
          mma16816<T>(acc[j][m][0], af[m][0], af[m][1], af[m][2], af[m][3], bf[j][0], bf[j][1]);
          mma16816<T>(acc[j][m][1], af[m][0], af[m][1], af[m][2], af[m][3], bf[j][2], bf[j][3]);
        }
      a_addr += a_step;
      qt += a.tgroups;
      while (qt >= a.mt) qt -= a.mt, ++pl;
    }
  }
  cp_async_wait_all();  // nothing is in flight at exit (no task was prefetched past the last)
  // This CTA's partial (K, kred): c0, c1 at (channel m * 16 + g, kk 2t, 2t+1), c2, c3 at channel m * 16 + g + 8.
  // With several tile groups, groups 1.. leave their sums in shared memory (the patch and dy areas are free once
  // every warp is past the loop) and group 0 adds them in group order: the same order for every run.
  const int kred = a.ksteps * 16;
  float* stage = reinterpret_cast<float*>(smem);  // (tgroups - 1, K, kred): fewc_wgrad_tiling's smem covers it
  // f(j, m, h, lo, hi) for each accumulator fragment acc[j][m][h] of this warp: lo, hi the element offsets in a
  // (K, kred) matrix of its c0 c1 (channel m * 16 + g, kk 2t, 2t+1) and c2 c3 (channel + 8) pairs.
  auto each_fragment = [&](auto&& f) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int ks = 2 * kwarp + j;
      if (ks >= a.ksteps) break;
#pragma unroll
      for (int m = 0; m < kWgradMt; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int kk = ks * 16 + h * 8 + 2 * t, ch = m * 16 + g;
          f(j, m, h, ch * kred + kk, (ch + 8) * kred + kk);
        }
    }
  };
  if (a.tgroups > 1) {
    __syncthreads();
    if (tg > 0) {
      float* mine = stage + static_cast<int64_t>(tg - 1) * kWgradK * kred;
      each_fragment([&](int j, int m, int h, int lo, int hi) {
        *reinterpret_cast<float2*>(mine + lo) = make_float2(acc[j][m][h][0], acc[j][m][h][1]);
        *reinterpret_cast<float2*>(mine + hi) = make_float2(acc[j][m][h][2], acc[j][m][h][3]);
      });
    }
    __syncthreads();
    if (tg > 0) return;
  }
  float* part = a.partial + static_cast<int64_t>(blockIdx.x) * kWgradK * kred;
  each_fragment([&](int j, int m, int h, int lo, int hi) {
    float2 l = make_float2(acc[j][m][h][0], acc[j][m][h][1]), u = make_float2(acc[j][m][h][2], acc[j][m][h][3]);
    for (int o = 1; o < a.tgroups; ++o) {  // the other groups' sums, in group order
      const float* other = stage + static_cast<int64_t>(o - 1) * kWgradK * kred;
      const float2 ol = *reinterpret_cast<const float2*>(other + lo), ou = *reinterpret_cast<const float2*>(other + hi);
      l.x += ol.x, l.y += ol.y, u.x += ou.x, u.y += ou.y;
    }
    *reinterpret_cast<float2*>(part + lo) = l;
    *reinterpret_cast<float2*>(part + hi) = u;
  });
}

// dw[k, r, s, c] = sum over CTAs b = 0, 1, ... of partial[b, k, kk(r, s, c)], kk = ((r SG + s / 4) 4 + s % 4) 4 + c.
__global__ void fewc_wgrad_reduce_kernel(const float* __restrict__ partial, int ctas, int r_, int s_, int c_, int sg,
                                         int kred, float* __restrict__ dw) {
  const int total = kWgradK * r_ * s_ * c_;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int c = i % c_, s = (i / c_) % s_, r = (i / (c_ * s_)) % r_, k = i / (c_ * s_ * r_);
  const int kk = ((r * sg + s / 4) * 4 + s % 4) * 4 + c;
  const float* p = partial + static_cast<int64_t>(k) * kred + kk;
  const int64_t step = static_cast<int64_t>(kWgradK) * kred;
  float sum = 0.0f;
  for (int b = 0; b < ctas; ++b) sum += p[b * step];
  dw[i] = sum;
}

using WgradKernel = void (*)(FewcWgradArgs);
// The kernel of an io type, with the batch-norm prologue (bn) and its ReLU mask (mask) or not. The two prologue
// variants have the same launch bounds and shared memory (the plan's residency holds for both).
WgradKernel wgrad_kernel(GpuDType io, bool bn, bool mask) {
  const int v = bn ? (mask ? 2 : 1) : 0;
  if (io == GpuDType::F16)
    return v == 2 ? fewc_wgrad_kernel<__half, 2> : v == 1 ? fewc_wgrad_kernel<__half, 1> : fewc_wgrad_kernel<__half, 0>;
  if (io == GpuDType::BF16)
    return v == 2   ? fewc_wgrad_kernel<__nv_bfloat16, 2>
           : v == 1 ? fewc_wgrad_kernel<__nv_bfloat16, 1>
                    : fewc_wgrad_kernel<__nv_bfloat16, 0>;
  return nullptr;
}


}  // namespace

Result<FewcWgradPlan> fewc_wgrad_plan(const Conv2dGeom& g, GpuDType io, bool bn_prologue) {
  if (io != GpuDType::F16 && io != GpuDType::BF16)
    return Error{ErrCode::NotSupported, "fewc conv",
                 std::string("the few-channel tensor-core weight gradient takes f16 or bf16, not ") +
                     gpu_dtype_name(io)};
  if (!fewc_wgrad_eligible(g))
    return Error{ErrCode::NotSupported, "fewc conv",
                 "not a few-channel weight gradient it covers: " + conv2d_geom_str(g)};
  FewcWgradPlan plan;
  plan.g = g;
  plan.io = io;
  plan.t = fewc_wgrad_tiling(g);
  plan.bn = bn_prologue;
  if (bn_prologue && plan.t.bn_smem_bytes > kFewcMaxBnSmemBytes)
    return Error{ErrCode::NotSupported, "fewc conv",
                 "the batch-norm prologue needs " + std::to_string(plan.t.bn_smem_bytes) +
                     " B of shared memory: " + conv2d_geom_str(g)};
  const WgradKernel kernel = wgrad_kernel(io, bn_prologue, true);
  const int64_t smem = bn_prologue ? plan.t.bn_smem_bytes : plan.t.smem_bytes;
  // The prologue's kernel may use more than the rule's cap (one CTA per SM).
  Result<int> sms = fewc_sm_count();
  if (!sms.ok()) return sms.errors();
  Result<int> per_sm = fewc_resident_ctas(kernel, static_cast<int>(plan.t.warps) * 32, smem,
                                          bn_prologue ? kFewcMaxBnSmemBytes : kFewcMaxSmemBytes);
  if (!per_sm.ok()) return per_sm.errors();
  if (bn_prologue) {  // the variant without the mask (g masked already: conv_bn_backward fused) needs the same
                      // shared-memory limit set (fewc_resident_ctas sets it; without it a launch over 48 KiB fails)
    Result<int> unmasked = fewc_resident_ctas(wgrad_kernel(io, true, false), static_cast<int>(plan.t.warps) * 32,
                                              smem, kFewcMaxBnSmemBytes);
    if (!unmasked.ok()) return unmasked.errors();
    per_sm = std::min(per_sm.value(), unmasked.value());
  }
  if (per_sm.value() < 1)
    return Error{ErrCode::NotSupported, "fewc conv",
                 "no weight-gradient CTA of " + std::to_string(smem) + " B shared memory fits an SM"};
  plan.grid = static_cast<int>(std::min<int64_t>(plan.t.t.tasks, static_cast<int64_t>(sms.value()) * per_sm.value()));
  return plan;
}

size_t fewc_wgrad_workspace_bytes(const FewcWgradPlan& plan) {
  return static_cast<size_t>(plan.grid) * kWgradK * static_cast<size_t>(plan.t.t.ksteps) * 16 * sizeof(float);
}

Status fewc_conv_wgrad_cuda(cudaStream_t stream, const FewcWgradPlan& plan, const void* dy, const void* x, float* dw,
                            void* ws, size_t ws_bytes, const FewcBnGradIn* bn) {
  const WgradKernel kernel = wgrad_kernel(plan.io, plan.bn, bn && bn->relu_beta);
  if (!kernel) return Error{ErrCode::Internal, "fewc conv", "weight gradient of an unplanned type"};
  if ((bn != nullptr) != plan.bn)
    return Error{ErrCode::Internal, "fewc conv", "the batch-norm prologue's inputs and the plan disagree"};
  if (bn && (!bn->g || !bn->x || !bn->gamma || !bn->mean || !bn->invstd || !bn->dgamma || !bn->dbeta ||
             reinterpret_cast<uintptr_t>(bn->g) % 16 != 0 || reinterpret_cast<uintptr_t>(bn->x) % 16 != 0))
    return Error{ErrCode::Internal, "fewc conv", "batch-norm prologue: a null or misaligned input"};
  if (bn) dy = bn->g;
  if (ws_bytes < fewc_wgrad_workspace_bytes(plan) || !ws)
    return Error{ErrCode::Internal, "fewc conv", "weight-gradient workspace too small"};
  if (reinterpret_cast<uintptr_t>(dy) % 16 != 0)
    return Error{ErrCode::Internal, "fewc conv", "dy must be 16-byte aligned"};
  const Conv2dGeom& g = plan.g;
  const FewcTiling& t = plan.t.t;
  FewcWgradArgs a;
  a.x = static_cast<const uint16_t*>(x);
  a.dy = static_cast<const uint16_t*>(dy);
  a.partial = static_cast<float*>(ws);
  a.h = static_cast<int>(g.h), a.w_in = static_cast<int>(g.w), a.c = static_cast<int>(g.c);
  a.stride = static_cast<int>(g.stride_w);
  a.pad_h = static_cast<int>(g.pad_h), a.pad_w = static_cast<int>(g.pad_w);
  a.p = static_cast<int>(g.p), a.q = static_cast<int>(g.q);
  a.sg = static_cast<int>(t.sg), a.ksteps = static_cast<int>(t.ksteps), a.mt = static_cast<int>(t.mt);
  a.tp = static_cast<int>(t.tp), a.row_tasks = static_cast<int>((g.p + t.tp - 1) / t.tp);
  a.tasks = static_cast<int>(t.tasks);
  a.patch_rows = static_cast<int>(t.patch_rows), a.patch_cols = static_cast<int>(t.patch_cols);
  a.dy_stride = static_cast<int>(plan.t.dy_stride);
  a.raw_elems = static_cast<int>(t.raw_elems);
  a.kwarps = static_cast<int>(plan.t.kwarps), a.tgroups = static_cast<int>(plan.t.tgroups);
  a.odd_pad = static_cast<int>(plan.t.odd_pad);
  a.bn_x = bn ? static_cast<const uint16_t*>(bn->x) : nullptr;
  a.gamma = bn ? bn->gamma : nullptr, a.mean = bn ? bn->mean : nullptr, a.invstd = bn ? bn->invstd : nullptr;
  a.dgamma = bn ? bn->dgamma : nullptr, a.dbeta = bn ? bn->dbeta : nullptr;
  a.relu_beta = bn ? bn->relu_beta : nullptr;
  a.bn_rows = g.n * g.p * g.q;
  a.vec = fewc_rows_vectorizable(g, x);
  a.pipe = a.vec && t.raw_elems > 0 ? 1 : 0;
  const int64_t smem = plan.bn ? plan.t.bn_smem_bytes : plan.t.smem_bytes;
  kernel<<<plan.grid, static_cast<unsigned>(plan.t.warps * 32), static_cast<size_t>(smem), stream>>>(a);
  if (Status st = TRCTL_CUDA_LAUNCH_STATUS("fewc_wgrad_kernel"); !st.ok()) return st;
  const int total = static_cast<int>(g.k * g.r * g.s * g.c);
  fewc_wgrad_reduce_kernel<<<(total + 255) / 256, 256, 0, stream>>>(
      static_cast<const float*>(ws), plan.grid, static_cast<int>(g.r), static_cast<int>(g.s), static_cast<int>(g.c),
      static_cast<int>(t.sg), static_cast<int>(t.ksteps * 16), dw);
  return TRCTL_CUDA_LAUNCH_STATUS("fewc_wgrad_reduce_kernel");
}

}  // namespace trctl
