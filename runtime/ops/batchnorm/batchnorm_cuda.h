// Batch normalisation (nn.BatchNorm2d semantics) on NHWC activations on the GPU: x (N,H,W,C) is a row-major
// (rows = N*H*W, c = C) matrix, statistics are per channel over the rows. Activations are f32/f16/bf16 (type-erased);
// gamma, beta, statistics and parameter gradients are always fp32, and all math is fp32.
// Every reduction runs in a fixed order (per-thread Welford over rows, then fixed-order merges of the per-block
// partials; no atomics), so all outputs are bitwise reproducible run to run, and they do not depend on the vector
// width the launcher picks from c and the pointer alignment. No allocation, no host synchronisation: capturable in a
// CUDA graph on `s`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/ops/pool/pool.h"

namespace trctl {

// Per-channel sums of x's rows that a producer computed along with x (a conv's genstats epilogue,
// runtime/cuda/cudnn_fused_conv.h): sum (c) f32 = sum of x, sqsum (c) f32 = sum of x^2. Given to a training
// forward, they replace its statistics pass over x (mean = sum / rows, biased var = sqsum / rows - mean^2, formed in
// double); the apply is unchanged. Both null: the forward computes the statistics itself.
struct BnSums {
  const float* sum = nullptr;
  const float* sqsum = nullptr;
};

// Device workspace for the per-row-block partial statistics of the training forward and the backward.
size_t batchnorm_workspace_bytes(int64_t rows, int64_t c);

// Training forward, rows >= 2 (as PyTorch). x (rows,c) t -> y (rows,c) t = relu?((x - mean) * invstd * gamma + beta)
// with the batch mean and biased variance. gamma, beta (c) f32. save_mean, save_invstd (c) f32 = mean and
// 1/sqrt(var_biased + eps), for the backward. running_mean, running_var (c) f32 updated in place,
// r = (1 - momentum) * r + momentum * batch value with the unbiased variance var_biased * rows / (rows - 1); each is
// skipped when nullptr. residual (rows,c) t, nullable: added before the ReLU, y = relu?(BN(x) + residual) with the
// sum in fp32 and one rounding. y may alias x or residual. prebias (c) f32, nullable: a folded conv bias b
// (pass_fold_conv_bias), x standing for x + b: y and the saved statistics are those of x (BN(x + b) = BN(x)), the
// running mean is updated with mean(x) + b. sums: see BnSums (the statistics from them, not from a pass over x;
// then they are not bitwise what the pass gives, and they are only as repeatable as the sums).
Status batchnorm_fwd_train_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma, const float* beta,
                                void* y, float* save_mean, float* save_invstd, float* running_mean,
                                float* running_var, int64_t rows, int64_t c, float eps, float momentum, bool relu,
                                void* workspace, size_t workspace_bytes, const void* residual = nullptr,
                                const float* prebias = nullptr, const BnSums& sums = {});
// Training forward without its apply pass, for a consumer that applies the normalisation itself (a convolution's
// prologue: train.conv_bn_apply): the statistics (from sums when given, else the pass over x), the finalize and the
// running statistics exactly as batchnorm_fwd_train_cuda, then per channel scale = gamma * invstd and shift =
// beta - mean * scale in fp32, rounded to `affine` (F16 or F32) into scale_shift (2, c): row 0 scale, row 1 shift.
// The consumer computes relu(x * scale + shift); y is not written. scale_shift nullptr: the statistics alone (a
// consumer that applies the batch norm from save_mean and save_invstd itself: wgconv's prologue, train.conv_wgconv).
Status batchnorm_fwd_train_consts_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma,
                                       const float* beta, float* save_mean, float* save_invstd, float* running_mean,
                                       float* running_var, int64_t rows, int64_t c, float eps, float momentum,
                                       void* workspace, size_t workspace_bytes, const float* prebias,
                                       const BnSums& sums, void* scale_shift, GpuDType affine);
// Eval forward: y = relu?((x - running_mean) / sqrt(running_var + eps) * gamma + beta [+ residual]). x, y, residual
// (rows,c) t (residual nullable); the rest (c) f32. y may alias x or residual. prebias (c) f32, nullable: a folded
// conv bias b, y = BN(x + b), with running_mean - b (fp32) in place of running_mean.
Status batchnorm_fwd_eval_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma, const float* beta,
                               const float* running_mean, const float* running_var, void* y, int64_t rows, int64_t c,
                               float eps, bool relu, const void* residual = nullptr, const float* prebias = nullptr);
// Training-mode backward. dy, x (rows,c) t; relu_y (rows,c) t: when the forward fused a ReLU, its output y (the
// incoming gradient is then g = dy * (y > 0)), else nullptr. gamma, save_mean, save_invstd (c) f32 from the forward.
// dx (rows,c) t = gamma * invstd * (g - mean(g) - xhat * mean(g * xhat)); dgamma (c) f32 = sum(g * xhat),
// dbeta (c) f32 = sum(g), overwritten. dx may not alias x; it may alias dy. dx nullptr (and no g_out): the first
// two passes only (dgamma, dbeta), for a consumer that computes dx itself with bn_elem.cuh's bn_bwd_dx (the fewc
// weight gradient's batch-norm prologue, runtime/ops/conv2d/fewc_cuda.h).
// relu_beta (c) f32, nullable: the forward's beta when it fused a ReLU WITHOUT a residual; the mask y > 0 is then
// recomputed from x exactly as the forward rounded y (bitwise the same mask) and relu_y is not read (two fewer
// passes over (rows,c)). With a residual the mask depends on it: pass relu_y and no relu_beta.
// g_out (rows,c) t, nullable (needs relu_y, no relu_beta; aliases none of dy, x, relu_y, dx): the masked gradient
// g = relu_y > 0 ? dy : 0 is also stored there, bitwise what relu_bwd_cuda(relu_y, dy) writes, from the first
// pass, and the last pass reads it instead of dy and relu_y: a fused BN + residual add + ReLU's backward, whose g is
// also the residual's gradient (pass_fuse_bn_relu_grad), without a separate ReLU-backward pass.
// The backward's dx pass alone, from dgamma and dbeta computed elsewhere (train.conv_bn_backward: fused, cuDNN's
// dgrad epilogue): dx (rows,c) t = gamma * invstd * (g - dbeta / n - (x - mean) * invstd * dgamma / n) with g
// (rows,c) t the already masked incoming gradient (no ReLU here), the same kernel as batchnorm_bwd_cuda's last pass.
// dx may alias g, not x.
Status batchnorm_bwd_apply_cuda(cudaStream_t s, const void* g, const void* x, GpuDType t, const float* gamma,
                                const float* save_mean, const float* save_invstd, const float* dgamma,
                                const float* dbeta, void* dx, int64_t rows, int64_t c);
Status batchnorm_bwd_cuda(cudaStream_t s, const void* dy, const void* x, const void* relu_y, GpuDType t,
                          const float* gamma, const float* save_mean, const float* save_invstd, void* dx,
                          float* dgamma, float* dbeta, int64_t rows, int64_t c, void* workspace,
                          size_t workspace_bytes, const float* relu_beta = nullptr, void* g_out = nullptr);

// A batch norm + ReLU with the max pool that follows it fused (pass_fuse_bn_pool; runtime/ops/batchnorm/
// batchnorm_pool.cu): x (g.n,g.h,g.w,g.c) t, pooled (g.n,g.p,g.q,g.c) over the kh x kw windows of g with stride
// sh <= kh, sw <= kw and padding ph, pw (g as pool2d_geom_finish makes it; kh*kw <= 256): tiling windows (VGG's
// 2x2/2) or overlapping ones (ResNet's stem 3x3/2 pad 1), max pool semantics as maxpool2d_fwd_cpu. The training
// forward writes only the pooled y t and the argmax idx u8 (offset in the nominal window, 8-byte aligned), bitwise
// what batchnorm_fwd_train_cuda + maxpool2d_fwd_idx_cuda give (the statistics and running statistics are the same
// passes); relu as there. sums: as batchnorm_fwd_train_cuda's. x_at_max (g.n,g.p,g.q,g.c) t, nullable, tiling
// windows only (else an argument error): each window's x element at its argmax, per channel (bitwise x there) --
// what the backward's pooled statistics read instead of x (batchnorm_bwd_pool_cuda).
Status batchnorm_fwd_train_pool_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma,
                                     const float* beta, void* y, uint8_t* idx, float* save_mean, float* save_invstd,
                                     float* running_mean, float* running_var, const Pool2dGeom& g, float eps,
                                     float momentum, bool relu, void* workspace, size_t workspace_bytes,
                                     const float* prebias = nullptr, const BnSums& sums = {},
                                     void* x_at_max = nullptr);
// Eval forward with the fused pool: the pooled y (g.n,g.p,g.q,g.c) of batchnorm_fwd_eval_cuda + maxpool2d_fwd_cuda.
Status batchnorm_fwd_eval_pool_cuda(cudaStream_t s, const void* x, GpuDType t, const float* gamma, const float* beta,
                                    const float* running_mean, const float* running_var, void* y,
                                    const Pool2dGeom& g, float eps, bool relu, const float* prebias = nullptr);
// Backward of the fused forward (with its ReLU): dy_pooled, idx (g.n,g.p,g.q,g.c) t / u8 (8-byte aligned),
// x (g.n,g.h,g.w,g.c) t -> dx (same) t, dgamma, dbeta (c) f32: bitwise maxpool2d_bwd_idx_cuda +
// batchnorm_bwd_cuda with relu_beta = beta, without the full-resolution dy (an element's gradient: the sum, in
// that kernel's window order and fp32, of the pooled dy of the windows whose argmax it is, rounded once to t;
// kPoolThenDense writes that full-resolution dy into dx).
// How the gradient reaches both passes (`gather`): kTwice decodes (tiling windows) or gathers (overlapping ones)
// it from the pooled dy and argmax in both passes (those are read twice, from L2 mostly); kOnceStored does so in the
// first pass and stores it into dx, which the last pass reads back in place (one more write and read of dx);
// kPoolThenDense runs the unfused pair's kernels with dx as the full-resolution dy (maxpool2d_bwd_idx_cuda into
// dx, whose kernels load each window once, then batchnorm_bwd_cuda in place: streaming passes, one more read of dx
// than kOnceStored); kWindowDx (2x2 tiling windows; others run as kTwice) decodes in the first pass and runs the
// last one per pooled pixel (each window's dy and argmax loaded once, its four dx written together); kAuto picks
// what bench kernels measured fastest for the geometry (batchnorm_pool.cu). All give bitwise the same dx. n*h*w
// and n*p*q < 2^31; dx aliases neither x nor dy_pooled.
// x_at_max (tiling windows; the forward's, nullable): the first pass -- dgamma and dbeta -- runs over the pooled
// pixels alone, on dy_pooled and x_at_max: an element that is no window's argmax has gradient exactly 0 and adds
// nothing, so the sums hold the same terms in another order (deterministic, not bitwise the full-resolution pass;
// the last pass, dx, as `gather` says; kPoolThenDense ignores x_at_max). It reads 2 pooled tensors where the
// full-resolution pass reads x, dy_pooled and idx (VGG's pool1: 0.8 GB against 2.2 GB at batch 256).
enum class BnPoolGather { kAuto, kTwice, kOnceStored, kPoolThenDense, kWindowDx };
Status batchnorm_bwd_pool_cuda(cudaStream_t s, const void* dy_pooled, const uint8_t* idx, const void* x, GpuDType t,
                               const float* gamma, const float* beta, const float* save_mean,
                               const float* save_invstd, void* dx, float* dgamma, float* dbeta, const Pool2dGeom& g,
                               void* workspace, size_t workspace_bytes,
                               BnPoolGather gather = BnPoolGather::kAuto, const void* x_at_max = nullptr);

}  // namespace trctl
