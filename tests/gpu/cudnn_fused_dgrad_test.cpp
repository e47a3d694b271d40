// Graph (d) of runtime/cuda/cudnn_fused_conv.h: the data gradient with the ReLU backward and the batch norm's backward
// reductions in its epilogue (train.conv_bn_backward: fused), against a float64 reference on the same f16 inputs:
// g = (dgrad(dy, w) where bn(x) = (x - mean) * invstd * gamma + beta > 0, else 0), dgamma = sum g (x - mean) invstd,
// dbeta = sum g; at a small shape and two of VGG16-BN's (N reduced), with the plan log printed (which engine, ADD or
// SUB for the mean); a stride-2 geometry (ResNet's downsampling conv2) either plans and matches or is refused
// (NotSupported or Invalid, as the backend's fallback takes them; printed: whether cuDNN serves it is what the run
// tells); a CUDA-graph replay within the same bounds.
// Tolerances: the reference is exact for the f16 inputs; the engine accumulates the dgrad in fp32 (N * R * S * K
// products per element) and rounds g to f16: |g - ref| <= 2^-10 |ref| + 2e-3 M (M = the sum of |dy w| terms) where
// the masks agree; the mask may differ where |bn(x)| is within fp32 rounding of 0 (those elements are excluded:
// inputs are drawn so that bn(x) stays >= 1e-3 away from 0). dgamma, dbeta: fp32 sums of the f16 g, norm-wise
// relative 1e-2 and per channel 2^-9 |ref| + 2e-3 sum |terms|.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/util/thread_pool.h"
#include "runtime/cuda/cudnn_fused_conv.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

struct Case {
  const char* name;
  int64_t n, hw, c, k, stride;
};

struct Ref {
  std::vector<double> g, g_mag, dgamma, dbeta, dgamma_mag, dbeta_mag;
};

// From f16-valued host copies (float64 arithmetic); c = the batch norm's channels (the conv's input channels).
Ref reference(const Conv2dGeom& g, const std::vector<float>& dy, const std::vector<float>& w,
              const std::vector<float>& x, const std::vector<float>& mean, const std::vector<float>& invstd,
              const std::vector<float>& gamma, const std::vector<float>& beta, ThreadPool* pool) {
  const std::vector<double> ddy = to_double(dy), dw = to_double(w);
  std::vector<double> ady(ddy.size()), aw(dw.size());
  for (size_t i = 0; i < ddy.size(); ++i) ady[i] = std::fabs(ddy[i]);
  for (size_t i = 0; i < dw.size(); ++i) aw[i] = std::fabs(dw[i]);
  Ref r;
  const size_t nx = x.size();
  std::vector<double> dxc(nx), mag(nx);
  conv2d_grad_input_cpu<double>(g, ddy.data(), dw.data(), dxc.data(), pool);
  conv2d_grad_input_cpu<double>(g, ady.data(), aw.data(), mag.data(), pool);
  r.g.assign(nx, 0.0), r.g_mag.assign(nx, 0.0);
  r.dgamma.assign(static_cast<size_t>(g.c), 0.0), r.dbeta = r.dgamma, r.dgamma_mag = r.dgamma, r.dbeta_mag = r.dgamma;
  for (size_t i = 0; i < nx; ++i) {
    const size_t c = i % static_cast<size_t>(g.c);
    const double xhat = (static_cast<double>(x[i]) - mean[c]) * invstd[c];
    const bool keep = xhat * gamma[c] + beta[c] > 0.0;
    r.g[i] = keep ? dxc[i] : 0.0;
    r.g_mag[i] = keep ? mag[i] : 0.0;
    r.dgamma[c] += r.g[i] * xhat, r.dbeta[c] += r.g[i];
    r.dgamma_mag[c] += std::fabs(r.g[i] * xhat) + r.g_mag[i] * std::fabs(xhat), r.dbeta_mag[c] += r.g_mag[i];
  }
  return r;
}

}  // namespace

TEST_CASE("fused dgrad_drelu_dbn (graph d) matches the float64 masked data gradient and batch-norm reductions",
          "[kernel][fusedconv][fuseddgrad]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const Case cases[] = {{"small", 2, 12, 32, 64, 1},
                        {"vgg16 conv1_2 (N=1)", 1, 224, 64, 64, 1},
                        {"vgg16 conv3_2 (N=2)", 2, 56, 256, 256, 1},
                        {"resnet conv2 stride 2 (N=2)", 2, 28, 128, 128, 2}};
  for (const Case& cs : cases) {
    INFO(cs.name);
    Conv2dGeom g;
    g.n = cs.n, g.h = g.w = cs.hw, g.c = cs.c, g.k = cs.k, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
    g.stride_h = g.stride_w = cs.stride;
    std::string why;
    REQUIRE(conv2d_geom_finish(g, &why));
    FusedDgradDesc d;
    d.g = g;
    Result<FusedDgradPlan> plan = fused_dgrad_plan(ctx.cudnn, d);
    const bool refused = !plan.ok() && (plan.errors().front().code == ErrCode::NotSupported ||
                                        plan.errors().front().code == ErrCode::Invalid);  // as plan_refusal
    if (refused && cs.stride == 2) {
      std::printf("  [plan] %s: refused: %s\n", cs.name, plan.error_text().c_str());
      continue;  // the backend counts such a pair as a fallback; the unit-stride cases must plan
    }
    INFO((plan.ok() ? std::string() : plan.error_text()));
    REQUIRE(plan.ok());
    std::printf("  [plan] %s: %s\n%s\n", cs.name, plan->exec.graph.c_str(), cudnn_plan_describe(plan->exec).c_str());
    Rng rng(190 + static_cast<uint64_t>(cs.c) + static_cast<uint64_t>(cs.stride));
    const size_t ndy = static_cast<size_t>(g.n * g.p * g.q * g.k), nx = static_cast<size_t>(g.n * g.h * g.w * g.c);
    const size_t nw = static_cast<size_t>(g.k * g.r * g.s * g.c), nc = static_cast<size_t>(g.c);
    std::vector<float> dy = rng.normal_vec(ndy, 0.0f, 1.0f), w = rng.normal_vec(nw, 0.0f, 0.05f),
                       mean = rng.normal_vec(nc, 0.1f, 0.3f), invstd = rng.uniform_vec(nc, 0.5f, 2.0f),
                       gamma = rng.uniform_vec(nc, 0.5f, 1.5f), beta = rng.normal_vec(nc, 0.0f, 0.3f);
    for (float& e : gamma) e = rng.below(4) == 0 ? -e : e;  // some channels with a negative gamma
    // x drawn so that bn(x) keeps >= 1e-3 from 0 (the mask is then the same in fp32 and float64).
    std::vector<float> x(nx);
    for (size_t i = 0; i < nx; ++i) {
      const size_t c = i % nc;
      for (;;) {
        const float v = round_to(GpuDType::F16, rng.normal(0.2f, 1.0f));
        const double bn = (static_cast<double>(v) - mean[c]) * invstd[c] * gamma[c] + beta[c];
        if (std::fabs(bn) >= 1e-3) {
          x[i] = v;
          break;
        }
      }
    }
    for (std::vector<float>* v : {&dy, &w}) for (float& e : *v) e = round_to(GpuDType::F16, e);
    DevBuf ddy = to_device_as(GpuDType::F16, dy), dw = to_device_as(GpuDType::F16, w),
           dx = to_device_as(GpuDType::F16, x);
    DevBuf dmean = to_device_as(GpuDType::F32, mean), dinv = to_device_as(GpuDType::F32, invstd),
           dgam = to_device_as(GpuDType::F32, gamma), dbet = to_device_as(GpuDType::F32, beta);
    DevBuf gout(nx * 2), outs(nc * 5 * 4), ws(std::max<size_t>(fused_dgrad_workspace_bytes(plan.value()), 256));
    FusedDgradArgs a;
    a.dy = ddy.get(), a.w = dw.get(), a.x = dx.get();
    a.mean = dmean.as<float>(), a.invstd = dinv.as<float>(), a.gamma = dgam.as<float>(), a.beta = dbet.as<float>();
    a.g = gout.get();
    a.dgamma = outs.as<float>(), a.dbeta = outs.as<float>() + nc, a.eq_dy = outs.as<float>() + 2 * nc;
    a.eq_x = outs.as<float>() + 3 * nc, a.eq_bias = outs.as<float>() + 4 * nc;
    poison(gout);
    poison(outs);
    REQUIRE_OK(fused_dgrad_run(ctx.cudnn, ctx.stream, plan.value(), a, ws.get(), ws.bytes()));
    sync_ok(ctx);
    const Ref ref = reference(plan->desc.g, dy, w, x, mean, invstd, gamma, beta, &pool);
    auto check = [&](const std::string& tag) {
      const std::vector<float> got = from_device_as(GpuDType::F16, gout.get(), nx);
      std::vector<double> bound(nx);
      for (size_t i = 0; i < nx; ++i) bound[i] = std::ldexp(std::fabs(ref.g[i]), -10) + 2e-3 * ref.g_mag[i] + 1e-6;
      CHECK_RESULT(compare_close(tag + " g " + cs.name, to_double(got), ref.g, bound, g.c));
      const std::vector<float> o = from_device<float>(outs.get(), nc * 5);
      std::vector<double> dgm(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(nc));
      std::vector<double> dbt(o.begin() + static_cast<std::ptrdiff_t>(nc), o.begin() + 2 * static_cast<std::ptrdiff_t>(nc));
      std::vector<double> bg(nc), bb(nc);
      for (size_t c = 0; c < nc; ++c) {
        bg[c] = std::ldexp(std::fabs(ref.dgamma[c]), -9) + 2e-3 * ref.dgamma_mag[c] + 1e-6;
        bb[c] = std::ldexp(std::fabs(ref.dbeta[c]), -9) + 2e-3 * ref.dbeta_mag[c] + 1e-6;
      }
      CHECK_RESULT(compare_close(tag + " dgamma " + cs.name, dgm, ref.dgamma, bg));
      CHECK_RESULT(compare_close(tag + " dbeta " + cs.name, dbt, ref.dbeta, bb));
    };
    check("fused dgrad");
    // Captured into a CUDA graph (after the eager run) and replayed: within the same bounds.
    poison(gout);
    poison(outs);
    cudaGraphExec_t exec = capture_graph(
        ctx, [&] { return fused_dgrad_run(ctx.cudnn, ctx.stream, plan.value(), a, ws.get(), ws.bytes()); });
    REQUIRE(cudaGraphLaunch(exec, ctx.stream) == cudaSuccess);
    sync_ok(ctx);
    cudaGraphExecDestroy(exec);
    check("fused dgrad replay");
  }
}
