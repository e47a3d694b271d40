// graph_build: forward programs from the spec's layers, with shape inference and located errors.
#include "core/graph/build.h"

#include <algorithm>
#include <map>

namespace trctl {
namespace {

std::string layer_where(const Spec& spec, const LayerSpec& l) {
  return spec.source + ":" + std::to_string(l.line) + ":" + std::to_string(l.col);
}

struct ForwardBuilder {
  const Spec& spec;
  Graph& g;
  std::map<std::string, int32_t> param_index;  // "fc1.weight" -> index in g.params
  std::vector<Error> errors;

  ValueId activation(const Program& p, const std::string& name, Shape s) {
    Value v;
    v.name = p.name + "/" + name;
    v.shape = std::move(s);
    v.dtype = g.compute;
    return g.add_value(v);
  }

  ValueId result(const Program& p, const std::string& name, DType t) {
    Value v;
    v.name = p.name + "/" + name;
    v.dtype = t;
    v.role = Role::Result;
    return g.add_value(v);
  }

  ValueId param(const std::string& name, Shape s, bool is_bias, int64_t fan_in) {
    auto it = param_index.find(name);
    if (it != param_index.end()) return g.params[it->second].value;
    Value v;
    v.name = name;
    v.shape = s;
    v.dtype = g.compute;
    v.role = Role::Param;
    v.param = static_cast<int32_t>(g.params.size());
    ValueId id = g.add_value(v);
    ParamInfo info;
    info.name = name;
    info.value = id;
    info.decay = !is_bias || spec.optimizer.decay_bias_and_norm;
    info.fan_in = fan_in;
    param_index[name] = v.param;
    g.params.push_back(info);
    return id;
  }

  // Forward nodes of one program; returns the logits value (or kNoValue after errors).
  ValueId build(Program& p) {
    std::map<std::string, ValueId> out_of;
    out_of["input"] = p.input;
    ValueId prev = p.input;
    for (size_t li = 0; li < spec.model.layers.size(); ++li) {
      const LayerSpec& l = spec.model.layers[li];
      if (l.inputs.size() > 1) {
        errors.push_back({ErrCode::NotSupported, layer_where(spec, l),
                          std::string("layer '") + l.name + "' (" + to_string(l.kind) + ") takes one input, got " +
                              std::to_string(l.inputs.size())});
        return kNoValue;
      }
      ValueId x = prev;
      if (!l.inputs.empty()) {
        auto it = out_of.find(l.inputs[0]);
        if (it == out_of.end()) {
          errors.push_back({ErrCode::Invalid, layer_where(spec, l),
                            "layer '" + l.name + "' names unknown input '" + l.inputs[0] + "'"});
          return kNoValue;
        }
        x = it->second;
      }
      ValueId y = add_layer(p, l, static_cast<uint32_t>(li), x);
      if (y == kNoValue) return kNoValue;
      out_of[l.name] = y;
      prev = y;
    }
    return prev;
  }

  ValueId add_layer(Program& p, const LayerSpec& l, uint32_t index, ValueId x) {
    const Shape xs = g.values[x].shape;
    Node n;
    n.name = l.name;
    n.in = {x};
    switch (l.kind) {
      case LayerKind::Flatten: {
        int64_t rest = 1;
        for (size_t i = 1; i < xs.dims.size(); ++i) rest *= xs.dims[i];
        ValueId y = activation(p, l.name, Shape{{xs.dims[0], rest}});
        g.values[y].alias_of = x;
        n.op = OpKind::Flatten;
        n.out = {y};
        p.nodes.push_back(n);
        return y;
      }
      case LayerKind::Linear: {
        if (xs.dims.size() != 2) {
          errors.push_back({ErrCode::Invalid, layer_where(spec, l),
                            "linear layer '" + l.name + "' expects a 2-D input (N, features), got " + xs.str() +
                                "; add a flatten layer before it"});
          return kNoValue;
        }
        const int64_t k = xs.dims[1], m = l.out_features;
        n.in.push_back(param(l.name + ".weight", Shape{{m, k}}, false, k));
        if (l.bias) n.in.push_back(param(l.name + ".bias", Shape{{m}}, true, k));
        ValueId y = activation(p, l.name, Shape{{xs.dims[0], m}});
        n.op = OpKind::Linear;
        n.out = {y};
        p.nodes.push_back(n);
        return y;
      }
      case LayerKind::Relu: {
        ValueId y = activation(p, l.name, xs);
        n.op = OpKind::Relu;
        n.out = {y};
        p.nodes.push_back(n);
        return y;
      }
      case LayerKind::Dropout: {
        if (p.kind == ProgramKind::Eval || l.p == 0.0) return x;  // identity
        ValueId y = activation(p, l.name, xs);
        n.op = OpKind::Dropout;
        n.attrs.p = static_cast<float>(l.p);
        n.attrs.op_id = index;
        n.out = {y};
        p.nodes.push_back(n);
        return y;
      }
    }
    return kNoValue;
  }

  // Loss, accuracy and epoch accumulators after the logits.
  void add_head(Program& p, ValueId logits) {
    p.logits = logits;
    p.loss = result(p, "loss", g.compute);
    p.correct = result(p, "correct", DType::I32);
    p.loss_sum = result(p, "loss_sum", DType::F64);
    p.correct_sum = result(p, "correct_sum", DType::F64);
    p.count = result(p, "count", DType::F64);
    Node ce;
    ce.op = OpKind::SoftmaxCrossEntropy;
    ce.name = "loss";
    ce.in = {logits, p.label};
    ce.out = {p.loss};
    ce.attrs.label_smoothing = static_cast<float>(spec.loss.label_smoothing);
    p.nodes.push_back(ce);
    Node acc;
    acc.op = OpKind::Accuracy;
    acc.name = "accuracy";
    acc.in = {logits, p.label};
    acc.out = {p.correct};
    p.nodes.push_back(acc);
    Node m;
    m.op = OpKind::MetricAccumulate;
    m.name = "metrics";
    m.in = {p.loss, p.correct};
    m.out = {p.loss_sum, p.correct_sum, p.count};
    p.nodes.push_back(m);
  }
};

// Decayed parameters first, so that the optimizer updates two contiguous ranges.
void order_params(Graph& g) {
  std::stable_partition(g.params.begin(), g.params.end(), [](const ParamInfo& p) { return p.decay; });
  for (size_t i = 0; i < g.params.size(); ++i) g.values[g.params[i].value].param = static_cast<int32_t>(i);
}

}  // namespace

Result<Graph> graph_build(const Spec& spec, const DataShape& data, DType compute) {
  Graph g;
  g.compute = compute;
  g.in_h = data.h;
  g.in_w = data.w;
  g.in_c = data.c;
  g.num_classes = data.num_classes;
  std::vector<std::pair<std::string, int64_t>> plan;  // program name, batch
  const int64_t b = spec.data.batch_size;
  const int64_t vb = spec.data.val_batch_size > 0 ? spec.data.val_batch_size : b;
  if (data.train_n / b > 0) plan.emplace_back("train", b);
  if (data.train_n % b != 0 && !spec.data.drop_last) plan.emplace_back("train_last", data.train_n % b);
  if (plan.empty())
    return Error{ErrCode::Invalid, spec.source,
                 "no training batch: " + std::to_string(data.train_n) + " samples, batch_size " +
                     std::to_string(b) + " and drop_last true"};
  if (data.val_n / vb > 0) plan.emplace_back("eval", vb);
  if (data.val_n % vb != 0) plan.emplace_back("eval_last", data.val_n % vb);

  ForwardBuilder fb{spec, g, {}, {}};
  for (const auto& [name, batch] : plan) {
    Program p;
    p.name = name;
    p.kind = name.rfind("train", 0) == 0 ? ProgramKind::Train : ProgramKind::Eval;
    p.batch = batch;
    Value in;
    in.name = name + "/input";
    in.shape = Shape{{batch, data.h, data.w, data.c}};
    in.dtype = compute;
    in.role = Role::Input;
    p.input = g.add_value(in);
    Value lab;
    lab.name = name + "/label";
    lab.shape = Shape{{batch}};
    lab.dtype = DType::I32;
    lab.role = Role::Label;
    p.label = g.add_value(lab);
    ValueId logits = fb.build(p);
    if (logits == kNoValue) return fb.errors;
    const Shape& ls = g.values[logits].shape;
    if (ls.dims.size() != 2 || ls.dims[1] != data.num_classes)
      return Error{ErrCode::Invalid, spec.source,
                   "the model's output is " + ls.str() + " but the loss needs (N, " +
                       std::to_string(data.num_classes) + ") for a dataset of " + std::to_string(data.num_classes) +
                       " classes"};
    fb.add_head(p, logits);
    g.programs.push_back(std::move(p));
  }
  if (g.params.empty()) return Error{ErrCode::Invalid, spec.source, "the model has no trainable parameters"};
  order_params(g);
  return g;
}

}  // namespace trctl
