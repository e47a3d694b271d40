// The convolution rows of cuda_bench_kernels (bench_kernels.cpp): the RGB stems (im2col + GEMM, space-to-depth +
// cuDNN, cuDNN, trctl's few-channel kernels), VGG16-BN's 3x3 layers through cuDNN and trctl's wgmma conv, and the
// conv + batch norm fusions (statistics, apply prologue, backward) against their separate passes.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/bench_kernels_util.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/cudnn_fused_conv.h"
#include "runtime/cuda/im2col_conv.h"
#include "runtime/cuda/s2d_conv.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "runtime/ops/channel_copy/channel_copy_cuda.h"
#include "runtime/ops/conv2d/dgrad_fwd.h"
#include "runtime/ops/conv2d/dgrad_fwd_cuda.h"
#include "runtime/ops/conv2d/fewc_cuda.h"
#include "runtime/ops/conv2d/wgconv.h"
#include "runtime/ops/conv2d/s2d.h"

namespace trctl::bench_detail {
namespace {

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

}  // namespace

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

namespace {

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
// One such layer: its geometry, the element counts of x (N, H, W, C), y (N, P, Q, K) and w (K, 3, 3, C), the
// convolution's FLOPs, the rows' size label and the legacy cuDNN plan (heuristics, non-deterministic algorithms
// allowed; with the data gradient when need_dgrad).
struct VggBenchConv {
  Conv2dGeom g;
  int64_t nx = 0, ny = 0, nw = 0;
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
  v.nx = v.g.n * v.g.h * v.g.w * v.g.c, v.ny = v.g.n * v.g.p * v.g.q * v.g.k, v.nw = v.g.k * v.g.r * v.g.s * v.g.c;
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

}  // namespace

// VGG16-BN's 3x3 convolutions (batch 256, f16; conv2_1 is the 64 -> 128 one), cuDNN's legacy algorithm (heuristics,
// non-deterministic allowed) against trctl's wgmma conv (wgconv.h) with each kernel and CTA tile: the forward
// ("not supported" rows for a tile the layer or the device does not take), the input's batch norm + ReLU then the
// conv (C = 64: the ring kernels' prologue, RingPx256N64 with the statistics too, and with the activation written
// out as well), the data gradient (also as cuDNN's forward over the transformed filters: train.conv_dgrad_fwd), and
// the weight gradient (the ring weight-gradient kernel where C, K <= 128).
Status bench_wgconv(Bench& b, const void* random, int64_t random_n) {
  const cudaStream_t s = b.ctx.stream;
  constexpr VggLayer kLayers[] = {{224, 64, "vgg16 conv1_2"}, {112, 64, "vgg16 conv2_1", 128},
                                  {112, 128, "vgg16 conv2_2"}, {56, 256, "vgg16 conv3_2"}, {28, 512, "vgg16 conv4_2"}};
  for (const VggLayer& l : kLayers) {
    Result<VggBenchConv> vc = vgg_bench_conv(b, l, true);
    if (!vc.ok()) return vc.errors();
    const Conv2dGeom g = vc->g;
    const int64_t nx = vc->nx, ny = vc->ny, nw = vc->nw;
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
    // train.conv_dgrad_fwd: the same data gradient as cuDNN's forward of dY over the transformed filters (the
    // transform inside the timing), the forward geometry's heuristic plan.
    if (st.ok()) {
      ConvDesc fd;
      fd.g = dgrad_fwd_geom(g);
      fd.io = GpuDType::F16;
      fd.deterministic = false;
      fd.need_dgrad = false;
      Result<CudnnConvPlan> fp = cudnn_conv_plan(b.ctx.cudnn, fd);
      if (!fp.ok()) return fp.errors();
      const size_t fwsb = std::max<size_t>(cudnn_conv_workspace_bytes(fp.value()), 256);
      DeviceBuffer fws;
      TRCTL_CUDA_TRY(cudaMalloc(&fws.p, fwsb));
      st = b.add(nd + " as fwd cudnn f16", vc->size, vc->flops, true, b.gemm_f16, [&]() -> Status {
        if (Status f = dgrad_fwd_filter_cuda(s, g, GpuDType::F16, w.p, wf.p); !f.ok()) return f;
        return cudnn_conv_fwd(b.ctx.cudnn, s, fp.value(), y.p, wf.p, nullptr, x.p, fws.p, fwsb);
      });
    }
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

namespace {

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

}  // namespace

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
    const int64_t nx = vc->nx, ny = vc->ny, nw = vc->nw;
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
    const int64_t nx = vc->nx, ny = vc->ny, nw = vc->nw;
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

}  // namespace trctl::bench_detail
