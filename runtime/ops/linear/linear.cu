// Linear layer plans and launches (see linear_cuda.h); host code only, the kernels are cuBLASLt's and bias_grad's.
#include "runtime/cuda/cuda_check.h"
#include "runtime/ops/bias_grad/bias_grad_cuda.h"
#include "runtime/ops/linear/linear_cuda.h"

namespace trctl {

namespace {

GemmDesc base_desc(const LinearCudaDesc& d, int64_t m, int64_t n, int64_t k, bool ta, bool tb, GpuDType out) {
  GemmDesc g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = ta;
  g.trans_b = tb;
  g.ab_type = d.act_type;
  g.d_type = out;
  g.math = d.math;
  return g;
}

}  // namespace

Result<LinearCudaPlan> linear_cuda_plan(const CudaContext& ctx, const LinearCudaDesc& d) {
  TRCTL_CUDA_ARG_CHECK(d.batch > 0 && d.in > 0 && d.out > 0, "linear_cuda_plan: sizes must be >= 1");
  TRCTL_CUDA_ARG_CHECK(!d.save_relu_mask || d.relu, "linear_cuda_plan: save_relu_mask needs relu");
  LinearCudaPlan p;
  p.desc = d;
  // forward: (m, n, k) = (N, out, in), A = X, B = W (stored (out, in) = (n, k): trans_b)
  GemmDesc f = base_desc(d, d.batch, d.out, d.in, false, true, d.out_type);
  f.epilogue = d.relu ? (d.save_relu_mask ? GemmEpilogue::ReluAuxBias : GemmEpilogue::ReluBias) : GemmEpilogue::Bias;
  auto fwd = lt_gemm_plan(ctx, f);
  if (!fwd) return fwd.errors();
  p.fwd = std::move(fwd.value());
  // dX: (N, in, out), A = dY, B = W (stored (out, in) = (k, n))
  if (d.need_dx) {
    GemmDesc x = base_desc(d, d.batch, d.in, d.out, false, false, d.act_type);
    x.epilogue = d.dx_drelu ? GemmEpilogue::DRelu : GemmEpilogue::None;
    auto dx = lt_gemm_plan(ctx, x);
    if (!dx) return dx.errors();
    p.dx = std::move(dx.value());
  }
  // dW: (out, in, N), A = dY (stored (N, out) = (k, m): trans_a), B = X; f32 output (master gradients)
  GemmDesc w = base_desc(d, d.out, d.in, d.batch, true, false, GpuDType::F32);
  p.bias_grad_path = d.bias_grad;
  if (d.bias_grad == BiasGradPath::GemmEpilogue) {
    w.epilogue = GemmEpilogue::BiasGradA;
    auto dw = lt_gemm_plan(ctx, w);
    if (dw) {
      p.dw = std::move(dw.value());
      return Result<LinearCudaPlan>(std::move(p));
    }
    if (dw.errors()[0].code != ErrCode::NotSupported) return dw.errors();
    p.bias_grad_path = BiasGradPath::Kernel;
    p.notes = "db by bias_grad_cuda: " + dw.errors()[0].message;
  }
  w.epilogue = GemmEpilogue::None;
  auto dw = lt_gemm_plan(ctx, w);
  if (!dw) return dw.errors();
  p.dw = std::move(dw.value());
  return Result<LinearCudaPlan>(std::move(p));
}

Status linear_fwd_cuda(const CudaContext& ctx, LinearCudaPlan& p, const void* x, const void* w, const void* b,
                       void* y, void* relu_mask) {
  GemmArgs a;
  a.a = x;
  a.b = w;
  a.d = y;
  a.bias = const_cast<void*>(b);  // read-only for the forward epilogues
  a.aux = p.desc.save_relu_mask ? relu_mask : nullptr;
  return lt_gemm_run(ctx, p.fwd, a);
}

Status linear_bwd_cuda(const CudaContext& ctx, LinearCudaPlan& p, const void* x, const void* w, const void* dy,
                       void* dx, const void* prev_relu_mask, float* dw, float* db) {
  if (p.desc.need_dx) {
    GemmArgs a;
    a.a = dy;
    a.b = w;
    a.d = dx;
    a.aux = p.desc.dx_drelu ? const_cast<void*>(prev_relu_mask) : nullptr;  // read-only for DRelu
    Status st = lt_gemm_run(ctx, p.dx, a);
    if (!st) return st;
  }
  GemmArgs a;
  a.a = dy;
  a.b = x;
  a.d = dw;
  if (p.bias_grad_path == BiasGradPath::GemmEpilogue) a.bias = db;
  Status st = lt_gemm_run(ctx, p.dw, a);
  if (!st) return st;
  if (p.bias_grad_path == BiasGradPath::Kernel) {
    return bias_grad_cuda(ctx.stream, dy, p.desc.act_type, p.desc.batch, p.desc.out, 0, db, false);
  }
  return ok_status();
}

}  // namespace trctl
