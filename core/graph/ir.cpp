// Graph IR helpers: dtype sizes, names, shape printing and the stable text dump.
#include "core/graph/ir.h"

#include <algorithm>
#include <sstream>

namespace trctl {

int64_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::U8: return 1;
  }
  return 0;
}

const char* to_string(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::U8: return "u8";
  }
  return "?";
}

const char* to_string(Role r) {
  switch (r) {
    case Role::Input: return "input";
    case Role::Label: return "label";
    case Role::Param: return "param";
    case Role::Grad: return "grad";
    case Role::OptState: return "opt_state";
    case Role::Activation: return "activation";
    case Role::Result: return "result";
    case Role::Buffer: return "buffer";
    case Role::GradAccum: return "grad_accum";
  }
  return "?";
}

bool fused_pool_window_ok(const Attrs& a) {
  return a.kernel >= 1 && a.kernel * a.kernel <= 256 && a.stride >= 1 && a.stride <= a.kernel && a.pad >= 0 &&
         2 * a.pad <= a.kernel;
}

bool overlap_window_op(OpKind k) {
  switch (k) {
    case OpKind::LinearGradInput:
    case OpKind::LinearGradWeight:
    case OpKind::LinearGradBias:
    case OpKind::ZeroFill:
    case OpKind::ReluGrad:
    case OpKind::ActivationGrad:
    case OpKind::DropoutGrad:
    case OpKind::Add:
    case OpKind::Flatten:
    case OpKind::Conv2dGradInput:
    case OpKind::Conv2dGradWeight:
    case OpKind::BatchNormGrad:
    case OpKind::MaxPoolGrad:
    case OpKind::AvgPoolGrad:
    case OpKind::GlobalAvgPoolGrad:
      return true;
    default:
      return false;
  }
}

bool reads_any(const Node& n, const std::vector<ValueId>& vs) {
  for (ValueId v : n.in)
    if (std::find(vs.begin(), vs.end(), v) != vs.end()) return true;
  return false;
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::Flatten: return "flatten";
    case OpKind::Linear: return "linear";
    case OpKind::Relu: return "relu";
    case OpKind::Dropout: return "dropout";
    case OpKind::Conv2d: return "conv2d";
    case OpKind::BatchNorm: return "batch_norm";
    case OpKind::BatchNormEval: return "batch_norm_eval";
    case OpKind::MaxPool: return "max_pool";
    case OpKind::AvgPool: return "avg_pool";
    case OpKind::GlobalAvgPool: return "global_avg_pool";
    case OpKind::SoftmaxCrossEntropy: return "softmax_cross_entropy";
    case OpKind::Accuracy: return "accuracy";
    case OpKind::Activation: return "activation";
    case OpKind::Loss: return "loss";
    case OpKind::BinaryAccuracy: return "binary_accuracy";
    case OpKind::MetricAccumulate: return "metric_accumulate";
    case OpKind::SoftmaxCrossEntropyGrad: return "softmax_cross_entropy_grad";
    case OpKind::LinearGradInput: return "linear_grad_input";
    case OpKind::LinearGradWeight: return "linear_grad_weight";
    case OpKind::LinearGradBias: return "linear_grad_bias";
    case OpKind::ZeroFill: return "zero_fill";
    case OpKind::ReluGrad: return "relu_grad";
    case OpKind::ActivationGrad: return "activation_grad";
    case OpKind::LossGrad: return "loss_grad";
    case OpKind::DropoutGrad: return "dropout_grad";
    case OpKind::Add: return "add";
    case OpKind::Conv2dGradInput: return "conv2d_grad_input";
    case OpKind::Conv2dGradWeight: return "conv2d_grad_weight";
    case OpKind::BatchNormGrad: return "batch_norm_grad";
    case OpKind::MaxPoolGrad: return "max_pool_grad";
    case OpKind::AvgPoolGrad: return "avg_pool_grad";
    case OpKind::GlobalAvgPoolGrad: return "global_avg_pool_grad";
    case OpKind::GradAccumulate: return "grad_accumulate";
    case OpKind::OptimizerStep: return "optimizer_step";
  }
  return "?";
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string Shape::str() const {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

int64_t stored_bytes(const Graph& g, ValueId id) {
  const Value& v = g.values[id];
  const bool narrowed = (v.role == Role::Activation || v.role == Role::Input) && v.dtype == g.compute &&
                        !v.full_precision && g.storage != g.compute;
  return narrowed ? v.shape.numel() * dtype_size(g.storage) : v.bytes();
}

ValueId Graph::add_value(Value v) {
  values.push_back(std::move(v));
  return static_cast<ValueId>(values.size() - 1);
}

const Program* Graph::find_program(const std::string& name) const {
  for (const auto& p : programs)
    if (p.name == name) return &p;
  return nullptr;
}

static std::string value_ref(const Graph& g, ValueId id) {
  return "%" + std::to_string(id) + ":" + g.values[id].name;
}

std::string graph_dump(const Graph& g) {
  std::ostringstream os;
  os << "graph: sample (H, W, C) = (" << g.in_h << ", " << g.in_w << ", " << g.in_c << ")";
  if ((g.val_h > 0 && g.val_h != g.in_h) || (g.val_w > 0 && g.val_w != g.in_w))  // one size: printed as before
    os << ", validation (" << g.val_h << ", " << g.val_w << ", " << g.in_c << ")";
  os << ", classes " << g.num_classes << "; compute " << to_string(g.compute) << ", activations stored as "
     << to_string(g.storage)
     << (g.accumulate_steps > 1 ? "; accumulate_steps " + std::to_string(g.accumulate_steps) : std::string())
     << "\n";
  os << "params:\n";
  for (const auto& p : g.params) {
    os << "  " << p.name << " " << g.values[p.value].shape.str() << (p.decay ? " decay" : " no_decay")
       << " grad=%" << p.grad;
    if (p.frozen) os << " frozen";  // a spec group or frozen parameters only: default plans print as before
    else if (p.group >= 0 && p.group < static_cast<int32_t>(g.param_groups.size()) &&
             g.param_groups[p.group].name.rfind("default", 0) != 0)
      os << " group=" << g.param_groups[p.group].name << " lr=" << g.param_groups[p.group].lr
         << " wd=" << g.param_groups[p.group].weight_decay;
    for (ValueId s : p.state) os << " state=%" << s;
    if (p.accum != kNoValue) os << " accum=%" << p.accum;
    os << "\n";
  }
  if (!g.buffers.empty()) os << "buffers:\n";
  for (const auto& b : g.buffers)
    os << "  " << b.name << " " << g.values[b.value].shape.str() << " init=" << b.init << " %" << b.value << "\n";
  for (const auto& pr : g.programs) {
    os << "program " << pr.name << " (" << (pr.kind == ProgramKind::Train ? "train" : "eval")
       << (pr.micro ? " micro-batch" : "") << ", batch " << pr.batch << ", " << pr.nodes.size() << " nodes):\n";
    for (const auto& n : pr.nodes) {
      os << "  ";
      for (size_t i = 0; i < n.out.size(); ++i) {
        const Value& v = g.values[n.out[i]];
        os << (i ? ", " : "") << value_ref(g, n.out[i]) << " " << v.shape.str() << " " << to_string(v.dtype);
      }
      os << " = " << to_string(n.op);
      if (n.attrs.relu) os << "[relu]";
      if (n.attrs.residual) os << "[residual]";
      if (n.attrs.prebias) os << "[prebias]";
      if (n.attrs.pool)
        os << "[max_pool k=" << n.attrs.kernel << " s=" << n.attrs.stride
           << (n.attrs.pad ? " p=" + std::to_string(n.attrs.pad) : std::string()) << "]";
      if (n.attrs.accumulate) os << "[accumulate]";
      if (n.op == OpKind::GradAccumulate) os << (n.attrs.flush ? "[flush]" : "[add]");
      if (n.attrs.grad_scale != 1.0f) os << "[grad_scale=" << n.attrs.grad_scale << "]";  // 1/accumulate_steps
      if (n.attrs.overlap > 0) os << "[overlap=" << n.attrs.overlap << "]";
      switch (n.op) {
        case OpKind::Conv2d:
        case OpKind::Conv2dGradInput:
        case OpKind::Conv2dGradWeight:
          os << "[k=" << n.attrs.kernel << " s=" << n.attrs.stride << " p=" << n.attrs.pad;
          if (n.attrs.dilation != 1) os << " d=" << n.attrs.dilation;
          if (n.attrs.groups != 1) os << " g=" << n.attrs.groups;
          os << "]";
          break;
        case OpKind::MaxPool:
        case OpKind::AvgPool:
        case OpKind::MaxPoolGrad:
        case OpKind::AvgPoolGrad:
          os << "[k=" << n.attrs.kernel << " s=" << n.attrs.stride << " p=" << n.attrs.pad << "]";
          break;
        default:
          break;
      }
      if (n.op == OpKind::Dropout || n.op == OpKind::DropoutGrad) os << "[p=" << n.attrs.p << "]";
      if (n.op == OpKind::Activation || n.op == OpKind::ActivationGrad) {
        os << "[" << to_string(n.attrs.act);
        if (act_has_param(n.attrs.act)) os << " " << n.attrs.act_param;
        os << "]";
      }
      if (n.op == OpKind::Loss || n.op == OpKind::LossGrad) os << "[" << to_string(n.attrs.loss) << "]";
      os << "(";
      for (size_t i = 0; i < n.in.size(); ++i) os << (i ? ", " : "") << value_ref(g, n.in[i]);
      os << ")  # " << n.name << "\n";
    }
  }
  return os.str();
}

}  // namespace trctl
