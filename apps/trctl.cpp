// The trctl command line (CLI11): train | validate | compile | eval | export | bench | pack-dts | dts | report.
// Exit codes: 0 ok, 2 bad input (config, data) or unsupported, 1 other (internal errors, and the environment
// failing a run: a checkpoint or an export that could not be written).
#include <signal.h>
#include <unistd.h>

#include <atomic>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "apps/cli_errors.h"
#include "apps/cmd_bench.h"
#include "apps/cmd_data.h"
#include "apps/cmd_export.h"
#include "apps/cmd_report.h"
#include "apps/cmd_dist.h"
#include "core/compiler.h"
#include "runtime/train/trainer.h"
#if defined(TRCTL_HAVE_CUDA)
#include "runtime/cuda/cuda_backend.h"
#endif

namespace trctl {
namespace {


struct SpecArgs {
  std::string config;
  std::vector<std::string> overrides;
};

void add_spec_args(CLI::App* cmd, SpecArgs& a) {
  cmd->add_option("config", a.config, "experiment spec (YAML)")->required();
  cmd->add_option("overrides", a.overrides, "overrides key.sub=value, validated like the file");
}

int cmd_validate(const SpecArgs& a) {
  Result<Spec> spec = spec_load(a.config, a.overrides);
  if (!spec.ok()) return report_errors(spec.errors());
  std::cout << spec_to_yaml(spec.value());
  return 0;
}

int cmd_compile(const SpecArgs& a, const std::string& dump) {
  Result<Spec> spec = spec_load(a.config, a.overrides);
  if (!spec.ok()) return report_errors(spec.errors());
  std::string stage = dump.rfind("after:", 0) == 0 ? dump.substr(6) : dump;
  const auto& stages = compiler_stages();
  if (std::find(stages.begin(), stages.end(), stage) == stages.end()) {
    std::string list;
    for (const auto& s : stages) list += (list.empty() ? "" : ", ") + s;
    std::fprintf(stderr, "error: --dump=%s: unknown stage '%s'; stages: %s\n", dump.c_str(), stage.c_str(),
                 list.c_str());
    return kExitBadInput;
  }
  Result<DataShape> shape = data_shape(spec.value());
  if (!shape.ok()) return report_errors(shape.errors());
  std::string text;
  Result<Compiled> c = compile_spec(spec.value(), shape.value(), {}, [&](const std::string& s, const Compiled& cc) {
    if (s == stage) text = compiled_dump(cc, s);
  });
  if (!c.ok()) return report_errors(c.errors());
  std::cout << text;
  return 0;
}

// SIGINT / SIGTERM during `trctl train`: the first asks the trainer to stop after the current step and write a
// checkpoint; a second SIGINT ends the process at once. The flag is the one piece of process-wide state: a signal
// handler can reach nothing else.
std::atomic<int> g_stop_signal{0};

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT && g_stop_signal.load() != 0) _exit(130);
  g_stop_signal.store(sig);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int cmd_train(const SpecArgs& a, bool print_config, const std::string& resume, const std::string& init_from) {
  Result<Spec> spec = spec_load(a.config, a.overrides);
  if (!spec.ok()) return report_errors(spec.errors());
  // One rank of a data-parallel job when the torchrun variables are set (trctl train --gpus N sets them).
  Result<DistEnv> dist = dist_env_from_environ();
  if (!dist.ok()) return report_errors(dist.errors());
  const bool quiet = dist->rank != 0;  // other ranks print warnings and errors only
  if (print_config && !quiet) std::cout << spec_to_yaml(spec.value()) << std::flush;
  auto log = spdlog::stderr_color_mt("trctl");
  log->set_pattern(dist->enabled ? "[%H:%M:%S] rank " + std::to_string(dist->rank) + ": %v" : "[%H:%M:%S] %v");
  if (quiet) log->set_level(spdlog::level::warn);
  TrainOptions opt;
  opt.resume = resume;
  opt.init_from = init_from;
  opt.dist = dist.value();
  if (!opt.dist.enabled) {  // a stop checkpoint needs all ranks to stop at one step: not in distributed runs
    install_stop_handlers();
    opt.stop_signal = &g_stop_signal;
  }
  const ProgressKind pk = spec->run.progress;
  opt.progress_tty = !quiet && (pk == ProgressKind::On || (pk == ProgressKind::Auto && isatty(fileno(stderr))));
#if defined(TRCTL_HAVE_CUDA)
  opt.gpu.device_count = cuda_device_count;
  opt.gpu.make = make_cuda_backend;
  opt.gpu.warm_up = cuda_warm_up;
  if (opt.dist.enabled) {
    opt.gpu.make = [d = opt.dist](const Compiled& c, uint64_t seed) { return make_cuda_backend_dist(c, seed, d); };
    opt.gpu.warm_up = nullptr;  // it would open a context on device 0 in every rank
  }
#endif
  Result<TrainResult> r = train_run(spec.value(), opt, *log);
  if (!r.ok()) return report_errors(r.errors());
  const TrainResult& res = r.value();
  if (!res.checkpoint_errors.empty()) {  // disk full or unwritable: metrics so far are on disk
    for (const auto& e : res.checkpoint_errors) std::fprintf(stderr, "error: %s\n", e.str().c_str());
    return 1;
  }
  if (res.stopped_by != 0) {
    std::fprintf(stderr, "stopped by %s: checkpoint written under %s/checkpoints (continue with --resume %s)\n",
                 res.stopped_by == SIGINT ? "SIGINT" : "SIGTERM", res.run_dir.c_str(), res.run_dir.c_str());
    return 128 + res.stopped_by;  // 130 for SIGINT, 143 for SIGTERM, as a shell reports them
  }
  if (!res.epochs.empty() && !quiet) {
    const EpochRecord& last = res.epochs.back();
    double best = 0, steady = 0;
    const EpochRecord* final_val = nullptr;  // the last epoch that was validated (train.validate_every)
    for (const auto& e : res.epochs)
      if (e.validated) {
        best = std::max(best, e.val_top1);
        final_val = &e;
      }
    for (size_t i = 1; i < res.epochs.size(); ++i) steady += res.epochs[i].epoch_seconds;
    const double n = static_cast<double>(res.epochs.size());
    const int first = res.epochs.front().epoch;
    std::printf("done: %zu epochs (%d..%d) on %s in %.2f s (%.2f epochs/s overall", res.epochs.size(), first,
                last.epoch, res.backend.c_str(), res.seconds, n / res.seconds);
    if (res.epochs.size() > 1)  // the first epoch holds graph capture and warm-up, as compile time on PyTorch's side
      std::printf("; %.2f epochs/s steady, epochs %d..%d, %.1f ms/epoch", (n - 1) / steady, first + 1, last.epoch,
                  1000 * steady / (n - 1));
    std::printf("); final val top1 %.2f%% top5 %.2f%%, best top1 %.2f%%%s", final_val ? 100 * final_val->val_top1 : 0.0,
                final_val ? 100 * final_val->val_top5 : 0.0, 100 * best, res.early_stopped ? " (early stopping)" : "");
    std::printf("; %lld step%s skipped (non-finite gradients)\n", static_cast<long long>(res.skipped_steps),
                res.skipped_steps == 1 ? "" : "s");
    if (!res.run_dir.empty()) std::printf("run dir: %s\n", res.run_dir.c_str());
  }
  return 0;
}

// trctl eval CFG --weights PATH: loss, top-1 and top-5 of the validation set with a checkpoint's parameters.
int cmd_eval(const SpecArgs& a, const std::string& weights) {
  Result<Spec> spec = spec_load(a.config, a.overrides);
  if (!spec.ok()) return report_errors(spec.errors());
  auto log = spdlog::stderr_color_mt("trctl");
  log->set_pattern("[%H:%M:%S] %v");
  TrainOptions opt;
#if defined(TRCTL_HAVE_CUDA)
  opt.gpu.device_count = cuda_device_count;
  opt.gpu.make = make_cuda_backend;
#endif
  Result<EvalResult> r = eval_run(spec.value(), opt, weights, *log);
  if (!r.ok()) return report_errors(r.errors());
  std::printf("eval: %lld images on %s, loss %.6f, top-1 %.2f%%, top-5 %.2f%% (weights: %s)\n",
              static_cast<long long>(r->images), r->backend.c_str(), r->loss, 100 * r->top1, 100 * r->top5,
              r->checkpoint.c_str());
  return 0;
}

}  // namespace
}  // namespace trctl

int main(int argc, char** argv) {
  using namespace trctl;
  CLI::App app{"trctl: a static-graph training framework (YAML spec -> compiled plan -> CPU or CUDA backend)"};
  app.require_subcommand(1);
  SpecArgs train_a, validate_a, compile_a;
  bool print_config = false;
  std::string dump = "after:memplan";
  auto* train = app.add_subcommand("train", "train a model from a spec");
  add_spec_args(train, train_a);
  train->add_flag("--print-config", print_config, "print the resolved spec before training");
  std::string resume;
  train->add_option("--resume", resume,
                    "continue from a checkpoint directory, a run directory's latest checkpoint, or `auto` (the newest "
                    "run directory of this run's name that has one; none: start fresh)");
  std::string init_from;
  train->add_option("--init-from", init_from, "start from a checkpoint's weights only (fresh optimizer, step 0)");
  int train_gpus = 0;
  train->add_option("--gpus", train_gpus,
                    "data parallel over N GPUs of this host: N worker processes, one a GPU (docs/distributed.md)")
      ->check(CLI::Range(1, 1024));
  auto* validate = app.add_subcommand("validate", "check a spec and print it resolved");
  add_spec_args(validate, validate_a);
  auto* compile = app.add_subcommand("compile", "compile a spec and print the IR/plan after a stage");
  add_spec_args(compile, compile_a);
  std::string stage_list;  // compiler_stages(), the one list
  for (const std::string& st : compiler_stages()) stage_list += (stage_list.empty() ? "" : ", ") + st;
  compile->add_option("--dump", dump, "after:STAGE, STAGE one of: " + stage_list);
  SpecArgs bench_a;
  BenchConfigArgs bc;
  int bench_reps = 0;
  auto* bench = app.add_subcommand(
      "bench", "benchmarks (docs/bench.md): `bench CFG` (the whole train step, timed), `bench CFG --epochs N` (a "
               "training run's steady throughput), `bench compile CFG...` (IR size, planned bytes), `bench kernels` "
               "(each CUDA kernel vs the card's ceilings), `bench data SOURCE` (the training data pipeline, images/s), "
               "`bench CFG --layers` (per-node time of the train step), `bench CFG --autotune` (cuDNN algorithm "
               "search, cached)");
  add_spec_args(bench, bench_a);
  bench->add_flag("--layers", bc.layers, "time every node of the CFG's train step and its captured replay");
  bench->add_flag("--autotune", bc.autotune, "search the CFG's convolution algorithms and write the cache");
  bench->add_flag("--legacy-only", bc.legacy_only,
                  "--autotune: measure cuDNN's legacy algorithms only, not its graph-API engine configs");
  bench->add_option("--epochs", bc.epochs, "train this many epochs (no run directory) and report the steady figures")
      ->check(CLI::Range(2, 100000));
  bench->add_option("--steps", bc.steps, "bench CFG: timed train steps (default 50)")->check(CLI::Range(1, 1000000));
  bench->add_option("--reps", bench_reps, "--layers: runs per node (default 20); compile: compiles timed (default 3)")
      ->check(CLI::Range(1, 100000));
  bench->add_option("--sustain", bc.sustain_s,
                    "--layers: seconds of back-to-back replays before the step is timed again, at the clocks a "
                    "training run settles to (default 3; 0: skip)")
      ->check(CLI::Range(0.0, 600.0));
  bench->add_option("--energy", bc.energy_s,
                    "--layers: also the step's and every node's energy from the board's counter (NVML, part of the "
                    "NVIDIA driver), each over S seconds of back-to-back runs (default 0: not measured; ~1 for a "
                    "few % accuracy, so a step of 100 nodes takes ~100 s more)")
      ->check(CLI::Range(0.0, 600.0));
  bench->add_option("--energy-settle", bc.energy_settle_s,
                    "--energy: seconds of each figure's runs before its interval starts, while the board's counter "
                    "catches up with the new load (default 1; ~S + 1 s per node in all)")
      ->check(CLI::Range(0.0, 60.0));
  bench->add_option("--json", bc.json, "also write the results to this file (schema trctl-bench/1, docs/bench.md)");
  std::vector<std::string> kernels_only;
  bench->add_option("--only", kernels_only,
                    "bench kernels: run just the rows whose name contains TEXT (repeatable; the ceilings always), "
                    "e.g. --only wgconv");
  SpecArgs eval_a;
  std::string eval_weights;
  auto* eval = app.add_subcommand("eval", "loss, top-1 and top-5 of the validation set with a checkpoint's weights");
  add_spec_args(eval, eval_a);
  eval->add_option("--weights", eval_weights, "a checkpoint directory, or a run directory (its latest checkpoint)")
      ->required();
  PackArgs pack_a;
  auto* pack = app.add_subcommand("pack-dts", "pack a dataset (IDX, CIFAR, image folder) into a DTS file, or verify one");
  pack->add_option("source", pack_a.source, "IDX images file, CIFAR root folder, or image folder (CLASS/IMAGE.jpg)");
  pack->add_option("-o,--output", pack_a.out, "the DTS file to write (atomically)");
  pack->add_option("--format", pack_a.format, "auto | idx | cifar10 | cifar100 | folder (default auto)");
  pack->add_option("--labels", pack_a.labels, "idx: the labels file");
  pack->add_option("--split", pack_a.split, "cifar: train | test (default train)");
  pack->add_option("--level", pack_a.levels, "a reduced level SHORT_SIDE:QUALITY (repeatable), e.g. 160:90");
  pack->add_option("--block-kib", pack_a.block_kib, "block size in KiB (default 16384)")->check(CLI::Range(4, 1048576));
  pack->add_option("--threads", pack_a.threads, "worker threads (default: all cores)")->check(CLI::Range(0, 1024));
  pack->add_flag("--skip-bad", pack_a.skip_bad, "leave out unreadable or corrupt samples (listed) instead of failing");
  pack->add_option("--verify", pack_a.verify, "check FILE: every block checksum and every sample decoded");
  pack->add_flag("--no-decode", pack_a.no_decode, "--verify: checksums only");
  std::string dts_path;
  auto* dts = app.add_subcommand("dts", "inspect a DTS file: `trctl dts info FILE`");
  auto* dts_info_cmd = dts->add_subcommand("info", "header, levels, blocks, classes, creation parameters");
  dts_info_cmd->add_option("file", dts_path, "the DTS file")->required();
  dts->require_subcommand(1);
  BenchDataArgs bd;
  bench->add_option("--level", bd.level, "bench data: DTS level by short side (0 = full size)");
  bench->add_flag("--memory", bd.memory, "bench data: hold the DTS level in RAM instead of streaming it");
  bench->add_option("--workers", bd.workers, "bench data: decode threads (default: all cores)")->check(CLI::Range(0, 256));
  bench->add_option("--io-threads", bd.io_threads, "bench data: DTS block readers (default 2)")->check(CLI::Range(1, 64));
  bench->add_option("--batch-size", bd.batch, "bench data: images per batch (default 256)")->check(CLI::Range(1, 65536));
  bench->add_option("--batches", bd.batches, "bench data: timed batches (default 100)")->check(CLI::Range(1, 1000000));
  bench->add_option("--warmup", bd.warmup, "bench data, bench CFG: untimed batches or steps first (default 10)")
      ->check(CLI::Range(0, 1000000));
  bench->add_option("--size", bd.size, "bench data: crop size (default 224)")->check(CLI::Range(1, 4096));
  bench->add_flag("--fp32", bd.fp32, "bench data: write fp32 instead of fp16");
  ReportArgs report_a;
  auto* report = report_subcommand(app, report_a);
  ExportArgs export_a;
  auto* exp = export_subcommand(app, export_a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (*train && train_gpus > 0) return cmd_train_launch(argc, argv, train_gpus, train_a.config, train_a.overrides);
    if (*train) return cmd_train(train_a, print_config, resume, init_from);
    if (*validate) return cmd_validate(validate_a);
    if (*compile) return cmd_compile(compile_a, dump);
    if (*eval) return cmd_eval(eval_a, eval_weights);
    if (*pack) return cmd_pack_dts(pack_a);
    if (*dts) return cmd_dts_info(dts_path);
    if (*report) return cmd_report(report_a);
    if (*exp) return cmd_export(export_a);
    if (*bench && bench_a.config == "data") {
      if (bench_a.overrides.size() != 1) {
        std::fprintf(stderr, "error: trctl bench data SOURCE (a DTS file or an image folder)\n");
        return 2;
      }
      bd.source = bench_a.overrides[0];
      bd.json = bc.json;
      return cmd_bench_data(bd);
    }
    if (*bench && !kernels_only.empty() && bench_a.config != "kernels") {
      std::fprintf(stderr, "error: --only applies to `trctl bench kernels`\n");
      return 2;
    }
    if (*bench && bench_a.config == "kernels" && bench_a.overrides.empty() && !bc.layers && !bc.autotune)
      return cmd_bench_kernels(bc.json, kernels_only);
    if (*bench && bench_a.config == "compile")
      return cmd_bench_compile(bench_a.overrides, bench_reps ? bench_reps : 3, bc.json);
    if (*bench) {
      bc.config = bench_a.config;
      bc.overrides = bench_a.overrides;
      bc.warmup = bd.warmup;
      if (bench_reps) bc.reps = bench_reps;
      return cmd_bench_config(bc);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
  return 1;
}
