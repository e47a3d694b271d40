// train_run: the whole `trctl train` job: load data, build transforms, compile the spec, pick a backend,
// initialise, run epochs (train steps + validation), and write the run directory (config.resolved.yaml,
// plan.txt, metrics.jsonl, summary.csv).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph/build.h"
#include "core/spec/spec.h"
#include "core/util/error.h"

namespace spdlog {
class logger;
}

namespace trctl {

struct EpochRecord {
  int epoch = 0;
  int64_t step = 0;
  double lr = 0;
  double train_loss = 0, train_top1 = 0;
  double val_loss = 0, val_top1 = 0;
  double images_per_s = 0, epoch_seconds = 0, seconds = 0;
  bool validated = true;  // false: train.validate_every skipped this epoch's validation (val_* are 0)
};

class Backend;
struct Compiled;

// How the trainer gets a GPU backend: set by the binary when it is built with CUDA (no global registry).
struct GpuBackendFactory {
  std::function<int()> device_count;  // 0 when no usable device (never throws)
  std::function<Result<std::unique_ptr<Backend>>(const Compiled&, uint64_t seed)> make;
  std::function<void()> warm_up;      // optional: initialises the driver (run while the data loads)
};

struct TrainOptions {
  bool write_run_dir = true;  // false: nothing on disk (tests)
  bool progress_tty = false;  // the caller decides from run.progress and isatty
  GpuBackendFactory gpu;      // empty: CPU only
  // Continue from a checkpoint: a checkpoint directory (weights.safetensors + state.bin) or a run directory (its
  // latest checkpoints/epoch-NNNN). Empty: start fresh.
  std::string resume;       // "auto": the newest run directory of this run's name with a checkpoint, if any
  std::string init_from;    // a checkpoint (or run dir) whose weights only start the run; excludes resume
  // Nonzero (a signal number): stop after the current training step, write a checkpoint (mid-epoch ones record
  // the data position, so --resume continues exactly) and return with TrainResult::stopped_by set.
  const std::atomic<int>* stop_signal = nullptr;
  std::function<void(int64_t step)> on_step;  // after every training step (tests)
};

struct TrainResult {
  std::string run_dir;            // empty when !write_run_dir
  std::string backend;            // "cpu" / "cuda"
  std::vector<EpochRecord> epochs;
  std::vector<float> final_weights;  // Weights region in plan layout
  double seconds = 0;
  int stopped_by = 0;                 // the signal that stopped the run early (0: it ran to the end)
  bool early_stopped = false;         // train.early_stopping_patience ended the run
};

Result<TrainResult> train_run(const Spec& spec, const TrainOptions& opt, spdlog::logger& log);

// `trctl eval CFG --weights PATH`: the spec's validation set through its eval programs with the parameters (and
// batch-norm running statistics) of a checkpoint directory, or of a run directory's latest checkpoint.
struct EvalResult {
  std::string backend, checkpoint;  // the checkpoint directory read
  double loss = 0, top1 = 0;
  int64_t images = 0;
};
Result<EvalResult> eval_run(const Spec& spec, const TrainOptions& opt, const std::string& weights,
                            spdlog::logger& log);

// `trctl bench CFG --layers`: sets the run up as train_run does (on the CUDA backend only), begins epoch 1 and
// times the train program's nodes and its captured step (Backend::profile).
struct StepProfile;
Result<StepProfile> train_profile(const Spec& spec, const TrainOptions& opt, int reps, spdlog::logger& log);

// Loads the spec's data and transforms and returns the shapes the compiler needs (for `trctl compile`).
Result<DataShape> data_shape(const Spec& spec);

// Creates out_dir/name, or out_dir/name-2, -3, ... if taken; returns the path.
Result<std::string> run_dir_create(const std::string& out_dir, const std::string& name);

}  // namespace trctl
