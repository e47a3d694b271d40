// BCE with logits, MSE and weighted cross-entropy on the CPU (per row in double; see loss.h).
#include <algorithm>
#include <cmath>

#include "runtime/ops/loss/loss.h"

namespace trctl {
namespace {

bool label_ok(const LossDesc& d, int32_t y) {
  const int64_t hi = d.fn == LossFn::BceWithLogits && d.width == 1 ? 2 : d.width;
  return y >= 0 && y < hi;
}

// Target of column c of a row with label y (bce and mse).
double target(const LossDesc& d, int32_t y, int64_t c) {
  if (d.width == 1 && d.fn == LossFn::BceWithLogits) return static_cast<double>(y);
  return c == y ? 1.0 : 0.0;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Weights of the target classes over the usable rows (weighted cross-entropy's denominator).
double target_weight_sum(const LossDesc& d, const int32_t* labels) {
  double s = 0;
  for (int64_t r = 0; r < d.rows; ++r)
    if (label_ok(d, labels[r])) s += d.class_weights[labels[r]];
  return s;
}

// log-sum-exp of one row (max subtracted).
template <class T>
double row_lse(const T* row, int64_t c) {
  double mx = row[0];
  for (int64_t j = 1; j < c; ++j) mx = std::max(mx, static_cast<double>(row[j]));
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(row[j]) - mx);
  return mx + std::log(s);
}

// A_n of the weighted cross-entropy (loss.h).
template <class T>
double wce_row(const LossDesc& d, const T* row, int32_t y) {
  const double lse = row_lse(row, d.width), eps = d.label_smoothing;
  double smooth = 0;
  for (int64_t j = 0; j < d.width; ++j) smooth += d.class_weights[j] * (lse - static_cast<double>(row[j]));
  return (1.0 - eps) * d.class_weights[y] * (lse - static_cast<double>(row[y])) +
         eps / static_cast<double>(d.width) * smooth;
}

}  // namespace

template <class T>
double loss_fwd_cpu(const LossDesc& d, const T* logits, const int32_t* labels, int64_t* bad_labels) {
  double total = 0;
  for (int64_t r = 0; r < d.rows; ++r) {
    const T* row = logits + r * d.width;
    const int32_t y = labels[r];
    if (!label_ok(d, y)) {
      if (bad_labels) ++*bad_labels;
      continue;
    }
    if (d.fn == LossFn::WeightedCrossEntropy) {
      total += wce_row(d, row, y);
      continue;
    }
    for (int64_t c = 0; c < d.width; ++c) {
      const double x = row[c], t = target(d, y, c);
      total += d.fn == LossFn::Mse ? (x - t) * (x - t)
                                   : std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::abs(x)));
    }
  }
  const double denom = d.fn == LossFn::WeightedCrossEntropy ? target_weight_sum(d, labels)
                                                            : static_cast<double>(d.rows * d.width);
  return denom > 0 ? total / denom : 0.0;
}

template <class T>
void loss_grad_cpu(const LossDesc& d, const T* logits, const int32_t* labels, T* dlogits, double scale) {
  const bool wce = d.fn == LossFn::WeightedCrossEntropy;
  const double denom = wce ? target_weight_sum(d, labels) : static_cast<double>(d.rows * d.width);
  const double k = denom > 0 ? scale / denom : 0.0;
  double sum_w = 0;
  if (wce)
    for (int64_t j = 0; j < d.width; ++j) sum_w += d.class_weights[j];
  const double eps = d.label_smoothing, epc = eps / static_cast<double>(d.width);
  for (int64_t r = 0; r < d.rows; ++r) {
    const T* row = logits + r * d.width;
    T* g = dlogits + r * d.width;
    const int32_t y = labels[r];
    if (!label_ok(d, y)) {
      std::fill(g, g + d.width, T(0));
      continue;
    }
    if (wce) {
      const double lse = row_lse(row, d.width), wy = d.class_weights[y];
      const double pcoef = (1.0 - eps) * wy + epc * sum_w;
      for (int64_t j = 0; j < d.width; ++j) {
        const double p = std::exp(static_cast<double>(row[j]) - lse);
        g[j] = static_cast<T>((p * pcoef - (j == y ? (1.0 - eps) * wy : 0.0) - epc * d.class_weights[j]) * k);
      }
      continue;
    }
    for (int64_t c = 0; c < d.width; ++c) {
      const double x = row[c], t = target(d, y, c);
      g[c] = static_cast<T>((d.fn == LossFn::Mse ? 2.0 * (x - t) : sigmoid(x) - t) * k);
    }
  }
}

template <class T>
int64_t binary_accuracy_cpu(const T* logits, const int32_t* labels, int64_t n) {
  int64_t correct = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int32_t y = labels[r];
    correct += (y == 0 || y == 1) && (logits[r] > T(0)) == (y == 1);
  }
  return correct;
}

template double loss_fwd_cpu<float>(const LossDesc&, const float*, const int32_t*, int64_t*);
template double loss_fwd_cpu<double>(const LossDesc&, const double*, const int32_t*, int64_t*);
template void loss_grad_cpu<float>(const LossDesc&, const float*, const int32_t*, float*, double);
template void loss_grad_cpu<double>(const LossDesc&, const double*, const int32_t*, double*, double);
template int64_t binary_accuracy_cpu<float>(const float*, const int32_t*, int64_t);
template int64_t binary_accuracy_cpu<double>(const double*, const int32_t*, int64_t);

}  // namespace trctl
