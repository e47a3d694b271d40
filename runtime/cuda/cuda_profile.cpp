// CudaBackend::profile: where a step's time goes (trctl bench CFG --layers). The captured step is replayed
// `reps` times between two events; then each node's launches (as lowered for the graph, batch fetch first) run on
// their own, `reps` times between two events. Nodes are timed outside the graph, so their sum includes one launch
// latency each; the difference to the replay time is what the graph saves. Running a node repeatedly is
// harmless for timing: every node overwrites its outputs (the optimizer and the running statistics drift). A node of
// several launches (batch norm: statistics, finalize, apply) also has each launch timed alone (launch_ms). Last,
// with ProfileOptions::sustain_s > 0, the step is replayed back to back for that long and then timed again over at
// least a second (sustained_ms): under a training run's sustained load the card may cap its power and lower its
// clocks (the H200 at 700 W: RESULTS.md run 50), which the short burst of the first timing does not reach.
// With ProfileOptions::energy_s > 0, the board's energy counter (NVML) over energy_s seconds of back-to-back
// replays gives the step's energy and mean power, and over energy_s seconds of each node's back-to-back runs that
// node's energy per run, each interval starting energy_settle_s seconds into its runs: under a power cap the
// step's time follows its energy (RESULTS.md run 63).
// CudaBackend::energy_mj: the same counter (one NVML session, nvml_meter) for the trainer's per-epoch energy.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/power/nvml_meter.h"

namespace trctl::cuda_detail {
namespace {

Status checked(cudaError_t e, const char* call, int line) {
  if (e == cudaSuccess) return ok_status();
  return cuda_error(e, call, __FILE__, line);
}

// Arithmetic of the matrix nodes: 2 multiply-adds per output element and reduction step.
double node_flops(const Graph& g, const Node& n) {
  auto numel = [&](ValueId v) { return static_cast<double>(g.values[v].shape.numel()); };
  switch (n.op) {
    case OpKind::Linear:  // Y (N,M) = X (N,K) W^T
      return 2 * numel(n.out[0]) * static_cast<double>(g.values[n.in[0]].shape.dims[1]);
    case OpKind::LinearGradInput:
    case OpKind::LinearGradWeight:  // the same product, transposed
      return 2 * numel(n.in[0]) * static_cast<double>(g.values[n.in[1]].shape.dims[1]);
    case OpKind::Conv2d:  // Y (N,P,Q,K), each a sum over R*S*C/g
    case OpKind::Conv2dGradInput:
    case OpKind::Conv2dGradWeight: {
      const ValueId w = n.op == OpKind::Conv2dGradWeight ? n.out[0] : n.in[1];
      const ValueId y = n.op == OpKind::Conv2d ? n.out[0] : n.in[0];
      const auto& wd = g.values[w].shape.dims;
      return 2 * numel(y) * static_cast<double>(wd[1] * wd[2] * wd[3]);
    }
    default:
      return 0;
  }
}

double node_bytes(const Graph& g, const Node& n) {
  double b = 0;
  for (ValueId v : n.in) b += static_cast<double>(stored_bytes(g, v));
  for (ValueId v : n.out) b += static_cast<double>(stored_bytes(g, v));
  return b;
}

// Runs `run` (one unit of work queued on s: a replay, a node's launches) back to back in chunks of `chunk` until at
// least `seconds` have passed; the host waits at each chunk's end, so that its clock follows the device's.
// *runs, *elapsed_s: how many ran, over how long.
Status run_for(cudaStream_t s, double seconds, int chunk, const Launch& run, int64_t* runs, double* elapsed_s) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  *runs = 0;
  *elapsed_s = 0;
  while (*elapsed_s < seconds) {
    for (int k = 0; k < chunk; ++k)
      if (Status st = run(); !st.ok()) return st;
    *runs += chunk;
    if (Status st = checked(cudaStreamSynchronize(s), "cudaStreamSynchronize", __LINE__); !st.ok()) return st;
    *elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return ok_status();
}

// Energy of one run of `run`: run_for(settle_s, chunk) first (the board's counter lags the load: see
// ProfileOptions), then the counter's difference over run_for(seconds, chunk), read at the settle's last chunk end.
// *mj: mJ per run; *w: mean power over the interval, W.
Status energy_per_run(const NvmlMeter& m, cudaStream_t s, double settle_s, double seconds, int chunk,
                      const Launch& run, double* mj, double* w) {
  if (Status st = checked(cudaStreamSynchronize(s), "cudaStreamSynchronize", __LINE__); !st.ok()) return st;
  int64_t runs = 0;
  double elapsed = 0;
  if (settle_s > 0)
    if (Status st = run_for(s, settle_s, chunk, run, &runs, &elapsed); !st.ok()) return st;
  Result<uint64_t> e0 = nvml_energy_mj(m);
  if (!e0.ok()) return e0.errors();
  if (Status st = run_for(s, seconds, chunk, run, &runs, &elapsed); !st.ok()) return st;
  Result<uint64_t> e1 = nvml_energy_mj(m);
  if (!e1.ok()) return e1.errors();
  const double de = static_cast<double>(e1.value() - e0.value());
  *mj = de / static_cast<double>(runs);
  *w = de * 1e-3 / elapsed;
  return ok_status();
}

}  // namespace

// The optimizer node's memory traffic, for the roofline (its node lists only name the first parameter): the
// non-finite check's reads (grad_check_of's ranges), then the update's -- weights and each state copy read and
// written, gradients read, the AMP weight copy written. LARS's, clipping's and the EMA's extra passes not counted.
double CudaBackend::optimizer_bytes(int program) {
  double check = 0;
  for (const auto& [b, e] : grad_check_of(program).ranges) check += static_cast<double>(e - b);
  const double n = static_cast<double>(c_.plan.trainable_bytes);  // f32: 4 bytes an element
  const int k = optimizer_state_count(c_.spec.optimizer);
  return check + n * (3 + 2 * k) + (lowp() ? n / 2 : 0);
}

Result<StepProfile> CudaBackend::profile(int program, const ProfileOptions& opt) {
  const int reps = opt.reps;
  if (reps < 1) return Error{ErrCode::Invalid, "profile", "reps must be >= 1"};
  if (!(opt.sustain_s >= 0 && opt.sustain_s <= 600))
    return Error{ErrCode::Invalid, "profile", "sustain_s must be in [0, 600] seconds"};
  const Program& p = c_.graph.programs[program];
  if (!exec_[program]) {
    Status st = capture(program);
    if (!st.ok()) return st.errors();
  }
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  TRCTL_CUDA_TRY(cudaEventCreate(&e0));
  TRCTL_CUDA_TRY(cudaEventCreate(&e1));
  auto elapsed = [&](float* ms) -> Status {
    TRCTL_CUDA_TRY(cudaEventSynchronize(e1));
    TRCTL_CUDA_TRY(cudaEventElapsedTime(ms, e0, e1));
    return ok_status();
  };
  StepProfile prof;
  prof.reps = reps;
  Status st = ok_status();
  float ms = 0;
  auto replay = [&](int n) {  // n replays of the captured step queued on the stream
    for (int r = 0; r < n && st.ok(); ++r)
      st = checked(cudaGraphLaunch(exec_[program], ctx_.stream), "cudaGraphLaunch", __LINE__);
  };
  auto timed_replays = [&](int n) -> double {  // ms per replay of n back-to-back replays (0 after an error)
    if (st.ok()) st = checked(cudaEventRecord(e0, ctx_.stream), "cudaEventRecord", __LINE__);
    replay(n);
    if (st.ok()) st = checked(cudaEventRecord(e1, ctx_.stream), "cudaEventRecord", __LINE__);
    if (st.ok()) st = elapsed(&ms);
    return st.ok() ? ms / n : 0.0;
  };
  // The whole step as the trainer runs it (warm-up replays first).
  replay(3);
  prof.graph_ms = timed_replays(reps);
  // What a synchronize between steps costs (the trainer's loss reads at log_interval, epoch boundaries): host wall
  // time of launch + synchronize on a drained stream, less the replay's device time, and the host time of that
  // cudaGraphLaunch call (behind queued replays the call blocks, so it is only measured here); medians of 5.
  std::vector<double> restart, host;
  for (int r = 0; r < 5 && st.ok(); ++r) {
    st = checked(cudaStreamSynchronize(ctx_.stream), "cudaStreamSynchronize", __LINE__);
    const auto t0 = std::chrono::steady_clock::now();
    replay(1);
    const auto t1 = std::chrono::steady_clock::now();
    if (st.ok()) st = checked(cudaStreamSynchronize(ctx_.stream), "cudaStreamSynchronize", __LINE__);
    const auto t2 = std::chrono::steady_clock::now();
    host.push_back(1e3 * std::chrono::duration<double>(t1 - t0).count());
    restart.push_back(1e3 * std::chrono::duration<double>(t2 - t0).count() - prof.graph_ms);
  }
  if (!restart.empty()) {
    std::sort(restart.begin(), restart.end());
    std::sort(host.begin(), host.end());
    prof.restart_ms = restart[restart.size() / 2];
    prof.launch_host_ms = host[host.size() / 2];
  }
  // Each node on its own.
  std::vector<std::vector<Launch>> groups;
  std::vector<NodeTime> rows;
  if (st.ok()) {
    Result<Launch> fetch = batch_fetch(program);
    if (!fetch.ok()) st = fetch.errors();
    else groups.push_back({fetch.value()});
    rows.push_back({"augment", "batch_fetch", c_.graph.values[p.input].shape.str(), 0, 0,
                    static_cast<double>(stored_bytes(c_.graph, p.input)), {}});
  }
  for (size_t i = 0; i < p.nodes.size() && st.ok(); ++i) {
    std::vector<Launch> g;
    st = lower_node(program, i, g);
    const Node& n = p.nodes[i];
    groups.push_back(std::move(g));
    const double bytes = n.op == OpKind::OptimizerStep ? optimizer_bytes(program) : node_bytes(c_.graph, n);
    rows.push_back({n.name, to_string(n.op), c_.graph.values[n.out[0]].shape.str(), 0, node_flops(c_.graph, n),
                    bytes, {}});
  }
  warm_.clear();
  for (size_t k = 0; k < groups.size() && st.ok(); ++k) {
    if (groups[k].empty()) {  // folded into another node's kernel (fusions) or a view
      rows[k].ms = 0;
      continue;
    }
    for (const Launch& l : groups[k])
      if (st.ok()) st = l();  // warm (module loading, caches)
    if (st.ok()) st = checked(cudaEventRecord(e0, ctx_.stream), "cudaEventRecord", __LINE__);
    for (int r = 0; r < reps && st.ok(); ++r)
      for (const Launch& l : groups[k])
        if (st.ok()) st = l();
    if (st.ok()) st = checked(cudaEventRecord(e1, ctx_.stream), "cudaEventRecord", __LINE__);
    if (st.ok()) st = elapsed(&ms);
    rows[k].ms = ms / reps;
    for (size_t j = 0; j < groups[k].size() && groups[k].size() > 1 && st.ok(); ++j) {  // each launch alone
      st = checked(cudaEventRecord(e0, ctx_.stream), "cudaEventRecord", __LINE__);
      for (int r = 0; r < reps && st.ok(); ++r) st = groups[k][j]();
      if (st.ok()) st = checked(cudaEventRecord(e1, ctx_.stream), "cudaEventRecord", __LINE__);
      if (st.ok()) st = elapsed(&ms);
      rows[k].launch_ms.push_back(ms / reps);
    }
  }
  const Launch one_replay = [&] {
    replay(1);
    return st;
  };
  if (st.ok() && opt.sustain_s > 0) {  // the step under sustained load (see the file comment)
    int64_t runs = 0;
    st = run_for(ctx_.stream, opt.sustain_s, 10, one_replay, &runs, &prof.sustain_s);
    // At least a second of replays (and reps), at most 100000: the queue stays full, as in a training epoch.
    const double per = std::max(prof.graph_ms, 1e-3);
    const int n = static_cast<int>(std::min(100000.0, std::max<double>(reps, std::ceil(1000.0 / per))));
    prof.sustained_ms = timed_replays(n);
    if (st.ok()) prof.sustained_reps = n;
  }
  if (st.ok() && opt.energy_s > 0) {  // the step's and each node's energy (see the file comment)
    Result<const NvmlMeter*> meter = nvml_meter();
    if (!meter.ok()) st = meter.errors();
    if (st.ok())
      st = energy_per_run(*meter.value(), ctx_.stream, opt.energy_settle_s, opt.energy_s, 10, one_replay,
                          &prof.step_mj, &prof.step_w);
    for (size_t k = 0; k < groups.size() && st.ok(); ++k) {
      if (groups[k].empty()) continue;
      const Launch node = [&groups, k] {
        for (const Launch& l : groups[k])
          if (Status s = l(); !s.ok()) return s;
        return ok_status();
      };
      // chunks of ~20 ms of device time, so the host's waits between chunks stay a small part of the interval
      const int chunk = static_cast<int>(std::clamp(std::ceil(20.0 / std::max(rows[k].ms, 1e-3)), 1.0, 10000.0));
      st = energy_per_run(*meter.value(), ctx_.stream, opt.energy_settle_s, opt.energy_s, chunk, node, &rows[k].mj,
                          &rows[k].w);
    }
    if (st.ok()) prof.energy_s = opt.energy_s, prof.energy_settle_s = opt.energy_settle_s;
  }
  TRCTL_CUDA_WARN(cudaEventDestroy(e0));
  TRCTL_CUDA_WARN(cudaEventDestroy(e1));
  if (!st.ok()) return st.errors();
  prof.nodes = std::move(rows);
  return prof;
}

Result<const NvmlMeter*> CudaBackend::nvml_meter() {
  if (!nvml_.lib && !nvml_failed_) {
    char bus[32] = {};
    Status st = checked(cudaDeviceGetPCIBusId(bus, sizeof bus, ctx_.device), "cudaDeviceGetPCIBusId", __LINE__);
    Result<NvmlMeter> m = st.ok() ? nvml_meter_open(bus) : Result<NvmlMeter>(st.errors());
    if (m.ok()) nvml_ = m.value();
    else nvml_failed_ = m.errors();
  }
  if (nvml_failed_) return *nvml_failed_;
  return &nvml_;
}

Result<double> CudaBackend::energy_mj() {
  Result<const NvmlMeter*> m = nvml_meter();
  if (!m.ok()) return m.errors();
  Result<uint64_t> e = nvml_energy_mj(*m.value());
  if (!e.ok()) return e.errors();
  return static_cast<double>(e.value());
}

}  // namespace trctl::cuda_detail
