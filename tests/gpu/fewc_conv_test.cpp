// The few-channel tensor-core convolution forward on the GPU (runtime/ops/conv2d/fewc_cuda.h: fewc_conv_plan,
// fewc_conv_fwd_cuda; the backend runs it under AMP unless train.conv_fewc is off) against the float64
// direct conv (tests/gpu/stem_conv_ref.h) on the ResNet-50 stem, VGG's 3x3/1 first conv (small and at 224x224),
// odd sizes, C = 1 and 4 with K = 16, a 5x5/1 conv and a row wider than 128 outputs, in f16 and bf16, with and
// without bias (input rows loaded in 16-byte pieces where W * C % 8 == 0, else element by element); nothing written
// past y; two runs, a grid smaller than the task count, an unaligned x and a captured graph's replay bitwise equal
// to the eager run; what the plan and the launch refuse (f32, ineligible geometries, unaligned y).
// The weight gradient: tests/gpu/fewc_wgrad_test.cpp.
//
// Tolerances as tests/gpu/s2d_conv_test.cpp: |got - ref| <= acc * mag + u * |ref| per element (mag: the same conv
// of |inputs|; u: the io type's unit roundoff) and a norm-wise relative error below rel. Inputs on the 1/64 grid
// (exact in f16 and bf16), so every product and the fp32 sums are exact and y is rounded once (after the bias):
// the stem modes' acc 2u and rel 1e-2 hold with room to spare.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/util/thread_pool.h"
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

constexpr GpuDType kLowp[] = {GpuDType::F16, GpuDType::BF16};
constexpr size_t kTail = 256;  // bytes after y that must stay poisoned

FewcConvPlan fwd_plan(const Conv2dGeom& g, GpuDType t) {
  Result<FewcConvPlan> p = fewc_conv_plan(g, t);
  if (!p.ok()) FAIL(p.error_text());
  const FewcTiling& ti = p.value().t;
  std::printf("  fewc fwd %s %s: grid %d, tasks %lld, warps %lld, smem %lld B\n", gpu_dtype_name(t),
              conv2d_geom_str(g).c_str(), p.value().grid, static_cast<long long>(ti.tasks),
              static_cast<long long>(ti.warps), static_cast<long long>(ti.smem_bytes));
  return p.value();
}

// x (N,H,W,C), w (K,R,S,C), b (K) in the io type; y (N,P,Q,K) with kTail spare bytes after it.
struct FwdBuffers {
  DevBuf x, w, b, y;
  size_t y_bytes = 0;
};
FwdBuffers fwd_buffers(GpuDType t, const StemInputs& in) {
  FwdBuffers b;
  b.x = to_device_as(t, in.x), b.w = to_device_as(t, in.w), b.b = to_device_as(t, in.b);
  b.y_bytes = in.dy.size() * gpu_dtype_size(t);
  b.y = DevBuf(b.y_bytes + kTail);
  return b;
}
Status run_fwd(const CudaContext& ctx, const FewcConvPlan& p, const FwdBuffers& b, bool bias, void* y = nullptr) {
  return fewc_conv_fwd_cuda(ctx.stream, p, b.x.get(), b.w.get(), bias ? b.b.get() : nullptr, y ? y : b.y.get());
}

void check_tail(const std::string& what, const FwdBuffers& b) { check_tail_poisoned(what, b.y, b.y_bytes, kTail); }

}  // namespace

TEST_CASE("fewc forward matches the float64 direct conv (RGB stems, odd sizes, C=1/C=4, 5x5/1, wide rows; f16, "
          "bf16, with and without bias) and reruns bitwise",
          "[kernel][fewc][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"r50 stem 7x7/2 pad 3 224x224", conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)},
      {"vgg-like 3x3/1 pad 1 40x40", conv_geom(2, 40, 40, 3, 64, 3, 3, 1, 1, 1, 1)},
      {"vgg16 conv0 3x3/1 pad 1 224x224 N=1 (one row per task)", conv_geom(1, 224, 224, 3, 64, 3, 3, 1, 1, 1, 1)},
      {"7x7/2 pad 3 odd 37x37 N=3 K=32 (Q=19, P odd)", conv_geom(3, 37, 37, 3, 32, 7, 7, 2, 2, 3, 3)},
      {"7x7/2 pad 3 C=1 K=16 45x33", conv_geom(2, 45, 33, 1, 16, 7, 7, 2, 2, 3, 3)},
      {"3x3/1 pad 1 C=4 K=16 31x26", conv_geom(2, 31, 26, 4, 16, 3, 3, 1, 1, 1, 1)},
      {"5x5/1 pad 2 C=3 K=32 29x35", conv_geom(2, 29, 35, 3, 32, 5, 5, 1, 1, 2, 2)},
      {"3x3/1 pad 1 C=3 K=64 7x200 (Q=200: 13 row tiles, odd)", conv_geom(1, 7, 200, 3, 64, 3, 3, 1, 1, 1, 1)}};
  uint64_t seed = 6000;
  for (const auto& [name, g] : cases) {
    REQUIRE(fewc_conv_eligible(g));
    const StemInputs in = stem_inputs(g, true, ++seed);
    const StemRef ref = stem_ref(g, in, &pool);
    for (const StemMode& m : kStemModes) {
      if (m.io == GpuDType::F32) continue;
      const std::string tag = std::string(name) + " " + gpu_dtype_name(m.io);
      INFO(tag << ": " << conv2d_geom_str(g));
      const FewcConvPlan plan = fwd_plan(g, m.io);
      const FwdBuffers b = fwd_buffers(m.io, in);
      for (bool bias : {false, true}) {
        const std::string what = "fewc fwd" + std::string(bias ? "+bias " : " ") + tag;
        poison(b.y);
        REQUIRE_OK(run_fwd(ctx, plan, b, bias));
        sync_ok(ctx);
        const std::vector<uint8_t> first = from_device<uint8_t>(b.y.get(), b.y_bytes);
        check_stem_close(what, m.acc, m.rel, unit_roundoff(m.io), from_device_as(m.io, b.y.get(), in.dy.size()),
                         bias ? ref.yb : ref.y, bias ? ref.yb_mag : ref.y_mag, g.k);
        check_tail(what, b);
        // A second run into a poisoned y is bitwise the first.
        poison(b.y);
        REQUIRE_OK(run_fwd(ctx, plan, b, bias));
        sync_ok(ctx);
        const std::vector<uint8_t> again = from_device<uint8_t>(b.y.get(), b.y_bytes);
        CHECK_RESULT(compare_bitwise(what + " rerun", again.data(), first.data(), b.y_bytes, 2));
      }
    }
  }
}

TEST_CASE("fewc forward with fewer CTAs than tasks (each CTA looping over several) equals the planned grid bitwise",
          "[kernel][fewc][conv2d]") {
  CudaContext ctx = make_context();
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"r50 stem 7x7/2 pad 3 224x224", conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)},
      {"7x7/2 pad 3 odd 37x37 N=3 K=32", conv_geom(3, 37, 37, 3, 32, 7, 7, 2, 2, 3, 3)}};
  for (const auto& [name, g] : cases)
    for (GpuDType t : kLowp) {
      INFO(name << " " << gpu_dtype_name(t) << ": " << conv2d_geom_str(g));
      const StemInputs in = stem_inputs(g, true, 6100);
      const FewcConvPlan plan = fwd_plan(g, t);
      const FwdBuffers b = fwd_buffers(t, in);
      poison(b.y);
      REQUIRE_OK(run_fwd(ctx, plan, b, true));
      sync_ok(ctx);
      const std::vector<uint8_t> want = from_device<uint8_t>(b.y.get(), b.y_bytes);
      for (int grid : {1, 3, 7}) {
        INFO("grid " << grid << " for " << plan.t.tasks << " tasks");
        REQUIRE(grid < plan.t.tasks);
        FewcConvPlan fewer = plan;  // the launch takes its grid from the plan
        fewer.grid = grid;
        poison(b.y);
        REQUIRE_OK(run_fwd(ctx, fewer, b, true));
        sync_ok(ctx);
        const std::vector<uint8_t> got = from_device<uint8_t>(b.y.get(), b.y_bytes);
        CHECK_RESULT(compare_bitwise(std::string("fewc fwd grid ") + std::to_string(grid) + " " + name, got.data(),
                                     want.data(), b.y_bytes, 2));
      }
    }
}

TEST_CASE("fewc forward from an x off 16-byte alignment (element loads) equals the aligned run (row loads) bitwise",
          "[kernel][fewc][conv2d]") {
  CudaContext ctx = make_context();
  // W * C a multiple of 8: from an aligned x the patch rows load in 16-byte pieces (fewc_rows_vectorizable).
  const Conv2dGeom g = conv_geom(2, 40, 48, 3, 64, 7, 7, 2, 2, 3, 3);
  for (GpuDType t : kLowp) {
    INFO(gpu_dtype_name(t) << ": " << conv2d_geom_str(g));
    const StemInputs in = stem_inputs(g, true, 6150);
    const FewcConvPlan plan = fwd_plan(g, t);
    const FwdBuffers b = fwd_buffers(t, in);
    poison(b.y);
    REQUIRE_OK(run_fwd(ctx, plan, b, true));
    sync_ok(ctx);
    const std::vector<uint8_t> want = from_device<uint8_t>(b.y.get(), b.y_bytes);
    std::vector<uint16_t> bits(in.x.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = lowp_bits(t, in.x[i]);
    DevBuf xo(bits.size() * 2 + 16);
    void* x_off = static_cast<char*>(xo.get()) + 2;  // one element past a 16-byte boundary
    upload(x_off, bits);
    poison(b.y);
    REQUIRE_OK(fewc_conv_fwd_cuda(ctx.stream, plan, x_off, b.w.get(), b.b.get(), b.y.get()));
    sync_ok(ctx);
    const std::vector<uint8_t> got = from_device<uint8_t>(b.y.get(), b.y_bytes);
    CHECK_RESULT(compare_bitwise("fewc fwd unaligned x", got.data(), want.data(), b.y_bytes, 2));
  }
}

TEST_CASE("fewc forward replayed from a captured CUDA graph equals the eager run bitwise", "[kernel][fewc][conv2d]") {
  CudaContext ctx = make_context();
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"7x7/2 pad 3 64x48", conv_geom(2, 64, 48, 3, 64, 7, 7, 2, 2, 3, 3)},
      {"3x3/1 pad 1 40x40", conv_geom(2, 40, 40, 3, 64, 3, 3, 1, 1, 1, 1)}};
  for (const auto& [name, g] : cases)
    for (GpuDType t : kLowp) {
      INFO(name << " " << gpu_dtype_name(t) << ": " << conv2d_geom_str(g));
      const StemInputs in = stem_inputs(g, true, 6200);
      const FewcConvPlan plan = fwd_plan(g, t);
      const FwdBuffers b = fwd_buffers(t, in);
      DevBuf y2(b.y_bytes);  // the launch without bias
      auto launch = [&]() -> Status {
        if (Status st = run_fwd(ctx, plan, b, true); !st) return st;
        return run_fwd(ctx, plan, b, false, y2.get());
      };
      REQUIRE_OK(launch());  // eager
      sync_ok(ctx);
      const std::vector<uint8_t> ey = from_device<uint8_t>(b.y.get(), b.y_bytes),
                                 ey2 = from_device<uint8_t>(y2.get(), b.y_bytes);
      cudaGraphExec_t exec = capture_graph(ctx, launch, cudaStreamCaptureModeThreadLocal);
      poison(b.y);
      poison(y2);
      REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
      sync_ok(ctx);
      const std::vector<uint8_t> ry = from_device<uint8_t>(b.y.get(), b.y_bytes),
                                 ry2 = from_device<uint8_t>(y2.get(), b.y_bytes);
      REQUIRE_CUDA(cudaGraphExecDestroy(exec));
      CHECK_RESULT(compare_bitwise("fewc graph replay y (bias)", ey.data(), ry.data(), b.y_bytes, 2));
      CHECK_RESULT(compare_bitwise("fewc graph replay y (no bias)", ey2.data(), ry2.data(), b.y_bytes, 2));
    }
}

TEST_CASE("fewc forward plan refuses f32 and geometries outside its rule; the launch refuses an unaligned y",
          "[kernel][fewc][conv2d]") {
  CudaContext ctx = make_context();
  const Conv2dGeom stem = conv_geom(2, 32, 32, 3, 64, 7, 7, 2, 2, 3, 3);
  Result<FewcConvPlan> f32 = fewc_conv_plan(stem, GpuDType::F32);
  REQUIRE_FALSE(f32.ok());
  CHECK(f32.errors()[0].code == ErrCode::NotSupported);
  Conv2dGeom grouped = conv_geom(2, 32, 32, 4, 16, 3, 3, 1, 1, 1, 1);
  grouped.groups = 2;
  const std::pair<const char*, Conv2dGeom> refused[] = {
      {"C=5", conv_geom(2, 32, 32, 5, 64, 3, 3, 1, 1, 1, 1)},
      {"K=48", conv_geom(2, 32, 32, 3, 48, 3, 3, 1, 1, 1, 1)},
      {"K=128", conv_geom(2, 32, 32, 3, 128, 3, 3, 1, 1, 1, 1)},
      {"stride 3", conv_geom(2, 32, 32, 3, 64, 3, 3, 3, 3, 1, 1)},
      {"stride 2x1", conv_geom(2, 32, 32, 3, 64, 3, 3, 2, 1, 1, 1)},
      {"dilation 2", conv_geom(2, 32, 32, 3, 64, 3, 3, 1, 1, 2, 2, 2, 2)},
      {"9x9", conv_geom(2, 32, 32, 3, 64, 9, 9, 1, 1, 4, 4)},
      {"groups 2", grouped}};
  for (const auto& [name, g] : refused)
    for (GpuDType t : kLowp) {
      INFO(name << " " << gpu_dtype_name(t) << ": " << conv2d_geom_str(g));
      REQUIRE_FALSE(fewc_conv_eligible(g));
      Result<FewcConvPlan> p = fewc_conv_plan(g, t);
      REQUIRE_FALSE(p.ok());
      CHECK(p.errors()[0].code == ErrCode::NotSupported);
    }
  // y one element off a 16-byte boundary: refused before anything is launched (y stays poisoned).
  const FewcConvPlan plan = fwd_plan(stem, GpuDType::F16);
  const StemInputs in = stem_inputs(stem, true, 6300);
  const FwdBuffers b = fwd_buffers(GpuDType::F16, in);
  poison(b.y);
  const Status st = run_fwd(ctx, plan, b, false, static_cast<char*>(b.y.get()) + 2);
  REQUIRE_FALSE(st.ok());
  CHECK(st.errors()[0].code == ErrCode::Internal);
  sync_ok(ctx);
  const std::vector<uint8_t> y = from_device<uint8_t>(b.y.get(), b.y_bytes);
  size_t written = 0;
  for (uint8_t v : y) written += v != 0xFF;
  CHECK(written == 0);
}

TEST_CASE("fewc plans of one kernel at two sizes: the larger plan still launches after the smaller one is planned",
          "[kernel][fewc][conv2d]") {
  // The kernel's dynamic shared-memory limit is per kernel, not per plan: a training plan at 24x24 and a validation
  // plan at 20x20 (same K, same kernel) must both launch, whichever was planned last (val_size_test's fp16 run
  // failed on this with cudaErrorInvalidValue).
  CudaContext ctx = make_context();
  const Conv2dGeom big = conv_geom(2, 40, 200, 3, 64, 3, 3, 1, 1, 1, 1);
  const Conv2dGeom small = conv_geom(2, 12, 12, 3, 64, 3, 3, 1, 1, 1, 1);
  for (GpuDType t : kLowp) {
    INFO(gpu_dtype_name(t));
    const FewcConvPlan pb = fwd_plan(big, t);
    const FewcConvPlan ps = fwd_plan(small, t);  // planned last, less shared memory
    REQUIRE(pb.t.smem_bytes > ps.t.smem_bytes);
    const StemInputs ib = stem_inputs(big, true, 6400), is = stem_inputs(small, true, 6401);
    const FwdBuffers bb = fwd_buffers(t, ib), bs = fwd_buffers(t, is);
    REQUIRE_OK(run_fwd(ctx, pb, bb, true));
    REQUIRE_OK(run_fwd(ctx, ps, bs, true));
    sync_ok(ctx);
  }
}
