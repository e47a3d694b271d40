// spec_to_yaml (a complete spec that spec_parse reads back equal) and the YAML names of the enums.
#include <string>
#include <utility>
#include <vector>

#include "core/spec/spec.h"
#include "core/spec/spec_fields.h"

namespace trctl {

const char* to_string(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Tf32: return "tf32";
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
  }
  return "?";
}
const char* to_string(DeviceKind d) {
  switch (d) {
    case DeviceKind::Auto: return "auto";
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Cuda: return "cuda";
  }
  return "?";
}
const char* to_string(OptimizerKind o) {
  switch (o) {
    case OptimizerKind::Sgd: return "sgd";
    case OptimizerKind::Adam: return "adam";
    case OptimizerKind::AdamW: return "adamw";
    case OptimizerKind::Lars: return "lars";
  }
  return "?";
}
const char* to_string(SchedulerKind s) {
  switch (s) {
    case SchedulerKind::Constant: return "constant";
    case SchedulerKind::Cosine: return "cosine";
    case SchedulerKind::Step: return "step";
    case SchedulerKind::MultiStep: return "multistep";
  }
  return "?";
}
const char* to_string(LayerKind l) {
  switch (l) {
    case LayerKind::Flatten: return "flatten";
    case LayerKind::Linear: return "linear";
    case LayerKind::Relu: return "relu";
    case LayerKind::Dropout: return "dropout";
    case LayerKind::Conv2d: return "conv2d";
    case LayerKind::BatchNorm: return "batch_norm";
    case LayerKind::MaxPool: return "max_pool";
    case LayerKind::AvgPool: return "avg_pool";
    case LayerKind::GlobalAvgPool: return "global_avg_pool";
    case LayerKind::Add: return "add";
    case LayerKind::Relu6: return "relu6";
    case LayerKind::LeakyRelu: return "leaky_relu";
    case LayerKind::Elu: return "elu";
    case LayerKind::Silu: return "silu";
    case LayerKind::Hardswish: return "hardswish";
    case LayerKind::Sigmoid: return "sigmoid";
    case LayerKind::Tanh: return "tanh";
  }
  return "?";
}
const char* to_string(TransformKind t) {
  switch (t) {
    case TransformKind::Pad: return "pad";
    case TransformKind::RandomCrop: return "random_crop";
    case TransformKind::RandomRotation: return "random_rotation";
    case TransformKind::RandomScale: return "random_scale";
    case TransformKind::Normalize: return "normalize";
    case TransformKind::RandomErasing: return "random_erasing";
    case TransformKind::RandomResizedCrop: return "random_resized_crop";
    case TransformKind::RandomHorizontalFlip: return "random_horizontal_flip";
    case TransformKind::ColorJitter: return "color_jitter";
    case TransformKind::Resize: return "resize";
    case TransformKind::CenterCrop: return "center_crop";
  }
  return "?";
}
const char* to_string(DatasetKind d) {
  switch (d) {
    case DatasetKind::FashionMnist: return "fashion_mnist";
    case DatasetKind::Idx: return "idx";
    case DatasetKind::Synthetic: return "synthetic";
    case DatasetKind::Dts: return "dts";
    case DatasetKind::ImageFolder: return "image_folder";
    case DatasetKind::Cifar10: return "cifar10";
    case DatasetKind::Cifar100: return "cifar100";
  }
  return "?";
}
const char* to_string(InitKind i) {
  switch (i) {
    case InitKind::KaimingUniformFanIn: return "kaiming_uniform_fan_in";
  }
  return "?";
}
const char* to_string(LossKind l) {
  switch (l) {
    case LossKind::CrossEntropy: return "cross_entropy";
    case LossKind::BceWithLogits: return "bce_with_logits";
    case LossKind::Mse: return "mse";
  }
  return "?";
}
const char* to_string(ConvIm2col c) {
  switch (c) {
    case ConvIm2col::On: return "on";
    case ConvIm2col::Forward: return "forward";
    case ConvIm2col::Off: return "off";
  }
  return "?";
}
const char* to_string(ConvS2d c) {
  switch (c) {
    case ConvS2d::On: return "on";
    case ConvS2d::Forward: return "forward";
    case ConvS2d::Off: return "off";
  }
  return "?";
}
const char* to_string(ConvFewc c) {
  switch (c) {
    case ConvFewc::On: return "on";
    case ConvFewc::Unfolded: return "unfolded";
    case ConvFewc::Forward: return "forward";
    case ConvFewc::Off: return "off";
  }
  return "?";
}
const char* to_string(ConvWgconv c) {
  switch (c) {
    case ConvWgconv::Off: return "off";
    case ConvWgconv::Dgrad: return "dgrad";
    case ConvWgconv::Fwd: return "fwd";
    case ConvWgconv::Both: return "both";
    case ConvWgconv::Wgrad: return "wgrad";
    case ConvWgconv::Bwd: return "bwd";
    case ConvWgconv::All: return "all";
  }
  return "?";
}
const char* to_string(GradCheck c) {
  switch (c) {
    case GradCheck::Auto: return "auto";
    case GradCheck::Full: return "full";
  }
  return "?";
}
const char* to_string(ConvDgradFwd c) {
  switch (c) {
    case ConvDgradFwd::Auto: return "auto";
    case ConvDgradFwd::On: return "on";
    case ConvDgradFwd::Off: return "off";
  }
  return "?";
}
const char* to_string(ConvBnBackward c) {
  switch (c) {
    case ConvBnBackward::Separate: return "separate";
    case ConvBnBackward::Fused: return "fused";
    case ConvBnBackward::Auto: return "auto";
  }
  return "?";
}

const char* to_string(ConvBnApply c) {
  switch (c) {
    case ConvBnApply::Separate: return "separate";
    case ConvBnApply::Prologue: return "prologue";
  }
  return "?";
}
const char* to_string(ConvBnStats c) {
  switch (c) {
    case ConvBnStats::Separate: return "separate";
    case ConvBnStats::Fused: return "fused";
    case ConvBnStats::Auto: return "auto";
  }
  return "?";
}

const char* to_string(ProgressKind p) {
  switch (p) {
    case ProgressKind::Auto: return "auto";
    case ProgressKind::On: return "on";
    case ProgressKind::Off: return "off";
  }
  return "?";
}

namespace {

using spec_detail::format_double;

// A YAML double-quoted string: \" \\ and control characters escaped; other bytes (UTF-8) as they are.
std::string quoted(const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

const char* boolean(bool b) { return b ? "true" : "false"; }

std::string list_of(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + format_double(v[i]);
  return s + "]";
}
std::string pair_of(double a, double b) { return list_of({a, b}); }
std::string patterns_of(const std::vector<NamePattern>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + quoted(v[i].glob);
  return s + "]";
}

// The transform as one list item: "kind: {params}" with the kind's parameters only.
std::string transform_item(const TransformSpec& t) {
  std::string params;
  switch (t.kind) {
    case TransformKind::Pad: params = "padding: " + std::to_string(t.padding); break;
    case TransformKind::RandomCrop: params = "size: " + std::to_string(t.size); break;
    case TransformKind::RandomRotation: params = "degrees: " + format_double(t.degrees); break;
    case TransformKind::RandomScale:
      params = "min: " + format_double(t.scale_min) + ", max: " + format_double(t.scale_max);
      break;
    case TransformKind::Normalize: break;
    case TransformKind::RandomErasing:
      params = "p: " + format_double(t.p) + ", scale: " + pair_of(t.erase_scale_min, t.erase_scale_max) +
               ", ratio: " + pair_of(t.ratio_min, t.ratio_max) + ", value: " + format_double(t.value);
      break;
    case TransformKind::RandomResizedCrop:
      params = "size: " + std::to_string(t.size) + ", scale: " + pair_of(t.crop_scale_min, t.crop_scale_max) +
               ", ratio: " + pair_of(t.crop_ratio_min, t.crop_ratio_max);
      break;
    case TransformKind::RandomHorizontalFlip: params = "p: " + format_double(t.p); break;
    case TransformKind::ColorJitter:
      params = "brightness: " + format_double(t.brightness) + ", contrast: " + format_double(t.contrast) +
               ", saturation: " + format_double(t.saturation) + ", hue: " + format_double(t.hue);
      break;
    case TransformKind::Resize:
    case TransformKind::CenterCrop: params = "size: " + std::to_string(t.size); break;
  }
  return std::string(to_string(t.kind)) + ": {" + params + "}";
}

void emit_transforms(std::string& y, const char* key, const std::vector<TransformSpec>& list) {
  y += std::string("  ") + key + ":" + (list.empty() ? " []\n" : "\n");
  for (const TransformSpec& t : list) y += "    - " + transform_item(t) + "\n";
}

void emit_data(std::string& y, const DataSpec& d) {
  y += "data:\n";
  y += std::string("  dataset: ") + to_string(d.dataset) + "\n";
  const SyntheticSpec& sy = d.synthetic;
  y += "  synthetic: {train_size: " + std::to_string(sy.train_size) + ", val_size: " + std::to_string(sy.val_size) +
       ", height: " + std::to_string(sy.height) + ", width: " + std::to_string(sy.width) +
       ", channels: " + std::to_string(sy.channels) + ", classes: " + std::to_string(sy.classes) + "}\n";
  y += "  root: " + quoted(d.root) + "\n";
  y += "  train_images: " + quoted(d.train_images) + "\n";
  y += "  train_labels: " + quoted(d.train_labels) + "\n";
  y += "  val_images: " + quoted(d.val_images) + "\n";
  y += "  val_labels: " + quoted(d.val_labels) + "\n";
  y += "  train_path: " + quoted(d.train_path) + "\n";
  y += "  val_path: " + quoted(d.val_path) + "\n";
  y += "  dts_level: " + std::to_string(d.dts_level) + "\n";
  y += std::string("  in_memory: ") + boolean(d.in_memory) + "\n";
  y += "  io_threads: " + std::to_string(d.io_threads) + "\n";
  y += std::string("  cache_val: ") + boolean(d.cache_val) + "\n";
  y += "  batch_size: " + std::to_string(d.batch_size) + "\n";
  y += "  val_batch_size: " + std::to_string(d.val_batch_size) + "\n";
  y += "  workers: " + std::to_string(d.workers) + "\n";
  y += "  train_subset: " + std::to_string(d.train_subset) + "\n";
  y += std::string("  drop_last: ") + boolean(d.drop_last) + "\n";
  y += "  normalization: {mean: " + list_of(d.mean) + ", std: " + list_of(d.std) + "}\n";
  emit_transforms(y, "train_transforms", d.train_transforms);
  emit_transforms(y, "val_transforms", d.val_transforms);
}

// One layer as a flow map with its type's keys only.
std::string layer_item(const LayerSpec& l) {
  std::string s = std::string("{type: ") + to_string(l.kind) + ", name: " + quoted(l.name) + ", inputs: [";
  for (size_t i = 0; i < l.inputs.size(); ++i) s += (i ? ", " : "") + quoted(l.inputs[i]);
  s += "]";
  if (l.kind == LayerKind::Linear)
    s += ", out_features: " + std::to_string(l.out_features) + ", bias: " + boolean(l.bias);
  if (l.kind == LayerKind::Dropout) s += ", p: " + format_double(l.p);
  if (l.kind == LayerKind::Conv2d)
    s += ", out_channels: " + std::to_string(l.out_channels) + ", kernel_size: " + std::to_string(l.kernel_size) +
         ", stride: " + std::to_string(l.stride) + ", padding: " + std::to_string(l.padding) +
         ", dilation: " + std::to_string(l.dilation) + ", groups: " + std::to_string(l.groups) +
         ", bias: " + boolean(l.bias);
  if (l.kind == LayerKind::MaxPool || l.kind == LayerKind::AvgPool)
    s += ", kernel_size: " + std::to_string(l.kernel_size) + ", stride: " + std::to_string(l.stride) +
         ", padding: " + std::to_string(l.padding);
  if (l.kind == LayerKind::BatchNorm) s += ", eps: " + format_double(l.eps) + ", momentum: " + format_double(l.momentum);
  if (l.kind == LayerKind::LeakyRelu) s += ", negative_slope: " + format_double(l.negative_slope);
  if (l.kind == LayerKind::Elu) s += ", alpha: " + format_double(l.alpha);
  return s + "}";
}

void emit_model(std::string& y, const ModelSpec& m) {
  y += "model:\n";
  y += std::string("  init: ") + to_string(m.init) + "\n";
  y += std::string("  layers:") + (m.layers.empty() ? " []\n" : "\n");
  for (const LayerSpec& l : m.layers) y += "    - " + layer_item(l) + "\n";
  if (!m.freeze.empty()) y += "  freeze: " + patterns_of(m.freeze) + "\n";  // only when set (checkpoint hashes)
}

// Writes the keys used by the chosen type as "  key: value" lines; the others (which spec_parse would refuse
// under that type) go into one comment line, so the output still shows every field.
void emit_typed_keys(std::string& y, const char* type_name, const std::vector<std::pair<std::string, bool>>& keys) {
  std::string unused;
  for (const auto& [text, used] : keys) {
    if (used) y += "  " + text + "\n";
    else unused += (unused.empty() ? "" : ", ") + text;
  }
  if (!unused.empty()) y += std::string("  # not used by ") + type_name + ": " + unused + "\n";
}

void emit_optimizer(std::string& y, const OptimizerSpec& o) {
  const bool lars = o.kind == OptimizerKind::Lars;
  const bool sgd = o.kind == OptimizerKind::Sgd || lars;
  y += "optimizer:\n";
  y += std::string("  type: ") + to_string(o.kind) + "\n";
  y += "  lr: " + format_double(o.lr) + "\n";
  y += "  weight_decay: " + format_double(o.weight_decay) + "\n";
  y += std::string("  decay_bias_and_norm: ") + boolean(o.decay_bias_and_norm) + "\n";
  y += "  clip_grad_norm: " + format_double(o.clip_grad_norm) + "\n";
  if (!o.param_groups.empty()) {  // only when set, so specs without groups keep their checkpoint hash
    y += "  param_groups:\n";
    for (const ParamGroupSpec& g : o.param_groups) {
      y += "    - {params: " + patterns_of(g.params);
      if (g.has_lr) y += ", lr: " + format_double(g.lr);
      if (g.has_weight_decay) y += ", weight_decay: " + format_double(g.weight_decay);
      y += "}\n";
    }
  }
  emit_typed_keys(y, to_string(o.kind),
                  {{"momentum: " + format_double(o.momentum), sgd},
                   {"dampening: " + format_double(o.dampening), sgd},
                   {std::string("nesterov: ") + boolean(o.nesterov), sgd},
                   {"betas: " + pair_of(o.beta1, o.beta2), !sgd},
                   {"eps: " + format_double(o.eps), !sgd || lars},
                   {"trust_coefficient: " + format_double(o.trust_coefficient), lars},
                   {std::string("trust_clip: ") + boolean(o.trust_clip), lars}});
}

void emit_scheduler(std::string& y, const SchedulerSpec& s) {
  std::string milestones = "[";
  for (size_t i = 0; i < s.milestones.size(); ++i) milestones += (i ? ", " : "") + std::to_string(s.milestones[i]);
  milestones += "]";
  const bool step = s.kind == SchedulerKind::Step, multistep = s.kind == SchedulerKind::MultiStep;
  y += "scheduler:\n";
  y += std::string("  type: ") + to_string(s.kind) + "\n";
  y += "  warmup_epochs: " + std::to_string(s.warmup_epochs) + "\n";
  emit_typed_keys(y, to_string(s.kind),
                  {{"eta_min: " + format_double(s.eta_min), s.kind == SchedulerKind::Cosine},
                   {"step_size: " + std::to_string(s.step_size), step},
                   {"gamma: " + format_double(s.gamma), step || multistep},
                   {"milestones: " + milestones, multistep}});
}

}  // namespace

std::string spec_to_yaml(const Spec& spec) {
  std::string y = "# Complete trctl spec (every field), written by spec_to_yaml.\n";
  y += "seed: " + std::to_string(spec.seed) + "\n";
  emit_data(y, spec.data);
  emit_model(y, spec.model);
  y += "loss:\n";
  y += std::string("  type: ") + to_string(spec.loss.kind) + "\n";
  const bool ce = spec.loss.kind == LossKind::CrossEntropy;
  emit_typed_keys(y, to_string(spec.loss.kind),
                  {{"label_smoothing: " + format_double(spec.loss.label_smoothing), ce},
                   {"class_weights: " + list_of(spec.loss.class_weights), ce}});
  emit_optimizer(y, spec.optimizer);
  emit_scheduler(y, spec.scheduler);
  y += "train:\n";
  y += "  epochs: " + std::to_string(spec.train.epochs) + "\n";
  y += std::string("  precision: ") + to_string(spec.train.precision) + "\n";
  y += std::string("  device: ") + to_string(spec.train.device) + "\n";
  y += "  threads: " + std::to_string(spec.train.threads) + "\n";
  if (spec.train.accumulate_steps > 1)  // written only when set: specs without it keep their checkpoint hash
    y += "  accumulate_steps: " + std::to_string(spec.train.accumulate_steps) + "\n";
  y += std::string("  deterministic: ") + boolean(spec.train.deterministic) + "\n";
  if (spec.train.conv_im2col != ConvIm2col::Forward)  // only when not the default: older specs keep their hash
    y += std::string("  conv_im2col: ") + to_string(spec.train.conv_im2col) + "\n";
  if (spec.train.conv_s2d != ConvS2d::Forward)  // only when not the default: older specs keep their hash
    y += std::string("  conv_s2d: ") + to_string(spec.train.conv_s2d) + "\n";
  if (spec.train.conv_fewc != ConvFewc::On)  // only when not the default: older specs keep their hash
    y += std::string("  conv_fewc: ") + to_string(spec.train.conv_fewc) + "\n";
  if (spec.train.conv_wgconv != ConvWgconv::Off)  // likewise
    y += std::string("  conv_wgconv: ") + to_string(spec.train.conv_wgconv) + "\n";
  // Only when not the default (auto since RESULTS.md run 58): specs without the key keep their hash, and now mean
  // auto; an explicit separate is written.
  if (spec.train.conv_bn_stats != ConvBnStats::Auto)
    y += std::string("  conv_bn_stats: ") + to_string(spec.train.conv_bn_stats) + "\n";
  if (spec.train.conv_bn_apply != ConvBnApply::Separate)  // only when not the default: older specs keep their hash
    y += std::string("  conv_bn_apply: ") + to_string(spec.train.conv_bn_apply) + "\n";
  if (spec.train.conv_bn_backward != ConvBnBackward::Auto)  // likewise (auto the default, separate written)
    y += std::string("  conv_bn_backward: ") + to_string(spec.train.conv_bn_backward) + "\n";
  if (spec.train.grad_check != GradCheck::Auto)  // only when not the default: older specs keep their hash
    y += std::string("  grad_check: ") + to_string(spec.train.grad_check) + "\n";
  if (spec.train.conv_dgrad_fwd != ConvDgradFwd::Off)  // likewise (off the default)
    y += std::string("  conv_dgrad_fwd: ") + to_string(spec.train.conv_dgrad_fwd) + "\n";
  if (spec.train.conv_wgrad_overlap > 0)  // likewise (0 the default)
    y += "  conv_wgrad_overlap: " + std::to_string(spec.train.conv_wgrad_overlap) + "\n";
  if (!spec.train.conv_wgrad_low_priority)  // likewise (low the default)
    y += "  conv_wgrad_priority: same\n";
  y += "  checkpoint_every: " + std::to_string(spec.train.checkpoint_every) + "\n";
  if (spec.train.checkpoint_every_steps > 0)  // written only when set: specs without it keep their checkpoint hash
    y += "  checkpoint_every_steps: " + std::to_string(spec.train.checkpoint_every_steps) + "\n";
  y += "  validate_every: " + std::to_string(spec.train.validate_every) + "\n";
  y += "  early_stopping_patience: " + std::to_string(spec.train.early_stopping_patience) + "\n";
  y += std::string("  early_stopping_metric: ") + (spec.train.early_stopping_on_loss ? "val_loss" : "val_top1") + "\n";
  y += "  early_stopping_min_delta: " + format_double(spec.train.early_stopping_min_delta) + "\n";
  y += "  keep_last: " + std::to_string(spec.train.keep_last) + "\n";
  y += std::string("  keep_best: ") + boolean(spec.train.keep_best) + "\n";
  y += "  ema_decay: " + format_double(spec.train.ema_decay) + "\n";
  y += std::string("  eval_ema: ") + boolean(spec.train.eval_ema) + "\n";
  y += "run:\n";
  y += "  out_dir: " + quoted(spec.run.out_dir) + "\n";
  y += "  name: " + quoted(spec.run.name) + "\n";
  y += "  log_interval: " + std::to_string(spec.run.log_interval) + "\n";
  y += std::string("  progress: ") + to_string(spec.run.progress) + "\n";
  if (spec.debug.any()) {  // testing aids: written only when set (see DebugSpec)
    std::string steps;
    for (int64_t v : spec.debug.inject_nonfinite_grad_steps) steps += (steps.empty() ? "" : ", ") + std::to_string(v);
    y += "debug:\n";
    y += "  inject_nonfinite_grad_steps: [" + steps + "]\n";
    y += "  fail_checkpoint_write: " + std::to_string(spec.debug.fail_checkpoint_write) + "\n";
  }
  return y;
}

}  // namespace trctl
