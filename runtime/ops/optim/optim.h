// Optimizer updates over a contiguous range of parameters, CPU reference, with exactly PyTorch's update rules
// (torch.optim single-tensor path): SGD (momentum, dampening, Nesterov, L2 weight decay), Adam (L2 weight decay)
// and AdamW (decoupled weight decay). `decay` says whether the range gets weight decay (biases and norm
// parameters do not). Scalars derived from the step (bias corrections, step size) are computed in double, as
// PyTorch computes them in Python, and applied in float.
#pragma once
#include <cstdint>

#include "core/spec/spec.h"
#include "core/util/thread_pool.h"

namespace trctl {

struct OptimScalars {
  OptimizerKind kind = OptimizerKind::AdamW;
  double lr = 0;
  double weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  double trust_coefficient = 0.001;  // lars
  bool trust_clip = false;           // lars
  int64_t step = 1;       // 1-based count of updates including this one
  float inv_scale = 1;    // gradients are multiplied by this first (AMP loss-scale unscaling)
};

OptimScalars optim_scalars(const OptimizerSpec& spec, double lr, int64_t step);

// p, g (n); state: adam/adamw {exp_avg, exp_avg_sq}, sgd with momentum {momentum_buffer}, plain sgd {}.
void optim_step_cpu(const OptimScalars& s, bool decay, float* p, const float* g, float* state0, float* state1,
                    int64_t n, ThreadPool* pool);

// LARS on one parameter tensor, timm's Lars (after NVIDIA apex's LARC): when `adapt` (the tensor gets weight
// decay and weight_decay != 0), g' = (g + wd p) * r with r = coef |p| / (|g| + wd |p| + eps) (1 when |p| or |g|
// is 0; min(r / lr, 1) with trust_clip); otherwise g' = g. Then SGD with momentum: buf = g' at the first step,
// else momentum buf + (1 - dampening) g'; Nesterov g' + momentum buf; p -= lr * that. Norms in double.
// p, g, buf (n); buf nullptr without momentum.
void lars_step_cpu(const OptimScalars& s, bool adapt, float* p, const float* g, float* buf, int64_t n);

// torch.nn.utils.clip_grad_norm_(max_norm, 2): the 2-norm of all gradients together (each tensor's norm, then the
// norm of those), and the factor min(max_norm / (norm + 1e-6), 1) the gradients are multiplied by. g (n), its
// unused padding zero.
double grad_global_norm_cpu(const float* g, int64_t n);
float grad_clip_factor(double total_norm, double max_norm);

// The weights' exponential moving average (torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn): the
// first update (`first`) copies w, later ones ema.lerp_(w, 1 - decay) as ema += (float)(1 - decay) * (w - ema).
// w, ema (n).
void ema_update_cpu(double decay, bool first, const float* w, float* ema, int64_t n);

}  // namespace trctl
