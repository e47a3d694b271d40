// Batch normalisation (nn.BatchNorm2d semantics) on NHWC activations, CPU reference: an activation (N,H,W,C) is a
// row-major (rows = N*H*W, c = C) matrix and the statistics are per channel over the rows. float and double.
#pragma once
#include <cstdint>

#include "core/util/thread_pool.h"

namespace trctl {

// Training forward. x (rows,c), gamma/beta (c) -> y (rows,c) = (x - mean) * invstd * gamma + beta with the batch
// mean and biased variance; save_mean/save_invstd (c) = mean and 1/sqrt(var_biased + eps) for the backward.
// running_mean/running_var (c) are updated in place by PyTorch's rule (momentum weights the new value, the variance
// is unbiased: var_biased * rows / (rows - 1)); skipped when nullptr. rows >= 2 for the running variance (PyTorch
// refuses rows == 1 in training; here it would become inf/NaN).
// prebias (c), nullable: a folded conv bias b (pass_fold_conv_bias), x standing for x + b: y, save_mean and
// save_invstd stay those of x (BN(x + b) = BN(x)); running_mean is updated with mean(x) + b (in double).
template <class T>
void batchnorm_fwd_train_cpu(const T* x, const T* gamma, const T* beta, T* y, T* save_mean, T* save_invstd,
                             T* running_mean, T* running_var, int64_t rows, int64_t c, double eps, double momentum,
                             ThreadPool* pool, const T* prebias = nullptr);
// Eval forward. x (rows,c), gamma/beta/running_mean/running_var (c) -> y (rows,c) =
// (x - running_mean) / sqrt(running_var + eps) * gamma + beta. prebias (c), nullable: a folded conv bias b,
// y = BN(x + b), computed with running_mean - b (in double) in place of running_mean.
template <class T>
void batchnorm_fwd_eval_cpu(const T* x, const T* gamma, const T* beta, const T* running_mean, const T* running_var,
                            T* y, int64_t rows, int64_t c, double eps, ThreadPool* pool, const T* prebias = nullptr);
// Training-mode backward (the statistics depend on x). dy, x (rows,c); gamma, save_mean, save_invstd (c) ->
// dx (rows,c) = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), dgamma (c) = sum(dy * xhat),
// dbeta (c) = sum(dy); all overwritten. xhat = (x - save_mean) * save_invstd.
template <class T>
void batchnorm_grad_cpu(const T* dy, const T* x, const T* gamma, const T* save_mean, const T* save_invstd, T* dx,
                        T* dgamma, T* dbeta, int64_t rows, int64_t c, ThreadPool* pool);

}  // namespace trctl
