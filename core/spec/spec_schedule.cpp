// scheduler_lr: the learning rate of one epoch under the spec's per-epoch schedule (PyTorch-equivalent).
#include <cmath>

#include "core/spec/spec.h"

namespace trctl {

// With e the 1-based epoch, E = total_epochs, W = warmup_epochs, base = base_lr:
//   warm-up (every type, W > 0, e <= W):  base * e / W            (so epoch W runs at base)
//   constant:   base
//   cosine:     eta_min + (base - eta_min) * (1 + cos(pi * (e - W) / (E - W))) / 2,  reaching eta_min at e = E;
//               base when E <= W (nothing left to anneal)
//   step:       base * gamma^floor((e - 1 - W) / step_size)   (torch StepLR stepped once per epoch, counted from
//               the end of the warm-up; e - 1 is the 0-based epoch)
//   multistep:  base * gamma^(number of milestones m with m <= e - 1)   (torch MultiStepLR stepped once per
//               epoch: milestone m takes effect from the 0-based epoch m, i.e. 1-based epoch m + 1; milestones
//               are absolute epochs, not shifted by the warm-up)
double scheduler_lr(const SchedulerSpec& s, double base_lr, int epoch, int total_epochs) {
  const int w = s.warmup_epochs;
  if (w > 0 && epoch <= w) return base_lr * epoch / w;
  switch (s.kind) {
    case SchedulerKind::Constant:
      return base_lr;
    case SchedulerKind::Cosine: {
      if (total_epochs <= w) return base_lr;
      const double pi = std::acos(-1.0);
      double t = static_cast<double>(epoch - w) / (total_epochs - w);
      return s.eta_min + (base_lr - s.eta_min) * (1 + std::cos(pi * t)) / 2;
    }
    case SchedulerKind::Step: {
      int steps = s.step_size > 0 ? (epoch - 1 - w) / s.step_size : 0;
      return base_lr * std::pow(s.gamma, steps);
    }
    case SchedulerKind::MultiStep: {
      int passed = 0;
      for (int m : s.milestones) passed += m <= epoch - 1 ? 1 : 0;
      return base_lr * std::pow(s.gamma, passed);
    }
  }
  return base_lr;
}

}  // namespace trctl
