// The ring weight gradient of the wgmma conv on the GPU (runtime/ops/conv2d/wgconv.h: wgconv_wgrad_plan,
// wgconv_wgrad_cuda; C and K of 64 or 128) against the float64 direct conv's weight gradient
// (tests/gpu/stem_conv_ref.h), f16 and bf16: C = K = 64 and the 64 x 64 blocks of K = 128 and C = 128; small and odd
// sizes (one row, one column, positions not a multiple of the 128-position tile, images
// whose padded plane is smaller than a tile), many tiles per CTA (grids of 1 and 7 CTAs walking their ranges through
// the ring) and VGG's 224-wide rows, each with a warpgroup's three taps as three m64n64 wgmma and merged into one
// m64n192 (WgConvWgradPlan::merged_taps), at pipeline depths 3 and 4 where each fits (300-wide rows: 3 only); two
// runs and a captured graph's replay bitwise equal to the eager run; what the plan and the launch refuse.
//
// Tolerances (as tests/gpu/fewc_wgrad_test.cpp): inputs on the 1/64 grid, so every product is exact in fp32; the
// sums are fp32 (wgmma accumulators over a CTA's positions) and float64 across CTAs, dw f32: |got - ref| <= acc * mag
// + 2^-24 |ref| with the stem modes' acc (2^-10 f16, 2^-7 bf16), and the norm-wise relative error below rel.
#include <cmath>
#include <string>
#include <vector>

#include "core/util/thread_pool.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/wgconv.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/stem_conv_ref.h"
#include "tests/support/conv_geom.h"

using namespace trctl;
using trctl::testing::conv_geom;
using namespace trctl::gputest;

namespace {

// The plan (depth 0: the deepest that fits), or a visible skip when the device is not compute capability 9.0 (the
// kernel is sm_90a code).
bool wgrad_plan(const Conv2dGeom& g, GpuDType t, WgConvWgradPlan* out, int depth = 0) {
  Result<WgConvWgradPlan> p = wgconv_wgrad_plan(g, t, depth);
  if (!p.ok() && p.errors().front().code == ErrCode::NotSupported && wgconv_wgrad_ring_eligible(g)) {
    WARN("skipped: " << p.error_text());
    return false;
  }
  if (!p.ok()) FAIL(p.error_text());
  std::printf("  wgconv wgrad %s %s: grid %lld, depth %d, ring %d rows, smem %zu B\n", gpu_dtype_name(t),
              conv2d_geom_str(g).c_str(), static_cast<long long>(p.value().grid), p.value().depth,
              p.value().ring_rows, p.value().smem_bytes);
  *out = p.value();
  return true;
}

struct WgradBuffers {
  DevBuf x, dy, dw, ws;
  size_t ws_bytes = 0;
};
WgradBuffers wgrad_buffers(GpuDType t, const StemInputs& in, const WgConvWgradPlan& plan) {
  WgradBuffers b;
  b.x = to_device_as(t, in.x);
  b.dy = to_device_as(t, in.dy);
  b.dw = DevBuf(in.w.size() * 4);
  b.ws_bytes = wgconv_wgrad_workspace_bytes(plan);
  b.ws = DevBuf(b.ws_bytes);
  return b;
}
Status run_wgrad(const CudaContext& ctx, const WgConvWgradPlan& p, const WgradBuffers& b) {
  return wgconv_wgrad_cuda(ctx.stream, p, b.dy.get(), b.x.get(), b.dw.as<float>(), b.ws.get(), b.ws_bytes);
}

// One plan against the reference: dw close, a rerun bitwise, and fewer CTAs (each walking more tiles through its
// ring: another order of the sums, close, not bitwise; the grid stays a multiple of the 64 x 64 blocks).
void check_wgrad(const CudaContext& ctx, const Conv2dGeom& g, const StemInputs& in, const StemRef& ref,
                 const StemMode& m, const WgConvWgradPlan& plan, const std::string& tag) {
  WgradBuffers b = wgrad_buffers(m.io, in, plan);
  poison(b.dw);
  poison(b.ws);
  REQUIRE_OK(run_wgrad(ctx, plan, b));
  sync_ok(ctx);
  const std::vector<float> dw = from_device<float>(b.dw.get(), in.w.size());
  check_stem_close("wgconv wgrad dw " + tag, m.acc, m.rel, std::ldexp(1.0, -24), dw, ref.dw, ref.dw_mag,
                   g.r * g.s * g.c);
  // A second run (poisoned workspace and output again) is bitwise the first.
  poison(b.dw);
  poison(b.ws);
  REQUIRE_OK(run_wgrad(ctx, plan, b));
  sync_ok(ctx);
  const std::vector<float> again = from_device<float>(b.dw.get(), in.w.size());
  CHECK_RESULT(compare_bitwise("wgconv wgrad rerun " + tag, again.data(), dw.data(), dw.size() * 4, 4));
  const int64_t blocks = (g.k / 64) * (g.c / 64);
  for (int64_t runs : {1, 7}) {
    if (runs * blocks >= plan.grid) continue;
    WgConvWgradPlan fewer = plan;  // the launch and the workspace take the grid from the plan
    fewer.grid = runs * blocks;
    WgradBuffers bf = wgrad_buffers(m.io, in, fewer);
    poison(bf.dw);
    poison(bf.ws);
    REQUIRE_OK(run_wgrad(ctx, fewer, bf));
    sync_ok(ctx);
    check_stem_close("wgconv wgrad runs " + std::to_string(runs) + " " + tag, m.acc, m.rel, std::ldexp(1.0, -24),
                     from_device<float>(bf.dw.get(), in.w.size()), ref.dw, ref.dw_mag, g.r * g.s * g.c);
  }
}

}  // namespace

TEST_CASE("wgconv ring weight gradient matches the float64 direct conv (f16, bf16; odd sizes, one row or column, "
          "many tiles per CTA, 224-wide rows) and reruns bitwise",
          "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"9x9 N=2 (242 positions: a partial second tile)", conv_geom(2, 9, 9, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"3x4 N=1 (30 positions: less than a tile)", conv_geom(1, 3, 4, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"13x7 N=3 odd", conv_geom(3, 13, 7, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"1x40 N=2 one row", conv_geom(2, 1, 40, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"40x1 N=2 one column", conv_geom(2, 40, 1, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"56x56 N=4 (ResNet's layer1: ~100 tiles)", conv_geom(4, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"224x224 N=1 (VGG's conv1_2 rows)", conv_geom(1, 224, 224, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"12x10 N=2 C=64 K=128 (two filter blocks)", conv_geom(2, 12, 10, 64, 128, 3, 3, 1, 1, 1, 1)},
      {"9x13 N=2 C=128 K=64 (two channel blocks)", conv_geom(2, 9, 13, 128, 64, 3, 3, 1, 1, 1, 1)},
      {"28x28 N=2 C=128 K=128 (four blocks)", conv_geom(2, 28, 28, 128, 128, 3, 3, 1, 1, 1, 1)},
      {"2x300 N=1 (300-wide rows: four tiles' ring too large, depth 3 only)",
       conv_geom(1, 2, 300, 64, 64, 3, 3, 1, 1, 1, 1)}};
  uint64_t seed = 9100;
  for (const auto& [name, g] : cases) {
    REQUIRE(wgconv_wgrad_ring_eligible(g));
    const StemInputs in = stem_inputs(g, true, ++seed);
    const StemRef ref = stem_ref(g, in, &pool);
    for (const StemMode& m : kStemModes) {
      if (m.io == GpuDType::F32) continue;
      for (int depth = kWgconvWgradMinDepth; depth <= kWgconvWgradMaxDepth; ++depth) {
        if (!wgconv_wgrad_depth_fits(g, depth)) continue;
        for (bool merged : {false, true}) {
          const std::string tag = std::string(name) + " " + gpu_dtype_name(m.io) + " depth " +
                                  std::to_string(depth) + (merged ? " merged taps" : "");
          INFO(tag << ": " << conv2d_geom_str(g));
          WgConvWgradPlan plan;
          if (!wgrad_plan(g, m.io, &plan, depth)) return;
          REQUIRE(plan.depth == depth);
          plan.merged_taps = merged;
          check_wgrad(ctx, g, in, ref, m, plan, tag);
        }
      }
    }
  }
}

// The batch-norm prologue (WgConvWgradPlan::prologue): x is the batch norm's input and each x row is normalised (+
// ReLU) as it lands; dw equals, bitwise, the plain kernel's on the apply pass's output (emulated with bn_elem.cuh's
// float operations: stem_conv_ref.h's bn_apply_stored) on the same grid. With and without the ReLU, f16 and bf16,
// depths 3 and 4, merged and not, a second channel block (C = 128: the constants of channels 64..127), odd sizes,
// many tiles per CTA (grid of one run) and 224-wide rows.
TEST_CASE("wgconv ring weight gradient applies x's batch norm as its rows land, bitwise the plain kernel on the "
          "apply pass's output",
          "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"13x7 N=3 odd", conv_geom(3, 13, 7, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"9x13 N=2 C=128 (two channel blocks)", conv_geom(2, 9, 13, 128, 64, 3, 3, 1, 1, 1, 1)},
      {"3x224 N=2 (VGG's conv1_2 rows)", conv_geom(2, 3, 224, 64, 64, 3, 3, 1, 1, 1, 1)}};
  uint64_t seed = 9400;
  for (const auto& [name, g] : cases) {
    const StemInputs in = stem_inputs(g, true, ++seed);
    Rng rng(seed);
    const size_t c = static_cast<size_t>(g.c);
    const std::vector<float> gamma = rng.uniform_vec(c, 0.5f, 1.5f), beta = rng.uniform_vec(c, -0.5f, 0.5f),
                             mean = rng.uniform_vec(c, -0.2f, 0.2f), invstd = rng.uniform_vec(c, 0.5f, 2.0f);
    const DevBuf dg = to_device(gamma), db = to_device(beta), dm = to_device(mean), di = to_device(invstd);
    for (GpuDType t : {GpuDType::F16, GpuDType::BF16})
      for (bool relu : {true, false}) {
        StemInputs ain = in;  // x replaced by the apply pass's output, as the io type stores it
        ain.x = bn_apply_stored(t, in.x, gamma, beta, mean, invstd, relu);
        WgConvPrologue pro;
        pro.gamma = static_cast<const float*>(dg.get()), pro.beta = static_cast<const float*>(db.get());
        pro.mean = static_cast<const float*>(dm.get()), pro.invstd = static_cast<const float*>(di.get());
        pro.relu = relu;
        for (int depth = kWgconvWgradMinDepth; depth <= kWgconvWgradMaxDepth; ++depth)
          for (bool merged : {false, true}) {
            const std::string tag = std::string("wgconv wgrad prologue ") + name + " " + gpu_dtype_name(t) +
                                    (relu ? " relu" : "") + " depth " + std::to_string(depth) +
                                    (merged ? " merged" : "");
            INFO(tag << ": " << conv2d_geom_str(g));
            Result<WgConvWgradPlan> pp = wgconv_wgrad_plan(g, t, depth, true);
            if (!pp.ok() && pp.errors().front().code == ErrCode::NotSupported) {
              WARN("skipped: " << pp.error_text());
              return;
            }
            REQUIRE_OK(pp);
            WgConvWgradPlan pplan = pp.value();
            pplan.merged_taps = merged;
            WgConvWgradPlan plain;
            if (!wgrad_plan(g, t, &plain, depth)) return;
            plain.merged_taps = merged;
            const int64_t blocks = (g.k / 64) * (g.c / 64);
            for (int64_t grid : {pplan.grid, blocks}) {  // about one CTA per SM; one run (every tile through one ring)
              pplan.grid = plain.grid = grid;
              WgradBuffers b = wgrad_buffers(t, in, pplan), ba = wgrad_buffers(t, ain, plain);
              REQUIRE_OK(run_wgrad(ctx, plain, ba));
              poison(b.dw);
              poison(b.ws);
              REQUIRE_OK(wgconv_wgrad_cuda(ctx.stream, pplan, b.dy.get(), b.x.get(), b.dw.as<float>(), b.ws.get(),
                                           b.ws_bytes, &pro));
              sync_ok(ctx);
              const std::vector<float> want = from_device<float>(ba.dw.get(), in.w.size()),
                                       got = from_device<float>(b.dw.get(), in.w.size());
              CHECK_RESULT(compare_bitwise(tag + " grid " + std::to_string(grid), got.data(), want.data(),
                                           got.size() * 4, 4));
            }
            // The prologue's plan without its constants, and the plain plan with them, are refused.
            WgradBuffers b = wgrad_buffers(t, in, pplan);
            CHECK_FALSE(run_wgrad(ctx, pplan, b).ok());
            CHECK_FALSE(wgconv_wgrad_cuda(ctx.stream, plain, b.dy.get(), b.x.get(), b.dw.as<float>(), b.ws.get(),
                                          b.ws_bytes, &pro)
                            .ok());
          }
      }
  }
}

TEST_CASE("wgconv ring weight gradient: a captured graph's replay is bitwise the eager run", "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  const Conv2dGeom g = conv_geom(2, 30, 30, 64, 64, 3, 3, 1, 1, 1, 1);
  const StemInputs in = stem_inputs(g, true, 9200);
  WgConvWgradPlan plan;
  if (!wgrad_plan(g, GpuDType::F16, &plan)) return;
  WgradBuffers b = wgrad_buffers(GpuDType::F16, in, plan);
  REQUIRE_OK(run_wgrad(ctx, plan, b));
  sync_ok(ctx);
  const std::vector<float> eager = from_device<float>(b.dw.get(), in.w.size());
  cudaGraphExec_t exec = capture_graph(
      ctx, [&] { return run_wgrad(ctx, plan, b); }, cudaStreamCaptureModeThreadLocal);
  poison(b.dw);
  poison(b.ws);
  REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
  sync_ok(ctx);
  const std::vector<float> replay = from_device<float>(b.dw.get(), in.w.size());
  CHECK_RESULT(compare_bitwise("wgconv wgrad graph replay", replay.data(), eager.data(), eager.size() * 4, 4));
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
}

TEST_CASE("wgconv ring weight gradient refuses geometries, io types and workspaces it does not cover",
          "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  const Conv2dGeom g = conv_geom(2, 9, 9, 64, 64, 3, 3, 1, 1, 1, 1);
  WgConvWgradPlan plan;
  if (!wgrad_plan(g, GpuDType::F16, &plan)) return;
  Result<WgConvWgradPlan> f32 = wgconv_wgrad_plan(g, GpuDType::F32);
  REQUIRE_FALSE(f32.ok());
  CHECK(f32.errors().front().code == ErrCode::NotSupported);
  for (const Conv2dGeom& other : {conv_geom(2, 9, 9, 256, 64, 3, 3, 1, 1, 1, 1),   // C = 256
                                  conv_geom(2, 9, 9, 64, 192, 3, 3, 1, 1, 1, 1),   // K = 192
                                  conv_geom(2, 9, 9, 64, 64, 3, 3, 2, 2, 1, 1),    // stride 2
                                  conv_geom(1, 8, 600, 64, 64, 3, 3, 1, 1, 1, 1)}) {  // the ring over the limit
    Result<WgConvWgradPlan> p = wgconv_wgrad_plan(other, GpuDType::F16);
    REQUIRE_FALSE(p.ok());
    CHECK(p.errors().front().code == ErrCode::NotSupported);
    CHECK_THAT(p.error_text(), Catch::Contains("C and K of 64 or 128"));
  }
  // Pipeline depths outside 3..4, or whose shared memory does not fit (four tiles' ring at 300-wide rows).
  const Conv2dGeom w300 = conv_geom(1, 2, 300, 64, 64, 3, 3, 1, 1, 1, 1);
  for (const auto& [geom, depth] : {std::pair{g, 2}, std::pair{g, 5}, std::pair{w300, 4}}) {
    Result<WgConvWgradPlan> p = wgconv_wgrad_plan(geom, GpuDType::F16, depth);
    REQUIRE_FALSE(p.ok());
    CHECK(p.errors().front().code == ErrCode::NotSupported);
    CHECK_THAT(p.error_text(), Catch::Contains("pipeline depth"));
  }
  const StemInputs in = stem_inputs(g, true, 9300);
  WgradBuffers b = wgrad_buffers(GpuDType::F16, in, plan);
  Status short_ws = wgconv_wgrad_cuda(ctx.stream, plan, b.dy.get(), b.x.get(), b.dw.as<float>(), b.ws.get(),
                                      b.ws_bytes - 4);
  REQUIRE_FALSE(short_ws.ok());
  CHECK(short_ws.errors().front().code == ErrCode::Internal);
  WgConvWgradPlan odd_grid = plan;  // not a multiple of the blocks: refused (here 1 block: grid 0)
  odd_grid.grid = 0;
  Status bad_grid = wgconv_wgrad_cuda(ctx.stream, odd_grid, b.dy.get(), b.x.get(), b.dw.as<float>(), b.ws.get(),
                                      b.ws_bytes);
  REQUIRE_FALSE(bad_grid.ok());
  CHECK(bad_grid.errors().front().code == ErrCode::Internal);
  Status misaligned = wgconv_wgrad_cuda(ctx.stream, plan, static_cast<const char*>(b.dy.get()) + 2, b.x.get(),
                                        b.dw.as<float>(), b.ws.get(), b.ws_bytes);
  REQUIRE_FALSE(misaligned.ok());
  CHECK(misaligned.errors().front().code == ErrCode::Internal);
}
