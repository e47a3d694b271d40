// Loss kernels (BCE with logits, MSE, weighted cross-entropy): target-weight sum, per-row warps, fixed-order finish.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/loss/loss_cuda.h"

namespace trctl {

namespace {

constexpr int kRowsPerBlock = 8;  // 8 warps of 32 threads
constexpr int kReduceThreads = 512;
constexpr int32_t kFlagCorrect = 1, kFlagBad = 2, kFlagCorrect5 = 4;

__device__ __forceinline__ int warp_sum_int(int x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ bool label_usable(LossFn fn, int32_t y, int W) {
  const int hi = fn == LossFn::BceWithLogits && W == 1 ? 2 : W;
  return y >= 0 && y < hi;
}

// Sum in double of s[0..kReduceThreads) in a fixed tree order; the result is in s[0] for every thread after it.
__device__ void block_tree_sum(double* s) {
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) s[threadIdx.x] += s[threadIdx.x + half];
    __syncthreads();
  }
}

// Wt = sum of the target classes' weights over the usable rows (weighted cross-entropy's denominator).
__global__ void __launch_bounds__(kReduceThreads)
    loss_target_weight_kernel(const int32_t* __restrict__ labels, int64_t rows, int W, const float* __restrict__ w,
                              double* denom) {
  __shared__ double s[kReduceThreads];
  double acc = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kReduceThreads) {
    const int32_t y = labels[r];
    if (y >= 0 && y < W) acc += static_cast<double>(w[y]);
  }
  s[threadIdx.x] = acc;
  block_tree_sum(s);
  if (threadIdx.x == 0) *denom = s[0];
}

// One warp per row. denom_dev (weighted CE) or denom_const (the others) is the mean's denominator.
template <LossFn F, class TL, class TG>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    loss_rows_kernel(const TL* __restrict__ logits, const int32_t* __restrict__ labels, int64_t rows, int64_t width,
                     float eps, const float* __restrict__ cw, const float* loss_scale, float grad_scale,
                     const double* denom_dev,
                     double denom_const, TG* __restrict__ dlogits, float* __restrict__ row_loss,
                     int32_t* __restrict__ row_flags) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps leave together
  const TL* x = logits + row * width;
  const int W = static_cast<int>(width);
  const int32_t y = labels[row];
  const bool bad = !label_usable(F, y, W);
  const double denom = denom_dev ? *denom_dev : denom_const;
  const float gscale =
      denom > 0.0 ? static_cast<float>(((loss_scale ? *loss_scale : 1.0f) * grad_scale) / denom) : 0.0f;

  // Accuracy: logits strictly greater than the label's, and equal ones before it (first maximum wins).
  int greater = 0, tied_before = 0;
  if (!bad && W > 1) {
    const float xy = to_f32(x[y]);
    for (int c = lane; c < W; c += 32) {
      const float v = to_f32(x[c]);
      greater += v > xy ? 1 : 0;
      tied_before += (v == xy && c < y) ? 1 : 0;
    }
  }
  greater = warp_sum_int(greater);
  tied_before = warp_sum_int(tied_before);
  bool top1 = false, top5 = false;
  if (!bad) {
    if (W == 1) {
      top1 = (to_f32(x[0]) > 0.0f) == (y == 1);
      top5 = true;  // a 2-class head: both classes are in the top 5
    } else {
      top1 = greater == 0 && tied_before == 0;
      top5 = greater < (W < 5 ? W : 5);
    }
  }

  float num = 0.0f;  // the row's part of the loss numerator
  if (F == LossFn::WeightedCrossEntropy) {
    float mx = -INFINITY;
    for (int c = lane; c < W; c += 32) mx = fmaxf(mx, to_f32(x[c]));
    mx = warp_max(mx);
    // S = sum exp(x - max), D = sum w_c (max - x_c) (non-negative terms), Sw = sum w_c.
    float s = 0.0f, d = 0.0f, sw = 0.0f;
    for (int c = lane; c < W; c += 32) {
      const float t = to_f32(x[c]) - mx;
      s += expf(t);
      d -= cw[c] * t;
      sw += cw[c];
    }
    s = warp_sum(s);
    d = warp_sum(d);
    sw = warp_sum(sw);
    const float log_s = logf(s);
    const float epc = eps / static_cast<float>(W);
    if (!bad) {
      const float wy = cw[y];
      num = (1.0f - eps) * wy * ((mx - to_f32(x[y])) + log_s) + epc * (d + sw * log_s);
    }
    if (dlogits != nullptr) {
      TG* g = dlogits + row * width;
      const float inv_s = 1.0f / s;
      const float wy = bad ? 0.0f : cw[y];
      const float pcoef = (1.0f - eps) * wy + epc * sw;
      for (int c = lane; c < W; c += 32) {
        float v = 0.0f;
        if (!bad) {
          const float p = expf(to_f32(x[c]) - mx) * inv_s;
          v = (p * pcoef - (c == y ? (1.0f - eps) * wy : 0.0f) - epc * cw[c]) * gscale;
        }
        g[c] = from_f32<TG>(v);
      }
    }
  } else {
    TG* g = dlogits ? dlogits + row * width : nullptr;
    for (int c = lane; c < W; c += 32) {
      const float v = to_f32(x[c]);
      const float t = W == 1 ? static_cast<float>(y) : (c == y ? 1.0f : 0.0f);
      float l, dl;
      if (F == LossFn::Mse) {
        l = (v - t) * (v - t);
        dl = 2.0f * (v - t);
      } else {
        l = fmaxf(v, 0.0f) - v * t + log1pf(expf(-fabsf(v)));
        dl = 1.0f / (1.0f + expf(-v)) - t;
      }
      if (!bad) num += l;
      if (g) g[c] = from_f32<TG>(bad ? 0.0f : dl * gscale);
    }
    num = warp_sum(num);
  }
  if (lane == 0) {
    row_loss[row] = num;
    row_flags[row] = bad ? kFlagBad : ((top1 ? kFlagCorrect : 0) | (top5 ? kFlagCorrect5 : 0));
  }
}

// One block: thread t sums rows t, t + T, ... in order (double), then a shared-memory tree in fixed order.
__global__ void __launch_bounds__(kReduceThreads)
    loss_finish_kernel(const float* __restrict__ row_loss, const int32_t* __restrict__ row_flags, int64_t rows,
                       const double* denom_dev, double denom_const, float* loss, double* loss_sum, int32_t* correct,
                       int32_t* correct5, int32_t* bad_labels) {
  __shared__ double s_loss[kReduceThreads];
  __shared__ double s_count[3][kReduceThreads];  // correct, correct5, bad (exact in double)
  double l = 0.0, nc = 0.0, nc5 = 0.0, nb = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kReduceThreads) {
    l += static_cast<double>(row_loss[r]);
    const int32_t f = row_flags[r];
    nc += (f & kFlagCorrect) ? 1.0 : 0.0;
    nc5 += (f & kFlagCorrect5) ? 1.0 : 0.0;
    nb += (f & kFlagBad) ? 1.0 : 0.0;
  }
  s_loss[threadIdx.x] = l;
  s_count[0][threadIdx.x] = nc;
  s_count[1][threadIdx.x] = nc5;
  s_count[2][threadIdx.x] = nb;
  block_tree_sum(s_loss);
  for (int k = 0; k < 3; ++k) block_tree_sum(s_count[k]);
  if (threadIdx.x == 0) {
    const double denom = denom_dev ? *denom_dev : denom_const;
    const double mean = denom > 0.0 ? s_loss[0] / denom : 0.0;
    *loss = static_cast<float>(mean);
    if (loss_sum) *loss_sum += mean * static_cast<double>(rows);
    if (correct) *correct += static_cast<int32_t>(s_count[0][0]);
    if (correct5) *correct5 += static_cast<int32_t>(s_count[1][0]);
    if (bad_labels) *bad_labels += static_cast<int32_t>(s_count[2][0]);
  }
}

template <class F>
Status dispatch_loss(LossFn fn, F&& f) {
  switch (fn) {
    case LossFn::BceWithLogits: return f(std::integral_constant<LossFn, LossFn::BceWithLogits>{});
    case LossFn::Mse: return f(std::integral_constant<LossFn, LossFn::Mse>{});
    case LossFn::WeightedCrossEntropy: return f(std::integral_constant<LossFn, LossFn::WeightedCrossEntropy>{});
  }
  return Error{ErrCode::Invalid, "loss_cuda", "unknown loss function " + std::to_string(static_cast<int>(fn))};
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

size_t loss_cuda_workspace_bytes(int64_t rows) {
  const size_t r = static_cast<size_t>(rows);
  return align256(r * sizeof(float)) + align256(r * sizeof(int32_t)) + sizeof(double);
}

Status loss_cuda(cudaStream_t stream, const LossCudaArgs& a) {
  TRCTL_CUDA_ARG_CHECK(a.rows >= 1 && a.width >= 1, "loss_cuda: rows and width must be >= 1");
  TRCTL_CUDA_ARG_CHECK(a.width < (int64_t{1} << 31), "loss_cuda: width must fit in int32");
  TRCTL_CUDA_ARG_CHECK(a.rows <= int64_t{kRowsPerBlock} * 0x7fffffff, "loss_cuda: too many rows");
  TRCTL_CUDA_ARG_CHECK(a.logits && a.labels && a.loss, "loss_cuda: null logits, labels or loss");
  TRCTL_CUDA_ARG_CHECK(a.workspace && a.workspace_bytes >= loss_cuda_workspace_bytes(a.rows),
                       "loss_cuda: workspace missing or smaller than loss_cuda_workspace_bytes(rows)");
  const bool wce = a.fn == LossFn::WeightedCrossEntropy;
  TRCTL_CUDA_ARG_CHECK(!wce || a.class_weights, "loss_cuda: weighted cross-entropy without class weights");
  TRCTL_CUDA_ARG_CHECK(a.label_smoothing >= 0.0f && a.label_smoothing <= 1.0f,
                       "loss_cuda: label_smoothing outside [0, 1]");
  char* ws = static_cast<char*>(a.workspace);
  const size_t r = static_cast<size_t>(a.rows);
  float* row_loss = reinterpret_cast<float*>(ws);
  int32_t* row_flags = reinterpret_cast<int32_t*>(ws + align256(r * sizeof(float)));
  double* denom_dev = wce ? reinterpret_cast<double*>(ws + align256(r * sizeof(float)) + align256(r * sizeof(int32_t)))
                          : nullptr;
  const double denom_const = static_cast<double>(a.rows) * static_cast<double>(a.width);
  if (wce) {
    loss_target_weight_kernel<<<1, kReduceThreads, 0, stream>>>(a.labels, a.rows, static_cast<int>(a.width),
                                                                a.class_weights, denom_dev);
    Status st = TRCTL_CUDA_LAUNCH_STATUS("loss_target_weight_kernel");
    if (!st.ok()) return st;
  }
  const unsigned grid = static_cast<unsigned>((a.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  Status st = dispatch_loss(a.fn, [&](auto ftag) {
    constexpr LossFn F = decltype(ftag)::value;
    return dispatch_dtype(a.logits_type, [&](auto tl) {
      using TL = typename decltype(tl)::type;
      return dispatch_dtype(a.dlogits_type, [&](auto tg) {
        using TG = typename decltype(tg)::type;
        loss_rows_kernel<F, TL, TG><<<grid, kRowsPerBlock * 32, 0, stream>>>(
            static_cast<const TL*>(a.logits), a.labels, a.rows, a.width, a.label_smoothing, a.class_weights,
            a.loss_scale, a.grad_scale, denom_dev, denom_const, static_cast<TG*>(a.dlogits), row_loss, row_flags);
        return TRCTL_CUDA_LAUNCH_STATUS("loss_rows_kernel");
      });
    });
  });
  if (!st.ok()) return st;
  loss_finish_kernel<<<1, kReduceThreads, 0, stream>>>(row_loss, row_flags, a.rows, denom_dev, denom_const, a.loss,
                                                        a.loss_sum, a.correct, a.correct5, a.bad_labels);
  return TRCTL_CUDA_LAUNCH_STATUS("loss_finish_kernel");
}

}  // namespace trctl
