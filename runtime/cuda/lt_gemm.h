// cuBLASLt matmul in row-major terms: lt_gemm_plan() builds the descriptors, layouts and chooses the algorithm ONCE
// for a (shape, transposes, dtypes, epilogue); lt_gemm_run() executes it many times with no allocation and no host
// synchronization (graph-capturable), using the workspace of the CudaContext.
//
// Row-major contract (everything in this header is row-major):
//     D (m, n) = alpha * op(A) (m, k) * op(B) (k, n) + beta * C (m, n)      [then the epilogue]
//   A is stored (m, k) or, with trans_a, (k, m); B is stored (k, n) or, with trans_b, (n, k); C and D are (m, n).
//   Leading dimensions are row strides in elements (0 = packed).
//
// Mapping to cuBLASLt (column-major): a row-major (r, c) matrix with row stride ld is, byte for byte, the
// column-major (c, r) matrix with leading dimension ld, i.e. its transpose. So cuBLASLt computes
//     D^T (n, m) = op(B)^T (n, k) * op(A)^T (k, m)
//   with cuBLASLt's A := our B (transa = trans_b), cuBLASLt's B := our A (transb = trans_a), and sizes
//   (m', n', k') = (n, m, k). Consequences for the epilogues (cuBLASLt's "rows of D" = our columns n):
//     Bias, ReluBias, ReluAuxBias : bias (n) added to every row of D: D[i][j] += bias[j]       (EPILOGUE_BIAS...)
//     ReluAuxBias                 : also writes the ReLU bit mask, bit (i * aux_ld + j) = x[i][j] >= 0 where x is
//                                   the kernel's pre-activation (D = max(x, 0)), aux_ld a multiple of 128 bits >= n
//                                   (EPILOGUE_RELU_AUX_BIAS). Measured on the H200 (cuBLASLt 13.1): the bit is SET
//                                   where x is exactly 0 (D = 0), unlike torch's relu backward (grad where y > 0).
//                                   So DRelu passes the gradient at x == 0: rare in f32 (1 of 204800 in the GPU
//                                   test), more frequent for bf16 outputs of kernels that round before adding the
//                                   bias (see below; 3 of 2000 in the bf16 test).
//     DRelu                       : D = (op(A) op(B)) * mask, mask read from aux (same layout) (EPILOGUE_DRELU)
//     DReluBiasGrad               : DRelu, plus bias_grad[j] = sum_i D[i][j] (column sums of the masked result)
//                                                                                             (EPILOGUE_DRELU_BGRAD)
//     BiasGradA                   : bias_grad[i] = sum_k op(A)[i][k] (row sums of op(A))       (EPILOGUE_BGRADB: our A
//                                   is cuBLASLt's B)
//
// How a Linear layer Y (N, out) = X (N, in) W^T (W stored (out, in)) + b uses it:
//   forward    m=N,   n=out, k=in,  A=X,  B=W trans_b   epilogue Bias | ReluBias | ReluAuxBias
//   dX=dY W    m=N,   n=in,  k=out, A=dY, B=W           epilogue None | DRelu / DReluBiasGrad with the previous
//                                                       layer's forward mask (that yields the previous layer's db)
//   dW=dY^T X  m=out, n=in,  k=N,   A=dY trans_a, B=X   epilogue None | BiasGradA (db = column sums of dY)
//
// Precision: f16/bf16 inputs accumulate in fp32. For f16/bf16 outputs lt_gemm_plan excludes the split-K reduction
// schemes that sum partials in the output type (INPLACE, OUTPUT_TYPE). Some kernels still round alpha * AB to the
// output type before adding the bias or beta * C (D = rnd(rnd(alpha AB) + term); on the H200: algo 66 with beta = 1
// for f16 and bf16, algo 23 with RELU_AUX_BIAS for f16 and bf16): one extra rounding of |alpha AB|, which matters
// where the term cancels AB.
//
// Determinism: the algorithm is fixed at plan time (first heuristic result that fits the workspace; the heuristic
// is a deterministic function of the problem), and cuBLASLt guarantees bitwise-identical results run to run for a
// fixed algorithm, device, workspace and single stream (its split-K reduction schemes are all ordered: none,
// in-place with counters, or a separate reduction pass). The bias-gradient epilogues are part of that guarantee,
// but the GPU tests check it bitwise; a caller that prefers not to rely on them uses bias_grad_cuda()
// (runtime/ops/bias_grad) instead, selected by its own flag.
//
// Support: None / Bias / ReluBias are documented for f32, TF32, f16 and bf16; the Aux/DRelu/BGrad epilogues may
// not exist for every dtype and layout. lt_gemm_plan() then returns ErrCode::NotSupported and the caller falls back
// to separate kernels (relu_bwd_cuda, bias_grad_cuda); tests/gpu/gemm_test.cpp prints what the device supports.
// (H200, cuBLASLt 13.1, min_alignment 256: every epilogue was supported for f32, TF32, f16 and bf16 on the MLP
// shapes.)
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "core/util/error.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

enum class GemmEpilogue { None, Bias, ReluBias, ReluAuxBias, DRelu, DReluBiasGrad, BiasGradA };
const char* gemm_epilogue_name(GemmEpilogue e);

// Math mode for f32 inputs: Default = full fp32 FMA (CUBLAS_COMPUTE_32F); FastTf32 = tensor cores with inputs
// rounded to TF32 (CUBLAS_COMPUTE_32F_FAST_TF32). f16/bf16 inputs always accumulate in fp32 (CUBLAS_COMPUTE_32F).
enum class GemmMath { Default, FastTf32 };

struct GemmDesc {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  GpuDType ab_type = GpuDType::F32;    // A and B
  GpuDType d_type = GpuDType::F32;     // C and D: ab_type, or F32 with f16/bf16 inputs
  GpuDType bias_type = GpuDType::F32;  // bias / bias gradient; only used when bias_type_set, else = d_type
  bool bias_type_set = false;
  GemmMath math = GemmMath::Default;
  GemmEpilogue epilogue = GemmEpilogue::None;
  float alpha = 1.0f, beta = 0.0f;     // beta != 0 reads C (C may alias D for accumulation)
  int64_t lda = 0, ldb = 0, ldd = 0;   // row strides in elements; 0 = packed (C uses ldd)
  int64_t aux_ld = 0;                  // ReLU mask row stride in bits; 0 = round_up(n, 128)
  uint32_t min_alignment = 256;        // bytes every pointer is guaranteed aligned to (the memory plan gives 256)
};

// Device pointers of one execution. bias: input bias (n) for Bias/ReluBias/ReluAuxBias, output bias gradient for
// DReluBiasGrad (n) and BiasGradA (m). aux: ReLU bit mask, written by ReluAuxBias, read by DRelu/DReluBiasGrad.
struct GemmArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;  // null = D (only read when beta != 0)
  void* d = nullptr;
  void* bias = nullptr;
  void* aux = nullptr;
};

// A planned matmul. Move-only; owns its cuBLASLt descriptors. Not thread-safe (lt_gemm_run updates the bias and
// aux pointers stored in the descriptor when they change).
struct LtGemmPlan {
  GemmDesc desc;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_c = nullptr, layout_d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;  // what the chosen algorithm needs (<= the context's workspace)
  int64_t aux_ld = 0;          // effective ReLU mask stride (bits)
  const void* bound_bias = nullptr;
  const void* bound_aux = nullptr;
  std::string algo_text;       // chosen algorithm, for logs: "algo 21 tile 18 splitK 1 ..."

  LtGemmPlan() = default;
  LtGemmPlan(const LtGemmPlan&) = delete;
  LtGemmPlan& operator=(const LtGemmPlan&) = delete;
  LtGemmPlan(LtGemmPlan&& o) noexcept { *this = static_cast<LtGemmPlan&&>(o); }
  LtGemmPlan& operator=(LtGemmPlan&& o) noexcept;
  ~LtGemmPlan();
};

// Validates the description, builds descriptors, asks the heuristic once and keeps its first usable answer.
// ErrCode::NotSupported when cuBLASLt has no algorithm for this combination.
Result<LtGemmPlan> lt_gemm_plan(const CudaContext& ctx, const GemmDesc& desc);

// Enqueues the matmul on ctx.stream with ctx.workspace. Checks pointers (non-null where needed, aligned to
// desc.min_alignment) on the host; never allocates or synchronizes.
Status lt_gemm_run(const CudaContext& ctx, LtGemmPlan& plan, const GemmArgs& args);
// The same on an explicit stream and workspace (one workspace per concurrently running stream).
Status lt_gemm_run_on(cublasLtHandle_t lt, cudaStream_t stream, void* workspace, size_t workspace_bytes,
                      LtGemmPlan& plan, const GemmArgs& args);

// "m=200 n=1024 k=784 A:N B:T f16->f32 ReluBias | algo ...", for logs and test diagnostics.
std::string lt_gemm_describe(const LtGemmPlan& plan);

// ReLU bit mask: row stride in bits (multiple of 128, >= n) and total bytes for an (m, n) output.
int64_t lt_gemm_relu_mask_ld(int64_t n);
size_t lt_gemm_relu_mask_bytes(int64_t m, int64_t n);

}  // namespace trctl
