// The ring weight gradient of the wgmma 3x3 convolution (wgconv.h: wgconv_wgrad_plan, wgconv_wgrad_cuda), C and K
// multiples of 64 (wgconv_wgrad_ring_eligible: at most 128), compiled for sm_90a alone (CMakeLists.txt: the
// *_sm90a.cu files). A CTA computes one 64-filter x 64-channel block (kb, cb) of dw over a range of positions: its dy
// rows are the 64 filters kb of each position, its x rows the 64 channels cb; the CTAs of one position range are
// adjacent in the grid (they read the same rows from L2).
//
// Over the padded plane (wgconv_ring.cuh: position f, Hp = H + 2, Wp = W + 2), with DY[f] = dy at an inside
// position and 0 on the border, X[f] the same of x:
//   dw[k][r][s][c] = sum over f of DY[f][k] * X[f + (r - 1) Wp + (s - 1)][c],
// nine GEMMs (one per tap) of M = 64 filters, N = 64 channels, reduced over the positions. A CTA (three warpgroups,
// 384 threads) walks tiles of L = kWgconvWgradTile positions [L t, L t + L):
//   - the tile's dy rows (L x 128 bytes, the 128-byte swizzle: piece j of row i at j ^ (i % 8)) in one of D
//     buffers (D, the pipeline's depth: 3, or 4 where shared memory holds it -- wgconv_wgrad_depth); each
//     warpgroup loads them as wgmma's register A (the filters as rows, positions as columns) with
//     ldmatrix.x4.trans, L / 16 k steps of 4 registers;
//   - x's rows in a ring of R rows (position f at row f mod R, the same swizzle) holding the tile's span
//     [L t - Wp - 1, L t + L + Wp + 1); the ring's first kWgconvWgradMirror rows are mirrored after its end, so
//     that a tap's window of the tile -- L rows from (L t + shift) mod R -- is contiguous, and each k step's 16
//     rows are an MN-major B operand (wgmma_sm90a.cuh: sw128_mn_desc; the window starts at any row, as the forward
//     ring's);
//   - warpgroup g runs the taps (g, 0..2): per k step its A registers times the three windows into its three
//     m64n64 accumulators (3 x 32 f32 a thread), or (merged) times one N = 192 operand whose 64-channel blocks are
//     the three windows, one ring row apart (sw128_mn_desc_lbo), into the m64n192 accumulator -- the same registers.
// A tile's k steps run as two wgmma commit groups, each half's A in its own registers; while tile t's groups run,
// the CTA copies tile t + D - 1's dy rows and L new x rows with cp.async (R >= D L + 2 (W + 3) keeps them off the
// spans of tiles t .. t + D - 2; by half rows, each thread's positions carried from tile to tile by additions) and
// loads tile t + 1's first A half, so the tensor cores always have a queued group across the per-tile barrier; the
// barrier waits for tile t + 1's rows, copied D - 2 tiles earlier. At the end each CTA writes
// its accumulators as a (9, 64, 64) f32 partial; wgconv_wgrad_reduce_kernel adds the CTAs' partials in CTA order in
// float64 and scatters them into dw (K, 3, 3, C). Every sum runs in a fixed order: deterministic for the plan's
// grid.
// With x's batch-norm prologue (WgConvWgradPlan::prologue; the Pro kernels) x is the batch norm's input: the CTA keeps
// its 64 channels' (m, scale, shift) in shared memory, and the x rows are rewritten in place once they have landed and
// before the barrier that hands them to the wgmma, with bn_elem.cuh's apply arithmetic (+ ReLU) -- tile t_begin's
// span before the loop by the threads that copied it; tile t + 1's new rows by the warps that copied them, right after
// tile t's first wgmma group is issued (transform_tile: they lie outside tiles t - 1's and t's spans) -- so dw is
// bitwise the plain kernel's on the apply pass's output, which need not exist.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/cuda/ldmatrix.cuh"
#include "runtime/cuda/wgmma_sm90a.cuh"
#include "runtime/ops/batchnorm/bn_elem.cuh"
#include "runtime/ops/conv2d/wgconv.h"
#include "runtime/ops/conv2d/wgconv_ring.cuh"

namespace trctl {
namespace {

constexpr int kThreads = 384;             // three warpgroups: filter rows r = 0, 1, 2
constexpr int kTile = kWgconvWgradTile;   // positions per tile
constexpr int kSteps = kTile / 16;        // k steps of 16 positions per tile ...
constexpr int kHalf = kSteps / 2;         // ... in two halves (A register sets, wgmma commit groups)
constexpr int kMirror = kWgconvWgradMirror;  // the ring's first rows repeated after its end
static_assert(kTile == 128 && kThreads == 384, "load_tile's jobs: 256 dy and 256 x half rows over 384 threads");
// The prologue's transform of a tile's rows in 1 or 2 places of the loop. 1: e12ada4's placement (run 70: conv1_2
// 2,030-2,068 us); run 71 measured 2 together with kLateCopies in the Pro kernel at 2,469-2,550, not yet alone.
constexpr int kProParts = 1;
constexpr int kTaps = 9, kCh = 64;

struct WgradArgs {
  int n_img, h, wd;
  int k, c;     // dy's and x's channels (row strides); their 64-wide blocks: k / 64 x c / 64 per position range
  int ring;     // R, a power of two
  int per_cta;  // tiles per CTA
  WgConvPrologue pro;  // Pro: x's batch norm (+ ReLU) applied to its rows as they land (act_out unused)
};

// Tap s's m64n64 accumulator fragment within a warpgroup's three (acc: the m64n192 fragment of taps 0, 1, 2 side by
// side -- columns 64 s + c -- which is the three m64n64 fragments one after the other).
__device__ __forceinline__ float (&tap_acc(float (&acc)[96], int s))[32] {
  return *reinterpret_cast<float(*)[32]>(acc + 32 * s);
}

// dy (N, H, W, K), x (N, H, W, C) of type T; part (gridDim.x, 9, 64, 64) f32: CTA b computes filter block kb and
// channel block cb ((b mod blocks) = kb * C / 64 + cb) over position range run = b / blocks. Merged: a warpgroup's
// three taps as one m64n192 wgmma per k step (WgConvWgradPlan::merged_taps), else three m64n64. Depth: dy buffers
// and tiles in flight (WgConvWgradPlan::depth). Pro: x is a batch norm's input, and each x row's normalisation (+
// ReLU) is applied in shared memory once it has landed, by the warps that copied it (WgConvWgradPlan::prologue).
template <class T, bool Merged, int Depth, bool Pro>
__global__ void __launch_bounds__(kThreads, 1)
    wgconv_wgrad_kernel(const void* __restrict__ dyv, const void* __restrict__ xv, float* __restrict__ part,
                        WgradArgs a) {
  const T* __restrict__ dy = static_cast<const T*>(dyv);
  const T* __restrict__ x = static_cast<const T*>(xv);
  extern __shared__ uint8_t smem_raw[];
  const uint32_t ring_base = (smem_addr(smem_raw) + 1023u) & ~1023u;   // R + kTile rows
  const uint32_t dy_base = ring_base + (a.ring + kMirror) * 128;       // Depth x kTile rows (1024-aligned)
  const uint32_t pro_base = dy_base + Depth * kTile * 128;               // Pro: 64 x (m, scale, shift, 0) f32
  // wg broadcast from lane 0: warp-uniform, so the descriptors derived from it can live in uniform registers.
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), warp = (tid >> 5) & 3, lane = tid & 31;
  const int hp = a.h + 2, wp = a.wd + 2, halo = wp + 1;
  const unsigned ring_mask = static_cast<unsigned>(a.ring) - 1u;
  const int plane = hp * wp, f_total = plane * a.n_img;
  const int tiles = (f_total + kTile - 1) / kTile;
  const int blocks = (a.k / kCh) * (a.c / kCh), fb = static_cast<int>(blockIdx.x) % blocks;
  const int k0 = fb / (a.c / kCh) * kCh, c0 = fb % (a.c / kCh) * kCh;
  const int t_begin = static_cast<int>(blockIdx.x) / blocks * a.per_cta;
  const int t_end = t_begin + a.per_cta < tiles ? t_begin + a.per_cta : tiles;

  float acc[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) acc[i] = 0.0f;

  if (t_begin < t_end) {
    // Whether padded position pq (of a position >= 0) is a pixel of the image, and its row of the (N, H, W) plane.
    auto inside = [&](const PadPos& pq) {
      return pq.n < a.n_img && static_cast<unsigned>(pq.pp - 1) < static_cast<unsigned>(a.h) &&
             static_cast<unsigned>(pq.qq - 1) < static_cast<unsigned>(a.wd);
    };
    auto pixel_of = [&](const PadPos& pq) { return (pq.n * a.h + pq.pp - 1) * a.wd + pq.qq - 1; };
    // The copies go by half rows: job (row, half) = the row's 16-byte pieces 2 m + half, m = 0..3 (a thread pair
    // covers a row's four 32-byte sectors, one per copy instruction); the row's position is decoded once for them.
    // x at position pos (pq: its padded position, 0's for pos < 0) into its ring row and, for the ring's first
    // kMirror rows, the mirror row after the ring.
    const int half = tid & 1;
    auto load_x_half = [&](int pos, const PadPos& pq) {
      const bool in = inside(pq);
      const int j = static_cast<int>(static_cast<unsigned>(pos) & ring_mask);
      copy_half_row(ring_base + j * 128, j, reinterpret_cast<const uint16_t*>(x + (in ? pixel_of(pq) * a.c + c0 : 0)),
                    in, half, j < kMirror, a.ring * 128);
    };
    // Pro: channel c's (m, scale, shift) of the CTA's 64, at 16-byte slot pro_slot(c) = 16 (c % 4) + c / 4 of
    // pro_base: transform_tile's lanes h = 0..15 read channel 4 h + e together, which this puts in consecutive slots
    // (no bank conflict).
    auto pro_slot = [](int c) { return (c & 3) * 16 + (c >> 2); };
    auto pro_consts = [&](int c) {
      float4 k;
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(k.x), "=f"(k.y), "=f"(k.z), "=f"(k.w)
                   : "r"(pro_base + pro_slot(c) * 16));
      return ApplyConsts{k.x, k.y, k.z};
    };
    // Pro: the batch norm (+ ReLU) applied to this thread's half of ring row pos (pq: its padded position) after its
    // copies landed: bn_elem.cuh's arithmetic, so the rows are bitwise the apply pass's output; the padding stays 0;
    // the mirror row too. (Tile t_begin's span only; the loop's tiles go by transform_tile.)
    auto transform_x_half = [&](int pos, const PadPos& pq) {
      if (!inside(pq)) return;
      const int j = static_cast<int>(static_cast<unsigned>(pos) & ring_mask);
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int piece = 2 * m + half;
        bn_apply_piece<T>(ring_base + sw128_offset(j, piece), [&](int i) { return pro_consts(piece * 8 + i); },
                          a.pro.relu, j < kMirror, a.ring * 128);
      }
    };
    // ... and dy at padded position pq into row i of dy buffer buf.
    auto load_dy_half = [&](int buf, int i, const PadPos& pq) {
      const bool in = inside(pq);
      copy_half_row(dy_base + (buf * kTile + i) * 128, i,
                    reinterpret_cast<const uint16_t*>(dy + (in ? pixel_of(pq) * a.k + k0 : 0)), in, half, false, 0);
    };
    // Tile t's copies: its kTile dy rows into buffer buf and the kTile x rows its span adds to tile t - 1's, [L t +
    // halo, L (t + 1) + halo) -- 512 half-row jobs: thread tid < 256 takes dy row tid / 2, and when tid < 128 also
    // new x row 64 + tid / 2; thread tid >= 256 new x row (tid - 256) / 2. Called for consecutive tiles from t_begin
    // + 1; job_pq is the padded position of this thread's first job at that tile, carried from tile to tile by
    // additions (the integer divisions of pad_pos once per CTA).
    const int jrow = (tid & 255) >> 1;  // the first job's row: of dy (tid < 256) or of the new x rows
    PadPos job_pq = pad_pos((t_begin + 1) * kTile + jrow + (tid < 256 ? 0 : halo), wp, plane);
    PadPos pro_pq = job_pq;  // Pro: the same walk for the transforms, behind the copies
    // f(pos, pq) for this thread's x job of tile t, if it has one (q: its job's position at tile t).
    auto x_job = [&](int t, const PadPos& q, auto&& f) {
      if (tid < 128) {  // x row 64 + jrow: position + 64 + Wp + 1
        PadPos xq = q;
        pad_advance(xq, 64, wp, hp);
        ++xq.pp, ++xq.qq;
        if (xq.qq == wp) xq.qq = 0, ++xq.pp;
        if (xq.pp >= hp) xq.pp -= hp, ++xq.n;
        f(t * kTile + halo + 64 + jrow, xq);
      } else if (tid >= 256) {
        f(t * kTile + halo + jrow, q);
      }
    };
    auto load_tile = [&](int t, int buf) {
      const PadPos q = job_pq;
      pad_advance(job_pq, kTile, wp, hp);
      if (tid < 256) load_dy_half(buf, jrow, q);
      x_job(t, q, load_x_half);
    };
    // Pro: tile t's new x rows, as load_tile(t) copied them (called for the same consecutive tiles, after each
    // thread's wait for its own copies), transformed by the warp that copied them: a warp with x jobs copied 16
    // consecutive rows (lanes 2 r and 2 r + 1 row r), so after __syncwarp all of them are in for all its lanes, and
    // lane l takes the 8-byte half piece h = l % 16 (channels 4 h .. 4 h + 3) of rows l / 16 + 2 i, i = 0..7: its 4
    // channels' constants loaded once a tile and kept in 12 registers (a 16-byte piece's 24 spilled: the in-flight
    // wgmma hold 128). Sixteen lanes cover one row: no bank conflict. (By the copy jobs' half rows, each piece
    // needed its own 8 loads of two-way conflicting constants: Nsight Compute, RESULTS.md run 70.) In kProParts calls
    // (part 0, 1, ..): part p the rows i in [8 p / kProParts, 8 (p + 1) / kProParts) (the loop spreads them over two
    // places where wgmma work is queued).
    auto transform_tile = [&](int t, int part) {
      const PadPos q = pro_pq;
      if (part == kProParts - 1) pad_advance(pro_pq, kTile, wp, hp);
      if (tid >= 128 && tid < 256) return;  // warpgroup 1 copies no x rows (warp-uniform)
      bool in = false;
      int pos = 0;
      x_job(t, q, [&](int p, const PadPos& pq) { in = inside(pq), pos = p; });
      const unsigned rows_in = __ballot_sync(0xffffffffu, in);  // bit 2 r: the warp's row r is a pixel
      const int pos0 = __shfl_sync(0xffffffffu, pos, 0);        // the warp's row 0
      __syncwarp();  // every lane's copies, each waited for by its lane, visible to the whole warp
      const int h = lane & 15;
      ApplyConsts kc[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) kc[e] = pro_consts(4 * h + e);
      // kBatch rows' loads issued together (one after another each row waited for its load, Nsight Compute run 70).
      constexpr int kBatch = 2;  // 4 spilled 12-40 bytes (128 registers are the in-flight wgmma's)
      static_assert((8 / kProParts) % kBatch == 0, "whole batches a part");
#pragma unroll
      for (int i0 = 8 / kProParts * part; i0 < 8 / kProParts * (part + 1); i0 += kBatch) {
        uint32_t v[kBatch][2];
        int j[kBatch];  // the rows' ring rows
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          j[b] = static_cast<int>(static_cast<unsigned>(pos0 + (lane >> 4) + 2 * (i0 + b)) & ring_mask);
          lds_words(ring_base + sw128_offset(j[b], h >> 1) + 8 * (h & 1), v[b]);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          if (!((rows_in >> (2 * ((lane >> 4) + 2 * (i0 + b)))) & 1u)) continue;  // the padding stays 0
          bn_apply_regs<T>(v[b], [&](int e) { return kc[e]; }, a.pro.relu);
          sts_words(ring_base + sw128_offset(j[b], h >> 1) + 8 * (h & 1), v[b], j[b] < kMirror, a.ring * 128);
        }
      }
    };
    // Half h of tile t's A (k steps kHalf h .. kHalf h + kHalf - 1) from dy buffer buf into af. Matrix lane / 8 of
    // each ldmatrix.x4.trans: positions 16 kk + 8 (lane / 16) + lane % 8, filters 16 warp + 8 ((lane / 8) % 2): as
    // the mma fragment's (rows g, cols 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8).
    const int chunk = 2 * warp + ((lane >> 3) & 1);
    auto load_a = [&](uint32_t (&af)[kHalf][4], int buf, int h) {
      const uint32_t dyb = dy_base + buf * kTile * 128;
#pragma unroll
      for (int kk = 0; kk < kHalf; ++kk) {
        const int prow = (h * kHalf + kk) * 16 + ((lane >> 4) << 3) + (lane & 7);
        ldsm_x4_trans(af[kk], dyb + prow * 128 + ((chunk ^ (prow & 7)) << 4));
      }
    };
    // Half h of tile t's wgmma from af: this warpgroup's three taps (wg, s), one commit group. Tap s's window starts
    // at ring row (L t + (wg - 1) Wp + s - 1) mod R; a k step is 16 rows = +2048 bytes = +128 in the descriptor's
    // start field (contiguous through the mirror rows; no carry: the start stays below 2^14). Merged: one N = 192
    // operand from tap 0's window whose 64-channel blocks are 128 bytes (one row: the next tap) apart.
    auto issue = [&](const uint32_t (&af)[kHalf][4], int t, int h) {
      uint64_t db[3];
#pragma unroll
      for (int s = 0; s < (Merged ? 1 : 3); ++s) {
        const int shift = (wg - 1) * wp + (s - 1);
        const unsigned row = static_cast<unsigned>(t * kTile + shift) & ring_mask;
        const uint32_t addr = ring_base + row * 128;
        db[s] = Merged ? sw128_mn_desc_lbo(addr, 128) : sw128_mn_desc(addr);
      }
      wgmma_fence();  // af just written by ldmatrix
#pragma unroll
      for (int kk = 0; kk < kHalf; ++kk) {
        const uint64_t step = static_cast<uint64_t>(128 * (h * kHalf + kk));
        if constexpr (Merged) {
          wgmma_m64n192k16_rs_tb<T>(acc, af[kk], db[0] + step);
        } else {
#pragma unroll
          for (int s = 0; s < 3; ++s) wgmma_m64n64k16_rs_tb<T>(tap_acc(acc, s), af[kk], db[s] + step);
        }
      }
      wgmma_commit();
    };
    // After a wgmma_wait that retired the group reading af: keeps its registers live up to here (not reused while
    // the wgmma could still read them) before ldmatrix overwrites them.
    auto release = [](uint32_t (&af)[kHalf][4]) {
#pragma unroll
      for (int kk = 0; kk < kHalf; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) fence_operand(af[kk][i]);
    };

    // Software pipeline, Depth tiles deep: while tile t's two wgmma groups run, the CTA waits for tile t + 1's
    // rows, copies tile t + Depth - 1's (dy buffer (t - 1) mod Depth -- tile t - 1's, whose ldmatrix all passed the
    // barrier -- and x rows that R >= Depth L + 2 (W + 3) keeps off the spans of tiles t .. t + Depth - 2:
    // wgconv_wgrad_ring_rows) and loads tile t + 1's first A half. Commit groups: cp.async one per tile (the
    // prologue's for tiles t_begin .. t_begin + Depth - 2, empty past t_end); wgmma (t, 0) and (t, 1).
    // kLateCopies (Depth 4): the copies of tile t + Depth - 1 are issued one iteration later, right after tile t + 1's
    // first wgmma group (then (t, 1) and (t + 1, 0) are queued), instead of between barrier t and that group --
    // the barrier-to-wgmma path (Nsight Compute, run 70: the barrier's wait ~20 % of the plain kernel's stall
    // samples) without them; the copies still land ~1.5 tiles before their wait (run 71, H100: conv1_2 1,471 ->
    // 1,376-1,381 us, conv2_1 749-773 -> 694-696). Depth 3 keeps them after the barrier (one tile ahead only), and
    // so does the Pro kernel, whose transform of tile t + 1 follows the same first group: the copies issued there
    // delayed it (run 71: 2,469-2,550 us with kProParts 2, against e12ada4's 2,068 in the same lease).
    constexpr bool kLateCopies = Depth >= 4 && !Pro;
    if constexpr (Pro) {  // the constants of channels c0 .. c0 + 63, before any transform reads them
      if (tid < kCh) {
        const ApplyConsts k = apply_consts(c0 + tid, a.pro.gamma, a.pro.beta, a.pro.mean, a.pro.invstd, false, 0.0f,
                                           nullptr);
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(pro_base + pro_slot(tid) * 16), "f"(k.m),
                     "f"(k.scale), "f"(k.shift), "f"(0.0f)
                     : "memory");
      }
      __syncthreads();
    }
    // Tile t_begin's whole span, by thread pairs (f: load_x_half, then Pro's transform of the same half rows).
    auto each_span_half = [&](auto&& f) {
      for (int r = tid >> 1; r < kTile + 2 * halo; r += kThreads / 2) {
        const int pos = t_begin * kTile - halo + r;
        f(pos, pad_pos(pos < 0 ? 0 : pos, wp, plane));
      }
    };
    each_span_half(load_x_half);
    if (tid < 256) load_dy_half(0, jrow, pad_pos(t_begin * kTile + jrow, wp, plane));
    cp_async_commit();
#pragma unroll
    for (int u = 1; u < Depth - 1; ++u) {  // consecutive tiles: load_tile's positions carried from t_begin + 1
      if (t_begin + u < t_end) load_tile(t_begin + u, u);
      cp_async_commit();
    }
    cp_async_wait<Depth - 2>();
    if constexpr (Pro) each_span_half(transform_x_half);  // this thread's own copies, landed
    fence_proxy_async();
    __syncthreads();  // tile t_begin's rows in for everyone
    uint32_t af0[kHalf][4], af1[kHalf][4] = {};
    load_a(af0, 0, 0);
    fence_operands(acc);
    // buf: tile t's dy buffer, (t - t_begin) mod Depth; next: tile t + 1's; last: tile t - 1's (= t + Depth - 1's).
    for (int t = t_begin, buf = 0; t < t_end; ++t, buf = buf + 1 == Depth ? 0 : buf + 1) {
      const int next = buf + 1 == Depth ? 0 : buf + 1;
      issue(af0, t, 0);
      if constexpr (kLateCopies) {  // tile t + Depth - 2's copies, which iteration t - 1 would have issued after its
        // barrier: into tile t - 2's dy buffer (its ldmatrix passed barrier t - 1), x rows that the same R keeps off
        // the spans of tiles t - 1 .. t + Depth - 3 ((t - 1, 1) and (t, 0) are in flight)
        if (t > t_begin) {
          if (t + Depth - 2 < t_end) load_tile(t + Depth - 2, buf >= 2 ? buf - 2 : buf + Depth - 2);
          cp_async_commit();
        }
      }
      // Pro: tile t + 1's x rows transformed here, where the most wgmma work is queued ((t - 1, 1) and (t, 0)), and
      // (kProParts 2) half of them after issue(af1) ((t, 0) and (t, 1) queued). They lie outside the spans of tiles
      // t - 1 and t, which those read. (All after issue(af1): 1.6-1.8x the plain kernel's time; all here: 1.38x --
      // run 70.)
      if constexpr (Pro) {
        if (t + 1 < t_end) {
          cp_async_wait<Depth - 3>();  // this thread's copies of tile t + 1 (those of t + 2 .. may fly)
          transform_tile(t + 1, 0);
        }
      }
      wgmma_wait<1>();  // (t - 1, 1) retired: af1 free
      release(af1);
      load_a(af1, buf, 1);
      issue(af1, t, 1);
      if (t + 1 < t_end) {
        if constexpr (!Pro) cp_async_wait<Depth - 3>();  // this thread's copies of tile t + 1 (t + 2 .. may fly)
        if constexpr (Pro && kProParts == 2) transform_tile(t + 1, 1);
        fence_proxy_async();
        __syncthreads();  // tile t + 1's rows in for everyone; everyone's ldmatrix and wgmma of tile t - 1 done
        if constexpr (!kLateCopies) {
          if (t + Depth - 1 < t_end) load_tile(t + Depth - 1, buf == 0 ? Depth - 1 : buf - 1);  // tile t - 1's buffer
          cp_async_commit();
        }
        wgmma_wait<1>();  // (t, 0) retired: af0 free
        release(af0);
        load_a(af0, next, 0);
      }
    }
    wgmma_wait<0>();
    fence_operands(acc);
    release(af0);
    release(af1);
  }
  // This CTA's partial: thread (warp, lane) holds filters 16 warp + g (+ 8), channels 8 j + 2 t (+ 1) of each tap in
  // registers 4 j + {0, 1} (+ {2, 3}), g = lane / 4, t = lane % 4.
  float* out = part + static_cast<int64_t>(blockIdx.x) * kTaps * kCh * kCh;
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int s = 0; s < 3; ++s) {
    float* tap = out + (3 * wg + s) * kCh * kCh;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int kr = 16 * warp + g, c = 8 * j + 2 * tq;
      const float* v = acc + 32 * s + 4 * j;
      *reinterpret_cast<float2*>(tap + kr * kCh + c) = make_float2(v[0], v[1]);
      *reinterpret_cast<float2*>(tap + (kr + 8) * kCh + c) = make_float2(v[2], v[3]);
    }
  }
}

// dw[k][r][s][c] (K, 3, 3, C) = sum over the position ranges in order of the partial of the CTA of k's and c's
// blocks, at (3 r + s, k mod 64, c mod 64), in float64.
__global__ void wgconv_wgrad_reduce_kernel(const float* __restrict__ part, int runs, int k_total, int c_total,
                                           float* __restrict__ dw) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // (k, tap, c) of dw
  if (i >= k_total * kTaps * c_total) return;
  const int c = i % c_total, tap = (i / c_total) % kTaps, k = i / (c_total * kTaps);
  const int cblocks = c_total / kCh, blocks = (k_total / kCh) * cblocks;
  const int fb = k / kCh * cblocks + c / kCh;
  const int64_t at = (static_cast<int64_t>(tap) * kCh + k % kCh) * kCh + c % kCh;
  constexpr int64_t kPart = static_cast<int64_t>(kTaps) * kCh * kCh;
  double sum = 0.0;
  for (int r = 0; r < runs; ++r) sum += part[(static_cast<int64_t>(r) * blocks + fb) * kPart + at];
  dw[i] = static_cast<float>(sum);
}

// Tiles of kTile positions over g's padded plane (every CTA's range is a run of them).
int64_t wgrad_tiles(const Conv2dGeom& g) { return (g.n * (g.h + 2) * (g.w + 2) + kTile - 1) / kTile; }

using WgradKernel = void (*)(const void*, const void*, float*, WgradArgs);
template <class T, int Depth, bool Pro>
WgradKernel wgrad_kernel_of(bool merged) {
  return merged ? &wgconv_wgrad_kernel<T, true, Depth, Pro> : &wgconv_wgrad_kernel<T, false, Depth, Pro>;
}
template <class T, bool Pro>
WgradKernel wgrad_kernel_of(int depth, bool merged) {
  static_assert(kWgconvWgradMinDepth == 3 && kWgconvWgradMaxDepth == 4, "one instantiation per depth");
  return depth == 4 ? wgrad_kernel_of<T, 4, Pro>(merged) : wgrad_kernel_of<T, 3, Pro>(merged);
}
template <class T>
WgradKernel wgrad_kernel_of(int depth, bool merged, bool pro) {
  return pro ? wgrad_kernel_of<T, true>(depth, merged) : wgrad_kernel_of<T, false>(depth, merged);
}
WgradKernel wgrad_kernel(GpuDType io, int depth, bool merged, bool pro) {
  return io == GpuDType::F16 ? wgrad_kernel_of<__half>(depth, merged, pro)
                             : wgrad_kernel_of<__nv_bfloat16>(depth, merged, pro);
}

}  // namespace

Result<WgConvWgradPlan> wgconv_wgrad_plan(const Conv2dGeom& g, GpuDType io, int depth, bool prologue) {
  if (io != GpuDType::F16 && io != GpuDType::BF16)
    return Error{ErrCode::NotSupported, "wgconv",
                 std::string("the wgmma weight gradient takes f16 or bf16, not ") + gpu_dtype_name(io)};
  if (!wgconv_wgrad_ring_eligible(g))
    return Error{ErrCode::NotSupported, "wgconv",
                 "the ring weight gradient takes 3x3 stride-1 padding-1 convs with C and K of 64 or 128 whose ring "
                 "fits shared memory: " + conv2d_geom_str(g)};
  if (depth != 0 ? !wgconv_wgrad_depth_fits(g, depth, prologue) : wgconv_wgrad_depth(g, prologue) == 0)
    return Error{ErrCode::NotSupported, "wgconv",
                 "the ring weight gradient's pipeline depth " + std::to_string(depth) + " (3 or 4, its shared memory "
                 "within the limit" + (prologue ? " with the batch-norm prologue" : "") + ") for " +
                     conv2d_geom_str(g)};
  Result<int> sms = wgconv_device_sms("the wgmma weight gradient");
  if (!sms.ok()) return sms.errors();
  WgConvWgradPlan p;
  p.g = g;
  p.io = io;
  p.depth = depth != 0 ? depth : wgconv_wgrad_depth(g, prologue);
  p.prologue = prologue;
  p.ring_rows = static_cast<int>(wgconv_wgrad_ring_rows(g, p.depth));
  p.smem_bytes = static_cast<size_t>(wgconv_wgrad_smem_bytes(g, p.depth, prologue));
  const int64_t blocks = (g.k / kCh) * (g.c / kCh);
  p.grid = blocks * std::max<int64_t>(1, std::min<int64_t>(sms.value() / blocks, wgrad_tiles(g)));
  for (bool merged : {false, true})
    TRCTL_CUDA_TRY(cudaFuncSetAttribute(wgrad_kernel(io, p.depth, merged, prologue),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(p.smem_bytes)));
  return p;
}

size_t wgconv_wgrad_workspace_bytes(const WgConvWgradPlan& p) {
  return static_cast<size_t>(p.grid) * kTaps * kCh * kCh * sizeof(float);
}

Status wgconv_wgrad_cuda(cudaStream_t stream, const WgConvWgradPlan& p, const void* dy, const void* x, float* dw,
                         void* ws, size_t ws_bytes, const WgConvPrologue* pro) {
  if ((reinterpret_cast<uintptr_t>(dy) | reinterpret_cast<uintptr_t>(x)) % 16 != 0 || !dw)
    return Error{ErrCode::Internal, "wgconv", "the weight gradient's dy and x must be 16-byte aligned, dw set"};
  if ((pro != nullptr) != p.prologue || (pro && (!pro->gamma || !pro->beta || !pro->mean || !pro->invstd)))
    return Error{ErrCode::Internal, "wgconv",
                 "the weight gradient's batch-norm prologue: the plan and the constants disagree, or one is null"};
  if (!ws || ws_bytes < wgconv_wgrad_workspace_bytes(p))
    return Error{ErrCode::Internal, "wgconv", "the weight gradient needs wgconv_wgrad_workspace_bytes of ws"};
  const Conv2dGeom& g = p.g;
  const int64_t blocks = (g.k / kCh) * (g.c / kCh);
  if (p.grid < blocks || p.grid % blocks != 0 || p.grid >= (static_cast<int64_t>(1) << 31))
    return Error{ErrCode::Internal, "wgconv", "weight gradient grid not a multiple of its 64 x 64 blocks"};
  if (p.depth < kWgconvWgradMinDepth || p.depth > kWgconvWgradMaxDepth ||
      p.ring_rows != wgconv_wgrad_ring_rows(g, p.depth) ||
      p.smem_bytes != static_cast<size_t>(wgconv_wgrad_smem_bytes(g, p.depth, p.prologue)))
    return Error{ErrCode::Internal, "wgconv", "weight gradient plan: depth, ring and shared memory disagree"};
  WgradArgs a;
  a.n_img = static_cast<int>(g.n), a.h = static_cast<int>(g.h), a.wd = static_cast<int>(g.w);
  a.k = static_cast<int>(g.k), a.c = static_cast<int>(g.c);
  a.ring = p.ring_rows;
  const int64_t runs = p.grid / blocks;
  a.per_cta = static_cast<int>((wgrad_tiles(g) + runs - 1) / runs);
  if (pro) a.pro = *pro;
  const WgradKernel kernel = wgrad_kernel(p.io, p.depth, p.merged_taps, p.prologue);
  kernel<<<static_cast<unsigned>(p.grid), kThreads, p.smem_bytes, stream>>>(dy, x, static_cast<float*>(ws), a);
  TRCTL_CUDA_TRY(cudaGetLastError());
  const int outs = static_cast<int>(g.k * kTaps * g.c);
  wgconv_wgrad_reduce_kernel<<<(outs + 255) / 256, 256, 0, stream>>>(
      static_cast<const float*>(ws), static_cast<int>(runs), static_cast<int>(g.k), static_cast<int>(g.c), dw);
  TRCTL_CUDA_TRY(cudaGetLastError());
  return ok_status();
}

}  // namespace trctl
