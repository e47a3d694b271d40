// Pooling kernels (NHWC). One thread owns V adjacent channels of one output (forward) or input (backward) pixel, so
// a warp reads 32*V consecutive channels: coalesced for C >= 32*V, and V-wide vector loads when C % V == 0 and the
// base pointers are aligned (V = 16 bytes of elements, else 2, else scalar). Backwards gather over the covering
// windows in (p, q) order, so results are bitwise reproducible and no atomics or zero-fill are needed.
#include <algorithm>
#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/pool/pool_cuda.h"

namespace trctl {

namespace {

// Flat work item i over (N, A, B, C/V) -> batch n, spatial (a, b), first channel c0. I: int32_t when every flat
// element index of the launch fits (with_vec_and_index below), else int64_t: the divisions here and in the window
// geometry are most of a pool kernel's instructions, and 64-bit division is several times slower.
template <class I>
struct PixelChunk {
  I n, a, b, c0;
};
template <int V, class I>
__device__ __forceinline__ PixelChunk<I> decode_item(I i, int64_t A, int64_t B, int64_t C) {
  const I cv = static_cast<I>(C / V);
  PixelChunk<I> r;
  r.c0 = (i % cv) * V;
  i /= cv;
  r.b = i % static_cast<I>(B);
  i /= static_cast<I>(B);
  r.a = i % static_cast<I>(A);
  r.n = i / static_cast<I>(A);
  return r;
}

// Grid-stride loop bounds in the index type I.
template <class I>
__device__ __forceinline__ I thread_index() {
  return static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
}
template <class I>
__device__ __forceinline__ I thread_count() {
  return static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
}

// PyTorch's max update: a strictly greater value or any NaN takes over (ties keep the first, NaN propagates).
__device__ __forceinline__ bool max_takes_over(float v, float m) { return v > m || v != v; }

// Argmax (flat ih * W + iw) per lane of window (p, q); xn points at channel c0 of batch n's (H, W, C) plane.
template <class T, int V>
__device__ __forceinline__ void window_argmax(const Pool2dGeom& g, const T* xn, int64_t p, int64_t q,
                                              int64_t (&best)[V]) {
  const PoolWindow win = pool2d_window(g, p, q);
  float m[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    m[j] = -INFINITY;
    best[j] = win.h0 * g.w + win.w0;  // an all -inf window gives its first element the gradient, as the CPU does
  }
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw) {
      const Pack<T, V> v = pack_load<V>(xn + (ih * g.w + iw) * g.c);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float f = to_f32(v.v[j]);
        if (max_takes_over(f, m[j])) {
          m[j] = f;
          best[j] = ih * g.w + iw;
        }
      }
    }
  }
}

// x (N, H, W, C) -> y (N, P, Q, C). The max is one of the inputs, so the result is exact in every dtype.
template <class T, int V, class I>
__global__ void maxpool_fwd_kernel(const Pool2dGeom g, const T* __restrict__ x, T* __restrict__ y) {
  const I total = static_cast<I>(g.n * g.p * g.q * (g.c / V));
  for (I i = thread_index<I>(); i < total; i += thread_count<I>()) {
    const PixelChunk<I> o = decode_item<V>(i, g.p, g.q, g.c);
    const PoolWindowT<I> win = pool2d_window(g, o.a, o.b);
    const T* xn = x + o.n * g.h * g.w * g.c + o.c0;
    float m[V];
#pragma unroll
    for (int j = 0; j < V; ++j) m[j] = -INFINITY;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const Pack<T, V> v = pack_load<V>(xn + (ih * g.w + iw) * g.c);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float f = to_f32(v.v[j]);
          if (max_takes_over(f, m[j])) m[j] = f;
        }
      }
    }
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(m[j]);
    pack_store<V>(y + i * V, out);  // item i is exactly output chunk i
  }
}

// dy (N, P, Q, C), x (N, H, W, C) -> dx (N, H, W, C): each input pixel adds dy of the covering windows whose
// argmax it is. Recomputing the argmax costs kh*kw cached loads per covering window but needs no index buffer.
template <class T, int V, class I>
__global__ void maxpool_bwd_kernel(const Pool2dGeom g, const T* __restrict__ dy, const T* __restrict__ x,
                                   T* __restrict__ dx) {
  const I total = static_cast<I>(g.n * g.h * g.w * (g.c / V));
  for (I i = thread_index<I>(); i < total; i += thread_count<I>()) {
    const PixelChunk<I> e = decode_item<V>(i, g.h, g.w, g.c);
    const PoolCoverT<I> cov = pool2d_cover(g, e.a, e.b);
    const int64_t self = e.a * g.w + e.b;
    const T* xn = x + e.n * g.h * g.w * g.c + e.c0;
    const T* dyn = dy + e.n * g.p * g.q * g.c + e.c0;
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.0f;
    for (int64_t p = cov.p0; p < cov.p1; ++p) {
      for (int64_t q = cov.q0; q < cov.q1; ++q) {
        int64_t best[V];
        window_argmax<T, V>(g, xn, p, q, best);
        const Pack<T, V> d = pack_load<V>(dyn + (p * g.q + q) * g.c);
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (best[j] == self) acc[j] += to_f32(d.v[j]);
      }
    }
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(acc[j]);
    pack_store<V>(dx + i * V, out);
  }
}

// The forward that also records each window's argmax as its offset in the nominal window (one byte per output
// element), so that the backward gathers without searching the windows again.
template <class T, int V, class I>
__global__ void maxpool_fwd_idx_kernel(const Pool2dGeom g, const T* __restrict__ x, T* __restrict__ y,
                                       uint8_t* __restrict__ idx) {
  const I total = static_cast<I>(g.n * g.p * g.q * (g.c / V));
  for (I i = thread_index<I>(); i < total; i += thread_count<I>()) {
    const PixelChunk<I> o = decode_item<V>(i, g.p, g.q, g.c);
    const PoolWindowT<I> win = pool2d_window(g, o.a, o.b);
    const T* xn = x + o.n * g.h * g.w * g.c + o.c0;
    const int hs = static_cast<int>(o.a * g.sh - g.ph), ws = static_cast<int>(o.b * g.sw - g.pw);
    const int kw = static_cast<int>(g.kw);
    float m[V];
    int best[V];  // offset in the nominal window: (ih - hs) * kw + (iw - ws)
#pragma unroll
    for (int j = 0; j < V; ++j) {
      m[j] = -INFINITY;
      best[j] = (static_cast<int>(win.h0) - hs) * kw + (static_cast<int>(win.w0) - ws);  // all -inf: first element
    }
    for (int ih = static_cast<int>(win.h0); ih < static_cast<int>(win.h1); ++ih) {
      for (int iw = static_cast<int>(win.w0); iw < static_cast<int>(win.w1); ++iw) {
        const Pack<T, V> v = pack_load<V>(xn + (static_cast<int64_t>(ih) * g.w + iw) * g.c);
        const int k = (ih - hs) * kw + (iw - ws);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float f = to_f32(v.v[j]);
          if (max_takes_over(f, m[j])) {
            m[j] = f;
            best[j] = k;
          }
        }
      }
    }
    Pack<T, V> out;
    uint8_t b[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      out.v[j] = from_f32<T>(m[j]);
      b[j] = static_cast<uint8_t>(best[j]);
    }
    pack_store<V>(y + i * V, out);
    store_bytes<V>(idx + i * V, b);  // the launcher checks idx is 8-byte aligned: i * 8 keeps it
  }
}

// dy (N, P, Q, C), idx (N, P, Q, C) -> dx (N, H, W, C): each input pixel adds, in (p, q) order, dy of the covering
// windows whose recorded argmax it is (the order of maxpool2d_grad_cpu, so f32 results are bitwise equal to it).
template <class T, int V, class I>
__global__ void maxpool_bwd_idx_kernel(const Pool2dGeom g, const T* __restrict__ dy, const uint8_t* __restrict__ idx,
                                       T* __restrict__ dx) {
  const I total = static_cast<I>(g.n * g.h * g.w * (g.c / V));
  for (I i = thread_index<I>(); i < total; i += thread_count<I>()) {
    const PixelChunk<I> e = decode_item<V>(i, g.h, g.w, g.c);
    const PoolCoverT<I> cov = pool2d_cover(g, e.a, e.b);
    const int64_t base = e.n * g.p * g.q * g.c + e.c0;
    const I sh = static_cast<I>(g.sh), sw = static_cast<I>(g.sw), ph = static_cast<I>(g.ph), pw = static_cast<I>(g.pw);
    const I kw = static_cast<I>(g.kw), nq = static_cast<I>(g.q);
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.0f;
    for (I p = cov.p0; p < cov.p1; ++p) {
      for (I q = cov.q0; q < cov.q1; ++q) {
        const I self = (e.a - (p * sh - ph)) * kw + (e.b - (q * sw - pw));
        const int64_t o = base + static_cast<int64_t>(p * nq + q) * g.c;
        const Pack<T, V> d = pack_load<V>(dy + o);
        uint8_t b[V];
        load_bytes<V>(idx + o, b);  // V == 8: c0 and C are multiples of 8, so idx + o is 8-byte aligned
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (b[j] == self) acc[j] += to_f32(d.v[j]);
      }
    }
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(acc[j]);
    pack_store<V>(dx + i * V, out);
  }
}

// ResNet's stem pool, 3x3 windows with stride 2 and padding 1 (the max-pool backward's specialised kernel below).
bool pool2d_is_stem(const Pool2dGeom& g) {
  return g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2 && g.ph == 1 && g.pw == 1;
}

// The same backward for ResNet's stem pool (3x3 windows, stride 2, padding 1; pool2d_is_stem): one thread per 2x2
// block of input pixels (rows 2m, 2m+1, cols 2l, 2l+1) and V channels. Row 2m lies only in window row m, row 2m+1 in
// rows m and m+1 (columns likewise), so the block's pixels need just the windows (m..m+1, l..l+1), each loaded once
// for the four pixels instead of once per pixel it covers (2.25 loads per pixel), and the loads are issued
// together. Each pixel adds, in fp32 from 0 and in (p, q) order, the dy of those of its windows whose argmax it is,
// and rounds once to T: maxpool_bwd_idx_kernel's sums, bitwise.
template <class T, int V, class I>
__global__ void maxpool_bwd_idx_stem_kernel(const Pool2dGeom g, const T* __restrict__ dy,
                                            const uint8_t* __restrict__ idx, T* __restrict__ dx) {
  const int64_t mh = (g.h + 1) / 2, mw = (g.w + 1) / 2;  // 2x2 blocks down and across
  const I total = static_cast<I>(g.n * mh * mw * (g.c / V));
  for (I i = thread_index<I>(); i < total; i += thread_count<I>()) {
    const PixelChunk<I> o = decode_item<V>(i, mh, mw, g.c);  // (n, m, l, c0)
    Pack<T, V> d[2][2];
    uint8_t b[2][2][V];
    bool in[2][2];
#pragma unroll
    for (int a = 0; a < 2; ++a) {
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const I p = o.a + a, q = o.b + t;
        in[a][t] = p < static_cast<I>(g.p) && q < static_cast<I>(g.q);
        if (in[a][t]) {
          const int64_t off = ((static_cast<int64_t>(o.n) * g.p + p) * g.q + q) * g.c + o.c0;
          d[a][t] = pack_load<V>(dy + off);
          load_bytes<V>(idx + off, b[a][t]);  // V == 8: c0 and C multiples of 8, so 8-byte aligned
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t h = 2 * static_cast<int64_t>(o.a) + r;
      if (h >= g.h) continue;
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int64_t w = 2 * static_cast<int64_t>(o.b) + t;
        if (w >= g.w) continue;
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = 0.0f;
#pragma unroll
        for (int a = 0; a <= r; ++a) {  // window row m + a covers row 2m + r when a <= r
#pragma unroll
          for (int u = 0; u <= t; ++u) {
            if (!in[a][u]) continue;
            // offset in window (m + a, l + u), which starts at row 2(m + a) - 1: (r - 2a + 1) * 3 + (t - 2u + 1)
            const int self = (r - 2 * a + 1) * 3 + (t - 2 * u + 1);
#pragma unroll
            for (int j = 0; j < V; ++j)
              if (b[a][u][j] == self) acc[j] += to_f32(d[a][u].v[j]);
          }
        }
        Pack<T, V> out;
#pragma unroll
        for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(acc[j]);
        pack_store<V>(dx + ((static_cast<int64_t>(o.n) * g.h + h) * g.w + w) * g.c + o.c0, out);
      }
    }
  }
}

// The same backward when the windows tile the input exactly (stride = kernel, no padding, H = P kh, W = Q kw:
// VGG's 2x2/2 pools): every input pixel lies in exactly one window, so one thread per OUTPUT pixel chunk reads dy
// and idx once and writes its kh*kw input pixels, instead of kh*kw threads each re-reading them. Each dx element
// gets 0 + dy or 0 as in the gather above (so -0 and NaN come out bitwise the same).
template <class T, int V, class I>
__global__ void maxpool_bwd_idx_tiled_kernel(const Pool2dGeom g, const T* __restrict__ dy,
                                             const uint8_t* __restrict__ idx, T* __restrict__ dx) {
  const I total = static_cast<I>(g.n * g.p * g.q * (g.c / V));
  const int kh = static_cast<int>(g.kh), kw = static_cast<int>(g.kw);
  for (I i = thread_index<I>(); i < total; i += thread_count<I>()) {
    const PixelChunk<I> o = decode_item<V>(i, g.p, g.q, g.c);
    const Pack<T, V> d = pack_load<V>(dy + i * V);
    uint8_t b[V];
    load_bytes<V>(idx + i * V, b);  // 8-byte aligned: see the forward
    T* dxn = dx + ((o.n * g.h + o.a * kh) * g.w + o.b * kw) * g.c + o.c0;
    for (int r = 0; r < kh; ++r) {
      for (int t = 0; t < kw; ++t) {
        const int k = r * kw + t;
        Pack<T, V> out;
#pragma unroll
        for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(b[j] == k ? 0.0f + to_f32(d.v[j]) : 0.0f);
        pack_store<V>(dxn + (static_cast<int64_t>(r) * g.w + t) * g.c, out);
      }
    }
  }
}

// x (N, H, W, C) -> y (N, P, Q, C): window sum in scan order, divided by kh*kw (padding counts as zeros).
template <class T, int V, class I>
__global__ void avgpool_fwd_kernel(const Pool2dGeom g, const T* __restrict__ x, T* __restrict__ y) {
  const I total = static_cast<I>(g.n * g.p * g.q * (g.c / V));
  const float div = static_cast<float>(g.kh * g.kw);
  for (I i = thread_index<I>(); i < total; i += thread_count<I>()) {
    const PixelChunk<I> o = decode_item<V>(i, g.p, g.q, g.c);
    const PoolWindowT<I> win = pool2d_window(g, o.a, o.b);
    const T* xn = x + o.n * g.h * g.w * g.c + o.c0;
    float s[V];
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = 0.0f;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const Pack<T, V> v = pack_load<V>(xn + (ih * g.w + iw) * g.c);
#pragma unroll
        for (int j = 0; j < V; ++j) s[j] += to_f32(v.v[j]);
      }
    }
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(s[j] / div);
    pack_store<V>(y + i * V, out);
  }
}

// dy (N, P, Q, C) -> dx (N, H, W, C): sum of dy over the covering windows, divided by kh*kw.
template <class T, int V, class I>
__global__ void avgpool_bwd_kernel(const Pool2dGeom g, const T* __restrict__ dy, T* __restrict__ dx) {
  const I total = static_cast<I>(g.n * g.h * g.w * (g.c / V));
  const float div = static_cast<float>(g.kh * g.kw);
  for (I i = thread_index<I>(); i < total; i += thread_count<I>()) {
    const PixelChunk<I> e = decode_item<V>(i, g.h, g.w, g.c);
    const PoolCoverT<I> cov = pool2d_cover(g, e.a, e.b);
    const T* dyn = dy + e.n * g.p * g.q * g.c + e.c0;
    float s[V];
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = 0.0f;
    for (int64_t p = cov.p0; p < cov.p1; ++p) {
      for (int64_t q = cov.q0; q < cov.q1; ++q) {
        const Pack<T, V> d = pack_load<V>(dyn + (p * g.q + q) * g.c);
#pragma unroll
        for (int j = 0; j < V; ++j) s[j] += to_f32(d.v[j]);
      }
    }
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(s[j] / div);
    pack_store<V>(dx + i * V, out);
  }
}

// x (N, HW, C) -> y (N, C): one thread per (n, channel chunk) sums HW rows in order.
template <class T, int V>
__global__ void global_avg_fwd_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t hw,
                                      int64_t c) {
  const int64_t cv = c / V, total = n * cv;
  const float div = static_cast<float>(hw);
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const int64_t b = i / cv, c0 = (i % cv) * V;
    const T* xb = x + b * hw * c + c0;
    float s[V];
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = 0.0f;
    for (int64_t r = 0; r < hw; ++r) {
      const Pack<T, V> v = pack_load<V>(xb + r * c);
#pragma unroll
      for (int j = 0; j < V; ++j) s[j] += to_f32(v.v[j]);
    }
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(s[j] / div);
    pack_store<V>(y + i * V, out);
  }
}

// dy (N, C) -> dx (N, HW, C) = dy / HW.
template <class T, int V>
__global__ void global_avg_bwd_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t n, int64_t hw,
                                      int64_t c) {
  const int64_t cv = c / V, total = n * hw * cv;
  const float div = static_cast<float>(hw);
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const int64_t b = i / (hw * cv), c0 = (i % cv) * V;
    const Pack<T, V> d = pack_load<V>(dy + b * c + c0);
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_f32<T>(to_f32(d.v[j]) / div);
    pack_store<V>(dx + i * V, out);
  }
}

// Calls f(std::integral_constant<int, V>) with the widest channel vector that divides C and that all (non-null)
// pointers are aligned for: 16 bytes, else 2 elements, else scalar.
template <class T, class F>
Status with_channel_vec(int64_t c, const void* a, const void* b, const void* d, F&& f) {
  constexpr int V16 = kVec16<T>;
  if (c % V16 == 0 && gpu_aligned(16, a, b, d)) return f(std::integral_constant<int, V16>{});
  if (c % 2 == 0 && gpu_aligned(2 * sizeof(T), a, b, d)) return f(std::integral_constant<int, 2>{});
  return f(std::integral_constant<int, 1>{});
}

// Calls f(vector width, index type tag) for a pool launch over g: the channel vector as with_channel_vec, and
// int32_t when every flat element index of input and output stays below 2^30 (so that a grid-stride step past the
// end cannot overflow either), else int64_t.
template <class I>
struct IndexTag {
  using type = I;
};
template <class T, class F>
Status with_vec_and_index(const Pool2dGeom& g, const void* a, const void* b, const void* d, F&& f) {
  return with_channel_vec<T>(g.c, a, b, d, [&](auto vec) {
    const int64_t most = std::max(g.n * g.h * g.w * g.c, g.n * g.p * g.q * g.c);
    if (most < (int64_t{1} << 30)) return f(vec, IndexTag<int32_t>{});
    return f(vec, IndexTag<int64_t>{});
  });
}

// True when g is exactly what pool2d_geom_finish makes of its inputs (guards against stale or hand-made p, q).
bool geom_is_finished(const Pool2dGeom& g) {
  Pool2dGeom f = g;
  return pool2d_geom_finish(f) && f.p == g.p && f.q == g.q;
}

}  // namespace

Status maxpool2d_fwd_cuda(cudaStream_t s, const Pool2dGeom& g, const void* x, void* y, GpuDType t) {
  TRCTL_CUDA_ARG_CHECK(geom_is_finished(g), "maxpool2d_fwd_cuda: invalid or unfinished Pool2dGeom");
  TRCTL_CUDA_ARG_CHECK(x && y, "maxpool2d_fwd_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_vec_and_index<T>(g, x, y, nullptr, [&](auto vec, auto it) {
      constexpr int V = decltype(vec)::value;
      using I = typename decltype(it)::type;
      maxpool_fwd_kernel<T, V, I><<<elementwise_grid(g.n * g.p * g.q * (g.c / V)), kElementwiseBlock, 0, s>>>(
          g, static_cast<const T*>(x), static_cast<T*>(y));
      return TRCTL_CUDA_LAUNCH_STATUS("maxpool_fwd_kernel");
    });
  });
}

Status maxpool2d_bwd_cuda(cudaStream_t s, const Pool2dGeom& g, const void* dy, const void* x, void* dx, GpuDType t) {
  TRCTL_CUDA_ARG_CHECK(geom_is_finished(g), "maxpool2d_bwd_cuda: invalid or unfinished Pool2dGeom");
  TRCTL_CUDA_ARG_CHECK(dy && x && dx, "maxpool2d_bwd_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_vec_and_index<T>(g, dy, x, dx, [&](auto vec, auto it) {
      constexpr int V = decltype(vec)::value;
      using I = typename decltype(it)::type;
      maxpool_bwd_kernel<T, V, I><<<elementwise_grid(g.n * g.h * g.w * (g.c / V)), kElementwiseBlock, 0, s>>>(
          g, static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx));
      return TRCTL_CUDA_LAUNCH_STATUS("maxpool_bwd_kernel");
    });
  });
}

Status maxpool2d_fwd_idx_cuda(cudaStream_t s, const Pool2dGeom& g, const void* x, void* y, uint8_t* idx,
                              GpuDType t) {
  TRCTL_CUDA_ARG_CHECK(geom_is_finished(g), "maxpool2d_fwd_idx_cuda: invalid or unfinished Pool2dGeom");
  TRCTL_CUDA_ARG_CHECK(g.kh * g.kw <= 256, "maxpool2d_fwd_idx_cuda: window larger than 256 elements");
  TRCTL_CUDA_ARG_CHECK(x && y && idx, "maxpool2d_fwd_idx_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(gpu_aligned(8, idx), "maxpool2d_fwd_idx_cuda: idx not 8-byte aligned");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_vec_and_index<T>(g, x, y, nullptr, [&](auto vec, auto it) {
      constexpr int V = decltype(vec)::value;
      using I = typename decltype(it)::type;
      maxpool_fwd_idx_kernel<T, V, I><<<elementwise_grid(g.n * g.p * g.q * (g.c / V)), kElementwiseBlock, 0, s>>>(
          g, static_cast<const T*>(x), static_cast<T*>(y), idx);
      return TRCTL_CUDA_LAUNCH_STATUS("maxpool_fwd_idx_kernel");
    });
  });
}

Status maxpool2d_bwd_idx_cuda(cudaStream_t s, const Pool2dGeom& g, const void* dy, const uint8_t* idx, void* dx,
                              GpuDType t) {
  TRCTL_CUDA_ARG_CHECK(geom_is_finished(g), "maxpool2d_bwd_idx_cuda: invalid or unfinished Pool2dGeom");
  TRCTL_CUDA_ARG_CHECK(g.kh * g.kw <= 256, "maxpool2d_bwd_idx_cuda: window larger than 256 elements");
  TRCTL_CUDA_ARG_CHECK(dy && idx && dx, "maxpool2d_bwd_idx_cuda: null pointer");
  TRCTL_CUDA_ARG_CHECK(gpu_aligned(8, idx), "maxpool2d_bwd_idx_cuda: idx not 8-byte aligned");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_vec_and_index<T>(g, dy, dx, nullptr, [&](auto vec, auto it) {
      constexpr int V = decltype(vec)::value;
      using I = typename decltype(it)::type;
      if (pool2d_windows_tile(g)) {
        maxpool_bwd_idx_tiled_kernel<T, V, I><<<elementwise_grid(g.n * g.p * g.q * (g.c / V)), kElementwiseBlock, 0,
                                             s>>>(g, static_cast<const T*>(dy), idx, static_cast<T*>(dx));
        return TRCTL_CUDA_LAUNCH_STATUS("maxpool_bwd_idx_tiled_kernel");
      }
      if (pool2d_is_stem(g)) {
        const int64_t blocks = g.n * ((g.h + 1) / 2) * ((g.w + 1) / 2) * (g.c / V);
        maxpool_bwd_idx_stem_kernel<T, V, I><<<elementwise_grid(blocks), kElementwiseBlock, 0, s>>>(
            g, static_cast<const T*>(dy), idx, static_cast<T*>(dx));
        return TRCTL_CUDA_LAUNCH_STATUS("maxpool_bwd_idx_stem_kernel");
      }
      maxpool_bwd_idx_kernel<T, V, I><<<elementwise_grid(g.n * g.h * g.w * (g.c / V)), kElementwiseBlock, 0, s>>>(
          g, static_cast<const T*>(dy), idx, static_cast<T*>(dx));
      return TRCTL_CUDA_LAUNCH_STATUS("maxpool_bwd_idx_kernel");
    });
  });
}

Status avgpool2d_fwd_cuda(cudaStream_t s, const Pool2dGeom& g, const void* x, void* y, GpuDType t) {
  TRCTL_CUDA_ARG_CHECK(geom_is_finished(g), "avgpool2d_fwd_cuda: invalid or unfinished Pool2dGeom");
  TRCTL_CUDA_ARG_CHECK(x && y, "avgpool2d_fwd_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_vec_and_index<T>(g, x, y, nullptr, [&](auto vec, auto it) {
      constexpr int V = decltype(vec)::value;
      using I = typename decltype(it)::type;
      avgpool_fwd_kernel<T, V, I><<<elementwise_grid(g.n * g.p * g.q * (g.c / V)), kElementwiseBlock, 0, s>>>(
          g, static_cast<const T*>(x), static_cast<T*>(y));
      return TRCTL_CUDA_LAUNCH_STATUS("avgpool_fwd_kernel");
    });
  });
}

Status avgpool2d_bwd_cuda(cudaStream_t s, const Pool2dGeom& g, const void* dy, void* dx, GpuDType t) {
  TRCTL_CUDA_ARG_CHECK(geom_is_finished(g), "avgpool2d_bwd_cuda: invalid or unfinished Pool2dGeom");
  TRCTL_CUDA_ARG_CHECK(dy && dx, "avgpool2d_bwd_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_vec_and_index<T>(g, dy, dx, nullptr, [&](auto vec, auto it) {
      constexpr int V = decltype(vec)::value;
      using I = typename decltype(it)::type;
      avgpool_bwd_kernel<T, V, I><<<elementwise_grid(g.n * g.h * g.w * (g.c / V)), kElementwiseBlock, 0, s>>>(
          g, static_cast<const T*>(dy), static_cast<T*>(dx));
      return TRCTL_CUDA_LAUNCH_STATUS("avgpool_bwd_kernel");
    });
  });
}

Status global_avgpool_fwd_cuda(cudaStream_t s, const void* x, void* y, int64_t n, int64_t hw, int64_t c, GpuDType t) {
  TRCTL_CUDA_ARG_CHECK(n >= 0 && hw >= 1 && c >= 1, "global_avgpool_fwd_cuda: n < 0, hw < 1 or c < 1");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(x && y, "global_avgpool_fwd_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_channel_vec<T>(c, x, y, nullptr, [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      global_avg_fwd_kernel<T, V><<<elementwise_grid(n * (c / V)), kElementwiseBlock, 0, s>>>(
          static_cast<const T*>(x), static_cast<T*>(y), n, hw, c);
      return TRCTL_CUDA_LAUNCH_STATUS("global_avg_fwd_kernel");
    });
  });
}

Status global_avgpool_bwd_cuda(cudaStream_t s, const void* dy, void* dx, int64_t n, int64_t hw, int64_t c,
                               GpuDType t) {
  TRCTL_CUDA_ARG_CHECK(n >= 0 && hw >= 1 && c >= 1, "global_avgpool_bwd_cuda: n < 0, hw < 1 or c < 1");
  if (n == 0) return ok_status();
  TRCTL_CUDA_ARG_CHECK(dy && dx, "global_avgpool_bwd_cuda: null pointer");
  return dispatch_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_channel_vec<T>(c, dy, dx, nullptr, [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      global_avg_bwd_kernel<T, V><<<elementwise_grid(n * hw * (c / V)), kElementwiseBlock, 0, s>>>(
          static_cast<const T*>(dy), static_cast<T*>(dx), n, hw, c);
      return TRCTL_CUDA_LAUNCH_STATUS("global_avg_bwd_kernel");
    });
  });
}

}  // namespace trctl
