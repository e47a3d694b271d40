// Internal to the .cu files whose warps load mma / wgmma fragments from shared memory (the few-channel conv
// kernels, runtime/ops/conv2d/fewc*.cu, and the ring weight gradient, wgconv_wgrad_sm90a.cu): ldmatrix.x4, plain and
// transposed, of the four 8x8 b16 matrices whose rows this warp's lanes address (lanes 8 i .. 8 i + 7: matrix i).
// Internal linkage (an anonymous namespace), device code.
#pragma once
#include <cstdint>

namespace trctl {
namespace {

// Lane (g, t) = (lane / 4, lane % 4) receives, in r[i], row g's elements (2t, 2t + 1) of matrix i (addr: a
// shared-window address, cp_async.cuh's smem_addr).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// ... transposed: r[i] holds rows (2t, 2t + 1) of column g of matrix i.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

}  // namespace
}  // namespace trctl
