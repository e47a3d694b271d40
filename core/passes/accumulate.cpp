// pass_accumulate_insert: gradient accumulation over train.accumulate_steps micro-batches. Each train program gets
// one GradAccumulate node after its backward pass: the micro-batch program ("train_micro") adds its gradients into
// the accumulators; the flush programs ("train", "train_last") add the accumulators into their gradients and clear
// them, so that the OptimizerStep that optimizer_insert appends next reads the sum. A no-op with one step.
#include "core/passes/passes.h"

namespace trctl {

Status pass_accumulate_insert(Graph& g, Program& p) {
  if (g.accumulate_steps <= 1 || p.kind != ProgramKind::Train) return ok_status();
  Node n;
  n.op = OpKind::GradAccumulate;
  n.name = p.micro ? "grad_accumulate.add" : "grad_accumulate.flush";
  n.attrs.flush = !p.micro;
  std::vector<ValueId> grads, accums;
  for (ParamInfo& prm : g.params) {
    if (prm.grad == kNoValue) continue;  // a frozen parameter: no gradient to accumulate
    if (prm.accum == kNoValue) {         // shared by every train program, like the gradient
      Value v;
      v.name = prm.name + ".grad_accum";
      v.shape = g.values[prm.grad].shape;
      v.dtype = g.values[prm.grad].dtype;
      v.role = Role::GradAccum;
      v.param = g.values[prm.value].param;
      prm.accum = g.add_value(v);
    }
    grads.push_back(prm.grad);
    accums.push_back(prm.accum);
  }
  if (grads.empty()) return ok_status();
  n.in = grads;
  n.in.insert(n.in.end(), accums.begin(), accums.end());
  if (n.attrs.flush) n.out = grads;
  n.out.insert(n.out.end(), accums.begin(), accums.end());
  p.nodes.push_back(std::move(n));
  return ok_status();
}

}  // namespace trctl
