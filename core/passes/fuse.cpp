// pass_fuse_linear_relu: Linear followed by its only consumer ReLU becomes one Linear with a ReLU epilogue
// (cuBLASLt RELU_BIAS on the CUDA backend). Runs before autodiff, whose rule for the fused op is ReluGrad + Linear.
#include <map>

#include "core/passes/passes.h"

namespace trctl {

Status pass_fuse_linear_relu(Graph& g, Program& p) {
  std::map<ValueId, int> uses;
  for (const auto& n : p.nodes)
    for (ValueId v : n.in) ++uses[v];
  std::map<ValueId, size_t> producer;
  for (size_t i = 0; i < p.nodes.size(); ++i)
    for (ValueId v : p.nodes[i].out) producer[v] = i;

  std::vector<bool> removed(p.nodes.size(), false);
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    Node& relu = p.nodes[i];
    if (relu.op != OpKind::Relu) continue;
    auto it = producer.find(relu.in[0]);
    if (it == producer.end()) continue;
    Node& lin = p.nodes[it->second];
    if (lin.op != OpKind::Linear || lin.attrs.relu || uses[relu.in[0]] != 1) continue;
    if (relu.in[0] == p.logits) continue;
    lin.attrs.relu = true;
    lin.name += "+" + relu.name;
    lin.out[0] = relu.out[0];
    producer[relu.out[0]] = it->second;
    removed[i] = true;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(p.nodes[i]));
  p.nodes = std::move(kept);
  (void)g;
  return ok_status();
}

}  // namespace trctl
