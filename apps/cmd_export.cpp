// trctl export: argument checks, export_prepare (bad input: exit 2), the atomic write (failure: exit 1).
#include "apps/cmd_export.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "apps/cli_errors.h"
#include "runtime/train/export.h"

namespace trctl {

CLI::App* export_subcommand(CLI::App& app, ExportArgs& a) {
  CLI::App* cmd = app.add_subcommand("export", "write a checkpoint's weights as a safetensors file for PyTorch");
  cmd->add_option("source", a.source, "a checkpoint directory, or a run directory (its latest checkpoint)")
      ->required();
  cmd->add_option("--format", a.format, "safetensors (the only format so far)");
  cmd->add_option("-o,--output", a.out, "the file to write (atomically)")->required();
  cmd->add_flag("--ema", a.ema, "the exponential moving average of the weights (train.ema_decay) instead");
  cmd->add_option("--dtype", a.dtype, "f32 (default), f16 or bf16");
  cmd->add_option("--config", a.config, "the run's spec (default: config.resolved.yaml of the run directory)");
  return cmd;
}

int cmd_export(const ExportArgs& a) {
  if (a.format != "safetensors") {
    std::fprintf(stderr, "error: trctl export --format %s is not supported (supported: safetensors)\n",
                 a.format.c_str());
    return kExitBadInput;
  }
  ExportOptions opt;
  opt.source = a.source;
  opt.output = a.out;
  opt.config = a.config;
  opt.ema = a.ema;
  if (a.dtype == "f32") opt.dtype = DType::F32;
  else if (a.dtype == "f16") opt.dtype = DType::F16;
  else if (a.dtype == "bf16") opt.dtype = DType::BF16;
  else {
    std::fprintf(stderr, "error: trctl export --dtype %s: expected f32, f16 or bf16\n", a.dtype.c_str());
    return kExitBadInput;
  }
  Result<ExportFile> f = export_prepare(opt);
  if (!f.ok()) return report_errors(f.errors(), kExitBadInput);
  Status st = safetensors_write(opt.output, f->tensors, f->metadata);
  if (!st.ok()) return report_errors(st.errors(), kExitEnvironment);
  const ExportReport& r = f->report;
  std::printf("exported %lld tensors (%lld bytes, %s, %s weights, step %lld) from %s to %s\n",
              static_cast<long long>(r.tensors), static_cast<long long>(r.bytes), a.dtype.c_str(),
              a.ema ? "EMA" : "model", static_cast<long long>(r.step), r.checkpoint.c_str(), opt.output.c_str());
  if (!r.relaid.empty()) {
    std::string names;
    for (const auto& n : r.relaid) names += (names.empty() ? "" : ", ") + n;
    std::printf("converted to PyTorch's layout: %s\n", names.c_str());
  }
  return 0;
}

}  // namespace trctl
