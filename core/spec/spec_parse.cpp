// spec_parse / spec_load: YAML text → located tree → overrides applied → every section read and checked, all
// errors collected; also the readers of the small sections (loss, optimizer, scheduler, train, run).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>

#include "core/spec/spec.h"
#include "core/spec/spec_fields.h"
#include "core/spec/spec_sections.h"
#include "core/spec/yaml_tree.h"

namespace trctl {
namespace spec_detail {

constexpr size_t kMaxSpecBytes = size_t{1} << 20;  // 1 MiB: far above any real recipe, bounds parser work

namespace {

// Where the byte at `offset` of `text` stands: 1-based line and column, columns counted in bytes as the parser's
// other locations are. For the size-limit error, which points at the first byte past the limit.
YamlLoc loc_of_byte(const std::string& text, size_t offset, int source) {
  const size_t nl = offset == 0 ? std::string::npos : text.rfind('\n', offset - 1);
  const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
  const auto lines = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(line_start), '\n');
  return YamlLoc{source, static_cast<int>(lines) + 1, static_cast<int>(offset - line_start) + 1};
}

// "the limit is 1 MiB (1048576 bytes), crossed here at byte 1048577": the message is located at that byte.
std::string size_limit_text() {
  return "the limit is 1 MiB (" + std::to_string(kMaxSpecBytes) + " bytes), crossed here at byte " +
         std::to_string(kMaxSpecBytes + 1);
}

}  // namespace

// loss: type, and cross_entropy's label_smoothing and class_weights (refused for the other types). The number of
// class weights is checked against the dataset's classes when the graph is built.
void parse_loss_section(Diagnostics& d, const YamlNode& map, LossSpec& out) {
  check_keys(d, map, "loss", {"type", "label_smoothing", "class_weights"});
  const bool typed =
      get_enum(d, map, "loss", "type", {LossKind::CrossEntropy, LossKind::BceWithLogits, LossKind::Mse}, out.kind);
  get_double(d, map, "loss", "label_smoothing", half_open(0, 1), out.label_smoothing);
  if (get_double_list(d, map, "loss", "class_weights", at_least(0), out.class_weights) && !out.class_weights.empty()) {
    bool any = false;
    for (double w : out.class_weights) any |= w > 0;
    if (!any)
      d.error(ErrCode::Invalid, map.find("class_weights")->loc,
              "'loss.class_weights' are all 0; at least one class needs a positive weight");
  }
  if (typed && out.kind != LossKind::CrossEntropy)
    reject_keys(d, map, "loss", {"label_smoothing", "class_weights"},
                std::string("loss.type '") + to_string(out.kind) + "'", "cross_entropy");
}

namespace {

// optimizer.param_groups: a list of {params, lr, weight_decay} maps (ParamGroupSpec), at most kMaxParamGroups.
void parse_param_groups(Diagnostics& d, const YamlNode& map, std::vector<ParamGroupSpec>& out) {
  const YamlNode* list = map.find("param_groups");
  const std::string path = "optimizer.param_groups";
  if (!list || !node_is(d, *list, YamlNode::Kind::Seq, path)) return;
  if (list->items.size() > static_cast<size_t>(kMaxParamGroups)) {
    d.error(ErrCode::OutOfRange, list->loc,
            "'" + path + "' has " + std::to_string(list->items.size()) + " groups; at most " +
                std::to_string(kMaxParamGroups) + " are supported");
    return;
  }
  std::vector<ParamGroupSpec> groups;
  for (size_t i = 0; i < list->items.size(); ++i) {
    const YamlNode& item = list->items[i];
    const std::string ip = index_path(path, i);
    if (!node_is(d, item, YamlNode::Kind::Map, ip)) continue;
    check_keys(d, item, ip, {"params", "lr", "weight_decay"});
    ParamGroupSpec g;
    if (!item.find("params")) d.error(ErrCode::Missing, item.loc, "missing '" + ip + ".params' (name patterns)");
    get_patterns(d, item, ip, "params", g.params);
    g.has_lr = item.find("lr") != nullptr;
    get_double(d, item, ip, "lr", above(0), g.lr);
    g.has_weight_decay = item.find("weight_decay") != nullptr;
    get_double(d, item, ip, "weight_decay", at_least(0), g.weight_decay);
    if (!g.has_lr && !g.has_weight_decay)
      d.error(ErrCode::Invalid, item.loc, "'" + ip + "' sets neither lr nor weight_decay; it would change nothing");
    groups.push_back(std::move(g));
  }
  out = std::move(groups);
}

}  // namespace

// optimizer: shared keys, then the type's own (sgd: momentum, dampening, nesterov; adam/adamw: betas, eps; lars:
// sgd's and eps, trust_coefficient, trust_clip); the other types' keys are errors, as is nesterov without momentum
// or with dampening (PyTorch's rule).
void parse_optimizer_section(Diagnostics& d, const YamlNode& map, OptimizerSpec& out) {
  const std::string s = "optimizer";
  check_keys(d, map, s,
             {"type", "lr", "momentum", "dampening", "nesterov", "betas", "eps", "weight_decay",
              "decay_bias_and_norm", "trust_coefficient", "trust_clip", "clip_grad_norm", "param_groups"});
  bool typed = get_enum(d, map, s, "type",
                        {OptimizerKind::Sgd, OptimizerKind::Adam, OptimizerKind::AdamW, OptimizerKind::Lars},
                        out.kind);
  get_double(d, map, s, "lr", above(0), out.lr);
  get_double(d, map, s, "weight_decay", at_least(0), out.weight_decay);
  get_bool(d, map, s, "decay_bias_and_norm", out.decay_bias_and_norm);
  get_double(d, map, s, "clip_grad_norm", at_least(0), out.clip_grad_norm);
  parse_param_groups(d, map, out.param_groups);
  bool sgd_ok = get_double(d, map, s, "momentum", half_open(0, 1), out.momentum);
  sgd_ok &= get_double(d, map, s, "dampening", closed(0, 1), out.dampening);
  sgd_ok &= get_bool(d, map, s, "nesterov", out.nesterov);
  get_double_pair(d, map, s, "betas", half_open(0, 1), false, out.beta1, out.beta2);
  get_double(d, map, s, "eps", above(0), out.eps);
  get_double(d, map, s, "trust_coefficient", above(0), out.trust_coefficient);
  get_bool(d, map, s, "trust_clip", out.trust_clip);
  if (!typed) return;  // which keys belong is unknown
  const std::string chosen = std::string("optimizer.type '") + to_string(out.kind) + "'";
  const bool sgd_like = out.kind == OptimizerKind::Sgd || out.kind == OptimizerKind::Lars;
  if (out.kind != OptimizerKind::Lars) reject_keys(d, map, s, {"trust_coefficient", "trust_clip"}, chosen, "lars");
  if (sgd_like) {
    reject_keys(d, map, s, {"betas"}, chosen, "adam and adamw");
    if (out.kind == OptimizerKind::Sgd) reject_keys(d, map, s, {"eps"}, chosen, "adam and adamw");
    if (sgd_ok && out.nesterov && (out.momentum <= 0 || out.dampening != 0)) {
      d.error(ErrCode::Invalid, map.find("nesterov")->loc,
              "'optimizer.nesterov' needs momentum > 0 and dampening 0 (got momentum " +
                  format_double(out.momentum) + ", dampening " + format_double(out.dampening) + ")");
    }
  } else {
    reject_keys(d, map, s, {"momentum", "dampening", "nesterov"}, chosen, "sgd");
  }
}

namespace {

// scheduler.milestones: integers >= 1, strictly increasing.
void parse_milestones(Diagnostics& d, const YamlNode& map, std::vector<int>& out) {
  const YamlNode* list = map.find("milestones");
  if (!list) return;
  const std::string path = "scheduler.milestones";
  if (!node_is(d, *list, YamlNode::Kind::Seq, path)) return;
  std::vector<int> values;
  bool ok = true;
  for (size_t i = 0; i < list->items.size(); ++i) {
    int64_t v = 0;
    if (!node_int(d, list->items[i], index_path(path, i), int_at_least(1), v)) {
      ok = false;
      continue;
    }
    if (!values.empty() && v <= values.back()) {
      d.error(ErrCode::OutOfRange, list->items[i].loc,
              "'" + path + "' must be strictly increasing: " + list->items[i].text + " follows " +
                  std::to_string(values.back()));
      ok = false;
    }
    values.push_back(static_cast<int>(v));
  }
  if (ok) out = std::move(values);
}

}  // namespace

// scheduler: warmup_epochs for every type; eta_min (cosine), step_size (step), gamma (step, multistep), milestones
// (multistep) are errors under another type. warmup_epochs < train.epochs for cosine is checked by the caller.
void parse_scheduler_section(Diagnostics& d, const YamlNode& map, SchedulerSpec& out) {
  const std::string s = "scheduler";
  check_keys(d, map, s, {"type", "warmup_epochs", "eta_min", "step_size", "gamma", "milestones"});
  bool typed = get_enum(
      d, map, s, "type",
      {SchedulerKind::Constant, SchedulerKind::Cosine, SchedulerKind::Step, SchedulerKind::MultiStep}, out.kind);
  get_int(d, map, s, "warmup_epochs", int_at_least(0), out.warmup_epochs);
  get_double(d, map, s, "eta_min", at_least(0), out.eta_min);
  get_int(d, map, s, "step_size", int_at_least(1), out.step_size);
  get_double(d, map, s, "gamma", above(0), out.gamma);
  parse_milestones(d, map, out.milestones);
  if (!typed) return;
  const std::string chosen = std::string("scheduler.type '") + to_string(out.kind) + "'";
  if (out.kind != SchedulerKind::Cosine) reject_keys(d, map, s, {"eta_min"}, chosen, "cosine");
  if (out.kind != SchedulerKind::Step) reject_keys(d, map, s, {"step_size"}, chosen, "step");
  if (out.kind != SchedulerKind::Step && out.kind != SchedulerKind::MultiStep)
    reject_keys(d, map, s, {"gamma"}, chosen, "step and multistep");
  if (out.kind != SchedulerKind::MultiStep) reject_keys(d, map, s, {"milestones"}, chosen, "multistep");
}

namespace {

// train.conv_bn_stats, conv_bn_apply, conv_bn_backward (after deterministic and precision). An explicit fused that
// cannot be honoured is an error; auto resolves to separate there instead (effective_conv_bn_stats, _backward).
void parse_conv_bn_keys(Diagnostics& d, const YamlNode& map, TrainSpec& out) {
  const std::string s = "train";
  get_enum(d, map, s, "conv_bn_stats", {ConvBnStats::Separate, ConvBnStats::Fused, ConvBnStats::Auto},
           out.conv_bn_stats);
  if (out.conv_bn_stats == ConvBnStats::Fused && out.deterministic)
    d.error(ErrCode::Invalid, map.find("conv_bn_stats")->loc,
            "'train.conv_bn_stats: fused' needs 'train.deterministic: false' (cuDNN's fused batch-norm statistics "
            "are not bitwise repeatable run to run); set it, or use conv_bn_stats: auto (fused only where allowed) "
            "or separate");
  const bool amp = out.precision == Precision::Fp16 || out.precision == Precision::Bf16;
  if (out.conv_bn_stats == ConvBnStats::Fused && !amp)
    d.error(ErrCode::NotSupported, map.find("conv_bn_stats")->loc,
            std::string("'train.conv_bn_stats: fused' needs train.precision fp16 or bf16 (cuDNN's conv + genstats "
                        "graphs take f16/bf16 activations), not ") + to_string(out.precision));
  get_enum(d, map, s, "conv_bn_apply", {ConvBnApply::Separate, ConvBnApply::Prologue}, out.conv_bn_apply);
  if (out.conv_bn_apply == ConvBnApply::Prologue && out.precision != Precision::Fp16)
    d.error(ErrCode::NotSupported, map.find("conv_bn_apply")->loc,
            std::string("'train.conv_bn_apply: prologue' needs train.precision fp16 (cuDNN's prologue weight "
                        "gradient takes f16 activations), not ") + to_string(out.precision));
  if (out.conv_bn_apply != ConvBnApply::Separate && out.conv_bn_stats == ConvBnStats::Separate)
    d.error(ErrCode::Invalid, map.find("conv_bn_apply")->loc,
            "'train.conv_bn_apply: prologue' needs 'train.conv_bn_stats: fused' or 'auto' (the convolution that "
            "applies the batch norm is one of cuDNN's conv + genstats graphs)");
  else if (out.conv_bn_apply != ConvBnApply::Separate && out.conv_bn_stats == ConvBnStats::Auto &&
           effective_conv_bn_stats(out) == ConvBnStats::Separate)
    d.error(ErrCode::Invalid, map.find("conv_bn_apply")->loc,
            std::string("'train.conv_bn_apply: prologue' needs the batch-norm statistics fused, but "
                        "'train.conv_bn_stats: auto'") + (map.find("conv_bn_stats") ? "" : " (the default)") +
                " resolves to separate with " +
                (out.deterministic ? std::string("'train.deterministic: true'")
                                   : std::string("train.precision ") + to_string(out.precision)) +
                " (it fuses only with train.deterministic: false and precision fp16 or bf16)");
  get_enum(d, map, s, "conv_bn_backward", {ConvBnBackward::Separate, ConvBnBackward::Fused, ConvBnBackward::Auto},
           out.conv_bn_backward);
  if (out.conv_bn_backward == ConvBnBackward::Fused && out.deterministic)
    d.error(ErrCode::Invalid, map.find("conv_bn_backward")->loc,
            "'train.conv_bn_backward: fused' needs 'train.deterministic: false' (cuDNN's fused batch-norm backward "
            "reductions are not known to be bitwise repeatable); set it, or use conv_bn_backward: auto (fused only "
            "where allowed) or separate");
  if (out.conv_bn_backward == ConvBnBackward::Fused && out.precision != Precision::Fp16)
    d.error(ErrCode::NotSupported, map.find("conv_bn_backward")->loc,
            std::string("'train.conv_bn_backward: fused' needs train.precision fp16 (cuDNN's dgrad + batch-norm "
                        "backward graph takes f16 activations), not ") + to_string(out.precision));
}

}  // namespace

void parse_train_section(Diagnostics& d, const YamlNode& map, TrainSpec& out) {
  const std::string s = "train";
  check_keys(d, map, s,
             {"epochs", "precision", "device", "threads", "deterministic", "checkpoint_every", "checkpoint_every_steps",
              "keep_last", "keep_best", "ema_decay", "eval_ema", "validate_every", "early_stopping_patience",
              "early_stopping_metric", "early_stopping_min_delta", "accumulate_steps", "conv_im2col",
              "conv_s2d", "conv_fewc", "conv_wgconv", "conv_bn_stats", "conv_bn_apply", "conv_bn_backward",
              "grad_check", "conv_dgrad_fwd", "conv_wgrad_overlap", "conv_wgrad_priority"});
  get_int(d, map, s, "epochs", int_at_least(1), out.epochs);
  get_enum(d, map, s, "precision", {Precision::Fp32, Precision::Tf32, Precision::Fp16, Precision::Bf16},
           out.precision);
  get_enum(d, map, s, "device", {DeviceKind::Auto, DeviceKind::Cpu, DeviceKind::Cuda}, out.device);
  get_int(d, map, s, "threads", int_at_least(0), out.threads);
  get_int(d, map, s, "accumulate_steps", IntRange{1, 65536}, out.accumulate_steps);
  get_bool(d, map, s, "deterministic", out.deterministic);
  get_enum(d, map, s, "conv_im2col", {ConvIm2col::On, ConvIm2col::Forward, ConvIm2col::Off}, out.conv_im2col);
  get_enum(d, map, s, "conv_s2d", {ConvS2d::On, ConvS2d::Forward, ConvS2d::Off}, out.conv_s2d);
  get_enum(d, map, s, "conv_fewc", {ConvFewc::On, ConvFewc::Unfolded, ConvFewc::Forward, ConvFewc::Off},
           out.conv_fewc);
  get_enum(d, map, s, "conv_wgconv",
           {ConvWgconv::Off, ConvWgconv::Dgrad, ConvWgconv::Fwd, ConvWgconv::Both, ConvWgconv::Wgrad, ConvWgconv::Bwd,
            ConvWgconv::All},
           out.conv_wgconv);
  parse_conv_bn_keys(d, map, out);
  get_enum(d, map, s, "grad_check", {GradCheck::Auto, GradCheck::Full}, out.grad_check);
  get_enum(d, map, s, "conv_dgrad_fwd", {ConvDgradFwd::Auto, ConvDgradFwd::On, ConvDgradFwd::Off},
           out.conv_dgrad_fwd);
  get_int(d, map, s, "conv_wgrad_overlap", IntRange{0, 4}, out.conv_wgrad_overlap);
  if (const YamlNode* m = map.find("conv_wgrad_priority")) {
    size_t index = 0;
    if (enum_by_name(d, *m, "train.conv_wgrad_priority", {"low", "same"}, index))
      out.conv_wgrad_low_priority = index == 0;
  }
  get_int(d, map, s, "checkpoint_every", int_at_least(0), out.checkpoint_every);
  get_int(d, map, s, "checkpoint_every_steps", int_at_least(0), out.checkpoint_every_steps);
  get_int(d, map, s, "keep_last", int_at_least(0), out.keep_last);
  get_int(d, map, s, "validate_every", int_at_least(1), out.validate_every);
  get_int(d, map, s, "early_stopping_patience", int_at_least(0), out.early_stopping_patience);
  get_double(d, map, s, "early_stopping_min_delta", at_least(0), out.early_stopping_min_delta);
  if (const YamlNode* m = map.find("early_stopping_metric")) {
    size_t index = 0;
    if (enum_by_name(d, *m, "train.early_stopping_metric", {"val_top1", "val_loss"}, index))
      out.early_stopping_on_loss = index == 1;
  }
  get_bool(d, map, s, "keep_best", out.keep_best);
  get_double(d, map, s, "ema_decay", half_open(0, 1), out.ema_decay);
  get_bool(d, map, s, "eval_ema", out.eval_ema);
}

void parse_run_section(Diagnostics& d, const YamlNode& map, RunSpec& out) {
  const std::string s = "run";
  check_keys(d, map, s, {"out_dir", "name", "log_interval", "progress"});
  get_string(d, map, s, "out_dir", out.out_dir);
  get_string(d, map, s, "name", out.name);
  get_int(d, map, s, "log_interval", int_at_least(1), out.log_interval);
  get_enum(d, map, s, "progress", {ProgressKind::Auto, ProgressKind::On, ProgressKind::Off}, out.progress);
}

void parse_debug_section(Diagnostics& d, const YamlNode& map, DebugSpec& out) {
  const std::string s = "debug";
  check_keys(d, map, s, {"inject_nonfinite_grad_steps", "fail_checkpoint_write"});
  get_int(d, map, s, "fail_checkpoint_write", int_at_least(0), out.fail_checkpoint_write);
  const YamlNode* list = map.find("inject_nonfinite_grad_steps");
  const std::string path = "debug.inject_nonfinite_grad_steps";
  if (!list || !node_is(d, *list, YamlNode::Kind::Seq, path)) return;
  std::vector<int64_t> steps;
  for (size_t i = 0; i < list->items.size(); ++i) {
    int64_t v = 0;
    if (!node_int(d, list->items[i], index_path(path, i), IntRange{1, int64_t{1} << 31}, v)) continue;
    if (!steps.empty() && v <= steps.back())
      d.error(ErrCode::OutOfRange, list->items[i].loc,
              "'" + path + "' must be strictly increasing: " + list->items[i].text + " follows " +
                  std::to_string(steps.back()));
    steps.push_back(v);
  }
  out.inject_nonfinite_grad_steps = std::move(steps);
}

namespace {

// Calls read(map) for root[key] when it is a map; an absent or null section reads as an empty map.
void read_section(Diagnostics& d, const YamlNode& root, const char* key,
                  const std::function<void(const YamlNode&)>& read) {
  YamlNode empty;
  empty.kind = YamlNode::Kind::Map;
  const YamlNode* n = root.find(key);
  if (!n || n->kind == YamlNode::Kind::Null) {
    empty.loc = n ? n->loc : root.loc;
    read(empty);
  } else if (node_is(d, *n, YamlNode::Kind::Map, key)) {
    read(*n);
  }
}

void parse_root(Diagnostics& d, const YamlNode& root, Spec& spec) {
  check_keys(d, root, "", {"seed", "data", "model", "loss", "optimizer", "scheduler", "train", "run", "debug"});
  if (const YamlNode* seed = root.find("seed")) node_uint64(d, *seed, "seed", spec.seed);
  read_section(d, root, "data", [&](const YamlNode& m) { parse_data_section(d, m, spec.data); });
  if (!root.find("model")) {
    d.error(ErrCode::Missing, root.loc, "missing 'model' (a spec needs a model with a non-empty 'layers' list)");
  } else {
    read_section(d, root, "model", [&](const YamlNode& m) { parse_model_section(d, m, spec.model); });
  }
  read_section(d, root, "loss", [&](const YamlNode& m) { parse_loss_section(d, m, spec.loss); });
  read_section(d, root, "optimizer", [&](const YamlNode& m) { parse_optimizer_section(d, m, spec.optimizer); });
  read_section(d, root, "scheduler", [&](const YamlNode& m) { parse_scheduler_section(d, m, spec.scheduler); });
  read_section(d, root, "train", [&](const YamlNode& m) { parse_train_section(d, m, spec.train); });
  read_section(d, root, "run", [&](const YamlNode& m) { parse_run_section(d, m, spec.run); });
  read_section(d, root, "debug", [&](const YamlNode& m) { parse_debug_section(d, m, spec.debug); });
}

}  // namespace
}  // namespace spec_detail

Result<Spec> spec_parse(const std::string& yaml_text, const std::string& file_name,
                        const std::vector<std::string>& overrides) {
  using namespace spec_detail;
  Diagnostics d(file_name);
  if (yaml_text.size() > kMaxSpecBytes) {
    d.error(ErrCode::Invalid, loc_of_byte(yaml_text, kMaxSpecBytes, 0),
            "spec is " + std::to_string(yaml_text.size()) + " bytes; " + size_limit_text());
    return d.take();
  }
  YamlNode root;
  YamlParseOutcome outcome = yaml_tree_parse(yaml_text, 0, 0, d, root);
  if (outcome == YamlParseOutcome::Failed) return d.take();
  if (outcome == YamlParseOutcome::Empty || root.kind == YamlNode::Kind::Null) {
    d.error_unlocated(ErrCode::Missing, 0, "empty spec (expected a map with at least 'model')");
    return d.take();
  }
  if (root.kind != YamlNode::Kind::Map) {
    if (root.kind != YamlNode::Kind::Bad)
      d.error(ErrCode::WrongType, root.loc,
              "expected a map (seed, data, model, ...) at the top level of the spec, got " + yaml_describe(root));
    return d.take();
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    int source = d.add_source("<override " + std::to_string(i + 1) + ">");
    yaml_tree_apply_override(root, overrides[i], source, d);
  }
  Spec spec;
  spec.source = file_name;
  parse_root(d, root, spec);
  if (!d.empty()) return d.take();
  return spec;
}

Result<Spec> spec_load(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{ErrCode::Io, path, std::string("cannot open the spec file: ") + std::strerror(errno)};
  // Read at most one byte past the limit, so a huge file is refused without being read.
  const size_t limit = spec_detail::kMaxSpecBytes;
  std::string text(limit + 1, '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  if (in.bad()) return Error{ErrCode::Io, path, "cannot read the spec file"};
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > limit) {  // located at the first byte past the limit (the file's size is not read)
    spec_detail::Diagnostics d(path);
    d.error(ErrCode::Invalid, spec_detail::loc_of_byte(text, limit, 0),
            "spec file is too large: " + spec_detail::size_limit_text());
    return d.take();
  }
  return spec_parse(text, path, overrides);
}

// The one place that says what the two switches run as (spec.h). Fusing needs non-deterministic engines and AMP
// activations: f16 or bf16 for the conv + genstats graphs, f16 for the dgrad + BN-backward graph.
ConvBnStats effective_conv_bn_stats(const TrainSpec& t) {
  const bool amp = t.precision == Precision::Fp16 || t.precision == Precision::Bf16;
  return !t.deterministic && amp ? t.conv_bn_stats : ConvBnStats::Separate;
}

ConvBnBackward effective_conv_bn_backward(const TrainSpec& t) {
  const bool allowed = !t.deterministic && t.precision == Precision::Fp16;
  return allowed && t.conv_bn_backward != ConvBnBackward::Separate ? ConvBnBackward::Fused : ConvBnBackward::Separate;
}

bool wgconv_bn_backward_pairs(const TrainSpec& t) {
  const bool amp = t.precision == Precision::Fp16 || t.precision == Precision::Bf16;
  return amp && t.conv_bn_backward != ConvBnBackward::Separate && wgconv_routes_dgrad(t.conv_wgconv);
}

ConvBnBackwardPairs conv_bn_backward_pairs(const TrainSpec& t) {
  if (effective_conv_bn_backward(t) == ConvBnBackward::Fused) return ConvBnBackwardPairs::GraphD;
  return wgconv_bn_backward_pairs(t) ? ConvBnBackwardPairs::WgconvOnly : ConvBnBackwardPairs::None;
}

const char* conv_bn_backward_pairs_name(ConvBnBackwardPairs p) {
  switch (p) {
    case ConvBnBackwardPairs::GraphD: return "fused";
    case ConvBnBackwardPairs::WgconvOnly: return "wgconv";
    case ConvBnBackwardPairs::None: break;
  }
  return "separate";
}

}  // namespace trctl
