// The warpgroup tensor-core 3x3 convolution forward (wgconv.h): the kernel, its plan and launch. Compiled for sm_90a
// alone (CMakeLists.txt: the *_sm90a.cu files), as wgmma needs.
//
// CTA: 256 threads = two warpgroups; tile BM output pixels x BN output channels; warpgroup g owns pixel rows
// [g * BM/2, (g + 1) * BM/2) as BM/128 blocks of 64 (one m64nBNk16 accumulator each, BN/2 f32 per thread).
// Reduction steps ("chunks"): it = tap * (C/64) + cc for tap 0..8 (r-major) and channel chunk cc; each stages
//   A (BM x 64): pixel m's input at (p + tap/3 - 1, q + tap%3 - 1), channels [64 cc, 64 cc + 64), zero outside,
//   B (BN x 64): w[k][tap][64 cc ..] for the tile's BN output channels,
// 128-byte rows swizzled (wgmma_sm90a.cuh), through cp.async: thread t loads 16-byte piece t % 8 of rows
// t / 8 + 32 j. Ring of S stages, loads issued S - 2 chunks ahead: at chunk it, after the barrier, every
// warpgroup has waited for its wgmma of chunk it - 2 (wait_group 1 after each chunk's commit), so that chunk's
// stage is free for chunk it + S - 2.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/wgmma_sm90a.cuh"
#include "runtime/ops/conv2d/wgconv.h"

namespace trctl {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSmem = 227 * 1024;

// Ring depth per tile: as many 24-48 KiB stages as keep the CTA within the limit, two CTAs per SM for 128x64.
constexpr int wg_stages(int bm, int bn) { return bm == 128 && bn == 64 ? 4 : (bm + bn) * 128 * 5 <= 200 * 1024 ? 5 : 4; }
constexpr size_t wg_smem(int bm, int bn) { return static_cast<size_t>(wg_stages(bm, bn)) * (bm + bn) * 128 + 1024; }

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

template <class T, int BN>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 2], uint64_t a, uint64_t b) {
  if constexpr (BN == 64)
    wgmma_m64n64k16<T>(d, a, b);
  else
    wgmma_m64n128k16<T>(d, a, b);
}

// x (N, H, W, C), w (K, 3, 3, C), y (N, H, W, K) of type T; a 1-D grid of (K / BN) * ceil(N*H*W / BM) CTAs, the
// output-channel tiles of one pixel tile adjacent (they share its input rows in L2).
template <class T, int BM, int BN>
__global__ void __launch_bounds__(kThreads, BM == 128 && BN == 64 ? 2 : 1)
    wgconv_fwd_kernel(const void* __restrict__ xv, const void* __restrict__ wv, void* __restrict__ yv, int n_img,
                      int h, int wd, int c, int k) {
  const T* __restrict__ x = static_cast<const T*>(xv);
  const T* __restrict__ w = static_cast<const T*>(wv);
  T* __restrict__ y = static_cast<T*>(yv);
  constexpr int S = wg_stages(BM, BN);
  constexpr int WGM = BM / 128;                  // m64 blocks per warpgroup
  constexpr int A_BYTES = BM * 128, STAGE = (BM + BN) * 128;
  constexpr int AR = BM / 32, BR = BN / 32;      // rows this thread loads per chunk
  extern __shared__ uint8_t smem_raw[];
  const uint32_t sbase = (smem_addr(smem_raw) + 1023u) & ~1023u;

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int n_tiles = k / BN;
  const int n0 = static_cast<int>(blockIdx.x % n_tiles) * BN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x / n_tiles) * BM;
  const int64_t m_total = static_cast<int64_t>(n_img) * h * wd;
  const int cchunks = c >> 6, chunks = 9 * cchunks;

  // Loader state. Row r = tid / 8 + 32 j; its 16-byte piece tid % 8 lands at the same swizzled column for every j
  // (r % 8 == (tid / 8) % 8).
  const int piece = tid & 7, row0 = tid >> 3;
  const uint32_t col = sw128_offset(row0 & 7, piece) - static_cast<uint32_t>((row0 & 7) * 128);
  int a_off[AR];  // element offset of the output pixel's own input pixel, channel piece included
  int a_pq[AR];   // p << 16 | q, or -1 past the last pixel
#pragma unroll
  for (int j = 0; j < AR; ++j) {
    const int64_t m = m0 + row0 + 32 * j;
    if (m < m_total) {
      const int q = static_cast<int>(m % wd);
      const int64_t t = m / wd;
      const int p = static_cast<int>(t % h);
      a_off[j] = static_cast<int>(m) * c + piece * 8;  // (n, p, q) of y is (n, p, q) of x: stride 1, same size
      a_pq[j] = (p << 16) | q;
    } else {
      a_off[j] = 0;
      a_pq[j] = -1;
    }
  }
  const int b_off = (n0 + row0) * 9 * c + piece * 8;

  auto load = [&](int it, int stage) {
    const int tap = it / cchunks, cc = it - tap * cchunks;
    const int dr = tap / 3 - 1, ds = tap % 3 - 1;
    const uint32_t sa = sbase + stage * STAGE, sb = sa + A_BYTES;
    const int shift = (dr * wd + ds) * c + cc * 64;
#pragma unroll
    for (int j = 0; j < AR; ++j) {
      const int p = a_pq[j] >> 16, q = a_pq[j] & 0xFFFF;
      const bool ok = a_pq[j] >= 0 && static_cast<unsigned>(p + dr) < static_cast<unsigned>(h) &&
                      static_cast<unsigned>(q + ds) < static_cast<unsigned>(wd);
      cp_async16(sa + (row0 + 32 * j) * 128 + col, ok ? x + (a_off[j] + shift) : x, ok ? 16 : 0);
    }
    const int wshift = tap * c + cc * 64;
#pragma unroll
    for (int j = 0; j < BR; ++j) cp_async16(sb + (row0 + 32 * j) * 128 + col, w + (b_off + 32 * j * 9 * c + wshift), 16);
  };

  float acc[WGM][BN / 2];
#pragma unroll
  for (int mb = 0; mb < WGM; ++mb)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[mb][i] = 0.0f;

#pragma unroll
  for (int s = 0; s < S - 2; ++s) {
    if (s < chunks) load(s, s);
    cp_async_commit();
  }
  for (int it = 0; it < chunks; ++it) {
    cp_async_wait<S - 3>();  // this thread's pieces of chunk `it` are in
    fence_proxy_async();
    __syncthreads();  // everyone's are; every warpgroup is past its wgmma of chunk it - 2
    const int next = it + S - 2;
    if (next < chunks) load(next, next % S);
    cp_async_commit();
    const uint32_t sa = sbase + (it % S) * STAGE, sb = sa + A_BYTES;
#pragma unroll
    for (int mb = 0; mb < WGM; ++mb)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_operand(acc[mb][i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t db = sw128_desc(sb + kk * 32);
#pragma unroll
      for (int mb = 0; mb < WGM; ++mb)
        wgmma_tile<T, BN>(acc[mb], sw128_desc(sa + (wg * WGM + mb) * 64 * 128 + kk * 32), db);
    }
    wgmma_commit();
    wgmma_wait<1>();
#pragma unroll
    for (int mb = 0; mb < WGM; ++mb)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_operand(acc[mb][i]);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int mb = 0; mb < WGM; ++mb)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) fence_operand(acc[mb][i]);

  // Epilogue: the m64nBN fragment -- thread (warp, lane) holds rows 16 warp + lane / 4 (+ 8), columns
  // 8 j + 2 (lane % 4) (+ 1) in registers 4 j + {0, 1} (+ {2, 3} for the row + 8).
#pragma unroll
  for (int mb = 0; mb < WGM; ++mb) {
    const int64_t r = m0 + (wg * WGM + mb) * 64 + warp * 16 + (lane >> 2);
    T* y0 = y + r * k + n0 + 2 * (lane & 3);
    T* y8 = y0 + static_cast<int64_t>(8) * k;
    const bool ok0 = r < m_total, ok8 = r + 8 < m_total;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      if (ok0) *reinterpret_cast<uint32_t*>(y0 + 8 * j) = pack2<T>(acc[mb][4 * j], acc[mb][4 * j + 1]);
      if (ok8) *reinterpret_cast<uint32_t*>(y8 + 8 * j) = pack2<T>(acc[mb][4 * j + 2], acc[mb][4 * j + 3]);
    }
  }
}

using WgKernel = void (*)(const void*, const void*, void*, int, int, int, int, int);

template <class T, int BM, int BN>
WgKernel wg_kernel_t() {
  return &wgconv_fwd_kernel<T, BM, BN>;
}
template <class T>
WgKernel wg_kernel_io(WgConvTile t) {
  switch (t) {
    case WgConvTile::M128N64: return wg_kernel_t<T, 128, 64>();
    case WgConvTile::M256N64: return wg_kernel_t<T, 256, 64>();
    case WgConvTile::M128N128: return wg_kernel_t<T, 128, 128>();
    case WgConvTile::M256N128: return wg_kernel_t<T, 256, 128>();
  }
  return nullptr;
}
WgKernel wg_kernel(GpuDType io, WgConvTile t) {
  return io == GpuDType::F16 ? wg_kernel_io<__half>(t) : wg_kernel_io<__nv_bfloat16>(t);
}

void tile_dims(WgConvTile t, int* bm, int* bn) {
  *bm = t == WgConvTile::M256N64 || t == WgConvTile::M256N128 ? 256 : 128;
  *bn = t == WgConvTile::M128N128 || t == WgConvTile::M256N128 ? 128 : 64;
}

}  // namespace

const char* wgconv_tile_name(WgConvTile t) {
  switch (t) {
    case WgConvTile::M128N64: return "128x64";
    case WgConvTile::M256N64: return "256x64";
    case WgConvTile::M128N128: return "128x128";
    case WgConvTile::M256N128: return "256x128";
  }
  return "?";
}

bool wgconv_eligible(const Conv2dGeom& g, std::string* why) {
  auto no = [&](const std::string& s) {
    if (why) *why = s;
    return false;
  };
  if (g.r != 3 || g.s != 3 || g.stride_h != 1 || g.stride_w != 1 || g.pad_h != 1 || g.pad_w != 1 || g.dil_h != 1 ||
      g.dil_w != 1)
    return no("not a 3x3 stride-1 padding-1 undilated conv");
  if (g.groups != 1) return no("grouped");
  if (g.c % 64 != 0 || g.k % 64 != 0) return no("C and K must be multiples of 64");
  if (g.p != g.h || g.q != g.w) return no("output size differs from the input's");
  if (g.h >= 32768 || g.w >= 32768) return no("H or W of 32768 or more");
  const int64_t lim = static_cast<int64_t>(1) << 31;
  if (g.n * g.h * g.w * g.c >= lim || g.n * g.h * g.w * g.k >= lim || g.k * 9 * g.c >= lim)
    return no("a tensor of 2^31 elements or more");
  return true;
}

WgConvTile wgconv_default_tile(const Conv2dGeom& g) {
  return g.k % 128 == 0 ? WgConvTile::M128N128 : WgConvTile::M128N64;
}

Result<WgConvPlan> wgconv_plan(const Conv2dGeom& g, GpuDType io, WgConvTile tile) {
  if (io != GpuDType::F16 && io != GpuDType::BF16)
    return Error{ErrCode::NotSupported, "wgconv",
                 std::string("the wgmma conv takes f16 or bf16, not ") + gpu_dtype_name(io)};
  std::string why;
  if (!wgconv_eligible(g, &why))
    return Error{ErrCode::NotSupported, "wgconv", why + ": " + conv2d_geom_str(g)};
  int dev = 0, major = 0, minor = 0;
  TRCTL_CUDA_TRY(cudaGetDevice(&dev));
  TRCTL_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  TRCTL_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0)
    return Error{ErrCode::NotSupported, "wgconv",
                 "the wgmma conv runs on compute capability 9.0 only, not " + std::to_string(major) + "." +
                     std::to_string(minor)};
  WgConvPlan p;
  p.g = g;
  p.io = io;
  p.tile = tile;
  tile_dims(tile, &p.bm, &p.bn);
  if (g.k % p.bn != 0)
    return Error{ErrCode::NotSupported, "wgconv",
                 std::string("tile ") + wgconv_tile_name(tile) + " needs K % " + std::to_string(p.bn) + " == 0"};
  p.stages = wg_stages(p.bm, p.bn);
  p.smem_bytes = wg_smem(p.bm, p.bn);
  if (p.smem_bytes > static_cast<size_t>(kMaxSmem))
    return Error{ErrCode::Internal, "wgconv", "tile over the shared-memory limit"};
  p.grid_n = g.k / p.bn;
  p.grid_m = (g.n * g.h * g.w + p.bm - 1) / p.bm;
  TRCTL_CUDA_TRY(cudaFuncSetAttribute(wg_kernel(io, tile),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(p.smem_bytes)));
  return p;
}

Status wgconv_fwd_cuda(cudaStream_t stream, const WgConvPlan& p, const void* x, const void* w, void* y) {
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(y) % 4 != 0)
    return Error{ErrCode::Internal, "wgconv", "x and w must be 16-byte aligned, y 4-byte aligned"};
  const int64_t ctas = p.grid_m * p.grid_n;
  if (ctas >= (static_cast<int64_t>(1) << 31)) return Error{ErrCode::Internal, "wgconv", "grid too large"};
  const dim3 grid(static_cast<unsigned>(ctas));
  const Conv2dGeom& g = p.g;
  wg_kernel(p.io, p.tile)<<<grid, kThreads, p.smem_bytes, stream>>>(
      x, w, y, static_cast<int>(g.n), static_cast<int>(g.h), static_cast<int>(g.w), static_cast<int>(g.c),
      static_cast<int>(g.k));
  TRCTL_CUDA_TRY(cudaGetLastError());
  return ok_status();
}

}  // namespace trctl
