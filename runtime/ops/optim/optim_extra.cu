// Gradient clipping by the global norm, the weights' EMA, swap and LARS on the GPU (optim_extra_cuda.h). The float
// arithmetic that must match the CPU reference is written with __f*_rn intrinsics, which nvcc never contracts into
// FMAs; the double sums run in a fixed order (thread-strided, then butterfly warp sums, then the warps in order).
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/optim/optim_extra_cuda.h"

namespace trctl {

namespace {

constexpr int kReduceBlock = 256;  // threads of every reducing block below (block_sum assumes it)

// Sum over the block, the same value in every thread, in an order fixed by the block shape alone. smem holds one
// double per warp; the leading __syncthreads lets a caller reuse smem for a second sum.
__device__ __forceinline__ double block_sum(double x, double* smem) {
  x = warp_sum(x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) smem[warp] = x;
  __syncthreads();
  x = lane < kReduceBlock / 32 ? smem[lane] : 0.0;
  return warp_sum(x);
}

// ---- global norm ----------------------------------------------------------------------------------------------

// Grid of the partial-sum launch: a function of n only, so the summation order never depends on the device.
unsigned grad_norm_grid(int64_t n) { return elementwise_grid((n + 3) / 4, kReduceBlock); }

// Each thread takes groups of 4 consecutive elements (grid-stride) and adds their squares in index order; the
// vector and scalar paths read the same elements in the same order, so alignment does not change the result.
template <bool kVec>
__global__ void grad_norm_partial_kernel(const OptHyper* __restrict__ h, const float* __restrict__ g, int64_t n,
                                         double* __restrict__ partials) {
  if (h->skip) return;
  const float inv = h->inv_scale;
  double acc = 0.0;
  const int64_t groups = (n + 3) / 4;
  for (int64_t c = grid_thread_index(); c < groups; c += grid_thread_count()) {
    const int64_t base = c * 4;
    if (kVec && base + 4 <= n) {
      const Pack<float, 4> v = pack_load<4>(g + base);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const double x = __fmul_rn(v.v[j], inv);
        acc += x * x;  // a float squared is exact in double: FMA or not, the same sum
      }
    } else {
      for (int64_t i = base; i < n && i < base + 4; ++i) {
        const double x = __fmul_rn(g[i], inv);
        acc += x * x;
      }
    }
  }
  __shared__ double smem[kReduceBlock / 32];
  acc = block_sum(acc, smem);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One block: the partials in a fixed order, the norm, and grad_clip_factor's float expression
// (std::min(coef, 1.0f) is (1 < coef) ? 1 : coef).
__global__ void grad_norm_final_kernel(const OptHyper* __restrict__ h, const double* __restrict__ partials,
                                       int32_t count, float max_norm, GradClipState* __restrict__ clip) {
  if (h->skip) return;
  double acc = 0.0;
  for (int32_t i = threadIdx.x; i < count; i += kReduceBlock) acc += partials[i];
  __shared__ double smem[kReduceBlock / 32];
  acc = block_sum(acc, smem);
  if (threadIdx.x == 0) {
    const double norm = sqrt(acc);
    const float coef = __fdiv_rn(max_norm, __fadd_rn(__double2float_rn(norm), 1e-6f));
    clip->norm = norm;
    clip->factor = 1.0f < coef ? 1.0f : coef;
  }
}

__global__ void grad_clip_fold_kernel(OptHyper* h, const GradClipState* clip) {
  if (!h->skip) h->inv_scale = __fmul_rn(h->inv_scale, clip->factor);
}

template <bool kVec>
__global__ void grad_clip_scale_kernel(const OptHyper* __restrict__ h, const GradClipState* __restrict__ clip,
                                       float* __restrict__ g, int64_t n) {
  if (h->skip) return;
  const float f = clip->factor;
  const int64_t groups = (n + 3) / 4;
  for (int64_t c = grid_thread_index(); c < groups; c += grid_thread_count()) {
    const int64_t base = c * 4;
    if (kVec && base + 4 <= n) {
      Pack<float, 4> v = pack_load<4>(g + base);
#pragma unroll
      for (int j = 0; j < 4; ++j) v.v[j] = __fmul_rn(v.v[j], f);
      pack_store<4>(g + base, v);
    } else {
      for (int64_t i = base; i < n && i < base + 4; ++i) g[i] = __fmul_rn(g[i], f);
    }
  }
}

// ---- EMA and swap ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float ema_value(bool first, float a, float w, float e) {
  return first ? w : __fadd_rn(e, __fmul_rn(a, __fsub_rn(w, e)));
}

template <bool kVec>
__global__ void ema_update_kernel(const OptHyper* __restrict__ h, const float* __restrict__ w,
                                  float* __restrict__ ema, int64_t n, float a) {
  if (h->skip) return;
  const bool first = h->step == 1;
  const int64_t groups = (n + 3) / 4;
  for (int64_t c = grid_thread_index(); c < groups; c += grid_thread_count()) {
    const int64_t base = c * 4;
    if (kVec && base + 4 <= n) {
      const Pack<float, 4> wv = pack_load<4>(w + base);
      Pack<float, 4> ev = pack_load<4>(ema + base);
#pragma unroll
      for (int j = 0; j < 4; ++j) ev.v[j] = ema_value(first, a, wv.v[j], ev.v[j]);
      pack_store<4>(ema + base, ev);
    } else {
      for (int64_t i = base; i < n && i < base + 4; ++i) ema[i] = ema_value(first, a, w[i], ema[i]);
    }
  }
}

template <bool kVec>
__global__ void swap_kernel(float* __restrict__ a, float* __restrict__ b, int64_t n) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t c = grid_thread_index(); c < groups; c += grid_thread_count()) {
    const int64_t base = c * 4;
    if (kVec && base + 4 <= n) {
      const Pack<float, 4> x = pack_load<4>(a + base), y = pack_load<4>(b + base);
      pack_store<4>(a + base, y);
      pack_store<4>(b + base, x);
    } else {
      for (int64_t i = base; i < n && i < base + 4; ++i) {
        const float x = a[i];
        a[i] = b[i];
        b[i] = x;
      }
    }
  }
}

// ---- LARS -----------------------------------------------------------------------------------------------------

// The parameter group holding layout element i (groups are few and in layout order), as optimizer_step_cuda.
__device__ __forceinline__ const OptGroup& lars_group(const OptHyper* h, int64_t i) {
  int k = 0;
  while (k + 1 < h->groups && k + 1 < kMaxOptGroups && i >= h->group[k].end) ++k;
  return h->group[k];
}

__device__ __forceinline__ bool lars_scaled(const LarsTensor& t, const OptGroup& grp) {
  return t.adapt != 0 && grp.weight_decay != 0.0;
}

// Block c: sum p^2 and sum fl(g * inv_scale)^2 over chunk c (adapted tensors only; the others need no norms).
__global__ void lars_norm_kernel(const OptHyper* __restrict__ h, const LarsTensor* __restrict__ tensors,
                                 const LarsChunk* __restrict__ chunks, const float* __restrict__ p,
                                 const float* __restrict__ g, double* __restrict__ norms) {
  const LarsChunk c = chunks[blockIdx.x];
  const LarsTensor t = tensors[c.tensor];
  if (h->skip || !lars_scaled(t, lars_group(h, t.offset))) return;  // uniform over the block (block_sum's barriers)
  const float inv = h->inv_scale;
  double pp = 0.0, gg = 0.0;
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += kReduceBlock) {
    const double pv = p[i], gv = __fmul_rn(g[i], inv);
    pp += pv * pv;  // exact squares (see grad_norm_partial_kernel)
    gg += gv * gv;
  }
  __shared__ double smem[kReduceBlock / 32];
  pp = block_sum(pp, smem);
  gg = block_sum(gg, smem);
  if (threadIdx.x == 0) {
    norms[2 * static_cast<int64_t>(blockIdx.x)] = pp;
    norms[2 * static_cast<int64_t>(blockIdx.x) + 1] = gg;
  }
}

// Block c: its tensor's norms from the chunk sums (same order in every block of the tensor), the trust ratio as
// lars_step_cpu, then the SGD update of chunk c.
__global__ void lars_update_kernel(const OptHyper* __restrict__ h, const LarsTensor* __restrict__ tensors,
                                   const LarsChunk* __restrict__ chunks, const double* __restrict__ norms,
                                   float coef, int32_t trust_clip, float* __restrict__ p,
                                   const float* __restrict__ g, float* __restrict__ buf) {
  const LarsChunk c = chunks[blockIdx.x];
  const LarsTensor t = tensors[c.tensor];
  if (h->skip) return;
  const OptGroup& grp = lars_group(h, t.offset);
  const bool scaled = lars_scaled(t, grp);
  const float wd = static_cast<float>(grp.weight_decay), lr = grp.lr_f, inv = h->inv_scale;
  float ratio = 1.0f;
  if (scaled) {  // uniform over the block
    double pp = 0.0, gg = 0.0;
    for (int32_t k = threadIdx.x; k < t.chunks; k += kReduceBlock) {
      const int64_t j = 2 * static_cast<int64_t>(t.first_chunk + k);
      pp += norms[j];
      gg += norms[j + 1];
    }
    __shared__ double smem[kReduceBlock / 32];
    pp = block_sum(pp, smem);
    gg = block_sum(gg, smem);
    const float w_norm = __double2float_rn(sqrt(pp)), g_norm = __double2float_rn(sqrt(gg));
    const float eps = static_cast<float>(h->eps);
    if (w_norm > 0.0f && g_norm > 0.0f)
      ratio = __fdiv_rn(__fmul_rn(coef, w_norm), __fadd_rn(__fadd_rn(g_norm, __fmul_rn(w_norm, wd)), eps));
    if (trust_clip) {
      const float q = __fdiv_rn(ratio, lr);
      ratio = 1.0f < q ? 1.0f : q;
    }
  }
  const float mom = static_cast<float>(h->momentum), damp = static_cast<float>(1.0 - h->dampening);
  const bool first = h->step == 1, nesterov = h->nesterov != 0;
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += kReduceBlock) {
    const float pi = p[i];
    float d = __fmul_rn(g[i], inv);
    if (scaled) d = __fmul_rn(__fadd_rn(d, __fmul_rn(wd, pi)), ratio);
    if (buf) {
      const float b = first ? d : __fadd_rn(__fmul_rn(buf[i], mom), __fmul_rn(damp, d));
      buf[i] = b;
      d = nesterov ? __fadd_rn(d, __fmul_rn(mom, b)) : b;
    }
    p[i] = __fsub_rn(pi, __fmul_rn(lr, d));
  }
}

}  // namespace

size_t grad_global_norm_workspace_bytes(int64_t n) {
  return static_cast<size_t>(grad_norm_grid(n < 0 ? 0 : n)) * sizeof(double);
}

Status grad_global_norm_cuda(cudaStream_t stream, const OptHyper* h, const float* g, int64_t n, double max_norm,
                             void* workspace, GradClipState* clip) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "grad_global_norm_cuda: n < 0");
  TRCTL_CUDA_ARG_CHECK(h && clip && workspace && (g || n == 0), "grad_global_norm_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(gpu_aligned(8, workspace), "grad_global_norm_cuda: workspace not 8-byte aligned");
  const unsigned grid = grad_norm_grid(n);
  double* partials = static_cast<double*>(workspace);
  if (gpu_aligned(16, g)) {
    grad_norm_partial_kernel<true><<<grid, kReduceBlock, 0, stream>>>(h, g, n, partials);
  } else {
    grad_norm_partial_kernel<false><<<grid, kReduceBlock, 0, stream>>>(h, g, n, partials);
  }
  Status st = TRCTL_CUDA_LAUNCH_STATUS("grad_norm_partial_kernel");
  if (!st.ok()) return st;
  grad_norm_final_kernel<<<1, kReduceBlock, 0, stream>>>(h, partials, static_cast<int32_t>(grid),
                                                        static_cast<float>(max_norm), clip);
  return TRCTL_CUDA_LAUNCH_STATUS("grad_norm_final_kernel");
}

Status grad_clip_fold_cuda(cudaStream_t stream, OptHyper* h, const GradClipState* clip) {
  TRCTL_CUDA_ARG_CHECK(h && clip, "grad_clip_fold_cuda: null pointer");
  grad_clip_fold_kernel<<<1, 1, 0, stream>>>(h, clip);
  return TRCTL_CUDA_LAUNCH_STATUS("grad_clip_fold_kernel");
}

Status grad_clip_scale_cuda(cudaStream_t stream, const OptHyper* h, const GradClipState* clip, float* g, int64_t n) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "grad_clip_scale_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(h && clip && g, "grad_clip_scale_cuda: null pointer");
  const unsigned grid = elementwise_grid((n + 3) / 4);
  if (gpu_aligned(16, g)) {
    grad_clip_scale_kernel<true><<<grid, kElementwiseBlock, 0, stream>>>(h, clip, g, n);
  } else {
    grad_clip_scale_kernel<false><<<grid, kElementwiseBlock, 0, stream>>>(h, clip, g, n);
  }
  return TRCTL_CUDA_LAUNCH_STATUS("grad_clip_scale_kernel");
}

Status ema_update_cuda(cudaStream_t stream, const OptHyper* h, const float* w, float* ema, int64_t n, double decay) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "ema_update_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(h && w && ema, "ema_update_cuda: null pointer");
  const float a = static_cast<float>(1.0 - decay);  // as ema_update_cpu
  const unsigned grid = elementwise_grid((n + 3) / 4);
  if (gpu_aligned(16, w, ema)) {
    ema_update_kernel<true><<<grid, kElementwiseBlock, 0, stream>>>(h, w, ema, n, a);
  } else {
    ema_update_kernel<false><<<grid, kElementwiseBlock, 0, stream>>>(h, w, ema, n, a);
  }
  return TRCTL_CUDA_LAUNCH_STATUS("ema_update_kernel");
}

Status swap_cuda(cudaStream_t stream, float* a, float* b, int64_t n) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "swap_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(a && b, "swap_cuda: null pointer");
  const unsigned grid = elementwise_grid((n + 3) / 4);
  if (gpu_aligned(16, a, b)) {
    swap_kernel<true><<<grid, kElementwiseBlock, 0, stream>>>(a, b, n);
  } else {
    swap_kernel<false><<<grid, kElementwiseBlock, 0, stream>>>(a, b, n);
  }
  return TRCTL_CUDA_LAUNCH_STATUS("swap_kernel");
}

Result<LarsTables> lars_tables(std::vector<LarsTensor> tensors, int64_t chunk_elems) {
  if (chunk_elems <= 0) return Error{ErrCode::Internal, "lars_tables", "chunk size must be positive"};
  LarsTables t;
  for (size_t k = 0; k < tensors.size(); ++k) {
    LarsTensor& x = tensors[k];
    if (x.offset < 0 || x.n < 0)
      return Error{ErrCode::Internal, "lars_tables", "tensor " + std::to_string(k) + ": negative offset or size"};
    const int64_t chunks = (x.n + chunk_elems - 1) / chunk_elems;
    if (static_cast<int64_t>(t.chunks.size()) + chunks > INT32_MAX)
      return Error{ErrCode::Internal, "lars_tables", "more than 2^31 - 1 chunks"};
    x.first_chunk = static_cast<int32_t>(t.chunks.size());
    x.chunks = static_cast<int32_t>(chunks);
    for (int64_t b = x.offset; b < x.offset + x.n; b += chunk_elems) {
      LarsChunk c;
      c.begin = b;
      c.end = std::min(b + chunk_elems, x.offset + x.n);
      c.tensor = static_cast<int32_t>(k);
      t.chunks.push_back(c);
    }
  }
  t.tensors = std::move(tensors);
  return t;
}

size_t lars_workspace_bytes(int32_t chunk_count) {
  return static_cast<size_t>(chunk_count < 0 ? 0 : chunk_count) * 2 * sizeof(double);
}

Status lars_step_cuda(cudaStream_t stream, const OptHyper* h, const LarsDevice& tables, const LarsConsts& consts,
                      float* p, const float* g, float* buf) {
  TRCTL_CUDA_ARG_CHECK(tables.chunk_count >= 0, "lars_step_cuda: chunk_count < 0");
  if (tables.chunk_count == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(h && tables.tensors && tables.chunks && tables.norms && p && g,
                       "lars_step_cuda: null pointer");
  const unsigned grid = static_cast<unsigned>(tables.chunk_count);
  lars_norm_kernel<<<grid, kReduceBlock, 0, stream>>>(h, tables.tensors, tables.chunks, p, g, tables.norms);
  Status st = TRCTL_CUDA_LAUNCH_STATUS("lars_norm_kernel");
  if (!st.ok()) return st;
  lars_update_kernel<<<grid, kReduceBlock, 0, stream>>>(h, tables.tensors, tables.chunks, tables.norms,
                                                       static_cast<float>(consts.trust_coefficient),
                                                       consts.trust_clip ? 1 : 0, p, g, buf);
  return TRCTL_CUDA_LAUNCH_STATUS("lars_update_kernel");
}

}  // namespace trctl
