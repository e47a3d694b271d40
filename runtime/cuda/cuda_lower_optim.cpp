// CudaBackend's lowering of the OptimizerStep node (the non-finite check, the hyper-parameter step, the update over
// the weight layout, LARS, clipping, the EMA) and the optimizer's device memory; the non-finite check's plan
// (train.grad_check: core/memplan/grad_check.h), whose operand checks lower_gemm_node issues after their GEMMs.
#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/ops/amp/amp_cuda.h"
#include "runtime/ops/cast/cast_cuda.h"
#include "runtime/ops/optim/optim_cuda.h"
#include "runtime/ops/optim/optim_extra_cuda.h"

namespace trctl::cuda_detail {

// The program's non-finite check plan (train.grad_check), made once.
const GradCheckPlan& CudaBackend::grad_check_of(int program) {
  auto it = grad_check_.find(program);
  if (it == grad_check_.end()) {
    const bool by_operands = grad_check_by_operands(c_.spec, comm_ != nullptr);
    it = grad_check_.emplace(program, grad_check_plan(c_.graph, c_.plan, program, by_operands)).first;
  }
  return it->second;
}

// The optimizer over the weight layout in one launch, after the non-finite check of the gradients (every
// precision: a step with inf/NaN gradients is skipped and counted in OptHyper::skipped; with fp16 AMP the
// loss-scale update is fused into the bookkeeping kernel); with AMP the fp16/bf16 weight copy refreshed by the update
// kernel itself (LARS: by a cast afterwards).
// debug.inject_nonfinite_grad_steps puts its NaN into the gradients just before the check.
Status CudaBackend::lower_optimizer(int program, std::vector<Launch>& out) {
  const cudaStream_t s = ctx_.stream;
  DeviceState* st = state();
  const int64_t total = c_.plan.trainable_bytes / 4, layout = c_.plan.weights_bytes / 4;
  float* w = reinterpret_cast<float*>(region_[static_cast<int>(Region::Weights)]);
  float* g = reinterpret_cast<float*>(region_[static_cast<int>(Region::Grads)]);
  float* m = reinterpret_cast<float*>(region_[static_cast<int>(Region::OptState)]);
  const int k = optimizer_state_count(c_.spec.optimizer);
  float* v = k > 1 ? m + layout : nullptr;  // the second state copy follows a whole layout (frozen tail included)
  if (k == 0) m = nullptr;
  if (inject_count_ > 0) {
    const int64_t* steps = inject_steps_;
    const int32_t count = inject_count_;
    out.push_back([s, st, steps, count, g] { return grad_inject_nonfinite_cuda(s, &st->step, steps, count, g); });
  }
  // The gradients' ranges that grad_check_plan leaves to this check (all of them under train.grad_check: full).
  for (const auto& [begin, end] : grad_check_of(program).ranges) {
    const float* from = g + begin / 4;
    const int64_t cnt = (end - begin) / 4;
    out.push_back([s, from, cnt, st] {
      return grad_check_nonfinite_cuda(s, from, GpuDType::F32, cnt, &st->scaler.found_inf);
    });
  }
  if (scaled()) {
    out.push_back([s, st] { return opt_hyper_advance_scaled_cuda(s, &st->opt, &st->scaler); });
  } else {
    out.push_back([s, st] { return opt_hyper_advance_cuda(s, &st->opt, &st->scaler.found_inf, nullptr, nullptr, 0); });
  }
  const OptimizerSpec& o = c_.spec.optimizer;
  if (o.clip_grad_norm > 0) {  // the norm of the unscaled gradients, then its factor folded into inv_scale
    void* ws = clip_ws_;
    const double max_norm = o.clip_grad_norm;
    out.push_back([s, st, g, total, max_norm, ws] {
      return grad_global_norm_cuda(s, &st->opt, g, total, max_norm, ws, &st->clip);
    });
    out.push_back([s, st] { return grad_clip_fold_cuda(s, &st->opt, &st->clip); });
  }
  if (o.kind == OptimizerKind::Lars) {
    const LarsDevice tables = lars_;
    const LarsConsts consts{o.trust_coefficient, o.trust_clip};
    out.push_back([s, st, tables, consts, w, g, m] { return lars_step_cuda(s, &st->opt, tables, consts, w, g, m); });
  } else {
    const CudaOptimizer kind = o.kind == OptimizerKind::AdamW ? CudaOptimizer::AdamW
                               : o.kind == OptimizerKind::Adam ? CudaOptimizer::Adam
                                                               : CudaOptimizer::Sgd;
    // One launch over the trainable weights, each element with its group's lr and weight decay (OptHyper::group);
    // with AMP it also writes their low-precision copy (bitwise the cast below, one read of the weights fewer).
    LowpCopy copy;
    if (lowp()) copy = LowpCopy{lowp_weights_, act_type()};
    out.push_back([s, st, kind, w, g, m, v, total, copy] {
      return optimizer_step_cuda(s, kind, &st->opt, w, g, m, v, total, total, copy);
    });
  }
  if (c_.spec.train.ema_decay > 0) {  // the EMA copy after the moments, over the whole layout (frozen ones too)
    float* ema = reinterpret_cast<float*>(region_[static_cast<int>(Region::OptState)]) + k * layout;
    const double decay = c_.spec.train.ema_decay;
    out.push_back([s, st, w, ema, layout, decay] { return ema_update_cuda(s, &st->opt, w, ema, layout, decay); });
  }
  // LARS's step writes only the fp32 weights: their low-precision copy follows (the frozen tail never changes: its
  // copy is made once, by write_region).
  if (lowp() && o.kind == OptimizerKind::Lars) {
    void* lw = lowp_weights_;
    const GpuDType act = act_type();
    out.push_back([s, w, lw, act, total] { return cast_cuda(s, w, GpuDType::F32, lw, act, total); });
  }
  return ok_status();
}

// Device memory the optimizer's extras need, allocated once before capture: the clip norm's workspace, and LARS's
// tensor/chunk tables (the trainable parameters) with its norm workspace.
Status CudaBackend::plan_optimizer_extras() {
  const OptimizerSpec& o = c_.spec.optimizer;
  const int64_t total = c_.plan.trainable_bytes / 4;
  if (o.clip_grad_norm > 0)
    TRCTL_CUDA_TRY(cudaMalloc(&clip_ws_, std::max<size_t>(grad_global_norm_workspace_bytes(total), 8)));
  if (o.kind != OptimizerKind::Lars) return ok_status();
  std::vector<LarsTensor> tensors;
  for (const ParamInfo& p : c_.graph.params) {
    if (p.frozen) continue;
    LarsTensor t;
    t.offset = c_.plan.values[p.value].offset / 4;
    t.n = c_.graph.values[p.value].shape.numel();
    t.adapt = 1;  // the kernel adapts a tensor only when its group has weight decay (as the CPU backend)
    tensors.push_back(t);
  }
  Result<LarsTables> tables = lars_tables(std::move(tensors));
  if (!tables.ok()) return tables.errors();
  const LarsTables& t = tables.value();
  const size_t tb = static_cast<size_t>(align_up(static_cast<int64_t>(t.tensors.size() * sizeof(LarsTensor))));
  const size_t cb = static_cast<size_t>(align_up(static_cast<int64_t>(t.chunks.size() * sizeof(LarsChunk))));
  const size_t wb = lars_workspace_bytes(static_cast<int32_t>(t.chunks.size()));
  TRCTL_CUDA_TRY(cudaMalloc(&lars_mem_, tb + cb + std::max<size_t>(wb, 8)));
  char* base = static_cast<char*>(lars_mem_);
  if (Status st = copy_to_device(base, t.tensors.data(), t.tensors.size() * sizeof(LarsTensor)); !st.ok()) return st;
  if (Status st = copy_to_device(base + tb, t.chunks.data(), t.chunks.size() * sizeof(LarsChunk)); !st.ok())
    return st;
  lars_.tensors = reinterpret_cast<const LarsTensor*>(base);
  lars_.chunks = reinterpret_cast<const LarsChunk*>(base + tb);
  lars_.chunk_count = static_cast<int32_t>(t.chunks.size());
  lars_.norms = reinterpret_cast<double*>(base + tb + cb);
  return ok_status();
}

// Exchanges the weights with their EMA (validation with the averaged weights; the second call swaps back), and
// refreshes the low-precision weight copy the forward pass reads under AMP.
Status CudaBackend::swap_ema() {
  if (!(c_.spec.train.ema_decay > 0)) return Error{ErrCode::Internal, "cuda backend", "no EMA in this plan"};
  const int64_t layout = c_.plan.weights_bytes / 4;
  float* w = reinterpret_cast<float*>(region_[static_cast<int>(Region::Weights)]);
  float* ema = reinterpret_cast<float*>(region_[static_cast<int>(Region::OptState)]) +
               optimizer_state_count(c_.spec.optimizer) * layout;
  if (Status st = swap_cuda(ctx_.stream, w, ema, layout); !st.ok()) return st;
  return refresh_lowp_weights();
}

}  // namespace trctl::cuda_detail
