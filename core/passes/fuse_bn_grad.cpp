// pass_fuse_bn_relu_grad (after autodiff): the backward of a batch norm with a fused residual add and ReLU,
// Y = relu(BN(X) + R), is autodiff's ReluGrad(dY, Y) -> G followed by BatchNormGrad(G, X, ...); G, the masked
// gradient, is also R's gradient (a view of it flows to the block's input). The two become one BatchNormGrad with
// attrs.relu and attrs.residual (core/graph/ir.h) that reads dY and Y and writes G as its fourth output from its
// first pass over the tensor, where the ReLU backward was a pass of its own: per residual block and step, one read
// of G and one kernel fewer. The fused node takes the ReluGrad's place in the program (all its inputs are defined
// there), so G is defined where it was. Backends compute bitwise the unfused values.
#include "core/passes/passes.h"

namespace trctl {
namespace {

// The index of the node producing v, or SIZE_MAX.
size_t producer_of(const Program& p, ValueId v) {
  for (size_t i = 0; i < p.nodes.size(); ++i)
    for (ValueId o : p.nodes[i].out)
      if (o == v) return i;
  return SIZE_MAX;
}

// The BatchNormGrad after `from` that reads g as its plain dY and belongs to the forward batch norm f, or SIZE_MAX.
size_t bn_grad_reading(const Program& p, size_t from, ValueId g, const Node& f) {
  for (size_t i = from + 1; i < p.nodes.size(); ++i) {
    const Node& b = p.nodes[i];
    if (b.op == OpKind::BatchNormGrad && !b.attrs.relu && !b.attrs.residual && !b.attrs.pool && b.in.size() == 5 &&
        b.in[0] == g && b.in[1] == f.in[0] && b.in[2] == f.in[1] && b.in[3] == f.out[1] && b.in[4] == f.out[2])
      return i;
  }
  return SIZE_MAX;
}

}  // namespace

Status pass_fuse_bn_relu_grad(Graph& g, Program& p) {
  (void)g;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const Node& r = p.nodes[i];
    if (r.op != OpKind::ReluGrad || r.in.size() != 2 || r.out.size() != 1) continue;
    const ValueId dy = r.in[0], y = r.in[1], gv = r.out[0];
    if (is_program_io(p, gv) || dy == y) continue;
    const size_t fi = producer_of(p, y);
    if (fi == SIZE_MAX) continue;
    const Node& f = p.nodes[fi];
    if (f.op != OpKind::BatchNorm || !f.attrs.relu || !f.attrs.residual || f.attrs.pool || f.out.size() != 3 ||
        f.out[0] != y)
      continue;
    const size_t bi = bn_grad_reading(p, i, gv, f);
    if (bi == SIZE_MAX) continue;
    Node b = std::move(p.nodes[bi]);
    b.in = {dy, b.in[1], b.in[2], b.in[3], b.in[4], y};  // dY, X, gamma, save_mean, save_invstd, Y
    b.out.push_back(gv);                                  // dX, dgamma, dbeta, G
    b.attrs.relu = b.attrs.residual = true;
    b.name += "+relu_grad";
    p.nodes.erase(p.nodes.begin() + static_cast<std::ptrdiff_t>(bi));
    p.nodes[i] = std::move(b);
  }
  return ok_status();
}

}  // namespace trctl
