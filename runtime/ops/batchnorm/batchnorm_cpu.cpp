// Batch norm CPU reference. Work is split over channel ranges only and every per-channel sum runs over rows
// 0..rows-1 in order in double, so the results are bitwise independent of the thread count.
#include <cmath>
#include <functional>
#include <vector>

#include "runtime/ops/batchnorm/batchnorm.h"

namespace trctl {

namespace {

// Runs fn(c0, c1) over channel ranges; 16 channels at least per task so that small c stays on one thread.
void for_channels(int64_t c, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool) pool->parallel_for(c, 16, fn);
  else fn(0, c);
}

// mean (c1-c0) and biased variance of channels [c0, c1) of x (rows,c); two passes (no cancellation).
template <class T>
void channel_moments(const T* x, int64_t rows, int64_t c, int64_t c0, int64_t c1, std::vector<double>& mean,
                     std::vector<double>& var) {
  const int64_t w = c1 - c0;
  mean.assign(w, 0.0);
  var.assign(w, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < w; ++j) mean[j] += static_cast<double>(x[r * c + c0 + j]);
  for (int64_t j = 0; j < w; ++j) mean[j] /= static_cast<double>(rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < w; ++j) {
      const double d = static_cast<double>(x[r * c + c0 + j]) - mean[j];
      var[j] += d * d;
    }
  for (int64_t j = 0; j < w; ++j) var[j] /= static_cast<double>(rows);
}

// y[r][j] = x[r][j] * scale[j] + shift[j] for channels [c0, c1).
template <class T>
void apply_affine(const T* x, T* y, int64_t rows, int64_t c, int64_t c0, const std::vector<double>& scale,
                  const std::vector<double>& shift) {
  const int64_t w = static_cast<int64_t>(scale.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < w; ++j) {
      const int64_t i = r * c + c0 + j;
      y[i] = static_cast<T>(static_cast<double>(x[i]) * scale[j] + shift[j]);
    }
}

}  // namespace

template <class T>
void batchnorm_fwd_train_cpu(const T* x, const T* gamma, const T* beta, T* y, T* save_mean, T* save_invstd,
                             T* running_mean, T* running_var, int64_t rows, int64_t c, double eps, double momentum,
                             ThreadPool* pool, const T* prebias) {
  for_channels(c, pool, [&](int64_t c0, int64_t c1) {
    std::vector<double> mean, var;
    channel_moments(x, rows, c, c0, c1, mean, var);
    std::vector<double> scale(c1 - c0), shift(c1 - c0);
    for (int64_t j = 0; j < c1 - c0; ++j) {
      const int64_t ch = c0 + j;
      const double invstd = 1.0 / std::sqrt(var[j] + eps);
      save_mean[ch] = static_cast<T>(mean[j]);
      save_invstd[ch] = static_cast<T>(invstd);
      if (running_mean) {  // the mean of x + b
        const double m = mean[j] + (prebias ? static_cast<double>(prebias[ch]) : 0.0);
        running_mean[ch] = static_cast<T>((1.0 - momentum) * running_mean[ch] + momentum * m);
      }
      if (running_var) {
        const double unbiased = var[j] * static_cast<double>(rows) / static_cast<double>(rows - 1);
        running_var[ch] = static_cast<T>((1.0 - momentum) * running_var[ch] + momentum * unbiased);
      }
      // y = (x - mean) * invstd * gamma + beta, folded into one multiply-add per element.
      scale[j] = invstd * static_cast<double>(gamma[ch]);
      shift[j] = static_cast<double>(beta[ch]) - mean[j] * scale[j];
    }
    apply_affine(x, y, rows, c, c0, scale, shift);
  });
}

template <class T>
void batchnorm_fwd_eval_cpu(const T* x, const T* gamma, const T* beta, const T* running_mean, const T* running_var,
                            T* y, int64_t rows, int64_t c, double eps, ThreadPool* pool, const T* prebias) {
  for_channels(c, pool, [&](int64_t c0, int64_t c1) {
    std::vector<double> scale(c1 - c0), shift(c1 - c0);
    for (int64_t j = 0; j < c1 - c0; ++j) {
      const int64_t ch = c0 + j;
      // (x + b - running_mean) * scale + beta = (x - (running_mean - b)) * scale + beta
      const double mean = static_cast<double>(running_mean[ch]) - (prebias ? static_cast<double>(prebias[ch]) : 0.0);
      scale[j] = static_cast<double>(gamma[ch]) / std::sqrt(static_cast<double>(running_var[ch]) + eps);
      shift[j] = static_cast<double>(beta[ch]) - mean * scale[j];
    }
    apply_affine(x, y, rows, c, c0, scale, shift);
  });
}

template <class T>
void batchnorm_grad_cpu(const T* dy, const T* x, const T* gamma, const T* save_mean, const T* save_invstd, T* dx,
                        T* dgamma, T* dbeta, int64_t rows, int64_t c, ThreadPool* pool) {
  for_channels(c, pool, [&](int64_t c0, int64_t c1) {
    const int64_t w = c1 - c0;
    std::vector<double> sum_dy(w, 0.0), sum_dy_xhat(w, 0.0);  // (c1-c0)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < w; ++j) {
        const int64_t i = r * c + c0 + j;
        const double xhat = (static_cast<double>(x[i]) - save_mean[c0 + j]) * save_invstd[c0 + j];
        sum_dy[j] += static_cast<double>(dy[i]);
        sum_dy_xhat[j] += static_cast<double>(dy[i]) * xhat;
      }
    for (int64_t j = 0; j < w; ++j) {
      dbeta[c0 + j] = static_cast<T>(sum_dy[j]);
      dgamma[c0 + j] = static_cast<T>(sum_dy_xhat[j]);
    }
    const double inv_rows = 1.0 / static_cast<double>(rows);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < w; ++j) {
        const int64_t i = r * c + c0 + j, ch = c0 + j;
        const double invstd = save_invstd[ch];
        const double xhat = (static_cast<double>(x[i]) - save_mean[ch]) * invstd;
        const double g = static_cast<double>(dy[i]) - sum_dy[j] * inv_rows - xhat * sum_dy_xhat[j] * inv_rows;
        dx[i] = static_cast<T>(static_cast<double>(gamma[ch]) * invstd * g);
      }
  });
}

#define TRCTL_INSTANTIATE_BATCHNORM(T)                                                                           \
  template void batchnorm_fwd_train_cpu<T>(const T*, const T*, const T*, T*, T*, T*, T*, T*, int64_t, int64_t,   \
                                           double, double, ThreadPool*, const T*);                               \
  template void batchnorm_fwd_eval_cpu<T>(const T*, const T*, const T*, const T*, const T*, T*, int64_t, int64_t, \
                                          double, ThreadPool*, const T*);                                        \
  template void batchnorm_grad_cpu<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, int64_t,     \
                                      int64_t, ThreadPool*);
TRCTL_INSTANTIATE_BATCHNORM(float)
TRCTL_INSTANTIATE_BATCHNORM(double)
#undef TRCTL_INSTANTIATE_BATCHNORM

}  // namespace trctl
