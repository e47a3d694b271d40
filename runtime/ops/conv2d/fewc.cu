// The few-input-channel tensor-core convolution forward (fewc_cuda.h; the GEMM and the tiling in fewc.h).
// A persistent CTA loads the filter once into shared memory as B (K, w_stride) in the reduction order of fewc.h,
// then per task (image n, output rows p0 .. p0+TP-1) the input patch (patch_rows, patch_cols, 4 channels, zero
// outside the image and for c >= C), and its warps run pairs of 16-column row tiles:
//   A fragments: one 32-bit shared load per register (an element pair is two channels of one input pixel: the
//     patch keeps 4 channels per pixel, so k pairs never straddle pixels), any stride;
//   B fragments: ldmatrix.x4 from the filter rows (row stride 2 ksteps + 1 sixteen-byte units: conflict-free);
//   mma.sync m16n8k16 with fp32 accumulators, one rounding to the io type at the end (+ the bias in fp32 if any);
//   the tile goes through the warp's shared staging (16 pixels x (K + 8)) so that y is written in whole 16-byte
//   pieces, each pixel's K channels contiguous;
//   with statistics (STATS, fewc_cuda.h's FewcStatsOut) the sums of the stored values and their squares over a
//   unit's two staged tiles are MMAs too (fewc_stats_mma: per 8 channels [Y^T; ones] x Y, whose diagonal and
//   lower half are the sums of y^2 and y), and the warp adds them into its (2, K) f32 row in shared memory once per
//   unit (sums carried across units stayed live through the MMAs and spilled); at the end the CTA adds its warps'
//   rows in warp order into its partial (grid, 2, K), which fewc_stats_reduce_kernel sums.
// Values are copied as bits up to the MMA: the kernel works on uint16_t storage for f16 and bf16 alike.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/cuda/ldmatrix.cuh"
#include "runtime/ops/conv2d/fewc_cuda.h"
#include "runtime/ops/conv2d/fewc_kernels.cuh"

namespace trctl {
namespace {

struct FewcArgs {
  const uint16_t* x;     // (N, H, W, C)
  const uint16_t* w;     // (K, R, S, C)
  const uint16_t* bias;  // (K) or nullptr
  uint16_t* y;           // (N, P, Q, K)
  int h, w_in, c, r, s, stride, pad_h, pad_w, p, q;
  int sg, ksteps, mt, tp, tasks, row_tasks, patch_rows, patch_cols, w_stride;
  int vec;   // PatchGeom::vec
  int pipe;  // vec and FewcTiling::raw_elems > 0: the next task's rows are copied while this one computes
  float* part;    // STATS: (grid, 2, K) f32 partial sums of y and y^2
  int stats_off;  // STATS: the warps' (warps, 2, K) f32 sums in shared memory, at smem + stats_off elements
};

// A unit's per-channel sums of y and y^2 from its staged tiles (st: tile 0's 16 x kStage rows, tile 1's after it;
// tile 1 only when two; rows of pixels that are not y's hold 0), added into this warp's (2, K) f32 row wsum: per
// column tile j (channels 8 j .. 8 j + 7) one m16n8k16 MMA a tile, A = [Y_j^T; ones] (rows 0..7 the tile's 8
// channels over its 16 pixels, rows 8..15 all 1), B = Y_j (16 pixels x 8 channels), so D[n][n] = sum of y_n^2 and
// D[8 + m][n] = sum of y_n, products exact in f32 (D accumulates tile 1 onto tile 0). ldmatrix.trans gives lane
// (g, t) = (lane / 4, lane % 4) the pixel pair (2t, 2t + 1) of channel g in each 8 x 8 matrix, which is both A's
// (rows g, k 2t..) and B's (k 2t.., column g) fragment. Lane (g, g / 2) holds channel g's sums: c[g % 2] (D[g][g])
// and c[2 + g % 2] (D[8 + g][g]). 4 ldmatrix and 8 MMA a tile (K = 64) where the per-element sums took ~130 lane
// instructions.
template <class T, int NT>
__device__ __forceinline__ void fewc_stats_mma(const uint16_t* st, bool two, float* wsum, int lane) {
  constexpr int K = NT * 8, kStage = K + 8;
  constexpr uint32_t kOnes = std::is_same_v<T, __half> ? 0x3C003C00u : 0x3F803F80u;  // (1, 1) in T
  float d[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[j][e] = 0.0f;
  // Matrix lane / 8 of each ldmatrix.x4.trans: pixels 8 ((lane / 8) % 2) + lane % 8, channels of column tile
  // 2 jj + lane / 16.
  const uint32_t base = smem_addr(st + ((lane & 7) + 8 * ((lane >> 3) & 1)) * kStage + (lane >> 4) * 8);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (i == 1 && !two) break;
#pragma unroll
    for (int jj = 0; jj < NT / 2; ++jj) {
      uint32_t r[4];  // tile 2 jj: pixels 0..7 (r0), 8..15 (r1); tile 2 jj + 1: r2, r3
      ldsm_x4_trans(r, base + (i * 16 * kStage + jj * 16) * 2);
      mma16816<T>(d[2 * jj], r[0], kOnes, r[1], kOnes, r[0], r[1]);
      mma16816<T>(d[2 * jj + 1], r[2], kOnes, r[3], kOnes, r[2], r[3]);
    }
  }
  const int g = lane >> 2, t = lane & 3;
  if (t == (g >> 1)) {
    float* mine = wsum + g;
    const bool odd = g & 1;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      mine[8 * j] += odd ? d[j][3] : d[j][2];
      mine[K + 8 * j] += odd ? d[j][1] : d[j][0];
    }
  }
}

// T: __half or __nv_bfloat16 (the MMA type and the output rounding); NT = K / 8 column tiles; STATS: y's
// per-channel sums too.
template <class T, int NT, bool STATS>
__global__ void __launch_bounds__(256, 2) fewc_fwd_kernel(FewcArgs a) {  // 2 CTAs per SM: <= 128 registers
  constexpr int K = NT * 8;
  constexpr int kStage = K + 8;  // staging row (elements): conflict-free fragment stores, 16-byte rows
  extern __shared__ __align__(16) uint16_t smem[];
  const int tid = threadIdx.x, nthreads = blockDim.x, nwarps = nthreads >> 5;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int kred = a.ksteps * 16;
  uint16_t* wsm = smem;                             // (K, w_stride)
  uint16_t* patch = wsm + K * a.w_stride;           // (patch_rows, patch_cols, 4)
  const int patch_elems = a.patch_rows * a.patch_cols * 4;
  uint16_t* stage = patch + (patch_elems + 7) / 8 * 8;  // (warps, 2, 16, kStage)
  uint16_t* raw = stage + nwarps * 2 * 16 * kStage;      // (patch_rows, W * C) when a.pipe
  const uint32_t* patch32 = reinterpret_cast<const uint32_t*>(patch);  // 2 words per pixel
  float* wsum = reinterpret_cast<float*>(smem + a.stats_off);  // STATS: (warps, 2, K), zeroed before the first
  if constexpr (STATS)                                            // barrier of the task loop
    for (int i = tid; i < nwarps * 2 * K; i += nthreads) wsum[i] = 0.0f;

  // B (K, kred): wsm[n][((r SG + sg) 4 + s4) 4 + c4] = w[n, r, sg 4 + s4, c4], 0 outside the filter.
  for (int i = tid; i < K * kred; i += nthreads) {
    const int n = i / kred, kk = i - n * kred;
    const int ks = kk >> 4, s4 = (kk >> 2) & 3, c4 = kk & 3;
    const int r = ks / a.sg, s = (ks - r * a.sg) * 4 + s4;
    wsm[n * a.w_stride + kk] = (s < a.s && c4 < a.c) ? a.w[((n * a.r + r) * a.s + s) * a.c + c4] : uint16_t{0};
  }

  // This lane's ldmatrix.x4 row of column tiles (0, 1) at step 0 (tiles j, j + 1: + 8 j rows): matrix lane / 8
  // = (tile (lane / 16), half of the 16-element step (lane / 8) % 2), row lane % 8.
  const uint32_t bbase = smem_addr(wsm + ((lane >> 4) * 8 + (lane & 7)) * a.w_stride + ((lane >> 3) & 1) * 8);
  // Bit 2 sg (2 sg + 1) set when this lane's tap sg * 4 + t / 2 (+ 2) lies inside the filter (s < S).
  uint32_t in_mask = 0;
  for (int sg = 0; sg < a.sg; ++sg)
    in_mask |= (sg * 4 + (t >> 1) < a.s ? 1u : 0u) << (2 * sg) | (sg * 4 + (t >> 1) + 2 < a.s ? 1u : 0u) << (2 * sg + 1);

  const PatchGeom pg{a.h, a.w_in, a.c, a.stride, a.pad_h, a.pad_w, a.patch_rows, a.patch_cols, a.vec != 0};
  zero_patch(pg, patch);  // ordered before the first patch write by the task loop's first barrier
  const int tiles = a.tp * a.mt, units = (tiles + 1) / 2;
  const int64_t image = static_cast<int64_t>(a.h) * a.w_in * a.c;
  if (a.pipe && blockIdx.x < a.tasks) {
    const int n = blockIdx.x / a.row_tasks;
    prefetch_patch_rows(a.x + n * image, pg, (blockIdx.x - n * a.row_tasks) * a.tp, raw);
    cp_async_commit();
  }
  for (int task = blockIdx.x; task < a.tasks; task += gridDim.x) {
    const int n = task / a.row_tasks, p0 = (task - n * a.row_tasks) * a.tp;
    if (a.pipe) {
      cp_async_wait_all();  // this task's rows (this thread's copies), then everyone's, and the previous task's
      __syncthreads();      // MMAs have read the patch (first task: the filter is written)
      scatter_patch(raw, pg, p0, patch);
      __syncthreads();      // the patch is complete and raw is free
      const int next = task + gridDim.x;
      if (next < a.tasks) {
        const int nn = next / a.row_tasks;
        prefetch_patch_rows(a.x + nn * image, pg, (next - nn * a.row_tasks) * a.tp, raw);
        cp_async_commit();
      }
    } else {
      __syncthreads();  // the previous task's MMAs have read the patch (first task: the filter is written)
      load_patch(a.x + n * image, pg, p0, patch);
      __syncthreads();
    }

    for (int unit = warp; unit < units; unit += nwarps) {
      const bool two = 2 * unit + 1 < tiles;
      int pl[2], q0[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int m = min(2 * unit + i, tiles - 1);
        pl[i] = m / a.mt;
        q0[i] = (m - pl[i] * a.mt) * 16;
      }
      float acc[2][NT][4];  // zeroed in the first reduction step, right before its MMAs (which then read RZ)
      // Word indices into the patch of rows g and g + 8 of each tile at r = 0, s0 = 0, tap s4 = t / 2, channels
      // (0, 1) or (2, 3) (t & 1); a reduction step (r, sg) adds (r * patch_cols + 4 sg) * 2 words.
      int lo[2], hi[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = pl[i] * a.stride * a.patch_cols + (t >> 1);
        lo[i] = (row + (q0[i] + g) * a.stride) * 2 + (t & 1);
        hi[i] = (row + (q0[i] + g + 8) * a.stride) * 2 + (t & 1);
      }
      // One reduction step (r, sg): patch word offset off, this lane's B rows at baddr; kFirst: acc := the
      // products (the step at r = 0, sg = 0), else acc += them.
      auto step = [&](auto first, int off, int sg, uint32_t baddr) {
        constexpr bool kFirst = decltype(first)::value;
        // A of both tiles (the second a copy of the first when there is none: its products are not stored).
        // Taps past the filter (s >= S: zero weights) read 0, not the pixel: an Inf there must not give NaN.
        const bool in1 = (in_mask >> (2 * sg)) & 1, in2 = (in_mask >> (2 * sg + 1)) & 1;
        uint32_t af[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint32_t* pl0 = patch32 + lo[i] + off;
          const uint32_t* ph0 = patch32 + hi[i] + off;
          af[i][0] = in1 ? pl0[0] : 0u, af[i][1] = in1 ? ph0[0] : 0u;
          af[i][2] = in2 ? pl0[4] : 0u, af[i][3] = in2 ? ph0[4] : 0u;
        }
        // B two column tiles at a time (one ldmatrix.x4), the next pair loaded before this pair's MMAs: 8 B
        // registers live instead of 2 NT.
        uint32_t b[2][4];
        ldsm_x4(b[0], baddr);
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
          if (j + 2 < NT) ldsm_x4(b[(j / 2 + 1) & 1], baddr + (j + 2) * 8 * a.w_stride * 2);
          const uint32_t(&bj)[4] = b[(j / 2) & 1];
          // Both tiles' MMAs even without a second tile (its A is a copy of the first's, its acc unused): no
          // branch around mma.sync, whose warp-uniform condition the compiler cannot see (WARPSYNCs, run 69).
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            if constexpr (kFirst)  // zeros right before the MMAs: ptxas reads RZ instead of zeroing registers
#pragma unroll
              for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f, acc[i][j + 1][e] = 0.0f;
            mma16816<T>(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bj[0], bj[1]);
            mma16816<T>(acc[i][j + 1], af[i][0], af[i][1], af[i][2], af[i][3], bj[2], bj[3]);
          }
        }
      };
      step(std::true_type{}, 0, 0, bbase);
      uint32_t baddr = bbase;  // this lane's B rows at step ks: + 32 bytes per step
      for (int r = 0; r < a.r; ++r)
        for (int sg = 0; sg < a.sg; ++sg, baddr += 32)
          if (r > 0 || sg > 0) step(std::false_type{}, (r * a.patch_cols + sg * 4) * 2, sg, baddr);
      // Epilogue: the tiles rounded (with the bias) into the staging tiles, then whole 16-byte pieces of y; STATS:
      // both tiles staged first, then their statistics by MMA, then the stores.
      constexpr int kChunks = K / 8;  // 16-byte pieces per pixel
      // Pixels 0 .. valid[i] - 1 of tile i are y's (the others lie past P or Q, or the tile is none); set below.
      int valid[2] = {0, 0};
      auto staged = [&](int i) { return stage + (warp * 2 + i) * 16 * kStage; };  // tile i's 16 staging rows
      // This lane's 16-byte pieces of a tile: chunk ck = lane % kChunks (channels 8 ck ..) of pixels px0 + k kPxStep
      // (px0 = lane / kChunks), k < kPieces; f(k, px, at) for each of tile i's, at its staging address (one base,
      // constant offsets per piece).
      constexpr int kPxStep = 32 / kChunks, kPieces = 16 / kPxStep;
      const int px0 = lane / kChunks, ck = lane - px0 * kChunks;
      auto each_piece = [&](int i, auto&& f) {
        uint16_t* sp = staged(i) + px0 * kStage + ck * 8;
#pragma unroll
        for (int k = 0; k < kPieces; ++k) f(k, px0 + k * kPxStep, sp + k * kPxStep * kStage);
      };
      // The tile's y pieces from one base address in y, each store one predicated instruction (one 16-byte store:
      // NVVM had split the plain uint4 store into four in the statistics variants, run 69; no branch around it, and
      // no 64-bit address rebuilt per piece, run 77).
      auto store_tile = [&](int i) {
        uint16_t* yp = a.y + ((static_cast<int64_t>(n) * a.p + p0 + pl[i]) * a.q + q0[i] + px0) * K + ck * 8;
        each_piece(i, [&](int k, int px, const uint16_t* at) {
          st_global_v4_if(px < valid[i], yp + k * kPxStep * K, *reinterpret_cast<const uint4*>(at));
        });
      };
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const bool tile = i == 0 || two;
        valid[i] = tile && p0 + pl[i] < a.p ? min(16, a.q - q0[i]) : 0;
        if (!tile) break;
        uint16_t* st = staged(i);
        // The tile rounded into the staging rows, one conversion per output pair; with a bias (read here, cached,
        // not held in registers) added in fp32 first. Without one, no load and no add: a branch per tile instead of
        // a predicated load, its conversion and two adds of 0 per pair (~1/10 of the kernel's instructions, Nsight
        // Compute, RESULTS.md run 69; acc is never -0, so adding +0 changed no value).
        auto stage_tile = [&](auto with_bias) {
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const int ch = j * 8 + 2 * t;  // and ch + 1
            float v[4] = {acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]};
            if constexpr (decltype(with_bias)::value) {
              const float b0 = f32_of(a.bias[ch], T{}), b1 = f32_of(a.bias[ch + 1], T{});
              v[0] += b0, v[1] += b1, v[2] += b0, v[3] += b1;
            }
            *reinterpret_cast<uint32_t*>(st + g * kStage + ch) = pack2<T>(v[0], v[1]);
            *reinterpret_cast<uint32_t*>(st + (g + 8) * kStage + ch) = pack2<T>(v[2], v[3]);
          }
        };
        if (a.bias)
          stage_tile(std::true_type{});
        else
          stage_tile(std::false_type{});
        if constexpr (!STATS) {
          __syncwarp();
          store_tile(i);
        }
      }
      if constexpr (STATS) {
        __syncwarp();
        // Rows past P or Q zeroed (a warp-uniform branch, edge tiles only), so that the MMAs below add 0 for them.
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (valid[i] == 16 || (i == 1 && !two)) continue;
          each_piece(i, [&](int, int px, uint16_t* at) {
            if (px >= valid[i]) *reinterpret_cast<uint4*>(at) = uint4{0, 0, 0, 0};
          });
          __syncwarp();
        }
        fewc_stats_mma<T, NT>(staged(0), two, wsum + warp * 2 * K, lane);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (i == 1 && !two) break;
          store_tile(i);
        }
      }
      __syncwarp();  // the staging tiles read before the next unit writes them
    }
  }
  if constexpr (STATS) {
    __syncthreads();  // every warp's sums are in
    for (int i = tid; i < 2 * K; i += nthreads) {
      float v = 0.0f;
      for (int w = 0; w < nwarps; ++w) v += wsum[w * 2 * K + i];
      a.part[static_cast<int64_t>(blockIdx.x) * 2 * K + i] = v;
    }
  }
}

// sum[k] (i = k < K) and sqsum[k] (i = K + k) = the CTAs' partials (ctas, 2K) at column i, in float64: each thread
// a strided share in CTA order, then a fixed tree over the block. One block of 256 per column.
__global__ void fewc_stats_reduce_kernel(const float* __restrict__ part, int ctas, int k, float* __restrict__ sum,
                                         float* __restrict__ sqsum) {
  __shared__ double red[256];
  const int i = blockIdx.x, tid = threadIdx.x;
  double v = 0.0;
  for (int b = tid; b < ctas; b += 256) v += part[static_cast<int64_t>(b) * 2 * k + i];
  red[tid] = v;
  __syncthreads();
  for (int half = 128; half > 0; half >>= 1) {
    if (tid < half) red[tid] += red[tid + half];
    __syncthreads();
  }
  if (tid == 0) {
    if (i < k)
      sum[i] = static_cast<float>(red[0]);
    else
      sqsum[i - k] = static_cast<float>(red[0]);
  }
}

using FewcKernel = void (*)(FewcArgs);

template <class T, bool STATS>
FewcKernel fewc_kernel_k(int64_t k) {
  switch (k) {
    case 16: return fewc_fwd_kernel<T, 2, STATS>;
    case 32: return fewc_fwd_kernel<T, 4, STATS>;
    case 64: return fewc_fwd_kernel<T, 8, STATS>;
    default: return nullptr;
  }
}
FewcKernel fewc_kernel(GpuDType io, int64_t k, bool stats) {
  if (io == GpuDType::F16) return stats ? fewc_kernel_k<__half, true>(k) : fewc_kernel_k<__half, false>(k);
  if (io == GpuDType::BF16)
    return stats ? fewc_kernel_k<__nv_bfloat16, true>(k) : fewc_kernel_k<__nv_bfloat16, false>(k);
  return nullptr;
}

// The statistics kernel's shared memory: the plain kernel's, rounded up to 16 bytes, then the warps' sums.
int64_t stats_off_elems(const FewcTiling& t) { return (t.smem_bytes + 15) / 16 * 8; }
int64_t stats_kernel_smem(const FewcTiling& t, int64_t k) {
  return 2 * stats_off_elems(t) + static_cast<int64_t>(fewc_stats_smem_bytes(t, k));
}


}  // namespace

Result<FewcConvPlan> fewc_conv_plan(const Conv2dGeom& g, GpuDType io) {
  if (io != GpuDType::F16 && io != GpuDType::BF16)
    return Error{ErrCode::NotSupported, "fewc conv",
                 std::string("the few-channel tensor-core conv takes f16 or bf16, not ") + gpu_dtype_name(io)};
  if (!fewc_conv_eligible(g))
    return Error{ErrCode::NotSupported, "fewc conv", "not a few-channel conv it covers: " + conv2d_geom_str(g)};
  FewcConvPlan plan;
  plan.g = g;
  plan.io = io;
  plan.t = fewc_conv_tiling(g);
  const FewcKernel kernel = fewc_kernel(io, g.k, false), stats_kernel = fewc_kernel(io, g.k, true);
  if (!kernel || !stats_kernel)
    return Error{ErrCode::Internal, "fewc conv", "no kernel for K = " + std::to_string(g.k)};
  const int threads = static_cast<int>(plan.t.warps) * 32;
  const int64_t smem = plan.t.smem_bytes;
  Result<int> sms = fewc_sm_count();
  if (!sms.ok()) return sms.errors();
  Result<int> per_sm = fewc_resident_ctas(kernel, threads, smem);
  if (!per_sm.ok()) return per_sm.errors();
  if (per_sm.value() < 1)
    return Error{ErrCode::NotSupported, "fewc conv",
                 "no CTA of " + std::to_string(smem) + " B shared memory fits an SM: " + conv2d_geom_str(g)};
  int resident = per_sm.value();
  // One grid for both kernels (the statistics' partials are per CTA): the smaller residency when both fit.
  const int64_t stats_smem = stats_kernel_smem(plan.t, g.k);
  if (stats_smem <= kFewcMaxSmemBytes) {
    Result<int> stats_per_sm = fewc_resident_ctas(stats_kernel, threads, stats_smem);
    if (!stats_per_sm.ok()) return stats_per_sm.errors();
    if (stats_per_sm.value() >= 1) {
      plan.stats = true;
      resident = std::min(resident, stats_per_sm.value());
    }
  }
  plan.grid = static_cast<int>(std::min<int64_t>(plan.t.tasks, static_cast<int64_t>(sms.value()) * resident));
  return plan;
}

size_t fewc_stats_smem_bytes(const FewcTiling& t, int64_t k) { return static_cast<size_t>(t.warps * 2 * k * 4); }

size_t fewc_stats_workspace_bytes(const FewcConvPlan& plan) {
  return static_cast<size_t>(plan.grid) * 2 * static_cast<size_t>(plan.g.k) * sizeof(float);
}

Status fewc_conv_fwd_cuda(cudaStream_t stream, const FewcConvPlan& plan, const void* x, const void* w,
                          const void* bias, void* y, const FewcStatsOut* stats) {
  const FewcKernel kernel = fewc_kernel(plan.io, plan.g.k, stats != nullptr);
  if (!kernel) return Error{ErrCode::Internal, "fewc conv", "launch of an unplanned geometry"};
  if (stats && !plan.stats)
    return Error{ErrCode::Internal, "fewc conv", "statistics of a plan without them: " + conv2d_geom_str(plan.g)};
  if (stats && (!stats->ws || stats->ws_bytes < fewc_stats_workspace_bytes(plan) || !stats->sum || !stats->sqsum))
    return Error{ErrCode::Internal, "fewc conv", "statistics workspace too small or outputs missing"};
  if (reinterpret_cast<uintptr_t>(y) % 16 != 0)
    return Error{ErrCode::Internal, "fewc conv", "y must be 16-byte aligned"};
  const Conv2dGeom& g = plan.g;
  const FewcTiling& t = plan.t;
  FewcArgs a;
  a.x = static_cast<const uint16_t*>(x);
  a.w = static_cast<const uint16_t*>(w);
  a.bias = static_cast<const uint16_t*>(bias);
  a.y = static_cast<uint16_t*>(y);
  a.h = static_cast<int>(g.h), a.w_in = static_cast<int>(g.w), a.c = static_cast<int>(g.c);
  a.r = static_cast<int>(g.r), a.s = static_cast<int>(g.s), a.stride = static_cast<int>(g.stride_h);
  a.pad_h = static_cast<int>(g.pad_h), a.pad_w = static_cast<int>(g.pad_w);
  a.p = static_cast<int>(g.p), a.q = static_cast<int>(g.q);
  a.sg = static_cast<int>(t.sg), a.ksteps = static_cast<int>(t.ksteps), a.mt = static_cast<int>(t.mt);
  a.tp = static_cast<int>(t.tp), a.tasks = static_cast<int>(t.tasks);
  a.row_tasks = static_cast<int>((g.p + t.tp - 1) / t.tp);
  a.patch_rows = static_cast<int>(t.patch_rows), a.patch_cols = static_cast<int>(t.patch_cols);
  a.w_stride = static_cast<int>(t.w_stride);
  a.vec = fewc_rows_vectorizable(g, x);
  a.pipe = a.vec && t.raw_elems > 0 ? 1 : 0;
  a.part = stats ? static_cast<float*>(stats->ws) : nullptr;
  a.stats_off = static_cast<int>(stats_off_elems(t));
  const int64_t smem = stats ? stats_kernel_smem(t, g.k) : t.smem_bytes;
  kernel<<<plan.grid, static_cast<unsigned>(t.warps * 32), static_cast<size_t>(smem), stream>>>(a);
  if (Status st = TRCTL_CUDA_LAUNCH_STATUS("fewc_fwd_kernel"); !st.ok() || !stats) return st;
  fewc_stats_reduce_kernel<<<static_cast<unsigned>(2 * g.k), 256, 0, stream>>>(
      static_cast<const float*>(stats->ws), plan.grid, static_cast<int>(g.k), stats->sum, stats->sqsum);
  return TRCTL_CUDA_LAUNCH_STATUS("fewc_stats_reduce_kernel");
}

}  // namespace trctl
