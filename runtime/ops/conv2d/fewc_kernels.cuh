// Internal to runtime/ops/conv2d/fewc*.cu: what the few-channel tensor-core forward and weight-gradient kernels
// share: the m16n8k16 MMA, the element conversions on raw 16-bit storage, and the input patch loader (fewc.h's
// tiling: patch (rows, cols, 4 channels), zero outside the image and for channels >= C).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace trctl {
namespace {

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

__device__ __forceinline__ uint16_t bits_of(float v, __half) { return __half_as_ushort(__float2half_rn(v)); }
__device__ __forceinline__ uint16_t bits_of(float v, __nv_bfloat16) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float f32_of(uint16_t b, __half) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ float f32_of(uint16_t b, __nv_bfloat16) {
  return __bfloat162float(__ushort_as_bfloat16(b));
}

struct PatchGeom {
  int h, w, c, stride, pad_h, pad_w, rows, cols;  // input (H, W, C), the conv's stride and padding, the patch
};

// patch (rows, cols, 4) of image xn (H, W, C) for output rows p0.., by the whole block (no barrier inside).
__device__ __forceinline__ void load_patch(const uint16_t* __restrict__ xn, const PatchGeom& pg, int p0,
                                           uint16_t* patch) {
    // kLoadUnroll pixels per thread and round, all loads issued before the stores: more loads in flight.
    constexpr int kLoadUnroll = 4;
    const int npix = pg.rows * pg.cols;
    for (int i0 = static_cast<int>(threadIdx.x); i0 < npix; i0 += kLoadUnroll * static_cast<int>(blockDim.x)) {
      uint16_t v[kLoadUnroll][4];
#pragma unroll
      for (int u = 0; u < kLoadUnroll; ++u) {
        const int i = i0 + u * static_cast<int>(blockDim.x);
        const int pr = i / pg.cols, pc = i - pr * pg.cols;
        const int ih = p0 * pg.stride - pg.pad_h + pr, iw = pc - pg.pad_w;
        const bool in = i < npix && ih >= 0 && ih < pg.h && iw >= 0 && iw < pg.w;
        const uint16_t* px = xn + (static_cast<int64_t>(ih) * pg.w + iw) * pg.c;
#pragma unroll
        for (int c = 0; c < 4; ++c) v[u][c] = (in && c < pg.c) ? px[c] : uint16_t{0};
      }
#pragma unroll
      for (int u = 0; u < kLoadUnroll; ++u) {
        const int i = i0 + u * static_cast<int>(blockDim.x);
        if (i >= npix) break;
        uint2 w2;
        w2.x = static_cast<uint32_t>(v[u][0]) | (static_cast<uint32_t>(v[u][1]) << 16);
        w2.y = static_cast<uint32_t>(v[u][2]) | (static_cast<uint32_t>(v[u][3]) << 16);
        reinterpret_cast<uint2*>(patch)[i] = w2;
      }
    }
}

}  // namespace
}  // namespace trctl
