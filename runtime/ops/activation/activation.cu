// Activation kernels: one 16-byte vector per thread in a grid-stride loop (as relu.cu), scalar fallback for
// misaligned views; one instantiation per kind so the formula's switch folds away.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/activation/activation.h"
#include "runtime/ops/activation/activation_cuda.h"

namespace trctl {

namespace {

template <ActKind K, class T>
__device__ __forceinline__ T fwd1(T x, float a) {
  return from_f32<T>(act_forward<float>(K, to_f32(x), a));
}

template <ActKind K, class T>
__device__ __forceinline__ T bwd1(T dy, T saved, float a) {
  return from_f32<T>(act_backward<float>(K, to_f32(dy), to_f32(saved), a));
}

// Chunks of V elements; only the last chunk may be partial and takes the scalar path.
template <ActKind K, class T, int V>
__global__ void act_fwd_kernel(const T* x, T* y, int64_t n, float a) {
  const int64_t chunks = (n + V - 1) / V;
  for (int64_t c = grid_thread_index(); c < chunks; c += grid_thread_count()) {
    const int64_t base = c * V;
    if (base + V <= n) {
      Pack<T, V> p = pack_load<V>(x + base);
#pragma unroll
      for (int j = 0; j < V; ++j) p.v[j] = fwd1<K>(p.v[j], a);
      pack_store<V>(y + base, p);
    } else {
      for (int64_t i = base; i < n; ++i) y[i] = fwd1<K>(x[i], a);
    }
  }
}

template <ActKind K, class T, int V>
__global__ void act_bwd_kernel(const T* __restrict__ saved, const T* dy, T* dx, int64_t n, float a) {
  const int64_t chunks = (n + V - 1) / V;
  for (int64_t c = grid_thread_index(); c < chunks; c += grid_thread_count()) {
    const int64_t base = c * V;
    if (base + V <= n) {
      const Pack<T, V> ps = pack_load<V>(saved + base);
      Pack<T, V> pg = pack_load<V>(dy + base);
#pragma unroll
      for (int j = 0; j < V; ++j) pg.v[j] = bwd1<K>(pg.v[j], ps.v[j], a);
      pack_store<V>(dx + base, pg);
    } else {
      for (int64_t i = base; i < n; ++i) dx[i] = bwd1<K>(dy[i], saved[i], a);
    }
  }
}

// f(std::integral_constant-like tag) for the runtime kind.
template <ActKind K>
struct kind_tag {
  static constexpr ActKind value = K;
};

template <class F>
Status dispatch_kind(ActKind k, F&& f) {
  switch (k) {
    case ActKind::Relu6: return f(kind_tag<ActKind::Relu6>{});
    case ActKind::LeakyRelu: return f(kind_tag<ActKind::LeakyRelu>{});
    case ActKind::Elu: return f(kind_tag<ActKind::Elu>{});
    case ActKind::Silu: return f(kind_tag<ActKind::Silu>{});
    case ActKind::Hardswish: return f(kind_tag<ActKind::Hardswish>{});
    case ActKind::Sigmoid: return f(kind_tag<ActKind::Sigmoid>{});
    case ActKind::Tanh: return f(kind_tag<ActKind::Tanh>{});
  }
  return Error{ErrCode::Invalid, "activation", "unknown activation kind " + std::to_string(static_cast<int>(k))};
}

}  // namespace

Status activation_fwd_cuda(cudaStream_t stream, ActKind kind, float param, const void* x, void* y, int64_t n,
                           GpuDType dtype) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "activation_fwd_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(x && y, "activation_fwd_cuda: null pointer");
  return dispatch_kind(kind, [&](auto ktag) {
    constexpr ActKind K = decltype(ktag)::value;
    return dispatch_dtype(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr int V = kVec16<T>;
      const T* xs = static_cast<const T*>(x);
      T* ys = static_cast<T*>(y);
      if (gpu_aligned(16, x, y)) {
        act_fwd_kernel<K, T, V><<<elementwise_grid((n + V - 1) / V), kElementwiseBlock, 0, stream>>>(xs, ys, n, param);
      } else {
        act_fwd_kernel<K, T, 1><<<elementwise_grid(n), kElementwiseBlock, 0, stream>>>(xs, ys, n, param);
      }
      return TRCTL_CUDA_LAUNCH_STATUS("act_fwd_kernel");
    });
  });
}

Status activation_bwd_cuda(cudaStream_t stream, ActKind kind, float param, const void* saved, const void* dy,
                           void* dx, int64_t n, GpuDType dtype) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "activation_bwd_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(saved && dy && dx, "activation_bwd_cuda: null pointer");
  return dispatch_kind(kind, [&](auto ktag) {
    constexpr ActKind K = decltype(ktag)::value;
    return dispatch_dtype(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr int V = kVec16<T>;
      const T* ss = static_cast<const T*>(saved);
      const T* gs = static_cast<const T*>(dy);
      T* out = static_cast<T*>(dx);
      if (gpu_aligned(16, saved, dy, dx)) {
        act_bwd_kernel<K, T, V><<<elementwise_grid((n + V - 1) / V), kElementwiseBlock, 0, stream>>>(ss, gs, out, n,
                                                                                                     param);
      } else {
        act_bwd_kernel<K, T, 1><<<elementwise_grid(n), kElementwiseBlock, 0, stream>>>(ss, gs, out, n, param);
      }
      return TRCTL_CUDA_LAUNCH_STATUS("act_bwd_kernel");
    });
  });
}

}  // namespace trctl
