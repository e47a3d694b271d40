// Internal to the .cu files that stage global memory into shared memory asynchronously (the few-channel conv
// kernels, runtime/ops/conv2d/fewc*.cu, and the wgmma conv, wgconv_sm90a.cu): cp.async of 16 bytes with zero fill,
// its groups, and a generic pointer's shared-window address. Internal linkage (an anonymous namespace), device code.
#pragma once
#include <cstdint>

namespace trctl {
namespace {

// The shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared (a shared-window address), bypassing L1; src_bytes 0 writes 16 zero bytes and reads
// nothing.
__device__ __forceinline__ void cp_async16(uint32_t smem_dst, const void* gsrc, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gsrc), "r"(src_bytes)
               : "memory");
}
// The same to a generic pointer into shared memory.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gsrc, int src_bytes = 16) {
  cp_async16(smem_addr(smem_dst), gsrc, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `Pending` of this thread's committed groups are in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

}  // namespace
}  // namespace trctl
