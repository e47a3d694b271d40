// pass_overlap_wgrad (train.conv_wgrad_overlap N > 0; the last pass, after optimizer_insert): each convolution's
// weight gradient in a train program gets Attrs::overlap, the number of nodes after it that may run beside it — up
// to and including the N-th data gradient (Conv2dGradInput) after it, stopping before the first node that reads
// its outputs or is not an overlap_window_op (the optimizer, gradient accumulation). In VGG's backward, per layer
// BatchNormGrad -> Conv2dGradWeight -> ZeroFill (the folded bias) -> Conv2dGradInput, N = 1 lets the weight
// gradient overlap its own layer's data gradient; N = 2 also the previous layer's batch-norm backward and data
// gradient. The memory plan then keeps the weight gradient's inputs (dY, X) live through its window, so a backend
// may run it late; run in order the step computes the same values. Pointwise convolutions (GEMMs) and N = 0 get
// none.
#include "core/passes/passes.h"

namespace trctl {

Status pass_overlap_wgrad(Graph& g, Program& p, int data_gradients) {
  (void)g;
  if (data_gradients <= 0 || p.kind != ProgramKind::Train) return ok_status();
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    Node& n = p.nodes[i];
    if (n.op != OpKind::Conv2dGradWeight || pointwise_conv(n)) continue;
    int seen = 0;
    size_t q = i + 1;
    for (; q < p.nodes.size() && seen < data_gradients; ++q) {
      const Node& w = p.nodes[q];
      if (reads_any(w, n.out) || !overlap_window_op(w.op)) break;
      if (w.op == OpKind::Conv2dGradInput) ++seen;
    }
    n.attrs.overlap = static_cast<int32_t>(q - i - 1);
  }
  return ok_status();
}

}  // namespace trctl
