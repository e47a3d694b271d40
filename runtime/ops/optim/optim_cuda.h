// Fused optimizer updates on the GPU (AdamW, Adam, SGD with momentum/Nesterov), one kernel per contiguous parameter
// range, with every per-step value in device memory (OptHyper) so that a captured graph replays them unchanged.
//
// Step program order (all on the step stream, all capturable):
//   [zero found_inf] ... backward ... grad_check_nonfinite_cuda(grads) -> found_inf     (runtime/ops/amp)
//   opt_hyper_advance_cuda(h, found_inf, loss_scale, lr_table)   iter++, lr, skip, inv_scale, step += !skip, corrections
//   adamw_step_cuda(h, weights region, decay = true); adamw_step_cuda(h, biases region, decay = false); ...
//   grad_scaler_update_cuda(scaler)                                                   (runtime/ops/amp)
// Formulas follow torch.optim's single-tensor (foreach=False) path; g below is grad * inv_scale:
//   AdamW: p *= 1 - lr*wd [decay]; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
//          p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//   Adam:  g += wd*p [decay]; then the same m, v and update (no decoupled decay)
//   SGD:   g += wd*p [decay]; if momentum != 0: buf = t == 1 ? g : momentum*buf + (1-dampening)*g;
//          g = nesterov ? g + momentum*buf : buf;   p -= lr*g
// With skip set (non-finite gradients) every update kernel leaves p and its state untouched and t does not advance,
// as GradScaler.step() skipping optimizer.step().
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/ops/amp/amp_cuda.h"

namespace trctl {

constexpr int kMaxOptGroups = 16;

// One optimizer parameter group (Graph::param_groups) on the device: layout elements [previous group's end, end).
struct OptGroup {
  int64_t end = INT64_MAX;   // set by the host; ends are multiples of 4 (the plan aligns parameters to 64 floats)
  double lr = 1e-3;          // set by the host (each epoch) or from the lr table by opt_hyper_advance_cuda
  double weight_decay = 0.0; // run constant; 0 for the groups without decay
  // ---- Written on the device by opt_hyper_advance_cuda.
  float lr_f = 0.0f;         // (float) lr
  float step_size = 0.0f;    // lr / (1 - beta1^step)
  float decay_factor = 1.0f; // 1 - lr * weight_decay (AdamW)
  float wd_f = 0.0f;         // (float) weight_decay (Adam / SGD L2)
};

struct OptHyper {
  // ---- Run constants, set by the host (opt_hyper_adam / opt_hyper_sgd) and copied to the device once. Doubles,
  // like torch.optim's Python floats: the elementwise math uses their float values, the per-step scalars below are
  // derived from them in double (as PyTorch does on the host).
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double momentum = 0.0, dampening = 0.0;  // SGD
  int32_t nesterov = 0;                    // SGD: 0 or 1
  int32_t groups = 1;                      // parameter groups in `group`, 1..kMaxOptGroups
  OptGroup group[kMaxOptGroups];           // in layout order
  // ---- Written on the device by opt_hyper_advance_cuda, read by the update kernels.
  int32_t step = 0;          // applied (non-skipped) updates, 1-based during an update: torch's state['step']
  uint32_t iter = 0;         // advance calls (every training step, skipped or not); 1-based index into the lr table
  int32_t skip = 0;          // 1: this step's gradients are non-finite, updates are no-ops
  float inv_scale = 1.0f;    // 1 / loss scale (1 without AMP); every gradient is multiplied by it first
  float bc2_sqrt = 1.0f;     // sqrt(1 - beta2^step)
  float bias_correction1 = 0.0f, bias_correction2 = 0.0f;  // 1 - beta^step, for inspection
  int32_t skipped = 0;       // advance calls with skip set, in all (the host reads it at epoch ends)
};

// One group over the whole layout (end = INT64_MAX) with this lr and weight decay.
OptHyper opt_hyper_adam(double lr, double beta1, double beta2, double eps, double weight_decay);
OptHyper opt_hyper_sgd(double lr, double momentum, double dampening, double weight_decay, bool nesterov);

// One thread: the per-step update of *h described above. found_inf (device int32, nonzero = skip), loss_scale
// (device float) and lr_table (device doubles, lr_table[min(iter, len) - 1] becomes every group's lr) are each
// optional (null).
Status opt_hyper_advance_cuda(cudaStream_t stream, OptHyper* h, const int32_t* found_inf, const float* loss_scale,
                              const double* lr_table, int64_t lr_table_len);

// (n) f32 each: params p, grads g, moments m and v. decay: the range gets its group's weight decay (else none).
Status adamw_step_cuda(cudaStream_t stream, const OptHyper* h, float* p, const float* g, float* m, float* v,
                       int64_t n, bool decay);
Status adam_step_cuda(cudaStream_t stream, const OptHyper* h, float* p, const float* g, float* m, float* v,
                      int64_t n, bool decay);
// One launch over a whole weight layout, each element with its group's lr and weight decay (h->group); elements at
// or after decay_n get no weight decay whatever their group says (the backend passes n: its groups carry it).
// s1/s2: Adam exp_avg/exp_avg_sq; SGD momentum buffer (s2 unused).
// lowp (optional): AMP's low-precision weight copy, dst (n) of type F16 or BF16, written from the updated
// parameters in the same pass — bitwise what cast_cuda(p -> dst) after the step writes, one read of p fewer. A
// skipped step (h->skip) leaves it, like p, untouched.
enum class CudaOptimizer { AdamW, Adam, Sgd };
struct LowpCopy {
  void* dst = nullptr;
  GpuDType type = GpuDType::F16;
};
Status optimizer_step_cuda(cudaStream_t stream, CudaOptimizer kind, const OptHyper* h, float* p, const float* g,
                           float* s1, float* s2, int64_t n, int64_t decay_n, const LowpCopy& lowp = {});

// opt_hyper_advance_cuda with found_inf and loss scale from the scaler, followed in the same one-thread kernel by
// grad_scaler_update (the updates use inv_scale of this step's scale; the new scale is for the next step).
Status opt_hyper_advance_scaled_cuda(cudaStream_t stream, OptHyper* h, GradScalerState* scaler);

// momentum_buf may be null only if h->momentum == 0 (the kernel traps otherwise: an internal invariant).
Status sgd_step_cuda(cudaStream_t stream, const OptHyper* h, float* p, const float* g, float* momentum_buf,
                     int64_t n, bool decay);

}  // namespace trctl
