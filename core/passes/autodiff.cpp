// pass_autodiff: reverse-mode differentiation of one train program. Walks the forward nodes backwards, applies
// each op's rule, and sums the contributions to values used more than once. Parameter gradients are written into
// their Role::Grad values; only values that depend on a trainable parameter get gradients (a frozen parameter
// (model.freeze) gets none, nor do the activations before the first trainable layer).
#include <array>
#include <map>
#include <set>

#include "core/passes/passes.h"

namespace trctl {
namespace {

struct Autodiff {
  Graph& g;
  Program& p;
  std::vector<Node> bwd;
  std::map<ValueId, std::vector<ValueId>> contrib;  // value -> gradient contributions
  std::set<ValueId> needs_grad;

  ValueId grad_value(ValueId of, const std::string& suffix) {
    Value v;
    v.name = g.values[of].name + suffix;
    v.shape = g.values[of].shape;
    v.dtype = g.values[of].dtype;
    return g.add_value(v);
  }

  void emit(OpKind op, std::vector<ValueId> in, ValueId out, const std::string& name, Attrs a = {}) {
    Node n;
    n.op = op;
    n.in = std::move(in);
    n.out = {out};
    n.name = name;
    n.attrs = a;
    bwd.push_back(std::move(n));
  }

  // Adds a gradient contribution for `of` computed by `op(in)`.
  void contribute(ValueId of, OpKind op, std::vector<ValueId> in, const std::string& name, Attrs a = {}) {
    if (!needs_grad.count(of)) return;
    ValueId d = grad_value(of, ".grad" + std::to_string(contrib[of].size()));
    emit(op, std::move(in), d, name, a);
    contrib[of].push_back(d);
  }

  // The summed gradient of `v`, or kNoValue if nothing flows into it.
  ValueId total(ValueId v, ValueId into = kNoValue) {
    auto it = contrib.find(v);
    if (it == contrib.end() || it->second.empty()) return kNoValue;
    std::vector<ValueId>& c = it->second;
    if (into != kNoValue && c.size() == 1) {  // write the only contribution straight into `into`
      for (auto& n : bwd)
        for (auto& o : n.out)
          if (o == c[0]) o = into;
      c[0] = into;
      return into;
    }
    ValueId acc = c[0];
    for (size_t i = 1; i < c.size(); ++i) {
      ValueId s = (i + 1 == c.size() && into != kNoValue) ? into : grad_value(v, ".gradsum" + std::to_string(i));
      emit(OpKind::Add, {acc, c[i]}, s, g.values[v].name + ".gradsum");
      acc = s;
    }
    c = {acc};
    return acc;
  }

  // A gradient passed through unchanged (residual add): a view of dy, no kernel.
  void pass_through(ValueId of, ValueId dy, const std::string& name) {
    if (!needs_grad.count(of)) return;
    contribute(of, OpKind::Flatten, {dy}, name);
    g.values[contrib[of].back()].alias_of = dy;
  }

  // Batch norm (train): one node computes dX, dgamma and dbeta (they share the two per-channel reductions).
  // With a fused residual (Y = relu?(BN(X) + R)), the masked gradient is materialised once: R's gradient is a view
  // of it and the batch-norm backward takes it unmasked (the same nodes as the unfused add + batch norm).
  void batch_norm_rule(const Node& n, ValueId dy) {
    Node b;
    b.op = OpKind::BatchNormGrad;
    b.name = n.name + ".grad";
    b.attrs = n.attrs;
    if (n.attrs.residual) {
      b.attrs.residual = false;
      b.attrs.relu = false;
      if (n.attrs.relu) {
        const ValueId dz = grad_value(n.out[0], ".pre_relu_grad");
        emit(OpKind::ReluGrad, {dy, n.out[0]}, dz, n.name + ".relu_grad");
        dy = dz;
      }
      pass_through(n.in[5], dy, n.name + ".grad_residual");
    }
    b.in = {dy, n.in[0], n.in[1], n.out[1], n.out[2]};
    if (b.attrs.relu) b.in.push_back(n.out[0]);
    const std::array<ValueId, 3> of = {n.in[0], n.in[1], n.in[2]};
    for (ValueId v : of) {
      ValueId d = grad_value(v, ".grad" + std::to_string(contrib[v].size()));
      b.out.push_back(d);
      if (needs_grad.count(v)) contrib[v].push_back(d);
      else if (v != n.in[0]) g.values[d].full_precision = true;  // a frozen gamma/beta: written in f32, unused
    }
    bwd.push_back(std::move(b));
  }

  // Gradient accumulation over k micro-batches differentiates loss / k (the logged loss stays the batch mean).
  float loss_grad_scale() const {
    return g.accumulate_steps > 1 ? 1.0f / static_cast<float>(g.accumulate_steps) : 1.0f;
  }

  void mark_needs_grad() {
    for (const auto& prm : g.params)
      if (!prm.frozen) needs_grad.insert(prm.value);
    for (const auto& n : p.nodes) {
      bool any = false;
      for (ValueId v : n.in) any |= needs_grad.count(v) > 0;
      if (any)
        for (ValueId v : n.out) needs_grad.insert(v);
    }
  }

  void rule(const Node& n) {
    const std::string& nm = n.name;
    switch (n.op) {
      case OpKind::SoftmaxCrossEntropy: {
        Attrs a;
        a.label_smoothing = n.attrs.label_smoothing;
        a.grad_scale = loss_grad_scale();
        contribute(n.in[0], OpKind::SoftmaxCrossEntropyGrad, {n.in[0], n.in[1]}, nm + ".grad", a);
        return;
      }
      case OpKind::Loss: {
        Attrs a = n.attrs;
        a.grad_scale = loss_grad_scale();
        contribute(n.in[0], OpKind::LossGrad, {n.in[0], n.in[1]}, nm + ".grad", a);
        return;
      }
      case OpKind::Accuracy:
      case OpKind::BinaryAccuracy:
      case OpKind::MetricAccumulate:
        return;
      default:
        break;
    }
    ValueId dy = total(n.out[0]);
    if (dy == kNoValue) return;
    switch (n.op) {
      case OpKind::Flatten:
        contribute(n.in[0], OpKind::Flatten, {dy}, nm + ".grad");
        if (!g.values.empty() && !contrib[n.in[0]].empty()) g.values[contrib[n.in[0]].back()].alias_of = dy;
        return;
      case OpKind::Relu:
        contribute(n.in[0], OpKind::ReluGrad, {dy, n.out[0]}, nm + ".grad");
        return;
      case OpKind::Dropout:
        contribute(n.in[0], OpKind::DropoutGrad, {dy}, nm + ".grad", n.attrs);
        return;
      case OpKind::Activation: {  // the backward reads Y (sigmoid, tanh) or X (the others), which stays live
        Attrs a;
        a.act = n.attrs.act;
        a.act_param = n.attrs.act_param;
        const ValueId saved = act_grad_uses_output(n.attrs.act) ? n.out[0] : n.in[0];
        contribute(n.in[0], OpKind::ActivationGrad, {dy, saved}, nm + ".grad", a);
        return;
      }
      case OpKind::Conv2d:
        contribute(n.in[1], OpKind::Conv2dGradWeight, {dy, n.in[0]}, nm + ".grad_weight", n.attrs);
        if (n.in.size() == 3) contribute(n.in[2], OpKind::LinearGradBias, {dy}, nm + ".grad_bias");
        contribute(n.in[0], OpKind::Conv2dGradInput, {dy, n.in[1]}, nm + ".grad_input", n.attrs);
        return;
      case OpKind::BatchNorm:
        batch_norm_rule(n, dy);
        return;
      case OpKind::MaxPool: {
        std::vector<ValueId> in = {dy, n.in[0]};
        if (n.out.size() == 2) in.push_back(n.out[1]);  // the recorded argmax
        contribute(n.in[0], OpKind::MaxPoolGrad, in, nm + ".grad", n.attrs);
        return;
      }
      case OpKind::AvgPool:
        contribute(n.in[0], OpKind::AvgPoolGrad, {dy}, nm + ".grad", n.attrs);
        return;
      case OpKind::GlobalAvgPool:
        contribute(n.in[0], OpKind::GlobalAvgPoolGrad, {dy}, nm + ".grad");
        return;
      case OpKind::Add: {
        ValueId dz = dy;
        if (n.attrs.relu) {
          dz = grad_value(n.out[0], ".pre_relu_grad");
          emit(OpKind::ReluGrad, {dy, n.out[0]}, dz, nm + ".relu_grad");
        }
        pass_through(n.in[0], dz, nm + ".grad_a");
        pass_through(n.in[1], dz, nm + ".grad_b");
        return;
      }
      case OpKind::Linear: {
        ValueId dz = dy;
        if (n.attrs.relu) {
          dz = grad_value(n.out[0], ".pre_relu_grad");
          emit(OpKind::ReluGrad, {dy, n.out[0]}, dz, nm + ".relu_grad");
        }
        contribute(n.in[1], OpKind::LinearGradWeight, {dz, n.in[0]}, nm + ".grad_weight");
        if (n.in.size() == 3) contribute(n.in[2], OpKind::LinearGradBias, {dz}, nm + ".grad_bias");
        contribute(n.in[0], OpKind::LinearGradInput, {dz, n.in[1]}, nm + ".grad_input");
        return;
      }
      default:
        return;
    }
  }
};

}  // namespace

Status pass_autodiff(Graph& g, Program& p) {
  if (p.kind != ProgramKind::Train) return ok_status();
  Autodiff ad{g, p, {}, {}, {}};
  ad.mark_needs_grad();
  for (auto it = p.nodes.rbegin(); it != p.nodes.rend(); ++it) ad.rule(*it);
  for (auto& prm : g.params) {
    if (prm.frozen) continue;
    if (prm.grad == kNoValue) {
      Value v;
      v.name = prm.name + ".grad";
      v.shape = g.values[prm.value].shape;
      v.dtype = g.values[prm.value].dtype;
      v.role = Role::Grad;
      v.param = g.values[prm.value].param;
      prm.grad = g.add_value(v);
    }
    ad.total(prm.value, prm.grad);
  }
  for (auto& n : ad.bwd) p.nodes.push_back(std::move(n));
  return ok_status();
}

int optimizer_state_count(const OptimizerSpec& opt) {
  switch (opt.kind) {
    case OptimizerKind::Adam:
    case OptimizerKind::AdamW:
      return 2;
    case OptimizerKind::Sgd:
    case OptimizerKind::Lars:
      return opt.momentum != 0.0 ? 1 : 0;
  }
  return 0;
}

Status pass_optimizer_insert(Graph& g, Program& p, const OptimizerSpec& opt, bool ema) {
  if (p.kind != ProgramKind::Train || p.micro) return ok_status();  // a micro-batch only accumulates
  const int k = optimizer_state_count(opt) + (ema ? 1 : 0);
  const int moments = optimizer_state_count(opt);
  Node step;
  step.op = OpKind::OptimizerStep;
  step.name = std::string("optimizer.") + to_string(opt.kind);
  for (auto& prm : g.params) {
    if (static_cast<int>(prm.state.size()) != k) {
      prm.state.clear();
      for (int s = 0; s < k; ++s) {
        Value v;
        v.name = prm.name + (s == moments ? ".ema"
                             : moments == 2 ? (s == 0 ? ".exp_avg" : ".exp_avg_sq")
                                            : ".momentum_buffer");
        v.shape = g.values[prm.value].shape;
        v.dtype = g.values[prm.value].dtype;
        v.role = Role::OptState;
        v.param = g.values[prm.value].param;
        prm.state.push_back(g.add_value(v));
      }
    }
    if (prm.frozen) continue;  // its state copies exist (the EMA covers it) but the step leaves it alone
    step.in.push_back(prm.grad);
    step.out.push_back(prm.value);
  }
  p.nodes.push_back(std::move(step));
  return ok_status();
}

}  // namespace trctl
