// Softmax cross-entropy, gradient and top-1 accuracy on the CPU (per row in double).
#include <algorithm>
#include <cmath>

#include "runtime/ops/softmax_ce/softmax_ce.h"

namespace trctl {
namespace {

// log-sum-exp of one row, with max subtraction.
template <class T>
double row_lse(const T* row, int64_t c, double* max_out) {
  double mx = row[0];
  for (int64_t j = 1; j < c; ++j) mx = std::max(mx, static_cast<double>(row[j]));
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(row[j]) - mx);
  *max_out = mx;
  return mx + std::log(s);
}

}  // namespace

template <class T>
double softmax_ce_fwd_cpu(const T* logits, const int32_t* labels, int64_t n, int64_t c, double eps,
                          int64_t* bad_labels) {
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    const T* row = logits + r * c;
    const int32_t y = labels[r];
    if (y < 0 || y >= c) {
      if (bad_labels) ++*bad_labels;
      continue;
    }
    double mx;
    const double lse = row_lse(row, c, &mx);
    double sum_nll = 0;
    for (int64_t j = 0; j < c; ++j) sum_nll += lse - static_cast<double>(row[j]);
    total += (1.0 - eps) * (lse - static_cast<double>(row[y])) + eps * sum_nll / static_cast<double>(c);
  }
  return n > 0 ? total / static_cast<double>(n) : 0.0;
}

template <class T>
void softmax_ce_grad_cpu(const T* logits, const int32_t* labels, T* dlogits, int64_t n, int64_t c, double eps,
                         double scale) {
  const double k = scale / static_cast<double>(n);
  for (int64_t r = 0; r < n; ++r) {
    const T* row = logits + r * c;
    T* d = dlogits + r * c;
    const int32_t y = labels[r];
    if (y < 0 || y >= c) {
      for (int64_t j = 0; j < c; ++j) d[j] = T(0);
      continue;
    }
    double mx;
    const double lse = row_lse(row, c, &mx);
    for (int64_t j = 0; j < c; ++j) {
      const double target = (j == y ? 1.0 - eps : 0.0) + eps / static_cast<double>(c);
      d[j] = static_cast<T>((std::exp(static_cast<double>(row[j]) - lse) - target) * k);
    }
  }
}

template <class T>
int64_t accuracy_top1_cpu(const T* logits, const int32_t* labels, int64_t n, int64_t c) {
  int64_t correct = 0;
  for (int64_t r = 0; r < n; ++r) {
    const T* row = logits + r * c;
    int64_t best = 0;
    for (int64_t j = 1; j < c; ++j)
      if (row[j] > row[best]) best = j;
    correct += best == labels[r];
  }
  return correct;
}

template <class T>
int64_t accuracy_topk_cpu(const T* logits, const int32_t* labels, int64_t n, int64_t c, int64_t k) {
  const int64_t kk = std::min(k, c);
  int64_t correct = 0;
  for (int64_t r = 0; r < n; ++r) {
    const T* row = logits + r * c;
    const int32_t y = labels[r];
    if (y < 0 || y >= c) continue;
    int64_t greater = 0;
    for (int64_t j = 0; j < c; ++j) greater += row[j] > row[y];
    correct += greater < kk;
  }
  return correct;
}

template double softmax_ce_fwd_cpu<float>(const float*, const int32_t*, int64_t, int64_t, double, int64_t*);
template double softmax_ce_fwd_cpu<double>(const double*, const int32_t*, int64_t, int64_t, double, int64_t*);
template void softmax_ce_grad_cpu<float>(const float*, const int32_t*, float*, int64_t, int64_t, double, double);
template void softmax_ce_grad_cpu<double>(const double*, const int32_t*, double*, int64_t, int64_t, double,
                                          double);
template int64_t accuracy_top1_cpu<float>(const float*, const int32_t*, int64_t, int64_t);
template int64_t accuracy_top1_cpu<double>(const double*, const int32_t*, int64_t, int64_t);
template int64_t accuracy_topk_cpu<float>(const float*, const int32_t*, int64_t, int64_t, int64_t);
template int64_t accuracy_topk_cpu<double>(const double*, const int32_t*, int64_t, int64_t, int64_t);

}  // namespace trctl
