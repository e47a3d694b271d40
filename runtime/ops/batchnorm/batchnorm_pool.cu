// Batch norm + ReLU with the max pool that follows it fused (pass_fuse_bn_pool; batchnorm_cuda.h): the forward
// keeps the plain forward's statistics and finalize passes (batchnorm_kernels.cuh) and replaces its apply pass with
// a max pool that normalises each window element on load; the backward runs the plain backward's three kernels
// with a pooled gradient source in place of the full-resolution dy. Two variants of each, picked by the launchers:
//   - tiling windows (stride = kernel, no padding, H = P kh, W = Q kw; VGG's 2x2/2): one window per element, found
//     by shifts (2x2) or divisions and then advanced incrementally (TiledPoolGrad);
//   - general windows (stride s <= kernel k, padding p <= k/2; ResNet's overlapping 3x3/2 pad 1 stem pool): an
//     element lies in up to ceil(k/s)^2 windows and its gradient is the sum, over those whose argmax it is, of
//     their dy, added in maxpool_bwd_idx_kernel's (p, q) order in fp32 and rounded once to T (WindowPoolGrad).
// Both give bitwise what the unfused chain (batchnorm_fwd_train_cuda + maxpool2d_fwd_idx_cuda,
// maxpool2d_bwd_idx_cuda + batchnorm_bwd_cuda) gives, which itself picks its tiled max-pool backward exactly
// when the windows tile.
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "runtime/ops/batchnorm/batchnorm_kernels.cuh"
#include "runtime/ops/pool/pool_cuda.h"

namespace trctl {

namespace {

// The running max of one window over V channels, as both fused forward kernels keep it: take(v, o, k, relu)
// normalises the window element v (offset o in the nominal window) exactly as bn_fwd_apply_kernel computes and
// rounds y (constants k, one fmaf, the ReLU, the rounding to T), then applies maxpool_fwd_idx_kernel's rule (a
// greater value or a NaN takes over, ties keep the first); store(y, idx, i) writes the pooled V-pack i (the maxima
// rounded to T) and, when idx is given, their offsets as bytes (idx 8-byte aligned: the launchers check it).
template <class T, int V>
struct WindowMax {
  float v[V];
  int at[V];
  __device__ __forceinline__ void init(int first) {  // an all -inf window keeps its first real element
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = -INFINITY, at[j] = first;
  }
  __device__ __forceinline__ void take(const Pack<T, V>& x, int o, const ApplyConsts (&k)[V], bool relu) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float e = apply_affine(to_f32(x.v[j]), k[j]);
      if (relu) e = (e > 0.0f || e != e) ? e : 0.0f;
      const float f = to_f32(from_f32<T>(e));  // y as the apply kernel stores it
      if (f > v[j] || f != f) {
        v[j] = f;
        at[j] = o;
      }
    }
  }
  __device__ __forceinline__ int offset(int j) const { return at[j]; }  // channel j's argmax offset
  template <class I>
  __device__ __forceinline__ void store(T* y, uint8_t* idx, I i) const {
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(v[j]);
    pack_store<V>(y + static_cast<int64_t>(i) * V, out);
    if (idx) {
      uint8_t bb[V];
#pragma unroll
      for (int j = 0; j < V; ++j) bb[j] = static_cast<uint8_t>(at[j]);
      store_bytes<V>(idx + static_cast<int64_t>(i) * V, bb);
    }
  }
};

// The same for f16 in channel pairs (the AMP path; V even): the two normalised values round to one half2 with one
// conversion, and the ReLU, the comparisons and the selects run on the pair as 16-bit lane masks. Bitwise the
// float version: comparing halves is comparing their float values (> is false with a NaN on either side, and
// x != x holds exactly for NaN, as __hneu2 is unordered); the ReLU after the rounding keeps the same bits as
// before it (e > 0 rounds to h >= +0 and keeps it, or to +0 which the ReLU maps to +0; e <= 0 and -0 give +0 both
// ways; a NaN stays the NaN the rounding makes); the max is stored as the half it was, and -inf (the start) is a
// half.
template <int V>
struct WindowMax<__half, V> {
  static_assert(V % 2 == 0, "f16 window max runs on channel pairs");
  uint32_t v[V / 2];   // half2 bits
  uint32_t at[V / 2];  // two 16-bit offsets
  __device__ __forceinline__ void init(int first) {
#pragma unroll
    for (int j = 0; j < V / 2; ++j) v[j] = 0xFC00FC00u, at[j] = static_cast<uint32_t>(first) * 0x00010001u;
  }
  __device__ __forceinline__ void take(const Pack<__half, V>& x, int o, const ApplyConsts (&k)[V], bool relu) {
    const uint32_t o2 = static_cast<uint32_t>(o) * 0x00010001u;
#pragma unroll
    for (int j = 0; j < V / 2; ++j) {
      const __half2 h = __floats2half2_rn(apply_affine(__half2float(x.v[2 * j]), k[2 * j]),
                                          apply_affine(__half2float(x.v[2 * j + 1]), k[2 * j + 1]));
      uint32_t hb = bits_of(h);
      if (relu) hb &= __hgt2_mask(h, __float2half2_rn(0.0f)) | __hneu2_mask(h, h);
      const __half2 hr = half2_of(hb), best = half2_of(v[j]);
      const uint32_t m = __hgt2_mask(hr, best) | __hneu2_mask(hr, hr);
      v[j] = (hb & m) | (v[j] & ~m);
      at[j] = (o2 & m) | (at[j] & ~m);
    }
  }
  __device__ __forceinline__ int offset(int j) const {  // channel j's argmax offset
    return static_cast<int>((at[j >> 1] >> ((j & 1) * 16)) & 0xFFFFu);
  }
  template <class I>
  __device__ __forceinline__ void store(__half* y, uint8_t* idx, I i) const {
    Pack<__half, V> out;
    memcpy(&out, v, sizeof out);
    pack_store<V>(y + static_cast<int64_t>(i) * V, out);
    if (idx) {
      uint8_t bb[V];
#pragma unroll
      for (int j = 0; j < V / 2; ++j) {
        bb[2 * j] = static_cast<uint8_t>(at[j] & 0xFFu);
        bb[2 * j + 1] = static_cast<uint8_t>(at[j] >> 16);
      }
      store_bytes<V>(idx + static_cast<int64_t>(i) * V, bb);
    }
  }
  __device__ static __forceinline__ uint32_t bits_of(__half2 h) {
    uint32_t b;
    memcpy(&b, &h, 4);
    return b;
  }
  __device__ static __forceinline__ __half2 half2_of(uint32_t b) {
    __half2 h;
    memcpy(&h, &b, 4);
    return h;
  }
};
// f16 packs of one or odd widths keep the float version.
template <>
struct WindowMax<__half, 1> : WindowMax<float, 1> {
  __device__ __forceinline__ void take(const Pack<__half, 1>& x, int o, const ApplyConsts (&k)[1], bool relu) {
    float e = apply_affine(to_f32(x.v[0]), k[0]);
    if (relu) e = (e > 0.0f || e != e) ? e : 0.0f;
    const float f = to_f32(from_f32<__half>(e));
    if (f > v[0] || f != f) {
      v[0] = f;
      at[0] = o;
    }
  }
  template <class I>
  __device__ __forceinline__ void store(__half* y, uint8_t* idx, I i) const {
    y[i] = from_f32<__half>(v[0]);
    if (idx) idx[i] = static_cast<uint8_t>(at[0]);
  }
};

// A 2x2 / stride-2 tiling window (VGG's pools) in the fused kernels that walk pooled pixels: pooled pixel i of the
// (N P, Q) grid -- row pr = i / q (n P + p), column pc -- covers rows 2 pr, 2 pr + 1 and columns 2 pc, 2 pc + 1 of
// x (N, 2P, 2Q, c). window2x2_at: the offset in x of its element 0 at channel col; window2x2_off: that of element
// k = 2 (h % 2) + w % 2 (the argmax's offset in the window) from there.
__device__ __forceinline__ int64_t window2x2_at(uint32_t i, uint32_t q, int64_t w, int64_t c, int64_t col) {
  const uint32_t pr = i / q, pc = i - pr * q;
  return (static_cast<int64_t>(pr) * 2 * w + static_cast<int64_t>(pc) * 2) * c + col;
}
__device__ __forceinline__ int64_t window2x2_off(int k, int64_t w, int64_t c) { return ((k >> 1) * w + (k & 1)) * c; }

// Pass 3 forward with a fused max pool whose windows tile x (stride = kernel, no padding, H = P kh, W = Q kw): x
// (N,H,W,C) -> y (N,H/kh,W/kw,C), idx (same, u8, nullable). One thread per output pixel and V channels normalises
// its window's elements on load exactly as bn_fwd_apply_kernel computes and rounds y (same constants, one fmaf, the
// ReLU, the rounding to T), then takes the max with maxpool_fwd_idx_kernel's rule (a greater value or a NaN takes
// over, ties keep the first), so y and idx are bitwise those of the unfused apply + max pool. Constants as
// bn_fwd_apply_kernel (train: mean, invstd; eval: running mean and variance, var_not_invstd, mean_shift).
// xa (same shape as y, nullable): per channel, the window's x element at the argmax, loaded again, for the
// backward's pooled statistics. VGG's 2x2 windows on the 16-byte path run bn_pool2x2_apply_kernel below.
template <class T, int V, class I>
__global__ void __launch_bounds__(256)
    bn_pool_apply_kernel(const T* __restrict__ x, T* __restrict__ y, uint8_t* __restrict__ idx, T* __restrict__ xa,
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
#pragma unroll
    for (int j = 0; j < V; ++j)
      k[j] = apply_consts(c0 + j, gamma, beta, mean, inv_or_var, var_not_invstd, eps, mean_shift);
    WindowMax<T, V> mx;
    mx.init(0);  // an all -inf window: its first element, as the max pool
    const T* xw = x + ((static_cast<int64_t>(b) * h + static_cast<int64_t>(p) * kh) * w +
                       static_cast<int64_t>(q) * kw) * c + c0;
    for (int r = 0; r < kh; ++r) {
      for (int s = 0; s < kw; ++s)
        mx.take(pack_load<V>(xw + (static_cast<int64_t>(r) * w + s) * c), r * kw + s, k, relu);
    }
    if (xa) {
      Pack<T, V> xo;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int o = mx.offset(j);
        xo.v[j] = xw[(static_cast<int64_t>(o / kw) * w + o % kw) * c + j];
      }
      pack_store<V>(xa + static_cast<int64_t>(i) * V, xo);
    }
    mx.store(y, idx, i);
  }
}

// The same for 2x2 / stride-2 tiling windows (VGG's pools) in bn_bwd_window_dx_kernel's geometry, a window's four
// loads issued before its first take: block (tx, ty), tx channel packs -- a thread's V channels are fixed, so their
// constants are computed once, not per window (the per-item kernel above computed V sets of constants, each 4
// loads, and three index divisions for every window) -- and ty pooled pixels (window2x2_at), strided over the grid.
// The takes run in the window's row-major order (the kernel above's), and xa picks the loaded element at the argmax,
// so y, idx and xa are bitwise the same.
template <class T, int V>
__global__ void __launch_bounds__(256)
    bn_pool2x2_apply_kernel(const T* __restrict__ x, T* __restrict__ y, uint8_t* __restrict__ idx,
                            T* __restrict__ xa, const float* __restrict__ gamma, const float* __restrict__ beta,
                            const float* __restrict__ mean, const float* __restrict__ inv_or_var, bool var_not_invstd,
                            float eps, bool relu, const float* __restrict__ mean_shift, uint32_t npix, uint32_t q,
                            int64_t w, int64_t c) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= c) return;
  ApplyConsts k[V];
#pragma unroll
  for (int j = 0; j < V; ++j)
    k[j] = apply_consts(col + j, gamma, beta, mean, inv_or_var, var_not_invstd, eps, mean_shift);
  for (uint32_t i = blockIdx.y * blockDim.y + threadIdx.y; i < npix; i += gridDim.y * blockDim.y) {
    const T* xw = x + window2x2_at(i, q, w, c, col);
    Pack<T, V> v[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) v[m] = pack_load<V>(xw + window2x2_off(m, w, c));  // m: window element
    WindowMax<T, V> mx;
    mx.init(0);
#pragma unroll
    for (int m = 0; m < 4; ++m) mx.take(v[m], m, k, relu);
    const int64_t pack = (static_cast<int64_t>(i) * c + col) / V;  // y's V-pack (c and col are multiples of V)
    if (xa) {
      Pack<T, V> xo;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int o = mx.offset(j);
        T e = v[0].v[j];
#pragma unroll
        for (int m = 1; m < 4; ++m)
          if (m == o) e = v[m].v[j];
        xo.v[j] = e;
      }
      pack_store<V>(xa + pack * V, xo);
    }
    mx.store(y, idx, pack);
  }
}

// Pass 3 forward with a fused max pool over general windows: x (N,H,W,C) -> y (N,P,Q,C), idx (same, u8, nullable)
// over the kh x kw windows of g (stride sh, sw, padding ph, pw). One thread per output pixel and V channels scans
// its window's real elements (padding clipped away) in maxpool_fwd_idx_kernel's row-major order, normalising each
// on load as bn_fwd_apply_kernel computes and rounds y, and keeps the max with the pool's rule (a greater value or
// a NaN takes over; an all -inf window keeps its first real element), recording the offset in the nominal window,
// (ih - (p sh - ph)) * kw + (iw - (q sw - pw)): y and idx are bitwise the unfused ones.
// KH, KW > 0: the window size known at compile time (ResNet's 3x3 stem pool; g.kh, g.kw must equal them): the
// window's KH*KW loads are unrolled, predicated on lying inside the image, and all issued before the first is used
// (the run-time loops over the clipped window wait for each load in turn); the comparisons keep the same order.
template <class T, int V, class I, int KH = 0, int KW = 0>
__global__ void __launch_bounds__(256)
    bn_pool_window_apply_kernel(const T* __restrict__ x, T* __restrict__ y, uint8_t* __restrict__ idx,
                                const float* __restrict__ gamma, const float* __restrict__ beta,
                                const float* __restrict__ mean, const float* __restrict__ inv_or_var,
                                bool var_not_invstd, float eps, bool relu, const float* __restrict__ mean_shift,
                                const Pool2dGeom g) {
  const I np = static_cast<I>(g.p), nq = static_cast<I>(g.q), cv = static_cast<I>(g.c / V);
  const I total = static_cast<I>(g.n) * np * nq * cv;
  const int kw = KW > 0 ? KW : static_cast<int>(g.kw);
  const int hgt = static_cast<int>(g.h), wid = static_cast<int>(g.w);
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I c0 = (i % cv) * V;
    I t = i / cv;
    const I q = t % nq;
    t /= nq;
    const I p = t % np, b = t / np;
    const PoolWindowT<I> win = pool2d_window(g, p, q);
    const int hs = static_cast<int>(p * g.sh - g.ph), ws = static_cast<int>(q * g.sw - g.pw);
    ApplyConsts k[V];
#pragma unroll
    for (int j = 0; j < V; ++j)
      k[j] = apply_consts(c0 + j, gamma, beta, mean, inv_or_var, var_not_invstd, eps, mean_shift);
    WindowMax<T, V> mx;
    mx.init((static_cast<int>(win.h0) - hs) * kw + (static_cast<int>(win.w0) - ws));  // all -inf: the first
    const T* xn = x + static_cast<int64_t>(b) * g.h * g.w * g.c + c0;
    auto take = [&](const Pack<T, V>& v, int o) { mx.take(v, o, k, relu); };
    if constexpr (KH > 0) {
      Pack<T, V> v[KH][KW];
      bool in[KH][KW];
#pragma unroll
      for (int r = 0; r < KH; ++r) {
#pragma unroll
        for (int s = 0; s < KW; ++s) {
          const int ih = hs + r, iw = ws + s;
          in[r][s] = ih >= 0 && ih < hgt && iw >= 0 && iw < wid;
          if (in[r][s]) v[r][s] = pack_load<V>(xn + (static_cast<int64_t>(ih) * g.w + iw) * g.c);
        }
      }
#pragma unroll
      for (int r = 0; r < KH; ++r) {
#pragma unroll
        for (int s = 0; s < KW; ++s)
          if (in[r][s]) take(v[r][s], r * KW + s);
      }
    } else {
      for (int ih = static_cast<int>(win.h0); ih < static_cast<int>(win.h1); ++ih) {
        for (int iw = static_cast<int>(win.w0); iw < static_cast<int>(win.w1); ++iw)
          take(pack_load<V>(xn + (static_cast<int64_t>(ih) * g.w + iw) * g.c), (ih - hs) * kw + (iw - ws));
      }
    }
    mx.store(y, idx, i);
  }
}

// (n, h, w) of a row, found by division once per thread and then advanced by additions — the four 32-bit
// divisions per row it replaces cost as much as the rest of the backward's arithmetic. S: a pooled gradient
// source (its hw = H*W, w = W, h = H).
struct RowPos {
  uint32_t n, h, w;
};
template <class S>
__device__ __forceinline__ RowPos row_pos(const S& s, uint32_t row) {
  RowPos p;
  p.n = row / s.hw;
  const uint32_t rem = row - p.n * s.hw;
  p.h = rem / s.w;
  p.w = rem - p.h * s.w;
  return p;
}
template <class S>
__device__ __forceinline__ void advance_rows(const S& s, RowPos& p, uint32_t by) {
  p.w += by;
  while (p.w >= s.w) {
    p.w -= s.w;
    if (++p.h == s.h) {
      p.h = 0;
      ++p.n;
    }
  }
}

// One element of the full-resolution dy that the tiled max-pool backward stores, from its window's pooled dy d and
// argmax byte a at the element's window offset off: T(0 + d) where it is the argmax, else T(0) (TiledPoolGrad and
// bn_bwd_window_dx_kernel, so that both are bitwise that kernel's).
template <class T>
__device__ __forceinline__ T tiled_dy(T d, uint8_t a, uint32_t off) {
  return from_f32<T>(a == off ? 0.0f + to_f32(d) : 0.0f);
}

// The backward's dy when the kh x kw windows tile (N,H,W,C): the pooled gradient dy (N,H/kh,W/kw,C) and argmax
// idx (same, u8) stand for the full-resolution dy that maxpool_bwd_idx_tiled_kernel would have written. Row
// (n, h, w) reads pooled row (n, h/kh, w/kw) and compares the window's argmax with its offset (h%kh)*kw + w%kw,
// both found once per row — once per row pair when the pair (w even, w + 1) lies in one 2x2 window (W is even:
// the windows tile); each element is T(0 + dy) where it is the argmax, else T(0), exactly what the tiled max-pool
// backward stores. rows < 2^31 (the launcher checks).
template <class T>
struct TiledPoolGrad {
  const T* dy;
  const uint8_t* idx;
  uint32_t hw, w, kh, kw;  // H*W, W, window
  uint32_t pq, q;          // (H/kh)*(W/kw), W/kw
  uint32_t h;              // H
  using Pos = RowPos;
  __device__ __forceinline__ Pos start(int64_t row) const { return row_pos(*this, static_cast<uint32_t>(row)); }
  __device__ __forceinline__ void advance(Pos& p, uint32_t by) const { advance_rows(*this, p, by); }
  // The pooled row of position p and p's offset in its window.
  __device__ __forceinline__ void window_of(const RowPos& p, int64_t& prow, uint32_t& off) const {
    const bool two = kh == 2 && kw == 2;  // VGG's 2x2 windows: shifts (uniform branch)
    const uint32_t ph = two ? p.h >> 1 : p.h / kh, pw = two ? p.w >> 1 : p.w / kw;
    off = (p.h - ph * kh) * kw + (p.w - pw * kw);
    prow = static_cast<int64_t>(p.n) * pq + static_cast<int64_t>(ph) * q + pw;
  }
  // out[u][e] = the dy V-pack of row r + kPairStep u + e at column col, for the rows below r1; pos: row r's
  // position (rows past r1 get positions past the tensor, never loaded).
  template <int U, int V>
  __device__ __forceinline__ void load(int64_t r, int64_t r1, int64_t c, int64_t col, Pack<T, V> (&out)[U][2],
                                       const Pos& pos) const {
    int64_t prow[U][2];
    uint32_t off[U][2];
    bool one[U];  // the pair's rows share a window: its dy and argmax are loaded once
    RowPos p = pos;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      window_of(p, prow[u][0], off[u][0]);
      one[u] = kh == 2 && kw == 2 && (p.w & 1u) == 0;  // w even: w + 1 < W lies in the same window
      if (one[u]) {
        prow[u][1] = prow[u][0];
        off[u][1] = off[u][0] + 1;
      } else {
        RowPos p1 = p;
        advance_rows(*this, p1, 1);
        window_of(p1, prow[u][1], off[u][1]);
      }
      advance_rows(*this, p, kPairStep);
    }
    Pack<T, V> d[U][2];
    uint8_t b[U][2][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (r + u * kPairStep + e >= r1 || (e == 1 && one[u])) continue;
        const int64_t o = prow[u][e] * c + col;
        d[u][e] = pack_load<V>(dy + o);
        load_bytes<V>(idx + o, b[u][e]);  // V == 8: c % 8 == 0 and idx 8-byte aligned
      }
      if (one[u]) {
        d[u][1] = d[u][0];
#pragma unroll
        for (int j = 0; j < V; ++j) b[u][1][j] = b[u][0][j];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (r + u * kPairStep + e >= r1) continue;
#pragma unroll
        for (int j = 0; j < V; ++j)
          out[u][e].v[j] = tiled_dy(d[u][e].v[j], b[u][e][j], off[u][e]);
      }
    }
  }
};

// The windows [lo, hi) along one axis that contain padded coordinate xp (= input coordinate + pad), k the window,
// s the stride, n the output size: pool2d_cover's formulas, with shifts for stride 2 (uniform branch).
struct AxisCover {
  uint32_t lo, hi;
};
__device__ __forceinline__ AxisCover axis_cover(uint32_t xp, uint32_t k, uint32_t s, uint32_t n) {
  const bool two = s == 2;  // the ResNet stem's 3x3/2
  const uint32_t last = two ? xp >> 1 : xp / s;
  const uint32_t first = xp < k ? 0u : (two ? (xp - k) >> 1 : (xp - k) / s) + 1;
  return {first, min(last + 1, n)};
}

// The backward's dy for general windows (kh x kw, stride sh <= kh, sw <= kw, padding ph, pw): the pooled gradient
// dy (N,P,Q,C) and argmax idx (same, u8) stand for the full-resolution dy that maxpool_bwd_idx_kernel would have
// written. Row (n, h, w) visits the windows (p, q) that contain it in (p, q) order (at most ceil(kh/sh) *
// ceil(kw/sw)), and adds, in fp32 from 0, the window's dy wherever its argmax is this element's offset in the
// window, (h + ph - p sh) * kw + (w + pw - q sw); the sum rounded once to T is exactly what that kernel stores
// (same terms, same order, same precision: an element in no window or argmax of none gets T(0), one window's
// gradient T(0 + dy)). N*H*W and N*P*Q < 2^31 (the launcher checks).
// KH, KW, SH, SW > 0: the window and stride known at compile time (ResNet's 3x3/2 stem pool; they must equal the
// run-time members): the at most ceil(KH/SH) x ceil(KW/SW) covering windows' loads are unrolled, predicated on
// covering the element, and issued together before the sum, which keeps its (p, q) order.
template <class T, int KH = 0, int KW = 0, int SH = 0, int SW = 0>
struct WindowPoolGrad {
  const T* dy;
  const uint8_t* idx;
  uint32_t hw, w, h;               // H*W, W, H
  uint32_t kh, kw, sh, sw, ph, pw;  // window, stride, padding
  uint32_t np, nq, pq;             // P, Q, P*Q
  using Pos = RowPos;
  static constexpr bool kStatic = KH > 0;
  __device__ __forceinline__ Pos start(int64_t row) const { return row_pos(*this, static_cast<uint32_t>(row)); }
  __device__ __forceinline__ void advance(Pos& p, uint32_t by) const { advance_rows(*this, p, by); }
  // The dy V-pack of the row at position e, column col, as the full-resolution dy would hold it.
  template <int V>
  __device__ __forceinline__ void decode(const RowPos& e, int64_t c, int64_t col, Pack<T, V>& out) const {
    const uint32_t hp = e.h + ph, wp = e.w + pw;  // padded coordinates
    const AxisCover ch = kStatic ? axis_cover(hp, KH, SH, np) : axis_cover(hp, kh, sh, np);
    const AxisCover cw = kStatic ? axis_cover(wp, KW, SW, nq) : axis_cover(wp, kw, sw, nq);
    const uint32_t base = e.n * pq;  // pooled row of (n, 0, 0)
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.0f;
    // Window (p, q)'s contribution: its dy where its argmax is this element.
    auto add = [&](const Pack<T, V>& d, const uint8_t (&b)[V], uint32_t self) {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (b[j] == self) acc[j] += to_f32(d.v[j]);
    };
    if constexpr (kStatic) {
      constexpr int kMaxP = (KH + SH - 1) / SH, kMaxQ = (KW + SW - 1) / SW;  // covering windows per axis
      Pack<T, V> d[kMaxP][kMaxQ];
      uint8_t b[kMaxP][kMaxQ][V];
      bool in[kMaxP][kMaxQ];
#pragma unroll
      for (int a = 0; a < kMaxP; ++a) {
#pragma unroll
        for (int t = 0; t < kMaxQ; ++t) {
          const uint32_t p = ch.lo + a, q = cw.lo + t;
          in[a][t] = p < ch.hi && q < cw.hi;
          if (in[a][t]) {
            const int64_t o = static_cast<int64_t>(base + p * nq + q) * c + col;
            d[a][t] = pack_load<V>(dy + o);
            load_bytes<V>(idx + o, b[a][t]);  // V == 8: c % 8 == 0 and idx 8-byte aligned
          }
        }
      }
#pragma unroll
      for (int a = 0; a < kMaxP; ++a) {
#pragma unroll
        for (int t = 0; t < kMaxQ; ++t)
          if (in[a][t]) add(d[a][t], b[a][t], (hp - (ch.lo + a) * SH) * KW + (wp - (cw.lo + t) * SW));
      }
    } else {
      for (uint32_t p = ch.lo; p < ch.hi; ++p) {
        const uint32_t row_off = (hp - p * sh) * kw;
        for (uint32_t q = cw.lo; q < cw.hi; ++q) {
          const int64_t o = static_cast<int64_t>(base + p * nq + q) * c + col;
          uint8_t b[V];
          load_bytes<V>(idx + o, b);  // V == 8: c % 8 == 0 and idx 8-byte aligned
          add(pack_load<V>(dy + o), b, row_off + (wp - q * sw));
        }
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(acc[j]);
  }
  // out[u][e] = the dy V-pack of row r + kPairStep u + e at column col, for the rows below r1; pos: row r's.
  template <int U, int V>
  __device__ __forceinline__ void load(int64_t r, int64_t r1, int64_t c, int64_t col, Pack<T, V> (&out)[U][2],
                                       const Pos& pos) const {
    RowPos e = pos;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      RowPos e1 = e;
      advance_rows(*this, e1, 1);
      if (r + u * kPairStep < r1) decode(e, c, col, out[u][0]);
      if (r + u * kPairStep + 1 < r1) decode(e1, c, col, out[u][1]);
      advance_rows(*this, e, kPairStep);
    }
  }
};

// Pass 3 of the fused backward when 2x2 windows tile x (BnPoolGather::kWindowDx): one thread per pooled pixel
// and V channels instead of per row — the window's pooled dy and argmax loaded once, its four x packs together, its
// four dx packs computed and stored. Each element's arithmetic is bn_bwd_apply_kernel's with TiledPoolGrad (the
// decoded gradient T(0 + dy) at the argmax, else T(0); the ReLU mask recomputed from x; bn_bwd_dx; the same
// constants, inv_n = 1.0f / rows on the device), so dx is bitwise the same; the order of elements is free (no
// reduction). dy, idx (npix = N*P*Q, c), x, dx (N, 2P, 2Q, c); block (tx, ty): tx channel packs, ty pixels.
template <class T, int V>
__global__ void __launch_bounds__(256)
    bn_bwd_window_dx_kernel(const T* __restrict__ dy, const uint8_t* __restrict__ idx, const T* __restrict__ x,
                            const float* __restrict__ gamma, const float* __restrict__ mean,
                            const float* __restrict__ invstd, const float* __restrict__ dgamma,
                            const float* __restrict__ dbeta, const float* __restrict__ relu_beta, T* __restrict__ dx,
                            uint32_t npix, uint32_t q, int64_t w, int64_t c, int64_t rows) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= c) return;
  const float inv_n = 1.0f / static_cast<float>(rows);
  BnBwdConsts kc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) kc[j] = bn_bwd_consts(col + j, gamma, mean, invstd, dgamma, dbeta, relu_beta, inv_n);
  for (uint32_t i = blockIdx.y * blockDim.y + threadIdx.y; i < npix; i += gridDim.y * blockDim.y) {
    const int64_t x0 = window2x2_at(i, q, w, c, col);
    const int64_t o = static_cast<int64_t>(i) * c + col;
    Pack<T, V> xv[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) xv[k] = pack_load<V>(x + x0 + window2x2_off(k, w, c));
    const Pack<T, V> d = pack_load<V>(dy + o);
    uint8_t b[V];
    load_bytes<V>(idx + o, b);
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // window offset k = (h % 2) * 2 + w % 2
      Pack<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const T gin = tiled_dy(d.v[j], b[j], k);
        const float g = relu_grad_in<T>(gin, xv[k].v[j], gin, relu_beta, false, kc[j].m, kc[j].a, kc[j].b);
        out.v[j] = bn_bwd_dx<T>(g, xv[k].v[j], kc[j]);
      }
      pack_store<V>(dx + x0 + window2x2_off(k, w, c), out);
    }
  }
}

// Launches bn_bwd_window_dx_kernel for g (2x2/2 tiling) at the widest vector width every pointer allows.
template <class T>
Status bn_bwd_window_dx_launch(cudaStream_t s, const Pool2dGeom& g, const T* dy, const uint8_t* idx, const T* x,
                               const float* gamma, const float* beta, const float* mean, const float* invstd,
                               const float* dgamma, const float* dbeta, T* dx) {
  const int64_t rows = g.n * g.h * g.w, npix = g.n * g.p * g.q;
  return with_vector_width<T>(g.c, {dy, x, dx}, [&](auto vw) {
    constexpr int V = decltype(vw)::value;
    const int64_t packs = g.c / V;
    const int tx = channel_threads(packs), ty = 256 / tx;
    const int64_t want = (npix + ty - 1) / ty;  // pixel blocks; at most 4096, each thread strides over the rest
    const dim3 grid(static_cast<unsigned>((packs + tx - 1) / tx), static_cast<unsigned>(std::min<int64_t>(want, 4096)));
    bn_bwd_window_dx_kernel<T, V><<<grid, dim3(tx, ty), 0, s>>>(dy, idx, x, gamma, mean, invstd, dgamma, dbeta, beta,
                                                                dx, static_cast<uint32_t>(npix),
                                                                static_cast<uint32_t>(g.q), g.w, g.c, rows);
    return TRCTL_CUDA_LAUNCH_STATUS("bn_bwd_window_dx_kernel");
  });
}

// 3x3 windows with stride 2 (ResNet's stem pool, any padding): the geometry whose fused kernels are specialised.
bool is_3x3_stride2(const Pool2dGeom& g) { return g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2; }

// The geometries the fused kernels run: g exactly as pool2d_geom_finish makes it, windows of at most 256 elements
// (the u8 argmax), stride <= kernel, c < 2^31.
bool fused_pool_geom_ok(const Pool2dGeom& g) {
  Pool2dGeom f = g;
  return pool2d_geom_finish(f) && f.p == g.p && f.q == g.q && g.kh * g.kw <= 256 && g.sh <= g.kh && g.sw <= g.kw &&
         g.c < (int64_t{1} << 31);
}

// The fused max pool's forward launch over x (n,h,w,c) -> y, idx (n,p,q,c): the tiling kernel when the windows
// tile x, else the general one; 32-bit indices when they fit.
// xa (tiling windows only, nullable): the x elements at the argmax (bn_pool_apply_kernel).
template <class T>
Status bn_pool_apply_launch(cudaStream_t s, const Pool2dGeom& g, const void* x, void* y, uint8_t* idx,
                            const float* gamma, const float* beta, const float* mean, const float* inv_or_var,
                            bool var_not_invstd, float eps, bool relu, const float* mean_shift, void* xa = nullptr) {
  const bool tiled = pool2d_windows_tile(g);
  TRCTL_CUDA_ARG_CHECK(!xa || tiled, "bn_pool_apply_launch: x at the argmax needs tiling windows");
  auto launch = [&](auto vw) {
    constexpr int V = decltype(vw)::value;
    const int64_t items = g.n * g.p * g.q * (g.c / V);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    T* xas = static_cast<T*>(xa);
    const int kh = static_cast<int>(g.kh), kw = static_cast<int>(g.kw);
    const bool small = std::max(g.n * g.h * g.w, g.n * g.p * g.q) * g.c < (int64_t{1} << 30);
    if (tiled) {
      if constexpr (V == kVec16<T>) {  // VGG's 2x2 windows, specialised on the 16-byte path
        if (small && kh == 2 && kw == 2) {
          // bn_bwd_window_dx_launch's block shape; blocks for ~8 per SM, each thread striding over many windows.
          const int64_t packs = g.c / V, npix = g.n * g.p * g.q;
          const int tx = channel_threads(packs), ty = 256 / tx;
          const int64_t gx = (packs + tx - 1) / tx;
          const int64_t gy = std::max<int64_t>(1, std::min((npix + ty - 1) / ty, kElementwiseMaxGrid / gx));
          bn_pool2x2_apply_kernel<T, V><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(tx, ty),
                                          0, s>>>(xs, ys, idx, xas, gamma, beta, mean, inv_or_var, var_not_invstd,
                                                  eps, relu, mean_shift, static_cast<uint32_t>(npix),
                                                  static_cast<uint32_t>(g.q), g.w, g.c);
          return TRCTL_CUDA_LAUNCH_STATUS("bn_pool2x2_apply_kernel");
        }
      }
      if (small)
        bn_pool_apply_kernel<T, V, int32_t><<<elementwise_grid(items), kElementwiseBlock, 0, s>>>(
            xs, ys, idx, xas, gamma, beta, mean, inv_or_var, var_not_invstd, eps, relu, mean_shift, g.n, g.h, g.w, g.c,
            kh, kw);
      else
        bn_pool_apply_kernel<T, V, int64_t><<<elementwise_grid(items), kElementwiseBlock, 0, s>>>(
            xs, ys, idx, xas, gamma, beta, mean, inv_or_var, var_not_invstd, eps, relu, mean_shift, g.n, g.h, g.w, g.c,
            kh, kw);
      return TRCTL_CUDA_LAUNCH_STATUS("bn_pool_apply_kernel");
    }
    if constexpr (V == kVec16<T>) {  // the specialised stem kernel on the 16-byte path only
      if (small && is_3x3_stride2(g)) {
        bn_pool_window_apply_kernel<T, V, int32_t, 3, 3><<<elementwise_grid(items), kElementwiseBlock, 0, s>>>(
            xs, ys, idx, gamma, beta, mean, inv_or_var, var_not_invstd, eps, relu, mean_shift, g);
        return TRCTL_CUDA_LAUNCH_STATUS("bn_pool_window_apply_kernel (3x3)");
      }
    }
    if (small)
      bn_pool_window_apply_kernel<T, V, int32_t><<<elementwise_grid(items), kElementwiseBlock, 0, s>>>(
          xs, ys, idx, gamma, beta, mean, inv_or_var, var_not_invstd, eps, relu, mean_shift, g);
    else
      bn_pool_window_apply_kernel<T, V, int64_t><<<elementwise_grid(items), kElementwiseBlock, 0, s>>>(
          xs, ys, idx, gamma, beta, mean, inv_or_var, var_not_invstd, eps, relu, mean_shift, g);
    return TRCTL_CUDA_LAUNCH_STATUS("bn_pool_window_apply_kernel");
  };
  constexpr int kV16 = kVec16<T>;
  if (g.c % kV16 == 0 && gpu_aligned(16, x, y, xa))  // idx: 8-byte aligned (the launchers check)
    return launch(std::integral_constant<int, kV16>{});
  if (g.c % 2 == 0 && gpu_aligned(2 * sizeof(T), x, y, xa)) return launch(std::integral_constant<int, 2>{});
  return launch(std::integral_constant<int, 1>{});
}

}  // namespace

Status batchnorm_fwd_train_pool_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma,
                                     const float* beta, void* y, uint8_t* idx, float* save_mean, float* save_invstd,
                                     float* running_mean, float* running_var, const Pool2dGeom& g, float eps,
                                     float momentum, bool relu, void* workspace, size_t workspace_bytes,
                                     const float* prebias, const BnSums& sums, void* x_at_max) {
  TRCTL_CUDA_ARG_CHECK(fused_pool_geom_ok(g), "batchnorm_fwd_train_pool_cuda: unfinished Pool2dGeom, a window over "
                                              "256 elements, a stride past the kernel or c >= 2^31");
  const int64_t rows = g.n * g.h * g.w, c = g.c;
  TRCTL_CUDA_ARG_CHECK(rows >= 2, "batchnorm_fwd_train_pool_cuda: rows < 2");
  TRCTL_CUDA_ARG_CHECK(x && y && idx && gamma && beta && save_mean && save_invstd,
                       "batchnorm_fwd_train_pool_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(gpu_aligned(8, idx), "batchnorm_fwd_train_pool_cuda: idx not 8-byte aligned");
  TRCTL_CUDA_ARG_CHECK(workspace && workspace_bytes >= batchnorm_workspace_bytes(rows, c),
                       "batchnorm_fwd_train_pool_cuda: workspace missing or smaller than batchnorm_workspace_bytes");
  TRCTL_CUDA_ARG_CHECK(!sums.sum == !sums.sqsum, "batchnorm_fwd_train_pool_cuda: BnSums with one of sum, sqsum null");
  TRCTL_CUDA_ARG_CHECK(!x_at_max || pool2d_windows_tile(g),
                       "batchnorm_fwd_train_pool_cuda: x at the argmax needs tiling windows");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Status st = bn_fwd_train_stats<T>(s, static_cast<const T*>(x), sums, rows, c, workspace, eps, momentum,
                                      save_mean, save_invstd, running_mean, running_var, prebias);  // as unfused
    if (!st) return st;
    return bn_pool_apply_launch<T>(s, g, x, y, idx, gamma, beta, save_mean, save_invstd, false, eps, relu, nullptr,
                                   x_at_max);
  });
}

Status batchnorm_fwd_eval_pool_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma, const float* beta,
                                    const float* running_mean, const float* running_var, void* y,
                                    const Pool2dGeom& g, float eps, bool relu, const float* prebias) {
  TRCTL_CUDA_ARG_CHECK(g.n >= 0, "batchnorm_fwd_eval_pool_cuda: n < 0");
  if (g.n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(fused_pool_geom_ok(g), "batchnorm_fwd_eval_pool_cuda: unfinished Pool2dGeom, a window over "
                                              "256 elements, a stride past the kernel or c >= 2^31");
  TRCTL_CUDA_ARG_CHECK(x && y && gamma && beta && running_mean && running_var,
                       "batchnorm_fwd_eval_pool_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return bn_pool_apply_launch<T>(s, g, x, y, nullptr, gamma, beta, running_mean, running_var, true, eps, relu,
                                   prebias);
  });
}

Status batchnorm_bwd_pool_cuda(cudaStream_t s, const void* dy_pooled, const uint8_t* idx, const void* x, GpuDType t,
                               const float* gamma, const float* beta, const float* save_mean,
                               const float* save_invstd, void* dx, float* dgamma, float* dbeta, const Pool2dGeom& g,
                               void* workspace, size_t workspace_bytes, BnPoolGather gather,
                               const void* x_at_max) {
  TRCTL_CUDA_ARG_CHECK(fused_pool_geom_ok(g), "batchnorm_bwd_pool_cuda: unfinished Pool2dGeom, a window over 256 "
                                              "elements, a stride past the kernel or c >= 2^31");
  const int64_t rows = g.n * g.h * g.w, c = g.c;
  TRCTL_CUDA_ARG_CHECK(rows < (int64_t{1} << 31) && g.n * g.p * g.q < (int64_t{1} << 31),
                       "batchnorm_bwd_pool_cuda: n*h*w or n*p*q >= 2^31");
  TRCTL_CUDA_ARG_CHECK(dy_pooled && idx && x && gamma && beta && save_mean && save_invstd && dx && dgamma && dbeta,
                       "batchnorm_bwd_pool_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(gpu_aligned(8, idx), "batchnorm_bwd_pool_cuda: idx not 8-byte aligned");
  TRCTL_CUDA_ARG_CHECK(dx != x && dx != dy_pooled, "batchnorm_bwd_pool_cuda: dx aliases x or dy");
  TRCTL_CUDA_ARG_CHECK(!x_at_max || pool2d_windows_tile(g),
                       "batchnorm_bwd_pool_cuda: x at the argmax needs tiling windows");
  TRCTL_CUDA_ARG_CHECK(workspace && workspace_bytes >= batchnorm_workspace_bytes(rows, c),
                       "batchnorm_bwd_pool_cuda: workspace missing or smaller than batchnorm_workspace_bytes");
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy = static_cast<const T*>(dy_pooled);
    const bool tiled = pool2d_windows_tile(g);
    // kAuto: what bench kernels measured fastest: 2x2 tiling windows decode in the first pass and run the last per
    // window (RESULTS.md run 58, H100: 2.45 ms against kTwice's 2.71 at VGG's pool1), other tiling windows decode in
    // both passes (run 54), overlapping ones run the pool backward and then the dense batch-norm backward (run 54).
    if (gather == BnPoolGather::kAuto)
      gather = !tiled ? BnPoolGather::kPoolThenDense
                      : (g.kh == 2 && g.kw == 2 ? BnPoolGather::kWindowDx : BnPoolGather::kTwice);
    if (gather == BnPoolGather::kPoolThenDense) {  // the unfused pair's kernels, dx as the full-resolution dy
      Status st = maxpool2d_bwd_idx_cuda(s, g, dy_pooled, idx, dx, t);
      if (!st) return st;
      return batchnorm_bwd_cuda(s, dx, x, nullptr, t, gamma, save_mean, save_invstd, dx, dgamma, dbeta, rows, c,
                                workspace, workspace_bytes, beta);
    }
    void* stored = gather == BnPoolGather::kOnceStored ? dx : nullptr;
    if (tiled) {
      const TiledPoolGrad<T> gs{dy, idx, u32(g.h * g.w), u32(g.w), u32(g.kh), u32(g.kw), u32(g.p * g.q), u32(g.q),
                                u32(g.h)};
      const bool window_dx = gather == BnPoolGather::kWindowDx && g.kh == 2 && g.kw == 2;
      if (x_at_max || window_dx) {
        // Passes 1-2 (dgamma, dbeta): over the pooled pixels (dy_pooled, x_at_max), else decoding the pooled
        // gradient at full resolution. Then dx: per 2x2 window, else the dx pass alone, decoding again.
        Status st = x_at_max ? bn_bwd_launch<T>(s, DenseGrad<T>{dy}, x_at_max, nullptr, gamma, save_mean, save_invstd,
                                                nullptr, dgamma, dbeta, g.n * g.p * g.q, c, workspace, beta)
                             : bn_bwd_launch<T>(s, gs, x, nullptr, gamma, save_mean, save_invstd, nullptr, dgamma,
                                                dbeta, rows, c, workspace, beta);
        if (!st) return st;
        if (window_dx)
          return bn_bwd_window_dx_launch<T>(s, g, dy, idx, static_cast<const T*>(x), gamma, beta, save_mean,
                                            save_invstd, dgamma, dbeta, static_cast<T*>(dx));
        return bn_bwd_launch<T>(s, gs, x, nullptr, gamma, save_mean, save_invstd, dx, dgamma, dbeta, rows, c,
                                nullptr, beta, nullptr, false);
      }
      // kTwice, kOnceStored (and kWindowDx for other tiling windows: as kTwice)
      return bn_bwd_launch<T>(s, gs, x, nullptr, gamma, save_mean, save_invstd, dx, dgamma, dbeta, rows, c,
                              workspace, beta, stored);
    }
    // Overlapping windows, kOnceStored: pass 1 writes the gathered full-resolution dy into dx and pass 3 reads it
    // back in place (RESULTS.md run 36: with the run-time window loops, gathering in both passes cost more than the
    // unfused pair). kTwice: both passes gather (bench kernels times every mode).
    auto run = [&](auto src) {
      src = {dy,        idx,       u32(g.h * g.w), u32(g.w),  u32(g.h),  u32(g.kh), u32(g.kw),
             u32(g.sh), u32(g.sw), u32(g.ph),      u32(g.pw), u32(g.p),  u32(g.q),  u32(g.p * g.q)};
      return bn_bwd_launch<T>(s, src, x, nullptr, gamma, save_mean, save_invstd, dx, dgamma, dbeta, rows, c,
                              workspace, beta, stored);
    };
    if (is_3x3_stride2(g)) return run(WindowPoolGrad<T, 3, 3, 2, 2>{});
    return run(WindowPoolGrad<T>{});
  });
}

#undef BN_LAUNCHED

}  // namespace trctl
