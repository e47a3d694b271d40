// The few-input-channel tensor-core convolution weight gradient (fewc_cuda.h; the GEMM and the tiling in fewc.h):
// dW (K=64, kred) = dy^T (64, pixels) x A (pixels, kred), the reduction over the output pixels of each task.
// A persistent CTA of 8 warps loops over its tasks (image n, output rows p0 .. p0+TP-1): it loads the input patch
// (as the forward) and stages the task's dy pixels (TP * MT * 16, K + 8); then for every 16-pixel row tile,
// warp w (row tile w % 4 of 16 channels, half w / 4 of the reduction steps) loads
//   A = dy^T fragments with one ldmatrix.x4.trans of the staged dy (rows = pixels, 8 channels each), and
//   per reduction step (r, sg) B = A-matrix fragments with one ldmatrix.x4.trans of the patch: a patch row of
//     pixel q at columns q*2 + s0 .. +1 holds the 8 elements (s4 in {s0, s0+1}) x (c4 < 4) contiguously, 16-byte
//     aligned because q*2 + s0 is even (stride 2); pixels past Q read a zero row;
// and accumulates with mma.sync m16n8k16 in fp32. At the end each CTA writes its (K, kred) fp32 partial; a second
// kernel sums the partials in CTA order and scatters them into dW (K, R, S, C) (taps s >= S and channels >= C
// dropped). The grid is fixed by the plan: deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/conv2d/fewc_cuda.h"
#include "runtime/ops/conv2d/fewc_kernels.cuh"

namespace trctl {
namespace {

constexpr int kWgradK = 64;                // output channels (fewc_wgrad_eligible)
constexpr int kWgradWarps = 8;             // 4 channel row tiles x 2 halves of the reduction steps
constexpr int kMaxStepsPerWarp = 8;        // ceil(16 ksteps / 2): R, S <= 8

struct FewcWgradArgs {
  const uint16_t* x;   // (N, H, W, C)
  const uint16_t* dy;  // (N, P, Q, K)
  float* partial;      // (grid, K, kred)
  int h, w_in, c, pad_h, pad_w, p, q;
  int sg, ksteps, mt, tp, row_tasks, tasks, patch_rows, patch_cols, dy_stride;
  int vec;  // PatchGeom::vec
};

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* row_addr) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

template <class T>
__global__ void __launch_bounds__(kWgradWarps * 32, 2) fewc_wgrad_kernel(FewcWgradArgs a) {
  constexpr int K = kWgradK;
  extern __shared__ __align__(16) uint16_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  uint16_t* patch = smem;  // (patch_rows, patch_cols, 4)
  const int patch_elems = (a.patch_rows * a.patch_cols * 4 + 7) / 8 * 8;
  const int tile_px = a.tp * a.mt * 16;
  uint16_t* dys = patch + patch_elems;          // (tile_px, dy_stride)
  uint16_t* zero_row = dys + tile_px * a.dy_stride;  // 8 zeros: B rows of pixels past Q
  if (tid < 8) zero_row[tid] = 0;

  const int m0 = (warp & 3) * 16;  // this warp's 16 channels
  const int half_steps = (a.ksteps + 1) / 2;
  const int ks0 = (warp >> 2) * half_steps, ks1 = min(a.ksteps, ks0 + half_steps);
  float acc[kMaxStepsPerWarp][2][4];
#pragma unroll
  for (int i = 0; i < kMaxStepsPerWarp; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][h][e] = 0.0f;

  const PatchGeom pg{a.h, a.w_in, a.c, 2, a.pad_h, a.pad_w, a.patch_rows, a.patch_cols, a.vec != 0};
  zero_patch(pg, patch);  // ordered before the first load_patch by the task loop's first barrier
  const int tiles = a.tp * a.mt;
  for (int task = blockIdx.x; task < a.tasks; task += gridDim.x) {
    const int n = task / a.row_tasks, p0 = (task - n * a.row_tasks) * a.tp;
    __syncthreads();  // the previous task's fragments are read
    load_patch(a.x + static_cast<int64_t>(n) * a.h * a.w_in * a.c, pg, p0, patch);
    // dy of the task's pixels (tile pixel i: output row p0 + i / (16 MT), column i % (16 MT)), 0 past P or Q.
    constexpr int kUnroll = 4;  // loads in flight per thread
    const int pieces = tile_px * (K / 8);
    for (int c0 = tid; c0 < pieces; c0 += kUnroll * blockDim.x) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int ci = c0 + u * blockDim.x, px = ci >> 3, ck = ci & 7;
        const int pl = px / (a.mt * 16), q = px - pl * a.mt * 16, p = p0 + pl;
        v[u] = make_uint4(0, 0, 0, 0);
        if (ci < pieces && p < a.p && q < a.q)
          v[u] = *reinterpret_cast<const uint4*>(a.dy + ((static_cast<int64_t>(n) * a.p + p) * a.q + q) * K + ck * 8);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int ci = c0 + u * blockDim.x;
        if (ci < pieces) *reinterpret_cast<uint4*>(dys + (ci >> 3) * a.dy_stride + (ci & 7) * 8) = v[u];
      }
    }
    __syncthreads();

    for (int tile = 0; tile < tiles; ++tile) {
      const int pl = tile / a.mt, q0 = (tile - pl * a.mt) * 16;
      // A: matrix mi of lane's address: pixels (mi >> 1) * 8 + (lane & 7), channels m0 + (mi & 1) * 8.
      uint32_t af[4];
      {
        const int mi = lane >> 3;
        ldsm_x4_trans(af, dys + (tile * 16 + (mi >> 1) * 8 + (lane & 7)) * a.dy_stride + m0 + (mi & 1) * 8);
      }
      // The A registers as mma's (a0a1, a2a3, a4a5, a6a7): (ch g, px 2t), (ch g+8, px 2t), (ch g, px 2t+8),
      // (ch g+8, px 2t+8) = matrices 0, 1, 2, 3 above.
      const int mi = lane >> 3, bpx = (mi & 1) * 8 + (lane & 7), bhalf = mi >> 1;
      const int q = q0 + bpx;
#pragma unroll
      for (int i = 0; i < kMaxStepsPerWarp; ++i) {
        const int ks = ks0 + i;
        if (ks >= ks1) break;
        const int r = ks / a.sg, s0 = (ks - r * a.sg) * 4 + bhalf * 2;
        const uint16_t* row = q < a.q ? patch + ((pl * 2 + r) * a.patch_cols + q * 2 + s0) * 4 : zero_row;
        uint32_t bf[4];  // (px 0-7, half 0), (px 8-15, half 0), (px 0-7, half 1), (px 8-15, half 1)
        ldsm_x4_trans(bf, row);
        mma16816<T>(acc[i][0], af[0], af[1], af[2], af[3], bf[0], bf[1]);
        mma16816<T>(acc[i][1], af[0], af[1], af[2], af[3], bf[2], bf[3]);
      }
    }
  }
  // This CTA's partial (K, kred): c0, c1 at (channel m0 + g, kk 2t, 2t+1), c2, c3 at channel m0 + g + 8.
  const int kred = a.ksteps * 16;
  float* part = a.partial + static_cast<int64_t>(blockIdx.x) * K * kred;
#pragma unroll
  for (int i = 0; i < kMaxStepsPerWarp; ++i) {
    const int ks = ks0 + i;
    if (ks >= ks1) break;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int kk = ks * 16 + h * 8 + 2 * t;
      part[(m0 + g) * kred + kk] = acc[i][h][0];
      part[(m0 + g) * kred + kk + 1] = acc[i][h][1];
      part[(m0 + g + 8) * kred + kk] = acc[i][h][2];
      part[(m0 + g + 8) * kred + kk + 1] = acc[i][h][3];
    }
  }
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
WgradKernel wgrad_kernel(GpuDType io) {
  if (io == GpuDType::F16) return fewc_wgrad_kernel<__half>;
  if (io == GpuDType::BF16) return fewc_wgrad_kernel<__nv_bfloat16>;
  return nullptr;
}

}  // namespace

Result<FewcWgradPlan> fewc_wgrad_plan(const Conv2dGeom& g, GpuDType io) {
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
  const WgradKernel kernel = wgrad_kernel(io);
  const int smem = static_cast<int>(plan.t.smem_bytes);
  TRCTL_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int dev = 0, sms = 0, per_sm = 0;
  TRCTL_CUDA_TRY(cudaGetDevice(&dev));
  TRCTL_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  TRCTL_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWgradWarps * 32, smem));
  if (per_sm < 1)
    return Error{ErrCode::NotSupported, "fewc conv",
                 "no weight-gradient CTA of " + std::to_string(smem) + " B shared memory fits an SM"};
  plan.grid = static_cast<int>(std::min<int64_t>(plan.t.t.tasks, static_cast<int64_t>(sms) * per_sm));
  return plan;
}

size_t fewc_wgrad_workspace_bytes(const FewcWgradPlan& plan) {
  return static_cast<size_t>(plan.grid) * kWgradK * static_cast<size_t>(plan.t.t.ksteps) * 16 * sizeof(float);
}

Status fewc_conv_wgrad_cuda(cudaStream_t stream, const FewcWgradPlan& plan, const void* dy, const void* x, float* dw,
                            void* ws, size_t ws_bytes) {
  const WgradKernel kernel = wgrad_kernel(plan.io);
  if (!kernel) return Error{ErrCode::Internal, "fewc conv", "weight gradient of an unplanned type"};
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
  a.pad_h = static_cast<int>(g.pad_h), a.pad_w = static_cast<int>(g.pad_w);
  a.p = static_cast<int>(g.p), a.q = static_cast<int>(g.q);
  a.sg = static_cast<int>(t.sg), a.ksteps = static_cast<int>(t.ksteps), a.mt = static_cast<int>(t.mt);
  a.tp = static_cast<int>(t.tp), a.row_tasks = static_cast<int>((g.p + t.tp - 1) / t.tp);
  a.tasks = static_cast<int>(t.tasks);
  a.patch_rows = static_cast<int>(t.patch_rows), a.patch_cols = static_cast<int>(t.patch_cols);
  a.dy_stride = static_cast<int>(plan.t.dy_stride);
  a.vec = fewc_rows_vectorizable(g, x);
  kernel<<<plan.grid, kWgradWarps * 32, static_cast<size_t>(plan.t.smem_bytes), stream>>>(a);
  if (Status st = TRCTL_CUDA_LAUNCH_STATUS("fewc_wgrad_kernel"); !st.ok()) return st;
  const int total = static_cast<int>(g.k * g.r * g.s * g.c);
  fewc_wgrad_reduce_kernel<<<(total + 255) / 256, 256, 0, stream>>>(
      static_cast<const float*>(ws), plan.grid, static_cast<int>(g.r), static_cast<int>(g.s), static_cast<int>(g.c),
      static_cast<int>(t.sg), static_cast<int>(t.ksteps * 16), dw);
  return TRCTL_CUDA_LAUNCH_STATUS("fewc_wgrad_reduce_kernel");
}

}  // namespace trctl
