// Reader of the spec's `model` section: the layer list (type-specific keys, automatic names "<type><index>",
// unique names, `inputs` that name earlier layers or "input") and the initialisation.
#include <algorithm>
#include <map>
#include <unordered_set>

#include "core/spec/spec_fields.h"
#include "core/spec/spec_sections.h"

namespace trctl::spec_detail {
namespace {

std::vector<LayerKind> layer_kinds() {
  return {LayerKind::Flatten,   LayerKind::Linear,  LayerKind::Relu,    LayerKind::Dropout,
          LayerKind::Conv2d,    LayerKind::BatchNorm, LayerKind::MaxPool, LayerKind::AvgPool,
          LayerKind::GlobalAvgPool, LayerKind::Add,   LayerKind::Relu6,   LayerKind::LeakyRelu,
          LayerKind::Elu,       LayerKind::Silu,      LayerKind::Hardswish, LayerKind::Sigmoid,
          LayerKind::Tanh};
}

// Every type-specific key and the layer types that take it.
const std::vector<std::pair<std::string, std::vector<LayerKind>>>& layer_keys() {
  static const std::vector<std::pair<std::string, std::vector<LayerKind>>> keys = {
      {"out_features", {LayerKind::Linear}},
      {"bias", {LayerKind::Linear, LayerKind::Conv2d}},
      {"p", {LayerKind::Dropout}},
      {"out_channels", {LayerKind::Conv2d}},
      {"kernel_size", {LayerKind::Conv2d, LayerKind::MaxPool, LayerKind::AvgPool}},
      {"stride", {LayerKind::Conv2d, LayerKind::MaxPool, LayerKind::AvgPool}},
      {"padding", {LayerKind::Conv2d, LayerKind::MaxPool, LayerKind::AvgPool}},
      {"dilation", {LayerKind::Conv2d}},
      {"groups", {LayerKind::Conv2d}},
      {"eps", {LayerKind::BatchNorm}},
      {"momentum", {LayerKind::BatchNorm}},
      {"negative_slope", {LayerKind::LeakyRelu}},
      {"alpha", {LayerKind::Elu}},
  };
  return keys;
}

void require(Diagnostics& d, const YamlNode& m, const std::string& path, const char* key, const char* type) {
  if (!m.find(key))
    d.error(ErrCode::Missing, m.loc, "missing '" + join_path(path, key) + "' (required for " + type + ")");
}

// Type-specific keys: reads those of the layer's type, rejects the others (naming a type that takes them).
void parse_layer_params(Diagnostics& d, const YamlNode& m, const std::string& path, LayerSpec& l) {
  const std::string chosen = std::string("layer type '") + to_string(l.kind) + "'";
  for (const auto& [key, kinds] : layer_keys())
    if (std::find(kinds.begin(), kinds.end(), l.kind) == kinds.end())
      reject_keys(d, m, path, {key}, chosen, to_string(kinds[0]));
  switch (l.kind) {
    case LayerKind::Linear:
      require(d, m, path, "out_features", "linear");
      get_int(d, m, path, "out_features", int_at_least(1), l.out_features);
      get_bool(d, m, path, "bias", l.bias);
      break;
    case LayerKind::Dropout:
      get_double(d, m, path, "p", half_open(0, 1), l.p);
      break;
    case LayerKind::Conv2d:
      require(d, m, path, "out_channels", "conv2d");
      require(d, m, path, "kernel_size", "conv2d");
      get_int(d, m, path, "out_channels", int_at_least(1), l.out_channels);
      get_int(d, m, path, "kernel_size", int_at_least(1), l.kernel_size);
      get_int(d, m, path, "stride", int_at_least(0), l.stride);
      get_int(d, m, path, "padding", int_at_least(0), l.padding);
      get_int(d, m, path, "dilation", int_at_least(1), l.dilation);
      get_int(d, m, path, "groups", int_at_least(1), l.groups);
      get_bool(d, m, path, "bias", l.bias);
      if (l.groups > 1 && l.out_channels % l.groups != 0)
        d.error(ErrCode::Invalid, m.find("groups")->loc,
                "'" + join_path(path, "out_channels") + "' (" + std::to_string(l.out_channels) +
                    ") must be divisible by groups (" + std::to_string(l.groups) + ")");
      break;
    case LayerKind::MaxPool:
    case LayerKind::AvgPool:
      require(d, m, path, "kernel_size", to_string(l.kind));
      get_int(d, m, path, "kernel_size", int_at_least(1), l.kernel_size);
      get_int(d, m, path, "stride", int_at_least(0), l.stride);
      get_int(d, m, path, "padding", int_at_least(0), l.padding);
      if (m.find("padding") && m.find("kernel_size") && 2 * l.padding > l.kernel_size)
        d.error(ErrCode::OutOfRange, m.find("padding")->loc,
                "'" + join_path(path, "padding") + "' must be at most half of kernel_size (" +
                    std::to_string(l.kernel_size) + "), as in PyTorch");
      break;
    case LayerKind::BatchNorm:
      get_double(d, m, path, "eps", above(0), l.eps);
      get_double(d, m, path, "momentum", closed(0, 1), l.momentum);
      break;
    case LayerKind::LeakyRelu:
      get_double(d, m, path, "negative_slope", any_double(), l.negative_slope);
      break;
    case LayerKind::Elu:
      get_double(d, m, path, "alpha", any_double(), l.alpha);
      break;
    case LayerKind::Flatten:
    case LayerKind::Relu:
    case LayerKind::GlobalAvgPool:
    case LayerKind::Add:
    case LayerKind::Relu6:
    case LayerKind::Silu:
    case LayerKind::Hardswish:
    case LayerKind::Sigmoid:
    case LayerKind::Tanh:
      break;
  }
}

// One layer map; an absent (or invalid) name stays empty and is filled in by the caller.
bool parse_layer(Diagnostics& d, const YamlNode& m, const std::string& path, LayerSpec& l) {
  if (!node_is(d, m, YamlNode::Kind::Map, path)) return false;
  l.line = m.loc.line;
  l.col = m.loc.col;
  std::vector<std::string> valid = {"type", "name", "inputs"};
  for (const auto& kv : layer_keys()) valid.push_back(kv.first);
  check_keys(d, m, path, valid);
  const std::vector<LayerKind> kinds = layer_kinds();
  const YamlNode* type = m.find("type");
  size_t index = 0;
  if (!type) {
    d.error(ErrCode::Missing, m.loc,
            "missing '" + join_path(path, "type") + "'; expected one of: " + join_names(enum_names(kinds)));
  } else if (enum_by_name(d, *type, join_path(path, "type"), enum_names(kinds), index)) {
    l.kind = kinds[index];
    parse_layer_params(d, m, path, l);
  }
  if (const YamlNode* name = m.find("name")) {
    if (node_string(d, *name, join_path(path, "name"), l.name) && (l.name.empty() || l.name == "input")) {
      d.error(ErrCode::Invalid, name->loc,
              "'" + join_path(path, "name") + "' must be a non-empty name other than 'input' (reserved)");
    }
  }
  if (const YamlNode* inputs = m.find("inputs")) {
    const std::string ipath = join_path(path, "inputs");
    if (node_is(d, *inputs, YamlNode::Kind::Seq, ipath)) {
      std::vector<std::string> names(inputs->items.size());
      bool ok = true;
      for (size_t i = 0; i < inputs->items.size(); ++i)
        ok &= node_string(d, inputs->items[i], index_path(ipath, i), names[i]);
      if (ok) l.inputs = std::move(names);  // all or none, so l.inputs[k] stands at inputs->items[k]
    }
  }
  return true;
}

// Names are unique; each input is "input" or the name of an earlier layer.
void check_layer_names(Diagnostics& d, const YamlNode& list, const std::vector<LayerSpec>& layers,
                       const std::vector<size_t>& item_of) {
  std::map<std::string, size_t> first_index;  // name -> index in `layers`
  for (size_t i = 0; i < layers.size(); ++i) {
    const YamlNode& m = list.items[item_of[i]];
    const YamlNode* name = m.find("name");
    auto [it, inserted] = first_index.emplace(layers[i].name, i);
    if (!inserted) {
      d.error(ErrCode::Invalid, name ? name->loc : m.loc,
              "duplicate layer name '" + layers[i].name + "' (also the name of model.layers[" +
                  std::to_string(item_of[it->second]) + "])");
    }
  }
  // "input" and the names of the layers before i, grown as i advances (rebuilding it per layer made a list of
  // 50,000 layers take half a minute). Suggestions cost an edit distance per earlier name, so only the first
  // kSuggested unknown inputs get one: a list of thousands of bad inputs stays linear.
  constexpr int kSuggested = 16;
  int suggested = 0;
  std::vector<std::string> earlier = {"input"};
  std::unordered_set<std::string> earlier_set = {"input"};
  for (size_t i = 0; i < layers.size(); ++i) {
    const YamlNode* inputs = list.items[item_of[i]].find("inputs");
    for (size_t k = 0; k < layers[i].inputs.size(); ++k) {
      const std::string& in = layers[i].inputs[k];
      if (earlier_set.count(in) != 0) continue;
      const YamlLoc& loc = inputs->items[k].loc;
      auto later = first_index.find(in);
      if (later != first_index.end()) {
        d.error(ErrCode::Invalid, loc,
                "layer '" + layers[i].name + "' takes input '" + in +
                    "', which is not an earlier layer (inputs must come before the layer)");
      } else {
        d.error(ErrCode::Invalid, loc,
                "unknown input '" + in + "' for layer '" + layers[i].name + "'" +
                    (suggested++ < kSuggested ? did_you_mean(in, earlier) : std::string()) +
                    "; expected 'input' or the name of an earlier layer");
      }
    }
    earlier.push_back(layers[i].name);
    earlier_set.insert(layers[i].name);
  }
}

}  // namespace

void parse_model_section(Diagnostics& d, const YamlNode& map, ModelSpec& out) {
  check_keys(d, map, "model", {"layers", "init", "freeze"});
  get_enum(d, map, "model", "init", {InitKind::KaimingUniformFanIn}, out.init);
  get_patterns(d, map, "model", "freeze", out.freeze);
  const YamlNode* list = map.find("layers");
  if (!list || list->kind == YamlNode::Kind::Null) {
    d.error(ErrCode::Missing, list ? list->loc : map.loc, "missing 'model.layers' (a non-empty list of layers)");
    return;
  }
  if (!node_is(d, *list, YamlNode::Kind::Seq, "model.layers")) return;
  if (list->items.empty()) {
    d.error(ErrCode::Invalid, list->loc, "'model.layers' is empty; a model needs at least one layer");
    return;
  }
  out.layers.clear();
  std::vector<size_t> item_of;  // out.layers[i] came from list->items[item_of[i]]
  for (size_t i = 0; i < list->items.size(); ++i) {
    LayerSpec l;
    if (!parse_layer(d, list->items[i], index_path("model.layers", i), l)) continue;
    if (l.name.empty()) l.name = std::string(to_string(l.kind)) + std::to_string(i);
    out.layers.push_back(std::move(l));
    item_of.push_back(i);
  }
  check_layer_names(d, *list, out.layers, item_of);
}

}  // namespace trctl::spec_detail
