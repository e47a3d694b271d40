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
  int64_t step = 1;       // 1-based count of updates including this one
  float inv_scale = 1;    // gradients are multiplied by this first (AMP loss-scale unscaling)
};

OptimScalars optim_scalars(const OptimizerSpec& spec, double lr, int64_t step);

// p, g (n); state: adam/adamw {exp_avg, exp_avg_sq}, sgd with momentum {momentum_buffer}, plain sgd {}.
void optim_step_cpu(const OptimScalars& s, bool decay, float* p, const float* g, float* state0, float* state1,
                    int64_t n, ThreadPool* pool);

}  // namespace trctl
