// The few-channel tensor-core weight gradient (and a quick forward check) on the GPU (runtime/ops/conv2d/fewc_cuda.h: fewc_wgrad_plan,
// fewc_conv_wgrad_cuda; the backend runs it with train.conv_fewc: on, the default) against the float64 direct conv's weight
// gradient (tests/gpu/stem_conv_ref.h) on the ResNet-50 stem, VGG16's 3x3/1 first conv and odd, few-channel and
// largest-filter geometries of stride 2 and 1 (stride 1 reads odd pixels from the patch's shifted copy) in f16 and
// bf16, also with grids of 1 and 7 CTAs looping over the tasks (the double-buffered copies); two runs and a captured
// graph's replay bitwise equal to the eager run; what the plan refuses (K != 64, too wide a dy row, f32) and a short
// workspace.
//
// Tolerances: inputs on the 1/64 grid, so every product is exact in fp32; the sums are fp32 (MMA accumulators, then
// the CTA partials added in order), dw stays fp32: |got - ref| <= acc * mag + 2^-24 |ref| with the stem modes' acc
// (2^-10 f16, 2^-7 bf16: far above fp32 summation error), and the norm-wise relative error below rel.
#include <string>
#include <vector>

#include "core/util/thread_pool.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
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

FewcWgradPlan wgrad_plan(const Conv2dGeom& g, GpuDType t) {
  Result<FewcWgradPlan> p = fewc_wgrad_plan(g, t);
  if (!p.ok()) FAIL(p.error_text());
  std::printf("  fewc wgrad %s %s: grid %d, smem %lld B\n", gpu_dtype_name(t), conv2d_geom_str(g).c_str(),
              p.value().grid, static_cast<long long>(p.value().t.smem_bytes));
  return p.value();
}

struct WgradBuffers {
  DevBuf x, dy, dw, ws;
  size_t ws_bytes = 0;
};
WgradBuffers wgrad_buffers(GpuDType t, const StemInputs& in, const FewcWgradPlan& plan) {
  WgradBuffers b;
  b.x = to_device_as(t, in.x);
  b.dy = to_device_as(t, in.dy);
  b.dw = DevBuf(in.w.size() * 4);
  b.ws_bytes = fewc_wgrad_workspace_bytes(plan);
  b.ws = DevBuf(b.ws_bytes);
  return b;
}
Status run_wgrad(const CudaContext& ctx, const FewcWgradPlan& p, WgradBuffers& b) {
  return fewc_conv_wgrad_cuda(ctx.stream, p, b.dy.get(), b.x.get(), b.dw.as<float>(), b.ws.get(), b.ws_bytes);
}

}  // namespace

TEST_CASE("fewc weight gradient matches the float64 direct conv (ResNet-50 stem, VGG conv0, odd sizes, C=1..4, 8x8)",
          "[kernel][fewc][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"r50 stem 7x7/2 pad 3", conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)},
      {"7x7/2 pad 3 odd 37x37 N=3", conv_geom(3, 37, 37, 3, 64, 7, 7, 2, 2, 3, 3)},
      {"5x5/2 pad 2 C=1 41x30", conv_geom(2, 41, 30, 1, 64, 5, 5, 2, 2, 2, 2)},
      {"3x3/2 pad 1 C=4 33x20", conv_geom(2, 33, 20, 4, 64, 3, 3, 2, 2, 1, 1)},
      {"8x8/2 pad 3 C=2 300x52", conv_geom(1, 300, 52, 2, 64, 8, 8, 2, 2, 3, 3)},
      // Stride 1 (the shifted patch copy for odd pixels): VGG16's first conv, TP 2 with odd Q and unaligned rows
      // (45 x 3 elements: loaded, not pipelined), SG 2 with Q > 128, the largest filter, 1x1.
      {"vgg conv0 3x3/1 pad 1", conv_geom(2, 224, 224, 3, 64, 3, 3, 1, 1, 1, 1)},
      {"3x3/1 pad 1 odd 37x45 N=3", conv_geom(3, 37, 45, 3, 64, 3, 3, 1, 1, 1, 1)},
      {"5x5/1 pad 2 C=1 29x130", conv_geom(2, 29, 130, 1, 64, 5, 5, 1, 1, 2, 2)},
      {"7x7/1 pad 3 C=4 20x33", conv_geom(2, 20, 33, 4, 64, 7, 7, 1, 1, 3, 3)},
      {"8x8/1 pad 3 C=2 19x21", conv_geom(2, 19, 21, 2, 64, 8, 8, 1, 1, 3, 3)},
      {"1x1/1 C=2 9x17", conv_geom(2, 9, 17, 2, 64, 1, 1, 1, 1, 0, 0)}};
  uint64_t seed = 7100;
  for (const auto& [name, g] : cases) {
    REQUIRE(fewc_wgrad_eligible(g));
    const StemInputs in = stem_inputs(g, true, ++seed);
    const StemRef ref = stem_ref(g, in, &pool);
    for (const StemMode& m : kStemModes) {
      if (m.io == GpuDType::F32) continue;
      const std::string tag = std::string(name) + " " + gpu_dtype_name(m.io);
      INFO(tag << ": " << conv2d_geom_str(g));
      const FewcWgradPlan plan = wgrad_plan(g, m.io);
      WgradBuffers b = wgrad_buffers(m.io, in, plan);
      poison(b.dw);
      poison(b.ws);
      REQUIRE_OK(run_wgrad(ctx, plan, b));
      sync_ok(ctx);
      const std::vector<float> dw = from_device<float>(b.dw.get(), in.w.size());
      check_stem_close("fewc wgrad dw " + tag, m.acc, m.rel, std::ldexp(1.0, -24), dw, ref.dw, ref.dw_mag,
                       g.r * g.s * g.c);
      // A second run (poisoned workspace again) is bitwise the first.
      poison(b.ws);
      REQUIRE_OK(run_wgrad(ctx, plan, b));
      sync_ok(ctx);
      const std::vector<float> again = from_device<float>(b.dw.get(), in.w.size());
      CHECK_RESULT(compare_bitwise("fewc wgrad rerun " + tag, again.data(), dw.data(), dw.size() * 4, 4));
      // Fewer CTAs than tasks: each CTA loops over several tasks, the next task's dy and input rows copied while
      // the current one computes (both dy buffers used); another order of the partial sums, so close to the
      // reference rather than bitwise the planned grid.
      for (int grid : {1, 7}) {
        if (grid >= plan.t.t.tasks) continue;
        FewcWgradPlan fewer = plan;  // the launch and the workspace take the grid from the plan
        fewer.grid = grid;
        WgradBuffers bf = wgrad_buffers(m.io, in, fewer);
        poison(bf.dw);
        poison(bf.ws);
        REQUIRE_OK(run_wgrad(ctx, fewer, bf));
        sync_ok(ctx);
        check_stem_close("fewc wgrad grid " + std::to_string(grid) + " " + tag, m.acc, m.rel, std::ldexp(1.0, -24),
                         from_device<float>(bf.dw.get(), in.w.size()), ref.dw, ref.dw_mag, g.r * g.s * g.c);
      }
    }
  }
}

// The forward's quick check beside the weight gradient (tests/gpu/fewc_conv_test.cpp has the forward's own cases).
TEST_CASE("fewc forward matches the float64 direct conv on the two RGB stems (f16, bf16, with and without bias)",
          "[kernel][fewc][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"r50 stem 7x7/2 pad 3", conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)},
      {"vgg conv0 3x3/1 pad 1 40x40", conv_geom(2, 40, 40, 3, 64, 3, 3, 1, 1, 1, 1)},
      {"7x7/2 pad 3 odd 37x37 N=3 K=32", conv_geom(3, 37, 37, 3, 32, 7, 7, 2, 2, 3, 3)}};
  uint64_t seed = 7000;
  for (const auto& [name, g] : cases) {
    const StemInputs in = stem_inputs(g, true, ++seed);
    const StemRef ref = stem_ref(g, in, &pool);
    for (const StemMode& m : kStemModes) {
      if (m.io == GpuDType::F32) continue;
      const std::string tag = std::string(name) + " " + gpu_dtype_name(m.io);
      INFO(tag << ": " << conv2d_geom_str(g));
      Result<FewcConvPlan> plan = fewc_conv_plan(g, m.io);
      REQUIRE_OK(plan);
      const DevBuf x = to_device_as(m.io, in.x), w = to_device_as(m.io, in.w), b = to_device_as(m.io, in.b);
      DevBuf y(in.dy.size() * gpu_dtype_size(m.io));
      for (bool bias : {false, true}) {
        poison(y);
        REQUIRE_OK(fewc_conv_fwd_cuda(ctx.stream, plan.value(), x.get(), w.get(), bias ? b.get() : nullptr, y.get()));
        sync_ok(ctx);
        check_stem_close("fewc fwd" + std::string(bias ? "+bias " : " ") + tag, m.acc, m.rel, unit_roundoff(m.io),
                         from_device_as(m.io, y.get(), in.dy.size()), bias ? ref.yb : ref.y,
                         bias ? ref.yb_mag : ref.y_mag, g.k);
      }
    }
  }
}

TEST_CASE("fewc weight gradient replayed from a captured CUDA graph equals the eager run bitwise",
          "[kernel][fewc][conv2d]") {
  CudaContext ctx = make_context();
  const Conv2dGeom stride2 = conv_geom(2, 64, 48, 3, 64, 7, 7, 2, 2, 3, 3);
  const Conv2dGeom stride1 = conv_geom(2, 40, 48, 3, 64, 3, 3, 1, 1, 1, 1);
  const std::pair<Conv2dGeom, GpuDType> runs[] = {
      {stride2, GpuDType::F16}, {stride2, GpuDType::BF16}, {stride1, GpuDType::F16}, {stride1, GpuDType::BF16}};
  for (const auto& [g, t] : runs) {
    INFO(gpu_dtype_name(t) << " " << conv2d_geom_str(g));
    const StemInputs in = stem_inputs(g, true, 7200);
    const FewcWgradPlan plan = wgrad_plan(g, t);
    WgradBuffers b = wgrad_buffers(t, in, plan);
    const size_t nw = in.w.size() * 4;
    auto launch = [&]() -> Status { return run_wgrad(ctx, plan, b); };
    REQUIRE_OK(launch());
    sync_ok(ctx);
    const std::vector<uint8_t> eager = from_device<uint8_t>(b.dw.get(), nw);
    cudaGraphExec_t exec = capture_graph(ctx, launch, cudaStreamCaptureModeThreadLocal);
    poison(b.dw);
    poison(b.ws);
    REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
    sync_ok(ctx);
    const std::vector<uint8_t> replay = from_device<uint8_t>(b.dw.get(), nw);
    REQUIRE_CUDA(cudaGraphExecDestroy(exec));
    CHECK_RESULT(compare_bitwise("fewc wgrad graph replay", eager.data(), replay.data(), nw, 4));
  }
}

TEST_CASE("fewc weight gradient refuses what it does not cover and a short workspace", "[kernel][fewc][conv2d]") {
  CudaContext ctx = make_context();
  const Conv2dGeom wide = conv_geom(1, 8, 1024, 4, 64, 3, 3, 1, 1, 1, 1);  // dy rows past the shared memory
  const Conv2dGeom k32 = conv_geom(2, 16, 16, 3, 32, 7, 7, 2, 2, 3, 3);
  const Conv2dGeom ok = conv_geom(2, 16, 16, 3, 64, 7, 7, 2, 2, 3, 3);
  for (const Conv2dGeom& g : {wide, k32}) {
    Result<FewcWgradPlan> p = fewc_wgrad_plan(g, GpuDType::F16);
    REQUIRE_FALSE(p.ok());
    CHECK(p.errors()[0].code == ErrCode::NotSupported);
  }
  Result<FewcWgradPlan> f32 = fewc_wgrad_plan(ok, GpuDType::F32);
  REQUIRE_FALSE(f32.ok());
  CHECK(f32.errors()[0].code == ErrCode::NotSupported);
  const FewcWgradPlan plan = wgrad_plan(ok, GpuDType::F16);
  const StemInputs in = stem_inputs(ok, true, 7300);
  WgradBuffers b = wgrad_buffers(GpuDType::F16, in, plan);
  const Status st =
      fewc_conv_wgrad_cuda(ctx.stream, plan, b.dy.get(), b.x.get(), b.dw.as<float>(), b.ws.get(), b.ws_bytes - 4);
  REQUIRE_FALSE(st.ok());
  CHECK(st.errors()[0].code == ErrCode::Internal);
  sync_ok(ctx);
}

TEST_CASE("fewc weight-gradient plans at two sizes: the larger plan still launches after the smaller one is planned",
          "[kernel][fewc][conv2d]") {
  // As the forward's case in fewc_conv_test.cpp: the shared-memory limit belongs to the kernel, not to a plan.
  CudaContext ctx = make_context();
  const Conv2dGeom big = conv_geom(2, 64, 200, 3, 64, 7, 7, 2, 2, 3, 3);
  const Conv2dGeom small = conv_geom(2, 16, 16, 3, 64, 7, 7, 2, 2, 3, 3);
  for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
    INFO(gpu_dtype_name(t));
    const FewcWgradPlan pb = wgrad_plan(big, t);
    const FewcWgradPlan ps = wgrad_plan(small, t);  // planned last, less shared memory
    REQUIRE(pb.t.smem_bytes > ps.t.smem_bytes);
    const StemInputs ib = stem_inputs(big, true, 7400), is = stem_inputs(small, true, 7401);
    WgradBuffers bb = wgrad_buffers(t, ib, pb), bs = wgrad_buffers(t, is, ps);
    REQUIRE_OK(run_wgrad(ctx, pb, bb));
    REQUIRE_OK(run_wgrad(ctx, ps, bs));
    sync_ok(ctx);
  }
}

// The batch-norm prologue (fewc_cuda.h's FewcBnGradIn; the backend's fewc_bn_grad_choose): the weight gradient that
// computes dy as the batch norm's backward dx while staging it equals, bitwise, batchnorm_bwd_cuda's dx followed by
// the plain weight gradient on the same grid; batchnorm_bwd_cuda with dx nullptr writes the same dgamma and dbeta.
// With the ReLU mask recomputed from x (relu_beta) and without a ReLU; stride 1 and 2, odd sizes (pixels past P and
// Q must stay 0), f16 and bf16. The batch statistics are arbitrary per-channel values (the backward takes them as
// given): means around x's, inverse deviations in [0.5, 2], gamma and beta of both signs (some channels masked
// mostly off).
TEST_CASE("fewc weight gradient with the batch-norm prologue equals the batch norm's dx then the plain weight "
          "gradient, bitwise",
          "[kernel][fewc][conv2d][batchnorm]") {
  CudaContext ctx = make_context();
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"vgg conv0 3x3/1 40x48", conv_geom(2, 40, 48, 3, 64, 3, 3, 1, 1, 1, 1)},
      {"3x3/1 odd 37x45 N=3", conv_geom(3, 37, 45, 3, 64, 3, 3, 1, 1, 1, 1)},
      {"stem 7x7/2 64x48", conv_geom(2, 64, 48, 3, 64, 7, 7, 2, 2, 3, 3)}};
  uint64_t seed = 7900;
  for (const auto& [name, g] : cases)
    for (GpuDType t : {GpuDType::F16, GpuDType::BF16})
      for (bool relu : {true, false}) {
        const std::string tag = std::string(name) + " " + gpu_dtype_name(t) + (relu ? " relu" : " no relu");
        INFO(tag << ": " << conv2d_geom_str(g));
        const StemInputs in = stem_inputs(g, true, ++seed);  // x (the conv's input); dy as the batch norm's g
        Rng rng(++seed);
        const int64_t rows = g.n * g.p * g.q, k = g.k;
        const std::vector<float> bn_x = rng.normal_vec(static_cast<size_t>(rows * k), 0.2f, 1.0f);
        const std::vector<float> gamma = rng.uniform_vec(static_cast<size_t>(k), -1.5f, 1.5f);
        const std::vector<float> beta = rng.uniform_vec(static_cast<size_t>(k), -1.0f, 1.0f);
        const std::vector<float> mean = rng.uniform_vec(static_cast<size_t>(k), -0.3f, 0.6f);
        const std::vector<float> invstd = rng.uniform_vec(static_cast<size_t>(k), 0.5f, 2.0f);
        const DevBuf x = to_device_as(t, in.x), gin = to_device_as(t, in.dy), xb = to_device_as(t, bn_x);
        const DevBuf dgam = to_device_as(GpuDType::F32, gamma), dbet = to_device_as(GpuDType::F32, beta);
        const DevBuf dmean = to_device_as(GpuDType::F32, mean), dinv = to_device_as(GpuDType::F32, invstd);
        DevBuf dx(static_cast<size_t>(rows * k) * gpu_dtype_size(t));
        DevBuf dg(static_cast<size_t>(k) * 4), db(static_cast<size_t>(k) * 4);
        DevBuf dg2(static_cast<size_t>(k) * 4), db2(static_cast<size_t>(k) * 4);
        const size_t bnwsb = batchnorm_workspace_bytes(rows, k);
        DevBuf bnws(bnwsb);
        const float* relu_beta = relu ? dbet.as<float>() : nullptr;
        REQUIRE_OK(batchnorm_bwd_cuda(ctx.stream, gin.get(), xb.get(), nullptr, t, dgam.as<float>(), dmean.as<float>(),
                                      dinv.as<float>(), dx.get(), dg.as<float>(), db.as<float>(), rows, k, bnws.get(),
                                      bnwsb, relu_beta));
        poison(dg2);
        poison(db2);
        REQUIRE_OK(batchnorm_bwd_cuda(ctx.stream, gin.get(), xb.get(), nullptr, t, dgam.as<float>(), dmean.as<float>(),
                                      dinv.as<float>(), nullptr, dg2.as<float>(), db2.as<float>(), rows, k, bnws.get(),
                                      bnwsb, relu_beta));
        sync_ok(ctx);
        CHECK_RESULT(compare_bitwise("bn bwd without dx: dgamma " + tag, from_device<float>(dg2.get(), k).data(),
                                     from_device<float>(dg.get(), k).data(), k * 4, 4));
        CHECK_RESULT(compare_bitwise("bn bwd without dx: dbeta " + tag, from_device<float>(db2.get(), k).data(),
                                     from_device<float>(db.get(), k).data(), k * 4, 4));
        // The prologue's plan (its own residency), and the plain plan on the same grid: the same partial sums.
        Result<FewcWgradPlan> bp = fewc_wgrad_plan(g, t, true);
        REQUIRE_OK(bp);
        REQUIRE(bp.value().bn);
        FewcWgradPlan plain = wgrad_plan(g, t);
        plain.grid = bp.value().grid;
        std::printf("  fewc wgrad+bn %s: grid %d, smem %lld B\n", tag.c_str(), bp.value().grid,
                    static_cast<long long>(bp.value().t.bn_smem_bytes));
        const size_t wsb = fewc_wgrad_workspace_bytes(bp.value());
        DevBuf ws(wsb), dw_ref(in.w.size() * 4), dw(in.w.size() * 4);
        REQUIRE_OK(fewc_conv_wgrad_cuda(ctx.stream, plain, dx.get(), x.get(), dw_ref.as<float>(), ws.get(), wsb));
        FewcBnGradIn bn;
        bn.g = gin.get();
        bn.x = xb.get();
        bn.gamma = dgam.as<float>();
        bn.mean = dmean.as<float>();
        bn.invstd = dinv.as<float>();
        bn.dgamma = dg.as<float>();
        bn.dbeta = db.as<float>();
        bn.relu_beta = relu_beta;
        poison(dw);
        poison(ws);
        REQUIRE_OK(fewc_conv_wgrad_cuda(ctx.stream, bp.value(), nullptr, x.get(), dw.as<float>(), ws.get(), wsb, &bn));
        sync_ok(ctx);
        CHECK_RESULT(compare_bitwise("fewc wgrad+bn " + tag, from_device<float>(dw.get(), in.w.size()).data(),
                                     from_device<float>(dw_ref.get(), in.w.size()).data(), in.w.size() * 4, 4));
        // The prologue's inputs with the plain plan (and the other way round) are refused.
        const Status mixed = fewc_conv_wgrad_cuda(ctx.stream, plain, dx.get(), x.get(), dw.as<float>(), ws.get(), wsb,
                                                  &bn);
        REQUIRE_FALSE(mixed.ok());
        CHECK(mixed.errors()[0].code == ErrCode::Internal);
        const Status missing =
            fewc_conv_wgrad_cuda(ctx.stream, bp.value(), dx.get(), x.get(), dw.as<float>(), ws.get(), wsb);
        REQUIRE_FALSE(missing.ok());
        CHECK(missing.errors()[0].code == ErrCode::Internal);
        sync_ok(ctx);
      }
}
