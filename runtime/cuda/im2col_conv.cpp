// im2col + cuBLASLt convolutions (im2col_conv.h): planning (chunking, one GEMM plan per chunk shape and beta) and
// the forward and weight-gradient launch sequences.
#include "runtime/cuda/im2col_conv.h"

#include <algorithm>

#include "runtime/cuda/cuda_check.h"
#include "runtime/ops/channel_copy/channel_copy_cuda.h"
#include "runtime/ops/conv2d/im2col.h"
#include "runtime/ops/conv2d/im2col_cuda.h"

namespace trctl {
namespace {

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// The GEMM of a chunk of `rows` rows (see the header's formulas; row-major lt_gemm terms).
GemmDesc chunk_gemm(const Im2colConvPlan& p, int64_t rows, bool accumulate) {
  const Im2colConvDesc& d = p.desc;
  GemmDesc gd;
  gd.ab_type = d.io;
  gd.min_alignment = 16;
  if (d.dir == Im2colDir::Fwd) {  // y (rows, K) = cols (rows, Kc) * Wc (K, Kc)^T [+ bias]
    gd.m = rows, gd.n = d.g.k, gd.k = p.kc;
    gd.trans_b = true;
    gd.d_type = d.io;
    gd.epilogue = d.bias ? GemmEpilogue::Bias : GemmEpilogue::None;
  } else {  // dWc (K, Kc) [+]= dY (rows, K)^T * cols (rows, Kc)
    gd.m = d.g.k, gd.n = p.kc, gd.k = rows;
    gd.trans_a = true;
    gd.d_type = GpuDType::F32;
    gd.beta = accumulate ? 1.0f : 0.0f;
  }
  return gd;
}

// Runs fn(chunk index, first row, rows, gemm plan) for every chunk in row order.
template <class Fn>
Status for_each_chunk(Im2colConvPlan& p, const Fn& fn) {
  for (int64_t i = 0; i < p.chunks; ++i) {
    const int64_t row0 = i * p.chunk_rows, rows = std::min(p.chunk_rows, p.rows - row0);
    LtGemmPlan& gemm = rows < p.chunk_rows ? p.tail : i == 0 || p.desc.dir == Im2colDir::Fwd ? p.full : p.full_acc;
    if (Status st = fn(row0, rows, gemm); !st.ok()) return st;
  }
  return ok_status();
}

Status check_ws(const Im2colConvPlan& p, void* ws, size_t ws_bytes) {
  TRCTL_CUDA_ARG_CHECK(p.full.op != nullptr, "im2col conv: plan is empty (moved from or failed)");
  TRCTL_CUDA_ARG_CHECK(ws && ws_bytes >= im2col_conv_workspace_bytes(p) && gpu_aligned(256, ws),
                       "im2col conv: workspace missing, smaller than im2col_conv_workspace_bytes or not 256-aligned");
  return ok_status();
}

}  // namespace

Result<Im2colConvPlan> im2col_conv_plan(const CudaContext& ctx, const Im2colConvDesc& d) {
  Im2colConvPlan p;
  p.desc = d;
  Conv2dGeom& g = p.desc.g;
  std::string why;
  if (!conv2d_geom_finish(g, &why)) return Error{ErrCode::Invalid, "im2col conv", why};
  if (g.groups != 1 || g.k % 8 != 0)
    return Error{ErrCode::Invalid, "im2col conv", conv2d_geom_str(g) + ": needs groups 1 and K % 8 == 0"};
  p.kc = im2col_cols(g);
  p.rows = g.n * g.p * g.q;
  const int64_t row_bytes = p.kc * static_cast<int64_t>(gpu_dtype_size(d.io));
  const int64_t cap_rows = static_cast<int64_t>(d.max_cols_bytes) / row_bytes / 128 * 128;
  if (cap_rows < 128)
    return Error{ErrCode::Invalid, "im2col conv",
                 "max_cols_bytes " + std::to_string(d.max_cols_bytes) + " holds fewer than 128 rows of " +
                     std::to_string(row_bytes) + " bytes"};
  // Equal chunks (a multiple of 128 rows each; the last takes the rest): as few as the cap allows.
  p.chunks = (p.rows + cap_rows - 1) / cap_rows;
  p.chunk_rows = p.chunks == 1 ? p.rows : ((p.rows + p.chunks - 1) / p.chunks + 127) / 128 * 128;
  p.chunks = (p.rows + p.chunk_rows - 1) / p.chunk_rows;
  p.cols_bytes = align256(static_cast<size_t>(p.chunk_rows * row_bytes));
  p.w_bytes = align256(static_cast<size_t>(g.k * p.kc) * (d.dir == Im2colDir::Fwd ? gpu_dtype_size(d.io) : 4));
  const int64_t tail_rows = p.rows - (p.chunks - 1) * p.chunk_rows;
  auto plan = [&](int64_t rows, bool acc, LtGemmPlan* out) -> Status {
    Result<LtGemmPlan> r = lt_gemm_plan(ctx, chunk_gemm(p, rows, acc));
    if (!r.ok()) return r.errors();
    *out = std::move(r.value());
    return ok_status();
  };
  if (Status st = plan(p.chunk_rows, false, &p.full); !st.ok()) return st.errors();
  if (d.dir == Im2colDir::Wgrad && p.chunks > 1)
    if (Status st = plan(p.chunk_rows, true, &p.full_acc); !st.ok()) return st.errors();
  if (tail_rows < p.chunk_rows)
    if (Status st = plan(tail_rows, d.dir == Im2colDir::Wgrad, &p.tail); !st.ok()) return st.errors();
  return Result<Im2colConvPlan>(std::move(p));
}

size_t im2col_conv_workspace_bytes(const Im2colConvPlan& p) { return p.cols_bytes + p.w_bytes; }

Status im2col_conv_fwd(const CudaContext& ctx, Im2colConvPlan& p, const void* x, const void* w, const void* bias,
                       void* y, void* ws, size_t ws_bytes) {
  TRCTL_CUDA_ARG_CHECK(p.desc.dir == Im2colDir::Fwd, "im2col_conv_fwd: a weight-gradient plan");
  if (Status st = check_ws(p, ws, ws_bytes); !st.ok()) return st;
  TRCTL_CUDA_ARG_CHECK(x && w && y && (bias != nullptr) == p.desc.bias,
                       "im2col_conv_fwd: null tensor, or a bias that the plan does not have (or the reverse)");
  const Conv2dGeom& g = p.desc.g;
  const GpuDType t = p.desc.io;
  const size_t e = gpu_dtype_size(t);
  void* cols = ws;
  void* wc = static_cast<char*>(ws) + p.cols_bytes;  // (K, Kc): the filter rows with zero columns appended
  if (Status st = channel_copy_cuda(ctx.stream, w, t, g.c * g.r * g.s, wc, t, p.kc, g.k); !st.ok()) return st;
  return for_each_chunk(p, [&](int64_t row0, int64_t rows, LtGemmPlan& gemm) -> Status {
    if (Status st = im2col_cuda(ctx.stream, g, t, x, row0, rows, p.kc, cols); !st.ok()) return st;
    GemmArgs a;
    a.a = cols;
    a.b = wc;
    a.d = static_cast<char*>(y) + static_cast<size_t>(row0 * g.k) * e;
    a.bias = const_cast<void*>(bias);
    return lt_gemm_run(ctx, gemm, a);
  });
}

Status im2col_conv_wgrad(const CudaContext& ctx, Im2colConvPlan& p, const void* dy, const void* x, float* dw,
                         void* ws, size_t ws_bytes) {
  TRCTL_CUDA_ARG_CHECK(p.desc.dir == Im2colDir::Wgrad, "im2col_conv_wgrad: a forward plan");
  if (Status st = check_ws(p, ws, ws_bytes); !st.ok()) return st;
  TRCTL_CUDA_ARG_CHECK(dy && x && dw, "im2col_conv_wgrad: null tensor");
  const Conv2dGeom& g = p.desc.g;
  const GpuDType t = p.desc.io;
  const size_t e = gpu_dtype_size(t);
  void* cols = ws;
  void* dwc = static_cast<char*>(ws) + p.cols_bytes;  // (K, Kc) fp32
  Status st = for_each_chunk(p, [&](int64_t row0, int64_t rows, LtGemmPlan& gemm) -> Status {
    if (Status s = im2col_cuda(ctx.stream, g, t, x, row0, rows, p.kc, cols); !s.ok()) return s;
    GemmArgs a;
    a.a = static_cast<const char*>(dy) + static_cast<size_t>(row0 * g.k) * e;
    a.b = cols;
    a.d = dwc;
    return lt_gemm_run(ctx, gemm, a);
  });
  if (!st.ok()) return st;
  return channel_copy_cuda(ctx.stream, dwc, GpuDType::F32, p.kc, dw, GpuDType::F32, g.c * g.r * g.s, g.k);
}

std::string im2col_conv_describe(const Im2colConvPlan& p) {
  const bool fwd = p.desc.dir == Im2colDir::Fwd;
  std::string s = std::string("im2col ") + (fwd ? "fwd" : "wgrad") + " " + gpu_dtype_name(p.desc.io) + " " +
                  conv2d_geom_str(p.desc.g) + (p.desc.bias ? " +bias" : "") + ": Kc " + std::to_string(p.kc) + ", " +
                  std::to_string(p.chunks) + " chunk(s) of " + std::to_string(p.chunk_rows) + " rows, workspace " +
                  std::to_string(im2col_conv_workspace_bytes(p)) + " B | GEMM " + lt_gemm_describe(p.full);
  return s;
}

}  // namespace trctl
