// train_run: the whole `trctl train` job: load data, build transforms, compile the spec, pick a backend,
// initialise, run epochs (train steps + validation), and write the run directory (config.resolved.yaml,
// plan.txt, run.json, metrics.jsonl, summary.csv).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/graph/build.h"
#include "core/spec/spec.h"
#include "core/util/error.h"
#include "runtime/dist/rendezvous.h"

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
  double val_top5 = 0;    // label among the 5 largest logits (accuracy_topk_cpu's rule for ties)
  double images_per_s = 0, epoch_seconds = 0, seconds = 0;
  double train_seconds = 0;  // the epoch's training steps alone (images_per_s = their images / this)
  bool validated = true;  // false: train.validate_every skipped this epoch's validation (val_* are 0)
  int64_t skipped_steps = 0;  // training steps of this epoch skipped for non-finite gradients
  double loss_scale = 1;      // the dynamic loss scale after the epoch (1 where the backend does not scale)
  // The board's energy over the epoch's training steps (Backend::energy_mj; NaN where not measured: the CPU
  // backend, a GPU without NVML).
  double energy_j = std::numeric_limits<double>::quiet_NaN();
  int64_t steps = 0;          // training steps the epoch ran (optimizer steps; energy_j / steps = J per step)
  double power_w() const { return energy_j / train_seconds; }  // mean power over the training steps (NaN: none)
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
  // latest checkpoints/epoch-NNNN[-step-SSSSSSSS], docs/checkpoint.md). Empty: start fresh.
  std::string resume;       // "auto": the newest run directory of this run's name with a checkpoint, if any
  std::string init_from;    // a checkpoint (or run dir) whose weights only start the run; excludes resume
  // Nonzero (a signal number): stop after the current training step, write a checkpoint (mid-epoch ones record
  // the data position, so --resume continues exactly) and return with TrainResult::stopped_by set.
  const std::atomic<int>* stop_signal = nullptr;
  std::function<void(int64_t step)> on_step;  // after every training step (tests)
  // One rank of a data-parallel job (trctl train --gpus N, or torchrun's environment; docs/distributed.md): the
  // rank trains its shard of every epoch, only rank 0 writes the run directory. gpu.make must build the backend
  // for the same DistEnv (make_cuda_backend_dist).
  DistEnv dist;
  bool fold_conv_bias = true;  // false (tests): compile without pass_fold_conv_bias (CompileOptions::fold_conv_bias)
};

struct TrainResult {
  std::string run_dir;            // empty when !write_run_dir
  std::string backend;            // "cpu" / "cuda"
  std::vector<EpochRecord> epochs;
  std::vector<float> final_weights;  // Weights region in plan layout
  double seconds = 0;
  int stopped_by = 0;                 // the signal that stopped the run early (0: it ran to the end)
  bool early_stopped = false;         // train.early_stopping_patience ended the run
  int64_t skipped_steps = 0;          // all epochs' skipped steps (this process: a resumed run counts its own)
  // A checkpoint could not be written (disk full, unwritable run dir): the run stopped after that epoch's metrics
  // were written; the previous checkpoint is intact. The errors name the path and the OS error (trctl exits 1).
  std::vector<Error> checkpoint_errors;
};

Result<TrainResult> train_run(const Spec& spec, const TrainOptions& opt, spdlog::logger& log);

// `trctl eval CFG --weights PATH`: the spec's validation set through its eval programs with the parameters (and
// batch-norm running statistics) of a checkpoint directory, or of a run directory's latest checkpoint.
struct EvalResult {
  std::string backend, checkpoint;  // the checkpoint directory read
  double loss = 0, top1 = 0, top5 = 0;
  int64_t images = 0;
};
Result<EvalResult> eval_run(const Spec& spec, const TrainOptions& opt, const std::string& weights,
                            spdlog::logger& log);

// `trctl bench CFG --layers`: sets the run up as train_run does (on the CUDA backend only), begins epoch 1 and
// times the train program's nodes and its captured step (Backend::profile, as popt says).
struct StepProfile;
struct ProfileOptions;
Result<StepProfile> train_profile(const Spec& spec, const TrainOptions& opt, const ProfileOptions& popt,
                                  spdlog::logger& log);

// Loads the spec's data and transforms and returns the shapes the compiler needs (for `trctl compile`).
Result<DataShape> data_shape(const Spec& spec);

// A checkpoint directory (it holds state.bin), or the latest checkpoints/epoch-NNNN[-step-S] of a run directory
// (DIR.partial ones, still being written, are ignored).
Result<std::string> checkpoint_dir_resolve(const std::string& path);

// Creates out_dir/name, or out_dir/name-2, -3, ... if taken; returns the path.
Result<std::string> run_dir_create(const std::string& out_dir, const std::string& name);

}  // namespace trctl
