// cuDNN graph (backend) API helpers: owned descriptors, checked attribute setters, tensors, execution-plan search
// and execution (see cudnn_graph.h).
#include "runtime/cuda/cudnn_graph.h"

#include <algorithm>
#include <charconv>
#include <utility>

namespace trctl {

namespace {

std::string where_of(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

// cuDNN 9 statuses are grouped by thousands: 2xxx bad parameter, 3xxx not supported (sub-codes say why).
ErrCode code_of(cudnnStatus_t st) {
  const int family = static_cast<int>(st) / 1000;
  return family == 3 ? ErrCode::NotSupported : family == 2 ? ErrCode::Invalid : ErrCode::Internal;
}

// cuDNN's messages since they were last read on this thread ("" when there are none; reading clears them), capped
// so that a log of many configs stays readable.
std::string last_error_text() {
  char buf[4096] = {0};
  cudnnGetLastErrorString(buf, sizeof(buf));
  buf[sizeof(buf) - 1] = '\0';
  std::string s = buf;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.size() > 2000) s = s.substr(0, 2000) + " ...";
  return s;
}

// Drops messages left by earlier calls, so that the next failure's text is its own.
void last_error_clear() { (void)last_error_text(); }

// A failure as one log line (for the plan search, which records failures and goes on).
std::string status_text(cudnnStatus_t st) {
  std::string s = cudnnGetErrorString(st);
  const std::string last = last_error_text();
  if (!last.empty()) s += " (" + last + ")";
  return s;
}

const char* dtype_name(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_HALF: return "f16";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    case CUDNN_DATA_FLOAT: return "f32";
    default: break;
  }
  return "other";
}

const char* heur_mode_name(cudnnBackendHeurMode_t m) {
  switch (m) {
    case CUDNN_HEUR_MODE_INSTANT: return "INSTANT";
    case CUDNN_HEUR_MODE_B: return "B";
    case CUDNN_HEUR_MODE_FALLBACK: return "FALLBACK";
    case CUDNN_HEUR_MODE_A: return "A";
    default: break;
  }
  return "?";
}

const char* numerical_note_name(cudnnBackendNumericalNote_t n) {
  switch (n) {
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: return "tensor core";
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: return "down-converts inputs";
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return "reduced-precision reduction";
    case CUDNN_NUMERICAL_NOTE_FFT: return "fft";
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: return "NONDETERMINISTIC";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD: return "winograd";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4: return "winograd 4x4";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6: return "winograd 6x6";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return "winograd 13x13";
    case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP: return "strict NaN propagation";
    default: break;
  }
  return "numerical note ?";
}

const char* behavior_note_name(cudnnBackendBehaviorNote_t n) {
  switch (n) {
    case CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION: return "runtime compilation";
    case CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER: return "int8x32 filter reorder";
    case CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER: return "int8x32 bias reorder";
    case CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API: return "native CUDA graph API";
    case CUDNN_BEHAVIOR_NOTE_CUBLASLT_DEPENDENCY: return "cuBLASLt dependency";
    default: break;
  }
  return "behavior note ?";
}

std::string join_i64(const int64_t* v, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// What one engine config is, read back from cuDNN (best effort: a failed query is recorded, not fatal).
struct CfgInfo {
  CudnnBackendDesc engine;  // CUDNN_BACKEND_ENGINE_DESCRIPTOR filled from the config
  int64_t index = -1;
  CudnnEngineId id;         // index + knob choices (id.engine -1 when either could not be read)
  std::string knobs, notes;
  bool nondeterministic = false, reduced_precision = false, runtime_compiled = false;
};

void read_notes(CfgInfo& info) {
  std::string notes;
  cudnnBackendNumericalNote_t nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t n = 0;
  cudnnStatus_t st = cudnnBackendGetAttribute(info.engine.desc, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                              CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, nn);
  if (st != CUDNN_STATUS_SUCCESS) {
    notes = std::string("numerical notes unknown: ") + status_text(st);
  } else {
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++i) {
      notes += std::string(notes.empty() ? "" : ", ") + numerical_note_name(nn[i]);
      if (nn[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) info.nondeterministic = true;
      if (nn[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) info.reduced_precision = true;
    }
  }
  cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  n = 0;
  st = cudnnBackendGetAttribute(info.engine.desc, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, bn);
  if (st != CUDNN_STATUS_SUCCESS) {
    notes += std::string(notes.empty() ? "" : ", ") + "behaviour notes unknown: " + status_text(st);
  } else {
    for (int64_t i = 0; i < n && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; ++i) {
      notes += std::string(notes.empty() ? "" : ", ") + behavior_note_name(bn[i]);
      if (bn[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) info.runtime_compiled = true;
    }
  }
  info.notes = notes.empty() ? "no notes" : notes;
}

// Fills info.knobs (text) and info.id.knobs; false when some knob choice could not be read (the id is then unusable).
bool read_knobs(const CudnnBackendDesc& cfg, CfgInfo& info) {
  std::vector<CudnnBackendDesc> choices;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    Result<CudnnBackendDesc> k = cudnn_desc_create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob choice");
    if (!k.ok()) {
      info.knobs = "knobs unknown: " + k.errors()[0].message;
      return false;
    }
    raw.push_back(k->desc);
    choices.push_back(std::move(k.value()));
  }
  int64_t n = 0;
  const cudnnStatus_t st = cudnnBackendGetAttribute(cfg.desc, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS, &n,
                                                    raw.data());
  if (st != CUDNN_STATUS_SUCCESS) {
    info.knobs = "knobs unknown: " + status_text(st);
    return false;
  }
  std::string s;
  bool all_read = true;
  for (int64_t i = 0; i < n && i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, got = 0;
    const cudnnStatus_t a =
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got, &type);
    const cudnnStatus_t b =
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &got, &value);
    const bool ok = a == CUDNN_STATUS_SUCCESS && b == CUDNN_STATUS_SUCCESS;
    all_read = all_read && ok;
    if (ok) info.id.knobs.emplace_back(static_cast<int64_t>(type), value);
    s += std::string(s.empty() ? "" : " ") +
         (ok ? "knob " + std::to_string(static_cast<int>(type)) + "=" + std::to_string(value) : std::string("knob ?"));
  }
  info.knobs = s.empty() ? "no knobs" : s;
  return all_read && n <= CUDNN_KNOB_TYPE_COUNTS;  // more: a newer library than these headers, knobs cut off
}

// Reads the engine behind a config: its global index, notes and knob choices.
CfgInfo read_cfg(const CudnnBackendDesc& cfg) {
  CfgInfo info;
  Result<CudnnBackendDesc> e = cudnn_desc_create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine of a config");
  if (!e.ok()) {
    info.notes = "engine unknown: " + e.errors()[0].message;
    return info;
  }
  info.engine = std::move(e.value());
  int64_t n = 0;
  cudnnStatus_t st = cudnnBackendGetAttribute(cfg.desc, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              1, &n, &info.engine.desc);
  if (st != CUDNN_STATUS_SUCCESS) {
    info.notes = "engine unknown: " + status_text(st);
    return info;
  }
  st = cudnnBackendGetAttribute(info.engine.desc, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                &info.index);
  if (st != CUDNN_STATUS_SUCCESS) info.index = -1;
  read_notes(info);
  if (read_knobs(cfg, info) && info.index >= 0)
    info.id.engine = info.index;
  else
    info.id.knobs.clear();  // id.engine stays -1: not a config that can be pinned
  return info;
}

// The plan search's state: the operation graph, the options, what was tried.
struct Search {
  cudnnHandle_t h = nullptr;
  const CudnnBackendDesc* op_graph = nullptr;
  CudnnPlanOptions opt;
  std::string ctx;  // "cudnn graph 'NAME'"
  std::string log;
  int tried = 0;
};

// A search over the finalized operation graph og (which must outlive it).
Search search_of(cudnnHandle_t h, const CudnnBackendDesc& og, const CudnnPlanOptions& opt, const std::string& ctx) {
  Search s;
  s.h = h;
  s.op_graph = &og;
  s.opt = opt;
  s.ctx = ctx;
  return s;
}

// Why the options exclude a config's engine, or nullptr when they do not.
const char* filtered_out(const CudnnPlanOptions& opt, const CfgInfo& info) {
  if (opt.deterministic && info.nondeterministic) return "non-deterministic, deterministic plan asked";
  if (!opt.allow_reduced_precision && info.reduced_precision)
    return "reduced-precision reduction, fp32 accumulation asked";
  if (!opt.allow_runtime_compiled && info.runtime_compiled) return "runtime-compiled engine, not asked for";
  return nullptr;
}

// Tries one engine config: the option filters, then an execution plan. On success fills `out` (and moves the config
// into its keep-alive list) and returns true; otherwise logs why and returns false.
bool try_config(Search& s, CudnnBackendDesc cfg, const std::string& label, CudnnExecPlan& out) {
  ++s.tried;
  CfgInfo info = read_cfg(cfg);
  std::string line = "\n  " + label + ": engine " + std::to_string(info.index) + " [" + info.notes + "] [" +
                     info.knobs + "]: ";
  if (const char* why = filtered_out(s.opt, info)) {
    s.log += line + "rejected (" + why + ")";
    return false;
  }
  Result<CudnnBackendDesc> plan = cudnn_desc_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, s.ctx);
  if (!plan.ok()) {
    s.log += line + plan.errors()[0].message;
    return false;
  }
  cudnnStatus_t st =
      s.opt.device_prop
          ? cudnnBackendSetAttribute(plan->desc, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     1, &s.opt.device_prop->desc)
          : cudnnBackendSetAttribute(plan->desc, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &s.h);
  if (st != CUDNN_STATUS_SUCCESS) {
    s.log += line + "set CUDNN_ATTR_EXECUTION_PLAN_" + (s.opt.device_prop ? "DEVICEPROP: " : "HANDLE: ") +
             status_text(st);
    return false;
  }
  st = cudnnBackendSetAttribute(plan->desc, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &cfg.desc);
  if (st != CUDNN_STATUS_SUCCESS) {
    s.log += line + "set CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG: " + status_text(st);
    return false;
  }
  last_error_clear();
  st = cudnnBackendFinalize(plan->desc);  // runtime-compiled engines compile (NVRTC) here
  if (st != CUDNN_STATUS_SUCCESS) {
    s.log += line + "cudnnBackendFinalize(execution plan): " + status_text(st);
    return false;
  }
  int64_t ws = 0, n = 0;
  st = cudnnBackendGetAttribute(plan->desc, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
  if (st != CUDNN_STATUS_SUCCESS) {
    s.log += line + "get CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE: " + status_text(st);
    return false;
  }
  if (ws < 0 || ws > s.opt.max_workspace) {
    s.log += line + "rejected (workspace " + std::to_string(ws) + " B > " + std::to_string(s.opt.max_workspace) +
             " B)";
    return false;
  }
  s.log += line + "CHOSEN, workspace " + std::to_string(ws) + " B";
  out.plan = std::move(plan.value());
  out.workspace = ws;
  out.engine_index = info.index;
  out.source = label;
  out.knobs = info.knobs;
  out.id = info.id;
  out.notes = info.notes;
  out.nondeterministic = info.nondeterministic;
  out.runtime_compiled = info.runtime_compiled;
  out.keep_alive.push_back(std::move(cfg));
  out.keep_alive.push_back(std::move(info.engine));
  return true;
}

// The configs one heuristic mode proposes, in its order; `heur` gets the heuristic descriptor (which the configs may
// reference). Empty with a log line when the query fails or yields nothing.
std::vector<CudnnBackendDesc> heuristic_configs(Search& s, cudnnBackendHeurMode_t mode, CudnnBackendDesc* heur_out) {
  const std::string name = std::string("heuristic ") + heur_mode_name(mode);
  last_error_clear();
  Result<CudnnBackendDesc> heur = cudnn_desc_create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, s.ctx);
  Status st = heur.ok() ? cudnn_desc_set_desc(*heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *s.op_graph, s.ctx)
                        : Status(heur.errors());
  if (st.ok()) st = cudnn_desc_set(*heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, s.ctx);
  if (st.ok() && s.opt.device_prop)
    st = cudnn_desc_set_desc(*heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, *s.opt.device_prop, s.ctx);
  if (st.ok()) st = cudnn_desc_finalize(*heur, s.ctx + ", " + name);
  if (!st.ok()) {
    s.log += "\n" + name + ": " + st.errors()[0].message;
    return {};
  }
  int64_t count = 0;
  cudnnStatus_t cs = cudnnBackendGetAttribute(heur->desc, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
  if (cs != CUDNN_STATUS_SUCCESS) {
    s.log += "\n" + name + ": result count query: " + status_text(cs);
    return {};
  }
  std::vector<CudnnBackendDesc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    Result<CudnnBackendDesc> c = cudnn_desc_create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, s.ctx);
    if (!c.ok()) {
      s.log += "\n" + name + ": " + c.errors()[0].message;
      return {};
    }
    raw.push_back(c->desc);
    cfgs.push_back(std::move(c.value()));
  }
  int64_t got = 0;
  if (count > 0) {
    cs = cudnnBackendGetAttribute(heur->desc, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                  &got, raw.data());
    if (cs != CUDNN_STATUS_SUCCESS) {
      s.log += "\n" + name + ": results query: " + status_text(cs);
      return {};
    }
  }
  s.log += "\n" + name + ": " + std::to_string(got) + " engine config(s)";
  if (got == 0) {  // why: what cuDNN noted while its heuristic discarded the engines
    const std::string why = last_error_text();
    if (!why.empty()) s.log += " (cuDNN: " + why + ")";
  }
  cfgs.resize(static_cast<size_t>(std::min(got, count)));
  *heur_out = std::move(heur.value());
  return cfgs;
}

// The configs one heuristic mode proposes, tried in its order. True when one was chosen.
bool try_heuristic(Search& s, cudnnBackendHeurMode_t mode, CudnnExecPlan& out) {
  const std::string name = std::string("heuristic ") + heur_mode_name(mode);
  CudnnBackendDesc heur;
  std::vector<CudnnBackendDesc> cfgs = heuristic_configs(s, mode, &heur);
  for (size_t i = 0; i < cfgs.size(); ++i) {
    if (try_config(s, std::move(cfgs[i]), name + " #" + std::to_string(i), out)) {
      out.keep_alive.push_back(std::move(heur));
      return true;
    }
  }
  return false;
}

// An engine of the graph by global index (finalized), or an error line.
Result<CudnnBackendDesc> engine_of(Search& s, int64_t idx) {
  last_error_clear();
  Result<CudnnBackendDesc> eng = cudnn_desc_create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, s.ctx);
  if (!eng.ok()) return eng;
  cudnnStatus_t st = cudnnBackendSetAttribute(eng->desc, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &s.op_graph->desc);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(eng->desc, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &idx);
  if (st == CUDNN_STATUS_SUCCESS && s.opt.device_prop)
    st = cudnnBackendSetAttribute(eng->desc, CUDNN_ATTR_ENGINE_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                  &s.opt.device_prop->desc);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(eng->desc);
  if (st != CUDNN_STATUS_SUCCESS)
    return cudnn_graph_error(st, s.ctx, "engine " + std::to_string(idx) + " for the graph", __FILE__, __LINE__);
  return eng;
}

// Exactly the pinned config: engine `id.engine` with id's knob choices.
bool try_pinned(Search& s, const CudnnEngineId& id, CudnnExecPlan& out) {
  const std::string label = "pinned " + cudnn_engine_id_str(id);
  Result<CudnnBackendDesc> eng = engine_of(s, id.engine);
  if (!eng.ok()) {
    s.log += "\n  " + label + ": " + eng.errors()[0].message;
    return false;
  }
  std::vector<CudnnBackendDesc> knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const auto& [type, value] : id.knobs) {
    Result<CudnnBackendDesc> k = cudnn_desc_create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, s.ctx);
    const auto t = static_cast<cudnnBackendKnobType_t>(type);
    Status st = k.ok() ? cudnn_desc_set(*k, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &t, s.ctx)
                       : Status(k.errors());
    if (st.ok()) st = cudnn_desc_set(*k, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value, s.ctx);
    if (st.ok()) st = cudnn_desc_finalize(*k, s.ctx + ", knob choice");
    if (!st.ok()) {
      s.log += "\n  " + label + ": " + st.errors()[0].message;
      return false;
    }
    raw.push_back(k->desc);
    knobs.push_back(std::move(k.value()));
  }
  Result<CudnnBackendDesc> cfg = cudnn_desc_create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, s.ctx);
  Status st = cfg.ok() ? cudnn_desc_set_desc(*cfg, CUDNN_ATTR_ENGINECFG_ENGINE, *eng, s.ctx) : Status(cfg.errors());
  if (st.ok() && !raw.empty())
    st = cudnn_desc_set(*cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                        static_cast<int64_t>(raw.size()), raw.data(), s.ctx);
  if (st.ok()) st = cudnn_desc_finalize(*cfg, s.ctx + ", " + label);
  if (!st.ok()) {
    s.log += "\n  " + label + ": " + st.errors()[0].message;
    return false;
  }
  if (!try_config(s, std::move(cfg.value()), label, out)) return false;
  out.id = id;  // what was asked for (and measured), whatever order cuDNN reports the knobs back in
  out.keep_alive.push_back(std::move(eng.value()));
  for (auto& k : knobs) out.keep_alive.push_back(std::move(k));
  return true;
}

// Last resort: every engine of the graph with its default knobs.
bool try_engine_scan(Search& s, int64_t engine_count, CudnnExecPlan& out) {
  s.log += "\nengine scan over " + std::to_string(engine_count) + " engine(s):";
  for (int64_t idx = 0; idx < engine_count; ++idx) {
    const std::string label = "engine scan #" + std::to_string(idx);
    Result<CudnnBackendDesc> eng = engine_of(s, idx);
    if (!eng.ok()) {
      s.log += "\n  " + label + ": engine does not support the graph: " + eng.errors()[0].message;
      continue;
    }
    Result<CudnnBackendDesc> cfg = cudnn_desc_create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, s.ctx);
    if (!cfg.ok()) {
      s.log += "\n  " + label + ": " + cfg.errors()[0].message;
      continue;
    }
    cudnnStatus_t st = cudnnBackendSetAttribute(cfg->desc, CUDNN_ATTR_ENGINECFG_ENGINE,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng->desc);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(cfg->desc);
    if (st != CUDNN_STATUS_SUCCESS) {
      s.log += "\n  " + label + ": engine config with default knobs: " + status_text(st);
      continue;
    }
    if (try_config(s, std::move(cfg.value()), label, out)) {
      out.keep_alive.push_back(std::move(eng.value()));
      return true;
    }
  }
  return false;
}

// A handle (or a device description) and at least one operation: what planning a graph needs.
Status graph_args_ok(cudnnHandle_t h, const CudnnPlanOptions& opt, const std::vector<CudnnBackendDesc>& ops,
                     const std::string& ctx) {
  if (!h && !opt.device_prop)
    return Error{ErrCode::Invalid, where_of(__FILE__, __LINE__), ctx + ": null cuDNN handle (and no device_prop)"};
  if (ops.empty()) return Error{ErrCode::Invalid, where_of(__FILE__, __LINE__), ctx + ": no operations"};
  return ok_status();
}

// The finalized operation graph of raw_ops (h names the device, or opt.device_prop); its engine count (-1 when the
// query fails) and a first log line.
Result<CudnnBackendDesc> make_op_graph(cudnnHandle_t h, const std::string& ctx,
                                       const std::vector<cudnnBackendDescriptor_t>& raw_ops,
                                       const CudnnPlanOptions& opt, int64_t* engine_count, std::string* log) {
  const std::string og_ctx = ctx + ", operation graph of " + std::to_string(raw_ops.size()) + " operations";
  Result<CudnnBackendDesc> og = cudnn_desc_create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, og_ctx);
  if (!og.ok()) return og;
  // The handle names the device the graph is planned for; device-less planning names it with device_prop instead.
  Status st = opt.device_prop ? ok_status()
                              : cudnn_desc_set(*og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, og_ctx);
  if (st.ok())
    st = cudnn_desc_set(*og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                        static_cast<int64_t>(raw_ops.size()), raw_ops.data(), og_ctx);
  // A graph no engine family can express fails here already (typically CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN).
  if (st.ok()) st = cudnn_desc_finalize(*og, og_ctx);
  if (!st.ok()) return st.errors();
  int64_t n = 0;
  const cudnnStatus_t cs = cudnnBackendGetAttribute(og->desc, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                                                    CUDNN_TYPE_INT64, 1, &n, engine_count);
  *log = "operation graph: " + (cs == CUDNN_STATUS_SUCCESS ? std::to_string(*engine_count) + " engine(s) (global count)"
                                                           : "engine count query failed: " + status_text(cs));
  if (cs != CUDNN_STATUS_SUCCESS) *engine_count = -1;
  return og;
}

}  // namespace

std::string cudnn_engine_id_str(const CudnnEngineId& id) {
  std::string s = std::to_string(id.engine);
  for (size_t i = 0; i < id.knobs.size(); ++i)
    s += (i ? "," : ":") + std::to_string(id.knobs[i].first) + "=" + std::to_string(id.knobs[i].second);
  return s;
}

bool cudnn_engine_id_parse(const std::string& s, CudnnEngineId* out) {
  // Decimal int64 (the whole range, overflow refused); the engine and knob types non-negative, knob values may be
  // negative (-1 is a common "auto"). from_chars takes no '+' and no spaces; the canonical check below rejects
  // leading zeros and "-0".
  auto num = [](const std::string& t, bool allow_minus, int64_t* v) {
    if (t.empty() || (!allow_minus && t[0] == '-')) return false;
    const char* end = t.data() + t.size();
    const std::from_chars_result r = std::from_chars(t.data(), end, *v);
    return r.ec == std::errc() && r.ptr == end;
  };
  CudnnEngineId id;
  const size_t colon = s.find(':');
  if (!num(s.substr(0, colon), false, &id.engine)) return false;
  if (colon != std::string::npos) {
    const std::string rest = s.substr(colon + 1);
    size_t start = 0;
    while (true) {
      const size_t comma = rest.find(',', start);
      const std::string kv = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const size_t eq = kv.find('=');
      int64_t k = 0, v = 0;
      if (eq == std::string::npos || !num(kv.substr(0, eq), false, &k) || !num(kv.substr(eq + 1), true, &v))
        return false;
      id.knobs.emplace_back(k, v);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (cudnn_engine_id_str(id) != s) return false;  // canonical form only (no "+1", no leading zeros)
  *out = std::move(id);
  return true;
}

CudnnBackendDesc& CudnnBackendDesc::operator=(CudnnBackendDesc&& o) noexcept {
  if (this != &o) {
    if (desc) cudnnBackendDestroyDescriptor(desc);  // a failure here cannot be acted on (destructor path)
    desc = std::exchange(o.desc, nullptr);
    type = o.type;
  }
  return *this;
}

CudnnBackendDesc::~CudnnBackendDesc() {
  if (desc) cudnnBackendDestroyDescriptor(desc);
}

const char* cudnn_attr_name(cudnnBackendAttributeName_t a) {
  switch (a) {
    case CUDNN_ATTR_POINTWISE_MODE: return "CUDNN_ATTR_POINTWISE_MODE";
    case CUDNN_ATTR_POINTWISE_MATH_PREC: return "CUDNN_ATTR_POINTWISE_MATH_PREC";
    case CUDNN_ATTR_CONVOLUTION_COMP_TYPE: return "CUDNN_ATTR_CONVOLUTION_COMP_TYPE";
    case CUDNN_ATTR_CONVOLUTION_CONV_MODE: return "CUDNN_ATTR_CONVOLUTION_CONV_MODE";
    case CUDNN_ATTR_CONVOLUTION_DILATIONS: return "CUDNN_ATTR_CONVOLUTION_DILATIONS";
    case CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES: return "CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES";
    case CUDNN_ATTR_CONVOLUTION_POST_PADDINGS: return "CUDNN_ATTR_CONVOLUTION_POST_PADDINGS";
    case CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS: return "CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS";
    case CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS: return "CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS";
    case CUDNN_ATTR_ENGINEHEUR_MODE: return "CUDNN_ATTR_ENGINEHEUR_MODE";
    case CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH: return "CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH";
    case CUDNN_ATTR_ENGINEHEUR_RESULTS: return "CUDNN_ATTR_ENGINEHEUR_RESULTS";
    case CUDNN_ATTR_ENGINECFG_ENGINE: return "CUDNN_ATTR_ENGINECFG_ENGINE";
    case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES: return "CUDNN_ATTR_ENGINECFG_KNOB_CHOICES";
    case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG: return "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG";
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE: return "CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE";
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA: return "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA";
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA: return "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA";
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC:
      return "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC";
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W: return "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W";
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X: return "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X";
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y: return "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y";
    case CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR: return "CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR";
    case CUDNN_ATTR_OPERATION_POINTWISE_XDESC: return "CUDNN_ATTR_OPERATION_POINTWISE_XDESC";
    case CUDNN_ATTR_OPERATION_POINTWISE_BDESC: return "CUDNN_ATTR_OPERATION_POINTWISE_BDESC";
    case CUDNN_ATTR_OPERATION_POINTWISE_YDESC: return "CUDNN_ATTR_OPERATION_POINTWISE_YDESC";
    case CUDNN_ATTR_OPERATION_GENSTATS_MODE: return "CUDNN_ATTR_OPERATION_GENSTATS_MODE";
    case CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC: return "CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC";
    case CUDNN_ATTR_OPERATION_GENSTATS_XDESC: return "CUDNN_ATTR_OPERATION_GENSTATS_XDESC";
    case CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC: return "CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC";
    case CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC: return "CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC";
    case CUDNN_ATTR_OPERATIONGRAPH_HANDLE: return "CUDNN_ATTR_OPERATIONGRAPH_HANDLE";
    case CUDNN_ATTR_OPERATIONGRAPH_OPS: return "CUDNN_ATTR_OPERATIONGRAPH_OPS";
    case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT: return "CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT";
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT: return "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT";
    case CUDNN_ATTR_TENSOR_DATA_TYPE: return "CUDNN_ATTR_TENSOR_DATA_TYPE";
    case CUDNN_ATTR_TENSOR_DIMENSIONS: return "CUDNN_ATTR_TENSOR_DIMENSIONS";
    case CUDNN_ATTR_TENSOR_STRIDES: return "CUDNN_ATTR_TENSOR_STRIDES";
    case CUDNN_ATTR_TENSOR_UNIQUE_ID: return "CUDNN_ATTR_TENSOR_UNIQUE_ID";
    case CUDNN_ATTR_TENSOR_IS_VIRTUAL: return "CUDNN_ATTR_TENSOR_IS_VIRTUAL";
    case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS: return "CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS";
    case CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS: return "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS";
    case CUDNN_ATTR_VARIANT_PACK_WORKSPACE: return "CUDNN_ATTR_VARIANT_PACK_WORKSPACE";
    case CUDNN_ATTR_ENGINE_OPERATION_GRAPH: return "CUDNN_ATTR_ENGINE_OPERATION_GRAPH";
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX: return "CUDNN_ATTR_ENGINE_GLOBAL_INDEX";
    case CUDNN_ATTR_ENGINEHEUR_DEVICEPROP: return "CUDNN_ATTR_ENGINEHEUR_DEVICEPROP";
    case CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION: return "CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION";
    default: break;
  }
  return "attribute #?";
}

const char* cudnn_desc_type_name(cudnnBackendDescriptorType_t t) {
  switch (t) {
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: return "CUDNN_BACKEND_POINTWISE_DESCRIPTOR";
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: return "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR";
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: return "CUDNN_BACKEND_ENGINE_DESCRIPTOR";
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: return "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR";
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: return "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR";
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: return "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR";
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR: return "CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
      return "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: return "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR: return "CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR";
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR";
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return "CUDNN_BACKEND_TENSOR_DESCRIPTOR";
    case CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR: return "CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR";
    default: break;
  }
  return "descriptor type #?";
}

Error cudnn_graph_error(cudnnStatus_t st, const std::string& context, const std::string& call, const char* file,
                        int line) {
  return Error{code_of(st), where_of(file, line), context + ": " + call + ": " + status_text(st)};
}

Result<CudnnBackendDesc> cudnn_desc_create(cudnnBackendDescriptorType_t type, const std::string& context) {
  CudnnBackendDesc d;
  d.type = type;
  const cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d.desc);
  if (st != CUDNN_STATUS_SUCCESS) {
    d.desc = nullptr;
    return cudnn_graph_error(st, context,
                             std::string("cudnnBackendCreateDescriptor(") + cudnn_desc_type_name(type) + ")",
                             __FILE__, __LINE__);
  }
  return Result<CudnnBackendDesc>(std::move(d));
}

Status cudnn_desc_set(const CudnnBackendDesc& d, cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
                      int64_t count, const void* values, const std::string& context) {
  last_error_clear();
  const cudnnStatus_t st = cudnnBackendSetAttribute(d.desc, attr, type, count, values);
  if (st != CUDNN_STATUS_SUCCESS)
    return cudnn_graph_error(st, context,
                             std::string("cudnnBackendSetAttribute(") + cudnn_desc_type_name(d.type) + ", " +
                                 cudnn_attr_name(attr) + " #" + std::to_string(static_cast<int>(attr)) + ")",
                             __FILE__, __LINE__);
  return ok_status();
}

Status cudnn_desc_set_i64(const CudnnBackendDesc& d, cudnnBackendAttributeName_t attr,
                          const std::vector<int64_t>& values, const std::string& context) {
  return cudnn_desc_set(d, attr, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data(), context);
}

Status cudnn_desc_set_desc(const CudnnBackendDesc& d, cudnnBackendAttributeName_t attr, const CudnnBackendDesc& value,
                           const std::string& context) {
  return cudnn_desc_set(d, attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value.desc, context);
}

Status cudnn_desc_finalize(const CudnnBackendDesc& d, const std::string& context) {
  last_error_clear();
  const cudnnStatus_t st = cudnnBackendFinalize(d.desc);
  if (st != CUDNN_STATUS_SUCCESS)
    return cudnn_graph_error(st, context, std::string("cudnnBackendFinalize(") + cudnn_desc_type_name(d.type) + ")",
                             __FILE__, __LINE__);
  return ok_status();
}

CudnnTensorSpec cudnn_tensor_nhwc(int64_t uid, cudnnDataType_t dtype, int64_t n, int64_t c, int64_t h, int64_t w,
                                  bool is_virtual) {
  CudnnTensorSpec s;
  s.uid = uid;
  s.dtype = dtype;
  s.dims = {n, c, h, w};
  s.strides = {h * w * c, 1, w * c, c};
  s.is_virtual = is_virtual;
  return s;
}

std::string cudnn_tensor_str(const CudnnTensorSpec& s) {
  return "uid " + std::to_string(s.uid) + " " + dtype_name(s.dtype) + " dims " + join_i64(s.dims.data(), 4) +
         " strides " + join_i64(s.strides.data(), 4) + (s.is_virtual ? " virtual" : "");
}

Result<CudnnBackendDesc> cudnn_tensor_make(const CudnnTensorSpec& s, const std::string& context) {
  const std::string ctx = context + ", tensor " + cudnn_tensor_str(s);
  Result<CudnnBackendDesc> d = cudnn_desc_create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, ctx);
  if (!d.ok()) return d;
  const CudnnBackendDesc& t = d.value();
  const bool is_virtual = s.is_virtual;
  Status st = cudnn_desc_set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &s.dtype, ctx);
  if (st.ok()) st = cudnn_desc_set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, s.dims.data(), ctx);
  if (st.ok()) st = cudnn_desc_set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s.strides.data(), ctx);
  if (st.ok()) st = cudnn_desc_set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &s.uid, ctx);
  if (st.ok()) st = cudnn_desc_set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &s.alignment, ctx);
  if (st.ok()) st = cudnn_desc_set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, ctx);
  if (st.ok()) st = cudnn_desc_finalize(t, ctx);
  if (!st.ok()) return st.errors();
  return d;
}

Result<CudnnExecPlan> cudnn_plan_build(cudnnHandle_t h, const std::string& graph, std::vector<CudnnBackendDesc> ops,
                                       std::vector<CudnnBackendDesc> tensors, const CudnnPlanOptions& opt) {
  const std::string ctx = "cudnn graph '" + graph + "'";
  if (Status st = graph_args_ok(h, opt, ops, ctx); !st.ok()) return st.errors();
  CudnnExecPlan out;
  out.graph = graph;
  for (auto& t : tensors) out.keep_alive.push_back(std::move(t));
  std::vector<cudnnBackendDescriptor_t> raw_ops;
  for (auto& o : ops) raw_ops.push_back(o.desc);
  for (auto& o : ops) out.keep_alive.push_back(std::move(o));
  Result<CudnnBackendDesc> og = make_op_graph(h, ctx, raw_ops, opt, &out.engine_global_count, &out.log);
  if (!og.ok()) return og.errors();

  Search s = search_of(h, og.value(), opt, ctx);
  bool found = false;
  if (opt.pin) {
    found = try_pinned(s, *opt.pin, out);
  } else {
    found = try_heuristic(s, CUDNN_HEUR_MODE_A, out) || try_heuristic(s, CUDNN_HEUR_MODE_FALLBACK, out);
    if (!found && opt.scan_all_engines && out.engine_global_count > 0)
      found = try_engine_scan(s, out.engine_global_count, out);
  }
  out.log += s.log;
  if (!found)
    return Error{ErrCode::NotSupported, where_of(__FILE__, __LINE__),
                 ctx + ": no engine (" + std::to_string(s.tried) + " engine config(s) tried; deterministic " +
                     (opt.deterministic ? "required" : "not required") + "):\n" + out.log};
  out.keep_alive.push_back(std::move(og.value()));
  return Result<CudnnExecPlan>(std::move(out));
}

Result<std::vector<CudnnEngineId>> cudnn_plan_candidates(cudnnHandle_t h, const std::string& graph,
                                                         std::vector<CudnnBackendDesc> ops,
                                                         std::vector<CudnnBackendDesc> tensors,
                                                         const CudnnPlanOptions& opt, std::string* log,
                                                         int max_per_heuristic, bool with_fallback) {
  const std::string ctx = "cudnn graph '" + graph + "'";
  if (Status st = graph_args_ok(h, opt, ops, ctx); !st.ok()) return st.errors();
  const std::vector<CudnnBackendDesc> keep = std::move(tensors);  // the operations reference them until we return
  std::vector<cudnnBackendDescriptor_t> raw_ops;
  for (auto& o : ops) raw_ops.push_back(o.desc);
  int64_t engines = -1;
  std::string text;
  Result<CudnnBackendDesc> og = make_op_graph(h, ctx, raw_ops, opt, &engines, &text);
  if (!og.ok()) return og.errors();
  Search s = search_of(h, og.value(), opt, ctx);
  std::vector<CudnnEngineId> ids;
  int over_ws = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK}) {
    if (mode == CUDNN_HEUR_MODE_FALLBACK && !with_fallback) break;
    CudnnBackendDesc heur;
    int taken = 0;
    for (const CudnnBackendDesc& cfg : heuristic_configs(s, mode, &heur)) {
      if (max_per_heuristic > 0 && taken >= max_per_heuristic) break;
      const CfgInfo info = read_cfg(cfg);
      if (info.id.engine < 0 || filtered_out(opt, info)) continue;
      // The config's workspace, when cuDNN reports it before a plan is built: skip what cannot fit.
      int64_t ws = 0, n = 0;
      if (cudnnBackendGetAttribute(cfg.desc, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) ==
              CUDNN_STATUS_SUCCESS &&
          n == 1 && ws > opt.max_workspace) {
        ++over_ws;
        continue;
      }
      if (std::find(ids.begin(), ids.end(), info.id) != ids.end()) continue;
      ids.push_back(info.id);
      ++taken;
    }
  }
  last_error_clear();  // the workspace queries may leave messages behind
  if (log)
    *log = text + s.log + "\n" + std::to_string(ids.size()) + " distinct usable config(s)" +
           (over_ws ? ", " + std::to_string(over_ws) + " over the workspace limit" : "");
  return ids;
}

std::string cudnn_plan_describe(const CudnnExecPlan& p) {
  return "engine " + std::to_string(p.engine_index) + " (" + p.source + "), " + p.knobs + ", notes: " + p.notes +
         ", workspace " + std::to_string(p.workspace) + " B, " + std::to_string(p.engine_global_count) +
         " engine(s) for the graph";
}

Result<CudnnBackendDesc> cudnn_variant_pack_make(const CudnnExecPlan& p, const std::vector<int64_t>& uids,
                                                 const std::vector<void*>& ptrs, void* workspace,
                                                 size_t workspace_bytes) {
  const std::string ctx = "cudnn graph '" + p.graph + "', variant pack";
  if (!p.plan.desc) return Error{ErrCode::Invalid, where_of(__FILE__, __LINE__), ctx + ": empty plan (moved from?)"};
  if (uids.size() != ptrs.size())
    return Error{ErrCode::Internal, where_of(__FILE__, __LINE__), ctx + ": uid and pointer counts differ"};
  for (size_t i = 0; i < ptrs.size(); ++i) {
    if (!ptrs[i])
      return Error{ErrCode::Invalid, where_of(__FILE__, __LINE__),
                   ctx + ": null device pointer for tensor uid " + std::to_string(uids[i])};
  }
  if (static_cast<int64_t>(workspace_bytes) < p.workspace || (p.workspace > 0 && !workspace))
    return Error{ErrCode::Invalid, where_of(__FILE__, __LINE__),
                 ctx + ": workspace of " + std::to_string(workspace_bytes) + " B given, " +
                     std::to_string(p.workspace) + " B needed"};
  Result<CudnnBackendDesc> d = cudnn_desc_create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, ctx);
  if (!d.ok()) return d;
  Status st = cudnn_desc_set(*d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                             static_cast<int64_t>(uids.size()), uids.data(), ctx);
  if (st.ok())
    st = cudnn_desc_set(*d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                        static_cast<int64_t>(ptrs.size()), ptrs.data(), ctx);
  if (st.ok()) st = cudnn_desc_set(*d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, ctx);
  if (st.ok()) st = cudnn_desc_finalize(*d, ctx);
  if (!st.ok()) return st.errors();
  return d;
}

Status cudnn_plan_execute(cudnnHandle_t h, cudaStream_t s, const CudnnExecPlan& p, const CudnnBackendDesc& pack) {
  const std::string ctx = "cudnn graph '" + p.graph + "', execute";
  if (!h || !p.plan.desc || !pack.desc)
    return Error{ErrCode::Invalid, where_of(__FILE__, __LINE__), ctx + ": null handle, plan or variant pack"};
  cudnnStatus_t st = cudnnSetStream(h, s);
  if (st != CUDNN_STATUS_SUCCESS) return cudnn_graph_error(st, ctx, "cudnnSetStream", __FILE__, __LINE__);
  st = cudnnBackendExecute(h, p.plan.desc, pack.desc);
  if (st != CUDNN_STATUS_SUCCESS) return cudnn_graph_error(st, ctx, "cudnnBackendExecute", __FILE__, __LINE__);
  return ok_status();
}

}  // namespace trctl
