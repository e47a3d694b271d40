// trctl export SOURCE --format safetensors -o FILE [--ema] [--dtype f32|f16|bf16] [--config CFG]: a checkpoint's
// weights as a safetensors file PyTorch loads (runtime/train/export.h).
#pragma once
#include <string>

namespace CLI {
class App;
}

namespace trctl {

struct ExportArgs {
  std::string source, out, config;
  std::string format = "safetensors";
  std::string dtype = "f32";
  bool ema = false;
};

// Adds `export` and its options to the command line.
CLI::App* export_subcommand(CLI::App& app, ExportArgs& a);
// Exit codes: 0 written; 2 bad input (no or corrupt checkpoint, another run's config, --ema without an EMA, an
// unsupported --format or --dtype); 1 the output could not be written (nothing is left at FILE then).
int cmd_export(const ExportArgs& a);

}  // namespace trctl
