// Softmax cross-entropy kernels: (1) one warp per row computes the row loss, the correct/bad flags and the gradient
// row; (2) one block reduces the per-row values in a fixed order and updates the accumulators.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_utils.cuh"
#include "runtime/ops/softmax_ce/softmax_ce_cuda.h"

namespace trctl {

namespace {

constexpr int kRowsPerBlock = 8;  // 8 warps of 32 threads
constexpr int kFinishThreads = 512;
constexpr int32_t kFlagCorrect = 1, kFlagBad = 2, kFlagCorrect5 = 4;

// (value, index) argmax with "first maximum wins".
__device__ __forceinline__ void argmax_merge(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

template <class TL, class TG>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    softmax_ce_rows_kernel(const TL* __restrict__ logits, const int32_t* __restrict__ labels, int64_t rows,
                           int64_t classes, float eps, const float* loss_scale, float grad_scale,
                           TG* __restrict__ dlogits,
                           float* __restrict__ row_loss, int32_t* __restrict__ row_flags) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps leave together
  const TL* x = logits + row * classes;
  const int C = static_cast<int>(classes);

  // Pass 1: max and first argmax. Each lane scans c = lane, lane+32, ... in increasing order.
  float mx = -INFINITY;
  int amax = C;  // sentinel above every index
  for (int c = lane; c < C; c += 32) argmax_merge(mx, amax, to_f32(x[c]), c);
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, mx, o);
    const int oi = __shfl_xor_sync(0xffffffffu, amax, o);
    argmax_merge(mx, amax, ov, oi);
  }
  // Pass 2: S = sum exp(x - max) and D = sum (max - x); both sums have non-negative terms (no cancellation).
  float s = 0.0f, d = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float t = to_f32(x[c]) - mx;
    s += expf(t);
    d -= t;
  }
  s = warp_sum(s);
  d = warp_sum(d);
  const float log_s = logf(s);
  const int32_t y = labels[row];
  const bool bad = y < 0 || y >= C;
  // -logp[c] = (max - x_c) + log S; mean_c(-logp[c]) = D / C + log S.
  float loss = 0.0f;
  if (!bad) {
    const float nll = (mx - to_f32(x[y])) + log_s;
    const float smooth = d / static_cast<float>(C) + log_s;
    loss = (1.0f - eps) * nll + eps * smooth;
  }
  // Top-5: logits strictly greater than the label's, counted per lane and summed over the warp (integers: exact).
  int greater = 0;
  if (!bad) {
    const float xy = to_f32(x[y]);
    for (int c = lane; c < C; c += 32) greater += to_f32(x[c]) > xy ? 1 : 0;
  }
  for (int o = 16; o > 0; o >>= 1) greater += __shfl_xor_sync(0xffffffffu, greater, o);
  const bool top5 = !bad && greater < (C < 5 ? C : 5);
  if (lane == 0) {
    row_loss[row] = loss;
    row_flags[row] = bad ? kFlagBad : ((amax == y ? kFlagCorrect : 0) | (top5 ? kFlagCorrect5 : 0));
  }
  if (dlogits == nullptr) return;
  // Pass 3: gradient row.
  TG* g = dlogits + row * classes;
  const float gscale = ((loss_scale ? *loss_scale : 1.0f) * grad_scale) / static_cast<float>(rows);
  const float inv_s = 1.0f / s;
  const float off = eps / static_cast<float>(C);
  for (int c = lane; c < C; c += 32) {
    float v = 0.0f;
    if (!bad) {
      const float target = (c == y ? 1.0f - eps : 0.0f) + off;
      v = (expf(to_f32(x[c]) - mx) * inv_s - target) * gscale;
    }
    g[c] = from_f32<TG>(v);
  }
}

// One block: thread t sums rows t, t + T, ... in order (double), then a shared-memory tree in fixed order.
__global__ void __launch_bounds__(kFinishThreads)
    softmax_ce_finish_kernel(const float* __restrict__ row_loss, const int32_t* __restrict__ row_flags, int64_t rows,
                             float* loss, double* loss_sum, int32_t* correct, int32_t* correct5,
                             int32_t* bad_labels) {
  __shared__ double s_loss[kFinishThreads];
  __shared__ int s_correct[kFinishThreads];
  __shared__ int s_correct5[kFinishThreads];
  __shared__ int s_bad[kFinishThreads];
  double l = 0.0;
  int nc = 0, nc5 = 0, nb = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kFinishThreads) {
    l += static_cast<double>(row_loss[r]);
    const int32_t f = row_flags[r];
    nc += (f & kFlagCorrect) ? 1 : 0;
    nc5 += (f & kFlagCorrect5) ? 1 : 0;
    nb += (f & kFlagBad) ? 1 : 0;
  }
  s_loss[threadIdx.x] = l;
  s_correct[threadIdx.x] = nc;
  s_correct5[threadIdx.x] = nc5;
  s_bad[threadIdx.x] = nb;
  __syncthreads();
  for (int half = kFinishThreads / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) {
      s_loss[threadIdx.x] += s_loss[threadIdx.x + half];
      s_correct[threadIdx.x] += s_correct[threadIdx.x + half];
      s_correct5[threadIdx.x] += s_correct5[threadIdx.x + half];
      s_bad[threadIdx.x] += s_bad[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double total = s_loss[0];
    *loss = static_cast<float>(total / static_cast<double>(rows));
    if (loss_sum) *loss_sum += total;
    if (correct) *correct += s_correct[0];
    if (correct5) *correct5 += s_correct5[0];
    if (bad_labels) *bad_labels += s_bad[0];
  }
}

template <class TL, class TG>
void launch_rows(cudaStream_t stream, const SoftmaxCeArgs& a, float* row_loss, int32_t* row_flags) {
  const unsigned grid = static_cast<unsigned>((a.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  softmax_ce_rows_kernel<TL, TG><<<grid, kRowsPerBlock * 32, 0, stream>>>(
      static_cast<const TL*>(a.logits), a.labels, a.rows, a.classes, a.label_smoothing, a.loss_scale, a.grad_scale,
      static_cast<TG*>(a.dlogits), row_loss, row_flags);
}

}  // namespace

size_t softmax_ce_workspace_bytes(int64_t rows) {
  const size_t floats = (static_cast<size_t>(rows) * sizeof(float) + 255) / 256 * 256;
  return floats + static_cast<size_t>(rows) * sizeof(int32_t);
}

Status softmax_ce_cuda(cudaStream_t stream, const SoftmaxCeArgs& a) {
  TRCTL_CUDA_ARG_CHECK(a.rows >= 1 && a.classes >= 1, "softmax_ce_cuda: rows and classes must be >= 1");
  TRCTL_CUDA_ARG_CHECK(a.classes < (int64_t{1} << 31), "softmax_ce_cuda: classes must fit in int32");
  TRCTL_CUDA_ARG_CHECK(a.rows <= int64_t{kRowsPerBlock} * 0x7fffffff, "softmax_ce_cuda: too many rows");
  TRCTL_CUDA_ARG_CHECK(a.logits && a.labels && a.loss, "softmax_ce_cuda: null logits, labels or loss");
  TRCTL_CUDA_ARG_CHECK(a.workspace && a.workspace_bytes >= softmax_ce_workspace_bytes(a.rows),
                       "softmax_ce_cuda: workspace missing or smaller than softmax_ce_workspace_bytes(rows)");
  TRCTL_CUDA_ARG_CHECK(a.label_smoothing >= 0.0f && a.label_smoothing <= 1.0f,
                       "softmax_ce_cuda: label_smoothing outside [0, 1]");
  float* row_loss = static_cast<float*>(a.workspace);
  int32_t* row_flags = reinterpret_cast<int32_t*>(static_cast<char*>(a.workspace) +
                                                  (static_cast<size_t>(a.rows) * sizeof(float) + 255) / 256 * 256);
  Status st = dispatch_dtype(a.logits_type, [&](auto tl) {
    using TL = typename decltype(tl)::type;
    return dispatch_dtype(a.dlogits_type, [&](auto tg) {
      using TG = typename decltype(tg)::type;
      launch_rows<TL, TG>(stream, a, row_loss, row_flags);
      return TRCTL_CUDA_LAUNCH_STATUS("softmax_ce_rows_kernel");
    });
  });
  if (!st) return st;
  softmax_ce_finish_kernel<<<1, kFinishThreads, 0, stream>>>(row_loss, row_flags, a.rows, a.loss, a.loss_sum,
                                                              a.correct, a.correct5, a.bad_labels);
  return TRCTL_CUDA_LAUNCH_STATUS("softmax_ce_finish_kernel");
}

}  // namespace trctl
