// ReLU fusion passes: a ReLU that is the only consumer of its producer's output becomes the producer's epilogue.
// pass_fuse_linear_relu: into Linear (cuBLASLt RELU_BIAS on the CUDA backend). pass_fuse_norm_add_relu: into
// BatchNorm / BatchNormEval (the normalisation kernel applies it) and into residual Adds. Both run before autodiff,
// whose rules for the fused ops mask the incoming gradient with the fused output.
#include <algorithm>
#include <map>

#include "core/passes/passes.h"

namespace trctl {
namespace {

Status fuse_relu_into(Program& p, const std::vector<OpKind>& producers) {
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
    if (std::find(producers.begin(), producers.end(), lin.op) == producers.end() || lin.attrs.relu ||
        uses[relu.in[0]] != 1)
      continue;
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
  return ok_status();
}

}  // namespace

Status pass_fuse_linear_relu(Graph&, Program& p) { return fuse_relu_into(p, {OpKind::Linear}); }

Status pass_fuse_norm_add_relu(Graph&, Program& p) {
  return fuse_relu_into(p, {OpKind::BatchNorm, OpKind::BatchNormEval, OpKind::Add});
}

}  // namespace trctl
