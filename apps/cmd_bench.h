// The benchmark commands of trctl (docs/bench.md): bench kernels, bench compile CFG..., bench CFG (the whole
// training step), bench CFG --epochs N, --layers, --autotune. `bench data` lives in cmd_data. Every suite writes
// the trctl-bench/1 schema with --json.
#pragma once
#include <string>
#include <vector>

#include "runtime/report/bench_result.h"

namespace trctl {

// A result with this build's commit and this machine filled in (and the GPU's name when backend is "cuda").
BenchResult bench_begin(const std::string& suite, const std::vector<std::string>& sources, const std::string& backend);

// Writes `r` to `path` (atomically) and says so on stderr; the exit code (0, or 1 when the file cannot be written).
int bench_write_json(const std::string& path, const BenchResult& r);

struct BenchConfigArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool layers = false, autotune = false;
  bool legacy_only = false;  // --autotune: measure the legacy algorithms only (no graph-API engine configs)
  int reps = 20;        // --layers: runs per node
  double sustain_s = 3; // --layers: seconds of back-to-back replays before the step is timed again (0: not)
  double energy_s = 0;  // --layers: seconds of back-to-back runs per energy figure, step and each node (0: none)
  double energy_settle_s = -1;  // --energy-settle: seconds of those runs before each figure's interval starts (-1:
                                 // not given, ProfileOptions' default)
  int steps = 50;       // whole step: timed steps
  int warmup = 10;      // whole step: untimed steps first
  int epochs = 0;       // > 0: a training run of this many epochs instead of timed steps
  std::string json;
};
int cmd_bench_config(const BenchConfigArgs& a);

// only: `--only TEXT` (repeatable): just the rows whose name contains one of them, and the ceilings.
int cmd_bench_kernels(const std::string& json_path, const std::vector<std::string>& only = {});

// `trctl bench compile CFG... [key=value...]`: items with '=' are overrides for every config.
int cmd_bench_compile(const std::vector<std::string>& items, int reps, const std::string& json_path);

}  // namespace trctl
