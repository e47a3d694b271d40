// SGD / Adam / AdamW updates on the CPU (formulas in optim.h), elementwise so any split is deterministic.
#include <algorithm>
#include <cmath>

#include "runtime/ops/optim/optim.h"

namespace trctl {

OptimScalars optim_scalars(const OptimizerSpec& spec, double lr, int64_t step) {
  OptimScalars s;
  s.kind = spec.kind;
  s.lr = lr;
  s.weight_decay = spec.weight_decay;
  s.beta1 = spec.beta1;
  s.beta2 = spec.beta2;
  s.eps = spec.eps;
  s.momentum = spec.momentum;
  s.dampening = spec.dampening;
  s.nesterov = spec.nesterov;
  s.trust_coefficient = spec.trust_coefficient;
  s.trust_clip = spec.trust_clip;
  s.step = step;
  return s;
}

namespace {

void adam_range(const OptimScalars& s, bool decay, float* p, const float* g, float* m, float* v, int64_t b,
                int64_t e) {
  const bool decoupled = s.kind == OptimizerKind::AdamW;
  const double wd = decay ? s.weight_decay : 0.0;
  const float keep = static_cast<float>(1.0 - s.lr * wd);  // AdamW: param.mul_(1 - lr * wd)
  const float l2 = static_cast<float>(wd);                 // Adam: grad.add(param, alpha=wd)
  const float w1 = static_cast<float>(1.0 - s.beta1);      // exp_avg.lerp_(grad, 1 - beta1)
  const float b2 = static_cast<float>(s.beta2), w2 = static_cast<float>(1.0 - s.beta2);
  const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
  const float step_size = static_cast<float>(s.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(s.eps);
  for (int64_t i = b; i < e; ++i) {
    float gi = g[i] * s.inv_scale;
    if (decoupled) {
      if (wd != 0.0) p[i] *= keep;
    } else if (wd != 0.0) {
      gi += l2 * p[i];
    }
    m[i] += w1 * (gi - m[i]);
    v[i] = v[i] * b2 + w2 * gi * gi;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    p[i] -= step_size * (m[i] / denom);
  }
}

void sgd_range(const OptimScalars& s, bool decay, float* p, const float* g, float* buf, int64_t b, int64_t e) {
  const float wd = static_cast<float>(decay ? s.weight_decay : 0.0);
  const float mom = static_cast<float>(s.momentum), damp = static_cast<float>(1.0 - s.dampening);
  const float lr = static_cast<float>(s.lr);
  for (int64_t i = b; i < e; ++i) {
    float d = g[i] * s.inv_scale;
    if (wd != 0.0f) d += wd * p[i];
    if (buf) {
      buf[i] = s.step == 1 ? d : buf[i] * mom + damp * d;
      d = s.nesterov ? d + mom * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

}  // namespace

void lars_step_cpu(const OptimScalars& s, bool adapt, float* p, const float* g, float* buf, int64_t n) {
  const float wd = static_cast<float>(s.weight_decay);
  float ratio = 1.0f;
  const bool scaled = adapt && s.weight_decay != 0.0;
  if (scaled) {
    double pn = 0, gn = 0;
    for (int64_t i = 0; i < n; ++i) {
      pn += static_cast<double>(p[i]) * p[i];
      gn += static_cast<double>(g[i]) * g[i];
    }
    const float w_norm = static_cast<float>(std::sqrt(pn)), g_norm = static_cast<float>(std::sqrt(gn));
    if (w_norm > 0.0f && g_norm > 0.0f)
      ratio = static_cast<float>(s.trust_coefficient) * w_norm /
              (g_norm + w_norm * wd + static_cast<float>(s.eps));
    if (s.trust_clip) ratio = std::min(ratio / static_cast<float>(s.lr), 1.0f);
  }
  const float mom = static_cast<float>(s.momentum), damp = static_cast<float>(1.0 - s.dampening);
  const float lr = static_cast<float>(s.lr);
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if (scaled) d = (d + wd * p[i]) * ratio;
    if (buf) {
      buf[i] = s.step == 1 ? d : buf[i] * mom + damp * d;
      d = s.nesterov ? d + mom * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

double grad_global_norm_cpu(const float* g, int64_t n) {
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(g[i]) * g[i];
  return std::sqrt(sq);
}

float grad_clip_factor(double total_norm, double max_norm) {
  const float coef = static_cast<float>(max_norm) / (static_cast<float>(total_norm) + 1e-6f);
  return std::min(coef, 1.0f);
}

void ema_update_cpu(double decay, bool first, const float* w, float* ema, int64_t n) {
  if (first) {
    std::copy(w, w + n, ema);
    return;
  }
  const float a = static_cast<float>(1.0 - decay);
  for (int64_t i = 0; i < n; ++i) ema[i] += a * (w[i] - ema[i]);
}

void optim_step_cpu(const OptimScalars& s, bool decay, float* p, const float* g, float* state0, float* state1,
                    int64_t n, ThreadPool* pool) {
  auto range = [&](int64_t b, int64_t e) {
    if (s.kind == OptimizerKind::Sgd) sgd_range(s, decay, p, g, s.momentum != 0.0 ? state0 : nullptr, b, e);
    else adam_range(s, decay, p, g, state0, state1, b, e);
  };
  if (pool) pool->parallel_for(n, 4096, range);
  else range(0, n);
}

}  // namespace trctl
