// BenchResult: what every `trctl bench` suite writes with --json, in the schema `trctl-bench/1` (docs/bench.md):
// the suite, its sources, the machine, the commit and a flat list of metrics, each saying which direction is
// better. tools/regress compares such a file with an accepted one in benchmarks/baselines/.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/util/error.h"

namespace trctl {

constexpr const char* kBenchSchema = "trctl-bench/1";

struct BenchMetric {
  std::string name;            // "mlp_fmnist/bytes/total", "images_per_s"
  double value = 0;
  std::string unit;            // "count", "bytes", "ms", "img/s", "ratio", ...
  bool higher_better = false;  // "better": "higher" | "lower"
  bool exact = false;          // deterministic (IR size, planned bytes): any change fails until the baseline moves
  bool check = true;           // false: shown, never compared (a machine-dependent absolute time on the CPU)
};

struct BenchMachine {
  std::string host;            // host name
  int host_cores = 0;          // hardware threads
  std::string cpu;             // /proc/cpuinfo's model name, or ""
  std::string gpu;             // CUDA device name, "" when none was used
  std::string backend;         // "cpu" | "cuda" | "host" (data pipeline) | "compiler"
};

struct BenchResult {
  std::string suite;                 // "compile", "model", "train", "layers", "kernels", "data"
  std::vector<std::string> sources;  // configs or data sources, as given
  BenchMachine machine;
  std::string commit = "unknown";    // `git describe --always --dirty` of the build
  std::string created;               // UTC, ISO 8601
  std::vector<BenchMetric> metrics;
  // More members of the document as raw JSON text (a suite's parameters, per-node tables): kept for people and
  // tools, ignored by tools/regress.
  std::vector<std::pair<std::string, std::string>> details;

  void add(const std::string& name, double value, const std::string& unit, bool higher_better, bool exact = false,
           bool check = true) {
    metrics.push_back(BenchMetric{name, value, unit, higher_better, exact, check});
  }
};

// The host part of the machine record (host name, cores, CPU model) and the creation time; suite, backend, GPU
// and commit are the caller's.
BenchResult bench_result_begin(const std::string& suite, const std::vector<std::string>& sources,
                               const std::string& backend);

std::string bench_result_json(const BenchResult& r);

// Written atomically (temp file, fsync, rename).
Status bench_result_write(const std::string& path, const BenchResult& r);

// Reads a file in the schema: every required field present with its type, metric names unique and values
// finite; all problems of the file listed at once.
Result<BenchResult> bench_result_read(const std::string& path);

}  // namespace trctl
