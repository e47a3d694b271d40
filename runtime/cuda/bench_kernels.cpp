// cuda_bench_kernels: ceilings first (copy bandwidth, GEMM rates), then every kernel at sizes that fill the chip
// and at the MLP's own sizes, then the RGB-stem convolutions (im2col + GEMM, space-to-depth + cuDNN, plain cuDNN);
// median of repeated event-timed launches after a warm-up.
#include "runtime/cuda/bench_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/cudnn_fused_conv.h"
#include "runtime/cuda/im2col_conv.h"
#include "runtime/cuda/lt_gemm.h"
#include "runtime/cuda/s2d_conv.h"
#include "runtime/ops/amp/amp_cuda.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "runtime/ops/bias_grad/bias_grad_cuda.h"
#include "runtime/ops/cast/cast_cuda.h"
#include "runtime/ops/channel_copy/channel_copy_cuda.h"
#include "runtime/ops/conv2d/fewc_cuda.h"
#include "runtime/ops/conv2d/wgconv.h"
#include "runtime/ops/conv2d/s2d.h"
#include "runtime/ops/dropout/dropout_cuda.h"
#include "runtime/ops/optim/optim_cuda.h"
#include "runtime/ops/optim/optim_extra_cuda.h"
#include "runtime/ops/pool/pool_cuda.h"
#include "runtime/ops/relu/relu_cuda.h"
#include "runtime/ops/softmax_ce/softmax_ce_cuda.h"
#include "runtime/report/json.h"

namespace trctl {
namespace {

struct DeviceBuffer {
  void* p = nullptr;
  ~DeviceBuffer() { TRCTL_CUDA_WARN(cudaFree(p)); }
};

// Median time in microseconds of `reps` launches of f, after `warm` untimed ones.
Result<double> time_us(cudaStream_t s, const std::function<Status()>& f, int warm = 3, int reps = 20) {
  for (int i = 0; i < warm; ++i) {
    Status st = f();
    if (!st.ok()) return st.errors();
  }
  cudaEvent_t a, b;
  TRCTL_CUDA_TRY(cudaEventCreate(&a));
  TRCTL_CUDA_TRY(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    TRCTL_CUDA_TRY(cudaEventRecord(a, s));
    Status st = f();
    if (!st.ok()) return st.errors();
    TRCTL_CUDA_TRY(cudaEventRecord(b, s));
    TRCTL_CUDA_TRY(cudaEventSynchronize(b));
    float ms = 0;
    TRCTL_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1000.0 * ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Random floats in [-1, 1) (never zeros: zeros can run faster than real data).
Status fill_random(void* p, size_t floats, uint32_t seed) {
  std::vector<float> h(floats);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (auto& x : h) x = d(rng);
  TRCTL_CUDA_TRY(cudaMemcpy(p, h.data(), floats * 4, cudaMemcpyHostToDevice));
  return ok_status();
}

struct Bench {
  CudaContext& ctx;
  std::vector<KernelBenchRow> rows;
  std::vector<std::string> only;  // `--only`: the rows whose name contains one of these (empty: every row)
  double copy_gbs = 0, gemm_f16 = 0, gemm_f32 = 0, gemm_tf32 = 0;

  // Whether row `name` runs: every row without `--only`, else the ceilings (every row is set against them) and the
  // rows whose name contains one of its strings.
  bool wanted(const std::string& name) const {
    if (only.empty() || name.rfind("ceiling:", 0) == 0) return true;
    for (const std::string& o : only)
      if (name.find(o) != std::string::npos) return true;
    return false;
  }
  // A row without a timing (a path with no engine or not supported here), kept when wanted.
  void note(KernelBenchRow r) {
    if (wanted(r.name)) rows.push_back(std::move(r));
  }

  Status add(const std::string& name, const std::string& size, double bytes_or_flops, bool flops, double ceiling,
             const std::function<Status()>& f) {
    if (!wanted(name)) return ok_status();
    Result<double> us = time_us(ctx.stream, f);
    if (!us.ok()) return us.errors();
    KernelBenchRow r;
    r.name = name;
    r.size = size;
    r.unit = flops ? "TFLOP/s" : "GB/s";
    r.median_us = us.value();
    r.achieved = flops ? bytes_or_flops / (us.value() * 1e6) : bytes_or_flops / (us.value() * 1e3);
    r.ceiling = ceiling;
    rows.push_back(r);
    return ok_status();
  }

  // D = A B for (m, n, k) square-ish; returns TFLOP/s. record: a row named `name` against `ceiling` (< 0: the
  // rate itself, for the ceiling rows); a row `--only` leaves out is not run (0 returned).
  Result<double> gemm_rate(GpuDType t, GemmMath math, int64_t m, int64_t n, int64_t k, void* a, void* b, void* d,
                           bool record, const std::string& name, double ceiling = -1) {
    if (record && !wanted(name)) return 0.0;
    GemmDesc desc;
    desc.m = m;
    desc.n = n;
    desc.k = k;
    desc.trans_b = true;
    desc.ab_type = desc.d_type = t;
    desc.math = math;
    Result<LtGemmPlan> plan = lt_gemm_plan(ctx, desc);
    if (!plan.ok()) return plan.errors();
    LtGemmPlan& pl = plan.value();
    GemmArgs args;
    args.a = a;
    args.b = b;
    args.d = d;
    Result<double> us = time_us(ctx.stream, [&] { return lt_gemm_run(ctx, pl, args); });
    if (!us.ok()) return us.errors();
    const double tflops = 2.0 * m * n * k / (us.value() * 1e6);
    if (record) {
      KernelBenchRow r{name, std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k), "TFLOP/s",
                       us.value(), tflops, ceiling < 0 ? tflops : ceiling};
      rows.push_back(r);
    }
    return tflops;
  }
};

// Gradient clipping's norm, the EMA and LARS over the n-float region (LARS as one tensor: its chunked norms, then
// the update). h: an advanced hyper block (step >= 2, so the EMA and the momentum buffer take their general path).
Status bench_optim_extra(Bench& b, const std::string& sz, int64_t n, const OptHyper* h, float* p, const float* g,
                         float* buf, float* ema) {
  const cudaStream_t s = b.ctx.stream;
  const double bw = b.copy_gbs;
  DeviceBuffer ws, clip, tensors, chunks, norms;
  TRCTL_CUDA_TRY(cudaMalloc(&ws.p, grad_global_norm_workspace_bytes(n)));
  TRCTL_CUDA_TRY(cudaMalloc(&clip.p, sizeof(GradClipState)));
  Status st = b.add("grad_global_norm f32", sz, 4.0 * n, false, bw, [&] {
    return grad_global_norm_cuda(s, h, g, n, 1.0, ws.p, static_cast<GradClipState*>(clip.p));
  });
  if (st.ok()) st = b.add("ema_update over a region", sz, 12.0 * n, false, bw, [&] { return ema_update_cuda(s, h, p, ema, n, 0.999); });
  if (!st.ok()) return st;
  LarsTensor t;
  t.n = n;
  t.adapt = 1;
  Result<LarsTables> lt = lars_tables({t});
  if (!lt.ok()) return lt.errors();
  const size_t tb = lt->tensors.size() * sizeof(LarsTensor), cb = lt->chunks.size() * sizeof(LarsChunk);
  const int32_t count = static_cast<int32_t>(lt->chunks.size());
  TRCTL_CUDA_TRY(cudaMalloc(&tensors.p, tb));
  TRCTL_CUDA_TRY(cudaMalloc(&chunks.p, cb));
  TRCTL_CUDA_TRY(cudaMalloc(&norms.p, lars_workspace_bytes(count)));
  TRCTL_CUDA_TRY(cudaMemcpy(tensors.p, lt->tensors.data(), tb, cudaMemcpyHostToDevice));
  TRCTL_CUDA_TRY(cudaMemcpy(chunks.p, lt->chunks.data(), cb, cudaMemcpyHostToDevice));
  const LarsDevice d{static_cast<const LarsTensor*>(tensors.p), static_cast<const LarsChunk*>(chunks.p), count,
                     static_cast<double*>(norms.p)};
  // p and g read twice (norms, update), buf read and written, p written
  return b.add("lars over a region (one tensor)", sz, 28.0 * n, false, bw, [&] {
    return lars_step_cuda(s, h, d, LarsConsts{}, p, g, buf);
  });
}

// n f16 values from the 64 Mi random floats `src` (repeated): random conv operands without a host copy.
Status fill_f16(cudaStream_t s, const void* src, int64_t src_n, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += src_n)
    if (Status st = cast_cuda(s, src, GpuDType::F32, static_cast<char*>(dst) + i * 2, GpuDType::F16,
                              std::min(src_n, n - i));
        !st.ok())
      return st;
  return ok_status();
}

// The ResNet-50 stem through space-to-depth + a stride-1 cuDNN conv over 16 channels (s2d_conv.h, the backend's
// path under AMP: the forward with train.conv_s2d: forward (the default) or on, the weight gradient with on):
// forward with the x -> z and w -> w2 transforms, weight gradient with x -> z, the cuDNN wgrad into f16 dw2 and
// its regather into the fp32 dw, all inside the timed work.
Status bench_stem_s2d(Bench& b, const Conv2dGeom& g, const std::string& name, const std::string& size, double flops,
                      const void* x, const void* w, void* y, const void* dy, float* dw) {
  ConvDesc cd;
  cd.g = s2d_conv_geom(g);
  cd.io = GpuDType::F16;
  cd.need_dgrad = false;
  Result<CudnnConvPlan> plan = cudnn_conv_plan(b.ctx.cudnn, cd);
  if (!plan.ok()) return plan.errors();
  const size_t wsb = std::max<size_t>(cudnn_conv_workspace_bytes(plan.value()), 256);
  DeviceBuffer z, w2, dw2, ws;
  for (auto [buf, bytes] : {std::pair{&z, s2d_conv_input_bytes(g, GpuDType::F16)},
                            {&w2, s2d_conv_filter_bytes(g, GpuDType::F16)},
                            {&dw2, s2d_conv_filter_bytes(g, GpuDType::F16)}, {&ws, wsb}})
    TRCTL_CUDA_TRY(cudaMalloc(&buf->p, bytes));
  const cudaStream_t s = b.ctx.stream;
  const CudnnConvPlan& p = plan.value();
  Status st = b.add(name + " fwd s2d f16", size, flops, true, b.gemm_f16, [&] {
    return s2d_conv_fwd(b.ctx.cudnn, s, g, p, x, w, nullptr, y, z.p, w2.p, ws.p, wsb);
  });
  if (st.ok()) st = b.add(name + " wgrad s2d f16", size, flops, true, b.gemm_f16, [&] {
    return s2d_conv_wgrad(b.ctx.cudnn, s, g, p, dy, x, dw, z.p, dw2.p, ws.p, wsb);
  });
  return st;
}

// The RGB stems at batch 256 in f16 (docs/cnn.md), forward and weight gradient, through the im2col + GEMM path the
// backend runs under AMP (im2col_conv.h) and through the cuDNN path it ran before: forward on C padded to 8 (the
// two pad copies included), weight gradient unpadded plus the cast of dW to fp32; and for the stride-2 ResNet-50
// stem the space-to-depth path (bench_stem_s2d); the forward through trctl's few-channel tensor-core kernel
// (fewc_cuda.h). TFLOP/s of the real C = 3 work.
Status bench_stem_convs(Bench& b, const void* random, int64_t random_n) {
  const cudaStream_t s = b.ctx.stream;
  struct Shape {
    const char* name;
    int64_t hw, rs, stride, pad;
  };
  for (const Shape& sh : {Shape{"conv r50 stem 7x7/2", 224, 7, 2, 3}, Shape{"conv vgg16 conv0 3x3", 224, 3, 1, 1}}) {
    Conv2dGeom g;
    g.n = 256, g.h = g.w = sh.hw, g.c = 3, g.k = 64, g.r = g.s = sh.rs;
    g.stride_h = g.stride_w = sh.stride, g.pad_h = g.pad_w = sh.pad;
    std::string why;
    if (!conv2d_geom_finish(g, &why)) return Error{ErrCode::Internal, "bench kernels", why};
    const int64_t nx = g.n * g.h * g.w, ny = g.n * g.p * g.q * g.k, rsk = g.k * g.r * g.s;
    const double flops = 2.0 * static_cast<double>(ny) * static_cast<double>(g.c * g.r * g.s);
    const std::string size = "N=256 " + std::to_string(sh.hw) + "^2 3->64";
    DeviceBuffer x, xp, w, wp, y, dy, dw, dwl, ws;
    for (auto [buf, bytes] : {std::pair{&x, nx * 3 * 2}, {&xp, nx * 8 * 2}, {&w, rsk * 3 * 2}, {&wp, rsk * 8 * 2},
                              {&y, ny * 2}, {&dy, ny * 2}, {&dw, rsk * 3 * 4}, {&dwl, rsk * 3 * 2}})
      TRCTL_CUDA_TRY(cudaMalloc(&buf->p, static_cast<size_t>(bytes)));
    for (auto [buf, n] : {std::pair{&x, nx * 3}, {&w, rsk * 3}, {&dy, ny}})
      if (Status st = fill_f16(s, random, random_n, buf->p, n); !st.ok()) return st;
    Im2colConvDesc id;
    id.g = g;
    id.io = GpuDType::F16;
    Result<Im2colConvPlan> fwd = im2col_conv_plan(b.ctx, id);
    id.dir = Im2colDir::Wgrad;
    Result<Im2colConvPlan> wgrad = im2col_conv_plan(b.ctx, id);
    if (!fwd.ok()) return fwd.errors();
    if (!wgrad.ok()) return wgrad.errors();
    ConvDesc cd;
    cd.g = g;
    cd.io = GpuDType::F16;
    cd.need_dgrad = false;
    Result<CudnnConvPlan> real = cudnn_conv_plan(b.ctx.cudnn, cd);  // the wgrad's plan (C = 3)
    cd.g.c = 8;
    Result<CudnnConvPlan> padded = cudnn_conv_plan(b.ctx.cudnn, cd);  // the forward's plan (C = 8)
    if (!real.ok()) return real.errors();
    if (!padded.ok()) return padded.errors();
    const size_t wsb = std::max({im2col_conv_workspace_bytes(fwd.value()), im2col_conv_workspace_bytes(wgrad.value()),
                                 cudnn_conv_workspace_bytes(real.value()), cudnn_conv_workspace_bytes(padded.value())});
    TRCTL_CUDA_TRY(cudaMalloc(&ws.p, wsb));
    const double ceil = b.gemm_f16;
    const std::string n = sh.name;
    Status st = b.add(n + " fwd im2col f16", size, flops, true, ceil, [&] {
      return im2col_conv_fwd(b.ctx, fwd.value(), x.p, w.p, nullptr, y.p, ws.p, wsb);
    });
    if (st.ok()) st = b.add(n + " fwd cudnn C8 f16", size, flops, true, ceil, [&]() -> Status {
      if (Status c = channel_copy_cuda(s, x.p, GpuDType::F16, 3, xp.p, GpuDType::F16, 8, nx); !c.ok()) return c;
      if (Status c = channel_copy_cuda(s, w.p, GpuDType::F16, 3, wp.p, GpuDType::F16, 8, rsk); !c.ok()) return c;
      return cudnn_conv_fwd(b.ctx.cudnn, s, padded.value(), xp.p, wp.p, nullptr, y.p, ws.p, wsb);
    });
    if (st.ok()) st = b.add(n + " wgrad im2col f16", size, flops, true, ceil, [&] {
      return im2col_conv_wgrad(b.ctx, wgrad.value(), dy.p, x.p, static_cast<float*>(dw.p), ws.p, wsb);
    });
    if (st.ok()) st = b.add(n + " wgrad cudnn C3 f16", size, flops, true, ceil, [&]() -> Status {
      if (Status c = cudnn_conv_wgrad(b.ctx.cudnn, s, real.value(), dy.p, x.p, dwl.p, ws.p, wsb); !c.ok()) return c;
      return channel_copy_cuda(s, dwl.p, GpuDType::F16, 3, dw.p, GpuDType::F32, 3, rsk);
    });
    if (st.ok() && s2d_conv_eligible(g))
      st = bench_stem_s2d(b, g, n, size, flops, x.p, w.p, y.p, dy.p, static_cast<float*>(dw.p));
    if (st.ok()) {  // the backend's forward under AMP with train.conv_fewc: on (the default) or forward
      Result<FewcConvPlan> fp = fewc_conv_plan(g, GpuDType::F16);
      if (!fp.ok()) return fp.errors();
      st = b.add(n + " fwd fewc f16", size, flops, true, ceil,
                 [&] { return fewc_conv_fwd_cuda(s, fp.value(), x.p, w.p, nullptr, y.p); });
      // train.conv_bn_stats fused/auto: y's batch statistics from the epilogue (the batch norm's statistics pass,
      // a read of y, saved).
      if (st.ok() && fp.value().stats) {
        DeviceBuffer sws, sums;
        const size_t swsb = fewc_stats_workspace_bytes(fp.value());
        TRCTL_CUDA_TRY(cudaMalloc(&sws.p, swsb));
        TRCTL_CUDA_TRY(cudaMalloc(&sums.p, static_cast<size_t>(2 * g.k) * 4));
        FewcStatsOut so;
        so.sum = static_cast<float*>(sums.p);
        so.sqsum = so.sum + g.k;
        so.ws = sws.p;
        so.ws_bytes = swsb;
        st = b.add(n + " fwd fewc+stats f16", size, flops, true, ceil,
                   [&] { return fewc_conv_fwd_cuda(s, fp.value(), x.p, w.p, nullptr, y.p, &so); });
      }
    }
    if (st.ok() && fewc_wgrad_eligible(g)) {  // with train.conv_fewc: on (the default)
      Result<FewcWgradPlan> wp = fewc_wgrad_plan(g, GpuDType::F16);
      if (!wp.ok()) return wp.errors();
      DeviceBuffer fws;
      const size_t fwsb = fewc_wgrad_workspace_bytes(wp.value());
      TRCTL_CUDA_TRY(cudaMalloc(&fws.p, fwsb));
      st = b.add(n + " wgrad fewc f16", size, flops, true, ceil, [&] {
        return fewc_conv_wgrad_cuda(s, wp.value(), dy.p, x.p, static_cast<float*>(dw.p), fws.p, fwsb);
      });
      // The batch norm's dx folded in (fewc_bn_grad.h; VGG16-BN's features_1): g = dy, the batch norm's input = y,
      // per-channel gamma 1, mean 0, invstd 1, dgamma = dbeta = 0.1 and the ReLU mask recomputed (beta 0).
      Result<FewcWgradPlan> bp = fewc_wgrad_plan(g, GpuDType::F16, true);
      if (st.ok() && bp.ok()) {
        DeviceBuffer prm, bws;
        std::vector<float> host(static_cast<size_t>(6 * g.k), 0.0f);
        std::fill(host.begin(), host.begin() + g.k, 1.0f);                 // gamma
        std::fill(host.begin() + 2 * g.k, host.begin() + 3 * g.k, 1.0f);   // invstd
        std::fill(host.begin() + 3 * g.k, host.begin() + 5 * g.k, 0.1f);   // dgamma, dbeta
        TRCTL_CUDA_TRY(cudaMalloc(&prm.p, host.size() * 4));
        TRCTL_CUDA_TRY(cudaMemcpy(prm.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
        const size_t bwsb = fewc_wgrad_workspace_bytes(bp.value());
        TRCTL_CUDA_TRY(cudaMalloc(&bws.p, bwsb));
        const float* pf = static_cast<const float*>(prm.p);
        FewcBnGradIn bn;
        bn.g = dy.p;
        bn.x = y.p;
        bn.gamma = pf, bn.mean = pf + g.k, bn.invstd = pf + 2 * g.k, bn.dgamma = pf + 3 * g.k;
        bn.dbeta = pf + 4 * g.k, bn.relu_beta = pf + 5 * g.k;
        st = b.add(n + " wgrad fewc+bn dx f16", size, flops, true, ceil, [&] {
          return fewc_conv_wgrad_cuda(s, bp.value(), nullptr, x.p, static_cast<float*>(dw.p), bws.p, bwsb, &bn);
        });
        // With train.conv_bn_backward fused (conv_bn_bwd_choose's fewc_dx): g arrives masked from cuDNN's graph (d),
        // the prologue applies no mask (the kernel variant without relu_beta).
        FewcBnGradIn masked = bn;
        masked.relu_beta = nullptr;
        if (st.ok())
          st = b.add(n + " wgrad fewc+bn dx (masked g) f16", size, flops, true, ceil, [&] {
            return fewc_conv_wgrad_cuda(s, bp.value(), nullptr, x.p, static_cast<float*>(dw.p), bws.p, bwsb, &masked);
          });
      }
    }
    if (!st.ok()) return st;
  }
  return ok_status();
}

// Batch norm + ReLU + max pool at batch 256 in f16, at ResNet-50's stem (x 256x112x112x64, 3x3/2 pad 1) and at
// VGG16-BN's first pool (256x224x224x64, 2x2/2): the fused training forward and backward (batchnorm_pool.cu; the
// backward in every gather mode) and the unfused chains they replace (batch norm with the ReLU, then the max pool
// with its argmax; the max-pool backward into a full-resolution dy, then the batch-norm backward). GB/s of the op's
// own bytes (x read once, the pooled y and argmax written; backward: x, the pooled dy and argmax read, dx
// written), so the variants compare directly.
Status bench_bn_pool(Bench& b, const void* random, int64_t random_n, Pool2dGeom g, const std::string& n) {
  const cudaStream_t s = b.ctx.stream;
  if (!pool2d_geom_finish(g)) return Error{ErrCode::Internal, "bench kernels", n + ": pool geometry"};
  const int64_t rows = g.n * g.h * g.w, nx = rows * g.c, ny = g.n * g.p * g.q * g.c;
  const size_t wsb = batchnorm_workspace_bytes(rows, g.c);
  DeviceBuffer x, y, idx, dy, dx, full, full_dy, ws, par;
  for (auto [buf, bytes] : {std::pair{&x, nx * 2}, {&y, ny * 2}, {&idx, ny}, {&dy, ny * 2}, {&dx, nx * 2},
                            {&full, nx * 2}, {&full_dy, nx * 2}, {&par, g.c * 4 * 10}})
    TRCTL_CUDA_TRY(cudaMalloc(&buf->p, static_cast<size_t>(bytes)));
  TRCTL_CUDA_TRY(cudaMalloc(&ws.p, wsb));
  for (auto [buf, n] : {std::pair{&x, nx}, {&dy, ny}})
    if (Status st = fill_f16(s, random, random_n, buf->p, n); !st.ok()) return st;
  float* pf = static_cast<float*>(par.p);  // (10, c): gamma, beta, mean, invstd, running mean, var, dgamma, dbeta
  float *gamma = pf, *beta = pf + g.c, *mean = pf + 2 * g.c, *invstd = pf + 3 * g.c, *rm = pf + 4 * g.c,
        *rv = pf + 5 * g.c, *dgamma = pf + 6 * g.c, *dbeta = pf + 7 * g.c;
  if (Status st = fill_random(par.p, static_cast<size_t>(g.c) * 10, 7); !st.ok()) return st;
  uint8_t* ix = static_cast<uint8_t*>(idx.p);
  const double fwd_bytes = 2.0 * nx + 3.0 * ny, bwd_bytes = 4.0 * nx + 3.0 * ny;
  const std::string size = "N=256 " + std::to_string(g.h) + "^2x" + std::to_string(g.c);
  const float eps = 1e-5f, mom = 0.1f;
  Status st = b.add(n + " fwd fused f16", size, fwd_bytes, false, b.copy_gbs, [&] {
    return batchnorm_fwd_train_pool_cuda(s, x.p, GpuDType::F16, gamma, beta, y.p, ix, mean, invstd, rm, rv, g, eps,
                                         mom, true, ws.p, wsb);
  });
  if (st.ok()) st = b.add(n + " fwd unfused f16", size, fwd_bytes, false, b.copy_gbs, [&]() -> Status {
    if (Status f = batchnorm_fwd_train_cuda(s, x.p, GpuDType::F16, gamma, beta, full.p, mean, invstd, rm, rv, rows,
                                            g.c, eps, mom, true, ws.p, wsb);
        !f.ok())
      return f;
    return maxpool2d_fwd_idx_cuda(s, g, full.p, y.p, ix, GpuDType::F16);
  });
  for (auto [mode, tag] : {std::pair{BnPoolGather::kOnceStored, " bwd fused (gather once) f16"},
                           {BnPoolGather::kTwice, " bwd fused (gather twice) f16"},
                           {BnPoolGather::kPoolThenDense, " bwd fused (pool then dense) f16"},
                           {BnPoolGather::kWindowDx, " bwd fused (dx per window) f16"},
                           {BnPoolGather::kAuto, " bwd fused (default) f16"}})
    if (st.ok()) st = b.add(n + tag, size, bwd_bytes, false, b.copy_gbs, [&] {
      return batchnorm_bwd_pool_cuda(s, dy.p, ix, x.p, GpuDType::F16, gamma, beta, mean, invstd, dx.p, dgamma,
                                     dbeta, g, ws.p, wsb, mode);
    });
  // Tiling windows: the forward also writing the x elements at the argmax, and the backward's statistics over the
  // pooled pixels (what training runs there since run 62).
  if (st.ok() && pool2d_windows_tile(g)) {
    DeviceBuffer xa;
    TRCTL_CUDA_TRY(cudaMalloc(&xa.p, static_cast<size_t>(ny) * 2));
    st = b.add(n + " fwd fused +x at argmax f16", size, fwd_bytes + 2.0 * ny, false, b.copy_gbs, [&] {
      return batchnorm_fwd_train_pool_cuda(s, x.p, GpuDType::F16, gamma, beta, y.p, ix, mean, invstd, rm, rv, g, eps,
                                           mom, true, ws.p, wsb, nullptr, {}, xa.p);
    });
    if (st.ok()) st = b.add(n + " bwd fused (pooled statistics) f16", size, bwd_bytes, false, b.copy_gbs, [&] {
      return batchnorm_bwd_pool_cuda(s, dy.p, ix, x.p, GpuDType::F16, gamma, beta, mean, invstd, dx.p, dgamma, dbeta,
                                     g, ws.p, wsb, BnPoolGather::kAuto, xa.p);
    });
  }
  if (st.ok()) st = b.add(n + " bwd unfused f16", size, bwd_bytes, false, b.copy_gbs, [&]() -> Status {
    if (Status f = maxpool2d_bwd_idx_cuda(s, g, dy.p, ix, full_dy.p, GpuDType::F16); !f.ok()) return f;
    return batchnorm_bwd_cuda(s, full_dy.p, x.p, nullptr, GpuDType::F16, gamma, mean, invstd, dx.p, dgamma, dbeta,
                              rows, g.c, ws.p, wsb, beta);
  });
  return st;
}

// A batch norm's per-channel f32 vectors for the conv + batch norm rows, views of one (8, c) block.
struct BnParams {
  float *gamma, *beta, *mean, *invstd, *rm, *rv, *sum, *sqsum;
  BnParams(float* p, int64_t c)
      : gamma(p), beta(p + c), mean(p + 2 * c), invstd(p + 3 * c), rm(p + 4 * c), rv(p + 5 * c), sum(p + 6 * c),
        sqsum(p + 7 * c) {}
};

// VGG16-BN's 3x3/1 layers (C = K) the conv + batch-norm rows time at batch 256, one per resolution.
struct VggLayer {
  int64_t hw, c;
  const char* name;
  int64_t k = 0;  // output channels; 0: C
};
constexpr VggLayer kVggBenchLayers[] = {{224, 64, "vgg16 conv1_2"}, {112, 128, "vgg16 conv2_2"},
                                        {56, 256, "vgg16 conv3_2"}, {28, 512, "vgg16 conv4_2"}};
// One such layer: its geometry, the convolution's FLOPs, the rows' size label and the legacy cuDNN plan (heuristics,
// non-deterministic algorithms allowed; with the data gradient when need_dgrad).
struct VggBenchConv {
  Conv2dGeom g;
  double flops = 0;
  std::string size;
  CudnnConvPlan legacy;
};
Result<VggBenchConv> vgg_bench_conv(Bench& b, const VggLayer& l, bool need_dgrad) {
  VggBenchConv v;
  v.g.n = 256, v.g.h = v.g.w = l.hw, v.g.c = l.c, v.g.k = l.k ? l.k : l.c, v.g.r = v.g.s = 3;
  v.g.pad_h = v.g.pad_w = 1;
  std::string why;
  if (!conv2d_geom_finish(v.g, &why)) return Error{ErrCode::Internal, "bench kernels", why};
  v.flops = 2.0 * static_cast<double>(v.g.n * v.g.p * v.g.q * v.g.k) * static_cast<double>(v.g.r * v.g.s * v.g.c);
  v.size = "N=256 " + std::to_string(l.hw) + "^2x" + std::to_string(l.c) +
           (v.g.k != l.c ? "->" + std::to_string(v.g.k) : std::string());
  ConvDesc cd;
  cd.g = v.g;
  cd.io = GpuDType::F16;
  cd.deterministic = false;
  cd.need_dgrad = need_dgrad;
  Result<CudnnConvPlan> legacy = cudnn_conv_plan(b.ctx.cudnn, cd);
  if (!legacy.ok()) return legacy.errors();
  v.legacy = std::move(legacy.value());
  return v;
}

// f(tile, plan) for each of `tiles` that wgconv plans for g (f16). A tile it does not take (NotSupported) gets a
// "<unsupported> <tile>: not supported" row when `unsupported` is not empty, else is skipped; other errors return.
template <class F>
Status each_wgconv_plan(Bench& b, const Conv2dGeom& g, const std::vector<WgConvTile>& tiles,
                        const std::string& unsupported, const std::string& size, F&& f) {
  for (WgConvTile t : tiles) {
    Result<WgConvPlan> p = wgconv_plan(g, GpuDType::F16, t);
    if (!p.ok()) {
      if (p.errors().front().code != ErrCode::NotSupported) return p.errors();
      if (!unsupported.empty())
        b.note({unsupported + " " + wgconv_tile_name(t) + ": not supported", size, "TFLOP/s", 0.0, 0.0, b.gemm_f16});
      continue;
    }
    if (Status st = f(t, p.value()); !st.ok()) return st;
  }
  return ok_status();
}

// VGG16-BN's 3x3 convolutions (batch 256, f16; conv2_1 is the 64 -> 128 one), cuDNN's legacy algorithm (heuristics,
// non-deterministic allowed) against trctl's wgmma conv (wgconv.h) with each kernel and CTA tile: the forward
// ("not supported" rows for a tile the layer or the device does not take), the input's batch norm + ReLU then the
// conv (C = 64: the ring kernels' prologue, RingPx256N64 with the statistics too, and with the activation written
// out as well), the data gradient, and the weight gradient (the ring weight-gradient kernel where C, K <= 128).
Status bench_wgconv(Bench& b, const void* random, int64_t random_n) {
  const cudaStream_t s = b.ctx.stream;
  constexpr VggLayer kLayers[] = {{224, 64, "vgg16 conv1_2"}, {112, 64, "vgg16 conv2_1", 128},
                                  {112, 128, "vgg16 conv2_2"}, {56, 256, "vgg16 conv3_2"}, {28, 512, "vgg16 conv4_2"}};
  for (const VggLayer& l : kLayers) {
    Result<VggBenchConv> vc = vgg_bench_conv(b, l, true);
    if (!vc.ok()) return vc.errors();
    const Conv2dGeom g = vc->g;
    const int64_t nx = g.n * g.h * g.w * g.c, ny = g.n * g.p * g.q * g.k, nw = g.k * g.r * g.s * g.c;
    const size_t wsb = std::max<size_t>(cudnn_conv_workspace_bytes(vc->legacy), 256);
    DeviceBuffer x, w, wf, y, ws;
    for (auto [buf, bytes] : {std::pair{&x, nx * 2}, {&w, nw * 2}, {&wf, nw * 2}, {&y, ny * 2}})
      TRCTL_CUDA_TRY(cudaMalloc(&buf->p, static_cast<size_t>(bytes)));
    TRCTL_CUDA_TRY(cudaMalloc(&ws.p, wsb));
    for (auto [buf, n] : {std::pair{&x, nx}, {&w, nw}, {&y, ny}})
      if (Status st = fill_f16(s, random, random_n, buf->p, n); !st.ok()) return st;
    const std::string n = std::string(l.name) + " fwd";
    Status st = b.add(n + " cudnn f16", vc->size, vc->flops, true, b.gemm_f16, [&] {
      return cudnn_conv_fwd(b.ctx.cudnn, s, vc->legacy, x.p, w.p, nullptr, y.p, ws.p, wsb);
    });
    const std::vector<WgConvTile> all(std::begin(kWgConvTiles), std::end(kWgConvTiles));
    if (st.ok())
      st = each_wgconv_plan(b, g, all, n + " wgconv", vc->size, [&](WgConvTile t, const WgConvPlan& p) {
        return b.add(n + " wgconv " + wgconv_tile_name(t) + " f16", vc->size, vc->flops, true, b.gemm_f16,
                     [&] { return wgconv_fwd_cuda(s, p, x.p, w.p, y.p); });
      });
    if (!st.ok()) return st;
    // The input's batch norm + ReLU then the conv (C = 64): the apply pass + cuDNN's conv against the ring kernels
    // applying it while staging (WgConvPrologue).
    if (g.c == 64) {
      DeviceBuffer par, z;
      TRCTL_CUDA_TRY(cudaMalloc(&par.p, 64 * 8 * sizeof(float)));
      TRCTL_CUDA_TRY(cudaMalloc(&z.p, static_cast<size_t>(nx) * 2));
      if (Status f = fill_random(par.p, 64 * 8, 21); !f.ok()) return f;
      TRCTL_CUDA_TRY(cudaMemset(static_cast<float*>(par.p) + 5 * 64, 0, 64 * sizeof(float)));  // running var 0
      const BnParams bp(static_cast<float*>(par.p), 64);
      const std::string nb = std::string(l.name) + " bn+relu->conv";
      const int64_t rows = g.n * g.h * g.w;
      st = b.add(nb + " apply + cudnn f16", vc->size, vc->flops, true, b.gemm_f16, [&]() -> Status {
        if (Status c = batchnorm_fwd_eval_cuda(s, x.p, GpuDType::F16, bp.gamma, bp.beta, bp.rm, bp.rv, z.p, rows, 64,
                                               1e-5f, true);
            !c.ok())
          return c;
        return cudnn_conv_fwd(b.ctx.cudnn, s, vc->legacy, z.p, w.p, nullptr, y.p, ws.p, wsb);
      });
      WgConvPrologue pro;
      pro.gamma = bp.gamma, pro.beta = bp.beta, pro.mean = bp.mean, pro.invstd = bp.invstd;
      const std::vector<WgConvTile> rings = {WgConvTile::Ring128N64, WgConvTile::Ring128N128,
                                             WgConvTile::RingPx256N64};
      if (st.ok())
        st = each_wgconv_plan(b, g, rings, "", vc->size, [&](WgConvTile t, const WgConvPlan& p) -> Status {
          Status r = b.add(nb + " wgconv " + wgconv_tile_name(t) + " prologue f16", vc->size, vc->flops, true,
                           b.gemm_f16, [&] { return wgconv_fwd_cuda(s, p, x.p, w.p, y.p, &pro); });
          if (!r.ok() || t != WgConvTile::RingPx256N64) return r;
          DeviceBuffer sws, sums;  // + y's statistics from the epilogue; sums: (2, K) f32 -- bp's are C = 64 wide
          const size_t swsb = wgconv_stats_workspace_bytes(p);
          TRCTL_CUDA_TRY(cudaMalloc(&sws.p, swsb));
          TRCTL_CUDA_TRY(cudaMalloc(&sums.p, static_cast<size_t>(g.k) * 2 * sizeof(float)));
          WgConvStats so;
          so.sum = static_cast<float*>(sums.p), so.sqsum = so.sum + g.k, so.ws = sws.p, so.ws_bytes = swsb;
          r = b.add(nb + "+stats wgconv " + wgconv_tile_name(t) + " prologue f16", vc->size, vc->flops, true,
                    b.gemm_f16, [&] { return wgconv_fwd_cuda(s, p, x.p, w.p, y.p, &pro, &so); });
          if (!r.ok()) return r;
          // The whole forward layer chain in one kernel: the activation written out too (for the weight gradient).
          WgConvPrologue pa = pro;
          pa.act_out = z.p;
          return b.add(nb + "+stats wgconv " + wgconv_tile_name(t) + " prologue+act f16", vc->size, vc->flops, true,
                       b.gemm_f16, [&] { return wgconv_fwd_cuda(s, p, x.p, w.p, y.p, &pa, &so); });
        });
      if (!st.ok()) return st;
    }
    // The data gradient (dy = y's random values): cuDNN's against the forward kernels on the flipped filters (the
    // flip, 0.04-0.3 MFLOP of copying, inside the timing); only the tiles the dgrad geometry takes.
    const std::string nd = std::string(l.name) + " dgrad";
    st = b.add(nd + " cudnn f16", vc->size, vc->flops, true, b.gemm_f16, [&] {
      return cudnn_conv_dgrad(b.ctx.cudnn, s, vc->legacy, y.p, w.p, x.p, ws.p, wsb);
    });
    if (st.ok())
      st = each_wgconv_plan(b, wgconv_dgrad_geom(g), all, "", vc->size, [&](WgConvTile t, const WgConvPlan& p) {
        return b.add(nd + " wgconv " + wgconv_tile_name(t) + " f16", vc->size, vc->flops, true, b.gemm_f16,
                     [&]() -> Status {
                       if (Status f = wgconv_flip_filters_cuda(s, GpuDType::F16, w.p, g.k, g.c, wf.p); !f.ok())
                         return f;
                       return wgconv_fwd_cuda(s, p, y.p, wf.p, x.p);
                     });
      });
    // With the next batch norm's backward reductions in the epilogue (train.conv_bn_backward fused on a wgconv data
    // gradient, WgConvBnBwd): g masked by the ReLU recomputed from bx (= x's random values) and stored elsewhere,
    // dgamma and dbeta (the flip and the partials' reduction inside the timing). C = 64 layers (the route's).
    if (st.ok() && g.k == 64) {
      Result<WgConvPlan> dp = wgconv_plan(wgconv_dgrad_geom(g), GpuDType::F16, WgConvTile::RingPx256N64);
      if (dp.ok()) {
        DeviceBuffer par, gm, pws;
        TRCTL_CUDA_TRY(cudaMalloc(&par.p, static_cast<size_t>(g.c) * 8 * sizeof(float)));
        TRCTL_CUDA_TRY(cudaMalloc(&gm.p, static_cast<size_t>(nx) * 2));
        TRCTL_CUDA_TRY(cudaMalloc(&pws.p, wgconv_stats_workspace_bytes(dp.value())));
        if (Status f = fill_random(par.p, g.c * 8, 23); !f.ok()) return f;
        const BnParams bp(static_cast<float*>(par.p), g.c);
        WgConvBnBwd bb;
        bb.x = x.p;
        bb.gamma = bp.gamma, bb.beta = bp.beta, bb.mean = bp.mean, bb.invstd = bp.invstd;
        bb.dgamma = bp.sum, bb.dbeta = bp.sqsum;
        bb.ws = pws.p, bb.ws_bytes = wgconv_stats_workspace_bytes(dp.value());
        const WgConvPlan p = dp.value();
        st = b.add(nd + " wgconv " + wgconv_tile_name(p.tile) + " + bn backward f16", vc->size, vc->flops, true,
                   b.gemm_f16, [&]() -> Status {
                     if (Status f = wgconv_flip_filters_cuda(s, GpuDType::F16, w.p, g.k, g.c, wf.p); !f.ok())
                       return f;
                     return wgconv_fwd_cuda(s, p, y.p, wf.p, gm.p, nullptr, nullptr, &bb);
                   });
      } else if (dp.errors().front().code != ErrCode::NotSupported) {
        return dp.errors();
      }
    }
    if (!st.ok()) return st;
    // The weight gradient: cuDNN's (dw in f16, the filter type) against the ring weight-gradient kernel (dw in
    // f32, its partials' reduction inside the timing; its taps as m64n64 and as merged m64n192 wgmma) where it
    // takes the layer (C and K of 64 or 128).
    const std::string nwg = std::string(l.name) + " wgrad";
    st = b.add(nwg + " cudnn f16", vc->size, vc->flops, true, b.gemm_f16, [&] {
      return cudnn_conv_wgrad(b.ctx.cudnn, s, vc->legacy, y.p, x.p, wf.p, ws.p, wsb);
    });
    if (st.ok() && wgconv_wgrad_ring_eligible(g)) {
      Result<WgConvWgradPlan> wp = wgconv_wgrad_plan(g, GpuDType::F16);
      if (!wp.ok() && wp.errors().front().code == ErrCode::NotSupported) {
        b.note({nwg + " wgconv ring: not supported", vc->size, "TFLOP/s", 0.0, 0.0, b.gemm_f16});
      } else if (!wp.ok()) {
        return wp.errors();
      } else {
        DeviceBuffer dw32, wws;
        const size_t wwsb = wgconv_wgrad_workspace_bytes(wp.value());
        TRCTL_CUDA_TRY(cudaMalloc(&dw32.p, static_cast<size_t>(nw) * 4));
        TRCTL_CUDA_TRY(cudaMalloc(&wws.p, wwsb));
        // Three m64n64 wgmma a k step, or one m64n192 (merged_taps), at the plan's pipeline depth; merged at the
        // shallowest depth too where the plan's is deeper.
        Result<WgConvWgradPlan> shallow = wgconv_wgrad_plan(g, GpuDType::F16, kWgconvWgradMinDepth);
        if (!shallow.ok()) return shallow.errors();
        std::vector<WgConvWgradPlan> rows(2, wp.value());
        rows[0].merged_taps = false;
        rows[1].merged_taps = true;
        if (shallow->depth != wp->depth) {
          rows.push_back(shallow.value());
          rows.back().merged_taps = true;
        }
        for (const WgConvWgradPlan& plan : rows)
          if (st.ok())
            st = b.add(nwg + (plan.merged_taps ? " wgconv ring merged" : " wgconv ring") + " depth " +
                           std::to_string(plan.depth) + " f16",
                       vc->size, vc->flops, true, b.gemm_f16, [&] {
                         return wgconv_wgrad_cuda(s, plan, y.p, x.p, static_cast<float*>(dw32.p), wws.p, wwsb);
                       });
        // x as a batch norm's input, normalised (+ ReLU) as its rows land (WgConvWgradPlan::prologue): the weight
        // gradient of conv(relu(bn(x))) without the apply pass's output. C = 64 (the layers whose forward folds it).
        Result<WgConvWgradPlan> pp = wgconv_wgrad_plan(g, GpuDType::F16, 0, true);
        if (!pp.ok() && pp.errors().front().code != ErrCode::NotSupported) return pp.errors();
        if (st.ok() && g.c == 64 && pp.ok()) {
          DeviceBuffer par;
          TRCTL_CUDA_TRY(cudaMalloc(&par.p, 64 * 8 * sizeof(float)));
          if (Status f = fill_random(par.p, 64 * 8, 22); !f.ok()) return f;
          const BnParams bp(static_cast<float*>(par.p), 64);
          WgConvPrologue pro;
          pro.gamma = bp.gamma, pro.beta = bp.beta, pro.mean = bp.mean, pro.invstd = bp.invstd;
          const WgConvWgradPlan plan = pp.value();
          st = b.add(nwg + " wgconv ring merged depth " + std::to_string(plan.depth) + " + bn prologue f16", vc->size,
                     vc->flops, true, b.gemm_f16, [&] {
                       return wgconv_wgrad_cuda(s, plan, y.p, x.p, static_cast<float*>(dw32.p), wws.p, wwsb, &pro);
                     });
        }
      }
    }
    if (!st.ok()) return st;
  }
  return ok_status();
}

// The train.conv_bn_apply rows of bench_conv_bn_stats for one layer (g: C = K; x, y, z (N, H, W, C) f16 with x
// random; bp its parameters).
Status bench_bn_apply_chain(Bench& b, const Conv2dGeom& g, const char* layer, const std::string& size, double flops,
                            const CudnnConvPlan& legacy, void* x, void* w, void* y, void* z, const BnParams& bp) {
  const cudaStream_t s = b.ctx.stream;
  const int64_t c = g.c, nx = g.n * g.h * g.w * c, nw = g.k * g.r * g.s * c, rows = g.n * g.h * g.w;
  float *gamma = bp.gamma, *beta = bp.beta, *mean = bp.mean, *invstd = bp.invstd, *rm = bp.rm, *rv = bp.rv,
        *sum = bp.sum, *sqsum = bp.sqsum;
  FusedConvDesc pd;
  pd.g = g;
  pd.io = GpuDType::F16;
  pd.prologue = true;
  Result<FusedConvPlan> pro = fused_conv_plan(b.ctx.cudnn, pd);
  FusedWgradDesc wd;
  wd.g = g;
  Result<FusedWgradPlan> wg = fused_wgrad_plan(b.ctx.cudnn, wd);
  const std::string n = std::string(layer) + " bn+relu->conv+bn";
  for (const std::vector<Error>* e : {pro.ok() ? nullptr : &pro.errors(), wg.ok() ? nullptr : &wg.errors()})
    if (e && e->front().code != ErrCode::NotSupported && e->front().code != ErrCode::Invalid) return *e;
  const size_t wsb =
      std::max({cudnn_conv_workspace_bytes(legacy), pro.ok() ? fused_conv_workspace_bytes(pro.value()) : size_t{0},
                wg.ok() ? fused_wgrad_workspace_bytes(wg.value()) : size_t{0}, size_t{256}});
  const size_t bnb = batchnorm_workspace_bytes(rows, c);
  DeviceBuffer y0, consts, dw, ws, bnws;
  for (auto [buf, bytes] : {std::pair{&y0, static_cast<size_t>(nx) * 2}, {&consts, static_cast<size_t>(c) * 4},
                            {&dw, static_cast<size_t>(nw) * 2}, {&ws, wsb}, {&bnws, bnb}})
    TRCTL_CUDA_TRY(cudaMalloc(&buf->p, bytes));
  void* shift = static_cast<char*>(consts.p) + c * 2;
  Status st = b.add(n + " separate f16", size, flops, true, b.gemm_f16, [&]() -> Status {
    Status r = batchnorm_fwd_train_cuda(s, x, GpuDType::F16, gamma, beta, y0.p, mean, invstd, rm, rv, rows, c, 1e-5f,
                                        0.1f, true, bnws.p, bnb);
    if (r.ok()) r = cudnn_conv_fwd(b.ctx.cudnn, s, legacy, y0.p, w, nullptr, y, ws.p, wsb);
    if (r.ok())
      r = batchnorm_fwd_train_cuda(s, y, GpuDType::F16, gamma, beta, z, mean, invstd, rm, rv, rows, c, 1e-5f, 0.1f,
                                   true, bnws.p, bnb);
    return r;
  });
  if (st.ok() && pro.ok()) {
    FusedConvArgs a;
    a.x = x, a.w = w, a.y = y, a.sum = sum, a.sqsum = sqsum, a.scale = consts.p, a.bias = shift;
    st = b.add(n + " prologue f16", size, flops, true, b.gemm_f16, [&]() -> Status {
      Status r = batchnorm_fwd_train_consts_cuda(s, x, GpuDType::F16, gamma, beta, mean, invstd, rm, rv, rows, c, 1e-5f,
                                                 0.1f, bnws.p, bnb, nullptr, BnSums{}, consts.p, GpuDType::F16);
      if (r.ok()) r = fused_conv_run(b.ctx.cudnn, s, pro.value(), a, ws.p, wsb);
      if (r.ok())
        r = batchnorm_fwd_train_cuda(s, y, GpuDType::F16, gamma, beta, z, mean, invstd, rm, rv, rows, c, 1e-5f, 0.1f,
                                     true, bnws.p, bnb, nullptr, nullptr, BnSums{sum, sqsum});
      return r;
    });
  } else if (st.ok()) {
    b.note({n + " prologue: no cuDNN engine", size, "TFLOP/s", 0.0, 0.0, b.gemm_f16});
  }
  // The weight gradient (dy = y): on the written y0 (legacy) and on relu(x * scale + shift) (graph (c)).
  const std::string nwg = std::string(layer) + " wgrad";
  if (st.ok()) st = b.add(nwg + " on y0 (legacy) f16", size, flops, true, b.gemm_f16, [&] {
    return cudnn_conv_wgrad(b.ctx.cudnn, s, legacy, y, y0.p, dw.p, ws.p, wsb);
  });
  if (st.ok() && wg.ok()) {
    FusedWgradArgs a;
    a.dy = y, a.x = x, a.scale = consts.p, a.bias = shift, a.dw = dw.p;
    st = b.add(nwg + " prologue (graph c) f16", size, flops, true, b.gemm_f16,
               [&] { return fused_wgrad_run(b.ctx.cudnn, s, wg.value(), a, ws.p, wsb); });
  } else if (st.ok()) {
    b.note({nwg + " prologue: no cuDNN engine", size, "TFLOP/s", 0.0, 0.0, b.gemm_f16});
  }
  return st;
}

// A conv -> training batch norm (+ ReLU) pair at batch 256 in f16, at VGG16-BN's layers (3x3/1, C = K), both ways
// train.conv_bn_stats runs it: separate (the legacy cuDNN conv with cuDNN's heuristics' algorithm, then the batch
// norm's statistics, finalize and apply passes) and fused (cuDNN's conv + genstats graph, then the finalize from its
// sums and the apply). Then the chain train.conv_bn_apply folds, the previous batch norm + ReLU on x -> this conv
// -> its batch norm: separate (the previous batch norm writes y0, the legacy conv reads it) vs prologue (the previous
// batch norm writes its f16 scale and shift, graph (b) applies them while loading x); and the conv's weight
// gradient on y0 (legacy) vs on relu(x * scale + shift) (graph (c)). TFLOP/s of the convolution's FLOPs for all,
// so the rows of one layer compare directly; a geometry cuDNN has no fused engine for gets a row that says so.
Status bench_conv_bn_stats(Bench& b, const void* random, int64_t random_n) {
  const cudaStream_t s = b.ctx.stream;
  for (const VggLayer& l : kVggBenchLayers) {
    Result<VggBenchConv> vc = vgg_bench_conv(b, l, false);
    if (!vc.ok()) return vc.errors();
    const Conv2dGeom g = vc->g;
    const int64_t nx = g.n * g.h * g.w * g.c, ny = g.n * g.p * g.q * g.k, nw = g.k * g.r * g.s * g.c;
    const int64_t rows = g.n * g.p * g.q;
    const double flops = vc->flops;
    const std::string size = vc->size;
    const CudnnConvPlan* legacy = &vc->legacy;
    FusedConvDesc fd;
    fd.g = g;
    fd.io = GpuDType::F16;
    Result<FusedConvPlan> fused = fused_conv_plan(b.ctx.cudnn, fd);
    if (!fused.ok() && fused.errors().front().code != ErrCode::NotSupported) return fused.errors();
    size_t wsb = std::max<size_t>(cudnn_conv_workspace_bytes(*legacy),
                                  fused.ok() ? fused_conv_workspace_bytes(fused.value()) : 0);
    DeviceBuffer x, w, y, z, ws, bnws, par;
    for (auto [buf, bytes] : {std::pair{&x, nx * 2}, {&w, nw * 2}, {&y, ny * 2}, {&z, ny * 2}, {&par, g.k * 4 * 8}})
      TRCTL_CUDA_TRY(cudaMalloc(&buf->p, static_cast<size_t>(bytes)));
    TRCTL_CUDA_TRY(cudaMalloc(&ws.p, std::max<size_t>(wsb, 256)));
    const size_t bnb = batchnorm_workspace_bytes(rows, g.k);
    TRCTL_CUDA_TRY(cudaMalloc(&bnws.p, bnb));
    for (auto [buf, n] : {std::pair{&x, nx}, {&w, nw}})
      if (Status st = fill_f16(s, random, random_n, buf->p, n); !st.ok()) return st;
    if (Status st = fill_random(par.p, static_cast<size_t>(g.k) * 8, 11); !st.ok()) return st;
    const BnParams bp(static_cast<float*>(par.p), g.k);
    float *gamma = bp.gamma, *beta = bp.beta, *mean = bp.mean, *invstd = bp.invstd, *rm = bp.rm, *rv = bp.rv,
          *sum = bp.sum, *sqsum = bp.sqsum;
    const std::string n = std::string(l.name) + " conv+bn+relu";
    Status st = b.add(n + " separate f16", size, flops, true, b.gemm_f16, [&]() -> Status {
      if (Status c = cudnn_conv_fwd(b.ctx.cudnn, s, *legacy, x.p, w.p, nullptr, y.p, ws.p, wsb); !c.ok())
        return c;
      return batchnorm_fwd_train_cuda(s, y.p, GpuDType::F16, gamma, beta, z.p, mean, invstd, rm, rv, rows, g.k, 1e-5f,
                                      0.1f, true, bnws.p, bnb);
    });
    if (!st.ok()) return st;
    if (!fused.ok()) {  // no engine: a row that says so
      b.note({n + " fused: no cuDNN engine", size, "TFLOP/s", 0.0, 0.0, b.gemm_f16});
      continue;
    }
    FusedConvArgs a;
    a.x = x.p, a.w = w.p, a.y = y.p, a.sum = sum, a.sqsum = sqsum;
    st = b.add(n + " fused f16", size, flops, true, b.gemm_f16, [&]() -> Status {
      if (Status c = fused_conv_run(b.ctx.cudnn, s, fused.value(), a, ws.p, wsb); !c.ok()) return c;
      return batchnorm_fwd_train_cuda(s, y.p, GpuDType::F16, gamma, beta, z.p, mean, invstd, rm, rv, rows, g.k, 1e-5f,
                                      0.1f, true, bnws.p, bnb, nullptr, nullptr, BnSums{sum, sqsum});
    });
    if (!st.ok()) return st;
    if (Status pc = bench_bn_apply_chain(b, g, l.name, size, flops, *legacy, x.p, w.p, y.p, z.p, bp);
        !pc.ok())
      return pc;
  }
  return ok_status();
}

// The backward train.conv_bn_backward fuses, at VGG16-BN's layers (batch 256, f16): the data gradient of the conv
// that read a batch norm + ReLU's output, then that batch norm's backward: separate (the legacy cuDNN dgrad, then
// the three backward passes with the ReLU mask recomputed from x) vs fused (graph (d): the masked g, dgamma and
// dbeta from the dgrad's epilogue, then the dx pass alone). TFLOP/s of the data gradient's FLOPs; a geometry cuDNN
// has no engine for gets a row that says so.
Status bench_conv_bn_bwd(Bench& b, const void* random, int64_t random_n) {
  const cudaStream_t s = b.ctx.stream;
  for (const VggLayer& l : kVggBenchLayers) {
    Result<VggBenchConv> vc = vgg_bench_conv(b, l, true);
    if (!vc.ok()) return vc.errors();
    const Conv2dGeom g = vc->g;
    const int64_t nx = g.n * g.h * g.w * g.c, ny = g.n * g.p * g.q * g.k, nw = g.k * g.r * g.s * g.c;
    const int64_t rows = g.n * g.h * g.w;  // the batch norm's rows: the conv's input pixels
    const double flops = vc->flops;
    const std::string size = vc->size;
    const CudnnConvPlan* legacy = &vc->legacy;
    FusedDgradDesc fd;
    fd.g = g;
    Result<FusedDgradPlan> fused = fused_dgrad_plan(b.ctx.cudnn, fd);
    if (!fused.ok() && fused.errors().front().code != ErrCode::NotSupported &&
        fused.errors().front().code != ErrCode::Invalid)  // refusals get a row (the backend falls back on both)
      return fused.errors();
    const size_t wsb = std::max<size_t>(cudnn_conv_workspace_bytes(*legacy),
                                        fused.ok() ? fused_dgrad_workspace_bytes(fused.value()) : 0);
    DeviceBuffer x, w, dy, gbuf, dx, ws, bnws, par, eq;
    for (auto [buf, bytes] : {std::pair{&x, nx * 2}, {&w, nw * 2}, {&dy, ny * 2}, {&gbuf, nx * 2}, {&dx, nx * 2},
                              {&par, g.c * 4 * 8}, {&eq, g.c * 4 * 3}})
      TRCTL_CUDA_TRY(cudaMalloc(&buf->p, static_cast<size_t>(bytes)));
    TRCTL_CUDA_TRY(cudaMalloc(&ws.p, std::max<size_t>(wsb, 256)));
    const size_t bnb = batchnorm_workspace_bytes(rows, g.c);
    TRCTL_CUDA_TRY(cudaMalloc(&bnws.p, bnb));
    for (auto [buf, n] : {std::pair{&x, nx}, {&w, nw}, {&dy, ny}})
      if (Status st = fill_f16(s, random, random_n, buf->p, n); !st.ok()) return st;
    if (Status st = fill_random(par.p, static_cast<size_t>(g.c) * 8, 13); !st.ok()) return st;
    const BnParams bp(static_cast<float*>(par.p), g.c);
    const std::string n = std::string(l.name) + " dgrad+bn+relu backward";
    Status st = b.add(n + " separate f16", size, flops, true, b.gemm_f16, [&]() -> Status {
      if (Status c = cudnn_conv_dgrad(b.ctx.cudnn, s, *legacy, dy.p, w.p, gbuf.p, ws.p, wsb); !c.ok())
        return c;
      return batchnorm_bwd_cuda(s, gbuf.p, x.p, nullptr, GpuDType::F16, bp.gamma, bp.mean, bp.invstd, dx.p, bp.sum,
                                bp.sqsum, rows, g.c, bnws.p, bnb, bp.beta);
    });
    if (!st.ok()) return st;
    if (!fused.ok()) {  // no engine: a row that says so
      b.note({n + " fused: no cuDNN engine", size, "TFLOP/s", 0.0, 0.0, b.gemm_f16});
      continue;
    }
    FusedDgradArgs a;
    a.dy = dy.p, a.w = w.p, a.x = x.p, a.mean = bp.mean, a.invstd = bp.invstd, a.gamma = bp.gamma, a.beta = bp.beta;
    a.g = gbuf.p, a.dgamma = bp.sum, a.dbeta = bp.sqsum;
    float* e = static_cast<float*>(eq.p);
    a.eq_dy = e, a.eq_x = e + g.c, a.eq_bias = e + 2 * g.c;
    st = b.add(n + " fused f16", size, flops, true, b.gemm_f16, [&]() -> Status {
      if (Status c = fused_dgrad_run(b.ctx.cudnn, s, fused.value(), a, ws.p, wsb); !c.ok()) return c;
      return batchnorm_bwd_apply_cuda(s, gbuf.p, x.p, GpuDType::F16, bp.gamma, bp.mean, bp.invstd, bp.sum, bp.sqsum,
                                      dx.p, rows, g.c);
    });
    if (!st.ok()) return st;
  }
  return ok_status();
}

}  // namespace

Result<std::vector<KernelBenchRow>> cuda_bench_kernels(const std::vector<std::string>& only) {
  Result<CudaContext> ctx = cuda_context_create(0);
  if (!ctx.ok()) return ctx.errors();
  Bench b{ctx.value(), {}, only};
  const cudaStream_t s = b.ctx.stream;
  const int64_t n = int64_t{1} << 26;  // 64 Mi floats = 256 MiB per buffer: far beyond the 50 MiB L2
  DeviceBuffer x, y, m, v, g;
  for (DeviceBuffer* d : {&x, &y, &m, &v, &g}) TRCTL_CUDA_TRY(cudaMalloc(&d->p, static_cast<size_t>(n) * 4));
  Status st = fill_random(x.p, n, 1);
  if (st.ok()) st = fill_random(g.p, n, 2);
  if (st.ok()) st = fill_random(m.p, n, 3);
  if (st.ok()) st = fill_random(v.p, n, 4);
  if (!st.ok()) return st.errors();
  TRCTL_CUDA_TRY(cudaMemset(y.p, 0, static_cast<size_t>(n) * 4));

  // Ceilings.
  Result<double> copy = time_us(s, [&]() -> Status {
    TRCTL_CUDA_TRY(cudaMemcpyAsync(y.p, x.p, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice, s));
    return ok_status();
  });
  if (!copy.ok()) return copy.errors();
  b.copy_gbs = 2.0 * n * 4 / (copy.value() * 1e3);
  b.rows.push_back({"ceiling: device copy", "256 MiB", "GB/s", copy.value(), b.copy_gbs, b.copy_gbs});
  for (auto [t, math, name] : {std::make_tuple(GpuDType::F16, GemmMath::Default, "ceiling: gemm f16"),
                               std::make_tuple(GpuDType::F32, GemmMath::FastTf32, "ceiling: gemm tf32"),
                               std::make_tuple(GpuDType::F32, GemmMath::Default, "ceiling: gemm f32")}) {
    Result<double> r = b.gemm_rate(t, math, 4096, 4096, 4096, x.p, g.p, y.p, true, name);
    if (!r.ok()) return r.errors();
    (t == GpuDType::F16 ? b.gemm_f16 : math == GemmMath::FastTf32 ? b.gemm_tf32 : b.gemm_f32) = r.value();
  }

  // Memory-bound kernels at 64 Mi elements.
  const std::string sz = "64Mi f32";
  const double bw = b.copy_gbs;
  st = b.add("relu_fwd f32", sz, 8.0 * n, false, bw, [&] { return relu_fwd_cuda(s, x.p, y.p, n, GpuDType::F32); });
  if (st.ok()) st = b.add("relu_bwd f32", sz, 12.0 * n, false, bw, [&] { return relu_bwd_cuda(s, x.p, g.p, y.p, n, GpuDType::F32); });
  uint32_t* step = nullptr;
  TRCTL_CUDA_TRY(cudaMalloc(&step, 64));
  TRCTL_CUDA_TRY(cudaMemset(step, 0, 64));
  const DropoutParams dp = dropout_params(0.5f, 7, 1, step);
  if (st.ok()) st = b.add("dropout_fwd f32", sz, 8.0 * n, false, bw, [&] { return dropout_fwd_cuda(s, dp, x.p, y.p, n, GpuDType::F32); });
  if (st.ok()) st = b.add("cast f32->f16", sz, 6.0 * n, false, bw, [&] { return cast_cuda(s, x.p, GpuDType::F32, y.p, GpuDType::F16, n); });
  int32_t* flag = reinterpret_cast<int32_t*>(step + 8);
  if (st.ok()) st = b.add("grad_check_nonfinite f32", sz, 4.0 * n, false, bw, [&] { return grad_check_nonfinite_cuda(s, g.p, GpuDType::F32, n, flag); });
  OptHyper* h = nullptr;
  TRCTL_CUDA_TRY(cudaMalloc(&h, sizeof(OptHyper)));
  OptHyper hh = opt_hyper_adam(1e-3, 0.9, 0.999, 1e-8, 1e-4);
  TRCTL_CUDA_TRY(cudaMemcpy(h, &hh, sizeof hh, cudaMemcpyHostToDevice));
  if (st.ok()) st = opt_hyper_advance_cuda(s, h, nullptr, nullptr, nullptr, 0);
  if (st.ok()) st = b.add("adamw over a region", sz, 28.0 * n, false, bw, [&] {
    return optimizer_step_cuda(s, CudaOptimizer::AdamW, h, static_cast<float*>(y.p), static_cast<const float*>(g.p),
                               static_cast<float*>(m.p), static_cast<float*>(v.p), n, n / 2);
  });
  // SGD (nesterov) with AMP's f16 weight copy: written by the update kernel itself (the backend's path) vs the
  // update followed by a cast of the whole region (before 97b4c78).
  // VGG16-BN's recipe (momentum 0.9, nesterov, weight decay), hyper block at step 2 (the momentum's general path).
  OptHyper* hs = nullptr;
  DeviceBuffer lowp_copy;  // (n) f16: its own buffer (m and v are the Adam state of the rows after these)
  TRCTL_CUDA_TRY(cudaMalloc(&hs, sizeof(OptHyper)));
  TRCTL_CUDA_TRY(cudaMalloc(&lowp_copy.p, static_cast<size_t>(n) * 2));
  const OptHyper hsh = opt_hyper_sgd(0.1, 0.9, 0.0, 1e-4, true);
  TRCTL_CUDA_TRY(cudaMemcpyAsync(hs, &hsh, sizeof hsh, cudaMemcpyHostToDevice, s));  // ordered with s's kernels
  TRCTL_CUDA_TRY(cudaStreamSynchronize(s));
  for (int k = 0; k < 2 && st.ok(); ++k) st = opt_hyper_advance_cuda(s, hs, nullptr, nullptr, nullptr, 0);
  if (st.ok()) st = b.add("sgd + f16 copy fused", sz, 22.0 * n, false, bw, [&] {
    return optimizer_step_cuda(s, CudaOptimizer::Sgd, hs, static_cast<float*>(y.p), static_cast<const float*>(g.p),
                               static_cast<float*>(m.p), nullptr, n, n, LowpCopy{lowp_copy.p, GpuDType::F16});
  });
  if (st.ok()) st = b.add("sgd, then cast to f16", sz, 22.0 * n, false, bw, [&]() -> Status {
    Status u = optimizer_step_cuda(s, CudaOptimizer::Sgd, hs, static_cast<float*>(y.p),
                                   static_cast<const float*>(g.p), static_cast<float*>(m.p), nullptr, n, n);
    if (!u.ok()) return u;
    return cast_cuda(s, y.p, GpuDType::F32, lowp_copy.p, GpuDType::F16, n);
  });
  TRCTL_CUDA_WARN(cudaFree(hs));
  if (st.ok()) st = opt_hyper_advance_cuda(s, h, nullptr, nullptr, nullptr, 0);  // step 2 for the extras
  if (st.ok()) st = bench_optim_extra(b, sz, n, h, static_cast<float*>(y.p), static_cast<const float*>(g.p),
                                      static_cast<float*>(m.p), static_cast<float*>(v.p));
  const int64_t rows = 65536, cols = 1024;
  if (st.ok()) st = b.add("bias_grad f32", "65536x1024", 4.0 * rows * cols, false, bw, [&] {
    return bias_grad_cuda(s, x.p, GpuDType::F32, rows, cols, 0, static_cast<float*>(y.p), false);
  });
  DeviceBuffer ws, labels;
  const int64_t ce_rows = 65536, ce_cls = 1000;
  TRCTL_CUDA_TRY(cudaMalloc(&ws.p, softmax_ce_workspace_bytes(ce_rows)));
  TRCTL_CUDA_TRY(cudaMalloc(&labels.p, ce_rows * 4));
  TRCTL_CUDA_TRY(cudaMemset(labels.p, 0, ce_rows * 4));
  SoftmaxCeArgs ca;
  ca.logits = x.p;
  ca.labels = static_cast<const int32_t*>(labels.p);
  ca.rows = ce_rows;
  ca.classes = ce_cls;
  ca.label_smoothing = 0.1f;
  ca.dlogits = y.p;
  ca.workspace = ws.p;
  ca.workspace_bytes = softmax_ce_workspace_bytes(ce_rows);
  ca.loss = reinterpret_cast<float*>(step + 12);
  if (st.ok()) st = b.add("softmax_ce fwd+bwd f32", "65536x1000", 8.0 * ce_rows * ce_cls, false, bw, [&] { return softmax_ce_cuda(s, ca); });
  ca.rows = 200;
  ca.classes = 10;
  if (st.ok()) st = b.add("softmax_ce fwd+bwd f32 (MLP)", "200x10", 8.0 * 200 * 10, false, bw, [&] { return softmax_ce_cuda(s, ca); });
  if (!st.ok()) return st.errors();

  // The MLP's GEMMs (batch 200), forward shapes, as the backend plans them.
  const int64_t dims[5] = {784, 1024, 512, 256, 10};
  for (int l = 0; l < 4; ++l)
    for (auto [t, math, tag, ceil] : {std::make_tuple(GpuDType::F16, GemmMath::Default, "f16", b.gemm_f16),
                                      std::make_tuple(GpuDType::F32, GemmMath::Default, "f32", b.gemm_f32)}) {
      Result<double> r = b.gemm_rate(t, math, 200, dims[l + 1], dims[l], x.p, g.p, y.p, true,
                                     std::string("mlp gemm fwd ") + tag + " fc" + std::to_string(l + 1), ceil);
      if (!r.ok()) return r.errors();
    }
  if (Status cs = bench_stem_convs(b, x.p, n); !cs.ok()) return cs.errors();
  Pool2dGeom stem, vgg;
  stem.n = vgg.n = 256, stem.c = vgg.c = 64;
  stem.h = stem.w = 112, stem.kh = stem.kw = 3, stem.sh = stem.sw = 2, stem.ph = stem.pw = 1;
  vgg.h = vgg.w = 224, vgg.kh = vgg.kw = 2, vgg.sh = vgg.sw = 2;
  if (Status bs = bench_bn_pool(b, x.p, n, stem, "bn+relu+maxpool r50 stem"); !bs.ok()) return bs.errors();
  if (Status bs = bench_bn_pool(b, x.p, n, vgg, "bn+relu+maxpool vgg16 pool1"); !bs.ok()) return bs.errors();
  if (Status cs = bench_conv_bn_stats(b, x.p, n); !cs.ok()) return cs.errors();
  if (Status cb = bench_conv_bn_bwd(b, x.p, n); !cb.ok()) return cb.errors();
  // Last: a kernel fault here (a new kernel) leaves every row above measured.
  if (Status wc = bench_wgconv(b, x.p, n); !wc.ok()) return wc.errors();
  TRCTL_CUDA_WARN(cudaFree(step));
  TRCTL_CUDA_WARN(cudaFree(h));
  return b.rows;
}

std::string kernel_bench_table(const std::vector<KernelBenchRow>& rows) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-32s %-12s %12s %12s %12s %7s\n", "kernel", "size", "median us", "achieved",
                "ceiling", "%");
  out += buf;
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%-32s %-12s %12.2f %9.1f %-2s %9.1f %-2s %6.1f%%\n", r.name.c_str(),
                  r.size.c_str(), r.median_us, r.achieved, r.unit == "GB/s" ? "GB" : "TF", r.ceiling,
                  r.unit == "GB/s" ? "GB" : "TF", r.ceiling > 0 ? 100 * r.achieved / r.ceiling : 0.0);
    out += buf;
  }
  return out;
}

void kernel_bench_metrics(const std::vector<KernelBenchRow>& rows, BenchResult* out) {
  std::string raw = "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    out->add(r.name + "/median_us", r.median_us, "us", false);
    out->add(r.name + "/achieved", r.achieved, r.unit, true);
    raw += std::string(i ? ",\n    " : "\n    ") + "{\"name\": " + json_quote(r.name) + ", \"size\": " +
           json_quote(r.size) + ", \"unit\": " + json_quote(r.unit) + ", \"median_us\": " + json_number(r.median_us) +
           ", \"achieved\": " + json_number(r.achieved) + ", \"ceiling\": " + json_number(r.ceiling) + "}";
  }
  out->details.emplace_back("rows", raw + (rows.empty() ? "]" : "\n  ]"));
}

}  // namespace trctl
