// pass_fuse_bn_pool (after autodiff): a batch norm with a fused ReLU and no residual whose output Y is read only by
// one max pool with k x k windows, stride s <= k and padding p <= k/2 (k*k <= 256, so that the u8 argmax holds the
// offset in the window) takes the pool in: VGG's tiling 2x2/2 pools and ResNet's overlapping 3x3/2 pad-1 stem pool.
// The batch norm outputs the pooled Y (and, in a train program, the pool's argmax) and the full-resolution Y is
// never stored (attrs.pool with the pool's kernel, stride and pad, core/graph/ir.h). In a train program the only
// other readers of Y must be the pool's backward (MaxPoolGrad reading Y and the argmax) and the batch norm's backward
// (reading Y for its ReLU mask, and MaxPoolGrad's output, read by nothing else, as its dY); these two become one
// BatchNormGrad that reads the pooled dY and the argmax (each element's gradient is the sum of dY over the windows
// whose argmax it is, in MaxPoolGrad's order and precision) and recomputes the ReLU mask from X with beta. Saves,
// per such layer and step, the write and read of Y in the forward and the write and two reads of the
// full-resolution dY in the backward.
#include <cstdint>
#include <map>

#include "core/graph/build.h"
#include "core/passes/passes.h"

namespace trctl {
namespace {

bool is_bn(const Node& n) { return n.op == OpKind::BatchNorm || n.op == OpKind::BatchNormEval; }

// A max pool over y (N,H,W,C) that the fused kernels can run: a window fused_pool_window_ok accepts, and N*H*W,
// N*P*Q below 2^31 (the backward's 32-bit row positions).
bool pool_fusable(const Graph& g, const Node& pool, ValueId y) {
  const Attrs& a = pool.attrs;
  const Shape& s = g.values[y].shape;
  if (pool.op != OpKind::MaxPool || pool.in.size() != 1 || s.dims.size() != 4 || !fused_pool_window_ok(a))
    return false;
  const int64_t p = window_out_size(s.dims[1], a.kernel, a.stride, a.pad, 1);
  const int64_t q = window_out_size(s.dims[2], a.kernel, a.stride, a.pad, 1);
  constexpr int64_t kRowLimit = int64_t{1} << 31;
  return p >= 1 && q >= 1 && s.dims[0] * s.dims[1] * s.dims[2] < kRowLimit && s.dims[0] * p * q < kRowLimit;
}

struct Readers {
  std::map<ValueId, std::vector<size_t>> of;  // value -> reading nodes, once per input slot
  std::map<ValueId, size_t> producer;
  explicit Readers(const Program& p) {
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      for (ValueId v : p.nodes[i].in) of[v].push_back(i);
      for (ValueId v : p.nodes[i].out) producer[v] = i;
    }
  }
  const std::vector<size_t>& at(ValueId v) const {
    static const std::vector<size_t> none;
    auto it = of.find(v);
    return it == of.end() ? none : it->second;
  }
};

// The fusion found for one batch norm: the pool, and in a train program the two backward nodes (or none, when
// nothing flows back into the batch norm).
struct BnPool {
  size_t bn = 0, pool = 0;
  size_t pool_grad = SIZE_MAX, bn_grad = SIZE_MAX;
};

// Whether the batch norm at `at` qualifies, and its partners; see the file comment.
bool find_bn_pool(const Graph& g, const Program& p, const Readers& r, size_t at, BnPool& f) {
  const Node& bn = p.nodes[at];
  if (!is_bn(bn) || !bn.attrs.relu || bn.attrs.residual || bn.attrs.pool) return false;
  const ValueId y = bn.out[0];
  if (is_program_io(p, y) || g.values[y].dtype == DType::U8) return false;
  f = BnPool{};
  f.bn = at;
  size_t pools = 0;
  for (size_t i : r.at(y))
    if (p.nodes[i].op == OpKind::MaxPool) ++pools, f.pool = i;
  if (pools != 1 || !pool_fusable(g, p.nodes[f.pool], y)) return false;
  const Node& pool = p.nodes[f.pool];
  const bool train = bn.op == OpKind::BatchNorm;
  if (train != (pool.out.size() == 2)) return false;  // a train pool records its argmax, an eval pool does not
  for (ValueId v : pool.out)
    if (is_program_io(p, v)) return false;
  for (size_t i : r.at(y)) {
    const Node& n = p.nodes[i];
    if (i == f.pool) continue;
    if (!train) return false;
    if (n.op == OpKind::MaxPoolGrad && n.in.size() == 3 && n.in[1] == y && n.in[0] != y && n.in[2] == pool.out[1] &&
        f.pool_grad == SIZE_MAX) {
      f.pool_grad = i;
    } else if (n.op == OpKind::BatchNormGrad && n.attrs.relu && !n.attrs.pool && n.in.size() == 6 && n.in[5] == y &&
               n.in[0] != y && n.in[1] == bn.in[0] && n.in[3] == bn.out[1] && n.in[4] == bn.out[2] &&
               f.bn_grad == SIZE_MAX) {
      f.bn_grad = i;
    } else {
      return false;  // another reader needs the full-resolution Y
    }
  }
  if ((f.pool_grad == SIZE_MAX) != (f.bn_grad == SIZE_MAX)) return false;
  if (f.pool_grad == SIZE_MAX) return true;
  // The batch norm's backward reads MaxPoolGrad's output as its dY, and nothing else reads that output.
  const Node& pg = p.nodes[f.pool_grad];
  const Node& bg = p.nodes[f.bn_grad];
  const ValueId dy = pg.out[0];
  if (bg.in[0] != dy || r.at(dy).size() != 1 || is_program_io(p, dy) || f.pool_grad > f.bn_grad) return false;
  return r.at(pool.out[1]) == std::vector<size_t>{f.pool_grad};  // the argmax: read by the pool's backward only
}

}  // namespace

Status pass_fuse_bn_pool(Graph& g, Program& p) {
  const Readers r(p);
  std::vector<bool> removed(p.nodes.size(), false);
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    BnPool f;
    if (!find_bn_pool(g, p, r, i, f)) continue;
    Node& bn = p.nodes[i];
    const Node& pool = p.nodes[f.pool];
    bn.attrs.pool = true;
    bn.attrs.kernel = pool.attrs.kernel;
    bn.attrs.stride = pool.attrs.stride;
    bn.attrs.pad = pool.attrs.pad;
    bn.out[0] = pool.out[0];                                              // (N,P,Q,C)
    if (bn.op == OpKind::BatchNorm) bn.out.push_back(pool.out[1]);       // argmax (N,P,Q,C) u8
    bn.name += "+" + pool.name;
    removed[f.pool] = true;
    if (f.bn_grad == SIZE_MAX) continue;
    const Node& pg = p.nodes[f.pool_grad];
    Node& bg = p.nodes[f.bn_grad];
    // pooled dY, X, gamma, save_mean, save_invstd, beta, argmax
    bg.in = {pg.in[0], bg.in[1], bg.in[2], bg.in[3], bg.in[4], bn.in[2], pool.out[1]};
    bg.attrs.pool = true;
    bg.attrs.kernel = pool.attrs.kernel;
    bg.attrs.stride = pool.attrs.stride;
    bg.attrs.pad = pool.attrs.pad;
    bg.name += "+" + pg.name;
    removed[f.pool_grad] = true;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(p.nodes[i]));
  p.nodes = std::move(kept);
  return ok_status();
}

}  // namespace trctl
