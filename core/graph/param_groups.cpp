// assign_param_groups, param_group_lrs: optimizer parameter groups and freezing (see param_groups.h).
#include "core/graph/param_groups.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace trctl {

bool pattern_matches_param(const std::string& glob, const std::string& param_name) {
  if (fnmatch(glob.c_str(), param_name.c_str(), 0) == 0) return true;
  const size_t dot = param_name.rfind('.');
  return dot != std::string::npos && fnmatch(glob.c_str(), param_name.substr(0, dot).c_str(), 0) == 0;
}

namespace {

// "fc1.weight, fc1.bias, ... (N in all)": the first few names, for "matches no parameter" messages.
std::string some_names(const Graph& g) {
  std::string s;
  const size_t shown = std::min<size_t>(g.params.size(), 8);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + g.params[i].name;
  if (shown < g.params.size()) s += ", ... (" + std::to_string(g.params.size()) + " in all)";
  return s;
}

Error unmatched(const NamePattern& p, const std::string& key, const Graph& g) {
  return Error{ErrCode::Invalid, p.where.empty() ? std::string("spec") : p.where,
               "'" + key + "' pattern '" + p.glob + "' matches no parameter (parameters: " + some_names(g) + ")"};
}

}  // namespace

Status assign_param_groups(const Spec& spec, Graph& g) {
  const OptimizerSpec& o = spec.optimizer;
  const int spec_groups = static_cast<int>(o.param_groups.size());
  std::vector<Error> errors;
  for (const NamePattern& p : spec.model.freeze) {
    bool any = false;
    for (ParamInfo& prm : g.params)
      if (pattern_matches_param(p.glob, prm.name)) any = prm.frozen = true;
    if (!any) errors.push_back(unmatched(p, "model.freeze", g));
  }
  // Spec group of each parameter: the first group with a matching pattern, else the default (spec_groups).
  std::vector<int> spec_group(g.params.size(), spec_groups);
  for (int j = 0; j < spec_groups; ++j)
    for (const NamePattern& p : o.param_groups[j].params) {
      bool any = false;
      for (size_t i = 0; i < g.params.size(); ++i) {
        if (!pattern_matches_param(p.glob, g.params[i].name)) continue;
        any = true;
        if (spec_group[i] == spec_groups) spec_group[i] = j;
      }
      if (!any)
        errors.push_back(unmatched(p, "optimizer.param_groups[" + std::to_string(j) + "].params", g));
    }
  if (!errors.empty()) return errors;
  if (std::all_of(g.params.begin(), g.params.end(), [](const ParamInfo& p) { return p.frozen; }))
    return Error{ErrCode::Invalid, spec.model.freeze.front().where,
                 "'model.freeze' freezes every parameter of the model: nothing would be trained"};

  // The initialisation streams follow the default order (decayed parameters first, stable).
  {
    int32_t next = 0;
    for (ParamInfo& p : g.params)
      if (p.decay) p.init_index = next++;
    for (ParamInfo& p : g.params)
      if (!p.decay) p.init_index = next++;
  }
  // Order key: (frozen, spec group, no-decay); stable, so a model's parameters keep their layer order inside.
  auto key = [&](size_t i) {
    const ParamInfo& p = g.params[i];
    return std::make_tuple(p.frozen ? 1 : 0, p.frozen ? 0 : spec_group[i], p.decay ? 0 : 1);
  };
  std::vector<size_t> order(g.params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });

  std::vector<ParamInfo> params;
  g.param_groups.clear();
  std::map<std::pair<int, bool>, int32_t> group_of;  // (spec group, decay) -> index
  for (size_t i : order) {
    ParamInfo p = g.params[i];
    if (!p.frozen) {
      const auto k = std::make_pair(spec_group[i], p.decay);
      auto it = group_of.find(k);
      if (it == group_of.end()) {
        ParamGroupInfo info;
        const bool in_spec = spec_group[i] < spec_groups;
        const ParamGroupSpec* gs = in_spec ? &o.param_groups[spec_group[i]] : nullptr;
        info.name = in_spec ? "param_groups[" + std::to_string(spec_group[i]) + "]" : std::string("default");
        if (!p.decay) info.name += ".no_decay";
        info.lr = gs && gs->has_lr ? gs->lr : o.lr;
        info.weight_decay = !p.decay ? 0.0 : gs && gs->has_weight_decay ? gs->weight_decay : o.weight_decay;
        it = group_of.emplace(k, static_cast<int32_t>(g.param_groups.size())).first;
        g.param_groups.push_back(std::move(info));
      }
      p.group = it->second;
    } else {
      p.group = -1;
    }
    params.push_back(std::move(p));
  }
  g.params = std::move(params);
  for (size_t i = 0; i < g.params.size(); ++i) g.values[g.params[i].value].param = static_cast<int32_t>(i);
  return ok_status();
}

std::vector<double> param_group_lrs(const Spec& spec, const Graph& g, int epoch) {
  std::vector<double> lrs;
  for (const ParamGroupInfo& pg : g.param_groups)
    lrs.push_back(scheduler_lr(spec.scheduler, pg.lr, epoch, spec.train.epochs));
  return lrs;
}

size_t trainable_param_count(const Graph& g) {
  size_t n = 0;
  while (n < g.params.size() && !g.params[n].frozen) ++n;
  return n;
}

}  // namespace trctl
