// Loss op (LossFn, core/graph/act_loss.h), CPU reference: BCE with logits, MSE and weighted cross-entropy with
// PyTorch's mean reductions, their gradients, and the binary head's accuracy. Rows are reduced in a fixed order, in
// double. Logits (N, W), labels (N,) i32; a label the loss cannot use (bce, W = 1: not 0 or 1; else outside [0, W))
// is counted in *bad_labels, and its row adds nothing to the loss or the gradient (as softmax_ce).
//
// bce_with_logits (nn.BCEWithLogitsLoss, mean over all N*W elements), per element with target t:
//   l(x, t) = max(x, 0) - x t + log1p(exp(-|x|));   dl/dx = sigmoid(x) - t
//   W = 1 (2-class data): t = y in {0, 1}.  W = C: t = one_hot(y), as BCEWithLogitsLoss(x, F.one_hot(y, C).float()).
//   loss = sum l / (N W);  dlogits = (sigmoid(x) - t) * scale / (N W)
// mse (nn.MSELoss(x, F.one_hot(y, C).float()), mean over N*C):
//   loss = sum (x - t)^2 / (N C);  dlogits = 2 (x - t) * scale / (N C)
//   Rows with a bad label still count in the N of both means (as softmax_ce's).
// weighted cross_entropy (nn.CrossEntropyLoss(weight=w, label_smoothing=eps), reduction mean), with
// logp = log_softmax(x), ATen's cross_entropy_loss_label_smoothing: the smoothing term is weighted by the class it
// smooths towards (w_c), both terms are divided by the weights of the TARGET classes:
//   A_n = (1 - eps) w_{y_n} (-logp_n[y_n]) + (eps / C) sum_c w_c (-logp_n[c]);    Wt = sum_n w_{y_n}
//   loss = sum_n A_n / Wt
//   dlogits[n][j] = (p_nj ((1 - eps) w_{y_n} + (eps / C) sum_c w_c) - (1 - eps) w_{y_n} [j = y_n] - (eps / C) w_j)
//                   * scale / Wt,   p = softmax(x)
//   Rows with a bad label are left out of Wt too (as ignore_index). A batch with Wt = 0 has loss 0 and gradient 0
//   (PyTorch: 0/0 = NaN); spec validation keeps at least one weight positive.
// Accuracy: argmax (the Accuracy op) for W = C; the binary head predicts 1 iff its logit > 0 (sigmoid > 0.5).
#pragma once
#include <cstdint>

#include "core/graph/act_loss.h"

namespace trctl {

struct LossDesc {
  LossFn fn = LossFn::Mse;
  int64_t rows = 0, width = 0;          // N, W
  double label_smoothing = 0;           // weighted cross-entropy
  const float* class_weights = nullptr;  // (W) weighted cross-entropy
};

// Mean loss of the batch (formulas above).
template <class T>
double loss_fwd_cpu(const LossDesc& d, const T* logits, const int32_t* labels, int64_t* bad_labels = nullptr);

// dlogits (N, W): the gradient of the mean, times scale.
template <class T>
void loss_grad_cpu(const LossDesc& d, const T* logits, const int32_t* labels, T* dlogits, double scale);

// 1-logit binary head: rows whose label is 0 or 1 and equals (logit > 0).
template <class T>
int64_t binary_accuracy_cpu(const T* logits, const int32_t* labels, int64_t n);

}  // namespace trctl
