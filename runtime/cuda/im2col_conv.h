// Few-input-channel convolutions (RGB stems; rule im2col_conv_eligible in runtime/ops/conv2d/im2col.h) as im2col +
// cuBLASLt GEMM, forward and weight gradient. cuDNN runs a C = 3 convolution far from its roofline even padded to
// C = 8 (H200, batch 256 f16: ResNet-50's 7x7/2 stem forward 1.50 ms for a 0.12 ms roofline, wgrad 0.56 ms;
// VGG16's 3x3 C=3 forward 2.10 ms, wgrad 1.33 ms, roofline 0.42 ms); as a GEMM with k = Kc = round_up(C*R*S, 8)
// the work is one pass writing and one reading the cols matrix plus a tensor-core GEMM.
//
//   forward  y (N*P*Q, K)  = cols (N*P*Q, Kc) * Wc (K, Kc)^T [+ bias (K), the GEMM's bias epilogue]
//   wgrad    dWc (K, Kc)   = dY (N*P*Q, K)^T * cols (N*P*Q, Kc), fp32 (A/B in the io dtype, fp32 accumulate and D);
//            dw (K, R, S, C) fp32 = the first C*R*S columns of dWc
// Wc is the (K, R, S, C) filter with zero columns appended (copied into the workspace at every call, K*Kc
// elements). The batch is processed in chunks of rows whose cols fit max_cols_bytes (fixed at plan time from the
// geometry and the cap only, so the chunking, and with it the wgrad's summation order, never depends on other
// plans): per chunk im2col into the workspace, then its GEMM; the wgrad accumulates the chunks into dWc with
// beta = 1 after the first, in row order (deterministic: cuBLASLt is bitwise repeatable for a fixed algorithm).
// The calls neither allocate nor synchronize: capturable into a CUDA graph.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/util/error.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/cuda/lt_gemm.h"
#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

// The default cap of one chunk's cols matrix: 64 MiB (ResNet-50's stem at batch 256 in f16 has a 0.91 GiB cols
// matrix: 15 chunks of 214,144 rows; VGG16's 3x3 stem 13 chunks of 988,160 rows).
constexpr size_t kIm2colMaxColsBytes = size_t{64} << 20;

enum class Im2colDir { Fwd, Wgrad };

struct Im2colConvDesc {
  Conv2dGeom g;                    // p, q are (re)computed by the plan
  GpuDType io = GpuDType::F16;     // x, w, y, dy and the bias; the weight gradient is always fp32
  Im2colDir dir = Im2colDir::Fwd;
  bool bias = false;               // Fwd: add a bias (K) of the io dtype in the GEMM's epilogue
  size_t max_cols_bytes = kIm2colMaxColsBytes;
};

// The chunking and the GEMMs of one direction. Move-only (owns cuBLASLt plans).
struct Im2colConvPlan {
  Im2colConvDesc desc;
  int64_t kc = 0;          // columns of cols and Wc
  int64_t rows = 0;        // N*P*Q
  int64_t chunk_rows = 0;  // rows per chunk (the last may have fewer): a multiple of 128, or all rows
  int64_t chunks = 0;
  size_t cols_bytes = 0;   // one chunk's cols, 256-aligned: the workspace's first part
  size_t w_bytes = 0;      // Wc (io dtype) or dWc (fp32), 256-aligned: the workspace's second part
  LtGemmPlan full;         // a full chunk (Wgrad: the first chunk, beta = 0)
  LtGemmPlan full_acc;     // Wgrad, chunks > 1: a later full chunk, beta = 1
  LtGemmPlan tail;         // chunks > 1 and rows % chunk_rows != 0: the last chunk (Wgrad: beta = 1)
};

// Validates (finished geometry, groups 1, K % 8 == 0, a cap of at least 128 rows) and plans the GEMMs (f16/bf16:
// tensor cores with fp32 accumulation; f32: full fp32). NotSupported when cuBLASLt has no algorithm.
Result<Im2colConvPlan> im2col_conv_plan(const CudaContext& ctx, const Im2colConvDesc& d);

// Workspace bytes a plan's calls need: cols_bytes + w_bytes (separate from the context's cuBLASLt workspace).
size_t im2col_conv_workspace_bytes(const Im2colConvPlan& p);

// y (N,P,Q,K) = conv(x (N,H,W,C), w (K,R,S,C)) [+ bias (K)]; all of the io dtype; y overwritten.
Status im2col_conv_fwd(const CudaContext& ctx, Im2colConvPlan& p, const void* x, const void* w, const void* bias,
                       void* y, void* ws, size_t ws_bytes);
// dw (K,R,S,C) fp32 = d(sum y*dy)/dw from dy (N,P,Q,K) and x (N,H,W,C) of the io dtype; dw overwritten.
Status im2col_conv_wgrad(const CudaContext& ctx, Im2colConvPlan& p, const void* dy, const void* x, float* dw,
                         void* ws, size_t ws_bytes);

// "im2col fwd f16 N=256 224x224 C=3 -> K=64 7x7 ...: Kc 152, 16 chunks of 212992 rows | GEMM m=... algo ...".
std::string im2col_conv_describe(const Im2colConvPlan& p);

}  // namespace trctl
