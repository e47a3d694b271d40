// graph_build: forward programs from the spec's layers, with shape inference and located errors.
#include "core/graph/build.h"
#include "core/graph/param_groups.h"

#include <algorithm>
#include <map>

namespace trctl {

int64_t window_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  if (span < 0 || stride < 1) return 0;
  return span / stride + 1;
}

namespace {

std::string layer_where(const Spec& spec, const LayerSpec& l) {
  return spec.source + ":" + std::to_string(l.line) + ":" + std::to_string(l.col);
}

std::string size_text(int64_t h, int64_t w) { return std::to_string(h) + "x" + std::to_string(w); }

struct ForwardBuilder {
  const Spec& spec;
  const DataShape& data;
  Graph& g;
  std::map<std::string, int32_t> param_index;  // "fc1.weight" -> index in g.params
  std::vector<Error> errors;
  const LayerSpec* layer = nullptr;  // the layer add_layer is adding (named by param's shape check)

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

  // Parameters are shared by every program: the first program (a train one) creates them, the others look them
  // up, and must need the same shape (an eval program at another image size may not: size_dependent_param).
  ValueId param(const std::string& name, Shape s, bool is_bias, int64_t fan_in,
                ParamInfo::Init init = ParamInfo::Init::Kaiming) {
    auto it = param_index.find(name);
    if (it != param_index.end()) {
      const ValueId id = g.params[it->second].value;
      if (!(g.values[id].shape == s)) size_dependent_param(name, g.values[id].shape, s);
      return id;
    }
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
    info.init = is_bias && init == ParamInfo::Init::Kaiming ? ParamInfo::Init::Zeros : init;
    param_index[name] = v.param;
    g.params.push_back(info);
    return id;
  }

  // Persistent non-trainable state (one per name, shared by every program).
  ValueId buffer(const std::string& name, Shape s, float init) {
    for (const BufferInfo& b : g.buffers)
      if (b.name == name) return b.value;
    Value v;
    v.name = name;
    v.shape = std::move(s);
    v.dtype = g.compute;
    v.role = Role::Buffer;
    ValueId id = g.add_value(v);
    g.buffers.push_back({name, id, init});
    return id;
  }

  void error(const LayerSpec& l, const std::string& msg, ErrCode code = ErrCode::Invalid) {
    errors.push_back({code, layer_where(spec, l), msg});
  }

  // The train programs run at the training size, the eval ones at the validation size; one set of parameters
  // serves both, so a parameter whose shape follows the image size (a linear layer after a flatten of a feature
  // map) cannot be validated at another size.
  void size_dependent_param(const std::string& name, const Shape& trained, const Shape& here) {
    const LayerSpec& l = *layer;
    error(l, std::string(to_string(l.kind)) + " layer '" + l.name + "': its parameter '" + name + "' is " +
                 trained.str() + " at the training image size " + size_text(data.h, data.w) + " but would be " +
                 here.str() + " at the validation image size " +
                 size_text(data_val_h(data), data_val_w(data)) +
                 " (train_transforms and val_transforms give different sizes; training and validation share the "
                 "parameters): make the parameter shapes independent of the image size, e.g. a global_avg_pool "
                 "layer instead of the flatten before the first linear layer, or give both transform lists the "
                 "same output size");
  }

  // Forward nodes of one program; returns the logits value (or kNoValue after errors).
  ValueId build(Program& p) {
    std::map<std::string, ValueId> out_of;
    out_of["input"] = p.input;
    ValueId prev = p.input;
    for (size_t li = 0; li < spec.model.layers.size(); ++li) {
      const LayerSpec& l = spec.model.layers[li];
      const size_t want = l.kind == LayerKind::Add ? 2 : 1;
      if (l.inputs.size() != want && !(want == 1 && l.inputs.empty())) {
        error(l, std::string("layer '") + l.name + "' (" + to_string(l.kind) + ") takes " + std::to_string(want) +
                     " input" + (want > 1 ? "s" : "") + " in 'inputs', got " + std::to_string(l.inputs.size()));
        return kNoValue;
      }
      std::vector<ValueId> xs;
      for (const std::string& in : l.inputs) {
        auto it = out_of.find(in);
        if (it == out_of.end()) {
          error(l, "layer '" + l.name + "' names unknown input '" + in + "'");
          return kNoValue;
        }
        xs.push_back(it->second);
      }
      if (xs.empty()) xs.push_back(prev);
      ValueId y = add_layer(p, l, static_cast<uint32_t>(li), xs);
      if (y == kNoValue) return kNoValue;
      out_of[l.name] = y;
      prev = y;
    }
    return prev;
  }

  // Needs an image-shaped (N, H, W, C) input; reports and returns false otherwise.
  bool expect_image(const LayerSpec& l, const Shape& xs) {
    if (xs.dims.size() == 4) return true;
    error(l, std::string(to_string(l.kind)) + " layer '" + l.name + "' expects an image input (N, H, W, C), got " +
                 xs.str());
    return false;
  }

  ValueId add_conv(Program& p, const LayerSpec& l, Node& n, const Shape& xs) {
    if (!expect_image(l, xs)) return kNoValue;
    const int64_t c = xs.dims[3], k = l.out_channels, g_ = l.groups, r = l.kernel_size;
    if (c % g_ != 0) {
      error(l, "conv2d layer '" + l.name + "': its " + std::to_string(c) + " input channels are not divisible by "
                   "groups (" + std::to_string(g_) + ")");
      return kNoValue;
    }
    Attrs& a = n.attrs;
    a.kernel = l.kernel_size;
    a.stride = l.stride > 0 ? l.stride : 1;
    a.pad = l.padding;
    a.dilation = l.dilation;
    a.groups = l.groups;
    const int64_t ph = window_out_size(xs.dims[1], a.kernel, a.stride, a.pad, a.dilation);
    const int64_t pw = window_out_size(xs.dims[2], a.kernel, a.stride, a.pad, a.dilation);
    if (ph < 1 || pw < 1) {
      error(l, "conv2d layer '" + l.name + "': kernel " + std::to_string(r) + " (dilation " +
                   std::to_string(a.dilation) + ") does not fit the input " + xs.str() + " with padding " +
                   std::to_string(a.pad));
      return kNoValue;
    }
    const int64_t fan_in = (c / g_) * r * r;
    n.in.push_back(param(l.name + ".weight", Shape{{k, r, r, c / g_}}, false, fan_in));
    if (l.bias) n.in.push_back(param(l.name + ".bias", Shape{{k}}, true, fan_in));
    ValueId y = activation(p, l.name, Shape{{xs.dims[0], ph, pw, k}});
    n.op = OpKind::Conv2d;
    n.out = {y};
    p.nodes.push_back(n);
    return y;
  }

  ValueId add_pool(Program& p, const LayerSpec& l, Node& n, const Shape& xs) {
    if (!expect_image(l, xs)) return kNoValue;
    Attrs& a = n.attrs;
    a.kernel = l.kernel_size;
    a.stride = l.stride > 0 ? l.stride : l.kernel_size;
    a.pad = l.padding;
    const int64_t ph = window_out_size(xs.dims[1], a.kernel, a.stride, a.pad, 1);
    const int64_t pw = window_out_size(xs.dims[2], a.kernel, a.stride, a.pad, 1);
    if (ph < 1 || pw < 1 || 2 * a.pad > a.kernel) {
      error(l, std::string(to_string(l.kind)) + " layer '" + l.name + "': window " + std::to_string(a.kernel) +
                   " with padding " + std::to_string(a.pad) + " does not fit the input " + xs.str());
      return kNoValue;
    }
    ValueId y = activation(p, l.name, Shape{{xs.dims[0], ph, pw, xs.dims[3]}});
    n.op = l.kind == LayerKind::MaxPool ? OpKind::MaxPool : OpKind::AvgPool;
    n.out = {y};
    if (n.op == OpKind::MaxPool && p.kind == ProgramKind::Train && a.kernel * a.kernel <= 256) {
      ValueId idx = activation(p, l.name + ".argmax", g.values[y].shape);  // for the backward's gather
      g.values[idx].dtype = DType::U8;
      n.out.push_back(idx);
    }
    p.nodes.push_back(n);
    return y;
  }

  // Train programs normalise with the batch statistics and update the running ones; eval programs use them.
  ValueId add_batch_norm(Program& p, const LayerSpec& l, Node& n, const Shape& xs) {
    if (xs.dims.size() != 4 && xs.dims.size() != 2) {
      error(l, "batch_norm layer '" + l.name + "' expects (N, H, W, C) or (N, C), got " + xs.str());
      return kNoValue;
    }
    const int64_t c = xs.dims.back();
    const Shape cs{{c}};
    n.in.push_back(param(l.name + ".weight", cs, true, c, ParamInfo::Init::Ones));
    n.in.push_back(param(l.name + ".bias", cs, true, c, ParamInfo::Init::Zeros));
    n.in.push_back(buffer(l.name + ".running_mean", cs, 0.0f));
    n.in.push_back(buffer(l.name + ".running_var", cs, 1.0f));
    n.attrs.eps = static_cast<float>(l.eps);
    n.attrs.momentum = static_cast<float>(l.momentum);
    ValueId y = activation(p, l.name, xs);
    if (p.kind == ProgramKind::Eval) {
      n.op = OpKind::BatchNormEval;
      n.out = {y};
    } else {
      n.op = OpKind::BatchNorm;
      n.out = {y, activation(p, l.name + ".save_mean", cs), activation(p, l.name + ".save_invstd", cs)};
      g.values[n.out[1]].full_precision = g.values[n.out[2]].full_precision = true;  // fp32 statistics under AMP
    }
    p.nodes.push_back(n);
    return y;
  }

  // The elementwise activations other than relu: one Activation node (attrs.act, attrs.act_param).
  ValueId add_activation(Program& p, const LayerSpec& l, Node& n, const Shape& xs) {
    static const std::map<LayerKind, ActKind> kinds = {
        {LayerKind::Relu6, ActKind::Relu6},     {LayerKind::LeakyRelu, ActKind::LeakyRelu},
        {LayerKind::Elu, ActKind::Elu},         {LayerKind::Silu, ActKind::Silu},
        {LayerKind::Hardswish, ActKind::Hardswish}, {LayerKind::Sigmoid, ActKind::Sigmoid},
        {LayerKind::Tanh, ActKind::Tanh}};
    n.op = OpKind::Activation;
    n.attrs.act = kinds.at(l.kind);
    n.attrs.act_param = static_cast<float>(l.kind == LayerKind::LeakyRelu ? l.negative_slope
                                           : l.kind == LayerKind::Elu     ? l.alpha
                                                                          : 0.0);
    ValueId y = activation(p, l.name, xs);
    n.out = {y};
    p.nodes.push_back(n);
    return y;
  }

  ValueId add_layer(Program& p, const LayerSpec& l, uint32_t index, const std::vector<ValueId>& ins) {
    const ValueId x = ins[0];
    const Shape xs = g.values[x].shape;
    layer = &l;
    Node n;
    n.name = l.name;
    n.in = {x};
    switch (l.kind) {
      case LayerKind::Conv2d:
        return add_conv(p, l, n, xs);
      case LayerKind::MaxPool:
      case LayerKind::AvgPool:
        return add_pool(p, l, n, xs);
      case LayerKind::BatchNorm:
        return add_batch_norm(p, l, n, xs);
      case LayerKind::GlobalAvgPool: {
        if (!expect_image(l, xs)) return kNoValue;
        ValueId y = activation(p, l.name, Shape{{xs.dims[0], xs.dims[3]}});
        n.op = OpKind::GlobalAvgPool;
        n.out = {y};
        p.nodes.push_back(n);
        return y;
      }
      case LayerKind::Add: {
        const Shape& bs = g.values[ins[1]].shape;
        if (!(bs == xs)) {
          error(l, "add layer '" + l.name + "': its inputs '" + l.inputs[0] + "' " + xs.str() + " and '" +
                       l.inputs[1] + "' " + bs.str() + " differ in shape");
          return kNoValue;
        }
        ValueId y = activation(p, l.name, xs);
        n.op = OpKind::Add;
        n.in = ins;
        n.out = {y};
        p.nodes.push_back(n);
        return y;
      }
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
      case LayerKind::Relu6:
      case LayerKind::LeakyRelu:
      case LayerKind::Elu:
      case LayerKind::Silu:
      case LayerKind::Hardswish:
      case LayerKind::Sigmoid:
      case LayerKind::Tanh:
        return add_activation(p, l, n, xs);
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
    p.correct5 = result(p, "correct5", DType::I32);
    p.correct5_sum = result(p, "correct5_sum", DType::F64);
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
    acc.out = {p.correct, p.correct5};
    if (spec.loss.kind == LossKind::BceWithLogits && g.values[logits].shape.dims[1] == 1)
      acc.op = OpKind::BinaryAccuracy;  // a 1-logit head: predicted 1 iff the logit > 0
    if (spec.loss.kind != LossKind::CrossEntropy || !spec.loss.class_weights.empty()) {
      Node& loss = p.nodes.back();  // the other losses replace the softmax cross-entropy node
      loss.op = OpKind::Loss;
      loss.attrs.loss = spec.loss.kind == LossKind::BceWithLogits ? LossFn::BceWithLogits
                        : spec.loss.kind == LossKind::Mse         ? LossFn::Mse
                                                                  : LossFn::WeightedCrossEntropy;
      loss.attrs.class_weights.assign(spec.loss.class_weights.begin(), spec.loss.class_weights.end());
    }
    p.nodes.push_back(acc);
    Node m;
    m.op = OpKind::MetricAccumulate;
    m.name = "metrics";
    m.in = {p.loss, p.correct, p.correct5};
    m.out = {p.loss_sum, p.correct_sum, p.count, p.correct5_sum};
    p.nodes.push_back(m);
  }
};

// The logits the loss needs: (N, classes); bce_with_logits also takes (N, 1) for 2-class data (labels 0/1);
// cross_entropy's class_weights, one per class.
Status check_loss_head(const Spec& spec, const DataShape& data, const Shape& ls) {
  const int64_t c = data.num_classes;
  const bool binary = spec.loss.kind == LossKind::BceWithLogits && c == 2 && ls.dims.size() == 2 && ls.dims[1] == 1;
  if (!binary && (ls.dims.size() != 2 || ls.dims[1] != c)) {
    std::string need = "(N, " + std::to_string(c) + ")";
    if (spec.loss.kind == LossKind::BceWithLogits && c == 2) need += " or (N, 1)";
    return Error{ErrCode::Invalid, spec.source,
                 "the model's output is " + ls.str() + " but the loss (" + to_string(spec.loss.kind) + ") needs " +
                     need + " for a dataset of " + std::to_string(c) + " classes"};
  }
  const size_t w = spec.loss.class_weights.size();
  if (w != 0 && static_cast<int64_t>(w) != c)
    return Error{ErrCode::Invalid, spec.source,
                 "'loss.class_weights' has " + std::to_string(w) + " weights but the dataset has " +
                     std::to_string(c) + " classes"};
  return ok_status();
}

// Errors of an eval program at a validation size other than the training size say so: its shapes differ from
// the ones the train programs (built first, without errors) had.
std::vector<Error> at_val_size(std::vector<Error> errs, const Graph& g, const Program& p) {
  if (p.kind != ProgramKind::Eval || (g.val_h == g.in_h && g.val_w == g.in_w)) return errs;
  for (Error& e : errs)
    if (e.message.find("at the validation image size") == std::string::npos)
      e.message += " (at the validation image size " + size_text(g.val_h, g.val_w) + " of the val_transforms)";
  return errs;
}

}  // namespace

Result<Graph> graph_build(const Spec& spec, const DataShape& data, DType compute) {
  Graph g;
  g.compute = compute;
  g.in_h = data.h;
  g.in_w = data.w;
  g.in_c = data.c;
  g.val_h = data_val_h(data);
  g.val_w = data_val_w(data);
  g.num_classes = data.num_classes;
  g.accumulate_steps = spec.train.accumulate_steps;
  std::vector<std::pair<std::string, int64_t>> plan;  // program name, batch
  const int64_t b = spec.data.batch_size;
  const int64_t vb = spec.data.val_batch_size > 0 ? spec.data.val_batch_size : b;
  if (data.train_n / b > 0) plan.emplace_back("train", b);
  if (data.train_n % b != 0 && !spec.data.drop_last) plan.emplace_back("train_last", data.train_n % b);
  // Gradient accumulation: full micro-batches that are not an optimizer step's last (the epoch's last batch is).
  if (g.accumulate_steps > 1 && data.train_n / b > 0) plan.emplace_back("train_micro", b);
  if (plan.empty())
    return Error{ErrCode::Invalid, spec.source,
                 "no training batch: " + std::to_string(data.train_n) + " samples, batch_size " +
                     std::to_string(b) + " and drop_last true"};
  if (data.val_n / vb > 0) plan.emplace_back("eval", vb);
  if (data.val_n % vb != 0) plan.emplace_back("eval_last", data.val_n % vb);

  ForwardBuilder fb{spec, data, g, {}, {}};
  for (const auto& [name, batch] : plan) {
    Program p;
    p.name = name;
    p.kind = name.rfind("train", 0) == 0 ? ProgramKind::Train : ProgramKind::Eval;
    p.micro = name == "train_micro";
    p.batch = batch;
    const bool eval = p.kind == ProgramKind::Eval;  // every shape below follows from the input's
    Value in;
    in.name = name + "/input";
    in.shape = Shape{{batch, eval ? g.val_h : data.h, eval ? g.val_w : data.w, data.c}};
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
    if (logits == kNoValue || !fb.errors.empty()) return at_val_size(fb.errors, g, p);
    Status head = check_loss_head(spec, data, g.values[logits].shape);
    if (!head.ok()) return at_val_size(head.errors(), g, p);
    fb.add_head(p, logits);
    g.programs.push_back(std::move(p));
  }
  if (g.params.empty()) return Error{ErrCode::Invalid, spec.source, "the model has no trainable parameters"};
  Status groups = assign_param_groups(spec, g);  // group by group, frozen parameters last
  if (!groups.ok()) return groups.errors();
  return g;
}

}  // namespace trctl
