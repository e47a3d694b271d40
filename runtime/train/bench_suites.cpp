// bench_compile, bench_ref_gemm_ms, bench_model, bench_*_metrics: see bench_suites.h.
#include "runtime/train/bench_suites.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>

#include "core/graph/param_groups.h"
#include "core/compiler.h"
#include "runtime/backend.h"
#include "runtime/cpu/gemm.h"
#include "runtime/train/train_data.h"

namespace trctl {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// CPU time of the calling thread: with one compute thread all the work is the caller's, and time the scheduler
// gives to other processes is not counted.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void add_plan_bytes(const MemoryPlan& plan, const std::string& prefix, BenchResult* out) {
  for (int r = 0; r < kRegionCount; ++r)
    out->add(prefix + "bytes/" + to_string(static_cast<Region>(r)), static_cast<double>(plan.region_bytes[r]),
             "bytes", false, true);
  out->add(prefix + "bytes/total", static_cast<double>(plan.total_bytes()), "bytes", false, true);
}

int program_index(const Compiled& c, const std::string& name) {
  for (size_t i = 0; i < c.graph.programs.size(); ++i)
    if (c.graph.programs[i].name == name) return static_cast<int>(i);
  return -1;
}

size_t out_dtype_bytes(OutDType t) { return t == OutDType::F32 ? 4 : 2; }

// Which backend the spec gets on this machine, as `trctl train` decides it: CUDA when asked, or when the device
// is auto and one is present.
Result<bool> want_cuda(const Spec& spec, const GpuBackendFactory& gpu) {
  const DeviceKind d = spec.train.device;
  const bool have_gpu = gpu.device_count && gpu.device_count() > 0;
  if (d == DeviceKind::Cuda && (!gpu.make || !have_gpu)) {
    const std::string why = gpu.make ? "no CUDA device is present" : "this trctl was built without CUDA";
    return Error{ErrCode::NotSupported, spec.source, "train.device: cuda, but " + why};
  }
  return d == DeviceKind::Cuda || (d == DeviceKind::Auto && have_gpu);
}

}  // namespace

Status bench_compile(const Spec& spec, const std::string& prefix, int reps, BenchResult* out) {
  Result<DataShape> shape = data_shape(spec);
  if (!shape.ok()) return shape.errors();
  const std::string p = prefix.empty() ? "" : prefix + "/";
  double best_ms = 0;
  Result<Compiled> c = Error{ErrCode::Internal, spec.source, "not compiled"};
  for (int i = 0; i < std::max(1, reps); ++i) {
    const Clock::time_point t0 = Clock::now();
    c = compile_spec(spec, shape.value());
    const double ms = ms_since(t0);
    if (!c.ok()) return c.errors();
    best_ms = i == 0 ? ms : std::min(best_ms, ms);
  }
  const Graph& g = c->graph;
  for (const Program& prog : g.programs)
    out->add(p + "nodes/" + prog.name, static_cast<double>(prog.nodes.size()), "count", false, true);
  out->add(p + "values", static_cast<double>(g.values.size()), "count", false, true);
  int64_t params = 0;
  for (const ParamInfo& pi : g.params) params += g.values[pi.value].shape.numel();
  out->add(p + "parameters", static_cast<double>(params), "count", false, true);
  add_plan_bytes(c->plan, p, out);
  out->add(p + "bytes/activations_naive", static_cast<double>(c->plan.activation_naive_bytes), "bytes", false, true);
  const DType amp = amp_storage(spec);
  if (amp != DType::F32) {
    CompileOptions copt;
    copt.storage = amp;
    Result<Compiled> ca = compile_spec(spec, shape.value(), copt);
    if (!ca.ok()) return ca.errors();
    add_plan_bytes(ca->plan, p + "amp/", out);
  }
  out->add(p + "compile_ms", best_ms, "ms", false, false, false);
  return ok_status();
}

double bench_ref_gemm_ms(ThreadPool* pool, int reps, bool cpu_time) {
  constexpr int64_t n = 512;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int64_t i = 0; i < n * n; ++i) {  // fixed values in [-1, 1): no denormals, no data dependence
    a[i] = static_cast<float>((i * 7919) % 2048) / 1024.0f - 1.0f;
    b[i] = static_cast<float>((i * 104729) % 2048) / 1024.0f - 1.0f;
  }
  double best = 0;
  for (int r = 0; r < std::max(1, reps); ++r) {
    const double t0 = cpu_time ? thread_cpu_ms() : 0;
    const Clock::time_point w0 = Clock::now();
    gemm(Trans::N, Trans::N, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, pool);
    const double ms = cpu_time ? thread_cpu_ms() - t0 : ms_since(w0);
    best = r == 0 ? ms : std::min(best, ms);
  }
  return best;
}

Result<ModelBench> bench_model(const Spec& spec, const TrainOptions& opt, const ModelBenchOptions& mo,
                               spdlog::logger& log) {
  Result<bool> cuda = want_cuda(spec, opt.gpu);
  if (!cuda.ok()) return cuda.errors();
  Result<Data> data = data_prepare(spec);
  if (!data.ok()) return data.errors();
  const Data& d = data.value();
  CompileOptions copt;
  if (cuda.value()) copt.storage = amp_storage(spec);
  Result<Compiled> compiled = compile_spec(spec, shape_of(d), copt);
  if (!compiled.ok()) return compiled.errors();
  const Compiled& c = compiled.value();  // the backend keeps a reference: it lives until the end
  std::unique_ptr<Backend> be;
  if (cuda.value()) {
    Result<std::unique_ptr<Backend>> made = opt.gpu.make(c, spec.seed);
    if (!made.ok()) return made.errors();
    be = std::move(made.value());
  } else {
    be = make_cpu_backend(c, spec.seed, spec.train.threads);
  }
  const int prog = program_index(c, "train");
  if (prog < 0) return Error{ErrCode::Invalid, spec.source, "fewer training samples than one batch: no step to time"};
  Status st = be->write_region(Region::Weights, params_init(c, spec.seed));
  if (st.ok()) st = be->write_region(Region::Buffers, buffers_init(c));
  if (!st.ok()) return st.errors();
  be->set_lrs(param_group_lrs(spec, c.graph, 1));

  const bool resident = be->resident_data() && !d.streamed;
  const int64_t batch = c.graph.programs[prog].batch;
  const int64_t per_epoch = std::max<int64_t>(1, d.train_n / batch);
  int64_t in_epoch = 0;
  uint32_t epoch = 1;
  if (resident) {
    st = be->upload_split(DataSplit::Train, d.train, d.train_tf);
    if (st.ok()) st = be->begin_epoch(DataSplit::Train, epoch, loader_epoch_order(d.train.n, true, spec.seed, epoch));
    if (!st.ok()) return st.errors();
  } else {  // one real batch, copied out of the feed (whose threads end here) and loaded once
    Result<std::unique_ptr<HostFeed>> feed = HostFeed::make(spec, d, true, *be);
    if (!feed.ok()) return feed.errors();
    feed.value()->start_epoch(1);
    HostBatch hb;
    Result<bool> got = feed.value()->next(&hb);
    if (!got.ok()) return got.errors();
    if (!got.value() || hb.size != batch) return Error{ErrCode::Invalid, spec.source, "no full training batch"};
    const size_t xbytes =
        static_cast<size_t>(batch * d.out_h * d.out_w * d.c) * out_dtype_bytes(be->host_input_dtype());
    std::vector<std::byte> x(xbytes);
    std::vector<int32_t> y(hb.y, hb.y + batch);
    std::memcpy(x.data(), hb.x, xbytes);
    feed.value().reset();
    if (!(st = be->load_batch(prog, 0, x.data(), y.data(), batch)).ok()) return st.errors();
  }
  if (std::string mem = be->memory_report(); !mem.empty()) log.info("{}", mem);
  auto step = [&]() -> Status {
    if (!resident) return be->run(prog, 0);
    if (in_epoch == per_epoch) {
      in_epoch = 0;
      ++epoch;
      Status s = be->begin_epoch(DataSplit::Train, epoch, loader_epoch_order(d.train.n, true, spec.seed, epoch));
      if (!s.ok()) return s;
    }
    ++in_epoch;
    return be->run_resident(prog, DataSplit::Train);
  };

  ModelBench m;
  m.backend = be->name();
  m.batch = batch;
  for (int i = 0; i < mo.warmup; ++i)
    if (!(st = step()).ok()) return st.errors();
  if (!(st = be->synchronize()).ok()) return st.errors();
  std::vector<double> step_ms, ref_ms;
  if (cuda.value()) {  // rounds of queued steps: one synchronisation per round, so launches overlap as in training
    m.rounds = std::max(1, std::min(mo.rounds, mo.steps));
    const int per_round = std::max(1, mo.steps / m.rounds);
    m.steps = per_round * m.rounds;
    for (int r = 0; r < m.rounds; ++r) {
      const Clock::time_point t0 = Clock::now();
      for (int i = 0; i < per_round; ++i)
        if (!(st = step()).ok()) return st.errors();
      if (!(st = be->synchronize()).ok()) return st.errors();
      step_ms.push_back(ms_since(t0) / per_round);
    }
  } else {  // every step timed alone, each right after the reference GEMM on the same threads
    ThreadPool pool(spec.train.threads);
    m.threads = pool.size();
    m.cpu_time = m.threads == 1;
    m.steps = m.rounds = std::max(1, mo.steps);
    const int gemms = (30 + m.steps - 1) / m.steps;  // at least 30 reference samples, also for few slow steps
    std::vector<double> step_q;                     // what the ratio uses: thread CPU time, or wall time
    for (int i = 0; i < m.steps; ++i) {
      for (int k = 0; k < gemms; ++k) ref_ms.push_back(bench_ref_gemm_ms(&pool, 1, m.cpu_time));
      const double c0 = thread_cpu_ms();
      const Clock::time_point t0 = Clock::now();
      if (!(st = step()).ok()) return st.errors();
      step_ms.push_back(ms_since(t0));
      step_q.push_back(m.cpu_time ? thread_cpu_ms() - c0 : step_ms.back());
    }
    m.ref_ms = median(ref_ms);
    m.ref_ms_min = *std::min_element(ref_ms.begin(), ref_ms.end());
    // Another process only ever slows a sample down, so the fastest sample of each is the closest to the
    // machine's own speed, and their quotient is what stays put on a busy 2-core CI box.
    m.ratio = *std::min_element(step_q.begin(), step_q.end()) / m.ref_ms_min;
  }
  if (!std::isfinite(be->last_loss(prog)))
    log.warn("the timed steps ended with a non-finite loss ({}): the timing stands, the training would not",
             be->last_loss(prog));
  m.step_ms = median(step_ms);
  m.step_ms_min = *std::min_element(step_ms.begin(), step_ms.end());
  m.step_ms_max = *std::max_element(step_ms.begin(), step_ms.end());
  return m;
}

void bench_model_metrics(const ModelBench& m, BenchResult* out) {
  const bool cpu = m.backend == "cpu";
  out->add("step_ms", m.step_ms, "ms", false, false, !cpu);
  out->add("images_per_s", m.step_ms > 0 ? m.batch / (m.step_ms * 1e-3) : 0, "img/s", true, false, !cpu);
  if (!cpu) return;
  out->add("step_ms_min", m.step_ms_min, "ms", false, false, false);
  out->add("ref_gemm_ms", m.ref_ms, "ms", false, false, false);
  out->add("ref_gemm_ms_min", m.ref_ms_min, "ms", false, false, false);
  out->add("step_over_ref_gemm", m.ratio, "ratio", false);
}

Status bench_train_metrics(const TrainResult& r, bool accuracy, bool cpu, BenchResult* out) {
  if (r.epochs.size() < 2)
    return Error{ErrCode::Invalid, "trctl bench --epochs",
                 "steady figures need at least 2 epochs (epoch 1 is warm-up)"};
  double steady_s = 0, inv_ips = 0, best = 0;
  const EpochRecord* final_val = nullptr;
  for (size_t i = 1; i < r.epochs.size(); ++i) {
    steady_s += r.epochs[i].epoch_seconds;
    if (r.epochs[i].images_per_s > 0) inv_ips += 1.0 / r.epochs[i].images_per_s;
  }
  for (const EpochRecord& e : r.epochs)
    if (e.validated) {
      best = std::max(best, e.val_top1);
      final_val = &e;
    }
  const double n = static_cast<double>(r.epochs.size());
  // Every epoch trains the same number of images, so the steady images/s is the harmonic mean of the epochs'.
  out->add("epochs_per_s_steady", (n - 1) / steady_s, "epochs/s", true, false, !cpu);
  out->add("epochs_per_s_overall", n / r.seconds, "epochs/s", true, false, !cpu);
  out->add("images_per_s_steady", inv_ips > 0 ? (n - 1) / inv_ips : 0, "img/s", true, false, !cpu);
  // The board's energy over the steady epochs where every one measured it (a GPU's counter): shown, not checked.
  double joules = 0, seconds = 0;
  int64_t steps = 0;
  for (size_t i = 1; i < r.epochs.size(); ++i) {
    joules += r.epochs[i].energy_j;  // NaN when an epoch went unmeasured: then no figure
    seconds += r.epochs[i].train_seconds;
    steps += r.epochs[i].steps;
  }
  if (std::isfinite(joules) && steps > 0 && seconds > 0) {
    out->add("j_per_step_steady", joules / static_cast<double>(steps), "J", false, false, false);
    out->add("power_w_steady", joules / seconds, "W", false, false, false);
  }
  if (accuracy && final_val) {
    out->add("final_val_top1", final_val->val_top1, "fraction", true);
    out->add("best_val_top1", best, "fraction", true);
  }
  return ok_status();
}

}  // namespace trctl
