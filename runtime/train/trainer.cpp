// train_run: data -> transforms -> compile -> backend -> epochs of (train steps, validation) -> run outputs.
#include "runtime/train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/graph/param_groups.h"
#include "core/ckpt/checkpoint.h"
#include "core/compiler.h"
#include "core/memplan/grad_check.h"
#include "dataio/loader.h"
#include "runtime/train/train_data.h"
#include "runtime/backend.h"
#include "runtime/train/run_outputs.h"
#include "runtime/dist/shard.h"

namespace trctl {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int program_index(const Compiled& c, const std::string& name) {
  for (size_t i = 0; i < c.graph.programs.size(); ++i)
    if (c.graph.programs[i].name == name) return static_cast<int>(i);
  return -1;
}

// Writes a metrics.jsonl step record every log_interval training steps (images/s since the last record).
struct StepLog {
  Backend& be;
  const Compiled& c;
  RunOutputs& out;
  bool train;
  int epoch;
  double lr;
  Clock::time_point t_run;
  Clock::time_point t_log = Clock::now();
  int64_t images_log = 0;
  // A log step whose loss was requested (Backend::request_loss) and is written once the next batch is queued.
  bool pending = false;
  int64_t pending_step = 0, pending_images = 0;

  // After every batch; `step_end`: the batch ended an optimizer step (always, without gradient accumulation). At a
  // log step the loss is only requested; the record is written after the next batch has been launched (or at the
  // epoch's end, flush), so that waiting for the logged step never leaves the device without queued work.
  void after_step(int prog, int64_t batch, bool step_end = true) {
    flush();
    images_log += batch;
    if (!train || !step_end || be.step() % c.spec.run.log_interval != 0) return;
    be.request_loss(prog);
    pending = true;
    pending_step = be.step();
    pending_images = images_log;
    images_log = 0;
  }
  // Whether the trainer saves a mid-epoch checkpoint after this step (train.checkpoint_every_steps): its record is
  // written first, so a run that dies after the checkpoint still has it.
  bool checkpoint_due() const {
    const int every = c.spec.train.checkpoint_every_steps;
    return train && every > 0 && be.step() % every == 0;
  }
  // Writes the pending record: the loss read first (it waits for the logged step), then the times, so the window
  // ends when that step is done. (As arguments of one call their order was unspecified: GCC timed the window before
  // the read, i.e. the host's enqueueing of the CUDA graphs, and logged ~2x the images/s.) The next window starts
  // there and holds the batches launched since.
  void flush() {
    if (!pending) return;
    pending = false;
    const double loss = be.take_loss();
    const double window_s = since(t_log), run_s = since(t_run);
    out.step(epoch, pending_step, loss, lr, pending_images / window_s, run_s);
    t_log = Clock::now();
  }
};

// Called after each optimizer step with (batches done in the epoch, batches in it); false stops the epoch there.
using StepControl = std::function<bool(int64_t, int64_t)>;

// Gradient accumulation (train.accumulate_steps k): which train programs an epoch runs. Batch i (0-based) of an
// epoch of `total` ends an optimizer step when i + 1 is a multiple of k or the epoch's last batch; the others run
// the micro-batch program (always a full batch: a partial one is the epoch's last). Epochs start at a step boundary,
// and a stop (signal, mid-epoch checkpoint) comes only after a step's last batch, so no accumulator is ever saved.
struct EpochPrograms {
  int full = -1, last = -1, micro = -1;
  int k = 1;
  EpochPrograms(const Compiled& c, bool train)
      : full(program_index(c, train ? "train" : "eval")),
        last(program_index(c, train ? "train_last" : "eval_last")),
        micro(train ? program_index(c, "train_micro") : -1),
        k(train ? c.graph.accumulate_steps : 1) {}
  bool step_end(int64_t i, int64_t total) const { return k <= 1 || (i + 1) % k == 0 || i + 1 >= total; }
  // The program for batch i, given the one its size picks (full or last); -1 when there is none.
  int pick(int by_size, int64_t i, int64_t total) const {
    if (step_end(i, total)) return by_size;
    return by_size == full ? micro : -1;
  }
};

// Runs every batch of one epoch through the program matching its size, after skipping the first `skip` (a run
// resumed mid-epoch); returns images processed.
Result<int64_t> run_epoch(Backend& be, const Compiled& c, HostFeed& loader, bool train, int epoch, double lr,
                          RunOutputs& out, const StepControl& on_step, Clock::time_point t_run, int64_t skip = 0) {
  const EpochPrograms tp(c, train);
  const int full = tp.full, last = tp.last;
  HostBatch b;
  int64_t images = 0, i = 0;
  bool open_step = false;  // micro-batches run since the last optimizer step
  const int64_t total = loader.batches_per_epoch();
  for (int pi : {full, last, tp.micro}) {  // the eval programs take the validation size, the train ones theirs
    const Shape& in = pi >= 0 ? c.graph.values[c.graph.programs[pi].input].shape : Shape{};
    if (pi >= 0 && (in.dims[1] != loader.sample_h() || in.dims[2] != loader.sample_w()))
      return Error{ErrCode::Internal, "trainer",
                   "program " + c.graph.programs[pi].name + " takes " + in.str() + " but its feed yields " +
                       std::to_string(loader.sample_h()) + "x" + std::to_string(loader.sample_w()) + " samples"};
  }
  StepLog log{be, c, out, train, epoch, lr, t_run};
  for (; i < skip; ++i) {
    Result<bool> more = loader.next(&b);
    if (!more.ok()) return more.errors();
    if (!more.value()) break;
  }
  for (;;) {
    Result<bool> more = loader.next(&b);
    if (!more.ok()) return more.errors();
    if (!more.value()) break;
    const bool step_end = tp.step_end(i, total);
    const int prog = tp.pick((full >= 0 && b.size == c.graph.programs[full].batch) ? full : last, i, total);
    if (prog < 0) return Error{ErrCode::Internal, "trainer", "no program for a batch of " + std::to_string(b.size)};
    const int slot = static_cast<int>(i % 2);
    Status st = be.load_batch(prog, slot, b.x, b.y, b.size);
    if (st.ok()) st = be.run(prog, slot);
    if (!st.ok()) return st.errors();
    images += b.size;
    ++i;
    open_step = !step_end;
    log.after_step(prog, b.size, step_end);
    if (step_end && log.checkpoint_due()) log.flush();  // the step's record before a mid-epoch checkpoint of it
    if (step_end && on_step && !on_step(i, total)) break;
  }
  log.flush();
  if (open_step)  // the loader yielded fewer batches than batches_per_epoch() said
    return Error{ErrCode::Internal, "trainer", "the epoch's data ended inside an accumulated optimizer step"};
  return images;
}

// The same epoch with the data resident on the device: the backend gathers and transforms each batch itself.
Result<int64_t> run_epoch_resident(Backend& be, const Compiled& c, DataSplit split, int64_t n, bool shuffle,
                                   int epoch, double lr, RunOutputs& out, const StepControl& on_step,
                                   Clock::time_point t_run, int64_t skip = 0, const DistEnv* shard = nullptr) {
  const bool train = split == DataSplit::Train;
  const EpochPrograms tp(c, train);
  const int full = tp.full, last = tp.last;
  std::vector<int64_t> order = loader_epoch_order(n, shuffle, c.spec.seed, static_cast<uint32_t>(epoch));
  if (shard) {  // data parallelism: this rank's shard of the (seed, epoch) order (runtime/dist/shard.h)
    order = dist_shard_order(order, shard->rank, shard->world_size);
    n = static_cast<int64_t>(order.size());
  }
  Status st = be.begin_epoch(split, static_cast<uint32_t>(epoch), order);
  if (!st.ok()) return st.errors();
  const int64_t fb = full >= 0 ? c.graph.programs[full].batch : 0;
  const int64_t nfull = full >= 0 ? n / fb : 0;
  const int64_t total = nfull + (last >= 0 ? 1 : 0);
  StepLog log{be, c, out, train, epoch, lr, t_run};
  int64_t images = 0;
  if (skip > 0 && !(st = be.seek_resident(split, std::min(skip, nfull) * fb)).ok()) return st.errors();
  for (int64_t i = skip; i < total; ++i) {
    const bool step_end = tp.step_end(i, total);
    const int prog = tp.pick(i < nfull ? full : last, i, total);
    if (prog < 0) return Error{ErrCode::Internal, "trainer", "no program for batch " + std::to_string(i)};
    st = be.run_resident(prog, split);
    if (!st.ok()) return st.errors();
    const int64_t b = c.graph.programs[prog].batch;
    images += b;
    log.after_step(prog, b, step_end);
    if (step_end && log.checkpoint_due()) log.flush();  // the step's record before a mid-epoch checkpoint of it
    if (step_end && on_step && !on_step(i + 1, total)) break;
  }
  log.flush();
  return images;
}

// Validation of epoch e (with the EMA weights when train.eval_ema), its metrics left in the eval programs.
Status validate_epoch(Backend& be, const Compiled& c, const Spec& spec, const Data& d, bool resident, HostFeed* loader,
                      int e, double lr, RunOutputs& out, Clock::time_point t_run) {
  const bool ema_eval = spec.train.ema_decay > 0 && spec.train.eval_ema;
  if (ema_eval) {
    Status st = be.swap_ema();  // validate with the averaged weights
    if (!st.ok()) return st;
  }
  Result<int64_t> images = int64_t{0};
  if (resident) {
    images = run_epoch_resident(be, c, DataSplit::Val, d.val_n, false, e, lr, out, {}, t_run);
  } else {
    loader->start_epoch(static_cast<uint32_t>(e));
    images = run_epoch(be, c, *loader, false, e, lr, out, {}, t_run);
  }
  if (!images.ok()) return images.errors();
  return ema_eval ? be.swap_ema() : ok_status();
}

// train.early_stopping_*: counts validations without an improvement of more than min_delta.
struct EarlyStopping {
  double best = 0;
  int bad = 0;
  bool seen = false;
  // True when the run should stop after this validated epoch.
  bool update(const TrainSpec& t, const EpochRecord& r) {
    if (t.early_stopping_patience <= 0) return false;
    const double v = t.early_stopping_on_loss ? -r.val_loss : r.val_top1;  // higher is better
    if (!seen || v > best + t.early_stopping_min_delta) {
      best = v;
      bad = 0;
      seen = true;
      return false;
    }
    return ++bad >= t.early_stopping_patience;
  }
};

bool stop_requested(const TrainOptions& opt) { return opt.stop_signal && opt.stop_signal->load() != 0; }

// Which backend the spec gets on this machine: CUDA when asked, or when auto and a device is present.
Result<bool> use_cuda(const Spec& spec, const GpuBackendFactory& gpu) {
  const DeviceKind d = spec.train.device;
  const bool have_gpu = gpu.device_count && gpu.device_count() > 0;
  if (d == DeviceKind::Cuda && !gpu.make)
    return Error{ErrCode::NotSupported, spec.source, "train.device: cuda, but this trctl was built without CUDA"};
  if (d == DeviceKind::Cuda && !have_gpu)
    return Error{ErrCode::NotSupported, spec.source, "train.device: cuda, but no CUDA device is present"};
  return d == DeviceKind::Cuda || (d == DeviceKind::Auto && have_gpu);
}

// Mean loss, top-1 and top-5 of a split's epoch, over its full and partial-batch programs (and the micro-batch one
// of gradient accumulation: its loss is the batch mean, not divided by accumulate_steps).
ProgramMetrics split_metrics(Backend& be, const Compiled& c, bool train, double* loss, double* top1,
                             double* top5 = nullptr) {
  ProgramMetrics m;
  for (const char* nm : {train ? "train" : "eval", train ? "train_last" : "eval_last", train ? "train_micro" : ""}) {
    const int pi = program_index(c, nm);
    if (pi < 0) continue;
    const ProgramMetrics x = be.metrics(pi);
    m.loss_sum += x.loss_sum;
    m.correct += x.correct;
    m.count += x.count;
    m.correct5 += x.correct5;
  }
  *loss = m.count > 0 ? m.loss_sum / m.count : 0;
  *top1 = m.count > 0 ? m.correct / m.count : 0;
  if (top5) *top5 = m.count > 0 ? m.correct5 / m.count : 0;
  return m;
}

Result<std::unique_ptr<Backend>> backend_make(const Spec& spec, const Compiled& c, bool cuda,
                                              const GpuBackendFactory& gpu, spdlog::logger& log) {
  if (cuda) return gpu.make(c, spec.seed);
  if (spec.train.device == DeviceKind::Auto) log.info("no CUDA device: training on the cpu backend");
  std::unique_ptr<Backend> be = make_cpu_backend(c, spec.seed, spec.train.threads);
  if (spec.train.precision != Precision::Fp32)
    log.warn("precision {} requested: the cpu backend computes in fp32", to_string(spec.train.precision));
  return be;
}

// checkpoints/epoch-NNNN[-step-SSSSSSSS], not one still being written (epoch-....partial, left by a crash).
bool is_epoch_checkpoint(const std::filesystem::path& p) {
  const std::string n = p.filename().string();
  const std::string part = kCkptPartialSuffix;
  return n.rfind("epoch-", 0) == 0 &&
         !(n.size() >= part.size() && n.compare(n.size() - part.size(), part.size(), part) == 0);
}

}  // namespace

Result<std::string> checkpoint_dir_resolve(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(path) / kCkptStateFile)) return path;
  std::string latest;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(path) / "checkpoints", ec))
    if (is_epoch_checkpoint(e.path()) && fs::exists(e.path() / kCkptStateFile) &&
        fs::exists(e.path() / kCkptWeightsFile) && e.path().string() > latest)
      latest = e.path().string();
  if (latest.empty())
    return Error{ErrCode::Io, path, "no checkpoint here (neither state.bin nor checkpoints/epoch-*/state.bin)"};
  return latest;
}

namespace {

// Restores weights, optimizer state and step from a checkpoint; returns the number of epochs it had completed.
Result<TrainState> resume_from(Backend& be, const Compiled& c, const std::string& path, spdlog::logger& log) {
  if (!be.supports_resume())
    return Error{ErrCode::NotSupported, path, "resuming on the " + be.name() + " backend is not supported yet"};
  Result<std::string> dir = checkpoint_dir_resolve(path);
  if (!dir.ok()) return dir.errors();
  Result<Checkpoint> ck = ckpt_load(dir.value(), c);
  if (!ck.ok()) return ck.errors();
  Status st = be.write_region(Region::Weights, ck->weights);
  if (st.ok()) st = be.write_region(Region::OptState, ck->opt_state);
  if (st.ok()) st = be.write_region(Region::Buffers, ck->buffers);
  if (st.ok()) st = be.restore_state(ck->state);
  if (!st.ok()) return st.errors();
  log.info("resumed from {} after epoch {} (step {})", dir.value(), ck->state.epoch, ck->state.step);
  return ck->state;
}

// --init-from: the parameters and running statistics of a checkpoint (another spec is fine if the parameters'
// names, shapes and dtypes agree); the optimizer starts fresh at step 0.
Status init_from(Backend& be, const Compiled& c, const std::string& path, spdlog::logger& log) {
  Result<std::string> dir = checkpoint_dir_resolve(path);
  if (!dir.ok()) return dir.errors();
  CkptLoadOptions lo;
  lo.weights_only = true;
  Result<Checkpoint> ck = ckpt_load(dir.value(), c, lo);
  if (!ck.ok()) return ck.errors();
  Status st = be.write_region(Region::Weights, ck->weights);
  if (st.ok()) st = be.write_region(Region::Buffers, ck->buffers);
  if (st.ok()) log.info("initialised the parameters from {}", dir.value());
  return st;
}

// --resume auto: the newest of run.out_dir/NAME, NAME-2, ... that holds a checkpoint ("" when none does).
std::string latest_run_with_checkpoint(const Spec& spec) {
  namespace fs = std::filesystem;
  const std::string name = spec.run.name.empty() ? fs::path(spec.source).stem().string() : spec.run.name;
  for (int i = 9999; i >= 1; --i) {
    const std::string dir = spec.run.out_dir + "/" + name + (i == 1 ? "" : "-" + std::to_string(i));
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    if (checkpoint_dir_resolve(dir).ok()) return dir;
  }
  return "";
}

// Counts the checkpoint writes of this process; debug.fail_checkpoint_write = N makes the N-th fail with ENOSPC
// after 4 KiB of its first file (a disk filling up mid-write).
struct CheckpointIo {
  int fail_at = 0;
  int writes = 0;
  AtomicWriteOptions next() {
    AtomicWriteOptions o;
    if (++writes == fail_at) {
      o.fail_after_bytes = 4096;
      o.fail_errno = ENOSPC;
    }
    return o;
  }
};

// Writes run_dir/checkpoints/NAME (NAME empty: epoch-NNNN, or epoch-NNNN-step-SSSSSSSS when `batch` > 0: stopped
// after `batch` batches of epoch + 1, which a resumed run skips).
Status checkpoint_write(Backend& be, const Compiled& c, const std::string& run_dir, int epoch, CheckpointIo& io,
                        const std::string& as = "", int64_t batch = 0) {
  char name[64];
  if (batch > 0)
    std::snprintf(name, sizeof name, "epoch-%04d-step-%08lld", epoch, static_cast<long long>(be.step()));
  else
    std::snprintf(name, sizeof name, "epoch-%04d", epoch);
  const std::string dir = run_dir + "/checkpoints/" + (as.empty() ? std::string(name) : as);
  TrainState ts = be.save_state();
  ts.epoch = epoch;
  ts.seed = c.spec.seed;
  ts.data_epoch = epoch + 1;
  ts.data_batch = batch;
  Status st = ckpt_save(dir, c, be.read_region(Region::Weights), be.read_region(Region::OptState), ts, io.next(),
                        be.read_region(Region::Buffers));
  if (st.ok()) return st;
  std::vector<Error> errs = st.errors();
  const std::string what = batch > 0 ? "checkpoint at step " + std::to_string(be.step()) + " (epoch " +
                                           std::to_string(epoch + 1) + ", batch " + std::to_string(batch) + ")"
                                     : "checkpoint of epoch " + std::to_string(epoch);
  errs.push_back({ErrCode::Io, dir,
                  what + " not written; the run stops here (earlier checkpoints are intact: continue with --resume " +
                      run_dir + " once there is space)"});
  return errs;
}

// Removes all but the newest keep_last checkpoints epoch-NNNN[-step-SSSSSSSS], epoch and step ones together:
// their names sort by training progress (epoch-0002 < epoch-0002-step-00000450 < epoch-0003). Each is renamed to
// NAME.partial before its files go, so a kill mid-removal leaves no half checkpoint under a name readers take.
Status checkpoints_prune(const std::string& run_dir, int keep_last) {
  namespace fs = std::filesystem;
  std::vector<fs::path> epochs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec))
    if (is_epoch_checkpoint(e.path())) epochs.push_back(e.path());
  std::sort(epochs.begin(), epochs.end());
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < epochs.size(); ++i) {
    const fs::path doomed = epochs[i].string() + kCkptPartialSuffix;
    fs::remove_all(doomed, ec);
    fs::rename(epochs[i], doomed, ec);
    if (!ec) fs::remove_all(doomed, ec);
    if (ec) return Error{ErrCode::Io, epochs[i].string(), "cannot remove an old checkpoint: " + ec.message()};
  }
  return ok_status();
}

// checkpoints/best replaced by the current state: written beside it as best.new, then swapped by renames, so a
// crash leaves a complete best, best.old or best.new behind.
Status checkpoint_best(Backend& be, const Compiled& c, const std::string& run_dir, int epoch, CheckpointIo& io) {
  namespace fs = std::filesystem;
  const fs::path base = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  fs::remove_all(base / "best.new", ec);
  Status st = checkpoint_write(be, c, run_dir, epoch, io, "best.new");
  if (!st.ok()) return st;
  fs::remove_all(base / "best.old", ec);
  if (fs::exists(base / "best")) fs::rename(base / "best", base / "best.old", ec);
  if (!ec) fs::rename(base / "best.new", base / "best", ec);
  if (ec) return Error{ErrCode::Io, (base / "best").string(), "cannot replace the best checkpoint: " + ec.message()};
  fs::remove_all(base / "best.old", ec);
  return ok_status();
}

}  // namespace

Result<DataShape> data_shape(const Spec& spec) {
  Result<Data> data = data_prepare(spec);
  if (!data.ok()) return data.errors();
  return shape_of(data.value());
}

namespace {

// What train, eval and the per-layer profile share: the data and transforms, the backend choice, the spec
// compiled for it (AMP storage on the CUDA backend; the CPU backend computes and stores in fp32) and the backend
// over that plan. `compiled` is held by pointer: the backend keeps a reference to it.
struct RunSetup {
  Data data;
  std::unique_ptr<Compiled> compiled;
  std::unique_ptr<Backend> backend;
};

// run.json's facts of a backend: its name, where it planned cuDNN convolutions their algorithms' source, and the
// device memory it allocated (CUDA).
RunFacts run_facts_of(const Backend& be) {
  RunFacts f;
  f.backend = be.name();
  f.device = be.device_description();
  if (const ConvAlgoSources* conv = be.conv_algo_sources()) {
    f.has_conv = true;
    f.conv = *conv;
  }
  f.has_memory = be.device_memory(&f.memory);
  return f;
}

// "cuDNN conv algorithms: 39 plans from the autotune cache PATH, 0 from cuDNN's heuristics" (empty without plans).
std::string conv_algo_log(const ConvAlgoSources* conv) {
  if (!conv || conv->from_cache + conv->from_heuristics == 0) return "";
  return "cuDNN conv algorithms: " + std::to_string(conv->from_cache) + " plans from the autotune cache " +
         (conv->cache.empty() ? std::string("(no path)") : conv->cache) +
         (conv->cache_exists ? "" : " (no such file)") + ", " + std::to_string(conv->from_heuristics) +
         " from cuDNN's heuristics";
}

// "conv -> batch norm statistics (train.conv_bn_stats: auto): 5 pairs fused (cuDNN conv + genstats), 8 separate,
// 0 fell back" (+ the first fallback's reason); the mode in effect (effective_conv_bn_stats: auto, the default, is
// separate with train.deterministic true or fp32), and empty when that is separate.
std::string conv_bn_stats_log(const ConvAlgoSources* conv) {
  if (!conv || conv->bn_stats_mode == "separate") return "";
  std::string s = "conv -> batch norm statistics (train.conv_bn_stats: " + conv->bn_stats_mode + "): " +
                  std::to_string(conv->bn_stats_fused) + " pairs fused (cuDNN conv + genstats, or the few-channel "
                  "forward's epilogue), " +
                  std::to_string(conv->bn_stats_separate) + " separate, " + std::to_string(conv->bn_stats_fallback) +
                  " fell back to separate";
  if (conv->bn_stats_fallback > 0) s += " (first: " + conv->bn_stats_fallback_reason + ")";
  if (conv->bn_apply_mode != "separate") {
    s += "; batch-norm apply + ReLU in the next conv (train.conv_bn_apply: " + conv->bn_apply_mode + "): " +
         std::to_string(conv->bn_apply_folded) + " folded, " + std::to_string(conv->bn_apply_fallback) +
         " fell back";
    if (conv->bn_apply_fallback > 0) s += " (first: " + conv->bn_apply_fallback_reason + ")";
  }
  return s;
}

Result<RunSetup> run_setup(const Spec& spec, const TrainOptions& opt, spdlog::logger& log) {
  // The GPU driver's start-up (hundreds of ms) overlaps the dataset's decompression.
  std::thread warm;
  if (opt.gpu.warm_up && spec.train.device != DeviceKind::Cpu) warm = std::thread(opt.gpu.warm_up);
  Result<Data> data = data_prepare(spec);
  if (warm.joinable()) warm.join();
  if (!data.ok()) return data.errors();
  Result<bool> cuda = use_cuda(spec, opt.gpu);
  if (!cuda.ok()) return cuda.errors();
  CompileOptions copt;
  if (cuda.value()) copt.storage = amp_storage(spec);
  copt.fold_conv_bias = opt.fold_conv_bias;
  DataShape shape = shape_of(data.value());
  if (opt.dist.enabled) {  // one rank of a data-parallel job (docs/distributed.md)
    const char* no = !cuda.value() ? "on the cpu backend (it needs train.device: cuda)"
                     : data->streamed ? "of a streamed dataset (dts, image_folder) yet"
                     : spec.train.early_stopping_patience > 0 ? "with train.early_stopping_patience yet"
                     // the bucket all-reduces would need to skip the micro-batches and follow the flush's accumulate
                     : spec.train.accumulate_steps > 1 ? "with train.accumulate_steps > 1 yet"
                                                       : nullptr;
    if (no) return Error{ErrCode::NotSupported, spec.source, std::string("distributed training is not supported ") + no};
    shape.train_n = dist_shard_size(shape.train_n, opt.dist.world_size);  // each rank compiles its shard's batches
  }
  Result<Compiled> compiled = compile_spec(spec, shape, copt);
  if (!compiled.ok()) return compiled.errors();
  RunSetup r;
  r.data = std::move(data.value());
  r.compiled = std::make_unique<Compiled>(std::move(compiled.value()));
  Result<std::unique_ptr<Backend>> be = backend_make(spec, *r.compiled, cuda.value(), opt.gpu, log);
  if (!be.ok()) return be.errors();
  r.backend = std::move(be.value());
  return r;
}

// Both splits onto a device-resident backend (every program, train or eval, reads from the device).
Status upload_data(Backend& be, const Data& d) {
  Status st = be.upload_split(DataSplit::Train, d.train, d.train_tf);
  if (st.ok()) st = be.upload_split(DataSplit::Val, d.val, d.val_tf);
  return st;
}

}  // namespace

Result<EvalResult> eval_run(const Spec& spec, const TrainOptions& opt, const std::string& weights,
                            spdlog::logger& log) {
  Result<RunSetup> setup = run_setup(spec, opt, log);
  if (!setup.ok()) return setup.errors();
  const Data& d = setup->data;
  const Compiled& c = *setup->compiled;
  Backend& be = *setup->backend;
  Result<std::string> dir = checkpoint_dir_resolve(weights);
  if (!dir.ok()) return dir.errors();
  CkptLoadOptions lo;
  lo.weights_only = true;  // the spec may differ in everything that leaves the parameters' names and shapes
  Result<Checkpoint> ck = ckpt_load(dir.value(), c, lo);
  if (!ck.ok()) return ck.errors();
  Status st = be.write_region(Region::Weights, ck->weights);
  if (st.ok()) st = be.write_region(Region::Buffers, ck->buffers);
  if (!st.ok()) return st.errors();
  be.reset_metrics();
  RunOutputs none;  // validation writes no step records
  Result<int64_t> images = int64_t{0};
  if (be.resident_data() && !d.streamed) {
    if (!(st = upload_data(be, d)).ok()) return st.errors();
    images = run_epoch_resident(be, c, DataSplit::Val, d.val_n, false, 1, 0, none, {}, Clock::now());
  } else {
    Result<std::unique_ptr<HostFeed>> loader = HostFeed::make(spec, d, false, be);
    if (!loader.ok()) return loader.errors();
    loader.value()->start_epoch(1);
    images = run_epoch(be, c, *loader.value(), false, 1, 0, none, {}, Clock::now());
  }
  if (!images.ok()) return images.errors();
  EvalResult r;
  r.backend = be.name();
  r.checkpoint = dir.value();
  r.images = images.value();
  split_metrics(be, c, false, &r.loss, &r.top1, &r.top5);
  return r;
}

Result<StepProfile> train_profile(const Spec& spec, const TrainOptions& opt, const ProfileOptions& popt,
                                  spdlog::logger& log) {
  Result<bool> cuda = use_cuda(spec, opt.gpu);
  if (!cuda.ok()) return cuda.errors();
  if (!cuda.value()) return Error{ErrCode::NotSupported, spec.source, "per-layer timing needs a CUDA device"};
  Result<RunSetup> setup = run_setup(spec, opt, log);
  if (!setup.ok()) return setup.errors();
  const Data& d = setup->data;
  const Compiled& c = *setup->compiled;
  Backend& b = *setup->backend;
  if (d.streamed)
    return Error{ErrCode::NotSupported, spec.source,
                 "per-layer timing of a streamed dataset (dts, image_folder): time the same model with dataset: synthetic"};
  Status st = b.write_region(Region::Weights, params_init(c, spec.seed));
  if (st.ok()) st = b.write_region(Region::Buffers, buffers_init(c));
  if (st.ok()) st = upload_data(b, d);
  if (st.ok()) st = b.begin_epoch(DataSplit::Train, 1, loader_epoch_order(d.train.n, true, spec.seed, 1));
  if (!st.ok()) return st.errors();
  b.set_lrs(param_group_lrs(spec, c.graph, 1));
  if (std::string mem = b.memory_report(); !mem.empty()) log.info("{}", mem);
  const int prog = program_index(c, "train");
  if (prog < 0) return Error{ErrCode::Invalid, spec.source, "no full training batch to profile"};
  Result<StepProfile> prof = b.profile(prog, popt);
  if (prof.ok()) {
    prof->end_loss = b.last_loss(prog);
    prof->skipped_steps = b.skipped_steps();
  }
  return prof;
}

Result<TrainResult> train_run(const Spec& spec, const TrainOptions& opt, spdlog::logger& log) {
  const Clock::time_point t_run = Clock::now();
  Result<RunSetup> setup = run_setup(spec, opt, log);
  if (!setup.ok()) return setup.errors();
  const Data& d = setup->data;
  const Compiled& c = *setup->compiled;
  std::unique_ptr<Backend>& be = setup->backend;
  Status st = be->write_region(Region::Weights, params_init(c, spec.seed));
  if (st.ok()) st = be->write_region(Region::Buffers, buffers_init(c));
  if (!st.ok()) return st.errors();
  if (!opt.resume.empty() && !opt.init_from.empty())
    return Error{ErrCode::Invalid, opt.init_from, "--init-from and --resume exclude each other"};
  if (!opt.init_from.empty() && !(st = init_from(*be, c, opt.init_from, log)).ok()) return st.errors();
  int first_epoch = 1;
  int64_t skip = 0;  // batches of first_epoch already trained (a checkpoint written mid-epoch on a stop signal)
  std::string resume = opt.resume;
  if (resume == "auto") {
    resume = latest_run_with_checkpoint(spec);
    log.info("--resume auto: {}", resume.empty() ? "no checkpoint of this run yet, starting fresh" : resume);
  }
  if (!resume.empty()) {
    Result<TrainState> done = resume_from(*be, c, resume, log);
    if (!done.ok()) return done.errors();
    first_epoch = static_cast<int>(done->epoch) + 1;
    if (done->data_epoch == first_epoch) skip = done->data_batch;
  }

  TrainResult res;
  res.backend = be->name();
  RunOutputs out;
  if (opt.write_run_dir && opt.dist.rank == 0) {  // data parallelism: rank 0 writes metrics and checkpoints
    std::string name = spec.run.name.empty() ? std::filesystem::path(spec.source).stem().string() : spec.run.name;
    Result<std::string> dir = run_dir_create(spec.run.out_dir, name);
    if (!dir.ok()) return dir.errors();
    res.run_dir = dir.value();
    st = out.open(res.run_dir);
    if (st.ok()) st = out.write_file("config.resolved.yaml", spec_to_yaml(spec));
    if (st.ok()) st = out.write_file("plan.txt", compiled_dump(c, "memplan"));
    if (!st.ok()) return st.errors();
  }
  const bool two_sizes = d.val_h != d.out_h || d.val_w != d.out_w;  // e.g. FixRes: train 176, validate 224
  log.info("backend {}; {} train / {} val samples{}; {} parameters; plan {:.1f} MiB{}", be->name(), d.train_n,
           d.val_n,
           two_sizes ? fmt::format(" (train {}x{}, val {}x{})", d.out_h, d.out_w, d.val_h, d.val_w) : std::string(),
           c.plan.weights_bytes / 4, c.plan.total_bytes() / 1048576.0,
           res.run_dir.empty() ? "" : "; run dir " + res.run_dir);

  const bool resident = be->resident_data() && !d.streamed;
  if (resident) {
    if (!(st = upload_data(*be, d)).ok()) return st.errors();
  }
  if (std::string dev = be->device_description(); !dev.empty()) log.info("device: {}", dev);
  if (std::string mem = be->memory_report(); !mem.empty()) log.info("{}", mem);
  if (std::string conv = conv_algo_log(be->conv_algo_sources()); !conv.empty()) log.info("{}", conv);
  if (std::string bs = conv_bn_stats_log(be->conv_algo_sources()); !bs.empty()) log.info("{}", bs);
  if (const ConvAlgoSources* conv = be->conv_algo_sources(); conv && conv->bn_bwd_mode != "separate")
    log.info("batch-norm backward reductions in the data gradient (train.conv_bn_backward: {}): {} fused, {} "
             "separate, {} fell back{}",
             conv->bn_bwd_mode, conv->bn_bwd_fused, conv->bn_bwd_separate, conv->bn_bwd_fallback,
             conv->bn_bwd_fallback > 0 ? " (first: " + conv->bn_bwd_fallback_reason + ")" : std::string());
  if (const ConvAlgoSources* conv = be->conv_algo_sources(); conv && conv->wgconv_dgrad > 0)
    log.info("data gradients on trctl's wgmma kernel (train.conv_wgconv): {} (per program)", conv->wgconv_dgrad);
  if (const ConvAlgoSources* conv = be->conv_algo_sources(); conv && conv->wgconv_fwd > 0)
    log.info("forward convolutions on trctl's wgmma kernel (train.conv_wgconv): {} (per program), {} batch norms' "
             "apply folded into their prologue ({} also into their weight gradient's, their output not stored)",
             conv->wgconv_fwd, conv->wgconv_bn_folded, conv->wgconv_bn_unwritten);
  if (const ConvAlgoSources* conv = be->conv_algo_sources(); conv && conv->wgconv_wgrad > 0)
    log.info("weight gradients on trctl's wgmma ring kernel (train.conv_wgconv): {} (per program)", conv->wgconv_wgrad);
  if (const ConvAlgoSources* conv = be->conv_algo_sources(); conv && conv->dgrad_fwd > 0)
    log.info("data gradients as cuDNN forward convolutions over flipped filters (train.conv_dgrad_fwd): {} (per "
             "program)", conv->dgrad_fwd);
  if (const ConvAlgoSources* conv = be->conv_algo_sources(); conv && conv->wgrad_overlapped > 0)
    log.info("weight gradients on a second stream beside the next nodes (train.conv_wgrad_overlap {}): {} (per "
             "program)", spec.train.conv_wgrad_overlap, conv->wgrad_overlapped);
  if (const ConvAlgoSources* conv = be->conv_algo_sources(); conv && conv->bn_grad_folded > 0)
    log.info("batch-norm backward dx computed in the few-channel weight gradient: {} batch norms (third pass skipped)",
             conv->bn_grad_folded);
  if (const Program* tp = c.graph.find_program("train"); tp && be->name() == "cuda") {  // the CPU reads them all
    const GradCheckPlan gc = grad_check_plan(c.graph, c.plan, static_cast<int>(tp - c.graph.programs.data()),
                                             grad_check_by_operands(spec, opt.dist.enabled));
    if (!gc.operands.empty())
      log.info("non-finite check (train.grad_check: auto): {} linear weight gradients ({:.1f} MB) checked through "
               "their fp16 operands ({:.1f} MB)",
               gc.operands.size(), gc.skipped_bytes / 1e6, gc.operand_bytes / 1e6);
  }
  if (!res.run_dir.empty()) {  // after the upload: its device memory counts the resident data
    if (!(st = out.write_file("run.json", run_facts_json(run_facts_of(*be)))).ok()) return st.errors();
  }
  // Host feeds only when the backend is fed from the host (their threads start on construction).
  std::unique_ptr<HostFeed> train_loader, val_loader;
  if (!resident) {
    Result<std::unique_ptr<HostFeed>> tl = HostFeed::make(spec, d, true, *be);
    if (!tl.ok()) return tl.errors();
    Result<std::unique_ptr<HostFeed>> vl = HostFeed::make(spec, d, false, *be);
    if (!vl.ok()) return vl.errors();
    train_loader = std::move(tl.value());
    val_loader = std::move(vl.value());
  }

  double best_top1 = -1;  // keep_best: the best of the epochs this run directory saw (a resumed run has its own)
  EarlyStopping early;
  CheckpointIo ckpt_io{spec.debug.fail_checkpoint_write};
  int64_t mid_epoch_saved = -1;  // the step of the last mid-epoch checkpoint written
  // checkpoints/epoch-NNNN (batch 0: after epoch `epochs_done`) or epoch-NNNN-step-SSSSSSSS (after `batch` batches
  // of the next epoch), then train.keep_last over all of them. A failure stops the run (checkpoint_errors).
  auto save = [&](int epochs_done, int64_t batch) -> Status {
    if (res.run_dir.empty()) return ok_status();
    Status w = checkpoint_write(*be, c, res.run_dir, epochs_done, ckpt_io, "", batch);
    if (w.ok() && batch > 0) mid_epoch_saved = be->step();
    if (w.ok() && spec.train.keep_last > 0) w = checkpoints_prune(res.run_dir, spec.train.keep_last);
    return w;
  };
  const int every_steps = spec.train.checkpoint_every_steps;
  const bool loss_scaled = c.graph.storage == DType::F16;  // fp16 AMP: the backend keeps a dynamic loss scale
  // The board's energy per epoch where the backend has a counter (a GPU's, NVML): opened here, before the first
  // epoch's clock starts. Under a power cap a step's time follows its energy (RESULTS.md runs 63-64).
  const double no_energy = std::numeric_limits<double>::quiet_NaN();
  Result<double> energy_probe = be->energy_mj();
  const bool energy = energy_probe.ok();
  if (!energy && be->name() != "cpu")
    log.info("energy per epoch: not measured ({})", energy_probe.errors()[0].message);
  auto energy_now = [&]() -> double {  // mJ, NaN when the counter fails mid-run (that epoch goes unmeasured)
    if (!energy) return no_energy;
    Result<double> mj = be->energy_mj();
    return mj.ok() ? mj.value() : no_energy;
  };
  for (int e = first_epoch; e <= spec.train.epochs; ++e) {
    const Clock::time_point t_epoch = Clock::now();
    const double mj_before = energy_now();
    const int64_t step_before = be->step();
    const double lr = scheduler_lr(spec.scheduler, spec.optimizer.lr, e, spec.train.epochs);  // logged
    be->set_lrs(param_group_lrs(spec, c.graph, e));
    be->reset_metrics();
    const int64_t skipped_before = be->skipped_steps();
    int64_t done = 0, in_epoch = 0;
    bool step_due_at_end = false;  // a checkpoint_every_steps step was the epoch's last: saved as epoch-NNNN
    Status step_saved = ok_status();
    auto progress = [&](int64_t i, int64_t n) {
      done = i;
      in_epoch = n;
      if (opt.on_step) opt.on_step(be->step());
      if (opt.progress_tty && (i % 10 == 0 || i == n)) {
        std::fprintf(stderr, "\repoch %d/%d  %lld/%lld batches", e, spec.train.epochs, static_cast<long long>(i),
                     static_cast<long long>(n));
        std::fflush(stderr);
      }
      if (every_steps > 0 && be->step() % every_steps == 0) {
        if (i == n) {
          step_due_at_end = true;
        } else if (!(step_saved = save(e - 1, i)).ok()) {
          return false;  // the write failed: stop here (below)
        }
      }
      return !stop_requested(opt);  // a signal: finish this step, then stop
    };
    Result<int64_t> imgs = int64_t{0};
    const int64_t skip_now = e == first_epoch ? skip : 0;
    if (resident) {
      imgs = run_epoch_resident(*be, c, DataSplit::Train, d.train_n, true, e, lr, out, progress, t_run, skip_now,
                                opt.dist.enabled ? &opt.dist : nullptr);
    } else {
      train_loader->start_epoch(static_cast<uint32_t>(e));
      imgs = run_epoch(*be, c, *train_loader, true, e, lr, out, progress, t_run, skip_now);
    }
    if (!imgs.ok()) return imgs.errors();
    if (!step_saved.ok()) {
      res.checkpoint_errors = step_saved.errors();
      break;
    }
    if (stop_requested(opt) && done < in_epoch) {  // stopped inside the epoch: save the position and leave
      res.stopped_by = opt.stop_signal->load();
      if (mid_epoch_saved != be->step() && !(st = save(e - 1, done)).ok()) res.checkpoint_errors = st.errors();
      break;
    }
    st = be->synchronize();
    if (!st.ok()) return st.errors();
    const double train_seconds = since(t_epoch);
    const double mj_after = energy_now();
    const bool validate = e % spec.train.validate_every == 0 || e == spec.train.epochs;
    if (validate) {
      st = validate_epoch(*be, c, spec, d, resident, val_loader.get(), e, lr, out, t_run);
      if (!st.ok()) return st.errors();
    }
    if (opt.progress_tty) std::fprintf(stderr, "\r\033[K");

    EpochRecord r;
    r.epoch = e;
    r.step = be->step();
    r.lr = lr;
    split_metrics(*be, c, true, &r.train_loss, &r.train_top1);
    if (validate) split_metrics(*be, c, false, &r.val_loss, &r.val_top1, &r.val_top5);
    r.validated = validate;
    r.skipped_steps = be->skipped_steps() - skipped_before;
    r.loss_scale = be->save_state().loss_scale;
    res.skipped_steps += r.skipped_steps;
    r.images_per_s = imgs.value() / train_seconds;
    r.train_seconds = train_seconds;
    r.steps = r.step - step_before;
    r.energy_j = (mj_after - mj_before) * 1e-3;  // NaN when either read failed
    r.epoch_seconds = since(t_epoch);
    r.seconds = since(t_run);
    out.epoch(r);
    res.epochs.push_back(r);
    const std::string val = validate ? fmt::format("val loss {:.4f} top1 {:.2f}% top5 {:.2f}%", r.val_loss,
                                                   100 * r.val_top1, 100 * r.val_top5)
                                     : std::string("val -");
    const std::string joules = std::isfinite(r.energy_j) && r.steps > 0
                                   ? fmt::format("  {:.0f} W {:.2f} J/step", r.power_w(), r.energy_j / r.steps)
                                   : std::string();
    log.info("epoch {}/{}  lr {:.3g}  train loss {:.4f} top1 {:.2f}%  {}  {:.0f} img/s  {:.1f} ms/epoch{}", e,
             spec.train.epochs, lr, r.train_loss, 100 * r.train_top1, val, r.images_per_s, 1000 * r.epoch_seconds,
             joules);
    if (r.skipped_steps > 0)
      log.warn("epoch {}: {} step{} skipped (non-finite gradients), {}", e, r.skipped_steps,
               r.skipped_steps == 1 ? "" : "s",
               loss_scaled ? fmt::format("loss scale now {:g}", r.loss_scale)
                           : std::string("no loss scale to back off (fp32 gradients)"));
    const bool epoch_saved = (spec.train.checkpoint_every > 0 && e % spec.train.checkpoint_every == 0) ||
                             step_due_at_end;
    if (epoch_saved && !(st = save(e, 0)).ok()) {
      res.checkpoint_errors = st.errors();
      break;
    }
    if (spec.train.keep_best && validate && !res.run_dir.empty() && r.val_top1 > best_top1) {
      best_top1 = r.val_top1;
      st = checkpoint_best(*be, c, res.run_dir, e, ckpt_io);
      if (!st.ok()) {
        res.checkpoint_errors = st.errors();
        break;
      }
    }
    if (validate && early.update(spec.train, r)) {
      log.info("early stopping after epoch {}: {} has not improved for {} validations", e,
               spec.train.early_stopping_on_loss ? "val_loss" : "val_top1", spec.train.early_stopping_patience);
      res.early_stopped = true;
      break;
    }
    if (stop_requested(opt)) {  // a signal during the epoch's last step or its validation: stop at its end
      res.stopped_by = opt.stop_signal->load();
      if (!epoch_saved && !(st = save(e, 0)).ok()) res.checkpoint_errors = st.errors();
      break;
    }
  }
  res.final_weights = be->read_weights();
  res.seconds = since(t_run);
  return res;
}

}  // namespace trctl
