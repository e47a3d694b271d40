// Reader of the spec's `model` section: the layer list (type-specific keys, automatic names "<type><index>",
// unique names, `inputs` that name earlier layers or "input") and the initialisation.
#include <algorithm>
#include <map>

#include "core/spec/spec_fields.h"
#include "core/spec/spec_sections.h"

namespace trctl::spec_detail {
namespace {

std::vector<LayerKind> layer_kinds() {
  return {LayerKind::Flatten, LayerKind::Linear, LayerKind::Relu, LayerKind::Dropout};
}

// Type-specific keys: reads those of the layer's type, rejects the others.
void parse_layer_params(Diagnostics& d, const YamlNode& m, const std::string& path, LayerSpec& l) {
  const std::string chosen = std::string("layer type '") + to_string(l.kind) + "'";
  switch (l.kind) {
    case LayerKind::Linear:
      if (!m.find("out_features"))
        d.error(ErrCode::Missing, m.loc, "missing '" + join_path(path, "out_features") + "' (required for linear)");
      get_int(d, m, path, "out_features", int_at_least(1), l.out_features);
      get_bool(d, m, path, "bias", l.bias);
      reject_keys(d, m, path, {"p"}, chosen, "dropout");
      break;
    case LayerKind::Dropout:
      get_double(d, m, path, "p", half_open(0, 1), l.p);
      reject_keys(d, m, path, {"out_features", "bias"}, chosen, "linear");
      break;
    case LayerKind::Flatten:
    case LayerKind::Relu:
      reject_keys(d, m, path, {"out_features", "bias"}, chosen, "linear");
      reject_keys(d, m, path, {"p"}, chosen, "dropout");
      break;
  }
}

// One layer map; an absent (or invalid) name stays empty and is filled in by the caller.
bool parse_layer(Diagnostics& d, const YamlNode& m, const std::string& path, LayerSpec& l) {
  if (!node_is(d, m, YamlNode::Kind::Map, path)) return false;
  l.line = m.loc.line;
  l.col = m.loc.col;
  check_keys(d, m, path, {"type", "name", "inputs", "out_features", "bias", "p"});
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
  for (size_t i = 0; i < layers.size(); ++i) {
    const YamlNode* inputs = list.items[item_of[i]].find("inputs");
    std::vector<std::string> earlier = {"input"};
    for (size_t j = 0; j < i; ++j) earlier.push_back(layers[j].name);
    for (size_t k = 0; k < layers[i].inputs.size(); ++k) {
      const std::string& in = layers[i].inputs[k];
      if (std::find(earlier.begin(), earlier.end(), in) != earlier.end()) continue;
      const YamlLoc& loc = inputs->items[k].loc;
      auto later = first_index.find(in);
      if (later != first_index.end()) {
        d.error(ErrCode::Invalid, loc,
                "layer '" + layers[i].name + "' takes input '" + in +
                    "', which is not an earlier layer (inputs must come before the layer)");
      } else {
        d.error(ErrCode::Invalid, loc,
                "unknown input '" + in + "' for layer '" + layers[i].name + "'" + did_you_mean(in, earlier) +
                    "; expected 'input' or the name of an earlier layer");
      }
    }
  }
}

}  // namespace

void parse_model_section(Diagnostics& d, const YamlNode& map, ModelSpec& out) {
  check_keys(d, map, "model", {"layers", "init"});
  get_enum(d, map, "model", "init", {InitKind::KaimingUniformFanIn}, out.init);
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
