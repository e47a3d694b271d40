// Internal to runtime/ops/batchnorm/*.cu: what the batch-norm kernels of batchnorm.cu (plain) and batchnorm_pool.cu
// (with a fused max pool) share, so that both compute bitwise the same values: the row split and launch shape, the
// per-channel accumulators, the statistics and finalize kernels, the apply constants, the recomputed ReLU mask, and
// the backward's three kernels, templated on where their incoming gradient comes from (a gradient source: DenseGrad
// here, the pooled gradient and argmax in batchnorm_pool.cu). The kernel geometry:
//   1. stats: block (tx, 16) covers tx*V channels and one block of rows; thread (tx, ty) reads rows r0+ty, r0+ty+16,
//      ... (forward) or the row pairs r0+2ty, r0+2ty+1, r0+2ty+32, r0+2ty+33, ... (backward: a pooled gradient
//      source decodes a 2x2 window's horizontal pair once) with V-wide vector loads (a warp reads whole rows:
//      coalesced), keeps per-channel Welford state (forward) or plain sums (backward) in that row order, and the 16
//      row groups are merged in ty order into one partial per channel.
//   2. finalize: per channel, the row-block partials are merged in fixed order (strided loop + tree).
//   3. apply: elementwise over the same geometry, per-channel constants kept in registers.
// The row split (rows per block, 16 row groups) depends only on (rows, c), never on V or the alignment, and all
// roundings are explicit (fmaf), so the vector and scalar paths give bitwise the same results.
// Everything here has internal linkage (an anonymous namespace): each .cu that includes it gets its own copies of
// the kernels it launches.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/batchnorm/bn_elem.cuh"

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
inline RowSplit row_split(int64_t rows, int64_t c) {
  int64_t want = std::max<int64_t>(1, kTargetPartials / std::max<int64_t>(c, 1));
  want = std::min(want, kMaxRowBlocks);
  want = std::min(want, (rows + kMinRowsPerBlock - 1) / kMinRowsPerBlock);
  want = std::max<int64_t>(want, 1);
  RowSplit s;
  s.rows_per_block = std::max<int64_t>(1, (rows + want - 1) / want);
  s.blocks = std::max<int64_t>(1, (rows + s.rows_per_block - 1) / s.rows_per_block);
  return s;
}

inline size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// Launch shape for vector width V: tx threads along channels (power of two <= 32), 16 row groups.
struct Launch {
  dim3 grid, block;
  size_t smem = 0;  // stats kernels: two (16, tx*V) f32 arrays
};
// Threads along the channels for packs V-packs: the smallest power of two covering them, at most 32.
inline int channel_threads(int64_t packs) {
  int tx = 1;
  while (tx < packs && tx < 32) tx *= 2;
  return tx;
}
inline Launch make_launch(int64_t c, int v, const RowSplit& rs) {
  const int64_t packs = (c + v - 1) / v;
  const int tx = channel_threads(packs);
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

// out[u] = the V-pack at (row r + stride u, column col) of p (rows,c), for the rows below r1; stride: the 16 row
// groups of the statistics kernels, or the apply's grid-wide row step.
template <int U, int V, class T>
__device__ __forceinline__ void load_rows(const T* p, int64_t r, int64_t r1, int64_t c, int64_t col,
                                          Pack<T, V> (&out)[U], int64_t stride = kRowGroups) {
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (r + u * stride < r1) out[u] = pack_load<V>(p + (r + u * stride) * c + col);
}

// The backward's rows: thread (tx, ty) takes the pairs (r, r + 1), r = r0 + 2 ty + kPairStep k, in row order.
constexpr int kPairStep = 2 * kRowGroups;

// out[u][e] = the V-pack at (row r + kPairStep u + e, column col) of p (rows,c), for the rows below r1.
template <int U, int V, class T>
__device__ __forceinline__ void load_pairs(const T* p, int64_t r, int64_t r1, int64_t c, int64_t col,
                                           Pack<T, V> (&out)[U][2]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t row = r + u * kPairStep + e;
      if (row < r1) out[u][e] = pack_load<V>(p + row * c + col);
    }
  }
}

// Backward loads: 3 packs per row, so wide packs take one row pair per iteration (two rows) to stay within 128
// registers (no spills at 512 threads), narrower ones two pairs. The unroll does not change the order of the
// per-thread sums.
template <int V>
constexpr int bwd_unroll() { return V >= 8 ? 1 : 2; }

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

// Pass 2 forward from per-channel sums instead of row-block moments (a convolution's genstats epilogue,
// runtime/cuda/cudnn_fused_conv.h): sum, sqsum (c) f32 over the rows of x -> mean, invstd and the running statistics
// as bn_fwd_finalize_kernel computes them from its moments. mean = sum / n and var = sqsum / n - mean^2 are formed
// in double from the fp32 sums (the subtraction loses no more than the sums' own rounding), clamped at 0.
__global__ void __launch_bounds__(256)
    bn_fwd_finalize_sums_kernel(const float* __restrict__ sum, const float* __restrict__ sqsum, int64_t rows,
                                int64_t c, float eps, float momentum, float* save_mean, float* save_invstd,
                                float* running_mean, float* running_var, const float* __restrict__ prebias) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const double n = static_cast<double>(rows);
  const double mean_d = static_cast<double>(sum[ch]) / n;
  const float mean = static_cast<float>(mean_d);
  const float var = static_cast<float>(fmax(static_cast<double>(sqsum[ch]) / n - mean_d * mean_d, 0.0));  // biased
  save_mean[ch] = mean;
  save_invstd[ch] = 1.0f / sqrtf(var + eps);
  if (running_mean) {
    const float batch_mean = prebias ? mean + prebias[ch] : mean;  // the mean of x + b
    running_mean[ch] = fmaf(momentum, batch_mean, (1.0f - momentum) * running_mean[ch]);
  }
  if (running_var) {
    const float nf = static_cast<float>(rows);
    const float unbiased = var * (nf / (nf - 1.0f));
    running_var[ch] = fmaf(momentum, unbiased, (1.0f - momentum) * running_var[ch]);
  }
}

// ApplyConsts, apply_consts, apply_affine, relu_kept, relu_grad_in, BnBwdConsts, bn_bwd_consts, bn_bwd_dx:
// bn_elem.cuh (shared with kernels that fuse a batch-norm step).

// Where the backward's incoming gradient dy comes from: a gradient source Src provides, for the row pairs of one
// thread (r, r + 1, r + kPairStep, ...; rows >= r1 are never asked for), Pos start(row) (its position state at the
// thread's first row), load(r, r1, c, col, out, pos) (out[u][e] = the dy V-pack of row r + kPairStep u + e at column
// col, as the full-resolution dy would hold it; pos: row r's), and advance(pos, rows). DenseGrad reads dy (rows,c)
// itself; the fused max pool's sources (pass_fuse_bn_pool, with no full-resolution dy: dx may not alias theirs) are
// in batchnorm_pool.cu.
template <class T>
struct DenseGrad {
  const T* dy;  // (rows,c)
  struct Pos {};
  __device__ __forceinline__ Pos start(int64_t) const { return {}; }
  __device__ __forceinline__ void advance(Pos&, uint32_t) const {}
  template <int U, int V>
  __device__ __forceinline__ void load(int64_t r, int64_t r1, int64_t c, int64_t col, Pack<T, V> (&out)[U][2],
                                       const Pos&) const {
    load_pairs(dy, r, r1, c, col, out);
  }
};

// Pass 1 backward. dy, x, relu_y (rows,c), mean (c) -> part_g = sum(g), part_gx = sum(g * (x - mean)) per row block
// (row blocks, c), g = dy masked by relu_y > 0 when relu_y is given, or by the mask recomputed from x when
// relu_beta (c) is given (then gamma and invstd (c) too; relu_y is not read).
// dy comes from the gradient source Src (DenseGrad, or a fused max pool's pooled gradient: batchnorm_pool.cu).
// g_out (rows,c), nullable: with relu_y (DenseGrad), g stored, relu_y > 0 ? dy : 0 with dy's bits, exactly what
// relu_bwd_cuda writes (the residual's gradient of a fused BN + add + ReLU, pass_fuse_bn_relu_grad); without
// relu_y, dy itself as the source loaded it (a fused max pool's gathered gradient, read back densely by pass 3).
template <class T, int V, class Src>
__global__ void __launch_bounds__(512)
    bn_bwd_stats_kernel(const Src dy, const T* __restrict__ x, const T* __restrict__ relu_y,
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
    typename Src::Pos pos = dy.start(r0 + 2 * ty);
    for (int64_t r = r0 + 2 * ty; r < r1; r += kPairStep * U) {
      Pack<T, V> pd[U][2], px[U][2], py[U][2];
      load_pairs(x, r, r1, c, col, px);  // issued before the source's loads: both in flight together
      if (relu_y) load_pairs(relu_y, r, r1, c, col, py);
      dy.load(r, r1, c, col, pd, pos);
      dy.advance(pos, kPairStep * U);
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t row = r + u * kPairStep + e;
          if (row >= r1) continue;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float g =
                relu_grad_in<T>(pd[u][e].v[j], px[u][e].v[j], py[u][e].v[j], relu_beta, relu_y, m[j], a[j], b[j]);
            sg[j] += g;
            sgx[j] = fmaf(g, to_f32(px[u][e].v[j]) - m[j], sgx[j]);
          }
          if (g_out) {
            if (relu_y) {
              const T zero = from_f32<T>(0.0f);
#pragma unroll
              for (int j = 0; j < V; ++j) pd[u][e].v[j] = to_f32(py[u][e].v[j]) > 0.0f ? pd[u][e].v[j] : zero;
            }
            pack_store<V>(g_out + row * c + col, pd[u][e]);
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
// (DenseGrad only).
template <class T, int V, class Src>
__global__ void __launch_bounds__(512)
    bn_bwd_apply_kernel(const Src dy, const T* x, const T* relu_y, const float* __restrict__ gamma,
                        const float* __restrict__ mean, const float* __restrict__ invstd,
                        const float* __restrict__ dgamma, const float* __restrict__ dbeta, T* dx, int64_t rows,
                        int64_t c, int64_t rpb, const float* __restrict__ relu_beta) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= c) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rpb, r1 = min(rows, r0 + rpb);
  const float inv_n = 1.0f / static_cast<float>(rows);
  BnBwdConsts kc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) kc[j] = bn_bwd_consts(col + j, gamma, mean, invstd, dgamma, dbeta, relu_beta, inv_n);
  constexpr int U = bwd_unroll<V>();
  typename Src::Pos pos = dy.start(r0 + 2 * threadIdx.y);
  for (int64_t r = r0 + 2 * threadIdx.y; r < r1; r += kPairStep * U) {
    Pack<T, V> pd[U][2], px[U][2], py[U][2];
    load_pairs(x, r, r1, c, col, px);  // before the source's loads, as in pass 1
    if (relu_y) load_pairs(relu_y, r, r1, c, col, py);
    dy.load(r, r1, c, col, pd, pos);
    dy.advance(pos, kPairStep * U);
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t row = r + u * kPairStep + e;
        if (row >= r1) continue;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float g = relu_grad_in<T>(pd[u][e].v[j], px[u][e].v[j], py[u][e].v[j], relu_beta, relu_y, kc[j].m,
                                          kc[j].a, kc[j].b);
          pd[u][e].v[j] = bn_bwd_dx<T>(g, px[u][e].v[j], kc[j]);
        }
        pack_store<V>(dx + row * c + col, pd[u][e]);
      }
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

// Passes 1 and 2 of the training forward: x (rows,c) -> save_mean, save_invstd (c) and the running statistics
// (see bn_fwd_finalize_kernel), with the row-block partials in workspace. Shared by the plain and the fused-pool
// forward, so that both compute the same statistics.
template <class T, int V>
Status bn_fwd_stats_launch(cudaStream_t s, const T* x, int64_t rows, int64_t c, void* workspace, float eps,
                           float momentum, float* save_mean, float* save_invstd, float* running_mean,
                           float* running_var, const float* prebias) {
  const RowSplit rs = row_split(rows, c);
  float* part_mean = static_cast<float*>(workspace);  // (row blocks, c)
  float* part_m2 = part_mean + align256(static_cast<size_t>(rs.blocks * c) * sizeof(float)) / sizeof(float);
  const Launch l = make_launch(c, V, rs);
  bn_fwd_stats_kernel<T, V><<<l.grid, l.block, l.smem, s>>>(x, rows, c, rs.rows_per_block, part_mean, part_m2);
  BN_LAUNCHED("bn_fwd_stats_kernel");
  const unsigned fin_grid = static_cast<unsigned>((c + kFinCols - 1) / kFinCols);
  bn_fwd_finalize_kernel<<<fin_grid, dim3(kFinCols, kFinGroups), 0, s>>>(
      part_mean, part_m2, rows, c, rs.rows_per_block, rs.blocks, eps, momentum, save_mean, save_invstd, running_mean,
      running_var, prebias);
  return TRCTL_CUDA_LAUNCH_STATUS("bn_fwd_finalize_kernel");
}

// The training forward's statistics, for every variant (plain, fused pool, no apply): from the sums that came with x
// (BnSums: a fused conv's genstats; the finalize alone, no pass over x), else passes 1 and 2 over x at the widest
// vector width x allows (the results do not depend on it: see the file comment).
template <class T>
Status bn_fwd_train_stats(cudaStream_t s, const T* x, const BnSums& sums, int64_t rows, int64_t c, void* workspace,
                          float eps, float momentum, float* save_mean, float* save_invstd, float* running_mean,
                          float* running_var, const float* prebias) {
  if (sums.sum) {
    const unsigned grid = static_cast<unsigned>((c + 255) / 256);
    bn_fwd_finalize_sums_kernel<<<grid, 256, 0, s>>>(sums.sum, sums.sqsum, rows, c, eps, momentum, save_mean,
                                                     save_invstd, running_mean, running_var, prebias);
    return TRCTL_CUDA_LAUNCH_STATUS("bn_fwd_finalize_sums_kernel");
  }
  return with_vector_width<T>(c, {x}, [&](auto vw) {
    return bn_fwd_stats_launch<T, decltype(vw)::value>(s, x, rows, c, workspace, eps, momentum, save_mean,
                                                        save_invstd, running_mean, running_var, prebias);
  });
}

// The backward's three launches (see the file comment) with dy from the gradient source gs (DenseGrad, or a fused
// max pool's: idx 8-byte aligned). g_out: pass 1 stores the incoming gradient there (masked when relu_y is given:
// pass_fuse_bn_relu_grad's G; as loaded otherwise: a fused pool's gathered dy, with g_out = dx) and pass 3 reads it
// back densely (with the mask recomputed from relu_beta when given, else none), so a pooled source's gather runs
// once instead of twice.
template <class T, class Src>
Status bn_bwd_launch(cudaStream_t s, const Src& gs, const void* x, const void* relu_y, const float* gamma,
                     const float* save_mean, const float* save_invstd, void* dx, float* dgamma, float* dbeta,
                     int64_t rows, int64_t c, void* workspace, const float* relu_beta, void* g_out = nullptr,
                     bool stats = true) {
  const RowSplit rs = row_split(rows, c);
  float* part_g = static_cast<float*>(workspace);  // (row blocks, c)
  float* part_gx =  // none without a workspace (stats false: the dx pass alone)
      part_g ? part_g + align256(static_cast<size_t>(rs.blocks * c) * sizeof(float)) / sizeof(float) : nullptr;
  return with_vector_width<T>(c, {gs.dy, x, relu_y, dx, g_out}, [&](auto vw) {
    constexpr int V = decltype(vw)::value;
    const Launch l = make_launch(c, V, rs);
    const T* xs = static_cast<const T*>(x);
    const T* ys = static_cast<const T*>(relu_y);
    T* gs_out = static_cast<T*>(g_out);
    if (stats) {  // else dgamma and dbeta are given (the dx pass alone)
      bn_bwd_stats_kernel<T, V, Src><<<l.grid, l.block, l.smem, s>>>(gs, xs, relu_beta ? nullptr : ys, save_mean,
                                                                      rows, c, rs.rows_per_block, part_g, part_gx,
                                                                      gamma, save_invstd, relu_beta, gs_out);
      BN_LAUNCHED("bn_bwd_stats_kernel");
      const unsigned fin_grid = static_cast<unsigned>((c + kFinCols - 1) / kFinCols);
      bn_bwd_finalize_kernel<<<fin_grid, dim3(kFinCols, kFinGroups), 0, s>>>(
          part_g, part_gx, rows, c, rs.rows_per_block, rs.blocks, save_invstd, dgamma, dbeta);
      BN_LAUNCHED("bn_bwd_finalize_kernel");
    }
    if (!dx) return TRCTL_CUDA_LAUNCH_STATUS("bn_bwd_finalize_kernel");  // dgamma, dbeta only (no pass 3)
    if (gs_out) {  // pass 3 reads the stored gradient in place of the source (and of the ReLU output)
      bn_bwd_apply_kernel<T, V, DenseGrad<T>><<<l.grid, l.block, 0, s>>>(
          DenseGrad<T>{gs_out}, xs, nullptr, gamma, save_mean, save_invstd, dgamma, dbeta, static_cast<T*>(dx), rows,
          c, rs.rows_per_block, relu_beta);
    } else {
      bn_bwd_apply_kernel<T, V, Src><<<l.grid, l.block, 0, s>>>(
          gs, xs, relu_beta ? nullptr : ys, gamma, save_mean, save_invstd, dgamma, dbeta, static_cast<T*>(dx), rows,
          c, rs.rows_per_block, relu_beta);
    }
    return TRCTL_CUDA_LAUNCH_STATUS("bn_bwd_apply_kernel");
  });
}

}  // namespace

}  // namespace trctl
