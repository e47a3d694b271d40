// Linear layer on the GPU, Y (N, out) = X (N, in) W^T + b with W stored (out, in): the three cuBLASLt plans of the
// forward and backward, made once, with the bias/ReLU epilogues fused and a flag choosing how db is computed.
// Gradients dW and db are f32 (fp32 master weights); X, W (or its f16/bf16 copy), dY and dX have act_type.
#pragma once
#include <cstdint>
#include <string>

#include "core/util/error.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/lt_gemm.h"

namespace trctl {

// Kernel: db by bias_grad_cuda (fixed-order column sums: deterministic by construction, one extra read of dY).
// GemmEpilogue: db fused into the dW GEMM (CUBLASLT_EPILOGUE_BGRADB; deterministic for a fixed algorithm per
// cuBLASLt's reproducibility guarantee, checked bitwise by the GPU tests). If cuBLASLt has no algorithm for it, the
// plan falls back to Kernel and says so in LinearCudaPlan::bias_grad_path / notes.
enum class BiasGradPath { Kernel, GemmEpilogue };

struct LinearCudaDesc {
  int64_t batch = 0, in = 0, out = 0;
  GpuDType act_type = GpuDType::F32;  // X, W, dY, dX
  GpuDType out_type = GpuDType::F32;  // Y and b: act_type, or F32 (e.g. logits) with f16/bf16 act_type
  GemmMath math = GemmMath::Default;  // FastTf32 for f32 TF32 training
  bool relu = false;                  // fused ReLU after the bias
  bool save_relu_mask = false;        // with relu: write the bit mask for the next layer's fused DRelu backward
  bool dx_drelu = false;              // backward: dX *= the PREVIOUS layer's ReLU mask (fused DRelu epilogue)
  bool need_dx = true;                // false for the first layer
  BiasGradPath bias_grad = BiasGradPath::Kernel;
};

struct LinearCudaPlan {
  LinearCudaDesc desc;
  LtGemmPlan fwd, dx, dw;
  BiasGradPath bias_grad_path = BiasGradPath::Kernel;  // what will actually run
  std::string notes;                                   // fallbacks taken at plan time
};

Result<LinearCudaPlan> linear_cuda_plan(const CudaContext& ctx, const LinearCudaDesc& desc);

// y (N, out) out_type; b (out) out_type; relu_mask: lt_gemm_relu_mask_bytes(N, out) bytes when save_relu_mask.
Status linear_fwd_cuda(const CudaContext& ctx, LinearCudaPlan& plan, const void* x, const void* w, const void* b,
                       void* y, void* relu_mask);
// dy (N, out) act_type. dx (N, in) act_type (ignored unless need_dx); prev_relu_mask: the previous layer's mask,
// (N, in), when dx_drelu. dw (out, in) f32 and db (out) f32 are overwritten.
Status linear_bwd_cuda(const CudaContext& ctx, LinearCudaPlan& plan, const void* x, const void* w, const void* dy,
                       void* dx, const void* prev_relu_mask, float* dw, float* db);

}  // namespace trctl
