// A thin layer over cuDNN's graph (backend) C API: an owning handle for backend descriptors, checked attribute
// setters whose errors name the graph, the step, the attribute and cuDNN's own message, a tensor-descriptor
// builder, and an execution-plan builder (operation graph -> heuristics -> first engine config that finalizes ->
// plan with its workspace size). No cudnn-frontend: the calls are cudnnBackendCreateDescriptor /
// cudnnBackendSetAttribute / cudnnBackendFinalize / cudnnBackendGetAttribute / cudnnBackendExecute.
//
// Tensors follow the graph API's convention: dims are always logical (N, C, H, W) (filters (K, C, R, S)) and the
// memory layout is given by the strides; trctl's NHWC activations are dims {N, C, H, W}, strides {HWC, 1, WC, C}
// and its KRSC filters dims {K, C, R, S}, strides {RSC, 1, SC, C}.
//
// Every failure comes back as an Error (never an abort): NotSupported when cuDNN's status is in its NOT_SUPPORTED
// family (3xxx) or when no engine could be planned, Invalid for BAD_PARAM (2xxx), Internal otherwise.
#pragma once
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/util/error.h"

namespace trctl {

// Owns one backend descriptor (destroyed with it). Move-only.
struct CudnnBackendDesc {
  cudnnBackendDescriptor_t desc = nullptr;
  cudnnBackendDescriptorType_t type = CUDNN_BACKEND_POINTWISE_DESCRIPTOR;

  CudnnBackendDesc() = default;
  CudnnBackendDesc(const CudnnBackendDesc&) = delete;
  CudnnBackendDesc& operator=(const CudnnBackendDesc&) = delete;
  CudnnBackendDesc(CudnnBackendDesc&& o) noexcept { *this = static_cast<CudnnBackendDesc&&>(o); }
  CudnnBackendDesc& operator=(CudnnBackendDesc&& o) noexcept;
  ~CudnnBackendDesc();
};

// "CUDNN_ATTR_TENSOR_STRIDES" etc. for the attributes trctl sets or reads; "attribute #N" for the others.
const char* cudnn_attr_name(cudnnBackendAttributeName_t a);
// "CUDNN_BACKEND_TENSOR_DESCRIPTOR" etc.; "descriptor type #N" for the others.
const char* cudnn_desc_type_name(cudnnBackendDescriptorType_t t);

// A failed cuDNN call as an Error: `where` is file:line; the message is "<context>: <call>: <status name>
// (<cudnnGetLastErrorString, when cuDNN left one>)". `context` names the graph and the step
// (e.g. "cudnn graph 'conv_genstats f16 ...', tensor y").
Error cudnn_graph_error(cudnnStatus_t st, const std::string& context, const std::string& call, const char* file,
                        int line);

// Creation, attributes, finalization. `context` goes into any error (see cudnn_graph_error).
Result<CudnnBackendDesc> cudnn_desc_create(cudnnBackendDescriptorType_t type, const std::string& context);
Status cudnn_desc_set(const CudnnBackendDesc& d, cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
                      int64_t count, const void* values, const std::string& context);
Status cudnn_desc_set_i64(const CudnnBackendDesc& d, cudnnBackendAttributeName_t attr,
                          const std::vector<int64_t>& values, const std::string& context);
// One descriptor-valued attribute (an operation's input tensor, a plan's engine config, ...).
Status cudnn_desc_set_desc(const CudnnBackendDesc& d, cudnnBackendAttributeName_t attr, const CudnnBackendDesc& value,
                           const std::string& context);
Status cudnn_desc_finalize(const CudnnBackendDesc& d, const std::string& context);

// A tensor of the graph. dims/strides as in the file comment (rank 4 here); `uid` is the id the variant pack binds
// a pointer to (unique within a graph); a virtual tensor lives only inside the fused kernel (no pointer).
struct CudnnTensorSpec {
  int64_t uid = 0;
  cudnnDataType_t dtype = CUDNN_DATA_HALF;
  std::array<int64_t, 4> dims{};
  std::array<int64_t, 4> strides{};
  bool is_virtual = false;
  int64_t alignment = 16;  // bytes; 16 is what tensor-core engines want (trctl's buffers are 256-byte aligned)
};
// (N, C, H, W) dims with NHWC strides {HWC, 1, WC, C}. For a filter pass (K, C, R, S): KRSC strides.
CudnnTensorSpec cudnn_tensor_nhwc(int64_t uid, cudnnDataType_t dtype, int64_t n, int64_t c, int64_t h, int64_t w,
                                  bool is_virtual = false);
// "uid 3 f16 dims [4,32,12,12] strides [4608,1,384,32]" (+ " virtual").
std::string cudnn_tensor_str(const CudnnTensorSpec& s);
Result<CudnnBackendDesc> cudnn_tensor_make(const CudnnTensorSpec& s, const std::string& context);

// One engine config named by what identifies it across processes (an autotune cache keeps it): the engine's global
// index within the operation graph and its knob choices (cudnnBackendKnobType_t as an int, value), in the order
// cuDNN reports them. Only meaningful for the graph (and cuDNN version, GPU) it was read from.
struct CudnnEngineId {
  int64_t engine = -1;
  std::vector<std::pair<int64_t, int64_t>> knobs;
  bool operator==(const CudnnEngineId& o) const { return engine == o.engine && knobs == o.knobs; }
};
// "12" or "12:2=3,14=4" (engine, then knob=value pairs); parse accepts exactly what str writes.
std::string cudnn_engine_id_str(const CudnnEngineId& id);
bool cudnn_engine_id_parse(const std::string& s, CudnnEngineId* out);

// How the plan builder chooses among engine configs.
struct CudnnPlanOptions {
  bool deterministic = false;            // skip engines noted CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
  bool allow_reduced_precision = false;  // else skip CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION engines
  bool allow_runtime_compiled = true;    // else skip engines noted CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION (NVRTC
                                         // at plan time: seconds each; the conv autotune's candidates skip them)
  int64_t max_workspace = int64_t{256} << 20;
  bool scan_all_engines = true;          // when both heuristics yield nothing usable: try every engine index with
                                         // its default knobs (a last resort; cuDNN's own fallback list is first)
  // Device-less planning (cuDNN >= 9.11): a finalized CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR describing the target GPU,
  // used by the heuristics, engines and plan instead of the handle's device (the handle may then be null). Lets a
  // machine without a GPU check which engines would serve a graph; the plan still executes only on such a device.
  const CudnnBackendDesc* device_prop = nullptr;
  // When set: build exactly this engine config (engine index + knob choices, e.g. from an autotune cache) instead of
  // searching; the filters above still apply, and a config cuDNN refuses is NotSupported with the reason.
  const CudnnEngineId* pin = nullptr;
};

// A finalized execution plan and what was learnt choosing it. Keeps every descriptor the plan was built from alive
// (operation graph, operations, tensors, engine config), since the backend API does not promise that a finalized
// plan holds its own copies. Move-only (through its members).
struct CudnnExecPlan {
  std::vector<CudnnBackendDesc> keep_alive;  // declared first: destroyed after the plan that references them
  std::string graph;             // the graph's name, for errors
  CudnnBackendDesc plan;         // CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, finalized
  int64_t workspace = 0;         // bytes the plan needs at execution
  int64_t engine_global_count = -1;  // CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT (-1: query failed)
  int64_t engine_index = -1;     // CUDNN_ATTR_ENGINE_GLOBAL_INDEX of the chosen engine (-1: unknown)
  std::string source;            // "heuristic A", "heuristic FALLBACK" or "engine scan", and the config's rank there
  std::string knobs;             // "knob 2=3 knob 14=4 ..." (CUDNN_KNOB_TYPE_* ids), or why they are unknown
  CudnnEngineId id;              // the chosen config as cudnn_plan_build's pin takes it (engine -1: unknown)
  std::string notes;             // numerical and behaviour notes, e.g. "tensor core, runtime compilation"
  bool nondeterministic = false; // the engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
  bool runtime_compiled = false; // CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION
  std::string log;               // every heuristic query and every config tried, with why it was rejected
};

// Plans the operation graph made of `ops` (finalized operation descriptors, any order; ownership moves into the
// plan, as does `tensors`, which the operations reference). h may be null only with opt.device_prop. Tries
// CUDNN_HEUR_MODE_A, then CUDNN_HEUR_MODE_FALLBACK (then, with scan_all_engines, every engine index), and takes the
// first engine config that passes the options and whose execution plan finalizes within max_workspace.
// NotSupported with the whole log when none does.
Result<CudnnExecPlan> cudnn_plan_build(cudnnHandle_t h, const std::string& graph, std::vector<CudnnBackendDesc> ops,
                                       std::vector<CudnnBackendDesc> tensors, const CudnnPlanOptions& opt);

// The distinct engine configs heuristics A, B and (with_fallback) FALLBACK propose for the graph of `ops` (in that
// order, each config once, at most max_per_heuristic new ones from each, 0 = all), that pass opt's determinism and
// precision filters and whose reported workspace fits opt.max_workspace, as ids for cudnn_plan_build's pin: what an
// autotune measures. No execution plan is built (plan refusals show when each is pinned). opt.pin is ignored. `log` (may be
// nullptr) gets each heuristic's answer.
Result<std::vector<CudnnEngineId>> cudnn_plan_candidates(cudnnHandle_t h, const std::string& graph,
                                                         std::vector<CudnnBackendDesc> ops,
                                                         std::vector<CudnnBackendDesc> tensors,
                                                         const CudnnPlanOptions& opt, std::string* log = nullptr,
                                                         int max_per_heuristic = 0, bool with_fallback = true);

// One line: "engine 12 (heuristic A #0), knobs ..., notes ..., workspace N B, M engines in the graph".
std::string cudnn_plan_describe(const CudnnExecPlan& p);

// A variant pack: device pointers by tensor uid, and the workspace (>= p.workspace bytes; may be nullptr when that
// is 0). Build it once per set of pointers; executing it neither allocates nor synchronizes.
Result<CudnnBackendDesc> cudnn_variant_pack_make(const CudnnExecPlan& p, const std::vector<int64_t>& uids,
                                                 const std::vector<void*>& ptrs, void* workspace,
                                                 size_t workspace_bytes);
// Binds h to s and runs the plan (capturable into a CUDA graph; run it once outside capture first).
Status cudnn_plan_execute(cudnnHandle_t h, cudaStream_t s, const CudnnExecPlan& p, const CudnnBackendDesc& pack);

}  // namespace trctl
