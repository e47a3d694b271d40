// compile_spec: runs the named compiler stages in order (see compiler.h).
#include "core/compiler.h"

namespace trctl {

const std::vector<std::string>& compiler_stages() {
  static const std::vector<std::string> stages = {"graph_build", "fuse_linear_relu", "fuse_norm_add_relu",
                                                  "fuse_bn_add", "autodiff", "fold_conv_bias",
                                                  "fuse_bn_pool", "fuse_bn_relu_grad", "fuse_grad_accumulate",
                                                  "accumulate_insert",
                                                  "optimizer_insert", "overlap_wgrad", "memplan"};
  return stages;
}

DType amp_storage(const Spec& spec) {
  switch (spec.train.precision) {
    case Precision::Fp16: return DType::F16;
    case Precision::Bf16: return DType::BF16;
    default: return DType::F32;
  }
}

namespace {

using ProgramPass = std::function<Status(Graph&, Program&)>;

Status run_on_programs(Graph& g, const ProgramPass& pass) {
  for (auto& p : g.programs) {
    Status st = pass(g, p);
    if (!st.ok()) return st;
  }
  return graph_verify(g);
}

}  // namespace

Result<Compiled> compile_spec(const Spec& spec, const DataShape& data, const CompileOptions& opt,
                              const StageHook& hook) {
  Compiled c;
  c.spec = spec;
  c.data = data;
  auto done = [&](const std::string& stage) {
    c.stages.push_back(stage);
    if (hook) hook(stage, c);
  };
  Result<Graph> g = graph_build(spec, data, opt.compute);
  if (!g.ok()) return g.errors();
  c.graph = std::move(g.value());
  c.graph.storage = opt.compute == DType::F32 ? opt.storage : opt.compute;
  Status st = graph_verify(c.graph);
  if (!st.ok()) return st.errors();
  done("graph_build");

  const std::vector<std::pair<std::string, ProgramPass>> passes = {
      {"fuse_linear_relu", pass_fuse_linear_relu},
      {"fuse_norm_add_relu", pass_fuse_norm_add_relu},
      {"fuse_bn_add", pass_fuse_bn_add},
      {"autodiff", pass_autodiff},
      {"fold_conv_bias", pass_fold_conv_bias},
      {"fuse_bn_pool", pass_fuse_bn_pool},
      {"fuse_bn_relu_grad", pass_fuse_bn_relu_grad},
      {"fuse_grad_accumulate", pass_fuse_grad_accumulate},
      {"accumulate_insert", pass_accumulate_insert},
      {"optimizer_insert",
       [&](Graph& gr, Program& p) { return pass_optimizer_insert(gr, p, spec.optimizer, spec.train.ema_decay > 0); }},
      {"overlap_wgrad",
       [&](Graph& gr, Program& p) { return pass_overlap_wgrad(gr, p, spec.train.conv_wgrad_overlap); }},
  };
  for (const auto& [name, pass] : passes) {
    if ((name == "optimizer_insert" && !opt.optimizer) || (name == "fold_conv_bias" && !opt.fold_conv_bias) ||
        (name == "fuse_bn_pool" && !opt.fuse_bn_pool) || (name == "fuse_bn_relu_grad" && !opt.fuse_bn_relu_grad))
      continue;
    st = run_on_programs(c.graph, pass);
    if (!st.ok()) return st.errors();
    done(name);
  }
  Result<MemoryPlan> plan = memplan_build(c.graph);
  if (!plan.ok()) return plan.errors();
  c.plan = std::move(plan.value());
  done("memplan");
  return c;
}

std::string compiled_dump(const Compiled& c, const std::string& stage) {
  std::string s = "# after " + stage + "\n# stages run:";
  for (const auto& st : c.stages) s += " " + st;
  s += "\n" + graph_dump(c.graph);
  if (stage == "memplan") s += memplan_dump(c.graph, c.plan);
  return s;
}

}  // namespace trctl
