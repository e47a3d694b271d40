// Measured cuDNN convolution algorithms and their cache file (see conv_autotune.h).
#include "runtime/cuda/conv_autotune.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "core/ckpt/atomic_file.h"
#include "dataio/image_ops.h"
#include "runtime/backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cudnn_fused_conv.h"
#include "runtime/ops/conv2d/conv_route.h"
#include "runtime/ops/conv2d/dgrad_fwd.h"

namespace trctl {
namespace {

constexpr const char* kHeader = "# trctl conv autotune v2";
constexpr const char* kHeaderV1 = "# trctl conv autotune v1";  // legacy entries only: read as they are
constexpr const char* kHeaderPrefix = "# trctl conv autotune ";

std::string sanitize_gpu_name(const std::string& name) {
  std::string s = name.empty() ? "unknown" : name;
  for (char& ch : s) {
    const bool keep = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                      ch == '.' || ch == '-';
    if (!keep) ch = '_';
  }
  return s;
}

// ---- parsing one cache line -------------------------------------------------------------------------------------

std::vector<std::string> split_spaces(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == ' ') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

// "name=value" with exactly this name.
bool field(const std::string& tok, const char* name, std::string* value) {
  const std::string prefix = std::string(name) + "=";
  if (tok.compare(0, prefix.size(), prefix) != 0) return false;
  *value = tok.substr(prefix.size());
  return true;
}

// Unsigned decimal, at most 18 digits (no sign, no spaces).
bool parse_u64(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + (ch - '0');
  }
  *out = v;
  return true;
}

bool parse_pair(const std::string& s, int64_t* a, int64_t* b) {
  const size_t x = s.find('x');
  return x != std::string::npos && parse_u64(s.substr(0, x), a) && parse_u64(s.substr(x + 1), b);
}

bool parse_int(const std::string& s, int* out) {
  int64_t v = 0;
  if (!parse_u64(s, &v) || v > 1000000000) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_dir(const std::string& s, ConvDir* dir) {
  for (ConvDir d : kConvDirs)
    if (s == conv_dir_name(d)) return *dir = d, true;
  return false;
}

bool parse_dtype(const std::string& s, GpuDType* t) {
  for (GpuDType d : {GpuDType::F32, GpuDType::F16, GpuDType::BF16})
    if (s == gpu_dtype_name(d)) return *t = d, true;
  return false;
}

bool parse_flag(const std::string& s, bool* b) {
  if (s != "0" && s != "1") return false;
  *b = s == "1";
  return true;
}

// The key's fields, in the order autotune_key writes them. Sets *why and returns false on the first bad field.
bool parse_key(const std::string& key, AutotuneDevice* dev, ConvDir* dir, ConvDesc* d, std::string* why) {
  static const char* const names[] = {"gpu", "cudnn", "cc", "dir", "io", "tf32", "det", "n", "h",
                                      "w", "c", "k", "r", "s", "stride", "pad", "dil", "groups"};
  const std::vector<std::string> tok = split_spaces(key);
  constexpr size_t kFields = sizeof(names) / sizeof(names[0]);
  if (tok.size() != kFields) {
    *why = "key has " + std::to_string(tok.size()) + " fields, expected " + std::to_string(kFields);
    return false;
  }
  Conv2dGeom& g = d->g;
  int64_t* const dims[] = {&g.n, &g.h, &g.w, &g.c, &g.k, &g.r, &g.s};
  for (size_t i = 0; i < kFields; ++i) {
    std::string v;
    bool ok = field(tok[i], names[i], &v);
    if (ok) {
      switch (i) {
        case 0: ok = !v.empty() && sanitize_gpu_name(v) == v, dev->gpu = v; break;
        case 1: ok = parse_int(v, &dev->cudnn_version); break;
        case 2: {
          const size_t dot = v.find('.');
          ok = dot != std::string::npos && parse_int(v.substr(0, dot), &dev->cc_major) &&
               parse_int(v.substr(dot + 1), &dev->cc_minor);
          break;
        }
        case 3: ok = parse_dir(v, dir); break;
        case 4: ok = parse_dtype(v, &d->io); break;
        case 5: ok = parse_flag(v, &d->tf32); break;
        case 6: ok = parse_flag(v, &d->deterministic); break;
        case 14: ok = parse_pair(v, &g.stride_h, &g.stride_w); break;
        case 15: ok = parse_pair(v, &g.pad_h, &g.pad_w); break;
        case 16: ok = parse_pair(v, &g.dil_h, &g.dil_w); break;
        case 17: ok = parse_u64(v, &g.groups); break;
        default: ok = parse_u64(v, dims[i - 7]); break;
      }
    }
    if (!ok) {
      *why = "field " + std::to_string(i + 1) + " '" + tok[i] + "' is not a valid " + names[i] + "=...";
      return false;
    }
  }
  Conv2dGeom finished = g;
  std::string geom_why;
  if (!conv2d_geom_finish(finished, &geom_why)) {
    *why = "invalid geometry: " + geom_why;
    return false;
  }
  return true;
}

bool parse_value(const std::string& value, ConvDir dir, bool allow_engine, ConvAlgoChoice* c, std::string* why) {
  const std::vector<std::string> tok = split_spaces(value);
  std::string v[4];
  if (allow_engine && tok.size() == 3 && field(tok[0], "engine", &v[0]) && field(tok[1], "ws", &v[2]) &&
      field(tok[2], "ms", &v[3])) {
    if (!cudnn_engine_id_parse(v[0], &c->engine)) {
      *why = "engine=" + v[0] + " is not an engine config (ENGINE or ENGINE:KNOB=VALUE,...)";
      return false;
    }
  } else if (tok.size() != 4 || !field(tok[0], "algo", &v[0]) || !field(tok[1], "math", &v[1]) ||
             !field(tok[2], "ws", &v[2]) || !field(tok[3], "ms", &v[3])) {
    *why = allow_engine ? "value is not 'algo=A math=M ws=BYTES ms=T' or 'engine=E[:K=V,...] ws=BYTES ms=T'"
                        : "value is not 'algo=A math=M ws=BYTES ms=T'";
    return false;
  }
  int64_t ws = 0;
  const bool legacy = c->engine.engine < 0;  // a graph-API config has no algorithm id or math type
  if (legacy && (!parse_int(v[0], &c->algo) || c->algo >= cudnn_conv_algo_count(dir))) {
    *why = "algo=" + v[0] + " is not a " + conv_dir_name(dir) + " algorithm id (0.." +
           std::to_string(cudnn_conv_algo_count(dir) - 1) + ")";
    return false;
  }
  if (legacy && (!parse_int(v[1], &c->math) || c->math > static_cast<int>(CUDNN_FMA_MATH))) {
    *why = "math=" + v[1] + " is not a cudnnMathType_t (0..3)";
    return false;
  }
  if (!parse_u64(v[2], &ws)) {
    *why = "ws=" + v[2] + " is not a byte count";
    return false;
  }
  c->workspace = static_cast<size_t>(ws);
  char* end = nullptr;
  errno = 0;
  const double ms = std::strtod(v[3].c_str(), &end);
  if (v[3].empty() || *end != '\0' || errno != 0 || !std::isfinite(ms) || ms < 0) {
    *why = "ms=" + v[3] + " is not a non-negative time";
    return false;
  }
  c->ms = static_cast<float>(ms);
  return true;
}

// ---- measuring ----------------------------------------------------------------------------------------------------

// Device allocations freed on scope exit (also on early error returns).
struct Scratch {
  std::vector<void*> ptrs;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    for (void* p : ptrs) TRCTL_CUDA_WARN(cudaFree(p));
  }
  Status alloc(size_t bytes, void** out) {
    TRCTL_CUDA_TRY(cudaMalloc(out, bytes));
    ptrs.push_back(*out);
    return ok_status();
  }
};

// The fastest measured variant of `algo` (any math type), or a negative time when none succeeded.
template <class Perf>
float measured_ms(const std::vector<Perf>& r, int n, int algo) {
  for (int i = 0; i < n; ++i)
    if (static_cast<int>(r[i].algo) == algo && r[i].status == CUDNN_STATUS_SUCCESS) return r[i].time;
  return -1.0f;
}

std::string ms_str(float ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f ms", static_cast<double>(ms));
  return ms < 0 ? std::string("not measured") : std::string(buf);
}

// One direction: cuDNN's measurements (find(results, &n), fastest first) filtered by cudnn_conv_choose, recorded.
template <class Perf, class Find>
Status measure_dir(cudnnHandle_t h, CudnnConvPlan& p, ConvDir dir, int max_count, const Find& find, size_t ws_bytes,
                   const AutotuneDevice& dev, const ConvDirPlan& heuristic, AutotuneCache& cache, std::string* report) {
  std::vector<Perf> r(static_cast<size_t>(max_count));
  int n = 0;
  const cudnnConvolutionDescriptor_t conv = dir == ConvDir::Fwd ? p.conv_fwd : dir == ConvDir::Dgrad ? p.conv_dgrad
                                                                                                    : p.conv_wgrad;
  // The heuristic plan set the chosen math type; measure with the one the heuristics are asked with.
  TRCTL_CUDNN_TRY(cudnnSetConvolutionMathType(conv, cudnn_conv_requested_math(p.desc)));
  TRCTL_CUDNN_TRY(find(r.data(), &n));
  TRCTL_CUDA_TRY(cudaDeviceSynchronize());
  Result<int> k = cudnn_conv_choose(h, p, r.data(), n, ws_bytes, "measured");
  if (!k.ok()) return k.errors();
  const ConvDirPlan chosen = cudnn_conv_plan_dir(p, dir);
  const float ms = r[static_cast<size_t>(k.value())].time;
  cache.entries[autotune_key(dev, dir, p.desc)] =
      ConvAlgoChoice{chosen.algo, static_cast<int>(chosen.math), chosen.ws, ms, {}};
  if (report) {
    *report += std::string(conv_dir_name(dir)) + " " + gpu_dtype_name(p.desc.io) + (p.desc.tf32 ? " tf32" : "") +
               (p.desc.deterministic ? " deterministic " : " ") + conv2d_geom_str(p.desc.g) + ": " +
               cudnn_conv_algo_name(dir, chosen.algo) + " (" + cudnn_math_name(chosen.math) + ", ws " +
               std::to_string(chosen.ws) + " B) " + ms_str(ms) + "; heuristic " +
               cudnn_conv_algo_name(dir, heuristic.algo) + " " + ms_str(measured_ms(r, n, heuristic.algo)) + "\n";
  }
  return ok_status();
}

// Mean milliseconds of n runs of f on the legacy stream (events around the runs).
template <class F>
Result<float> time_n(const F& f, int n) {
  cudaEvent_t a = nullptr, b = nullptr;
  TRCTL_CUDA_TRY(cudaEventCreate(&a));
  if (cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
    TRCTL_CUDA_WARN(cudaEventDestroy(a));
    TRCTL_CUDA_TRY(e);
  }
  Status st = ok_status();
  float ms = 0;
  if (cudaEventRecord(a, nullptr) != cudaSuccess) st = Error{ErrCode::Internal, "autotune", "cudaEventRecord failed"};
  for (int i = 0; st.ok() && i < n; ++i) st = f();
  if (st.ok() && (cudaEventRecord(b, nullptr) != cudaSuccess || cudaEventSynchronize(b) != cudaSuccess ||
                  cudaEventElapsedTime(&ms, a, b) != cudaSuccess))
    st = Error{ErrCode::Internal, "autotune", "timing events failed"};
  TRCTL_CUDA_WARN(cudaEventDestroy(a));
  TRCTL_CUDA_WARN(cudaEventDestroy(b));
  if (!st) return st.errors();
  return ms / n;
}

// Mean milliseconds of kAutotuneReps runs of f after one warm-up run. With cutoff_ms > 0, a first timed run slower
// than that ends the measurement: its time is returned (a candidate that slow cannot win; the FALLBACK engines took
// up to 2 s a run on VGG16-BN's layers, H100 run 57).
template <class F>
Result<float> time_runs(const F& f, float cutoff_ms = 0) {
  if (Status st = f(); !st) return st.errors();
  if (cutoff_ms > 0) {
    Result<float> one = time_n(f, 1);
    if (!one.ok() || one.value() > cutoff_ms) return one;
  }
  return time_n(f, kAutotuneReps);
}

// The pointers one direction reads and writes (conv_graph_run's a, b, out) and out's size in bytes.
struct DirPtrs {
  const void* a;
  const void* b;
  void* out;
  size_t out_bytes;
};

// An f16 or bf16 bit pattern as a float (host side; for comparing two outputs).
float lowp_to_float(uint16_t v, GpuDType t) {
  if (t != GpuDType::BF16) return half_bits_to_float(v);
  const uint32_t bits = static_cast<uint32_t>(v) << 16;  // bf16: the top half of a float
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// max |a - b| / max |b| over two device buffers of n_bytes of type t (infinity when a holds a non-finite value
// that b does not).
Result<double> max_rel_diff(const void* a, const void* b, size_t n_bytes, GpuDType t) {
  std::vector<uint16_t> ha(n_bytes / 2), hb(n_bytes / 2);
  TRCTL_CUDA_TRY(cudaMemcpy(ha.data(), a, n_bytes, cudaMemcpyDeviceToHost));
  TRCTL_CUDA_TRY(cudaMemcpy(hb.data(), b, n_bytes, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < ha.size(); ++i) {
    const double x = lowp_to_float(ha[i], t), r = lowp_to_float(hb[i], t);
    if (std::isfinite(r) && !std::isfinite(x)) return INFINITY;
    if (!std::isfinite(r)) continue;
    num = std::max(num, std::fabs(x - r));
    den = std::max(den, std::fabs(r));
  }
  return den > 0 ? num / den : num;
}

// The median of three timings of f (time_runs each).
template <class F>
Result<float> median3(const F& f) {
  float t[3];
  for (float& x : t) {
    Result<float> r = time_runs(f);
    if (!r.ok()) return r.errors();
    x = r.value();
  }
  std::sort(t, t + 3);
  return t[1];
}

// One direction's graph-API engine configs timed against the legacy winner p runs now (same buffers, same
// stream): each config once (its variant pack built outside the timed runs, as the captured step holds it), then
// the fastest config and the legacy winner re-timed alternately (median of three each); a config faster by more
// than kAutotuneMargin whose output matches the legacy winner's (max |diff| / max |ref| < 1e-2, f16/bf16 with fp32
// accumulation in both) replaces the cache entry measure_dir wrote.
Status measure_engines(cudnnHandle_t h, const CudnnConvPlan& p, ConvDir dir, const DirPtrs& io, void* ws,
                       size_t ws_bytes, const AutotuneDevice& dev, AutotuneCache& cache, std::string* report) {
  ConvGraphDesc gd = conv_graph_desc(p.desc, dir, ws_bytes);
  // Runtime-compiled engines compile (NVRTC) whenever a plan is built — here and at every run's start: skipped.
  gd.plan.allow_runtime_compiled = false;
  const std::string tag = std::string("  ") + conv_dir_name(dir) + " graph-API configs: ";
  // Heuristics A and B only: FALLBACK's generic engines ran 40-1000x slower than the legacy winner (run 57).
  Result<std::vector<CudnnEngineId>> ids = conv_graph_candidates(h, gd, nullptr, kAutotuneMaxPerHeuristic, false);
  if (!ids.ok()) {  // no graph-API path for this geometry: the legacy entry stands
    if (report) *report += tag + "none (" + ids.errors()[0].message.substr(0, 200) + ")\n";
    return ok_status();
  }
  auto legacy_run = [&]() -> Status {
    switch (dir) {
      case ConvDir::Fwd: return cudnn_conv_fwd(h, nullptr, p, io.a, io.b, nullptr, io.out, ws, ws_bytes);
      case ConvDir::Dgrad: return cudnn_conv_dgrad(h, nullptr, p, io.a, io.b, io.out, ws, ws_bytes);
      case ConvDir::Wgrad: break;
    }
    return cudnn_conv_wgrad(h, nullptr, p, io.a, io.b, io.out, ws, ws_bytes);
  };
  struct Timed {
    CudnnExecPlan plan;
    CudnnBackendDesc pack;
    float ms = 0;
  };
  std::unique_ptr<Timed> best;
  int timed = 0, refused = 0;
  // A candidate whose first run is 1.5x the legacy winner's time stops there.
  Result<float> legacy_first = time_runs(legacy_run);
  if (!legacy_first.ok()) return legacy_first.errors();
  const float cutoff = 1.5f * legacy_first.value();
  std::string first_refusal;
  for (const CudnnEngineId& id : ids.value()) {
    gd.plan.pin = &id;
    Result<CudnnExecPlan> plan = conv_graph_plan(h, gd);
    Result<CudnnBackendDesc> pack =
        plan.ok() ? conv_graph_pack(plan.value(), dir, io.a, io.b, io.out, ws, ws_bytes) : plan.errors();
    Result<float> ms =
        pack.ok() ? time_runs([&] { return cudnn_plan_execute(h, nullptr, plan.value(), pack.value()); }, cutoff)
                  : pack.errors();
    if (!ms.ok()) {
      (void)cudaGetLastError();  // a launch error of this config alone is not sticky; a failed context is:
      if (cudaDeviceSynchronize() != cudaSuccess) return ms.errors();
      if (first_refusal.empty()) first_refusal = cudnn_engine_id_str(id) + ": " + ms.errors()[0].message.substr(0, 160);
      ++refused;
      continue;
    }
    ++timed;
    if (!best || ms.value() < best->ms)
      best = std::make_unique<Timed>(Timed{std::move(plan.value()), std::move(pack.value()), ms.value()});
  }
  std::string verdict = "legacy kept";
  float legacy_ms = -1, best_ms = -1;
  if (best) {
    auto best_run = [&] { return cudnn_plan_execute(h, nullptr, best->plan, best->pack); };
    Result<float> l = median3(legacy_run), b = median3(best_run);
    if (!l.ok()) return l.errors();
    if (!b.ok()) return b.errors();
    legacy_ms = l.value(), best_ms = b.value();
    if (best_ms < legacy_ms * (1.0 - kAutotuneMargin)) {
      // Same output as the legacy winner: legacy into a scratch copy, then the config into io.out.
      void* ref = nullptr;
      TRCTL_CUDA_TRY(cudaMalloc(&ref, io.out_bytes));
      Status st = legacy_run();
      if (st.ok() && cudaDeviceSynchronize() != cudaSuccess) st = Error{ErrCode::Internal, "autotune", "sync failed"};
      if (st.ok() && cudaMemcpy(ref, io.out, io.out_bytes, cudaMemcpyDeviceToDevice) != cudaSuccess)
        st = Error{ErrCode::Internal, "autotune", "copy failed"};
      if (st.ok()) st = best_run();
      if (st.ok() && cudaDeviceSynchronize() != cudaSuccess) st = Error{ErrCode::Internal, "autotune", "sync failed"};
      Result<double> diff = st.ok() ? max_rel_diff(io.out, ref, io.out_bytes, p.desc.io) : Result<double>(st.errors());
      TRCTL_CUDA_WARN(cudaFree(ref));
      if (!diff.ok()) return diff.errors();
      char d[48];
      std::snprintf(d, sizeof d, "%.1e", diff.value());
      if (diff.value() < 1e-2) {
        cache.entries[autotune_key(dev, dir, p.desc)] =
            ConvAlgoChoice{-1, 0, static_cast<size_t>(best->plan.workspace), best_ms, best->plan.id};
        verdict = std::string("chosen (output vs legacy ") + d + ")";
      } else {
        verdict = std::string("legacy kept: the config's output differs (") + d + ")";
      }
    }
  }
  if (report)
    *report += tag + std::to_string(ids->size()) + " distinct, " + std::to_string(timed) + " timed, " +
               std::to_string(refused) + " refused" + (first_refusal.empty() ? "" : " (first: " + first_refusal + ")") +
               "; legacy winner " + ms_str(legacy_ms) + ", best config " +
               (best ? cudnn_engine_id_str(best->plan.id) + " " + ms_str(best_ms) : std::string("none")) + " -> " +
               verdict + "\n";
  return ok_status();
}

Status autotune_one(cudnnHandle_t h, const ConvDesc& d, AutotuneCache& cache, size_t max_ws, bool engines,
                    std::string* report) {
  Result<AutotuneDevice> dev = autotune_device_current();
  if (!dev.ok()) return dev.errors();
  // The heuristic plan: descriptors to measure with, and the heuristic's choices for the report.
  Result<CudnnConvPlan> plan = cudnn_conv_plan(h, d, max_ws);
  if (!plan.ok()) return plan.errors();
  CudnnConvPlan& p = plan.value();
  ConvDirPlan heuristic[3];
  for (ConvDir dir : kConvDirs) heuristic[static_cast<int>(dir)] = cudnn_conv_plan_dir(p, dir);
  const Conv2dGeom& g = p.desc.g;
  const size_t e = gpu_dtype_size(d.io);
  const size_t nx = static_cast<size_t>(g.n * g.h * g.w * g.c) * e;
  const size_t nw = static_cast<size_t>(g.k * g.r * g.s * (g.c / g.groups)) * e;
  const size_t ny = static_cast<size_t>(g.n * g.p * g.q * g.k) * e;
  Scratch s;
  void *x = nullptr, *w = nullptr, *y = nullptr, *dx = nullptr, *dw = nullptr, *ws = nullptr;
  for (auto [bytes, ptr] : {std::pair{nx, &x}, {nw, &w}, {ny, &y}, {nx, &dx}, {nw, &dw}})
    if (Status st = s.alloc(bytes, ptr); !st) return st;
  size_t ws_bytes = max_ws;  // halved while the device cannot hold it; candidates needing more are rejected
  while (ws_bytes > 0 && cudaMalloc(&ws, ws_bytes) != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) allocation error
    ws = nullptr;
    ws_bytes /= 2;
  }
  if (ws) s.ptrs.push_back(ws);
  // Every byte 0x2C: f16 0.065; 0x3C: f32 0.0115, bf16 0.0115. Finite, and small enough that f16 sums over a
  // large batch stay finite. cudaMemset runs on the legacy stream: synchronize before cuDNN's stream uses them.
  const int pattern = d.io == GpuDType::F16 ? 0x2C : 0x3C;
  auto fill_inputs = [&]() -> Status {
    for (auto [ptr, bytes] : {std::pair{x, nx}, {w, nw}, {y, ny}}) TRCTL_CUDA_TRY(cudaMemset(ptr, pattern, bytes));
    TRCTL_CUDA_TRY(cudaDeviceSynchronize());
    return ok_status();
  };
  int count[3] = {0, 0, 0};
  TRCTL_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count[0]));
  TRCTL_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count[1]));
  TRCTL_CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count[2]));
  if (Status st = fill_inputs(); !st) return st;
  Status st = measure_dir<cudnnConvolutionFwdAlgoPerf_t>(
      h, p, ConvDir::Fwd, count[0],
      [&](cudnnConvolutionFwdAlgoPerf_t* r, int* n) {
        return cudnnFindConvolutionForwardAlgorithmEx(h, p.x, x, p.w, w, p.conv_fwd, p.y, y, count[0], n, r, ws,
                                                      ws_bytes);
      },
      ws_bytes, dev.value(), heuristic[0], cache, report);
  if (!st) return st;
  // The graph-API configs next to each legacy winner (f16/bf16, groups 1: what graph (p) plans).
  const bool graph_api = engines && d.io != GpuDType::F32 && d.g.groups == 1;
  if (graph_api) st = measure_engines(h, p, ConvDir::Fwd, {x, w, y, ny}, ws, ws_bytes, dev.value(), cache, report);
  if (!st) return st;
  if (st = fill_inputs(); !st) return st;  // y (dy below) was overwritten by the forward search
  st = measure_dir<cudnnConvolutionBwdDataAlgoPerf_t>(
      h, p, ConvDir::Dgrad, count[1],
      [&](cudnnConvolutionBwdDataAlgoPerf_t* r, int* n) {
        return cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w, w, p.y, y, p.conv_dgrad, p.x, dx, count[1], n, r,
                                                           ws, ws_bytes);
      },
      ws_bytes, dev.value(), heuristic[1], cache, report);
  if (!st) return st;
  if (graph_api) st = measure_engines(h, p, ConvDir::Dgrad, {y, w, dx, nx}, ws, ws_bytes, dev.value(), cache, report);
  if (!st) return st;
  st = measure_dir<cudnnConvolutionBwdFilterAlgoPerf_t>(
      h, p, ConvDir::Wgrad, count[2],
      [&](cudnnConvolutionBwdFilterAlgoPerf_t* r, int* n) {
        return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p.x, x, p.y, y, p.conv_wgrad, p.w, dw, count[2], n,
                                                             r, ws, ws_bytes);
      },
      ws_bytes, dev.value(), heuristic[2], cache, report);
  if (!st) return st;
  if (graph_api) st = measure_engines(h, p, ConvDir::Wgrad, {y, x, dw, nw}, ws, ws_bytes, dev.value(), cache, report);
  return st;
}

}  // namespace

Result<AutotuneDevice> autotune_device_current() {
  int device = 0;
  TRCTL_CUDA_TRY(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  TRCTL_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  AutotuneDevice dev;
  dev.gpu = sanitize_gpu_name(prop.name);
  dev.cudnn_version = static_cast<int>(cudnnGetVersion());
  dev.cc_major = prop.major;
  dev.cc_minor = prop.minor;
  return dev;
}

std::string autotune_key(const AutotuneDevice& dev, ConvDir dir, const ConvDesc& d) {
  const Conv2dGeom& g = d.g;
  auto pair = [](int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); };
  std::ostringstream k;
  k << "gpu=" << dev.gpu << " cudnn=" << dev.cudnn_version << " cc=" << dev.cc_major << "." << dev.cc_minor
    << " dir=" << conv_dir_name(dir) << " io=" << gpu_dtype_name(d.io) << " tf32=" << (d.tf32 ? 1 : 0)
    << " det=" << (d.deterministic ? 1 : 0) << " n=" << g.n << " h=" << g.h << " w=" << g.w << " c=" << g.c
    << " k=" << g.k << " r=" << g.r << " s=" << g.s << " stride=" << pair(g.stride_h, g.stride_w)
    << " pad=" << pair(g.pad_h, g.pad_w) << " dil=" << pair(g.dil_h, g.dil_w) << " groups=" << g.groups;
  return k.str();
}

std::string autotune_cache_path() {
  if (const char* env = std::getenv("TRCTL_AUTOTUNE_CACHE"); env && *env) return env;
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/trctl/conv_autotune.txt";
  return "";
}

Result<AutotuneCache> autotune_cache_parse(const std::string& text, const std::string& path) {
  AutotuneCache c;
  std::map<std::string, int> line_of;  // key -> line that defined it (duplicates are errors)
  std::istringstream in(text);
  std::string line;
  int no = 0;
  bool v1 = false;
  auto error = [&](const std::string& message) {
    return Error{ErrCode::Format, path + ":" + std::to_string(no), message};
  };
  while (std::getline(in, line)) {
    ++no;
    if (no == 1) {
      if (line == kHeader) continue;
      if (line == kHeaderV1) {
        v1 = true;
        continue;
      }
      if (line.compare(0, std::string(kHeaderPrefix).size(), kHeaderPrefix) == 0)
        return error("unsupported autotune cache version '" + line + "' (this build reads '" + kHeader +
                     "'); delete the file or re-run trctl bench --autotune");
      return error(std::string("not a trctl autotune cache: the first line must be '") + kHeader + "'");
    }
    if (line.empty() || line[0] == '#') continue;
    const size_t arrow = line.find(" -> ");
    if (arrow == std::string::npos) return error("garbled line (no ' -> '): '" + line + "'");
    const std::string key = line.substr(0, arrow);
    AutotuneDevice dev;
    ConvDir dir = ConvDir::Fwd;
    ConvDesc d;
    std::string why;
    if (!parse_key(key, &dev, &dir, &d, &why)) return error("garbled key: " + why + ": '" + line + "'");
    if (autotune_key(dev, dir, d) != key)
      return error("key not in canonical form: '" + key + "' (expected '" + autotune_key(dev, dir, d) + "')");
    ConvAlgoChoice choice;
    if (!parse_value(line.substr(arrow + 4), dir, !v1, &choice, &why)) return error("garbled value: " + why);
    if (auto [it, fresh] = line_of.emplace(key, no); !fresh)
      return error("duplicate entry (first at line " + std::to_string(it->second) + "): '" + key + "'");
    c.entries.emplace(key, choice);
  }
  if (no == 0) return error(std::string("empty file: the first line must be '") + kHeader + "'");
  return c;
}

Result<AutotuneCache> autotune_cache_load(const std::string& path) {
  if (path.empty()) return AutotuneCache{};
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) return AutotuneCache{};
  Result<std::vector<std::byte>> bytes = file_read_bytes(path);
  if (!bytes.ok()) return bytes.errors();
  const std::vector<std::byte>& b = bytes.value();
  return autotune_cache_parse(std::string(reinterpret_cast<const char*>(b.data()), b.size()), path);
}

std::string autotune_cache_format(const AutotuneCache& c) {
  // Version 1 while every entry is a legacy one (older builds read it), version 2 once a graph-API config is in.
  bool engines = false;
  for (const auto& [key, v] : c.entries) engines = engines || v.engine.engine >= 0;
  std::string s = std::string(engines ? kHeader : kHeaderV1) + "\n";
  for (const auto& [key, v] : c.entries) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.6g", static_cast<double>(v.ms));
    s += key + " -> " +
         (v.engine.engine >= 0 ? "engine=" + cudnn_engine_id_str(v.engine)
                               : "algo=" + std::to_string(v.algo) + " math=" + std::to_string(v.math)) +
         " ws=" + std::to_string(v.workspace) + " ms=" + ms + "\n";
  }
  return s;
}

Status autotune_cache_save(const std::string& path, const AutotuneCache& c) {
  if (path.empty())
    return Error{ErrCode::Invalid, "autotune cache", "no cache path: set TRCTL_AUTOTUNE_CACHE or HOME"};
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) return Error{ErrCode::Io, dir.string(), "cannot create the autotune cache directory: " + ec.message()};
  const std::string text = autotune_cache_format(c);
  std::vector<std::byte> bytes(text.size());
  for (size_t i = 0; i < text.size(); ++i) bytes[i] = static_cast<std::byte>(text[i]);
  return atomic_write_file(path, bytes);
}

Status cudnn_conv_autotune(cudnnHandle_t h, const ConvDesc& d, AutotuneCache& cache, size_t max_workspace,
                           bool engines) {
  return autotune_one(h, d, cache, max_workspace, engines, nullptr);
}

Result<CudnnConvPlan> cudnn_conv_plan_cached(cudnnHandle_t h, const ConvDesc& d, const AutotuneCache& cache,
                                             size_t max_workspace, std::array<bool, 3>* from_cache) {
  std::array<ConvAlgoFixed, 3> fixed;
  if (from_cache) from_cache->fill(false);
  if (!cache.entries.empty()) {  // an empty cache needs no device query: plain heuristics
    Result<AutotuneDevice> dev = autotune_device_current();
    if (!dev.ok()) return dev.errors();
    for (ConvDir dir : kConvDirs) {
      const std::string key = autotune_key(dev.value(), dir, d);
      auto it = cache.entries.find(key);
      if (it == cache.entries.end()) continue;
      ConvAlgoFixed& f = fixed[static_cast<int>(dir)];
      f.algo = it->second.algo;
      f.math = static_cast<cudnnMathType_t>(it->second.math);
      f.engine = it->second.engine;
      f.origin = "autotune cache entry '" + key + "'";
      if (from_cache) (*from_cache)[static_cast<int>(dir)] = true;
    }
  }
  return cudnn_conv_plan_fixed(h, d, fixed, max_workspace);
}

Status conv_autotune_spec(const Compiled& c, const std::string& path, bool engines, std::string* report) {
  Result<AutotuneCache> cache = autotune_cache_load(path);
  if (!cache.ok()) return cache.errors();
  Result<CudaContext> ctx = cuda_context_create(0);
  if (!ctx.ok()) return ctx.errors();
  const Precision prec = c.spec.train.precision;
  ConvDesc d;
  d.io = prec == Precision::Fp16 ? GpuDType::F16 : prec == Precision::Bf16 ? GpuDType::BF16 : GpuDType::F32;
  d.tf32 = prec == Precision::Tf32;
  d.deterministic = c.spec.train.deterministic;
  const ConvRouteOptions route = conv_route_options(c.spec);
  const AutotuneDevice none;
  std::set<std::string> seen;  // geometries already measured
  for (const Program& p : c.graph.programs)
    for (const Node& n : p.nodes) {
      if (!is_conv_op(n.op)) continue;
      const auto [x, w] = conv_operands(n);  // as CudaBackend::plan_cnn takes them
      d.g = conv2d_geom_of(c.graph, n, x, w);
      // What the backend plans for this direction (runtime/ops/conv2d/conv_route.h, CudaBackend::planned_geom):
      // nothing for im2col + GEMM, the few-channel kernel (a data gradient still is measured) or a wgconv data
      // gradient, else the cuDNN plan's geometry (space-to-depth's stride-1 one, or C padded to a multiple of 8
      // under AMP), so its key is found.
      if (const ConvRoute r = conv_route(route, n.op, d.g);
          r == ConvRoute::Im2col || r == ConvRoute::Fewc || r == ConvRoute::Wgconv)
        continue;
      const int64_t real_c = d.g.c;
      d.g = conv_plan_geom(route, n.op, d.g);
      if (seen.insert(autotune_key(none, ConvDir::Fwd, d)).second)
        if (Status st = autotune_one(ctx.value().cudnn, d, cache.value(), size_t{256} << 20, engines, report); !st)
          return st;
      // train.conv_dgrad_fwd: a data gradient's forward over flipped filters, for the backend to compare
      // (runtime/cuda/cuda_lower_dgrad_fwd.cpp; measured for every eligible one, fused pairs' included: the cache
      // does not know the pairs, and for C == K it is the layer's own forward key).
      if (n.op == OpKind::Conv2dGradInput && c.spec.train.conv_dgrad_fwd != ConvDgradFwd::Off && d.g.c == real_c &&
          dgrad_fwd_eligible(d.g)) {
        ConvDesc f = d;
        f.g = dgrad_fwd_geom(d.g);
        if (seen.insert(autotune_key(none, ConvDir::Fwd, f)).second)
          if (Status st = autotune_one(ctx.value().cudnn, f, cache.value(), size_t{256} << 20, engines, report); !st)
            return st;
      }
    }
  if (report)
    *report += std::to_string(seen.size()) + " conv geometries measured on " + cuda_context_describe(ctx.value()) +
               "; cache " + path + " (" + std::to_string(cache.value().entries.size()) + " entries)\n";
  return autotune_cache_save(path, cache.value());
}

}  // namespace trctl
