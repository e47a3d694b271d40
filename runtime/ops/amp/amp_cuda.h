// Automatic mixed precision on the device: the non-finite gradient check and the dynamic loss scale update
// (torch.cuda.amp.GradScaler semantics), with the scaler state in device memory so a captured step replays it.
// The found_inf flag is only ever SET by grad_check_nonfinite_cuda (several ranges may be checked); the step program
// zeroes it at the start of every step (fill_i32_cuda / cudaMemsetAsync) before the backward pass.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

struct GradScalerState {
  float scale = 65536.0f;        // loss scale of the current step (softmax_ce reads &scale as loss_scale)
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int32_t growth_interval = 2000;
  int32_t growth_tracker = 0;    // consecutive clean steps since the last change of scale
  int32_t found_inf = 0;         // this step's flag: grad_check_nonfinite_cuda(..., &state->found_inf)
};

// *found_inf = 1 if any of g[0..n) is inf or NaN; never clears it. (n) dtype.
Status grad_check_nonfinite_cuda(cudaStream_t stream, const void* g, GpuDType dtype, int64_t n, int32_t* found_inf);

// debug.inject_nonfinite_grad_steps (a testing aid): one thread writes a NaN into g[0] when *step (the device's
// training step counter, 1-based during the step) is one of steps[0..count). Captured into the step graph before
// the non-finite check, so the step is skipped as a real overflow would be; no host synchronisation.
Status grad_inject_nonfinite_cuda(cudaStream_t stream, const uint32_t* step, const int64_t* steps, int32_t count,
                                  float* g);

// One thread, after the optimizer kernels of the step:
//   found_inf: scale *= backoff_factor, growth_tracker = 0
//   else:      growth_tracker += 1; if it reaches growth_interval: scale *= growth_factor (kept only if finite),
//              growth_tracker = 0.
// Reads s->found_inf and leaves it set (the next step's zeroing clears it).
Status grad_scaler_update_cuda(cudaStream_t stream, GradScalerState* s);

}  // namespace trctl
