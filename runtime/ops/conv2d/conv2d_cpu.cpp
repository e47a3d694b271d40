// Conv2d on the CPU: per image and group, im2col + the blocked GEMM (runtime/cpu/gemm.h).
//
// Per image and group grp (Cg = C/G, Kg = K/G, RSC = R*S*Cg, PQ = P*Q):
//   cols (PQ, RSC)       = im2col(x_img), column (r, s, c) ordered like a KRSC filter row
//   fwd:   y_img[:, grp] (PQ, Kg)  = cols (PQ, RSC) * W_grp^T          W_grp (Kg, RSC) contiguous in w
//   dgrad: dcols (PQ, RSC)         = dy_img[:, grp] (PQ, Kg) * W_grp;   dx_img = col2im(dcols) (scatter-add)
//   wgrad: dW_grp (Kg, RSC)       += dy_img[:, grp]^T (Kg, PQ) * cols
// A pointwise conv (1x1, stride 1, no padding) needs no im2col: x_img itself is cols with leading dimension C.
//
// Determinism: each image is computed by exactly one thread, and the GEMM gives the same bits with or without a
// pool, so fwd/dgrad do not depend on the thread count. wgrad sums over images: images are split into blocks fixed
// by N and the geometry only (never by the pool size); each block accumulates its images in order into its own
// partial, and the partials are added in block order.
#include <algorithm>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

bool conv2d_geom_finish(Conv2dGeom& g, std::string* why) {
  auto fail = [&](const std::string& m) {
    if (why) *why = "conv2d " + conv2d_geom_str(g) + ": " + m;
    return false;
  };
  if (g.n < 1 || g.h < 1 || g.w < 1 || g.c < 1 || g.k < 1 || g.r < 1 || g.s < 1)
    return fail("sizes N, H, W, C, K, R, S must be positive");
  if (g.stride_h < 1 || g.stride_w < 1 || g.dil_h < 1 || g.dil_w < 1) return fail("stride and dilation must be >= 1");
  if (g.pad_h < 0 || g.pad_w < 0) return fail("padding must be >= 0");
  if (g.groups < 1 || g.c % g.groups != 0 || g.k % g.groups != 0)
    return fail("groups must be >= 1 and divide both C and K");
  // The numerator can be negative (kernel larger than the padded input): C++ division truncates toward zero, so
  // it must be rejected before dividing.
  const int64_t num_h = g.h + 2 * g.pad_h - g.dil_h * (g.r - 1) - 1;
  const int64_t num_w = g.w + 2 * g.pad_w - g.dil_w * (g.s - 1) - 1;
  if (num_h < 0 || num_w < 0) return fail("empty output (the dilated kernel is larger than the padded input)");
  g.p = num_h / g.stride_h + 1;
  g.q = num_w / g.stride_w + 1;
  return true;
}

std::string conv2d_geom_str(const Conv2dGeom& g) {
  auto x = [](int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); };
  return "N=" + std::to_string(g.n) + " " + x(g.h, g.w) + " C=" + std::to_string(g.c) + " -> K=" +
         std::to_string(g.k) + " " + x(g.r, g.s) + " stride " + x(g.stride_h, g.stride_w) + " pad " +
         x(g.pad_h, g.pad_w) + " dil " + x(g.dil_h, g.dil_w) + " groups " + std::to_string(g.groups) + " -> " +
         x(g.p, g.q);
}

namespace {

bool conv_is_pointwise(const Conv2dGeom& g) {
  return g.r == 1 && g.s == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

int64_t conv_rsc(const Conv2dGeom& g) { return g.r * g.s * (g.c / g.groups); }

// cols (PQ, RSC) of group grp from x_img (H, W, C); zero where the window reads padding.
template <class T>
void im2col(const Conv2dGeom& g, const T* x_img, int64_t grp, T* cols) {
  const int64_t cg = g.c / g.groups;
  T* out = cols;
  for (int64_t op = 0; op < g.p; ++op) {
    for (int64_t oq = 0; oq < g.q; ++oq) {
      for (int64_t r = 0; r < g.r; ++r) {
        const int64_t ih = op * g.stride_h - g.pad_h + r * g.dil_h;
        for (int64_t s = 0; s < g.s; ++s, out += cg) {
          const int64_t iw = oq * g.stride_w - g.pad_w + s * g.dil_w;
          if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) std::fill(out, out + cg, T(0));
          else std::copy_n(x_img + (ih * g.w + iw) * g.c + grp * cg, cg, out);
        }
      }
    }
  }
}

// dx_img (H, W, C) += col2im(dcols (PQ, RSC)) for group grp, in a fixed order.
template <class T>
void col2im_add(const Conv2dGeom& g, const T* dcols, int64_t grp, T* dx_img) {
  const int64_t cg = g.c / g.groups;
  const T* in = dcols;
  for (int64_t op = 0; op < g.p; ++op) {
    for (int64_t oq = 0; oq < g.q; ++oq) {
      for (int64_t r = 0; r < g.r; ++r) {
        const int64_t ih = op * g.stride_h - g.pad_h + r * g.dil_h;
        for (int64_t s = 0; s < g.s; ++s, in += cg) {
          const int64_t iw = oq * g.stride_w - g.pad_w + s * g.dil_w;
          if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
          T* dst = dx_img + (ih * g.w + iw) * g.c + grp * cg;
          for (int64_t c = 0; c < cg; ++c) dst[c] += in[c];
        }
      }
    }
  }
}

// The cols matrix of image img, group grp: x itself for pointwise convs, else im2col into `scratch`.
template <class T>
const T* conv_cols(const Conv2dGeom& g, const T* x, int64_t img, int64_t grp, T* scratch, int64_t* ld) {
  const T* x_img = x + img * g.h * g.w * g.c;
  if (conv_is_pointwise(g)) {
    *ld = g.c;
    return x_img + grp * (g.c / g.groups);
  }
  im2col(g, x_img, grp, scratch);
  *ld = conv_rsc(g);
  return scratch;
}

// Runs fn(item, gemm_pool, scratch) for item in [0, n), each item on one thread. With enough items per thread they
// are spread over the pool (the GEMM runs single-threaded); otherwise they run in order on the caller and the GEMM
// uses the pool. Both give the same bits, since the GEMM's result does not depend on its pool.
template <class T, class Fn>
void conv_for_each(int64_t n, int64_t scratch_elems, ThreadPool* pool, const Fn& fn) {
  if (pool && pool->size() > 1 && n >= pool->size()) {
    pool->parallel_for(n, 1, [&](int64_t b, int64_t e) {
      std::vector<T> scratch(static_cast<size_t>(scratch_elems));
      for (int64_t i = b; i < e; ++i) fn(i, static_cast<ThreadPool*>(nullptr), scratch.data());
    });
    return;
  }
  std::vector<T> scratch(static_cast<size_t>(scratch_elems));
  for (int64_t i = 0; i < n; ++i) fn(i, pool, scratch.data());
}

}  // namespace

template <class T>
void conv2d_fwd_cpu(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y, ThreadPool* pool) {
  const int64_t kg = g.k / g.groups, rsc = conv_rsc(g), pq = g.p * g.q;
  const int64_t scratch = conv_is_pointwise(g) ? 0 : pq * rsc;
  conv_for_each<T>(g.n, scratch, pool, [&](int64_t img, ThreadPool* gp, T* cols_buf) {
    T* y_img = y + img * pq * g.k;  // (PQ, K)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      int64_t ld = 0;
      const T* cols = conv_cols(g, x, img, grp, cols_buf, &ld);
      gemm(Trans::N, Trans::T, pq, kg, rsc, T(1), cols, ld, w + grp * kg * rsc, rsc, T(0), y_img + grp * kg, g.k,
           gp);
    }
    if (!bias) return;
    for (int64_t i = 0; i < pq; ++i)
      for (int64_t j = 0; j < g.k; ++j) y_img[i * g.k + j] += bias[j];
  });
}

template <class T>
void conv2d_grad_input_cpu(const Conv2dGeom& g, const T* dy, const T* w, T* dx, ThreadPool* pool) {
  const int64_t kg = g.k / g.groups, cg = g.c / g.groups, rsc = conv_rsc(g), pq = g.p * g.q;
  const bool pointwise = conv_is_pointwise(g);
  conv_for_each<T>(g.n, pointwise ? 0 : pq * rsc, pool, [&](int64_t img, ThreadPool* gp, T* dcols) {
    const T* dy_img = dy + img * pq * g.k;  // (PQ, K)
    T* dx_img = dx + img * g.h * g.w * g.c;  // (H, W, C)
    if (!pointwise) std::fill(dx_img, dx_img + g.h * g.w * g.c, T(0));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* w_grp = w + grp * kg * rsc;  // (Kg, RSC)
      if (pointwise) {  // dx_img[:, grp] (HW, Cg) = dy_img[:, grp] (HW, Kg) * W_grp (Kg, Cg), written in place
        gemm(Trans::N, Trans::N, pq, cg, kg, T(1), dy_img + grp * kg, g.k, w_grp, rsc, T(0), dx_img + grp * cg, g.c,
             gp);
        continue;
      }
      gemm(Trans::N, Trans::N, pq, rsc, kg, T(1), dy_img + grp * kg, g.k, w_grp, rsc, T(0), dcols, rsc, gp);
      col2im_add(g, dcols, grp, dx_img);
    }
  });
}

template <class T>
void conv2d_grad_weight_cpu(const Conv2dGeom& g, const T* dy, const T* x, T* dw, ThreadPool* pool) {
  const int64_t kg = g.k / g.groups, rsc = conv_rsc(g), pq = g.p * g.q, dw_elems = g.k * rsc;
  // Blocks of images, fixed by N and the filter size: up to 16 (enough to spread over a CPU's cores), fewer when
  // their partials would pass 64 MiB.
  const int64_t cap = std::max<int64_t>(1, (int64_t{64} << 20) / (dw_elems * static_cast<int64_t>(sizeof(T))));
  const int64_t blocks = std::min<int64_t>({g.n, 16, cap});
  std::vector<T> partials(static_cast<size_t>((blocks - 1) * dw_elems));  // block 0 accumulates into dw itself
  const int64_t scratch = conv_is_pointwise(g) ? 0 : pq * rsc;
  conv_for_each<T>(blocks, scratch, pool, [&](int64_t blk, ThreadPool* gp, T* cols_buf) {
    T* part = blk == 0 ? dw : partials.data() + (blk - 1) * dw_elems;  // (K, RSC)
    const int64_t i0 = blk * g.n / blocks, i1 = (blk + 1) * g.n / blocks;
    for (int64_t img = i0; img < i1; ++img) {
      const T* dy_img = dy + img * pq * g.k;  // (PQ, K)
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        int64_t ld = 0;
        const T* cols = conv_cols(g, x, img, grp, cols_buf, &ld);
        gemm(Trans::T, Trans::N, kg, rsc, pq, T(1), dy_img + grp * kg, g.k, cols, ld, img == i0 ? T(0) : T(1),
             part + grp * kg * rsc, rsc, gp);
      }
    }
  });
  for (int64_t b = 1; b < blocks; ++b) {
    const T* part = partials.data() + (b - 1) * dw_elems;
    for (int64_t i = 0; i < dw_elems; ++i) dw[i] += part[i];
  }
}

#define TRCTL_INSTANTIATE_CONV2D(T)                                                                        \
  template void conv2d_fwd_cpu<T>(const Conv2dGeom&, const T*, const T*, const T*, T*, ThreadPool*);       \
  template void conv2d_grad_input_cpu<T>(const Conv2dGeom&, const T*, const T*, T*, ThreadPool*);          \
  template void conv2d_grad_weight_cpu<T>(const Conv2dGeom&, const T*, const T*, T*, ThreadPool*);
TRCTL_INSTANTIATE_CONV2D(float)
TRCTL_INSTANTIATE_CONV2D(double)
#undef TRCTL_INSTANTIATE_CONV2D

}  // namespace trctl
