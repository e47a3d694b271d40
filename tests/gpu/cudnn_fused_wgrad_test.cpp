// Graph (c) of runtime/cuda/cudnn_fused_conv.h: dW = wgrad(dy, relu(x * scale + shift)) through cuDNN's graph API
// (the weight gradient train.conv_bn_apply: prologue runs for a conv whose input a batch norm + ReLU never wrote),
// against a float64 reference on the same f16 inputs, at a small shape and two of VGG16-BN's (N reduced), with
// the plan log printed (which engine, f32 or f16 intermediates), and a CUDA-graph replay bitwise like the eager run.
// Tolerance: the reference is exact for the f16 inputs; the engine accumulates in fp32 (a sum of N*P*Q products
// per weight), its ReLU input may be f16 (the retry graph: one rounding of x * scale + shift, relative 2^-11) and
// dW is rounded to f16 (2^-11): per weight |got - ref| <= 2^-9 |ref| + 4e-3 * S, S = the sum of |dy * a| over the
// weight's terms (a = relu(x * scale + shift)), which bounds the accumulated and intermediate rounding.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/cuda/cudnn_fused_conv.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

struct Case {
  const char* name;
  int64_t n, hw, c, k;
};

// dw[k][r][s][c] (float64) and the per-weight scale S (see the file comment), from f16-valued host copies.
void reference(const Conv2dGeom& g, const std::vector<float>& dy, const std::vector<float>& x,
               const std::vector<float>& scale, const std::vector<float>& shift, std::vector<double>& dw,
               std::vector<double>& mag) {
  dw.assign(static_cast<size_t>(g.k * g.r * g.s * g.c), 0.0);
  mag.assign(dw.size(), 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t p = 0; p < g.p; ++p)
      for (int64_t q = 0; q < g.q; ++q)
        for (int64_t r = 0; r < g.r; ++r)
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t ih = p * g.stride_h - g.pad_h + r, iw = q * g.stride_w - g.pad_w + s;
            if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
            const float* d = &dy[static_cast<size_t>(((n * g.p + p) * g.q + q) * g.k)];
            const float* xi = &x[static_cast<size_t>(((n * g.h + ih) * g.w + iw) * g.c)];
            for (int64_t c = 0; c < g.c; ++c) {
              const double a = std::max(0.0, static_cast<double>(xi[c]) * scale[c] + shift[c]);
              if (a == 0.0) continue;
              for (int64_t k = 0; k < g.k; ++k) {
                const size_t o = static_cast<size_t>(((k * g.r + r) * g.s + s) * g.c + c);
                dw[o] += d[k] * a;
                mag[o] += std::fabs(d[k] * a);
              }
            }
          }
}

}  // namespace

TEST_CASE("fused bn_relu_wgrad (graph c) matches the float64 weight gradient on relu(x * scale + shift)",
          "[kernel][fusedconv][fusedwgrad]") {
  CudaContext ctx = make_context();
  // VGG's shapes at N = 1: the float64 reference costs N*P*Q*9*C*K multiply-adds (~1.9e9 each) on the host.
  const Case cases[] = {{"small", 2, 12, 32, 64}, {"vgg16 conv1_2 (N=1)", 1, 224, 64, 64},
                        {"vgg16 conv3_2 (N=1)", 1, 56, 256, 256}};
  for (const Case& cs : cases) {
    INFO(cs.name);
    Conv2dGeom g;
    g.n = cs.n, g.h = g.w = cs.hw, g.c = cs.c, g.k = cs.k, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
    std::string why;
    REQUIRE(conv2d_geom_finish(g, &why));
    FusedWgradDesc d;
    d.g = g;
    Result<FusedWgradPlan> plan = fused_wgrad_plan(ctx.cudnn, d);
    INFO((plan.ok() ? std::string() : plan.error_text()));
    REQUIRE(plan.ok());
    std::printf("  [plan] %s: %s\n%s\n", cs.name, plan->exec.graph.c_str(), cudnn_plan_describe(plan->exec).c_str());
    Rng rng(90 + static_cast<uint64_t>(cs.c));
    const size_t ndy = static_cast<size_t>(g.n * g.p * g.q * g.k), nx = static_cast<size_t>(g.n * g.h * g.w * g.c);
    std::vector<float> dy = rng.normal_vec(ndy, 0.0f, 1.0f), x = rng.normal_vec(nx, 0.2f, 1.0f),
                       scale = rng.uniform_vec(g.c, 0.5f, 1.5f), shift = rng.normal_vec(g.c, 0.0f, 0.3f);
    for (std::vector<float>* v : {&dy, &x, &scale, &shift})
      for (float& e : *v) e = round_to(GpuDType::F16, e);  // the device sees exactly these values
    DevBuf ddy = to_device_as(GpuDType::F16, dy), dx = to_device_as(GpuDType::F16, x),
           dscale = to_device_as(GpuDType::F16, scale), dshift = to_device_as(GpuDType::F16, shift);
    const size_t nw = static_cast<size_t>(g.k * g.r * g.s * g.c);
    DevBuf dw(nw * 2), dw2(nw * 2), ws(std::max<size_t>(fused_wgrad_workspace_bytes(plan.value()), 256));
    FusedWgradArgs a;
    a.dy = ddy.get(), a.x = dx.get(), a.scale = dscale.get(), a.bias = dshift.get(), a.dw = dw.get();
    REQUIRE_OK(fused_wgrad_run(ctx.cudnn, ctx.stream, plan.value(), a, ws.get(), ws.bytes()));
    sync_ok(ctx);
    const std::vector<float> got = from_device_as(GpuDType::F16, dw.get(), nw);
    std::vector<double> ref, mag;
    reference(plan->desc.g, dy, x, scale, shift, ref, mag);
    std::vector<double> bound(nw);
    for (size_t i = 0; i < nw; ++i) bound[i] = std::ldexp(std::fabs(ref[i]), -9) + 4e-3 * mag[i] + 1e-6;
    CHECK_RESULT(compare_close(std::string("fused wgrad ") + cs.name, to_double(got), ref, bound));
    // Captured into a CUDA graph (after the eager run above) and replayed: the same bits when the engine is
    // deterministic; printed either way.
    a.dw = dw2.get();
    cudaGraphExec_t exec = capture_graph(
        ctx, [&] { return fused_wgrad_run(ctx.cudnn, ctx.stream, plan.value(), a, ws.get(), ws.bytes()); });
    REQUIRE(cudaGraphLaunch(exec, ctx.stream) == cudaSuccess);
    sync_ok(ctx);
    cudaGraphExecDestroy(exec);
    const std::vector<float> replay = from_device_as(GpuDType::F16, dw2.get(), nw);
    CHECK_RESULT(compare_close(std::string("fused wgrad replay ") + cs.name, to_double(replay), ref, bound));
    std::printf("  [replay] %s bitwise like the eager run: %s\n", cs.name,
                std::memcmp(got.data(), replay.data(), nw * 4) == 0 ? "yes" : "no (a non-deterministic engine)");
  }
}
