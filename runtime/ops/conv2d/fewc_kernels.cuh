// Internal to runtime/ops/conv2d/fewc*.cu: what the few-channel tensor-core forward and weight-gradient kernels
// share: the m16n8k16 MMA, the element conversions on raw 16-bit storage, and the input patch loader (fewc.h's
// tiling: patch (rows, cols, 4 channels), zero outside the image and for channels >= C).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/util/error.h"
#include "runtime/cuda/cp_async.cuh"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"  // t_of, f32_of
#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/fewc.h"

namespace trctl {
namespace {

// Lets `kernel` launch with up to `cap` bytes of dynamic shared memory (the rule's kFewcMaxSmemBytes, or the
// batch-norm prologue's kFewcMaxBnSmemBytes for its kernel). The attribute belongs to the kernel, not to a plan:
// set to the cap, which every plan of the kernel is within, a later plan with less shared memory (another geometry:
// validation at a second size) does not lower it below an earlier plan's launch (cudaErrorInvalidValue).
template <class Kernel>
cudaError_t fewc_allow_smem_cap(Kernel kernel, int64_t cap = kFewcMaxSmemBytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(cap));
}

// SMs of the current device, and CTAs of `kernel` (threads, smem bytes) resident per SM (0: none fits), after
// allowing it `cap` bytes: what a plan sizes its persistent grid from.
inline Result<int> fewc_sm_count() {
  int dev = 0, sms = 0;
  TRCTL_CUDA_TRY(cudaGetDevice(&dev));
  TRCTL_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}
template <class Kernel>
Result<int> fewc_resident_ctas(Kernel kernel, int threads, int64_t smem, int64_t cap = kFewcMaxSmemBytes) {
  TRCTL_CUDA_TRY(fewc_allow_smem_cap(kernel, cap));
  int per_sm = 0;
  TRCTL_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, static_cast<int>(smem)));
  return per_sm;
}

// acc += A (16x16, row) * B (16x8, col) in fp32.
template <class T>
__device__ __forceinline__ void mma16816(float (&acc)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Whether load_patch may read x's rows in 16-byte pieces: x 16-byte aligned, W * C a multiple of 8 elements.
inline int fewc_rows_vectorizable(const Conv2dGeom& g, const void* x) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && (g.w * g.c) % 8 == 0 ? 1 : 0;
}

struct PatchGeom {
  int h, w, c, stride, pad_h, pad_w, rows, cols;  // input (H, W, C), the conv's stride and padding, the patch
  bool vec;  // every input row starts 16-byte aligned and holds a multiple of 8 elements: 16-byte loads
};

// patch (rows, cols, 4) := 0, once per CTA: load_patch never writes the columns outside the image nor the channels
// >= C, so they stay 0 for every task.
__device__ __forceinline__ void zero_patch(const PatchGeom& pg, uint16_t* patch) {
  for (int i = threadIdx.x; i < pg.rows * pg.cols; i += blockDim.x) reinterpret_cast<uint2*>(patch)[i] = uint2{0, 0};
}

// The patch of output rows p0.. from image xn (H, W, C), by the whole block (no barrier inside): patch row pr is
// input row ih = p0 * stride - pad_h + pr (0 outside the image); of it only the in-image span [0, W * C) is written
// (pixel e / C at column pad_w + e / C, channel e % C), with kUnroll loads in flight per thread: 16-byte pieces when
// pg.vec, else single elements.
__device__ __forceinline__ void load_patch(const uint16_t* __restrict__ xn, const PatchGeom& pg, int p0,
                                           uint16_t* patch) {
  constexpr int kUnroll = 4;
  const int rowlen = pg.w * pg.c, per = pg.vec ? 8 : 1, pieces = rowlen / per, total = pg.rows * pieces;
  const int shift = pg.c == 1 ? 0 : pg.c == 2 ? 1 : 2;  // e / C for C = 1, 2, 4 (C = 3 divides)
  const int nthreads = static_cast<int>(blockDim.x);
  for (int i0 = static_cast<int>(threadIdx.x); i0 < total; i0 += kUnroll * nthreads) {
    uint16_t v[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * nthreads;
      const int pr = i / pieces, j = i - pr * pieces;
      const int ih = p0 * pg.stride - pg.pad_h + pr;
      const bool in = i < total && ih >= 0 && ih < pg.h;
      const uint16_t* src = xn + static_cast<int64_t>(ih) * rowlen + j * per;
      if (pg.vec) {
        const uint4 q = in ? *reinterpret_cast<const uint4*>(src) : uint4{0, 0, 0, 0};
        memcpy(v[u], &q, 16);
      } else {
        v[u][0] = in ? *src : uint16_t{0};
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * nthreads;
      if (i >= total) break;
      const int pr = i / pieces, j = i - pr * pieces;
      uint16_t* row = patch + static_cast<int64_t>(pr) * pg.cols * 4;
      for (int e = 0; e < per; ++e) {
        const int el = j * per + e;
        const int px = pg.c == 3 ? el / 3 : el >> shift;
        row[(pg.pad_w + px) * 4 + (el - px * pg.c)] = v[u][e];
      }
    }
  }
}

// The pipelined patch (pg.vec only): prefetch_patch_rows starts copying the in-image input rows of the patch of
// output rows p0.. of image xn, as they are, into raw (rows, W * C) with cp.async (rows outside the image are
// not copied); after cp_async_wait_all and a barrier, scatter_patch writes them into the patch (4 channels per
// pixel at column pad_w + pixel; rows outside the image 0), reading shared memory only. Both by the whole block,
// no barrier inside.
__device__ __forceinline__ void prefetch_patch_rows(const uint16_t* __restrict__ xn, const PatchGeom& pg, int p0,
                                                    uint16_t* raw) {
  const int rowlen = pg.w * pg.c, pieces = rowlen / 8, total = pg.rows * pieces;
  for (int i = static_cast<int>(threadIdx.x); i < total; i += static_cast<int>(blockDim.x)) {
    const int pr = i / pieces, j = i - pr * pieces;
    const int ih = p0 * pg.stride - pg.pad_h + pr;
    if (ih >= 0 && ih < pg.h)
      cp_async16(raw + static_cast<int64_t>(pr) * rowlen + j * 8, xn + static_cast<int64_t>(ih) * rowlen + j * 8);
  }
}
__device__ __forceinline__ void scatter_patch(const uint16_t* raw, const PatchGeom& pg, int p0, uint16_t* patch) {
  const int rowlen = pg.w * pg.c;
  if (pg.c == 3) {
    // Groups of 8 pixels (48 bytes: 12 words w) per thread: pixel 2k is (w[3k], low half of w[3k+1]), pixel
    // 2k+1 (high half of w[3k+1] | low half of w[3k+2], high half of w[3k+2]); each pixel one 8-byte store
    // (channel 3 zero). A row's last W % 8 pixels are copied one element at a time.
    const int groups = pg.w / 8, tail = pg.w - groups * 8, per_row = groups + tail;
    const int total = pg.rows * per_row;
    for (int i = static_cast<int>(threadIdx.x); i < total; i += static_cast<int>(blockDim.x)) {
      const int pr = i / per_row, j = i - pr * per_row;
      const int ih = p0 * pg.stride - pg.pad_h + pr;
      const bool in = ih >= 0 && ih < pg.h;
      uint2* dst = reinterpret_cast<uint2*>(patch) + pr * pg.cols + pg.pad_w;  // (cols) pixels of 4 channels
      if (j < groups) {
        uint32_t w[12];
        const uint4* src = reinterpret_cast<const uint4*>(raw + pr * rowlen + j * 24);
#pragma unroll
        for (int u = 0; u < 3; ++u) {
          const uint4 q = in ? src[u] : uint4{0, 0, 0, 0};
          w[4 * u] = q.x, w[4 * u + 1] = q.y, w[4 * u + 2] = q.z, w[4 * u + 3] = q.w;
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          dst[j * 8 + 2 * k] = uint2{w[3 * k], w[3 * k + 1] & 0xffffu};
          dst[j * 8 + 2 * k + 1] = uint2{__byte_perm(w[3 * k + 1], w[3 * k + 2], 0x5432), w[3 * k + 2] >> 16};
        }
      } else {
        const int px = groups * 8 + (j - groups);
        const uint16_t* e = raw + pr * rowlen + px * 3;
        const uint32_t c0 = in ? e[0] : 0u, c1 = in ? e[1] : 0u, c2 = in ? e[2] : 0u;
        dst[px] = uint2{c0 | (c1 << 16), c2};
      }
    }
    return;
  }
  const int pieces = rowlen / 8, total = pg.rows * pieces;
  const int shift = pg.c == 1 ? 0 : pg.c == 2 ? 1 : 2;  // e / C for C = 1, 2, 4
  for (int i = static_cast<int>(threadIdx.x); i < total; i += static_cast<int>(blockDim.x)) {
    const int pr = i / pieces, j = i - pr * pieces;
    const int ih = p0 * pg.stride - pg.pad_h + pr;
    uint16_t v[8];
    const uint4 q = ih >= 0 && ih < pg.h ? *reinterpret_cast<const uint4*>(raw + pr * rowlen + j * 8)
                                         : uint4{0, 0, 0, 0};
    memcpy(v, &q, 16);
    uint16_t* row = patch + pr * pg.cols * 4;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int el = j * 8 + e;
      const int px = el >> shift;
      row[(pg.pad_w + px) * 4 + (el - (px << shift))] = v[e];
    }
  }
}

}  // namespace
}  // namespace trctl
