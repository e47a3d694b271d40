// The inputs of `trctl report` as plain data: per-epoch records, run-level figures and the recipe of each trctl
// run directory or benchmark result JSON (docs/report.md, schema "trctl-bench-result/1"), grouped by tool.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace trctl {

constexpr double kNoFigure = NAN;  // a figure a source does not state (NaN: isfinite() is false)

// One epoch; `seconds` is the epoch's wall time (training + validation), images_per_s the training throughput;
// energy_j the board's energy over its training steps and `steps` how many ran (a GPU run's metrics.jsonl).
struct EpochPoint {
  int epoch = 0;
  double train_loss = kNoFigure, train_top1 = kNoFigure, val_loss = kNoFigure, val_top1 = kNoFigure;
  double lr = kNoFigure, images_per_s = kNoFigure, seconds = kNoFigure;
  double energy_j = kNoFigure, steps = kNoFigure;
};

// One training run. The figures are computed from `epochs` when they hold them (report_run_finalize), so that
// both tools are measured the same way; a JSON run without epochs keeps the figures it states.
struct RunData {
  std::string source;  // the run directory, or "FILE.json run N"
  std::vector<EpochPoint> epochs;
  double final_val_top1 = kNoFigure, best_val_top1 = kNoFigure;
  double epochs_per_s_steady = kNoFigure;  // (epochs - 1) / seconds of epochs 2..N: epoch 1 holds compile/capture
  double images_per_s_steady = kNoFigure;  // training images/s over epochs 2..N (epoch 1 when it is the only one)
  double seconds = kNoFigure;              // sum of the epochs' seconds
  double ms_per_step = kNoFigure;          // stated, else 1000 * batch size / images_per_s_steady
  double peak_memory_bytes = kNoFigure;    // each tool's own measure (recipe item memory_measure)
  // The board's joules per training step over the steady epochs (every one measured: energy_j and steps), else as
  // stated; a power-capped GPU's step time follows it.
  double j_per_step = kNoFigure;
};

struct RecipeItem {
  std::string key, value;
};

// The runs of one tool and recipe: one column of the report.
struct ToolResult {
  std::string tool;  // "trctl" | "pytorch" (any other name is shown as it is)
  std::string name;  // column title and grouping key (the JSON's "name", else the tool)
  std::vector<RecipeItem> recipe;
  std::vector<RunData> runs;
  std::vector<std::string> notes;  // e.g. runs of one group whose recipes differ
  // Trained on synthetic data (random images and labels; the recipe's dataset starts with "synthetic"): a
  // throughput measurement whose accuracies mean nothing, so the readers drop them (report_tool_finish).
  bool synthetic = false;
};

// A trctl run directory: config.resolved.yaml (the recipe, with plan.txt and run.json when present),
// metrics.jsonl's epoch records (summary.csv when metrics.jsonl is missing). Errors name the file.
Result<ToolResult> report_read_run_dir(const std::string& dir);

// A result file in the trctl-bench-result schema (any tool). Errors name the file and the offset or JSON path.
Result<ToolResult> report_read_result_json(const std::string& path);

// What every reader does last: marks a synthetic-data input and drops its accuracies (top-1 per epoch, final,
// best), and fills each run's ms_per_step from the recipe's batch_size where the run does not state it.
void report_tool_finish(ToolResult& t);

// True when there are inputs and every one trained on synthetic data: the report then shows throughput only.
bool report_throughput_only(const std::vector<ToolResult>& groups);

// Sorts a run's epochs (a repeated epoch keeps its last record) and computes its figures from them.
void report_run_finalize(RunData& run);

// Merges inputs of the same tool and name (runs appended, a note when their recipes differ), sets each group's
// "runs" recipe item, and puts the reference group first: the first trctl group, else the first input's.
std::vector<ToolResult> report_group(std::vector<ToolResult> inputs);

const std::string* recipe_find(const std::vector<RecipeItem>& recipe, const std::string& key);

// Median, min and max of the finite values (n = how many there were; the others NaN when n is 0).
struct Spread {
  int n = 0;
  double median = kNoFigure, min = kNoFigure, max = kNoFigure;
};
Spread spread_of(std::vector<double> values);

// Time to accuracy: the first validated epoch with val_top1 >= threshold and the seconds of epochs 1..that one.
struct TimeToAccuracy {
  bool reached = false;
  int epoch = 0;
  double seconds = kNoFigure;
};
TimeToAccuracy time_to_accuracy(const RunData& run, double threshold);

}  // namespace trctl
