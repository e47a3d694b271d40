// Parameter groups and freezing: which parameters the optimizer updates, with which lr and weight decay
// (optimizer.param_groups, optimizer.weight_decay / decay_bias_and_norm, model.freeze), and the order of the
// parameters that makes every group one contiguous range of the weight layout.
#pragma once
#include <string>
#include <vector>

#include "core/graph/ir.h"
#include "core/spec/spec.h"
#include "core/util/error.h"

namespace trctl {

// Whether a NamePattern glob names the parameter: the full name matches, or the layer part (before the last '.').
bool pattern_matches_param(const std::string& glob, const std::string& param_name);

// Marks frozen parameters, puts every trainable one in a group and orders g.params: group by group (spec groups in
// spec order, then the default group; within each, the parameters with weight decay first, then the rest), frozen
// ones last; ParamInfo::group indexes g.param_groups, Value::param follows the new order. Groups without
// parameters are left out. Errors (at the pattern's location): a pattern that matches no parameter; every
// parameter frozen. Without groups and freezing the order is decayed parameters first (stable).
Status assign_param_groups(const Spec& spec, Graph& g);

// Learning rate of every group of g for 1-based epoch e: scheduler_lr with the group's lr as the base.
std::vector<double> param_group_lrs(const Spec& spec, const Graph& g, int epoch);

// Number of trainable parameters (those before the frozen tail).
size_t trainable_param_count(const Graph& g);

}  // namespace trctl
