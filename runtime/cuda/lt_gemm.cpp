// cuBLASLt matmul plans in row-major terms (see lt_gemm.h for the operand mapping and the epilogue semantics).
#include "runtime/cuda/lt_gemm.h"

#include <cstdio>
#include <utility>

#include "runtime/cuda/cuda_check.h"

namespace trctl {

namespace {

cudaDataType_t cuda_type(GpuDType t) {
  switch (t) {
    case GpuDType::F16: return CUDA_R_16F;
    case GpuDType::BF16: return CUDA_R_16BF;
    case GpuDType::F32: break;
  }
  return CUDA_R_32F;
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::ReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::ReluAuxBias: return CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    case GemmEpilogue::DRelu: return CUBLASLT_EPILOGUE_DRELU;
    case GemmEpilogue::DReluBiasGrad: return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case GemmEpilogue::BiasGradA: return CUBLASLT_EPILOGUE_BGRADB;  // our A is cuBLASLt's B (operand swap)
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool uses_bias(GemmEpilogue e) { return e != GemmEpilogue::None && e != GemmEpilogue::DRelu; }
bool uses_aux(GemmEpilogue e) {
  return e == GemmEpilogue::ReluAuxBias || e == GemmEpilogue::DRelu || e == GemmEpilogue::DReluBiasGrad;
}

int64_t packed_lda(const GemmDesc& d) { return d.trans_a ? d.m : d.k; }
int64_t packed_ldb(const GemmDesc& d) { return d.trans_b ? d.k : d.n; }

Status validate(const GemmDesc& d, const CudaContext& ctx) {
  TRCTL_CUDA_ARG_CHECK(ctx.lt != nullptr, "lt_gemm_plan: context has no cuBLASLt handle");
  TRCTL_CUDA_ARG_CHECK(d.m > 0 && d.n > 0 && d.k > 0, "lt_gemm_plan: m, n, k must be >= 1");
  if (d.ab_type == GpuDType::F32) {
    TRCTL_CUDA_ARG_CHECK(d.d_type == GpuDType::F32, "lt_gemm_plan: f32 inputs need an f32 output");
  } else {
    TRCTL_CUDA_ARG_CHECK(d.d_type == d.ab_type || d.d_type == GpuDType::F32,
                         "lt_gemm_plan: f16/bf16 inputs need an output of the same type or f32");
    TRCTL_CUDA_ARG_CHECK(d.math == GemmMath::Default, "lt_gemm_plan: FastTf32 applies to f32 inputs only");
  }
  TRCTL_CUDA_ARG_CHECK(d.lda == 0 || d.lda >= packed_lda(d), "lt_gemm_plan: lda smaller than the row length");
  TRCTL_CUDA_ARG_CHECK(d.ldb == 0 || d.ldb >= packed_ldb(d), "lt_gemm_plan: ldb smaller than the row length");
  TRCTL_CUDA_ARG_CHECK(d.ldd == 0 || d.ldd >= d.n, "lt_gemm_plan: ldd smaller than n");
  TRCTL_CUDA_ARG_CHECK(d.aux_ld == 0 || (d.aux_ld % 128 == 0 && d.aux_ld >= d.n),
                       "lt_gemm_plan: aux_ld must be a multiple of 128 bits and >= n");
  TRCTL_CUDA_ARG_CHECK(d.min_alignment >= 4 && (d.min_alignment & (d.min_alignment - 1)) == 0,
                       "lt_gemm_plan: min_alignment must be a power of two >= 4");
  return ok_status();
}

template <class T>
cublasStatus_t set_desc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& value) {
  return cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof(value));
}

Status make_layout(cublasLtMatrixLayout_t* out, GpuDType t, int64_t rows, int64_t cols, int64_t ld) {
  TRCTL_CUBLAS_TRY(cublasLtMatrixLayoutCreate(out, cuda_type(t), static_cast<uint64_t>(rows),
                                              static_cast<uint64_t>(cols), ld));
  return ok_status();
}

Status build_descriptors(LtGemmPlan& p) {
  const GemmDesc& d = p.desc;
  const cublasComputeType_t compute =
      d.math == GemmMath::FastTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  TRCTL_CUBLAS_TRY(cublasLtMatmulDescCreate(&p.op, compute, CUDA_R_32F));
  // Operand swap: cuBLASLt's A is our B, its B is our A (see lt_gemm.h).
  const int32_t transa = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t transb = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  TRCTL_CUBLAS_TRY(set_desc(p.op, CUBLASLT_MATMUL_DESC_TRANSA, transa));
  TRCTL_CUBLAS_TRY(set_desc(p.op, CUBLASLT_MATMUL_DESC_TRANSB, transb));
  const uint32_t epi = lt_epilogue(d.epilogue);
  TRCTL_CUBLAS_TRY(set_desc(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epi));
  if (uses_bias(d.epilogue) && d.bias_type_set) {
    const int32_t bt = cuda_type(d.bias_type);
    TRCTL_CUBLAS_TRY(set_desc(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bt));
  }
  if (uses_aux(d.epilogue)) {
    p.aux_ld = d.aux_ld ? d.aux_ld : lt_gemm_relu_mask_ld(d.n);
    TRCTL_CUBLAS_TRY(set_desc(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld));
  }
  // Until lt_gemm_run binds the real bias/aux pointers, the descriptor holds a placeholder address that is never
  // dereferenced: the heuristic only derives the expected alignment from it (cuBLASLt documents this), so it is
  // exactly min_alignment-aligned, like the real buffers.
  const void* placeholder = reinterpret_cast<const void*>(static_cast<uintptr_t>(d.min_alignment));
  if (uses_bias(d.epilogue)) {
    TRCTL_CUBLAS_TRY(set_desc(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, placeholder));
    p.bound_bias = placeholder;
  }
  if (uses_aux(d.epilogue)) {
    TRCTL_CUBLAS_TRY(set_desc(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, placeholder));
    p.bound_aux = placeholder;
  }
  const int64_t lda = d.lda ? d.lda : packed_lda(d);
  const int64_t ldb = d.ldb ? d.ldb : packed_ldb(d);
  const int64_t ldd = d.ldd ? d.ldd : d.n;
  // Our B, row-major (k, n) [or (n, k) with trans_b] == column-major (n, k) [or (k, n)].
  Status st = make_layout(&p.layout_a, d.ab_type, d.trans_b ? d.k : d.n, d.trans_b ? d.n : d.k, ldb);
  if (!st) return st;
  // Our A, row-major (m, k) [or (k, m) with trans_a] == column-major (k, m) [or (m, k)].
  st = make_layout(&p.layout_b, d.ab_type, d.trans_a ? d.m : d.k, d.trans_a ? d.k : d.m, lda);
  if (!st) return st;
  // C and D, row-major (m, n) == column-major (n, m).
  st = make_layout(&p.layout_c, d.d_type, d.n, d.m, ldd);
  if (!st) return st;
  return make_layout(&p.layout_d, d.d_type, d.n, d.m, ldd);
}

std::string describe_algo(const cublasLtMatmulAlgo_t& algo, const cublasLtMatmulHeuristicResult_t& r) {
  int32_t id = -1, splitk = -1;
  uint32_t tile = 0, reduction = 0, stages = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof(reduction),
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
  char buf[200];
  std::snprintf(buf, sizeof buf, "algo %d tile %u stages %u splitK %d reduction %u workspace %zu waves %.2f", id,
                tile, stages, splitk, reduction, r.workspaceSize, static_cast<double>(r.wavesCount));
  return buf;
}

void plan_release(LtGemmPlan& p) {
  if (p.layout_d) TRCTL_CUBLAS_WARN(cublasLtMatrixLayoutDestroy(p.layout_d));
  if (p.layout_c) TRCTL_CUBLAS_WARN(cublasLtMatrixLayoutDestroy(p.layout_c));
  if (p.layout_b) TRCTL_CUBLAS_WARN(cublasLtMatrixLayoutDestroy(p.layout_b));
  if (p.layout_a) TRCTL_CUBLAS_WARN(cublasLtMatrixLayoutDestroy(p.layout_a));
  if (p.op) TRCTL_CUBLAS_WARN(cublasLtMatmulDescDestroy(p.op));
  p.layout_a = p.layout_b = p.layout_c = p.layout_d = nullptr;
  p.op = nullptr;
}

Status choose_algorithm(const CudaContext& ctx, LtGemmPlan& p) {
  cublasLtMatmulPreference_t pref = nullptr;
  TRCTL_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { TRCTL_CUBLAS_WARN(cublasLtMatmulPreferenceDestroy(p)); }
  } guard{pref};
  const uint64_t ws = ctx.workspace_bytes;
  TRCTL_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                        sizeof(ws)));
  const uint32_t align = p.desc.min_alignment;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    TRCTL_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  }
  // Split-K reduction schemes. INPLACE sums the partial products in the output buffer in the OUTPUT type, and
  // OUTPUT_TYPE stores them in the output type (NVIDIA documents that it also accumulates them in it): for f16/bf16
  // outputs that is one 11/8-bit rounding per split, not the fp32 accumulation this wrapper promises. On the H200
  // (cuBLASLt 13.1) the heuristic chose OUTPUT_TYPE with split-K 8 for a bf16 200x256x10 DRELU GEMM (the last
  // layer's dX): errors up to 22x the fp32-accumulation bound. Keep NONE and COMPUTE_TYPE (fp32 partials in the
  // workspace, reduced in a separate ordered pass). f32 outputs: every scheme accumulates in fp32, all allowed.
  if (p.desc.d_type != GpuDType::F32) {
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    TRCTL_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                          sizeof(schemes)));
  }
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int returned = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ctx.lt, p.op, p.layout_a, p.layout_b, p.layout_c,
                                                            p.layout_d, pref, kCandidates, results, &returned);
  if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED) {
    return cublas_error(hs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  }
  // Deterministic choice: the heuristic's own ranking, first candidate that fits the workspace.
  for (int i = 0; i < returned; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= ctx.workspace_bytes) {
      p.algo = results[i].algo;
      p.workspace_bytes = results[i].workspaceSize;
      p.algo_text = describe_algo(p.algo, results[i]);
      return ok_status();
    }
  }
  return Error{ErrCode::NotSupported, std::string(__FILE__) + ":" + std::to_string(__LINE__),
               "cuBLASLt has no algorithm for " + lt_gemm_describe(p)};
}

Status check_ptr(const void* p, bool needed, uint32_t align, const char* what) {
  if (p == nullptr) {
    if (needed) return Error{ErrCode::Invalid, "lt_gemm_run", std::string(what) + " pointer is null"};
    return ok_status();
  }
  if (reinterpret_cast<uintptr_t>(p) % align != 0) {
    return Error{ErrCode::Invalid, "lt_gemm_run",
                 std::string(what) + " pointer not aligned to " + std::to_string(align) +
                     " bytes (the plan's min_alignment)"};
  }
  return ok_status();
}

}  // namespace

const char* gemm_epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None: return "None";
    case GemmEpilogue::Bias: return "Bias";
    case GemmEpilogue::ReluBias: return "ReluBias";
    case GemmEpilogue::ReluAuxBias: return "ReluAuxBias";
    case GemmEpilogue::DRelu: return "DRelu";
    case GemmEpilogue::DReluBiasGrad: return "DReluBiasGrad";
    case GemmEpilogue::BiasGradA: return "BiasGradA";
  }
  return "?";
}

int64_t lt_gemm_relu_mask_ld(int64_t n) { return (n + 127) / 128 * 128; }
size_t lt_gemm_relu_mask_bytes(int64_t m, int64_t n) {
  return static_cast<size_t>(lt_gemm_relu_mask_ld(n) / 8) * static_cast<size_t>(m);
}

LtGemmPlan& LtGemmPlan::operator=(LtGemmPlan&& o) noexcept {
  if (this != &o) {
    plan_release(*this);
    desc = o.desc;
    op = std::exchange(o.op, nullptr);
    layout_a = std::exchange(o.layout_a, nullptr);
    layout_b = std::exchange(o.layout_b, nullptr);
    layout_c = std::exchange(o.layout_c, nullptr);
    layout_d = std::exchange(o.layout_d, nullptr);
    algo = o.algo;
    workspace_bytes = o.workspace_bytes;
    aux_ld = o.aux_ld;
    bound_bias = std::exchange(o.bound_bias, nullptr);
    bound_aux = std::exchange(o.bound_aux, nullptr);
    algo_text = std::move(o.algo_text);
  }
  return *this;
}

LtGemmPlan::~LtGemmPlan() { plan_release(*this); }

Result<LtGemmPlan> lt_gemm_plan(const CudaContext& ctx, const GemmDesc& desc) {
  Status st = validate(desc, ctx);
  if (!st) return st.errors();
  LtGemmPlan p;
  p.desc = desc;
  st = build_descriptors(p);
  if (!st) return st.errors();
  st = choose_algorithm(ctx, p);
  if (!st) return st.errors();
  return Result<LtGemmPlan>(std::move(p));
}

Status lt_gemm_run_on(cublasLtHandle_t lt, cudaStream_t stream, void* workspace, size_t workspace_bytes,
                      LtGemmPlan& p, const GemmArgs& a) {
  const GemmDesc& d = p.desc;
  TRCTL_CUDA_ARG_CHECK(p.op != nullptr, "lt_gemm_run: plan is empty (moved from or failed)");
  TRCTL_CUDA_ARG_CHECK(workspace_bytes >= p.workspace_bytes && (p.workspace_bytes == 0 || workspace != nullptr),
                       "lt_gemm_run: workspace smaller than the planned algorithm needs");
  const uint32_t al = d.min_alignment;
  for (Status s : {check_ptr(a.a, true, al, "A"), check_ptr(a.b, true, al, "B"), check_ptr(a.d, true, al, "D"),
                   check_ptr(a.c, false, al, "C"), check_ptr(a.bias, uses_bias(d.epilogue), al, "bias"),
                   check_ptr(a.aux, uses_aux(d.epilogue), al, "aux")}) {
    if (!s) return s;
  }
  if (uses_bias(d.epilogue) && a.bias != p.bound_bias) {
    TRCTL_CUBLAS_TRY(set_desc(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, a.bias));
    p.bound_bias = a.bias;
  }
  if (uses_aux(d.epilogue) && a.aux != p.bound_aux) {
    TRCTL_CUBLAS_TRY(set_desc(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, a.aux));
    p.bound_aux = a.aux;
  }
  const void* c = a.c ? a.c : a.d;
  // Operand swap: cuBLASLt's A is our B.
  TRCTL_CUBLAS_TRY(cublasLtMatmul(lt, p.op, &d.alpha, a.b, p.layout_a, a.a, p.layout_b, &d.beta, c, p.layout_c, a.d,
                                  p.layout_d, &p.algo, workspace, workspace_bytes, stream));
  return ok_status();
}

Status lt_gemm_run(const CudaContext& ctx, LtGemmPlan& plan, const GemmArgs& args) {
  return lt_gemm_run_on(ctx.lt, ctx.stream, ctx.workspace, ctx.workspace_bytes, plan, args);
}

std::string lt_gemm_describe(const LtGemmPlan& p) {
  const GemmDesc& d = p.desc;
  char buf[256];
  std::snprintf(buf, sizeof buf, "m=%lld n=%lld k=%lld A:%c B:%c %s%s->%s %s alpha=%g beta=%g",
                static_cast<long long>(d.m), static_cast<long long>(d.n), static_cast<long long>(d.k),
                d.trans_a ? 'T' : 'N', d.trans_b ? 'T' : 'N', gpu_dtype_name(d.ab_type),
                d.math == GemmMath::FastTf32 ? "(tf32)" : "", gpu_dtype_name(d.d_type),
                gemm_epilogue_name(d.epilogue), static_cast<double>(d.alpha), static_cast<double>(d.beta));
  std::string s = buf;
  if (!p.algo_text.empty()) s += " | " + p.algo_text;
  return s;
}

}  // namespace trctl
