// Device-side helpers shared by the kernels in runtime/ops/*/*.cu: float conversion of the element types, aligned
// vector packs for 16-byte loads/stores, warp reductions, and the typed dispatch of GpuDType. Include only from .cu.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
// The element of type T (the second argument picks it) with bit pattern b, and its value as float.
__device__ __forceinline__ __half t_of(uint16_t b, __half) { return __ushort_as_half(b); }
__device__ __forceinline__ __nv_bfloat16 t_of(uint16_t b, __nv_bfloat16) { return __ushort_as_bfloat16(b); }
__device__ __forceinline__ float f32_of(uint16_t b, __half) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ float f32_of(uint16_t b, __nv_bfloat16) {
  return __bfloat162float(__ushort_as_bfloat16(b));
}

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Two floats rounded to T (__half or __nv_bfloat16) each as from_f32<T> does, packed low then high into one word
// (one conversion instruction for the pair).
template <class T>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// v to global p (16-byte aligned) when pred, as one predicated 16-byte store instruction. `*reinterpret_cast<uint4*>(p)
// = v` is split into four 4-byte stores when the kernel also takes v's words apart (the fewc forward's statistics:
// NVVM scalarised the store, RESULTS.md run 69), and `if (pred)` around a store put it in a branch with its
// convergence barrier (the fewc forward's pieces, ~8 instructions a 16-byte store with the rebuilt address, run 77).
__device__ __forceinline__ void st_global_v4_if(bool pred, void* p, const uint4& v) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p st.global.v4.b32 [%0], {%1, %2, %3, %4};\n}\n" ::"l"(p),
      "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(static_cast<int>(pred))
      : "memory");
}

// V consecutive elements, aligned to their total size so that one load/store instruction moves them.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <int V, class T>
__device__ __forceinline__ Pack<T, V> pack_load(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}
template <int V, class T>
__device__ __forceinline__ void pack_store(T* p, const Pack<T, V>& x) {
  *reinterpret_cast<Pack<T, V>*>(p) = x;
}

// V bytes (the max pool's argmax offsets, u8 per element) at p: one 8-byte access when V == 8 (p must then be
// 8-byte aligned: the index buffers are, and their rows hold C % 8 == 0 bytes), else byte by byte.
template <int V>
__device__ __forceinline__ void load_bytes(const uint8_t* p, uint8_t (&b)[V]) {
  if constexpr (V == 8) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    memcpy(b, &u, 8);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) b[j] = p[j];
  }
}
template <int V>
__device__ __forceinline__ void store_bytes(uint8_t* p, const uint8_t (&b)[V]) {
  if constexpr (V == 8) {
    uint2 u;
    memcpy(&u, b, 8);
    *reinterpret_cast<uint2*>(p) = u;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = b[j];
  }
}

// Elements per 16-byte vector.
template <class T>
constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

__device__ __forceinline__ int64_t grid_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_thread_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Butterfly sums: every lane ends with the same value, and the order of additions is fixed by the lane pattern,
// so the result is bitwise reproducible.
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ double warp_sum(double x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Dispatch a GpuDType to a C++ type: f(type_tag<T>{}) with T in {float, __half, __nv_bfloat16}.
template <class T>
struct type_tag {
  using type = T;
};

template <class F>
__host__ auto dispatch_dtype(GpuDType t, F&& f) {
  switch (t) {
    case GpuDType::F16: return f(type_tag<__half>{});
    case GpuDType::BF16: return f(type_tag<__nv_bfloat16>{});
    case GpuDType::F32: break;
  }
  return f(type_tag<float>{});
}

}  // namespace trctl
