// The warpgroup tensor-core 3x3 convolution forward (wgconv.h): the tiled kernel, the row-ring kernels (further
// down, with their own comment), their plan and launch, and the filter flip of the data gradient. Compiled for
// sm_90a alone (CMakeLists.txt: the *_sm90a.cu files), as wgmma needs.
//
// Tiled kernel. CTA: 256 threads = two warpgroups; tile BM output pixels x BN output channels; warpgroup g owns
// pixel rows [g * BM/2, (g + 1) * BM/2) as BM/128 blocks of 64 (one m64nBNk16 accumulator each, BN/2 f32 per thread).
// Reduction steps ("chunks"): it = tap * (C/64) + cc for tap 0..8 (r-major) and channel chunk cc; each stages
//   A (BM x 64): pixel m's input at (p + tap/3 - 1, q + tap%3 - 1), channels [64 cc, 64 cc + 64), zero outside,
//   B (BN x 64): w[k][tap][64 cc ..] for the tile's BN output channels,
// 128-byte rows swizzled (wgmma_sm90a.cuh), through cp.async: thread t loads 16-byte piece t % 8 of rows
// t / 8 + 32 j. A circular buffer of S stages, loads issued S - 2 chunks ahead: at chunk it, after the barrier, every
// warpgroup has waited for its wgmma of chunk it - 2 (wait_group 1 after each chunk's commit), so that chunk's
// stage is free for chunk it + S - 2.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/cuda/wgmma_sm90a.cuh"
#include "runtime/ops/batchnorm/bn_elem.cuh"
#include "runtime/ops/conv2d/dgrad_fwd_cuda.h"
#include "runtime/ops/conv2d/wgconv.h"
#include "runtime/ops/conv2d/wgconv_ring.cuh"

namespace trctl {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSmem = static_cast<int>(kWgconvMaxSmemBytes);

// Stages per tile: as many 24-48 KiB stages as keep the CTA within the limit, two CTAs per SM for 128x64.
constexpr int wg_stages(int bm, int bn) {
  return bm == 128 && bn == 64 ? 4 : (bm + bn) * 128 * 5 <= 200 * 1024 ? 5 : 4;
}
constexpr size_t wg_smem(int bm, int bn) { return static_cast<size_t>(wg_stages(bm, bn)) * (bm + bn) * 128 + 1024; }

// *p = v where `on` (a predicated store: no branch around it).
__device__ __forceinline__ void st_global_b32_if(bool on, void* p, uint32_t v) {
  asm volatile(
      "{\n .reg .pred q;\n setp.ne.b32 q, %0, 0;\n @q st.global.b32 [%1], %2;\n}\n" ::"r"(static_cast<int>(on)),
      "l"(p), "r"(v)
      : "memory");
}

// *p (a read-only load, issued in program order with the wgmma asm around it).
__device__ __forceinline__ uint32_t ld_global_b32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

template <class T, int BN>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 2], uint64_t a, uint64_t b, int scale_d = 1) {
  if constexpr (BN == 64)
    wgmma_m64n64k16<T>(d, a, b, scale_d);
  else
    wgmma_m64n128k16<T>(d, a, b, scale_d);
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
    for (int j = 0; j < BR; ++j)
      cp_async16(sb + (row0 + 32 * j) * 128 + col, w + (b_off + 32 * j * 9 * c + wshift), 16);
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
    for (int mb = 0; mb < WGM; ++mb) fence_operands(acc[mb]);
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
    for (int mb = 0; mb < WGM; ++mb) fence_operands(acc[mb]);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int mb = 0; mb < WGM; ++mb) fence_operands(acc[mb]);

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

// ---- The row-ring kernels (C == 64; wgconv.h's Ring* tiles) ----
// Padded plane: Hp = H + 2, Wp = W + 2; position f = (n Hp + pp) Wp + qq over N Hp Wp positions; the input at f is
// x[n][pp - 1][qq - 1] inside, 0 on the border. The output at every f is sum over taps (dr, ds) of
// X[f + dr Wp + ds] . w[k][tap] (kept where f is inside). Tile t: positions [L t, L t + L) (L = 128, or 256 with
// the pixels as N); its span (the rows its taps read) [L t - halo, L t + L + halo), halo = Wp + 1; tile t + 1 adds
// the L rows [L t + L + halo, L t + 2 L + halo). Position f lives in ring row f mod R; ring rows 0..M-1 are
// mirrored at R..R+M-1 (M: a warpgroup's window, L / 2), so a window starting at any ring row is contiguous. While
// tile t's wgmma run, tile t + 1's rows load: R >= 2 L + 2 halo keeps them off every row tile t reads.
// PXN false: m64nBNk16, A = a warpgroup's 64 positions (the window), B = the BN filters. PXN true (BN == 64):
// m64n128k16 with the roles swapped, A = the 64 filters of a tap, B = the warpgroup's window of 128 positions --
// 10 KiB of shared-memory operands per 64 tensor-core cycles instead of 4 KiB per 32 (run 60: the m64n64 form
// is bound by shared-memory bandwidth); its epilogue pairs channels across lanes (lane ^ 4) for 4-byte stores.

// (PadPos, pad_pos, pad_step, pad_advance: wgconv_ring.cuh.)

template <bool PXN>
struct RingShape {
  static constexpr int kTile = PXN ? kWgconvPxTile : 128;  // positions per tile
  static constexpr int kWin = kTile / 2;                   // positions per warpgroup = mirrored rows
};
static_assert(RingShape<true>::kWin == kWgconvPxWindow, "wgconv_rule.h's ring px window");

struct RingArgs {
  int n_img, h, wd, k;
  int ring;           // R, a power of two (a ring row is a position's low bits)
  int n_tiles;        // output-channel tiles (K / BN)
  int per_cta;        // tiles per CTA run
  int phase;          // 1: window descriptors carry a base offset (sw128_desc_at; wrong on the H200, run 60)
  WgConvPrologue pro;  // gamma null: none
  float* stats_ws;     // PXN: the per-CTA statistics (or BB's batch-norm backward) partials (runs x K x 2), or null
  WgConvBnBwd bnb;     // BB: the batch norm's input bx and parameters (wgconv.h)
};

// ST: y's statistics from the epilogue; BB: the batch-norm backward epilogue (WgConvBnBwd): y masked by the ReLU
// recomputed from bx before it is stored, its sums and those of y (bx - mean) per channel.
template <class T, int BN, bool PXN, bool ST, bool BB = false>
__global__ void __launch_bounds__(kThreads, 1)
    wgconv_ring_kernel(const void* __restrict__ xv, const void* __restrict__ wv, void* __restrict__ yv,
                       RingArgs a) {
  static_assert(!PXN || BN == 64, "pixels as N: one 64-filter m block");
  static_assert(PXN || !(ST || BB), "statistics and the batch-norm backward: the pixels-as-N kernel only");
  static_assert(!(ST && BB), "one epilogue reduction");
  constexpr int kTile = RingShape<PXN>::kTile, kWin = RingShape<PXN>::kWin;
  constexpr int kAcc = PXN ? kWin / 2 : BN / 2;  // f32 accumulators per thread
  const T* __restrict__ x = static_cast<const T*>(xv);
  const T* __restrict__ w = static_cast<const T*>(wv);
  T* __restrict__ y = static_cast<T*>(yv);
  extern __shared__ uint8_t smem_raw[];
  const uint32_t b_base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // 9 taps x BN filter rows
  const uint32_t a_base = b_base + 9 * BN * 128;                    // R + kWin ring rows (1024-aligned: BN % 8 == 0)
  // wg broadcast from lane 0: the compiler then knows it is warp-uniform and can keep the window descriptors
  // derived from it in uniform registers (Nsight Compute, run 61: ~8 vector instructions and two R2UR per wgmma).
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), warp = (tid >> 5) & 3, lane = tid & 31;
  const int piece = tid & 7, row0 = tid >> 3;
  const int n0 = static_cast<int>(blockIdx.x % a.n_tiles) * BN;
  // Positions, pixels and element offsets fit in int: wgconv_eligible bounds x and y below 2^31 elements, and with
  // C == 64 the padded plane holds under 2^29 positions.
  const int run = static_cast<int>(blockIdx.x) / a.n_tiles;
  const int hp = a.h + 2, wp = a.wd + 2, halo = wp + 1;
  const unsigned ring_mask = static_cast<unsigned>(a.ring) - 1u;
  const int plane = hp * wp, f_total = plane * a.n_img;
  const int tiles = (f_total + kTile - 1) / kTile;
  const int t_begin = run * a.per_cta, t_end = t_begin + a.per_cta < tiles ? t_begin + a.per_cta : tiles;
  if (t_begin >= t_end) {  // no tile: a zero partial
    if ((ST || BB) && tid < BN)
      a.stats_ws[(run * a.k + n0 + tid) * 2] = a.stats_ws[(run * a.k + n0 + tid) * 2 + 1] = 0.0f;
    return;
  }

  const uint64_t b_desc = sw128_desc(b_base);  // + (byte offset >> 4) for a tap and k step
  auto ring_row = [&](int pos) { return static_cast<int>(static_cast<unsigned>(pos) & ring_mask); };
  // Whether position pos (at padded (n, pp, qq)) is a pixel of the image rather than padding, and which pixel of
  // the (N, H, W) plane it is (x's, y's and the activation's row index).
  auto inside_at = [&](int pos, const PadPos& pq) {
    return pos >= 0 && pos < f_total && pq.pp >= 1 && pq.pp <= a.h && pq.qq >= 1 && pq.qq <= a.wd;
  };
  auto pixel_of = [&](const PadPos& pq) { return (pq.n * a.h + pq.pp - 1) * a.wd + pq.qq - 1; };
  // This thread's 16-byte piece of position pos (at padded (n, pp, qq) when 0 <= pos < f_total) into its ring row
  // and the mirror row.
  auto load_row_at = [&](int pos, const PadPos& pq) {
    const bool inside = inside_at(pos, pq);
    const int src = inside ? pixel_of(pq) * 64 + piece * 8 : 0;
    const int j = ring_row(pos);
    const T* s = x + src;
    cp_async16(a_base + sw128_offset(j, piece), s, inside ? 16 : 0);
    if (j < kWin) cp_async16(a_base + sw128_offset(j + a.ring, piece), s, inside ? 16 : 0);
  };
  // f(pos, padded position) for each of this thread's rows of tile t_begin's whole span ...
  auto each_span_row = [&](auto&& f) {
    for (int r = row0; r < kTile + 2 * halo; r += 32) {
      const int pos = t_begin * kTile - halo + r;
      f(pos, pad_pos(pos < 0 ? 0 : pos, wp, plane));
    }
  };
  // A walk over the padded plane: a position and its (image, padded row, padded column), moved by steps (the
  // division is paid once per CTA, not per tile).
  struct Cursor {
    int pos;
    PadPos pq;
  };
  auto cursor_at = [&](int pos) { return Cursor{pos, pad_pos(pos, wp, plane)}; };
  auto cursor_move = [&](Cursor& c, int d) {
    c.pos += d;
    pad_advance(c.pq, d, wp, hp);
  };
  // ... and of the kTile rows tile t adds to tile t - 1's span, c at its first (this thread's row t kTile + halo +
  // row0): c ends at tile t + 1's.
  auto each_new_row = [&](Cursor& c, auto&& f) {
#pragma unroll
    for (int i = 0; i < kTile / 32; ++i) {
      f(c.pos, c.pq);
      cursor_move(c, 32);
    }
  };
  // Without the batch-norm prologue (which transforms the pieces a thread loaded itself, 8 channels' constants a
  // thread), a tile's new rows load by half rows: job (row, h) = the row's pieces 2 m + h, m = 0..3 (a thread
  // pair per row: each 32-byte sector by one copy instruction of the pair), rows hrow + 128 i of the tile's new rows
  // -- one decode of the position per four copies instead of per copy (Nsight Compute, RESULTS.md run 68: the
  // per-piece loads were ~285 of 1,147 instructions a warp per tile).
  const int pair_half = tid & 1, hrow = tid >> 1;
  static_assert(kThreads == 256 && kTile % 128 == 0, "half-row jobs: 128 rows a pass");
  auto load_half_row_at = [&](int pos, const PadPos& pq) {
    const bool inside = inside_at(pos, pq);
    const int j = ring_row(pos);
    copy_half_row(a_base + j * 128, j, reinterpret_cast<const uint16_t*>(x + (inside ? pixel_of(pq) * 64 : 0)), inside,
                  pair_half, j < kWin, a.ring * 128);
  };
  auto each_new_half_row = [&](Cursor& c) {
#pragma unroll
    for (int i = 0; i < kTile / 128; ++i) {
      load_half_row_at(c.pos, c.pq);
      cursor_move(c, 128);
    }
  };
  // The batch-norm prologue (a.pro.gamma set): this thread's 8 channels' constants, and the transform of a piece
  // it loaded itself and has waited for (inside positions only: the padding stays 0), mirror copy included.
  const bool bn = a.pro.gamma != nullptr;
  ApplyConsts kc[8];
  if (bn) {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      kc[e] = apply_consts(piece * 8 + e, a.pro.gamma, a.pro.beta, a.pro.mean, a.pro.invstd, false, 0.0f, nullptr);
  }
  auto transform_row_at = [&](int pos, const PadPos& pq) {
    if (!inside_at(pos, pq)) return;
    const int j = ring_row(pos);
    const uint4 v = bn_apply_piece<T>(a_base + sw128_offset(j, piece), [&](int i) { return kc[i]; }, a.pro.relu,
                                      j < kWin, a.ring * 128);
    if (a.pro.act_out)  // the same element of the (N, H, W, 64) activation
      *reinterpret_cast<uint4*>(static_cast<T*>(a.pro.act_out) + (pixel_of(pq) * 64 + piece * 8)) = v;
  };
  // Tile t's 36 wgmma of this warpgroup's window, the first with scale-d 0 (d = A B: the previous tile's values in
  // d are dropped without zeroing the registers). The window descriptors are computed before the first wgmma (a
  // register written between two wgmma makes the compiler fence them).
  auto issue = [&](int t, float (&d)[kAcc]) {
    const int f0 = t * kTile + wg * kWin;
    uint64_t da[9];
#pragma unroll
    for (int tap = 0; tap < 9; ++tap)
      da[tap] = sw128_desc_at(a_base + ring_row(f0 + (tap / 3 - 1) * wp + (tap % 3 - 1)) * 128, a.phase != 0);
    fence_operands(d);
    wgmma_fence();
#pragma unroll
    for (int tap = 0; tap < 9; ++tap)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {  // +32 bytes = +2 in the descriptor's start field (no carry: start < 2^14)
        const uint64_t filt = b_desc + static_cast<uint64_t>((tap * BN * 128 + kk * 32) >> 4);
        const int scale_d = tap == 0 && kk == 0 ? 0 : 1;
        if constexpr (PXN)
          wgmma_m64n128k16<T>(d, filt, da[tap] + 2 * kk, scale_d);
        else
          wgmma_tile<T, BN>(d, da[tap] + 2 * kk, filt, scale_d);
      }
    wgmma_commit();
  };
  // Tile t's outputs (its wgmma complete) to y, inside positions only (the next tile's first wgmma overwrites d).
  // Branch-free per output (predicated stores) so the lane exchanges stay in converged code.
  float st_sum[2] = {0.0f, 0.0f}, st_sq[2] = {0.0f, 0.0f};  // PXN statistics of filters r and r + 8
  // This warpgroup's next tile's first position of this thread (tiles are stored in order).
  Cursor out_at = cursor_at(t_begin * kTile + wg * kWin + (PXN ? 2 * (lane & 3) : warp * 16 + (lane >> 2)));
  // PXN: thread (warp, lane) stores filters pch, pch + 1 (+ 8 in the second half) at the even position of a window
  // pair (odd lanes: the odd one; see store). PairWalk: this thread's pairs of a window, 8 positions apart -- the
  // position, its padded row and column, and the element offset in y (and bx) of the pair this thread stores
  // (unsigned: a padding position's offset may lie outside y, and is never used there) -- moved by additions and
  // selects (Nsight Compute, run 73: the walk by multiplications and branches was ~22 instructions a pair).
  const bool odd = (lane >> 2) & 1;
  const int pch = n0 + warp * 16 + (lane >> 2) - (odd ? 1 : 0);
  // The pair's packed halves from this thread's (even lanes: the low ones of both, odd lanes: the high ones, low
  // first): __byte_perm's selector.
  const uint32_t pair_sel = odd ? 0x3276u : 0x5410u;
  struct PairWalk {
    int pos, pp, qq;
    uint32_t off;
  };
  auto pair_walk_at = [&](const Cursor& c) {
    return PairWalk{c.pos, c.pq.pp, c.pq.qq,
                    static_cast<uint32_t>(pixel_of(c.pq) + (odd ? 1 : 0)) * static_cast<uint32_t>(a.k) +
                        static_cast<uint32_t>(pch)};
  };
  // 8 positions on (8 <= W + 2: at most one row's end passed). The pixel index (n H + pp - 1) W + qq - 1 moves by
  // 8, by 8 - 2 past a row's end (its two padding columns), by 8 - 2 - 2 W past an image's (its two padding rows).
  auto pair_walk_step = [&](PairWalk& w) {
    w.pos += 8;
    w.qq += 8;
    const bool row_end = w.qq >= wp;
    w.qq -= row_end ? wp : 0;
    w.pp += row_end ? 1 : 0;
    const bool image_end = w.pp == hp;
    w.pp = image_end ? 0 : w.pp;
    w.off += static_cast<uint32_t>((8 - (row_end ? 2 : 0) - (image_end ? 2 * a.wd : 0)) * a.k);
  };
  // Whether the pair's even and odd positions are pixels of the image (the odd one is the even one's next column).
  auto pair_inside = [&](const PairWalk& w, bool& in0, bool& in1) {
    const bool row_in = w.pos < f_total && static_cast<unsigned>(w.pp - 1) < static_cast<unsigned>(a.h);
    in0 = row_in && static_cast<unsigned>(w.qq - 1) < static_cast<unsigned>(a.wd);
    in1 = row_in && static_cast<unsigned>(w.qq) < static_cast<unsigned>(a.wd);
  };
  // BB: this thread's channels pch + 8 half + e: the forward's mean m (for g (bx - m)) and the recomputed ReLU mask
  // as a range of bx (bn_elem.cuh's relu_kept_range: bitwise relu_kept), packed per channel pair as bx is; its sums
  // of the masked g and of g (bx - m); and a tile's bx pairs at its stores, loaded right after the tile's wgmma and the
  // next tile's row copies are issued (load_bx) so they land while the wgmma run.
  float bm[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  uint32_t b_lo[2] = {0u, 0u}, b_hi[2] = {0u, 0u};
  float bs[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}, bq[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  uint32_t bxr[BB ? kWin / 8 : 1][2];
  Cursor bx_at = out_at;
  if constexpr (BB) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const ApplyConsts k = apply_consts(pch + 8 * h + e, a.bnb.gamma, a.bnb.beta, a.bnb.mean, a.bnb.invstd, false,
                                           0.0f, nullptr);
        bm[h][e] = k.m;
        const KeptRange r = relu_kept_range<T>(k.m, k.scale, k.shift);
        b_lo[h] |= static_cast<uint32_t>(r.lo) << (16 * e);
        b_hi[h] |= static_cast<uint32_t>(r.hi) << (16 * e);
      }
  }
  // The loads need no predicate: an offset outside bx (a padding position's, before the first pixel or past the
  // last) is clamped into it, and what it reads is masked off like every pair that is not this thread's.
  const uint32_t bx_last = static_cast<uint32_t>(a.n_img) * static_cast<uint32_t>(a.h * a.wd) *
                               static_cast<uint32_t>(a.k) - 10u;  // the last offset whose + 8 + 1 is inside
  auto load_bx = [&] {
    const T* bx = static_cast<const T*>(a.bnb.x);
    PairWalk w = pair_walk_at(bx_at);
#pragma unroll
    for (int j = 0; j < kWin / 8; ++j) {
      const T* src = bx + min(w.off, bx_last);
#pragma unroll
      for (int half = 0; half < 2; ++half) bxr[j][half] = ld_global_b32(src + 8 * half);
      pair_walk_step(w);
    }
    cursor_move(bx_at, kTile);
  };
  // BB: the stored pair (channels pch + 8 half + (0, 1), rounded to T) masked by the ReLU recomputed from bx's pair
  // xw (batchnorm_bwd_cuda's relu_grad_in) -- everything masked where the pair is not this thread's (mine false:
  // its store is predicated off) -- and the masked values added to the sums.
  auto bn_bwd_pair = [&](uint32_t pair, uint32_t xw, int half, bool mine) {
    const uint32_t g = pair & (mine ? in_range2<T>(xw, b_lo[half], b_hi[half]) : 0u);
    const T* xe = reinterpret_cast<const T*>(&xw);
    const T* ge = reinterpret_cast<const T*>(&g);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float gf = to_f32(ge[e]);
      bs[half][e] += gf;
      bq[half][e] = fmaf(gf, to_f32(xe[e]) - bm[half][e], bq[half][e]);
    }
    return g;
  };
  auto store = [&](float (&d)[kAcc]) {
    fence_operands(d);
    if constexpr (PXN) {
      // Thread (warp, lane) holds filters r = 16 warp + lane / 4 (+ 8) at the position pair 8 j + 2 (lane % 4)
      // (+ 1) of the window. Lanes lane and lane ^ 4 hold filters r and r ^ 1: each packs its two positions (one
      // rounding each), they swap the packed words, and the even one stores both filters at the even position, the
      // odd one both at the odd position. The odd position is the next column of the even one's row (inside where
      // that row is and the even column is below W) or, after the row's last column, the padding.
      PairWalk w = pair_walk_at(out_at);
#pragma unroll
      for (int j = 0; j < kWin / 8; ++j) {
        bool in0, in1;
        pair_inside(w, in0, in1);
        const bool mine = odd ? in1 : in0;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const uint32_t own = pack2<T>(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
          const uint32_t pair = __byte_perm(own, __shfl_xor_sync(0xffffffffu, own, 4), pair_sel);
          T* dst = y + w.off + 8 * half;
          if constexpr (BB)
            st_global_b32_if(mine, dst, bn_bwd_pair(pair, bxr[j][half], half, mine));
          else
            st_global_b32_if(mine, dst, pair);
          if constexpr (ST) {  // this thread's filter at both positions, as stored
            const T* oe = reinterpret_cast<const T*>(&own);
            const float v0 = to_f32(oe[0]), v1 = to_f32(oe[1]);
            st_sum[half] += (in0 ? v0 : 0.0f) + (in1 ? v1 : 0.0f);
            st_sq[half] += (in0 ? v0 * v0 : 0.0f) + (in1 ? v1 * v1 : 0.0f);
          }
        }
        pair_walk_step(w);
      }
      cursor_move(out_at, kTile);
    } else {
      // Thread (warp, lane) holds positions 16 warp + lane / 4 (+ 8) of the window, filters 8 j + 2 (lane % 4) (+ 1).
      int& pos = out_at.pos;
      PadPos& pq = out_at.pq;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const bool in = inside_at(pos, pq);
        T* out = y + (pixel_of(pq) * a.k + n0 + 2 * (lane & 3));
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
          st_global_b32_if(in, out + 8 * j, pack2<T>(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]));
        pos += 8;
        pad_step(pq, 8, wp, hp);
      }
      cursor_move(out_at, kTile - 16);  // the row walk covered 16 positions
    }
  };
  // The filter slice (row tap * BN + k - n0) and tile t_begin's whole span; then per tile: its rows in, the next
  // tile's rows on their way, its wgmma, its outputs.
  for (int r = row0; r < 9 * BN; r += 32) {
    const int tap = r / BN, kl = r - tap * BN;
    cp_async16(b_base + sw128_offset(r, piece), w + (((n0 + kl) * 9 + tap) * 64 + piece * 8), 16);
  }
  each_span_row(load_row_at);
  cp_async_commit();
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  // Ping-pong: warpgroup 0 stores tile t right after its wgmma, warpgroup 1 stores tile t - 1 after the barrier of
  // tile t, before issuing tile t's wgmma -- so one warpgroup's epilogue runs while the other's wgmma keep the
  // tensor cores busy, instead of both storing at once with the tensor cores idle. At the barrier both have waited
  // for their wgmma of tile t - 1, so tile t - 1's rows are free for tile t + 1's loads, issued once tile t's
  // wgmma are (the address arithmetic overlaps them).
  // Tile t_begin + 1's rows: this thread's first (the piece walk's row0, the half-row walk's hrow).
  Cursor load_at = cursor_at((t_begin + 1) * kTile + halo + (bn ? row0 : hrow)), bn_at = load_at;
  for (int t = t_begin; t < t_end; ++t) {
    cp_async_wait<0>();
    if (bn) {  // this thread's own pieces of the rows tile t adds (or, first, of its whole span)
      if (t == t_begin)
        each_span_row(transform_row_at);
      else
        each_new_row(bn_at, transform_row_at);
    }
    fence_proxy_async();
    __syncthreads();  // tile t's rows in for everyone; everyone's wgmma of tile t - 1 done (its rows reusable)
    if (wg == 1 && t > t_begin) store(acc);  // tile t - 1
    issue(t, acc);
    if (t + 1 < t_end) {  // before the bx loads: the loop top waits for these rows (run 74: 8.4 % of the stalls)
      if (bn)
        each_new_row(load_at, load_row_at);
      else
        each_new_half_row(load_at);
    }
    cp_async_commit();
    if constexpr (BB) load_bx();  // tile t's bx at this thread's stores (warpgroup 1 stores it next iteration)
    wgmma_wait<0>();
    if (wg == 0) store(acc);  // tile t
  }
  if (wg == 1) store(acc);  // tile t_end - 1
  if constexpr (ST || BB) {  // ST: the 4 lanes of a filter row; BB: the 8 of a channel pair; then the two
                             // warpgroups, into this CTA's partial
    float* red = reinterpret_cast<float*>(smem_raw + (b_base - smem_addr(smem_raw)));  // (2 warpgroups, 64, 2)
    if constexpr (ST) {
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int m = 1; m <= 2; m <<= 1) {
          st_sum[half] += __shfl_xor_sync(0xffffffffu, st_sum[half], m);
          st_sq[half] += __shfl_xor_sync(0xffffffffu, st_sq[half], m);
        }
      __syncthreads();  // every wgmma done: the filter rows' shared memory is free
      if ((lane & 3) == 0)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int f = warp * 16 + (lane >> 2) + 8 * half;
          red[(wg * 64 + f) * 2] = st_sum[half];
          red[(wg * 64 + f) * 2 + 1] = st_sq[half];
        }
    } else {
      // Lanes lane ^ 1, ^ 2 (the window's position pairs) and ^ 4 (the pair's other position) hold the same
      // channels pch + 8 half + e.
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll
          for (int m = 1; m <= 4; m <<= 1) {
            bs[half][e] += __shfl_xor_sync(0xffffffffu, bs[half][e], m);
            bq[half][e] += __shfl_xor_sync(0xffffffffu, bq[half][e], m);
          }
      __syncthreads();  // every wgmma done: the filter rows' shared memory is free
      if ((lane & 7) == 0)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int f = pch - n0 + 8 * half + e;
            red[(wg * 64 + f) * 2] = bs[half][e];
            red[(wg * 64 + f) * 2 + 1] = bq[half][e];
          }
    }
    __syncthreads();
    if (tid < BN) {
      float* out = a.stats_ws + (run * a.k + n0 + tid) * 2;
      out[0] = red[tid * 2] + red[(64 + tid) * 2];
      out[1] = red[tid * 2 + 1] + red[(64 + tid) * 2 + 1];
    }
  }
}

// The epilogues' per-channel sums: out0[k], out1[k] = the runs' partials (runs x K x 2) added in run order in float64;
// out1 times scale[k] when scale is set. The statistics: sum, sqsum; BB's: dbeta, dgamma (scale = invstd:
// batchnorm_bwd_cuda's finalize, dgamma = sum * save_invstd in f32).
__global__ void wgconv_partials_finalize_kernel(const float* __restrict__ part, int64_t runs, int k,
                                                const float* __restrict__ scale, float* out0, float* out1) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= k) return;
  double s = 0.0, q = 0.0;
  for (int64_t r = 0; r < runs; ++r) {
    s += part[(r * k + c) * 2];
    q += part[(r * k + c) * 2 + 1];
  }
  out0[c] = static_cast<float>(s);
  out1[c] = scale ? static_cast<float>(q) * scale[c] : static_cast<float>(q);
}

using RingKernel = void (*)(const void*, const void*, void*, RingArgs);

template <class T, int BN, bool PXN, bool ST = false, bool BB = false>
RingKernel ring_kernel_t() {
  return &wgconv_ring_kernel<T, BN, PXN, ST, BB>;
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
    default: return nullptr;  // the ring tiles: ring_kernel
  }
}
WgKernel wg_kernel(GpuDType io, WgConvTile t) {
  return io == GpuDType::F16 ? wg_kernel_io<__half>(t) : wg_kernel_io<__nv_bfloat16>(t);
}

void tile_dims(WgConvTile t, int* bm, int* bn) {
  *bm = t == WgConvTile::M256N64 || t == WgConvTile::M256N128 || t == WgConvTile::RingPx256N64 ? 256 : 128;
  *bn = t == WgConvTile::M128N128 || t == WgConvTile::M256N128 || t == WgConvTile::Ring128N128 ? 128 : 64;
}

// The kernel of a tile with the statistics epilogue (stats) or the batch-norm backward one (bnb), or neither.
RingKernel ring_kernel(GpuDType io, WgConvTile t, bool stats = false, bool bnb = false) {
  const bool h = io == GpuDType::F16;
  switch (t) {
    case WgConvTile::Ring128N64:
      return h ? ring_kernel_t<__half, 64, false>() : ring_kernel_t<__nv_bfloat16, 64, false>();
    case WgConvTile::Ring128N128:
      return h ? ring_kernel_t<__half, 128, false>() : ring_kernel_t<__nv_bfloat16, 128, false>();
    case WgConvTile::RingPx256N64:
      if (stats) return h ? ring_kernel_t<__half, 64, true, true>() : ring_kernel_t<__nv_bfloat16, 64, true, true>();
      if (bnb)
        return h ? ring_kernel_t<__half, 64, true, false, true>()
                 : ring_kernel_t<__nv_bfloat16, 64, true, false, true>();
      return h ? ring_kernel_t<__half, 64, true>() : ring_kernel_t<__nv_bfloat16, 64, true>();
    default: return nullptr;
  }
}

// A ring tile's positions per tile and per warpgroup window (RingShape of its kernel).
int ring_tile_len(WgConvTile t) {
  return t == WgConvTile::RingPx256N64 ? RingShape<true>::kTile : RingShape<false>::kTile;
}
int ring_window(WgConvTile t) {
  return t == WgConvTile::RingPx256N64 ? RingShape<true>::kWin : RingShape<false>::kWin;
}

}  // namespace

const char* wgconv_tile_name(WgConvTile t) {
  switch (t) {
    case WgConvTile::M128N64: return "128x64";
    case WgConvTile::M256N64: return "256x64";
    case WgConvTile::M128N128: return "128x128";
    case WgConvTile::M256N128: return "256x128";
    case WgConvTile::Ring128N64: return "ring 128x64";
    case WgConvTile::Ring128N128: return "ring 128x128";
    case WgConvTile::RingPx256N64: return "ring px 256x64";
  }
  return "?";
}

bool wgconv_tile_is_ring(WgConvTile t) {
  return t == WgConvTile::Ring128N64 || t == WgConvTile::Ring128N128 || t == WgConvTile::RingPx256N64;
}

bool wgconv_tile_fits(const Conv2dGeom& g, WgConvTile t) {
  int bm = 0, bn = 0;
  tile_dims(t, &bm, &bn);
  return g.k % bn == 0 && (!wgconv_tile_is_ring(t) || wgconv_ring_fits(g));
}

WgConvTile wgconv_default_tile(const Conv2dGeom& g) {
  return g.k % 128 == 0 ? WgConvTile::M128N128 : WgConvTile::M128N64;
}

Result<int> wgconv_device_sms(const std::string& what) {
  int dev = 0, major = 0, minor = 0, sms = 0;
  TRCTL_CUDA_TRY(cudaGetDevice(&dev));
  TRCTL_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  TRCTL_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0)
    return Error{ErrCode::NotSupported, "wgconv",
                 what + " runs on compute capability 9.0 only, not " + std::to_string(major) + "." +
                     std::to_string(minor)};
  TRCTL_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

Result<WgConvPlan> wgconv_plan(const Conv2dGeom& g, GpuDType io, WgConvTile tile) {
  if (io != GpuDType::F16 && io != GpuDType::BF16)
    return Error{ErrCode::NotSupported, "wgconv",
                 std::string("the wgmma conv takes f16 or bf16, not ") + gpu_dtype_name(io)};
  std::string why;
  if (!wgconv_eligible(g, &why))
    return Error{ErrCode::NotSupported, "wgconv", why + ": " + conv2d_geom_str(g)};
  Result<int> sms = wgconv_device_sms("the wgmma conv");
  if (!sms.ok()) return sms.errors();
  WgConvPlan p;
  p.g = g;
  p.io = io;
  p.tile = tile;
  tile_dims(tile, &p.bm, &p.bn);
  if (!wgconv_tile_fits(g, tile))
    return Error{ErrCode::NotSupported, "wgconv",
                 std::string("tile ") + wgconv_tile_name(tile) + " needs K % " + std::to_string(p.bn) + " == 0" +
                     (wgconv_tile_is_ring(tile) ? ", C == 64 and W >= 6" : "") + ": " + conv2d_geom_str(g)};
  p.grid_n = g.k / p.bn;
  if (wgconv_tile_is_ring(tile)) {
    // A power of two of at least two tiles and both halos: a position's ring row is its low bits.
    p.ring_rows = static_cast<int>(wgconv_ring_rows(g, ring_tile_len(tile)));
    p.stages = 0;
    p.smem_bytes = static_cast<size_t>(wgconv_ring_smem_bytes(g, p.bn, ring_tile_len(tile), ring_window(tile)));
    if (p.smem_bytes > static_cast<size_t>(kMaxSmem))
      return Error{ErrCode::NotSupported, "wgconv",
                   std::string(wgconv_tile_name(tile)) + ": ring and filters need " + std::to_string(p.smem_bytes) +
                       " B of shared memory, over the limit: " + conv2d_geom_str(g)};
    p.grid_m = std::max<int64_t>(1, sms.value() / p.grid_n);
    for (int v = 0; v < 3; ++v)  // plain, statistics, batch-norm backward
      if (RingKernel k = ring_kernel(io, tile, v == 1, v == 2); k)
        TRCTL_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(p.smem_bytes)));
    return p;
  }
  p.stages = wg_stages(p.bm, p.bn);
  p.smem_bytes = wg_smem(p.bm, p.bn);
  if (p.smem_bytes > static_cast<size_t>(kMaxSmem))
    return Error{ErrCode::Internal, "wgconv", "tile over the shared-memory limit"};
  p.grid_m = (g.n * g.h * g.w + p.bm - 1) / p.bm;
  TRCTL_CUDA_TRY(cudaFuncSetAttribute(wg_kernel(io, tile),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(p.smem_bytes)));
  return p;
}

// The data gradient's filter transform of a 3x3 pad-1 conv (dgrad_fwd.h: w' is that of any stride-1 conv's data
// gradient as a forward conv; its kernel reads and writes through a shared-memory tile).
Status wgconv_flip_filters_cuda(cudaStream_t stream, GpuDType io, const void* w, int64_t k, int64_t c,
                                void* w_flipped) {
  if (io != GpuDType::F16 && io != GpuDType::BF16)
    return Error{ErrCode::Internal, "wgconv", "filters to flip must be f16 or bf16"};
  if (k <= 0 || c <= 0) return ok_status();
  Conv2dGeom g;  // a 1x1 image: only C, K and the 3x3 pad-1 filter matter to the transform
  g.n = g.h = g.w = 1, g.c = c, g.k = k, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
  conv2d_geom_finish(g, nullptr);  // valid: 1 + 2 - 3 + 1 = 1 output pixel
  return dgrad_fwd_filter_cuda(stream, g, io, w, w_flipped);
}

size_t wgconv_stats_workspace_bytes(const WgConvPlan& p) {
  return static_cast<size_t>(p.grid_m) * static_cast<size_t>(p.g.k) * 2 * sizeof(float);
}

Status wgconv_fwd_cuda(cudaStream_t stream, const WgConvPlan& p, const void* x, const void* w, void* y,
                       const WgConvPrologue* prologue, const WgConvStats* stats, const WgConvBnBwd* bn_bwd) {
  if (prologue && !wgconv_tile_is_ring(p.tile))
    return Error{ErrCode::NotSupported, "wgconv",
                 std::string("the batch-norm prologue needs a ring tile, not ") + wgconv_tile_name(p.tile)};
  if (prologue && (!prologue->gamma || !prologue->beta || !prologue->mean || !prologue->invstd))
    return Error{ErrCode::Internal, "wgconv", "a prologue needs gamma, beta, mean and invstd"};
  if (prologue && prologue->act_out &&
      (prologue->act_out == x || reinterpret_cast<uintptr_t>(prologue->act_out) % 16 != 0))
    return Error{ErrCode::Internal, "wgconv", "a prologue's act_out must be 16-byte aligned and not x"};
  if (stats && p.tile != WgConvTile::RingPx256N64)
    return Error{ErrCode::NotSupported, "wgconv",
                 std::string("the statistics epilogue needs the ring px tile, not ") + wgconv_tile_name(p.tile)};
  if (stats && (!stats->sum || !stats->sqsum || !stats->ws || stats->ws_bytes < wgconv_stats_workspace_bytes(p)))
    return Error{ErrCode::Internal, "wgconv", "statistics need sum, sqsum and wgconv_stats_workspace_bytes of ws"};
  if (bn_bwd && (p.tile != WgConvTile::RingPx256N64 || stats || prologue))
    return Error{ErrCode::NotSupported, "wgconv",
                 std::string("the batch-norm backward epilogue needs the ring px tile, without statistics or a "
                             "prologue, not ") +
                     wgconv_tile_name(p.tile) + (stats || prologue ? " with them" : "")};
  if (bn_bwd && (!bn_bwd->x || !bn_bwd->gamma || !bn_bwd->beta || !bn_bwd->mean || !bn_bwd->invstd ||
                 !bn_bwd->dgamma || !bn_bwd->dbeta || !bn_bwd->ws ||
                 bn_bwd->ws_bytes < wgconv_stats_workspace_bytes(p) ||
                 reinterpret_cast<uintptr_t>(bn_bwd->x) % 4 != 0))
    return Error{ErrCode::Internal, "wgconv",
                 "the batch-norm backward epilogue needs a 4-byte aligned x, the parameters, dgamma, dbeta and "
                 "wgconv_stats_workspace_bytes of ws"};
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(y) % 4 != 0)
    return Error{ErrCode::Internal, "wgconv", "x and w must be 16-byte aligned, y 4-byte aligned"};
  const int64_t ctas = p.grid_m * p.grid_n;
  if (ctas >= (static_cast<int64_t>(1) << 31) || p.grid_m < 1)
    return Error{ErrCode::Internal, "wgconv", "grid too large or empty"};
  const dim3 grid(static_cast<unsigned>(ctas));
  const Conv2dGeom& g = p.g;
  if (wgconv_tile_is_ring(p.tile)) {
    RingArgs a;
    a.n_img = static_cast<int>(g.n), a.h = static_cast<int>(g.h), a.wd = static_cast<int>(g.w);
    a.k = static_cast<int>(g.k), a.ring = p.ring_rows, a.n_tiles = static_cast<int>(p.grid_n);
    const int64_t len = ring_tile_len(p.tile), tiles = (g.n * (g.h + 2) * (g.w + 2) + len - 1) / len;
    a.per_cta = static_cast<int>((tiles + p.grid_m - 1) / p.grid_m);
    a.phase = p.phase_from_start ? 1 : 0;
    if (prologue) a.pro = *prologue;
    a.stats_ws = stats ? static_cast<float*>(stats->ws) : bn_bwd ? static_cast<float*>(bn_bwd->ws) : nullptr;
    if (bn_bwd) a.bnb = *bn_bwd;
    ring_kernel(p.io, p.tile, stats != nullptr, bn_bwd != nullptr)<<<grid, kThreads, p.smem_bytes, stream>>>(x, w, y,
                                                                                                           a);
    TRCTL_CUDA_TRY(cudaGetLastError());
    if (a.stats_ws) {  // the epilogue's partials: the statistics' (sum, sqsum) or BB's (dbeta, dgamma = sum * invstd)
      wgconv_partials_finalize_kernel<<<static_cast<unsigned>((g.k + 127) / 128), 128, 0, stream>>>(
          a.stats_ws, p.grid_m, static_cast<int>(g.k), stats ? nullptr : bn_bwd->invstd,
          stats ? stats->sum : bn_bwd->dbeta, stats ? stats->sqsum : bn_bwd->dgamma);
      TRCTL_CUDA_TRY(cudaGetLastError());
    }
    return ok_status();
  }
  wg_kernel(p.io, p.tile)<<<grid, kThreads, p.smem_bytes, stream>>>(
      x, w, y, static_cast<int>(g.n), static_cast<int>(g.h), static_cast<int>(g.w), static_cast<int>(g.c),
      static_cast<int>(g.k));
  TRCTL_CUDA_TRY(cudaGetLastError());
  return ok_status();
}

}  // namespace trctl
