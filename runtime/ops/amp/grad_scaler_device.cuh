// The loss-scale update of GradScaler as a device function, shared by grad_scaler_update_kernel (amp.cu) and the
// fused optimizer bookkeeping kernel (optim.cu). Include only from .cu files.
#pragma once
#include "runtime/ops/amp/amp_cuda.h"

namespace trctl {

// found_inf: scale *= backoff, tracker = 0; else tracker += 1 and at growth_interval scale *= growth (if finite).
__device__ __forceinline__ void grad_scaler_update_device(GradScalerState* s) {
  if (s->found_inf != 0) {
    s->scale = s->scale * s->backoff_factor;
    s->growth_tracker = 0;
    return;
  }
  const int32_t successful = s->growth_tracker + 1;
  if (successful >= s->growth_interval) {
    const float grown = s->scale * s->growth_factor;
    if (isfinite(grown)) s->scale = grown;
    s->growth_tracker = 0;
  } else {
    s->growth_tracker = successful;
  }
}

}  // namespace trctl
