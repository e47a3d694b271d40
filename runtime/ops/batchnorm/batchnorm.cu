// Batch norm kernels. Three launches per direction, all on one (row-block x channel-tile) geometry:
//   1. stats: block (tx, 16) covers tx*V channels and one block of rows; thread (tx, ty) reads rows r0+ty, r0+ty+16,
//      ... with V-wide vector loads (a warp reads whole rows: coalesced), keeps per-channel Welford state (forward)
//      or plain sums (backward), and the 16 row groups are merged in ty order into one partial per channel.
//   2. finalize: per channel, the row-block partials are merged in fixed order (strided loop + tree).
//   3. apply: elementwise over the same geometry, per-channel constants kept in registers.
// The row split (rows per block, 16 row groups) depends only on (rows, c), never on V or the alignment, and all
// roundings are explicit (fmaf), so the vector and scalar paths give bitwise the same results.
// A fused 2x2/2-style max pool (pass_fuse_bn_pool): the forward keeps passes 1-2 and replaces 3 with a max pool
// that normalises on load (bn_pool_apply_kernel); the backward's passes 1 and 3 read the pooled dy and argmax in
// place of the full-resolution dy (load_grad_rows), with the same row split and summation order.
#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"

namespace trctl {

namespace {

constexpr int kRowGroups = 16;             // threadIdx.y extent of the stats/apply blocks
constexpr int kUnroll = 4;                 // rows loaded before use: more bytes in flight per thread
constexpr int64_t kTargetPartials = 65536; // row blocks * c: enough blocks to fill the GPU for c = 64
constexpr int64_t kMinRowsPerBlock = 32;
constexpr int64_t kMaxRowBlocks = 4096;    // bounds the finalize work and gridDim.y
constexpr int kFinCols = 8, kFinGroups = 64, kFinUnroll = 4;  // finalize: 8 channels (one 32-byte sector) x 64

struct RowSplit {
  int64_t rows_per_block = 1, blocks = 1;
};

// Row blocks from (rows, c) only: it fixes the summation order, and it sizes the workspace.
RowSplit row_split(int64_t rows, int64_t c) {
  int64_t want = std::max<int64_t>(1, kTargetPartials / std::max<int64_t>(c, 1));
  want = std::min(want, kMaxRowBlocks);
  want = std::min(want, (rows + kMinRowsPerBlock - 1) / kMinRowsPerBlock);
  want = std::max<int64_t>(want, 1);
  RowSplit s;
  s.rows_per_block = std::max<int64_t>(1, (rows + want - 1) / want);
  s.blocks = std::max<int64_t>(1, (rows + s.rows_per_block - 1) / s.rows_per_block);
  return s;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// Launch shape for vector width V: tx threads along channels (power of two <= 32), 16 row groups.
struct Launch {
  dim3 grid, block;
  size_t smem = 0;  // stats kernels: two (16, tx*V) f32 arrays
};
Launch make_launch(int64_t c, int v, const RowSplit& rs) {
  const int64_t packs = (c + v - 1) / v;
  int tx = 1;
  while (tx < packs && tx < 32) tx *= 2;
  Launch l;
  l.block = dim3(tx, kRowGroups);
  l.grid = dim3(static_cast<unsigned>((packs + tx - 1) / tx), static_cast<unsigned>(rs.blocks));
  l.smem = 2 * sizeof(float) * kRowGroups * tx * v;
  return l;
}

// Chan et al. merge of moments (n, mean, m2) with (nb, mb, m2b); an empty side leaves the other exactly.
__device__ __forceinline__ void chan_merge(float& n, float& mean, float& m2, float nb, float mb, float m2b) {
  if (nb == 0.0f) return;
  const float nn = n + nb;
  const float wb = __fdiv_rn(nb, nn);
  const float delta = mb - mean;
  mean = fmaf(delta, wb, mean);
  m2 = m2 + fmaf(delta * delta, n * wb, m2b);
  n = nn;
}

// Rows of row group g (rows r0+g, r0+g+16, ...) in a block of len rows.
__device__ __forceinline__ float group_rows(int64_t len, int g) {
  return len > g ? static_cast<float>((len - 1 - g) / kRowGroups + 1) : 0.0f;
}

__device__ __forceinline__ float row_block_len(int64_t rb, int64_t rows, int64_t rpb) {
  return static_cast<float>(min(rows, (rb + 1) * rpb) - rb * rpb);
}

// out[u] = the V-pack at (row r + 16u, column col) of p (rows,c), for the rows below r1.
template <int U, int V, class T>
__device__ __forceinline__ void load_rows(const T* p, int64_t r, int64_t r1, int64_t c, int64_t col,
                                          Pack<T, V> (&out)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (r + u * kRowGroups < r1) out[u] = pack_load<V>(p + (r + u * kRowGroups) * c + col);
}

// Backward loads: 3 packs per row, so wide packs use half the unroll to stay within 128 registers (no spills at
// 512 threads). The unroll does not change the order of the per-thread sums.
template <int V>
constexpr int bwd_unroll() { return V >= 8 ? 2 : kUnroll; }

// Per-channel accumulators: Welford moments (forward) and the two plain sums (backward). Trivial types, since they
// live in __shared__ arrays. add_partial takes one partial pair (with its row count), add merges an accumulator.
struct Moments {
  float n, mean, m2;
  __device__ void add_partial(float pm, float p2, float count) { chan_merge(n, mean, m2, count, pm, p2); }
  __device__ void add(const Moments& o) { chan_merge(n, mean, m2, o.n, o.mean, o.m2); }
  __device__ float first() const { return mean; }
  __device__ float second() const { return m2; }
};
struct Sums {
  float g, gx;
  __device__ void add_partial(float pg, float pgx, float) { g += pg, gx += pgx; }
  __device__ void add(const Sums& o) { g += o.g, gx += o.gx; }
  __device__ float first() const { return g; }
  __device__ float second() const { return gx; }
};

// End of a stats kernel: the 16 row groups' per-thread pairs (a, b) go through shared memory (2, 16, tx*V) and
// thread (tx, j < V) merges channel col + j in group order 0..15 into the row-block partials pa, pb (row blocks, c).
template <class Acc, int V>
__device__ __forceinline__ void store_block_partials(const float (&a)[V], const float (&b)[V], int64_t col,
                                                     int64_t c, int64_t len, float* __restrict__ pa,
                                                     float* __restrict__ pb) {
  extern __shared__ float smem[];
  const int tx = threadIdx.x, ty = threadIdx.y, tile = blockDim.x * V;
  float* sa = smem;
  float* sb = smem + kRowGroups * tile;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    sa[ty * tile + tx * V + j] = a[j];
    sb[ty * tile + tx * V + j] = b[j];
  }
  __syncthreads();
  if (ty >= V || col + ty >= c) return;
  Acc acc{};
  for (int g = 0; g < kRowGroups; ++g)
    acc.add_partial(sa[g * tile + tx * V + ty], sb[g * tile + tx * V + ty], group_rows(len, g));
  pa[blockIdx.y * c + col + ty] = acc.first();
  pb[blockIdx.y * c + col + ty] = acc.second();
}

// Pass 1 forward. x (rows,c) -> part_mean, part_m2 (row blocks, c): Welford moments of each row block.
template <class T, int V>
__global__ void __launch_bounds__(512)
    bn_fwd_stats_kernel(const T* __restrict__ x, int64_t rows, int64_t c, int64_t rpb, float* __restrict__ part_mean,
                        float* __restrict__ part_m2) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * blockDim.x + tx) * V;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rpb, r1 = min(rows, r0 + rpb);
  float n = 0.0f, mean[V], m2[V];
#pragma unroll
  for (int j = 0; j < V; ++j) mean[j] = m2[j] = 0.0f;
  if (col < c) {
    for (int64_t r = r0 + ty; r < r1; r += kRowGroups * kUnroll) {
      Pack<T, V> p[kUnroll];
      load_rows(x, r, r1, c, col, p);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (r + u * kRowGroups >= r1) break;
        n += 1.0f;
        const float inv = __frcp_rn(n);  // shared by the V channels of this row
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float v = to_f32(p[u].v[j]);
          const float d = v - mean[j];
          mean[j] = fmaf(d, inv, mean[j]);
          m2[j] = fmaf(d, v - mean[j], m2[j]);
        }
      }
    }
  }
  store_block_partials<Moments>(mean, m2, col, c, r1 - r0, part_mean, part_m2);
}

// Reduces the row-block partials pa, pb (row blocks, c) of channel ch = blockIdx.x * 8 + tx in fixed order: row
// group ty takes blocks ty, ty + 64, ... in turn, then a fixed tree over the 64 groups. Valid in thread ty == 0.
template <class Acc>
__device__ Acc reduce_row_blocks(const float* __restrict__ pa, const float* __restrict__ pb, int64_t rows,
                                 int64_t c, int64_t rpb, int64_t nrb) {
  __shared__ Acc sh[kFinGroups][kFinCols];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * kFinCols + tx;
  Acc acc{};
  if (ch < c) {
    for (int64_t rb0 = ty; rb0 < nrb; rb0 += kFinGroups * kFinUnroll) {
      float va[kFinUnroll], vb[kFinUnroll];  // loads first: kFinUnroll independent loads in flight
#pragma unroll
      for (int u = 0; u < kFinUnroll; ++u) {
        const int64_t rb = rb0 + u * kFinGroups;
        va[u] = rb < nrb ? pa[rb * c + ch] : 0.0f;
        vb[u] = rb < nrb ? pb[rb * c + ch] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kFinUnroll; ++u) {
        const int64_t rb = rb0 + u * kFinGroups;
        if (rb < nrb) acc.add_partial(va[u], vb[u], row_block_len(rb, rows, rpb));
      }
    }
  }
  sh[ty][tx] = acc;
  for (int half = kFinGroups / 2; half > 0; half /= 2) {  // group g absorbs g + half
    __syncthreads();
    if (ty < half) {
      acc.add(sh[ty + half][tx]);
      sh[ty][tx] = acc;
    }
  }
  return acc;
}

// Pass 2 forward: mean, invstd and the running statistics from the row-block moments (row blocks, c). prebias
// (nullable): a folded conv bias, added to the mean for the running mean only.
__global__ void __launch_bounds__(kFinCols * kFinGroups)
    bn_fwd_finalize_kernel(const float* __restrict__ part_mean, const float* __restrict__ part_m2, int64_t rows,
                           int64_t c, int64_t rpb, int64_t nrb, float eps, float momentum, float* save_mean,
                           float* save_invstd, float* running_mean, float* running_var,
                           const float* __restrict__ prebias) {
  const Moments m = reduce_row_blocks<Moments>(part_mean, part_m2, rows, c, rpb, nrb);
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * kFinCols + threadIdx.x;
  if (threadIdx.y != 0 || ch >= c) return;
  const float var = fmaxf(m.m2 / m.n, 0.0f);  // biased; m.n == rows
  save_mean[ch] = m.mean;
  save_invstd[ch] = 1.0f / sqrtf(var + eps);
  if (running_mean) {
    const float batch_mean = prebias ? m.mean + prebias[ch] : m.mean;  // the mean of x + b
    running_mean[ch] = fmaf(momentum, batch_mean, (1.0f - momentum) * running_mean[ch]);
  }
  if (running_var) {
    const float unbiased = var * (m.n / (m.n - 1.0f));
    running_var[ch] = fmaf(momentum, unbiased, (1.0f - momentum) * running_var[ch]);
  }
}

// The per-channel constants of the apply pass, y = relu?((x - m) * scale + shift [+ res]): train: m = mean,
// scale = gamma * invstd; eval (var_not_invstd): inv = 1/sqrt(running_var + eps), m = running_mean - mean_shift
// (nullable: a folded conv bias). One definition for the apply, the fused apply + pool and the recomputed ReLU
// mask, so that their values are bitwise the same.
struct ApplyConsts {
  float m, scale, shift;
};
__device__ __forceinline__ ApplyConsts apply_consts(int64_t ch, const float* __restrict__ gamma,
                                                    const float* __restrict__ beta, const float* __restrict__ mean,
                                                    const float* __restrict__ inv_or_var, bool var_not_invstd,
                                                    float eps, const float* __restrict__ mean_shift) {
  const float inv = var_not_invstd ? 1.0f / sqrtf(inv_or_var[ch] + eps) : inv_or_var[ch];
  return {mean_shift ? mean[ch] - mean_shift[ch] : mean[ch], gamma[ch] * inv, beta[ch]};
}
// (x - m) * scale + shift with one rounding (fmaf), before a residual, the ReLU and the rounding to T.
__device__ __forceinline__ float apply_affine(float xf, const ApplyConsts& k) {
  return fmaf(xf - k.m, k.scale, k.shift);
}

// Pass 3 forward (train and eval): y = relu?((x - mean) * (gamma * inv) + beta [+ res]), inv = invstd, or
// 1/sqrt(var + eps) when var_not_invstd (eval: running_var). x, y, res (rows,c); y may alias x or res; res nullable.
// mean_shift (c), nullable: subtracted from mean (eval with a folded conv bias: running_mean - b).
template <class T, int V>
__global__ void __launch_bounds__(512)
    bn_fwd_apply_kernel(const T* x, const T* res, T* y, const float* __restrict__ gamma, const float* __restrict__ beta,
                        const float* __restrict__ mean, const float* __restrict__ inv_or_var, bool var_not_invstd,
                        float eps, bool relu, int64_t rows, int64_t c, int64_t rpb,
                        const float* __restrict__ mean_shift) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= c) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rpb, r1 = min(rows, r0 + rpb);
  ApplyConsts k[V];
#pragma unroll
  for (int j = 0; j < V; ++j)
    k[j] = apply_consts(col + j, gamma, beta, mean, inv_or_var, var_not_invstd, eps, mean_shift);
  for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowGroups * kUnroll) {
    Pack<T, V> p[kUnroll], q[kUnroll];
    load_rows(x, r, r1, c, col, p);
    if (res) load_rows(res, r, r1, c, col, q);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (r + u * kRowGroups >= r1) break;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        float v = apply_affine(to_f32(p[u].v[j]), k[j]);
        if (res) v += to_f32(q[u].v[j]);
        if (relu) v = (v > 0.0f || v != v) ? v : 0.0f;  // NaN propagates, as torch.relu
        p[u].v[j] = from_f32<T>(v);
      }
      pack_store<V>(y + (r + u * kRowGroups) * c + col, p[u]);
    }
  }
}

// Pass 3 forward with a fused max pool (pass_fuse_bn_pool): x (N,H,W,C) -> y (N,H/kh,W/kw,C), idx (same, u8,
// nullable) over kh x kw windows that tile x. One thread per output pixel and V channels normalises its window's
// elements on load exactly as bn_fwd_apply_kernel computes and rounds y (same constants, one fmaf, the ReLU, the
// rounding to T), then takes the max with maxpool_fwd_idx_kernel's rule (a greater value or a NaN takes over, ties
// keep the first), so y and idx are bitwise those of the unfused apply + max pool. Constants as
// bn_fwd_apply_kernel (train: mean, invstd; eval: running mean and variance, var_not_invstd, mean_shift).
template <class T, int V, class I>
__global__ void __launch_bounds__(256)
    bn_pool_apply_kernel(const T* __restrict__ x, T* __restrict__ y, uint8_t* __restrict__ idx,
                         const float* __restrict__ gamma, const float* __restrict__ beta,
                         const float* __restrict__ mean, const float* __restrict__ inv_or_var, bool var_not_invstd,
                         float eps, bool relu, const float* __restrict__ mean_shift, int64_t n, int64_t h, int64_t w,
                         int64_t c, int kh, int kw) {
  const I np = static_cast<I>(h / kh), nq = static_cast<I>(w / kw), cv = static_cast<I>(c / V);
  const I total = static_cast<I>(n) * np * nq * cv;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I c0 = (i % cv) * V;
    I t = i / cv;
    const I q = t % nq;
    t /= nq;
    const I p = t % np, b = t / np;
    ApplyConsts k[V];
    float best_v[V];
    int best[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      k[j] = apply_consts(c0 + j, gamma, beta, mean, inv_or_var, var_not_invstd, eps, mean_shift);
      best_v[j] = -INFINITY;
      best[j] = 0;  // an all -inf window: its first element, as the max pool
    }
    const T* xw = x + ((static_cast<int64_t>(b) * h + static_cast<int64_t>(p) * kh) * w +
                       static_cast<int64_t>(q) * kw) * c + c0;
    for (int r = 0; r < kh; ++r) {
      for (int s = 0; s < kw; ++s) {
        const Pack<T, V> v = pack_load<V>(xw + (static_cast<int64_t>(r) * w + s) * c);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          float e = apply_affine(to_f32(v.v[j]), k[j]);
          if (relu) e = (e > 0.0f || e != e) ? e : 0.0f;
          const float f = to_f32(from_f32<T>(e));  // y as the apply kernel stores it
          if (f > best_v[j] || f != f) {
            best_v[j] = f;
            best[j] = r * kw + s;
          }
        }
      }
    }
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(best_v[j]);
    pack_store<V>(y + static_cast<int64_t>(i) * V, out);
    if (idx) {
      uint8_t bb[V];
#pragma unroll
      for (int j = 0; j < V; ++j) bb[j] = static_cast<uint8_t>(best[j]);
      store_bytes<V>(idx + static_cast<int64_t>(i) * V, bb);  // idx 8-byte aligned (the launcher)
    }
  }
}

// The fused ReLU's mask without reading its output: y > 0 for the y that bn_fwd_apply_kernel stored from x (no
// residual), recomputed with the same float operations (x - mean, one fmaf with gamma * invstd and beta, rounding to
// T), so it is bitwise the mask of the stored y: a value that rounds to 0 or is NaN gives no gradient there too.
template <class T>
__device__ __forceinline__ bool relu_kept(float xf, float m, float scale, float beta) {
  const float v = apply_affine(xf, ApplyConsts{m, scale, beta});
  return to_f32(from_f32<T>(v)) > 0.0f;
}

// The incoming gradient g of one element, for both backward passes: dy, or 0 where the fused ReLU cut it (the mask
// recomputed from x when relu_beta is given, else relu_y > 0 when relu_y is given; y is that element of relu_y).
template <class T>
__device__ __forceinline__ float relu_grad_in(T dy, T x, T y, bool recompute, bool stored, float m, float scale,
                                              float beta) {
  const bool masked = recompute ? !relu_kept<T>(to_f32(x), m, scale, beta) : (stored && !(to_f32(y) > 0.0f));
  return masked ? 0.0f : to_f32(dy);
}

// Where the backward's dy comes from: dy (rows,c) itself, or (Pooled, pass_fuse_bn_pool) the pooled gradient
// dy (N,H/kh,W/kw,C) and the argmax (N,H/kh,W/kw,C) u8 of the kh x kw windows that tile (N,H,W,C), standing for the
// full-resolution dy that maxpool_bwd_idx_tiled_kernel would have written.
template <class T>
struct GradSrc {
  const T* dy;
  const uint8_t* idx;      // Pooled only
  uint32_t hw, w, kh, kw;  // Pooled only: H*W, W, window; rows < 2^31 (the launcher checks)
  uint32_t pq, q;          // Pooled only: (H/kh)*(W/kw), W/kw
  uint32_t h;              // Pooled only: H
};

// Pooled only: (n, h, w) of a row, found by division once per thread and then advanced by additions — the four
// 32-bit divisions per row it replaces cost as much as the rest of the backward's arithmetic.
struct RowPos {
  uint32_t n, h, w;
};
template <class T>
__device__ __forceinline__ RowPos row_pos(const GradSrc<T>& s, uint32_t row) {
  RowPos p;
  p.n = row / s.hw;
  const uint32_t rem = row - p.n * s.hw;
  p.h = rem / s.w;
  p.w = rem - p.h * s.w;
  return p;
}
template <class T>
__device__ __forceinline__ void advance_rows(const GradSrc<T>& s, RowPos& p, uint32_t by) {
  p.w += by;
  while (p.w >= s.w) {
    p.w -= s.w;
    if (++p.h == s.h) {
      p.h = 0;
      ++p.n;
    }
  }
}

// out[u] = the dy V-pack of row r + 16u at column col, for the rows below r1. Pooled: row (n, h, w) reads pooled
// row (n, h/kh, w/kw) and compares the window's argmax with its offset (h%kh)*kw + w%kw, both found once per row;
// each element is T(0 + dy) where it is the argmax, else T(0), exactly what the tiled max-pool backward stores.
template <bool Pooled, int U, int V, class T>
__device__ __forceinline__ void load_grad_rows(const GradSrc<T>& s, int64_t r, int64_t r1, int64_t c, int64_t col,
                                               Pack<T, V> (&out)[U], const RowPos& pos) {
  if constexpr (!Pooled) {
    load_rows(s.dy, r, r1, c, col, out);
  } else {
    int64_t prow[U];
    uint32_t off[U];
    RowPos p = pos;  // row r's position; rows past r1 get positions past the tensor, never loaded
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool two = s.kh == 2 && s.kw == 2;  // VGG's 2x2 windows: shifts (uniform branch)
      const uint32_t ph = two ? p.h >> 1 : p.h / s.kh, pw = two ? p.w >> 1 : p.w / s.kw;
      off[u] = (p.h - ph * s.kh) * s.kw + (p.w - pw * s.kw);
      prow[u] = static_cast<int64_t>(p.n) * s.pq + static_cast<int64_t>(ph) * s.q + pw;
      advance_rows(s, p, kRowGroups);
    }
    Pack<T, V> d[U];
    uint8_t b[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * kRowGroups >= r1) continue;
      const int64_t o = prow[u] * c + col;
      d[u] = pack_load<V>(s.dy + o);
      load_bytes<V>(s.idx + o, b[u]);  // V == 8: c % 8 == 0 and idx 8-byte aligned
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * kRowGroups >= r1) continue;
#pragma unroll
      for (int j = 0; j < V; ++j)
        out[u].v[j] = from_f32<T>(b[u][j] == off[u] ? 0.0f + to_f32(d[u].v[j]) : 0.0f);
    }
  }
}

// Pass 1 backward. dy, x, relu_y (rows,c), mean (c) -> part_g = sum(g), part_gx = sum(g * (x - mean)) per row block
// (row blocks, c), g = dy masked by relu_y > 0 when relu_y is given, or by the mask recomputed from x when
// relu_beta (c) is given (then gamma and invstd (c) too; relu_y is not read).
// dy comes from GradSrc (Pooled: the fused max pool's gradient).
// g_out (rows,c), nullable (not Pooled, relu_y given): g stored, relu_y > 0 ? dy : 0 with dy's bits, exactly what
// relu_bwd_cuda writes (the residual's gradient of a fused BN + add + ReLU, pass_fuse_bn_relu_grad).
template <class T, int V, bool Pooled>
__global__ void __launch_bounds__(512)
    bn_bwd_stats_kernel(const GradSrc<T> dy, const T* __restrict__ x, const T* __restrict__ relu_y,
                        const float* __restrict__ mean, int64_t rows, int64_t c, int64_t rpb,
                        float* __restrict__ part_g, float* __restrict__ part_gx, const float* __restrict__ gamma,
                        const float* __restrict__ invstd, const float* __restrict__ relu_beta,
                        T* __restrict__ g_out) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * blockDim.x + tx) * V;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rpb, r1 = min(rows, r0 + rpb);
  float m[V], sg[V], sgx[V], a[V], b[V];
#pragma unroll
  for (int j = 0; j < V; ++j) m[j] = sg[j] = sgx[j] = a[j] = b[j] = 0.0f;
  if (col < c) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      m[j] = mean[col + j];
      if (relu_beta) {
        a[j] = gamma[col + j] * invstd[col + j];
        b[j] = relu_beta[col + j];
      }
    }
    constexpr int U = bwd_unroll<V>();
    RowPos pos{};
    if constexpr (Pooled) pos = row_pos(dy, static_cast<uint32_t>(r0 + ty));
    for (int64_t r = r0 + ty; r < r1; r += kRowGroups * U) {
      Pack<T, V> pd[U], px[U], py[U];
      load_grad_rows<Pooled>(dy, r, r1, c, col, pd, pos);
      if constexpr (Pooled) advance_rows(dy, pos, kRowGroups * U);
      load_rows(x, r, r1, c, col, px);
      if (relu_y) load_rows(relu_y, r, r1, c, col, py);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (r + u * kRowGroups >= r1) break;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float g = relu_grad_in<T>(pd[u].v[j], px[u].v[j], py[u].v[j], relu_beta, relu_y, m[j], a[j], b[j]);
          sg[j] += g;
          sgx[j] = fmaf(g, to_f32(px[u].v[j]) - m[j], sgx[j]);
        }
        if constexpr (!Pooled) {
          if (g_out) {
            const T zero = from_f32<T>(0.0f);
#pragma unroll
            for (int j = 0; j < V; ++j) pd[u].v[j] = to_f32(py[u].v[j]) > 0.0f ? pd[u].v[j] : zero;
            pack_store<V>(g_out + (r + u * kRowGroups) * c + col, pd[u]);
          }
        }
      }
    }
  }
  store_block_partials<Sums>(sg, sgx, col, c, r1 - r0, part_g, part_gx);
}

// Pass 2 backward: dbeta = sum(g), dgamma = invstd * sum(g (x - mean)) from the row-block sums (row blocks, c).
__global__ void __launch_bounds__(kFinCols * kFinGroups)
    bn_bwd_finalize_kernel(const float* __restrict__ part_g, const float* __restrict__ part_gx, int64_t rows,
                           int64_t c, int64_t rpb, int64_t nrb, const float* __restrict__ save_invstd, float* dgamma,
                           float* dbeta) {
  const Sums sum = reduce_row_blocks<Sums>(part_g, part_gx, rows, c, rpb, nrb);
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * kFinCols + threadIdx.x;
  if (threadIdx.y != 0 || ch >= c) return;
  dbeta[ch] = sum.g;
  dgamma[ch] = sum.gx * save_invstd[ch];
}

// Pass 3 backward: dx = gamma * invstd * (g - dbeta / n - (x - mean) * invstd * dgamma / n). dx may alias dy
// (not when Pooled).
template <class T, int V, bool Pooled>
__global__ void __launch_bounds__(512)
    bn_bwd_apply_kernel(const GradSrc<T> dy, const T* x, const T* relu_y, const float* __restrict__ gamma,
                        const float* __restrict__ mean, const float* __restrict__ invstd,
                        const float* __restrict__ dgamma, const float* __restrict__ dbeta, T* dx, int64_t rows,
                        int64_t c, int64_t rpb, const float* __restrict__ relu_beta) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= c) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rpb, r1 = min(rows, r0 + rpb);
  const float inv_n = 1.0f / static_cast<float>(rows);
  float m[V], a[V], mg[V], k[V], b[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    m[j] = mean[col + j];
    a[j] = gamma[col + j] * invstd[col + j];
    mg[j] = dbeta[col + j] * inv_n;
    k[j] = invstd[col + j] * (dgamma[col + j] * inv_n);
    b[j] = relu_beta ? relu_beta[col + j] : 0.0f;
  }
  constexpr int U = bwd_unroll<V>();
  RowPos pos{};
  if constexpr (Pooled) pos = row_pos(dy, static_cast<uint32_t>(r0 + threadIdx.y));
  for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowGroups * U) {
    Pack<T, V> pd[U], px[U], py[U];
    load_grad_rows<Pooled>(dy, r, r1, c, col, pd, pos);
    if constexpr (Pooled) advance_rows(dy, pos, kRowGroups * U);
    load_rows(x, r, r1, c, col, px);
    if (relu_y) load_rows(relu_y, r, r1, c, col, py);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * kRowGroups >= r1) break;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float g = relu_grad_in<T>(pd[u].v[j], px[u].v[j], py[u].v[j], relu_beta, relu_y, m[j], a[j], b[j]);
        pd[u].v[j] = from_f32<T>(a[j] * fmaf(-(to_f32(px[u].v[j]) - m[j]), k[j], g - mg[j]));
      }
      pack_store<V>(dx + (r + u * kRowGroups) * c + col, pd[u]);
    }
  }
}

// Calls f(std::integral_constant<int, V>) with the widest V for which every row of every pointer is V-aligned:
// 16 bytes, else 2 elements, else scalar. The results do not depend on the choice (see the file comment).
template <class T, class F>
Status with_vector_width(int64_t c, std::initializer_list<const void*> ptrs, F&& f) {
  constexpr int kV16 = kVec16<T>;
  auto aligned = [&](size_t bytes) {
    for (const void* p : ptrs)
      if (!gpu_aligned(bytes, p)) return false;
    return true;
  };
  if (c % kV16 == 0 && aligned(16)) return f(std::integral_constant<int, kV16>{});
  if (c % 2 == 0 && aligned(2 * sizeof(T))) return f(std::integral_constant<int, 2>{});
  return f(std::integral_constant<int, 1>{});
}

#define BN_LAUNCHED(name)                                      \
  do {                                                         \
    Status launch_st_ = TRCTL_CUDA_LAUNCH_STATUS(name);        \
    if (!launch_st_) return launch_st_;                        \
  } while (0)

}  // namespace

size_t batchnorm_workspace_bytes(int64_t rows, int64_t c) {
  if (rows < 1 || c < 1) return 0;
  const RowSplit rs = row_split(rows, c);
  return 2 * align256(static_cast<size_t>(rs.blocks * c) * sizeof(float));
}

Status batchnorm_fwd_train_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma, const float* beta,
                                void* y, float* save_mean, float* save_invstd, float* running_mean,
                                float* running_var, int64_t rows, int64_t c, float eps, float momentum, bool relu,
                                void* workspace, size_t workspace_bytes, const void* residual,
                                const float* prebias) {
  TRCTL_CUDA_ARG_CHECK(rows >= 2,
                       "batchnorm_fwd_train_cuda: rows < 2 (training needs more than one value per channel)");
  TRCTL_CUDA_ARG_CHECK(c >= 1 && c < (int64_t{1} << 31), "batchnorm_fwd_train_cuda: c outside [1, 2^31)");
  TRCTL_CUDA_ARG_CHECK(x && y && gamma && beta && save_mean && save_invstd,
                       "batchnorm_fwd_train_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(workspace && workspace_bytes >= batchnorm_workspace_bytes(rows, c),
                       "batchnorm_fwd_train_cuda: workspace missing or smaller than batchnorm_workspace_bytes");
  const RowSplit rs = row_split(rows, c);
  float* part_mean = static_cast<float*>(workspace);  // (row blocks, c)
  float* part_m2 = part_mean + align256(static_cast<size_t>(rs.blocks * c) * sizeof(float)) / sizeof(float);
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_vector_width<T>(c, {x, y, residual}, [&](auto vw) {
      constexpr int V = decltype(vw)::value;
      const Launch l = make_launch(c, V, rs);
      bn_fwd_stats_kernel<T, V><<<l.grid, l.block, l.smem, s>>>(static_cast<const T*>(x), rows, c,
                                                                  rs.rows_per_block, part_mean, part_m2);
      BN_LAUNCHED("bn_fwd_stats_kernel");
      const unsigned fin_grid = static_cast<unsigned>((c + kFinCols - 1) / kFinCols);
      bn_fwd_finalize_kernel<<<fin_grid, dim3(kFinCols, kFinGroups), 0, s>>>(
          part_mean, part_m2, rows, c, rs.rows_per_block, rs.blocks, eps, momentum, save_mean, save_invstd,
          running_mean, running_var, prebias);
      BN_LAUNCHED("bn_fwd_finalize_kernel");
      bn_fwd_apply_kernel<T, V><<<l.grid, l.block, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(residual),
                                                            static_cast<T*>(y), gamma, beta, save_mean, save_invstd,
                                                            false, eps, relu, rows, c, rs.rows_per_block, nullptr);
      return TRCTL_CUDA_LAUNCH_STATUS("bn_fwd_apply_kernel");
    });
  });
}

Status batchnorm_fwd_eval_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma, const float* beta,
                               const float* running_mean, const float* running_var, void* y, int64_t rows, int64_t c,
                               float eps, bool relu, const void* residual, const float* prebias) {
  TRCTL_CUDA_ARG_CHECK(rows >= 0, "batchnorm_fwd_eval_cuda: rows < 0");
  TRCTL_CUDA_ARG_CHECK(c >= 1 && c < (int64_t{1} << 31), "batchnorm_fwd_eval_cuda: c outside [1, 2^31)");
  if (rows == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(x && y && gamma && beta && running_mean && running_var,
                       "batchnorm_fwd_eval_cuda: null pointer");
  const RowSplit rs = row_split(rows, c);
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_vector_width<T>(c, {x, y, residual}, [&](auto vw) {
      constexpr int V = decltype(vw)::value;
      const Launch l = make_launch(c, V, rs);
      bn_fwd_apply_kernel<T, V><<<l.grid, l.block, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(residual),
                                                            static_cast<T*>(y), gamma, beta, running_mean,
                                                            running_var, true, eps, relu, rows, c, rs.rows_per_block,
                                                            prebias);
      return TRCTL_CUDA_LAUNCH_STATUS("bn_fwd_apply_kernel");
    });
  });
}

namespace {

// The backward's three launches (see the file comment); dy from GradSrc (Pooled: pass_fuse_bn_pool's pooled
// gradient and argmax, idx 8-byte aligned).
// g_out (not Pooled, with relu_y): pass 1 stores the masked gradient there and pass 3 reads it back unmasked.
template <bool Pooled, class T>
Status bn_bwd_launch(cudaStream_t s, const GradSrc<T>& gs, const void* x, const void* relu_y, const float* gamma,
                     const float* save_mean, const float* save_invstd, void* dx, float* dgamma, float* dbeta,
                     int64_t rows, int64_t c, void* workspace, const float* relu_beta, void* g_out = nullptr) {
  const RowSplit rs = row_split(rows, c);
  float* part_g = static_cast<float*>(workspace);  // (row blocks, c)
  float* part_gx = part_g + align256(static_cast<size_t>(rs.blocks * c) * sizeof(float)) / sizeof(float);
  return with_vector_width<T>(c, {gs.dy, x, relu_y, dx, g_out}, [&](auto vw) {
    constexpr int V = decltype(vw)::value;
    const Launch l = make_launch(c, V, rs);
    const T* xs = static_cast<const T*>(x);
    const T* ys = static_cast<const T*>(relu_y);
    T* gs_out = static_cast<T*>(g_out);
    bn_bwd_stats_kernel<T, V, Pooled><<<l.grid, l.block, l.smem, s>>>(gs, xs, relu_beta ? nullptr : ys, save_mean,
                                                                       rows, c, rs.rows_per_block, part_g, part_gx,
                                                                       gamma, save_invstd, relu_beta, gs_out);
    BN_LAUNCHED("bn_bwd_stats_kernel");
    const unsigned fin_grid = static_cast<unsigned>((c + kFinCols - 1) / kFinCols);
    bn_bwd_finalize_kernel<<<fin_grid, dim3(kFinCols, kFinGroups), 0, s>>>(
        part_g, part_gx, rows, c, rs.rows_per_block, rs.blocks, save_invstd, dgamma, dbeta);
    BN_LAUNCHED("bn_bwd_finalize_kernel");
    // Pass 3 reads the stored g (already masked) in place of dy and the ReLU output.
    GradSrc<T> gs3 = gs;
    if (gs_out) gs3.dy = gs_out;
    bn_bwd_apply_kernel<T, V, Pooled><<<l.grid, l.block, 0, s>>>(
        gs3, xs, relu_beta || gs_out ? nullptr : ys, gamma, save_mean, save_invstd, dgamma, dbeta,
        static_cast<T*>(dx), rows, c, rs.rows_per_block, relu_beta);
    return TRCTL_CUDA_LAUNCH_STATUS("bn_bwd_apply_kernel");
  });
}

// The fused max pool's forward launch over x (n,h,w,c) -> y, idx (n,h/k,w/k,c): 32-bit indices when they fit.
template <class T>
Status bn_pool_apply_launch(cudaStream_t s, const void* x, void* y, uint8_t* idx, const float* gamma,
                            const float* beta, const float* mean, const float* inv_or_var, bool var_not_invstd,
                            float eps, bool relu, const float* mean_shift, int64_t n, int64_t h, int64_t w, int64_t c,
                            int k) {
  auto launch = [&](auto vw) {
    constexpr int V = decltype(vw)::value;
    const int64_t items = n * (h / k) * (w / k) * (c / V);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    if (n * h * w * c < (int64_t{1} << 30))
      bn_pool_apply_kernel<T, V, int32_t><<<elementwise_grid(items), kElementwiseBlock, 0, s>>>(
          xs, ys, idx, gamma, beta, mean, inv_or_var, var_not_invstd, eps, relu, mean_shift, n, h, w, c, k, k);
    else
      bn_pool_apply_kernel<T, V, int64_t><<<elementwise_grid(items), kElementwiseBlock, 0, s>>>(
          xs, ys, idx, gamma, beta, mean, inv_or_var, var_not_invstd, eps, relu, mean_shift, n, h, w, c, k, k);
    return TRCTL_CUDA_LAUNCH_STATUS("bn_pool_apply_kernel");
  };
  constexpr int kV16 = kVec16<T>;
  if (c % kV16 == 0 && gpu_aligned(16, x, y))  // idx: 8-byte aligned (the launchers check)
    return launch(std::integral_constant<int, kV16>{});
  if (c % 2 == 0 && gpu_aligned(2 * sizeof(T), x, y)) return launch(std::integral_constant<int, 2>{});
  return launch(std::integral_constant<int, 1>{});
}

// Geometry checks shared by the fused launchers: windows k x k tiling (h, w), at most 256 elements.
bool pool_tiles(int64_t n, int64_t h, int64_t w, int64_t c, int k) {
  return n >= 1 && c >= 1 && c < (int64_t{1} << 31) && k >= 1 && k * k <= 256 && h >= k && w >= k && h % k == 0 &&
         w % k == 0;
}

}  // namespace

Status batchnorm_bwd_cuda(cudaStream_t s, const void* dy, const void* x, const void* relu_y, GpuDType t,
                          const float* gamma, const float* save_mean, const float* save_invstd, void* dx,
                          float* dgamma, float* dbeta, int64_t rows, int64_t c, void* workspace,
                          size_t workspace_bytes, const float* relu_beta, void* g_out) {
  TRCTL_CUDA_ARG_CHECK(rows >= 1, "batchnorm_bwd_cuda: rows < 1");
  TRCTL_CUDA_ARG_CHECK(!g_out || (relu_y && !relu_beta), "batchnorm_bwd_cuda: g_out needs relu_y and no relu_beta");
  TRCTL_CUDA_ARG_CHECK(!g_out || (g_out != x && g_out != relu_y && g_out != dx && g_out != dy),
                       "batchnorm_bwd_cuda: g_out aliases dy, x, relu_y or dx");
  TRCTL_CUDA_ARG_CHECK(c >= 1 && c < (int64_t{1} << 31), "batchnorm_bwd_cuda: c outside [1, 2^31)");
  TRCTL_CUDA_ARG_CHECK(dy && x && gamma && save_mean && save_invstd && dx && dgamma && dbeta,
                       "batchnorm_bwd_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(dx != x, "batchnorm_bwd_cuda: dx aliases x");
  TRCTL_CUDA_ARG_CHECK(workspace && workspace_bytes >= batchnorm_workspace_bytes(rows, c),
                       "batchnorm_bwd_cuda: workspace missing or smaller than batchnorm_workspace_bytes");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const GradSrc<T> gs{static_cast<const T*>(dy), nullptr, 0, 0, 0, 0, 0, 0, 0};
    return bn_bwd_launch<false, T>(s, gs, x, relu_y, gamma, save_mean, save_invstd, dx, dgamma, dbeta, rows, c,
                                   workspace, relu_beta, g_out);
  });
}

Status batchnorm_fwd_train_pool_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma,
                                     const float* beta, void* y, uint8_t* idx, float* save_mean, float* save_invstd,
                                     float* running_mean, float* running_var, int64_t n, int64_t h, int64_t w,
                                     int64_t c, int k, float eps, float momentum, bool relu, void* workspace,
                                     size_t workspace_bytes, const float* prebias) {
  const int64_t rows = n * h * w;
  TRCTL_CUDA_ARG_CHECK(pool_tiles(n, h, w, c, k),
                       "batchnorm_fwd_train_pool_cuda: the k x k windows must tile (h, w), k*k <= 256");
  TRCTL_CUDA_ARG_CHECK(rows >= 2, "batchnorm_fwd_train_pool_cuda: rows < 2");
  TRCTL_CUDA_ARG_CHECK(x && y && idx && gamma && beta && save_mean && save_invstd,
                       "batchnorm_fwd_train_pool_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(gpu_aligned(8, idx), "batchnorm_fwd_train_pool_cuda: idx not 8-byte aligned");
  TRCTL_CUDA_ARG_CHECK(workspace && workspace_bytes >= batchnorm_workspace_bytes(rows, c),
                       "batchnorm_fwd_train_pool_cuda: workspace missing or smaller than batchnorm_workspace_bytes");
  const RowSplit rs = row_split(rows, c);
  float* part_mean = static_cast<float*>(workspace);  // (row blocks, c)
  float* part_m2 = part_mean + align256(static_cast<size_t>(rs.blocks * c) * sizeof(float)) / sizeof(float);
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Status st = with_vector_width<T>(c, {x}, [&](auto vw) {  // the statistics as unfused
      constexpr int V = decltype(vw)::value;
      const Launch l = make_launch(c, V, rs);
      bn_fwd_stats_kernel<T, V><<<l.grid, l.block, l.smem, s>>>(static_cast<const T*>(x), rows, c,
                                                                  rs.rows_per_block, part_mean, part_m2);
      BN_LAUNCHED("bn_fwd_stats_kernel");
      const unsigned fin_grid = static_cast<unsigned>((c + kFinCols - 1) / kFinCols);
      bn_fwd_finalize_kernel<<<fin_grid, dim3(kFinCols, kFinGroups), 0, s>>>(
          part_mean, part_m2, rows, c, rs.rows_per_block, rs.blocks, eps, momentum, save_mean, save_invstd,
          running_mean, running_var, prebias);
      return TRCTL_CUDA_LAUNCH_STATUS("bn_fwd_finalize_kernel");
    });
    if (!st) return st;
    return bn_pool_apply_launch<T>(s, x, y, idx, gamma, beta, save_mean, save_invstd, false, eps, relu, nullptr, n, h,
                                   w, c, k);
  });
}

Status batchnorm_fwd_eval_pool_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma, const float* beta,
                                    const float* running_mean, const float* running_var, void* y, int64_t n,
                                    int64_t h, int64_t w, int64_t c, int k, float eps, bool relu,
                                    const float* prebias) {
  TRCTL_CUDA_ARG_CHECK(n >= 0, "batchnorm_fwd_eval_pool_cuda: n < 0");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(pool_tiles(n, h, w, c, k),
                       "batchnorm_fwd_eval_pool_cuda: the k x k windows must tile (h, w), k*k <= 256");
  TRCTL_CUDA_ARG_CHECK(x && y && gamma && beta && running_mean && running_var,
                       "batchnorm_fwd_eval_pool_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return bn_pool_apply_launch<T>(s, x, y, nullptr, gamma, beta, running_mean, running_var, true, eps, relu, prebias,
                                   n, h, w, c, k);
  });
}

Status batchnorm_bwd_pool_cuda(cudaStream_t s, const void* dy_pooled, const uint8_t* idx, const void* x, GpuDType t,
                               const float* gamma, const float* beta, const float* save_mean,
                               const float* save_invstd, void* dx, float* dgamma, float* dbeta, int64_t n, int64_t h,
                               int64_t w, int64_t c, int k, void* workspace, size_t workspace_bytes) {
  const int64_t rows = n * h * w;
  TRCTL_CUDA_ARG_CHECK(pool_tiles(n, h, w, c, k),
                       "batchnorm_bwd_pool_cuda: the k x k windows must tile (h, w), k*k <= 256");
  TRCTL_CUDA_ARG_CHECK(rows < (int64_t{1} << 31), "batchnorm_bwd_pool_cuda: n*h*w >= 2^31");
  TRCTL_CUDA_ARG_CHECK(dy_pooled && idx && x && gamma && beta && save_mean && save_invstd && dx && dgamma && dbeta,
                       "batchnorm_bwd_pool_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(gpu_aligned(8, idx), "batchnorm_bwd_pool_cuda: idx not 8-byte aligned");
  TRCTL_CUDA_ARG_CHECK(dx != x && dx != dy_pooled, "batchnorm_bwd_pool_cuda: dx aliases x or dy");
  TRCTL_CUDA_ARG_CHECK(workspace && workspace_bytes >= batchnorm_workspace_bytes(rows, c),
                       "batchnorm_bwd_pool_cuda: workspace missing or smaller than batchnorm_workspace_bytes");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const uint32_t ku = static_cast<uint32_t>(k), q = static_cast<uint32_t>(w / k);
    const GradSrc<T> gs{static_cast<const T*>(dy_pooled), idx, static_cast<uint32_t>(h * w), static_cast<uint32_t>(w),
                        ku, ku, static_cast<uint32_t>((h / k) * q), q, static_cast<uint32_t>(h)};
    return bn_bwd_launch<true, T>(s, gs, x, nullptr, gamma, save_mean, save_invstd, dx, dgamma, dbeta, rows, c,
                                  workspace, beta);
  });
}

#undef BN_LAUNCHED

}  // namespace trctl
