// The few-channel forward with y's batch statistics in its epilogue (runtime/ops/conv2d/fewc_cuda.h:
// fewc_conv_fwd_cuda with a FewcStatsOut; the backend's train.conv_bn_stats for an RGB stem -> batch norm pair) on
// the GPU: y bitwise equal to the plain forward's, and sum / sqsum per channel against float64 sums of the y the
// kernel stored, on VGG16's first conv at 224x224, the ResNet-50 stem, K = 16 and 32, odd sizes (the tiles' pixels
// past P and Q must not count) and a bias, in f16 and bf16; a second run bitwise, a grid of 7 CTAs close (another
// order of the partials), a captured graph's replay bitwise; the launch's refusals (a short workspace, a plan
// without the statistics kernel).
//
// Tolerance: the sums are fp32 (per tile a shuffle tree, per warp in tile order, per CTA in warp order) and the CTA
// partials are added in float64: |got - ref| <= 1e-5 * sum |y| (resp. sum y^2) + 1e-30 per channel, far above that
// summation's error (tens of additions in fp32 per value at these sizes) and far below any dropped or doubled tile
// (>= 1/(N P Q) of the sum, with |y| of one size).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/fewc.h"
#include "runtime/ops/conv2d/fewc_cuda.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/stem_conv_ref.h"
#include "tests/support/conv_geom.h"

using namespace trctl;
using trctl::testing::conv_geom;
using namespace trctl::gputest;

namespace {

FewcConvPlan stats_plan(const Conv2dGeom& g, GpuDType t) {
  Result<FewcConvPlan> p = fewc_conv_plan(g, t);
  if (!p.ok()) FAIL(p.error_text());
  std::printf("  fewc fwd+stats %s %s: grid %d, stats %d, workspace %zu B\n", gpu_dtype_name(t),
              conv2d_geom_str(g).c_str(), p.value().grid, p.value().stats ? 1 : 0,
              fewc_stats_workspace_bytes(p.value()));
  return p.value();
}

struct StatsBuffers {
  DevBuf x, w, b, y, sums, ws;  // sums: (2, K) f32, sum then sqsum
  size_t y_bytes = 0, ws_bytes = 0;
};
StatsBuffers stats_buffers(GpuDType t, const StemInputs& in, const FewcConvPlan& plan) {
  StatsBuffers b;
  b.x = to_device_as(t, in.x), b.w = to_device_as(t, in.w), b.b = to_device_as(t, in.b);
  b.y_bytes = in.dy.size() * gpu_dtype_size(t);
  b.y = DevBuf(b.y_bytes);
  b.sums = DevBuf(static_cast<size_t>(2 * plan.g.k) * 4);
  b.ws_bytes = fewc_stats_workspace_bytes(plan);
  b.ws = DevBuf(b.ws_bytes);
  return b;
}
Status run_stats(const CudaContext& ctx, const FewcConvPlan& p, StatsBuffers& b, size_t ws_bytes) {
  FewcStatsOut so;
  so.sum = b.sums.as<float>();
  so.sqsum = b.sums.as<float>() + p.g.k;
  so.ws = b.ws.get();
  so.ws_bytes = ws_bytes;
  return fewc_conv_fwd_cuda(ctx.stream, p, b.x.get(), b.w.get(), b.b.get(), b.y.get(), &so);
}

// Per channel: sum and sum of squares of y (N, P, Q, K) in float64, and the sums of |y| and y^2 for the bound.
struct RefSums {
  std::vector<double> sum, sqsum, abs;
};
RefSums ref_sums(const std::vector<float>& y, int64_t k) {
  RefSums r;
  r.sum.assign(static_cast<size_t>(k), 0.0), r.sqsum.assign(static_cast<size_t>(k), 0.0);
  r.abs.assign(static_cast<size_t>(k), 0.0);
  for (size_t i = 0; i < y.size(); ++i) {
    const double v = y[i];
    r.sum[i % k] += v, r.sqsum[i % k] += v * v, r.abs[i % k] += std::fabs(v);
  }
  return r;
}

// got (2, K) against the reference; returns the number of channels out of bounds (the first few printed).
int sums_off(const std::string& tag, const std::vector<float>& got, const RefSums& r) {
  const size_t k = r.sum.size();
  int bad = 0;
  for (size_t c = 0; c < k; ++c)
    for (int which = 0; which < 2; ++which) {
      const double want = which == 0 ? r.sum[c] : r.sqsum[c];
      const double scale = which == 0 ? r.abs[c] : r.sqsum[c];
      const double g = got[which * k + c];
      if (std::isfinite(g) && std::fabs(g - want) <= 1e-5 * scale + 1e-30) continue;
      if (++bad <= 4)
        std::printf("  %s: channel %zu %s %.9g, want %.9g (scale %.3g)\n", tag.c_str(), c, which ? "sqsum" : "sum", g,
                    want, scale);
    }
  return bad;
}

}  // namespace

TEST_CASE("fewc forward with statistics: y bitwise the plain forward's, per-channel sums of the stored y "
          "(VGG conv0, ResNet stem, K 16/32, odd sizes, bias; f16, bf16)",
          "[kernel][fewc][conv2d][conv_bn_stats]") {
  CudaContext ctx = make_context();
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"vgg conv0 3x3/1 224x224", conv_geom(2, 224, 224, 3, 64, 3, 3, 1, 1, 1, 1)},
      {"r50 stem 7x7/2 224x224", conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)},
      {"7x7/2 odd 37x37 N=3 K=32", conv_geom(3, 37, 37, 3, 32, 7, 7, 2, 2, 3, 3)},
      {"3x3/1 C=1 K=16 29x150", conv_geom(2, 29, 150, 1, 16, 3, 3, 1, 1, 1, 1)},
      {"5x5/1 C=4 K=32 13x17", conv_geom(2, 13, 17, 4, 32, 5, 5, 1, 1, 2, 2)}};
  uint64_t seed = 7600;
  for (const auto& [name, g] : cases) {
    const StemInputs in = stem_inputs(g, true, ++seed);
    for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
      const std::string tag = std::string(name) + " " + gpu_dtype_name(t);
      INFO(tag << ": " << conv2d_geom_str(g));
      const FewcConvPlan plan = stats_plan(g, t);
      REQUIRE(plan.stats);
      StatsBuffers b = stats_buffers(t, in, plan);
      // The plain forward (with the bias) first: the reference y.
      poison(b.y);
      REQUIRE_OK(fewc_conv_fwd_cuda(ctx.stream, plan, b.x.get(), b.w.get(), b.b.get(), b.y.get()));
      sync_ok(ctx);
      const std::vector<uint8_t> plain = from_device<uint8_t>(b.y.get(), b.y_bytes);
      poison(b.y);
      poison(b.sums);
      poison(b.ws);
      REQUIRE_OK(run_stats(ctx, plan, b, b.ws_bytes));
      sync_ok(ctx);
      const std::vector<uint8_t> with = from_device<uint8_t>(b.y.get(), b.y_bytes);
      CHECK_RESULT(compare_bitwise("fewc fwd+stats y " + tag, with.data(), plain.data(), b.y_bytes, 2));
      const RefSums ref = ref_sums(from_device_as(t, b.y.get(), in.dy.size()), g.k);
      const std::vector<float> sums = from_device<float>(b.sums.get(), static_cast<size_t>(2 * g.k));
      CHECK(sums_off("fewc stats " + tag, sums, ref) == 0);
      // Again, from a poisoned workspace: bitwise.
      poison(b.ws);
      poison(b.sums);
      REQUIRE_OK(run_stats(ctx, plan, b, b.ws_bytes));
      sync_ok(ctx);
      const std::vector<float> again = from_device<float>(b.sums.get(), static_cast<size_t>(2 * g.k));
      CHECK_RESULT(compare_bitwise("fewc stats rerun " + tag, again.data(), sums.data(), sums.size() * 4, 4));
      // Seven CTAs looping over the tasks: other partials, the same sums up to rounding.
      if (plan.t.tasks > 7) {
        FewcConvPlan fewer = plan;
        fewer.grid = 7;
        poison(b.sums);
        REQUIRE_OK(run_stats(ctx, fewer, b, fewc_stats_workspace_bytes(fewer)));
        sync_ok(ctx);
        CHECK(sums_off("fewc stats grid 7 " + tag,
                       from_device<float>(b.sums.get(), static_cast<size_t>(2 * g.k)), ref) == 0);
      }
    }
  }
}

TEST_CASE("fewc forward with statistics replayed from a captured CUDA graph equals the eager run bitwise",
          "[kernel][fewc][conv2d][conv_bn_stats]") {
  CudaContext ctx = make_context();
  const Conv2dGeom g = conv_geom(2, 40, 48, 3, 64, 3, 3, 1, 1, 1, 1);
  const StemInputs in = stem_inputs(g, true, 7700);
  for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
    INFO(gpu_dtype_name(t));
    const FewcConvPlan plan = stats_plan(g, t);
    StatsBuffers b = stats_buffers(t, in, plan);
    auto launch = [&]() -> Status { return run_stats(ctx, plan, b, b.ws_bytes); };
    REQUIRE_OK(launch());
    sync_ok(ctx);
    const size_t ns = static_cast<size_t>(2 * g.k) * 4;
    const std::vector<uint8_t> eager = from_device<uint8_t>(b.sums.get(), ns);
    cudaGraphExec_t exec = capture_graph(ctx, launch, cudaStreamCaptureModeThreadLocal);
    poison(b.sums);
    poison(b.ws);
    REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
    sync_ok(ctx);
    const std::vector<uint8_t> replay = from_device<uint8_t>(b.sums.get(), ns);
    REQUIRE_CUDA(cudaGraphExecDestroy(exec));
    CHECK_RESULT(compare_bitwise("fewc stats graph replay", eager.data(), replay.data(), ns, 4));
  }
}

TEST_CASE("fewc forward with statistics refuses a short workspace and a plan without the statistics kernel",
          "[kernel][fewc][conv2d][conv_bn_stats]") {
  CudaContext ctx = make_context();
  const Conv2dGeom g = conv_geom(2, 16, 16, 3, 64, 3, 3, 1, 1, 1, 1);
  const StemInputs in = stem_inputs(g, true, 7800);
  FewcConvPlan plan = stats_plan(g, GpuDType::F16);
  StatsBuffers b = stats_buffers(GpuDType::F16, in, plan);
  const Status short_ws = run_stats(ctx, plan, b, b.ws_bytes - 4);
  REQUIRE_FALSE(short_ws.ok());
  CHECK(short_ws.errors()[0].code == ErrCode::Internal);
  plan.stats = false;
  const Status no_stats = run_stats(ctx, plan, b, b.ws_bytes);
  REQUIRE_FALSE(no_stats.ok());
  CHECK(no_stats.errors()[0].code == ErrCode::Internal);
  sync_ok(ctx);
}
