// graph_verify: the shape and dtype rule of every op, checked over all programs (run after every pass).
#include "core/graph/build.h"

namespace trctl {
namespace {

struct Checker {
  const Graph& g;
  const Program& p;
  const Node& n;
  std::vector<Error>& errors;

  const Shape& in(size_t i) const { return g.values[n.in[i]].shape; }
  const Shape& out(size_t i) const { return g.values[n.out[i]].shape; }
  void expect(bool cond, const std::string& what) {
    if (!cond)
      errors.push_back({ErrCode::Internal, p.name + "/" + n.name, std::string(to_string(n.op)) + ": " + what});
  }
  bool arity(size_t ins, size_t outs) {
    bool ok = n.in.size() == ins && n.out.size() == outs;
    expect(ok, "expected " + std::to_string(ins) + " inputs and " + std::to_string(outs) + " outputs");
    return ok;
  }
  bool arity_linear() {
    bool ok = (n.in.size() == 2 || n.in.size() == 3) && n.out.size() == 1;
    expect(ok, "expected X, W[, b] -> Y");
    return ok;
  }

  // X (N,H,W,C), W (K,R,R,C/groups), Y (N,P,Q,K) under the node's geometry.
  bool conv_shape_ok(const Shape& x, const Shape& w, const Shape& y) const {
    const Attrs& a = n.attrs;
    if (x.dims.size() != 4 || w.dims.size() != 4 || y.dims.size() != 4 || a.groups < 1) return false;
    return w.dims[1] == a.kernel && w.dims[2] == a.kernel && x.dims[3] == w.dims[3] * a.groups &&
           y.dims[0] == x.dims[0] && y.dims[3] == w.dims[0] && w.dims[0] % a.groups == 0 &&
           y.dims[1] == window_out_size(x.dims[1], a.kernel, a.stride, a.pad, a.dilation) &&
           y.dims[2] == window_out_size(x.dims[2], a.kernel, a.stride, a.pad, a.dilation);
  }
  bool pool_shape_ok(const Shape& x, const Shape& y) const {
    const Attrs& a = n.attrs;
    return x.dims.size() == 4 && y.dims.size() == 4 && y.dims[0] == x.dims[0] && y.dims[3] == x.dims[3] &&
           y.dims[1] == window_out_size(x.dims[1], a.kernel, a.stride, a.pad, 1) &&
           y.dims[2] == window_out_size(x.dims[2], a.kernel, a.stride, a.pad, 1);
  }
  // A fused max pool (attrs.pool): after a ReLU, no residual, a window fused_pool_window_ok accepts.
  bool bn_pool_ok() {
    const Attrs& a = n.attrs;
    const bool ok = a.relu && !a.residual && fused_pool_window_ok(a);
    expect(ok, "a fused max pool needs attrs.relu, no residual, a window of at most 256 elements, 1 <= stride <= "
               "kernel and pad <= kernel/2");
    return ok;
  }
  // y (N,P,Q,C) is x (N,H,W,C) max-pooled with the node's kernel, stride and pad.
  bool bn_pooled(const Shape& x, const Shape& y) const {
    const Attrs& a = n.attrs;
    if (x.dims.size() != 4) return false;
    const int64_t p = window_out_size(x.dims[1], a.kernel, a.stride, a.pad, 1);
    const int64_t q = window_out_size(x.dims[2], a.kernel, a.stride, a.pad, 1);
    return p >= 1 && q >= 1 && y == Shape{{x.dims[0], p, q, x.dims[3]}};
  }
  // in(x) is (..., C) and the `count` inputs after it are (C).
  bool bn_shapes_ok(size_t x, size_t count) const {
    const Shape c{{in(x).dims.back()}};
    for (size_t i = x + 1; i <= x + count && i < n.in.size(); ++i)
      if (!(in(i) == c)) return false;
    return true;
  }

  void check() {
    switch (n.op) {
      case OpKind::Flatten:
        if (arity(1, 1)) expect(in(0).numel() == out(0).numel(), "view changes the element count");
        break;
      case OpKind::Linear:
        if (!arity_linear()) break;
        expect(in(0).dims.size() == 2 && in(1).dims.size() == 2 && in(0).dims[1] == in(1).dims[1],
               "X (N,K) and W (M,K) disagree: " + in(0).str() + " " + in(1).str());
        expect(out(0) == Shape{{in(0).dims[0], in(1).dims[0]}}, "Y must be (N,M)");
        if (n.in.size() == 3) expect(in(2) == Shape{{in(1).dims[0]}}, "b must be (M)");
        break;
      case OpKind::Relu:
      case OpKind::Dropout:
      case OpKind::DropoutGrad:
        if (arity(1, 1)) expect(in(0) == out(0), "shape must be preserved");
        break;
      case OpKind::ReluGrad:
      case OpKind::Add:
        if (arity(2, 1)) expect(in(0) == in(1) && in(0) == out(0), "shapes must agree");
        break;
      case OpKind::SoftmaxCrossEntropy:
      case OpKind::Accuracy:  // -> top-1 and top-5 counts
        if (arity(2, n.op == OpKind::Accuracy ? 2 : 1))
          expect(in(0).dims.size() == 2 && in(1) == Shape{{in(0).dims[0]}} && out(0).dims.empty(),
                 "logits (N,C), labels (N) -> scalar");
        break;
      case OpKind::SoftmaxCrossEntropyGrad:
        if (arity(2, 1)) expect(out(0) == in(0), "dlogits must have the logits' shape");
        break;
      case OpKind::Activation:
        if (arity(1, 1)) expect(in(0) == out(0), "shape must be preserved");
        break;
      case OpKind::ActivationGrad:  // dY, X or Y -> dX
        if (arity(2, 1)) expect(in(0) == in(1) && in(0) == out(0), "shapes must agree");
        break;
      case OpKind::Loss:  // logits (N,W), labels (N) -> scalar; weighted CE: one weight per logit column
        if (arity(2, 1))
          expect(in(0).dims.size() == 2 && in(1) == Shape{{in(0).dims[0]}} && out(0).dims.empty() &&
                     (n.attrs.loss != LossFn::WeightedCrossEntropy ||
                      static_cast<int64_t>(n.attrs.class_weights.size()) == in(0).dims[1]),
                 "logits (N,W), labels (N) -> scalar (weighted cross-entropy: W class weights)");
        break;
      case OpKind::LossGrad:
        if (arity(2, 1)) expect(out(0) == in(0), "dlogits must have the logits' shape");
        break;
      case OpKind::BinaryAccuracy:  // -> correct [, the top-5 count where Accuracy has one]
        if (n.in.size() == 2 && (n.out.size() == 1 || n.out.size() == 2))
          expect(in(0).dims.size() == 2 && in(0).dims[1] == 1 && in(1) == Shape{{in(0).dims[0]}} &&
                     out(0).dims.empty(),
                 "logits (N,1), labels (N) -> scalar");
        else
          expect(false, "expected logits, labels -> correct [, correct5]");
        break;
      case OpKind::MetricAccumulate:
        arity(3, 4);
        break;
      case OpKind::LinearGradInput:  // dY (N,M), W (M,K) [, C (N,K)] -> dX (N,K)
        if (arity(n.attrs.accumulate ? 3 : 2, 1))
          expect(in(0).dims[1] == in(1).dims[0] && out(0) == Shape{{in(0).dims[0], in(1).dims[1]}} &&
                     (!n.attrs.accumulate || in(2) == out(0)),
                 "bad shapes");
        break;
      case OpKind::LinearGradWeight:  // dY (N,M), X (N,K) -> dW (M,K)
        if (arity(2, 1))
          expect(in(0).dims[0] == in(1).dims[0] && out(0) == Shape{{in(0).dims[1], in(1).dims[1]}}, "bad shapes");
        break;
      case OpKind::LinearGradBias:  // dY (..., M) -> db (M)
        if (arity(1, 1)) expect(out(0) == Shape{{in(0).dims.back()}}, "bad shapes");
        break;
      case OpKind::ZeroFill:  // -> Y (any shape): its stored bytes zeroed
        if (arity(0, 1)) expect(g.values[n.out[0]].alias_of == kNoValue, "Y must have storage of its own (not a view)");
        break;
      case OpKind::Conv2d:
        if (n.in.size() < 2 || n.in.size() > 3 || !arity(n.in.size(), 1)) break;
        expect(conv_shape_ok(in(0), in(1), out(0)), "X " + in(0).str() + ", W " + in(1).str() + " -> Y " +
                                                         out(0).str() + " disagree with the geometry");
        if (n.in.size() == 3) expect(in(2) == Shape{{in(1).dims[0]}}, "b must be (K)");
        break;
      case OpKind::Conv2dGradInput:  // dY, W [, C] -> dX
        if (arity(n.attrs.accumulate ? 3 : 2, 1))
          expect(conv_shape_ok(out(0), in(1), in(0)) && (!n.attrs.accumulate || in(2) == out(0)), "bad shapes");
        break;
      case OpKind::Conv2dGradWeight:  // dY, X -> dW
        if (arity(2, 1)) expect(conv_shape_ok(in(1), out(0), in(0)), "bad shapes");
        break;
      case OpKind::BatchNorm:  // X, gamma, beta, running_mean, running_var [, R] [, b] -> Y, save_mean, save_invstd
                               //   [, argmax (attrs.pool)]
        if (n.attrs.pool && !bn_pool_ok()) break;
        if (arity(5 + n.attrs.residual + n.attrs.prebias, n.attrs.pool ? 4 : 3))
          expect(bn_shapes_ok(0, 4) && (n.attrs.pool ? bn_pooled(in(0), out(0)) : out(0) == in(0)) &&
                     out(1) == in(1) && out(2) == in(1) && (!n.attrs.residual || in(5) == in(0)) &&
                     (!n.attrs.prebias || in(n.in.size() - 1) == in(1)) &&
                     (!n.attrs.pool || (out(3) == out(0) && g.values[n.out[3]].dtype == DType::U8)),
                 "bad shapes");
        break;
      case OpKind::BatchNormEval:  // X, gamma, beta, running_mean, running_var [, R] [, b] -> Y
        if (n.attrs.pool && !bn_pool_ok()) break;
        if (arity(5 + n.attrs.residual + n.attrs.prebias, 1))
          expect(bn_shapes_ok(0, 4) && (n.attrs.pool ? bn_pooled(in(0), out(0)) : out(0) == in(0)) &&
                     (!n.attrs.residual || in(5) == in(0)) && (!n.attrs.prebias || in(n.in.size() - 1) == in(1)),
                 "bad shapes");
        break;
      case OpKind::BatchNormGrad:  // dY, X, gamma, save_mean, save_invstd [, Y] -> dX, dgamma, dbeta
        if (n.attrs.pool) {        // pooled dY, X, gamma, save_mean, save_invstd, beta, argmax -> dX, dgamma, dbeta
          if (bn_pool_ok() && arity(7, 3))
            expect(bn_pooled(in(1), in(0)) && bn_shapes_ok(1, 3) && in(5) == in(2) && in(6) == in(0) &&
                       g.values[n.in[6]].dtype == DType::U8 && out(0) == in(1) && out(1) == in(2) && out(2) == in(2),
                   "bad shapes");
          break;
        }
        if (n.attrs.residual && !n.attrs.relu) {
          expect(false, "a batch-norm backward with attrs.residual needs attrs.relu (its G is the masked dY)");
          break;
        }
        if (arity(n.attrs.relu ? 6 : 5, n.attrs.residual ? 4 : 3))  // [, G (rows,c)] when residual
          expect(in(0) == in(1) && bn_shapes_ok(1, 3) && out(0) == in(1) && out(1) == in(2) && out(2) == in(2) &&
                     (!n.attrs.residual || out(3) == in(0)),
                 "bad shapes");
        break;
      case OpKind::MaxPool:
      case OpKind::AvgPool: {
        const size_t outs = n.op == OpKind::MaxPool && n.out.size() == 2 ? 2 : 1;
        if (arity(1, outs)) expect(pool_shape_ok(in(0), out(0)) && (outs == 1 || out(1) == out(0)), "bad shapes");
        break;
      }
      case OpKind::MaxPoolGrad:  // dY, X [, argmax] -> dX
        if (arity(n.in.size() == 3 ? 3 : 2, 1))
          expect(pool_shape_ok(in(1), in(0)) && out(0) == in(1) && (n.in.size() == 2 || in(2) == in(0)), "bad shapes");
        break;
      case OpKind::AvgPoolGrad:  // dY -> dX
        if (arity(1, 1)) expect(pool_shape_ok(out(0), in(0)), "bad shapes");
        break;
      case OpKind::GlobalAvgPool:
        if (arity(1, 1))
          expect(in(0).dims.size() == 4 && out(0) == Shape{{in(0).dims[0], in(0).dims[3]}}, "bad shapes");
        break;
      case OpKind::GlobalAvgPoolGrad:
        if (arity(1, 1))
          expect(out(0).dims.size() == 4 && in(0) == Shape{{out(0).dims[0], out(0).dims[3]}}, "bad shapes");
        break;
      case OpKind::GradAccumulate: {  // grads..., accumulators... -> [grads...,] accumulators...
        const size_t k = n.in.size() / 2;
        expect(n.in.size() % 2 == 0 && n.out.size() == (n.attrs.flush ? 2 * k : k),
               "expected one accumulator per gradient, in and out");
        for (size_t i = 0; i < k && n.in.size() % 2 == 0; ++i) {
          expect(in(i) == in(k + i) && g.values[n.in[k + i]].role == Role::GradAccum, "gradient/accumulator pair");
          if (i < n.out.size()) expect(n.out[i] == n.in[n.attrs.flush ? i : k + i], "outputs are the inputs, in place");
        }
        break;
      }
      case OpKind::OptimizerStep:
        expect(n.in.size() == n.out.size(), "one grad per param");
        for (size_t i = 0; i < n.in.size() && i < n.out.size(); ++i) expect(in(i) == out(i), "grad/param shape");
        break;
    }
  }
};

// A weight gradient's overlap window (Attrs::overlap): inside the program, of overlap_window_ops, none of which
// reads its outputs.
void overlap_window_check(const Program& p, size_t i, std::vector<Error>& errors) {
  const Node& n = p.nodes[i];
  auto fail = [&](const std::string& why) {
    errors.push_back(
        {ErrCode::Internal, p.name + "/" + n.name, "overlap " + std::to_string(n.attrs.overlap) + ": " + why});
  };
  if (n.op != OpKind::Conv2dGradWeight || n.attrs.overlap < 0) return fail("only a weight gradient overlaps");
  if (i + static_cast<size_t>(n.attrs.overlap) >= p.nodes.size()) return fail("the window passes the program's end");
  for (size_t q = i + 1; q <= i + static_cast<size_t>(n.attrs.overlap); ++q) {
    const Node& w = p.nodes[q];
    if (!overlap_window_op(w.op)) return fail(std::string("the window holds a ") + to_string(w.op));
    if (reads_any(w, n.out)) return fail(w.name + " reads its output");
  }
}

}  // namespace

Status graph_verify(const Graph& g) {
  std::vector<Error> errors;
  for (const auto& p : g.programs) {
    for (const auto& n : p.nodes) {
      bool ids_ok = true;
      for (ValueId v : n.in) ids_ok &= v >= 0 && v < static_cast<ValueId>(g.values.size());
      for (ValueId v : n.out) ids_ok &= v >= 0 && v < static_cast<ValueId>(g.values.size());
      if (!ids_ok) {
        errors.push_back({ErrCode::Internal, p.name + "/" + n.name, "value id out of range"});
        continue;
      }
      Checker{g, p, n, errors}.check();
    }
    for (size_t i = 0; i < p.nodes.size(); ++i)
      if (p.nodes[i].attrs.overlap != 0) overlap_window_check(p, i, errors);
  }
  if (!errors.empty()) return errors;
  return ok_status();
}

}  // namespace trctl
