// The compiler pipeline: spec -> graph_build -> (per program) fuse_linear_relu -> fuse_norm_add_relu -> fuse_bn_add
// -> autodiff -> fold_conv_bias -> fuse_bn_pool -> fuse_bn_relu_grad -> fuse_grad_accumulate -> accumulate_insert
// -> optimizer_insert -> graph_verify -> memplan_build. Each stage is a named function; compile_spec runs them in order and can hand
// the state after any stage to a dump callback (`trctl compile CFG --dump=after:STAGE`).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/graph/build.h"
#include "core/memplan/memplan.h"
#include "core/passes/passes.h"
#include "core/spec/spec.h"

namespace trctl {

// Options for tests and tools: float64 compute for finite-difference gradient checks, and no optimizer (the
// train programs then end with the gradients).
struct CompileOptions {
  DType compute = DType::F32;  // F32 or F64: dtype of inputs, activations, parameters, gradients and the loss
  bool optimizer = true;
  DType storage = DType::F32;  // Graph::storage: F16/BF16 for a backend that runs the spec's AMP precision
  bool fold_conv_bias = true;  // false (tests): skip pass_fold_conv_bias, for the unfolded graph to compare with
  bool fuse_bn_pool = true;    // false (tests): skip pass_fuse_bn_pool, for the unfused graph to compare with
  bool fuse_bn_relu_grad = true;  // false (tests): skip pass_fuse_bn_relu_grad, likewise
};

// The storage dtype a backend that runs AMP (the CUDA backend) wants for the spec's precision.
DType amp_storage(const Spec& spec);

struct Compiled {
  Spec spec;
  DataShape data;
  Graph graph;
  MemoryPlan plan;
  std::vector<std::string> stages;  // names of the stages that ran, in order
};

// Stage names, in order: "graph_build", "fuse_linear_relu", "fuse_norm_add_relu", "fuse_bn_add", "autodiff",
// "fold_conv_bias", "fuse_bn_pool", "fuse_bn_relu_grad", "fuse_grad_accumulate", "accumulate_insert" (a no-op
// without train.accumulate_steps), "optimizer_insert", "overlap_wgrad" (a no-op without train.conv_wgrad_overlap),
// "memplan".
const std::vector<std::string>& compiler_stages();

// Called after each stage with its name and the state so far (the plan is valid only after "memplan").
using StageHook = std::function<void(const std::string& stage, const Compiled& c)>;

Result<Compiled> compile_spec(const Spec& spec, const DataShape& data, const CompileOptions& opt = {},
                              const StageHook& hook = {});

// Text of the compiled state after a stage: the graph for graph stages, graph + plan for "memplan".
std::string compiled_dump(const Compiled& c, const std::string& stage);

}  // namespace trctl
