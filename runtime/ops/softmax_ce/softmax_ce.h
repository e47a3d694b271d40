// Softmax cross-entropy with label smoothing (PyTorch CrossEntropyLoss(label_smoothing=eps), mean reduction),
// its gradient, and top-1 accuracy; CPU reference. Rows are reduced in a fixed order (deterministic).
#pragma once
#include <cstdint>

namespace trctl {

// logits (N,C), labels (N,) -> mean over N of (1-eps)*(-logp[y]) + eps*mean_c(-logp[c]).
// A label outside [0, C) is counted in *bad_labels (if given) and that row contributes 0.
template <class T>
double softmax_ce_fwd_cpu(const T* logits, const int32_t* labels, int64_t n, int64_t c, double eps,
                          int64_t* bad_labels = nullptr);

// dlogits (N,C) = (softmax - ((1-eps)*onehot(y) + eps/C)) * scale / N.
template <class T>
void softmax_ce_grad_cpu(const T* logits, const int32_t* labels, T* dlogits, int64_t n, int64_t c, double eps,
                         double scale);

// Number of rows whose first maximal logit is the label.
template <class T>
int64_t accuracy_top1_cpu(const T* logits, const int32_t* labels, int64_t n, int64_t c);

// Number of rows whose label is among the k largest logits, as torch.topk(logits, min(k, C)) counts them, with
// ties decided in the label's favour: a row is correct when fewer than min(k, C) logits are strictly greater than
// the label's (torch.topk orders equal values in an implementation-defined way; this rule is deterministic). A
// label outside [0, C) is never correct. k = 1 differs from accuracy_top1_cpu only on ties.
template <class T>
int64_t accuracy_topk_cpu(const T* logits, const int32_t* labels, int64_t n, int64_t c, int64_t k);

}  // namespace trctl
