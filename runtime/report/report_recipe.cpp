// recipe_keys (the fairness-table items) and recipe_from_trctl: trctl's side of each item, from the resolved
// config, plan.txt and run.json, worded in the vocabulary that benchmarks/pytorch_mlp_fmnist.py writes for
// PyTorch's side.
#include "runtime/report/report_recipe.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace trctl {

const std::vector<RecipeKey>& recipe_keys() {
  static const std::vector<RecipeKey> keys = {
      {"framework", "framework", false},
      {"device", "device", false},
      {"dataset", "dataset", true},
      {"model", "model", true},
      {"parameters", "parameters", true},
      {"init", "init", true},
      {"optimizer", "optimizer", true},
      {"weight_decay", "weight decay groups", true},
      {"lr_schedule", "lr schedule", true},
      {"label_smoothing", "label smoothing", true},
      {"val_loss", "validation loss", true},
      {"batch_size", "batch size", true},
      {"epochs", "epochs", true},
      {"augmentation", "augmentation", true},
      {"augmentation_impl", "augmentation implementation", true},
      {"normalization", "normalization", true},
      {"validation", "validation", true},
      {"precision", "precision", true},
      {"tf32", "TF32", true},
      {"memory_format", "memory format", true},
      {"conv_algorithms", "convolution algorithms", true},
      {"graph_mode", "graph mode", true},
      {"compile_excluded", "compile-time exclusion", true},
      {"epoch_time", "epoch time covers", true},
      {"data_loading", "data loading", true},
      {"runs", "number of runs", true},
      {"memory_measure", "peak memory measure", false},
      {"seed", "seed", false},
  };
  return keys;
}

const RecipeKey* recipe_key(const std::string& key) {
  for (const RecipeKey& k : recipe_keys())
    if (key == k.key) return &k;
  return nullptr;
}

std::string recipe_number(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

namespace {

enum class BackendKind { Cpu, Cuda, Unknown };

// What plan.txt tells: the parameter count, tensors with and without weight decay, the activation storage dtype.
struct PlanFacts {
  bool has_params = false;
  long long params = 0;
  int decay = 0, no_decay = 0;
  std::string storage;  // "f32", "f16", "bf16"; empty without a plan
};

PlanFacts plan_facts(const std::string& plan) {
  PlanFacts f;
  std::istringstream in(plan);
  std::string line;
  bool in_params = false;
  while (std::getline(in, line)) {
    if (line.rfind("graph:", 0) == 0) {
      const size_t at = line.find("stored as ");
      if (at != std::string::npos) f.storage = line.substr(at + 10);
    }
    if (line == "params:") {
      in_params = f.has_params = true;
      continue;
    }
    if (!in_params) continue;
    if (line.rfind("  ", 0) != 0) break;
    const size_t open = line.find('('), close = line.find(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    long long n = 1;
    std::istringstream dims(line.substr(open + 1, close - open - 1));
    std::string d;
    while (std::getline(dims, d, ',')) n *= std::atoll(d.c_str());
    f.params += n;
    if (line.find(" no_decay", close) != std::string::npos) ++f.no_decay;
    else ++f.decay;
  }
  return f;
}

// A YAML node as recipe text: numbers through %g, sequences "[a, b]", maps "k=v, k=v".
std::string render(const YAML::Node& n) {
  if (!n || n.IsNull()) return "";
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    return !s.empty() && end == s.c_str() + s.size() ? recipe_number(v) : s;
  }
  std::string out;
  if (n.IsSequence()) {
    for (const auto& e : n) out += (out.empty() ? "" : ", ") + render(e);
    return "[" + out + "]";
  }
  for (const auto& kv : n) out += (out.empty() ? "" : ", ") + kv.first.Scalar() + "=" + render(kv.second);
  return out;
}

std::string text(const YAML::Node& section, const char* key) { return render(section[key]); }
double number(const YAML::Node& section, const char* key) { return std::atof(text(section, key).c_str()); }

// "name(k=v, ...)" for one transform item ({name: {params}} or a bare name).
std::string transform_text(const YAML::Node& t) {
  if (t.IsScalar()) return t.Scalar();
  if (!t.IsMap() || t.size() != 1) return render(t);
  const auto kv = *t.begin();
  const std::string params = kv.second.IsMap() ? render(kv.second) : "";
  return kv.first.Scalar() + (params.empty() ? "" : "(" + params + ")");
}

std::string transforms_text(const YAML::Node& list) {
  std::string out;
  for (const auto& t : list) out += (out.empty() ? "" : ", ") + transform_text(t);
  return out.empty() ? "none" : out;
}

// Layers as "type(params)" without names and inputs; a long model as layer counts by type.
std::string model_text(const YAML::Node& layers) {
  std::vector<std::pair<std::string, int>> counts;
  std::string out;
  for (const auto& l : layers) {
    const std::string type = l["type"].Scalar();
    std::string params;
    for (const auto& kv : l) {
      const std::string k = kv.first.Scalar();
      if (k == "type" || k == "name" || k == "inputs") continue;
      params += (params.empty() ? "" : ", ") + k + "=" + render(kv.second);
    }
    out += (out.empty() ? "" : ", ") + type + (params.empty() ? "" : "(" + params + ")");
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == type; });
    if (it == counts.end()) counts.emplace_back(type, 1);
    else ++it->second;
  }
  if (layers.size() <= 12) return out;
  out = std::to_string(layers.size()) + " layers:";
  for (size_t i = 0; i < counts.size(); ++i)
    out += (i ? ", " : " ") + std::to_string(counts[i].second) + " " + counts[i].first;
  return out;
}

// Convolution or pooling layers: an image model, whose activations trctl keeps NHWC (PyTorch's channels_last).
bool image_layers(const YAML::Node& layers) {
  for (const auto& l : layers) {
    const std::string type = l["type"] ? l["type"].Scalar() : "";
    if (type == "conv2d" || type.find("pool") != std::string::npos) return true;
  }
  return false;
}

std::string optimizer_text(const YAML::Node& o, const YAML::Node& train) {
  const std::string type = text(o, "type");
  std::string s = type + " lr=" + text(o, "lr");
  if (type == "adam" || type == "adamw") {
    s += " betas=(" + render(o["betas"][0]) + ", " + render(o["betas"][1]) + ") eps=" + text(o, "eps");
  } else {
    s += " momentum=" + text(o, "momentum") + " dampening=" + text(o, "dampening") + " nesterov=" +
         text(o, "nesterov");
    if (type == "lars")
      s += " trust_coefficient=" + text(o, "trust_coefficient") + " trust_clip=" + text(o, "trust_clip");
  }
  if (number(o, "clip_grad_norm") > 0) s += ", clip_grad_norm=" + text(o, "clip_grad_norm");
  if (number(train, "ema_decay") > 0) s += ", ema_decay=" + text(train, "ema_decay");
  return s;
}

std::string weight_decay_text(const YAML::Node& o, const PlanFacts& plan) {
  const std::string type = text(o, "type");
  if (number(o, "weight_decay") == 0) return "0";
  const std::string s =
      text(o, "weight_decay") + (type == "adamw" ? " decoupled" : type == "lars" ? " (lars)" : " L2");
  if (plan.has_params)
    return s + " on " + std::to_string(plan.decay) + " tensors, 0 on " + std::to_string(plan.no_decay);
  return s + (text(o, "decay_bias_and_norm") == "true" ? ", biases and norm included" : ", biases and norm excluded");
}

std::string schedule_text(const YAML::Node& s) {
  const std::string type = text(s, "type");
  std::string out = type;
  if (type == "cosine") out += " to eta_min=" + text(s, "eta_min");
  if (type == "step") out += " step_size=" + text(s, "step_size") + " gamma=" + text(s, "gamma");
  if (type == "multistep") out += " milestones=" + text(s, "milestones") + " gamma=" + text(s, "gamma");
  if (number(s, "warmup_epochs") > 0) out += ", linear warm-up " + text(s, "warmup_epochs") + " epochs";
  return out + ", per epoch";
}

std::string dataset_text(const YAML::Node& d) {
  const std::string ds = text(d, "dataset");
  std::string s = ds;
  if (ds == "synthetic") {  // the validation images are counted in the "validation" item
    const YAML::Node y = d["synthetic"];
    s += " " + text(y, "height") + "x" + text(y, "width") + "x" + text(y, "channels") + ", " + text(y, "classes") +
         " classes, " + text(y, "train_size") + " train images";
  }
  if (ds == "dts" && number(d, "dts_level") > 0) s += ", level " + text(d, "dts_level");
  if (number(d, "train_subset") > 0) s += ", train subset " + text(d, "train_subset");
  return s;
}

std::string data_loading_text(const YAML::Node& d, BackendKind be) {
  const std::string ds = text(d, "dataset");
  const std::string workers = number(d, "workers") > 0 ? text(d, "workers") : "all-core";
  if (ds == "dts" || ds == "image_folder")
    return ds + " streamed, " + workers + " decode threads" + (text(d, "in_memory") == "true" ? ", in memory" : "") +
           ", pinned double buffers";
  const std::string gpu = "GPU-resident dataset, augmentation on the GPU";
  const std::string host = "host memory, " + workers + " loader threads, augmentation on the CPU";
  if (be == BackendKind::Cuda) return gpu;
  if (be == BackendKind::Cpu) return host;
  return gpu + " (cuda backend) or " + host + " (cpu); backend not recorded";
}

std::string precision_text(const std::string& p, BackendKind be) {
  if (be == BackendKind::Cpu) return p == "fp32" ? "fp32" : "fp32 (the cpu backend computes in fp32; spec: " + p + ")";
  const std::string unknown = be == BackendKind::Unknown ? " on the cuda backend" : "";
  if (p == "fp16") return "fp16 AMP, dynamic loss scaling, fp32 master weights" + unknown;
  if (p == "bf16") return "bf16 AMP, fp32 master weights" + unknown;
  if (p == "tf32") return "fp32 (TF32 tensor cores" + unknown + ")";
  return p;
}

BackendKind backend_of(const YAML::Node& train, const PlanFacts& plan, const RunFacts* facts) {
  const std::string device = text(train, "device"), p = text(train, "precision");
  if (facts && facts->backend == "cpu") return BackendKind::Cpu;  // run.json names it (newer run dirs)
  if (facts && facts->backend == "cuda") return BackendKind::Cuda;
  if (device == "cpu") return BackendKind::Cpu;
  if (device == "cuda" || plan.storage == "f16" || plan.storage == "bf16") return BackendKind::Cuda;
  if ((p == "fp16" || p == "bf16") && plan.storage == "f32") return BackendKind::Cpu;  // AMP storage only on cuda
  return BackendKind::Unknown;
}

// The device row names run.json's device description where the run recorded one (the GPU and the cuBLASLt / cuDNN
// versions it ran with).
void add_backend_items(std::vector<RecipeItem>& r, const YAML::Node& train, BackendKind be, const RunFacts* facts) {
  const std::string p = text(train, "precision");
  const bool cuda = be == BackendKind::Cuda, cpu = be == BackendKind::Cpu;
  const std::string dev = facts && !facts->device.empty() ? ": " + facts->device : "";
  r.push_back({"device", cuda  ? "cuda backend" + dev
                         : cpu ? "cpu backend" + dev
                               : "not recorded (device: " + text(train, "device") + ")"});
  r.push_back({"precision", precision_text(p, be)});
  r.push_back({"tf32", p == "tf32" && !cpu ? (cuda ? "on" : "on (cuda backend)") : "off"});
  r.push_back({"graph_mode", cuda  ? "CUDA graph: whole step (augmentation, forward, backward, optimizer)"
                             : cpu ? "none (cpu backend)"
                                   : "CUDA graph: whole step on the cuda backend; none on cpu (backend not recorded)"});
  r.push_back({"compile_excluded", "epoch 1 excluded from steady"});
  r.push_back({"epoch_time", "training + validation"});
}

// The conv_algorithms item: cuDNN's candidates (the determinism switch) and where each plan's algorithm came from,
// counted by the CUDA backend into run.json; a run dir without that record says what the config implies.
std::string conv_algorithms_base(const YAML::Node& train, BackendKind be, const RunFacts* facts) {
  if (be == BackendKind::Cpu) return "the cpu backend's own convolution";
  const bool det = text(train, "deterministic") != "false";
  const std::string which =
      std::string("cuDNN, ") + (det ? "deterministic algorithms only" : "any algorithm (train.deterministic: false)");
  if (!facts || !facts->has_conv)
    return which + ": from the autotune cache (trctl bench --autotune) when it holds the shape, else cuDNN's "
                   "heuristics; chosen at compile time";
  const ConvAlgoSources& c = facts->conv;
  const std::string n = std::to_string(c.from_cache + c.from_heuristics);
  const std::string measured = " from the autotune cache (measured by trctl bench --autotune)";
  const std::string source = conv_algo_source(c);
  if (source == "none") return which + ": no cuDNN convolution plans (1x1 convolutions run as cuBLASLt GEMMs)";
  const std::string out = which + ", chosen at compile time: ";
  if (source == "autotune cache") return out + n + " of " + n + " plans" + measured;
  if (source == "heuristics")
    return out + n + " of " + n + " plans from cuDNN's heuristics" +
           (c.cache_exists ? " (the autotune cache holds none of these shapes)" : " (no autotune cache file)");
  return out + std::to_string(c.from_cache) + " of " + n + " plans" + measured + ", " +
         std::to_string(c.from_heuristics) + " from cuDNN's heuristics (shapes the cache does not hold)";
}

// ... and, with train.conv_bn_stats fused or auto in effect (run.json's mode: effective_conv_bn_stats), how many
// conv -> batch norm pairs took their statistics from cuDNN's conv + genstats epilogue.
std::string conv_algorithms_text(const YAML::Node& train, BackendKind be, const RunFacts* facts) {
  std::string s = conv_algorithms_base(train, be, facts);
  if (be == BackendKind::Cpu || !facts || !facts->has_conv) return s;
  const ConvAlgoSources& c = facts->conv;
  if (c.graph_engines > 0)
    s += "; " + std::to_string(c.graph_engines) +
         " of them cuDNN graph-API engine configs (measured faster than every legacy algorithm)";
  if (c.bn_grad_folded > 0)
    s += "; " + std::to_string(c.bn_grad_folded) +
         " batch norms' backward dx computed in the few-channel weight gradient";
  if (c.wgconv_dgrad > 0)
    s += "; " + std::to_string(c.wgconv_dgrad) + " data gradients on trctl's wgmma kernel (train.conv_wgconv)";
  if (c.wgconv_fwd > 0)
    s += "; " + std::to_string(c.wgconv_fwd) + " forward convolutions on trctl's wgmma kernel (train.conv_wgconv), " +
         std::to_string(c.wgconv_bn_folded) + " batch norms' apply in their prologue" +
         (c.wgconv_bn_unwritten > 0
              ? " (" + std::to_string(c.wgconv_bn_unwritten) + " of them also in their weight gradient's, not stored)"
              : std::string());
  if (c.wgconv_wgrad > 0)
    s += "; " + std::to_string(c.wgconv_wgrad) + " weight gradients on trctl's wgmma kernel (train.conv_wgconv)";
  if (c.dgrad_fwd > 0)
    s += "; " + std::to_string(c.dgrad_fwd) +
         " data gradients as cuDNN forward convolutions over flipped filters (train.conv_dgrad_fwd)";
  if (c.wgrad_overlapped > 0)
    s += "; " + std::to_string(c.wgrad_overlapped) +
         " weight gradients on a second stream beside the next nodes (train.conv_wgrad_overlap)";
  if (c.bn_bwd_mode != "separate")
    s += "; " + std::to_string(c.bn_bwd_fused) + " batch norms' backward reductions in their data gradient's " +
         "epilogue (cuDNN's graph (d) or wgconv's; train.conv_bn_backward: " + c.bn_bwd_mode + ")";
  if (c.bn_stats_mode == "separate") return s;
  s += "; batch-norm statistics (train.conv_bn_stats: " + c.bn_stats_mode + ") of " +
       std::to_string(c.bn_stats_fused) +
       " conv -> batch norm pairs from a convolution's epilogue (cuDNN's conv + genstats, or the few-channel kernel), " +
       std::to_string(c.bn_stats_separate + c.bn_stats_fallback) + " from trctl's statistics pass";
  if (c.bn_apply_mode != "separate")
    s += "; " + std::to_string(c.bn_apply_folded) + " batch norms' apply + ReLU in the next convolution's prologue " +
         "(train.conv_bn_apply: " + c.bn_apply_mode + ")";
  return s;
}

std::vector<RecipeItem> items_of(const YAML::Node& y, const PlanFacts& plan, const RunFacts* facts) {
  const YAML::Node d = y["data"], m = y["model"], o = y["optimizer"], s = y["scheduler"], t = y["train"];
  const BackendKind be = backend_of(t, plan, facts);
  std::vector<RecipeItem> r;
  r.push_back({"framework", "trctl"});
  r.push_back({"dataset", dataset_text(d)});
  r.push_back({"model", model_text(m["layers"])});
  if (plan.has_params) r.push_back({"parameters", std::to_string(plan.params)});
  const std::string init = text(m, "init");
  r.push_back({"init", init + (init == "kaiming_uniform_fan_in" ? " (bound sqrt(6/fan_in))" : "") + ", zero biases"});
  r.push_back({"optimizer", optimizer_text(o, t)});
  r.push_back({"weight_decay", weight_decay_text(o, plan)});
  r.push_back({"lr_schedule", schedule_text(s)});
  r.push_back({"label_smoothing", text(y["loss"], "label_smoothing")});
  r.push_back({"val_loss", text(y["loss"], "type") + ", label_smoothing=" + text(y["loss"], "label_smoothing")});
  r.push_back({"batch_size", text(d, "batch_size")});
  r.push_back({"epochs", text(t, "epochs")});
  r.push_back({"augmentation", transforms_text(d["train_transforms"])});
  r.push_back({"augmentation_impl", "torchvision semantics, one op after another"});
  const YAML::Node norm = d["normalization"];
  r.push_back({"normalization", "mean=" + render(norm["mean"]) + " std=" + render(norm["std"])});
  const int every = static_cast<int>(number(t, "validate_every"));
  const std::string val_images =
      text(d, "dataset") == "synthetic" ? ", " + text(d["synthetic"], "val_size") + " synthetic images" : "";
  r.push_back({"validation", (every <= 1 ? std::string("every epoch") : "every " + std::to_string(every) +
                                                                            " epochs and the last") +
                                 val_images + ", batch " + text(d, "val_batch_size") + ", transforms: " +
                                 transforms_text(d["val_transforms"])});
  add_backend_items(r, t, be, facts);
  if (image_layers(m["layers"])) {
    r.push_back({"memory_format", "channels_last (NHWC)"});
    r.push_back({"conv_algorithms", conv_algorithms_text(t, be, facts)});
  }
  r.push_back({"data_loading", data_loading_text(d, be)});
  r.push_back({"seed", text(y, "seed")});
  return r;
}

}  // namespace

Result<std::vector<RecipeItem>> recipe_from_trctl(const std::string& config_text, const std::string& config_path,
                                                  const std::string& plan_text, const RunFacts* facts) {
  try {
    const YAML::Node y = YAML::Load(config_text);
    for (const char* section : {"data", "model", "loss", "optimizer", "scheduler", "train"})
      if (!y[section] || !y[section].IsMap())
        return Error{ErrCode::Missing, config_path,
                     std::string("no '") + section + "' section: not a resolved trctl config"};
    return items_of(y, plan_facts(plan_text), facts);
  } catch (const YAML::Exception& e) {
    return Error{ErrCode::Syntax,
                 config_path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1),
                 e.msg};
  }
}

}  // namespace trctl
