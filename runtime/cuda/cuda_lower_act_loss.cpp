// CudaBackend's lowering of the Activation op (ActivationGrad: the backward from the saved input or output) and of
// the Loss op (BCE with logits, MSE, weighted cross-entropy): one fused loss launch per program computes the loss,
// the gradient of the logits (LossGrad is folded into it), the accuracy counts and the accumulators, as the softmax
// cross-entropy does. The loss workspace is the program's scratch_ (sized for both kernels in init()).
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/ops/activation/activation_cuda.h"
#include "runtime/ops/loss/loss_cuda.h"

namespace trctl::cuda_detail {

// The class weights of a weighted cross-entropy, copied to the device once (every program's Loss node has the same).
Status CudaBackend::plan_losses() {
  for (const Program& p : c_.graph.programs)
    for (const Node& n : p.nodes) {
      if (n.op != OpKind::Loss || n.attrs.loss != LossFn::WeightedCrossEntropy || class_weights_) continue;
      const std::vector<float>& w = n.attrs.class_weights;
      if (w.empty())
        return Error{ErrCode::Internal, "cuda backend", "loss (weighted_cross_entropy) node " + n.name + " without class weights"};
      TRCTL_CUDA_TRY(cudaMalloc(&class_weights_, w.size() * sizeof(float)));
      Status st = copy_to_device(class_weights_, w.data(), w.size() * sizeof(float));
      if (!st.ok()) return st;
    }
  return ok_status();
}

Status CudaBackend::lower_act_loss_node(int program, size_t i, std::vector<Launch>& out) {
  const Program& p = c_.graph.programs[program];
  const Node& n = p.nodes[i];
  const cudaStream_t s = ctx_.stream;
  const GpuDType act = act_type();
  const ActKind kind = n.attrs.act;
  const float param = n.attrs.act_param;
  switch (n.op) {
    case OpKind::Activation: {
      const void* x = at(n.in[0]);
      void* y = at(n.out[0]);
      const int64_t cnt = c_.graph.values[n.in[0]].shape.numel();
      out.push_back([=] { return activation_fwd_cuda(s, kind, param, x, y, cnt, act); });
      return ok_status();
    }
    case OpKind::ActivationGrad: {  // dY, X or Y -> dX
      const void *dy = at(n.in[0]), *saved = at(n.in[1]);
      void* dx = at(n.out[0]);
      const int64_t cnt = c_.graph.values[n.in[0]].shape.numel();
      out.push_back([=] { return activation_bwd_cuda(s, kind, param, saved, dy, dx, cnt, act); });
      return ok_status();
    }
    case OpKind::Loss: {
      const Shape& ls = c_.graph.values[n.in[0]].shape;
      if (n.attrs.loss == LossFn::WeightedCrossEntropy && !class_weights_)
        return Error{ErrCode::Internal, "cuda backend", "loss (weighted_cross_entropy): class weights not on the device"};
      LossCudaArgs a;
      a.fn = n.attrs.loss;
      a.logits = at(n.in[0]);
      a.logits_type = act;
      a.labels = reinterpret_cast<const int32_t*>(at(n.in[1]));
      a.rows = ls.dims[0];
      a.width = ls.dims[1];
      a.label_smoothing = n.attrs.label_smoothing;
      a.class_weights = class_weights_;
      a.loss_scale = scaled() ? &state()->scaler.scale : nullptr;
      for (const Node& g : p.nodes)
        if (g.op == OpKind::LossGrad && g.in[0] == n.in[0]) {
          if (!early_write_safe(program, g.out[0], i))
            return Error{ErrCode::Internal, "cuda backend",
                         "loss: the plan shares the gradient of the logits with a live value"};
          a.dlogits = at(g.out[0]);
          a.grad_scale = g.attrs.grad_scale;  // 1 / train.accumulate_steps
        }
      a.dlogits_type = act;
      a.workspace = scratch_[program];
      a.workspace_bytes = ce_ws_bytes_[program];
      a.loss = reinterpret_cast<float*>(at(p.loss));
      a.loss_sum = reinterpret_cast<double*>(at(p.loss_sum));
      a.correct = reinterpret_cast<int32_t*>(at(p.correct));
      a.correct5 = p.correct5 != kNoValue ? reinterpret_cast<int32_t*>(at(p.correct5)) : nullptr;
      a.bad_labels = &state()->bad_labels;
      out.push_back([s, a] { return loss_cuda(s, a); });
      return ok_status();
    }
    case OpKind::LossGrad:        // folded into the fused loss launch
    case OpKind::BinaryAccuracy:  // counted by the fused loss launch
      return ok_status();
    default:
      return Error{ErrCode::Internal, "cuda backend", std::string("not an activation or loss node: ") + to_string(n.op)};
  }
}

}  // namespace trctl::cuda_detail
