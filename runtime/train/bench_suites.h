// The figures of `trctl bench compile` (IR size and planned bytes of a spec: deterministic, for CI), of
// `trctl bench CFG` (the whole training step timed on the spec's backend; on the CPU also as a ratio to a reference
// GEMM timed in the same run, which is what survives a noisy machine) and of `trctl bench CFG --epochs N` (a
// training run's steady throughput), each added to a BenchResult (runtime/report/bench_result.h).
#pragma once
#include <string>

#include "core/spec/spec.h"
#include "core/util/error.h"
#include "core/util/thread_pool.h"
#include "runtime/report/bench_result.h"
#include "runtime/train/trainer.h"

namespace trctl {

// Compiles the spec (its data are loaded for the shapes, as `trctl compile` does) for the CPU backend's fp32 plan
// and, when the spec asks for AMP, for the CUDA backend's storage dtype too, and adds under `prefix`:
//   nodes/<program> (IR nodes per program), values, parameters (trainable elements)  - exact
//   bytes/<region> and bytes/total of the fp32 plan, bytes/activations_naive (no reuse)  - exact
//   amp/bytes/<region>, amp/bytes/total (AMP specs only)                               - exact
//   compile_ms (best of `reps` compiles of the fp32 plan; wall time, not checked)
Status bench_compile(const Spec& spec, const std::string& prefix, int reps, BenchResult* out);

// One 512 x 512 x 512 fp32 GEMM (C = A B) on the CPU backend's gemm over `pool`: the reference op that CPU step
// times are divided by. Returns milliseconds, best of `reps`: the calling thread's CPU time when `cpu_time` (a
// pool of one thread: all the work is the caller's), else wall time.
double bench_ref_gemm_ms(ThreadPool* pool, int reps, bool cpu_time);

struct ModelBenchOptions {
  int steps = 50;   // timed training steps
  int warmup = 10;  // untimed steps first (graph capture, caches, page faults)
  int rounds = 10;  // cuda: the steps run in this many rounds, one synchronisation each
};

struct ModelBench {
  std::string backend;      // "cpu" | "cuda"
  int64_t batch = 0;
  int threads = 0;          // cpu backend compute threads (0 on cuda)
  int steps = 0, rounds = 0;
  // cpu: over the single steps; cuda: over the rounds' mean step times
  double step_ms = 0, step_ms_min = 0, step_ms_max = 0;  // median, fastest, slowest
  // cpu only: the reference GEMM timed right before every step, at least 30 times in all (median, fastest), and
  // the quotient of the fastest step and the fastest GEMM: on a machine shared with other work, the figure that
  // stays put. With one compute thread both are measured in the thread's CPU time (cpu_time), which does not
  // count the time slices other processes take; with more, in wall time. step_ms* are wall times; ref_ms* are
  // in the ratio's clock.
  double ref_ms = 0, ref_ms_min = 0, ratio = 0;
  bool cpu_time = false;
};

// Sets the run up as `trctl train` would (data, backend choice, compile, initial weights, learning rate of epoch
// 1), then times the "train" program. A device-resident backend gathers and augments its batches on the device
// every step, as in training; otherwise one batch from the host feed is loaded into the input slot first and the
// steps rerun it, so that host-side loading is not timed.
Result<ModelBench> bench_model(const Spec& spec, const TrainOptions& opt, const ModelBenchOptions& mo,
                               spdlog::logger& log);

// Adds the model figures: step_ms (median), images_per_s (from it) - checked on the cuda backend only, absolute
// CPU times depend on the machine -, and on the cpu backend step_ms_min, ref_gemm_ms, ref_gemm_ms_min (not
// checked) and step_over_ref_gemm (checked).
void bench_model_metrics(const ModelBench& m, BenchResult* out);

// Adds a training run's figures (epochs 2..N are steady; the first holds graph capture and warm-up):
// epochs_per_s_steady, epochs_per_s_overall, images_per_s_steady (training images per second of training time,
// epochs 2..N), and final_val_top1 / best_val_top1 when `accuracy` (not for synthetic data). Absolute times are
// checked unless `cpu` (machine-dependent); accuracies always are.
Status bench_train_metrics(const TrainResult& r, bool accuracy, bool cpu, BenchResult* out);

}  // namespace trctl
