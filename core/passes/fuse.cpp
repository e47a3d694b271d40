// ReLU fusion passes: a ReLU that is the only consumer of its producer's output becomes the producer's epilogue.
// pass_fuse_linear_relu: into Linear (cuBLASLt RELU_BIAS on the CUDA backend). pass_fuse_norm_add_relu: into
// BatchNorm / BatchNormEval (the normalisation kernel applies it) and into residual Adds. Both run before autodiff,
// whose rules for the fused ops mask the incoming gradient with the fused output.
// pass_fuse_bn_add (after them): a residual Add (with or without its fused ReLU) one of whose inputs is the only use
// of a batch norm's output becomes that batch norm's epilogue, Y = relu?(BN(X) + R): the batch norm's own output
// is never written and read back. Saves two passes over the block's output per residual block (forward and eval).
// pass_fold_conv_bias (after autodiff): a Conv2d whose bias-added output is read only by one batch norm (its X; in
// a train program also by that batch norm's backward) stops adding the bias, and the batch norm takes it as a last
// input (attrs.prebias). Train: BN(y + b) = BN(y), so the output and the saved statistics are those of y, and only
// running_mean needs b (updated with mean(y) + b); eval: running_mean - b in place of running_mean. Saves a read
// and a write of the conv output per such layer (the CUDA conv adds its bias in a separate pass). In a train
// program the same identity makes dLoss/db exactly 0 (the loss does not depend on b; the batch norm's dX sums to
// zero per channel), so the bias's gradient node, LinearGradBias over the conv output's gradient (= the batch
// norm's dX), becomes a ZeroFill that reads nothing: no reduction over N*H*W rows per channel, whose result was
// rounding noise around 0, and dX is not kept live for it. The optimizer (weight decay included), clipping, the
// non-finite check and gradient accumulation see an ordinary zero gradient.
// pass_fuse_grad_accumulate (after autodiff): a gradient sum Add(a, b) whose b is the only use of a matrix-product
// dX node (LinearGradInput, pointwise Conv2dGradInput) and whose a exists before that node: the node computes
// dX = dY W + a itself (cuBLASLt's C with beta = 1) and the Add disappears; the planner sees a as its input.
#include <algorithm>
#include <map>

#include "core/passes/passes.h"

namespace trctl {
namespace {

// The node index that produces each value (programs are in topological order).
std::map<ValueId, size_t> producers_of(const Program& p) {
  std::map<ValueId, size_t> producer;
  for (size_t i = 0; i < p.nodes.size(); ++i)
    for (ValueId v : p.nodes[i].out) producer[v] = i;
  return producer;
}

// How many node inputs read each value.
std::map<ValueId, int> use_counts(const Program& p) {
  std::map<ValueId, int> uses;
  for (const auto& n : p.nodes)
    for (ValueId v : n.in) ++uses[v];
  return uses;
}

// Drops the nodes a pass absorbed into others, keeping the order of the rest.
void erase_removed(Program& p, const std::vector<bool>& removed) {
  std::vector<Node> kept;
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(p.nodes[i]));
  p.nodes = std::move(kept);
}

Status fuse_relu_into(Program& p, const std::vector<OpKind>& producers) {
  std::map<ValueId, int> uses = use_counts(p);
  std::map<ValueId, size_t> producer = producers_of(p);
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
  erase_removed(p, removed);
  return ok_status();
}

}  // namespace

bool is_program_io(const Program& p, ValueId v) {
  return v == p.logits || v == p.loss || v == p.correct || v == p.correct5 || v == p.input || v == p.label;
}

bool pointwise_conv(const Node& n) {
  const bool conv = n.op == OpKind::Conv2d || n.op == OpKind::Conv2dGradInput || n.op == OpKind::Conv2dGradWeight;
  return conv && n.attrs.kernel == 1 && n.attrs.stride == 1 && n.attrs.pad == 0 && n.attrs.groups == 1;
}

Status pass_fuse_grad_accumulate(Graph&, Program& p) {
  if (p.kind != ProgramKind::Train) return ok_status();
  std::map<ValueId, int> uses = use_counts(p);
  std::map<ValueId, size_t> producer = producers_of(p);
  std::vector<bool> removed(p.nodes.size(), false);
  for (size_t j = 0; j < p.nodes.size(); ++j) {
    const Node& add = p.nodes[j];
    if (add.op != OpKind::Add || add.attrs.relu || add.in.size() != 2 || add.in[0] == add.in[1]) continue;
    for (int k = 0; k < 2; ++k) {
      const ValueId b = add.in[k], a = add.in[1 - k];
      auto pb = producer.find(b), pa = producer.find(a);
      if (pb == producer.end() || pa == producer.end() || removed[pb->second] || uses[b] != 1) continue;
      Node& dx = p.nodes[pb->second];
      const bool matmul = dx.op == OpKind::LinearGradInput || (dx.op == OpKind::Conv2dGradInput && pointwise_conv(dx));
      if (!matmul || dx.attrs.accumulate || pa->second >= pb->second) continue;  // C must exist before the product
      dx.in.push_back(a);
      dx.attrs.accumulate = true;
      dx.out[0] = add.out[0];
      dx.name += "+" + add.name;
      producer[add.out[0]] = pb->second;  // a later sum of this sum sees where it is now made
      removed[j] = true;
      break;
    }
  }
  erase_removed(p, removed);
  return ok_status();
}

Status pass_fuse_bn_add(Graph& g, Program& p) {
  std::map<ValueId, int> uses = use_counts(p);
  const std::map<ValueId, size_t> producer = producers_of(p);
  auto is_bn = [](const Node& n) { return n.op == OpKind::BatchNorm || n.op == OpKind::BatchNormEval; };
  std::vector<bool> removed(p.nodes.size(), false);
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const Node& add = p.nodes[i];
    if (add.op != OpKind::Add || add.in.size() != 2 || add.in[0] == add.in[1]) continue;
    // The candidate batch norm: unfused, its output used only by this add, and placed after the producer of the
    // other input (so the residual is ready when the fused node runs). Of two candidates the later one wins.
    size_t best = p.nodes.size();
    int residual_side = -1;
    for (int side = 0; side < 2; ++side) {
      auto it = producer.find(add.in[side]);
      if (it == producer.end() || removed[it->second]) continue;
      const Node& bn = p.nodes[it->second];
      if (!is_bn(bn) || bn.attrs.relu || bn.attrs.residual || uses[add.in[side]] != 1) continue;
      if (!(g.values[add.in[0]].shape == g.values[add.in[1]].shape)) continue;
      auto other = producer.find(add.in[1 - side]);
      const bool ready = other == producer.end() || other->second < it->second;
      if (!ready) continue;
      if (best == p.nodes.size() || it->second > best) {
        best = it->second;
        residual_side = 1 - side;
      }
    }
    if (residual_side < 0) continue;
    Node& bn = p.nodes[best];
    bn.in.push_back(add.in[residual_side]);
    bn.attrs.residual = true;
    bn.attrs.relu = add.attrs.relu;
    bn.name += "+" + add.name;
    bn.out[0] = add.out[0];
    removed[i] = true;
  }
  erase_removed(p, removed);
  return ok_status();
}

namespace {

// Train programs: the gradient of a conv bias b folded into the batch norm whose backward is p.nodes[bn_grad_at]
// is exactly zero (BN with batch statistics removes a per-channel shift). Its LinearGradBias, found as the node
// that sums the backward's dX into b's Role::Grad value, becomes a ZeroFill without inputs. A bias used elsewhere
// too (its gradient a sum of contributions) or frozen (no gradient node) is left alone.
void zero_folded_bias_grad(const Graph& g, Program& p, const std::map<ValueId, std::vector<size_t>>& readers,
                           size_t bn_grad_at, ValueId b) {
  const Value& bv = g.values[b];
  if (bv.role != Role::Param || bv.param < 0 || bv.param >= static_cast<int32_t>(g.params.size())) return;
  const ParamInfo& prm = g.params[static_cast<size_t>(bv.param)];
  if (prm.frozen || prm.grad == kNoValue) return;
  const ValueId dx = p.nodes[bn_grad_at].out[0];  // the gradient of the conv output (N,H,W,C)
  auto it = readers.find(dx);
  if (it == readers.end()) return;
  for (size_t r : it->second) {
    Node& n = p.nodes[r];
    if (n.op != OpKind::LinearGradBias || n.in != std::vector<ValueId>{dx} || n.out[0] != prm.grad) continue;
    n.op = OpKind::ZeroFill;
    n.in.clear();
    n.attrs = Attrs{};
    return;
  }
}

}  // namespace

Status pass_fold_conv_bias(Graph& g, Program& p) {
  std::map<ValueId, std::vector<size_t>> readers;  // value -> the nodes that read it, once per input slot
  for (size_t i = 0; i < p.nodes.size(); ++i)
    for (ValueId v : p.nodes[i].in) readers[v].push_back(i);
  auto is_bn = [](const Node& n) { return n.op == OpKind::BatchNorm || n.op == OpKind::BatchNormEval; };
  for (Node& conv : p.nodes) {
    if (conv.op != OpKind::Conv2d || conv.in.size() != 3) continue;
    const ValueId y = conv.out[0];
    if (y == p.logits || y == p.loss) continue;
    // The one batch norm reading y, as its X only; every other reader must be that batch norm's backward, which
    // reads y as its X next to the batch norm's own saved mean (unchanged: the statistics stay those of y).
    size_t bn_at = p.nodes.size();
    bool foldable = true;
    for (size_t r : readers[y])
      if (is_bn(p.nodes[r])) {
        foldable &= bn_at == p.nodes.size();
        bn_at = r;
      }
    if (!foldable || bn_at == p.nodes.size()) continue;
    Node& bn = p.nodes[bn_at];
    if (bn.attrs.prebias || bn.in[0] != y) continue;
    size_t bn_grad_at = p.nodes.size();
    for (size_t r : readers[y]) {
      const Node& n = p.nodes[r];
      const bool its_backward = n.op == OpKind::BatchNormGrad && bn.op == OpKind::BatchNorm && n.in[1] == y &&
                                n.in[0] != y && n.in[3] == bn.out[1] && n.in[4] == bn.out[2];
      if (its_backward) bn_grad_at = r;
      if (r != bn_at && !its_backward) foldable = false;
    }
    const ValueId b = conv.in[2];  // (a batch norm reading y twice, as X and residual, was two readers above)
    if (!foldable || !(g.values[b].shape == g.values[bn.in[1]].shape)) continue;
    conv.in.pop_back();
    bn.in.push_back(b);
    bn.attrs.prebias = true;
    // Batch statistics only (BatchNorm in a train program): with running statistics (BatchNormEval) the shift
    // would pass through, and the bias's gradient would not be zero.
    if (p.kind == ProgramKind::Train && bn.op == OpKind::BatchNorm && bn_grad_at < p.nodes.size())
      zero_folded_bias_grad(g, p, readers, bn_grad_at, b);
  }
  return ok_status();
}

Status pass_fuse_linear_relu(Graph&, Program& p) { return fuse_relu_into(p, {OpKind::Linear}); }

Status pass_fuse_norm_add_relu(Graph&, Program& p) {
  return fuse_relu_into(p, {OpKind::BatchNorm, OpKind::BatchNormEval, OpKind::Add});
}

}  // namespace trctl
