// cuda_bench_kernels: ceilings first (copy bandwidth, GEMM rates), then every kernel at sizes that fill the chip
// and at the MLP's own sizes, then the RGB-stem convolutions (im2col + GEMM, space-to-depth + cuDNN, plain cuDNN);
// median of repeated event-timed launches after a warm-up. This file: the harness, the ceilings, the memory-bound
// kernels, the batch fetch, the MLP's GEMMs, the batch norm + pool rows and the table; the convolution rows:
// bench_kernels_conv.cpp.
#include "runtime/cuda/bench_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <tuple>
#include <vector>

#include "runtime/cuda/bench_kernels_util.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/lt_gemm.h"
#include "runtime/ops/amp/amp_cuda.h"
#include "runtime/ops/augment/augment_cuda.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "runtime/ops/bias_grad/bias_grad_cuda.h"
#include "runtime/ops/cast/cast_cuda.h"
#include "runtime/ops/dropout/dropout_cuda.h"
#include "runtime/ops/optim/optim_cuda.h"
#include "runtime/ops/optim/optim_extra_cuda.h"
#include "runtime/ops/pool/pool_cuda.h"
#include "runtime/ops/relu/relu_cuda.h"
#include "runtime/ops/softmax_ce/softmax_ce_cuda.h"
#include "runtime/report/json.h"

namespace trctl::bench_detail {

// Median time in microseconds of `reps` launches of f, after `warm` untimed ones.
Result<double> time_us(cudaStream_t s, const std::function<Status()>& f, int warm, int reps) {
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

// n f16 values from the 64 Mi random floats `src` (repeated): random conv operands without a host copy.
Status fill_f16(cudaStream_t s, const void* src, int64_t src_n, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += src_n)
    if (Status st = cast_cuda(s, src, GpuDType::F32, static_cast<char*>(dst) + i * 2, GpuDType::F16,
                              std::min(src_n, n - i));
        !st.ok())
      return st;
  return ok_status();
}

namespace {

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

// The step's batch fetch at the CNN recipes' shape (256 samples of 224 x 224 x 3 u8, resident, into f16): normalize
// alone (normalize_batch_kernel) and with a horizontal flip (augment_kernel, a block per sample slice: the general
// path at the same traffic). Bytes: the samples read, the batch written.
Status bench_batch_fetch(Bench& b, double bw) {
  const cudaStream_t s = b.ctx.stream;
  const int64_t n = 512, batch = 256, side = 224, c = 3, per_c = side * side * c;
  const std::string name = "augment batch " + std::to_string(batch) + "x224^2x3 u8 -> f16";
  if (!b.wanted(name + " normalize") && !b.wanted(name + " flip+normalize")) return ok_status();
  DeviceBuffer px, lab, ord, y, ctr, x;
  for (auto [buf, bytes] : {std::pair{&px, n * per_c}, {&lab, n * 4}, {&ord, n * 4}, {&y, batch * 4},
                            {&ctr, int64_t{8}}, {&x, batch * per_c * 2}})
    TRCTL_CUDA_TRY(cudaMalloc(&buf->p, static_cast<size_t>(bytes)));
  std::vector<uint8_t> hp(static_cast<size_t>(n * per_c));
  uint32_t h = 12345;
  for (auto& v : hp) v = static_cast<uint8_t>((h = h * 1664525u + 1013904223u) >> 24);
  std::vector<int32_t> hl(static_cast<size_t>(n)), ho(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) hl[static_cast<size_t>(i)] = static_cast<int32_t>(i % 1000),
                                  ho[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % n);
  TRCTL_CUDA_TRY(cudaMemcpy(px.p, hp.data(), hp.size(), cudaMemcpyHostToDevice));
  TRCTL_CUDA_TRY(cudaMemcpy(lab.p, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice));
  TRCTL_CUDA_TRY(cudaMemcpy(ord.p, ho.data(), ho.size() * 4, cudaMemcpyHostToDevice));
  TRCTL_CUDA_TRY(cudaMemset(ctr.p, 0, 8));
  uint32_t* counters = static_cast<uint32_t*>(ctr.p);
  const ResidentSplit rs{static_cast<const uint8_t*>(px.p), static_cast<const int32_t*>(lab.p),
                         static_cast<const int32_t*>(ord.p), n, counters, counters + 1};
  const double bytes = static_cast<double>(batch * per_c) * 3;  // u8 read, f16 written
  Status st = ok_status();
  for (bool flip : {false, true}) {
    TransformPipeline tp;
    tp.steps.resize(flip ? 2 : 1);
    if (flip) tp.steps[0].kind = TransformKind::RandomHorizontalFlip;
    tp.steps.back().kind = TransformKind::Normalize;
    tp.mean = {0.485f, 0.456f, 0.406f};
    tp.std = {0.229f, 0.224f, 0.225f};
    tp.in_h = tp.in_w = tp.out_h = tp.out_w = static_cast<int>(side);
    tp.c = static_cast<int>(c);
    Result<GpuPipeline> gp = gpu_pipeline_make(tp);
    if (!gp.ok()) return gp.errors();
    const GpuPipeline pipe = gp.value();
    if (st.ok())
      st = b.add(name + (flip ? " flip+normalize" : " normalize"), "256 samples", bytes, false, bw, [&] {
        return augment_batch_cuda(s, pipe, rs, 7, batch, x.p, GpuDType::F16, static_cast<int32_t*>(y.p));
      });
  }
  return st;
}

}  // namespace
}  // namespace trctl::bench_detail

namespace trctl {

Result<std::vector<KernelBenchRow>> cuda_bench_kernels(const std::vector<std::string>& only) {
  using namespace bench_detail;  // the harness and benches above and in bench_kernels_conv.cpp
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
  if (st.ok()) st = bench_batch_fetch(b, bw);
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
