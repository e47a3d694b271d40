// The kinds of the Activation op (ReLU6, LeakyReLU, ELU, SiLU, Hardswish, Sigmoid, Tanh) and of the Loss op (BCE
// with logits, MSE, weighted cross-entropy): shared by the IR (Attrs), the passes and both backends. The formulas
// are in runtime/ops/activation/activation.h and runtime/ops/loss/loss.h.
#pragma once
#include <cstdint>

namespace trctl {

enum class ActKind : uint8_t { Relu6, LeakyRelu, Elu, Silu, Hardswish, Sigmoid, Tanh };

inline const char* to_string(ActKind k) {
  switch (k) {
    case ActKind::Relu6: return "relu6";
    case ActKind::LeakyRelu: return "leaky_relu";
    case ActKind::Elu: return "elu";
    case ActKind::Silu: return "silu";
    case ActKind::Hardswish: return "hardswish";
    case ActKind::Sigmoid: return "sigmoid";
    case ActKind::Tanh: return "tanh";
  }
  return "?";
}

// Whether the backward reads the forward's output y (sigmoid, tanh: as torch's sigmoid_backward / tanh_backward)
// rather than its input x (all others, as torch's out-of-place rules, nn.ELU included).
inline bool act_grad_uses_output(ActKind k) { return k == ActKind::Sigmoid || k == ActKind::Tanh; }

// Whether the kind takes a parameter (Attrs::act_param): LeakyReLU's negative_slope, ELU's alpha.
inline bool act_has_param(ActKind k) { return k == ActKind::LeakyRelu || k == ActKind::Elu; }

// BceWithLogits: a 1-logit binary head (labels 0/1) or one logit per class against one-hot targets;
// Mse: logits against one-hot targets; WeightedCrossEntropy: softmax cross-entropy with per-class weights.
enum class LossFn : uint8_t { BceWithLogits, Mse, WeightedCrossEntropy };

inline const char* to_string(LossFn f) {
  switch (f) {
    case LossFn::BceWithLogits: return "bce_with_logits";
    case LossFn::Mse: return "mse";
    case LossFn::WeightedCrossEntropy: return "weighted_cross_entropy";
  }
  return "?";
}

}  // namespace trctl
