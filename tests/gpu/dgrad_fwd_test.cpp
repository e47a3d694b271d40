// train.conv_dgrad_fwd on the device: the filter transform (dgrad_fwd_filter_cuda) bitwise the CPU reference for
// f16 bits and f32 (tile edges: C and K off multiples of 32, 5x3 and 1x1 filters); cuDNN's forward over the
// transformed filters against cuDNN's data gradient and the float64 CPU reference (f32 and f16); the backend with
// `on` against `off` (the loss bitwise: the forward is the same; the gradients upstream of the data gradients within
// f16 rounding; `on` twice bitwise); `auto` taking exactly the data gradients whose forward the autotune cache says
// is faster (the measured cache with its times rewritten: one faster, one within the 3 % margin).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/cuda/conv_autotune.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/dgrad_fwd.h"
#include "runtime/ops/conv2d/dgrad_fwd_cuda.h"
#include "tests/gpu/backend_step_util.h"
#include "tests/support/conv_geom.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/weights_diff.h"

using namespace trctl;
using namespace trctl::gputest;
using trctl::testing::conv_geom;

TEST_CASE("GPU dgrad_fwd filter transform is bitwise the CPU reference (f16 bits, f32)", "[gpu][kernel][dgrad_fwd]") {
  CudaContext ctx = make_context();
  const Conv2dGeom geoms[] = {conv_geom(1, 4, 4, 64, 128, 3, 3, 1, 1, 1, 1),
                              conv_geom(1, 6, 5, 40, 24, 5, 3, 1, 1, 2, 1),
                              conv_geom(1, 3, 3, 33, 70, 1, 1, 1, 1, 0, 0)};
  for (const Conv2dGeom& g : geoms) {
    CAPTURE(g.c, g.k, g.r, g.s);
    const size_t n = static_cast<size_t>(g.k * g.r * g.s * g.c);
    std::vector<uint16_t> w16(n), ref16(n);
    std::vector<float> w32(n), ref32(n);
    for (size_t i = 0; i < n; ++i) {
      w16[i] = static_cast<uint16_t>((i * 2654435761u) >> 13);
      w32[i] = static_cast<float>(i) * 0.5f - 3.0f;
    }
    dgrad_fwd_filter_cpu(g, w16.data(), ref16.data());
    dgrad_fwd_filter_cpu(g, w32.data(), ref32.data());
    DevBuf dw16 = to_device(w16), dw32 = to_device(w32), out16(n * 2 + 64), out32(n * 4 + 64);
    poison(out16);
    poison(out32);
    REQUIRE_OK(dgrad_fwd_filter_cuda(ctx.stream, g, GpuDType::F16, dw16.get(), out16.get()));
    REQUIRE_OK(dgrad_fwd_filter_cuda(ctx.stream, g, GpuDType::F32, dw32.get(), out32.get()));
    sync_ok(ctx);
    CHECK(from_device<uint16_t>(out16.get(), n) == ref16);
    CHECK(from_device<float>(out32.get(), n) == ref32);
    check_tail_poisoned("f16", out16, n * 2, 64);
    check_tail_poisoned("f32", out32, n * 4, 64);
  }
  Conv2dGeom strided = conv_geom(1, 8, 8, 8, 8, 3, 3, 2, 2, 1, 1);
  DevBuf a(4096), b(4096);
  CHECK_FALSE(dgrad_fwd_filter_cuda(ctx.stream, strided, GpuDType::F16, a.get(), b.get()).ok());
}

TEST_CASE("cuDNN's forward over the transformed filters gives cuDNN's data gradient (f32, f16)",
          "[gpu][kernel][dgrad_fwd]") {
  CudaContext ctx = make_context();
  const Conv2dGeom geoms[] = {conv_geom(4, 12, 10, 16, 32, 3, 3, 1, 1, 1, 1),
                              conv_geom(2, 9, 11, 24, 8, 5, 5, 1, 1, 2, 2),
                              conv_geom(2, 7, 7, 8, 16, 3, 3, 1, 1, 0, 0)};
  for (GpuDType t : {GpuDType::F32, GpuDType::F16}) {
    for (const Conv2dGeom& g : geoms) {
      CAPTURE(gpu_dtype_name(t), g.c, g.k, g.r, g.pad_h);
      const size_t ndy = static_cast<size_t>(g.n * g.p * g.q * g.k), nw = static_cast<size_t>(g.k * g.r * g.s * g.c),
                   ndx = static_cast<size_t>(g.n * g.h * g.w * g.c);
      Rng rng(17);
      std::vector<float> dy = rng.uniform_vec(ndy, -1.0f, 1.0f), w = rng.uniform_vec(nw, -0.5f, 0.5f);
      for (float& v : dy) v = round_to(t, v);
      for (float& v : w) v = round_to(t, v);
      std::vector<double> ref(ndx), ref_abs(ndx), dy_abs = to_double(dy), w_abs = to_double(w);
      for (double& v : dy_abs) v = std::fabs(v);
      for (double& v : w_abs) v = std::fabs(v);
      conv2d_grad_input_cpu<double>(g, to_double(dy).data(), to_double(w).data(), ref.data(), nullptr);
      conv2d_grad_input_cpu<double>(g, dy_abs.data(), w_abs.data(), ref_abs.data(), nullptr);
      // Allowed: the f32 sums' rounding (K R S terms, generously 1e-5 of the sum of |products|), and for f16 the
      // output's rounding (half an f16 ulp of |dx|, 2^-11 relative).
      std::vector<double> bound(ndx);
      for (size_t i = 0; i < ndx; ++i)
        bound[i] = 1e-5 * ref_abs[i] + 1e-7 + (t == GpuDType::F16 ? unit_roundoff(t) * std::fabs(ref[i]) : 0.0);
      ConvDesc d;
      d.g = g;
      d.io = t;
      Result<CudnnConvPlan> dg = cudnn_conv_plan(ctx.cudnn, d);
      ConvDesc f = d;
      f.g = dgrad_fwd_geom(g);
      f.need_dgrad = false;
      Result<CudnnConvPlan> fw = cudnn_conv_plan(ctx.cudnn, f);
      REQUIRE_OK(dg);
      REQUIRE_OK(fw);
      const size_t wsb =
          std::max<size_t>({cudnn_conv_workspace_bytes(dg.value()), cudnn_conv_workspace_bytes(fw.value()), 256});
      DevBuf ddy = to_device_as(t, dy), dw = to_device_as(t, w), wf(nw * 4 + 16), dx1(ndx * 4 + 16), dx2(ndx * 4 + 16),
             ws(wsb);
      REQUIRE_OK(cudnn_conv_dgrad(ctx.cudnn, ctx.stream, dg.value(), ddy.get(), dw.get(), dx1.get(), ws.get(), wsb));
      REQUIRE_OK(dgrad_fwd_filter_cuda(ctx.stream, g, t, dw.get(), wf.get()));
      REQUIRE_OK(
          cudnn_conv_fwd(ctx.cudnn, ctx.stream, fw.value(), ddy.get(), wf.get(), nullptr, dx2.get(), ws.get(), wsb));
      sync_ok(ctx);
      const std::vector<double> a = to_double(from_device_as(t, dx1.get(), ndx)),
                                b = to_double(from_device_as(t, dx2.get(), ndx));
      CHECK_RESULT(compare_close("forward over the transformed filters vs float64", b, ref, bound));
      CHECK_RESULT(compare_close("cuDNN's data gradient vs float64", a, ref, bound));
    }
  }
}

namespace {

// stem 3 -> 16 (its data gradient never computed), conv1 16 -> 32 and conv2 32 -> 16 (3x3/1 pad 1: both data
// gradients eligible; conv1's forward geometry is conv2's data gradient's and the other way round), ReLUs, no batch
// norm (nothing pairs with the data gradients).
const char* kYaml = R"(
seed: 21
data:
  dataset: synthetic
  synthetic: {train_size: 64, val_size: 32, height: 12, width: 10, channels: 3, classes: 10}
  batch_size: 16
  val_batch_size: 16
model:
  layers:
    - {type: conv2d, name: stem, out_channels: 16, kernel_size: 3, padding: 1, bias: false}
    - {type: relu, name: r0}
    - {type: conv2d, name: conv1, out_channels: 32, kernel_size: 3, padding: 1, bias: false}
    - {type: relu, name: r1}
    - {type: conv2d, name: conv2, out_channels: 16, kernel_size: 3, padding: 1, bias: false}
    - {type: relu, name: r2}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 1, precision: fp16, device: cuda}
run: {progress: off}
)";

Spec spec_of(const std::vector<std::string>& overrides) { return parsed_spec(kYaml, "dgrad_fwd.yaml", overrides); }

int dgrad_programs(const Compiled& c) { return testing::programs_with(c.graph, OpKind::Conv2dGradInput); }

}  // namespace

TEST_CASE("train.conv_dgrad_fwd on runs the data gradients as forward convs: counted, repeatable, cuDNN's gradients",
          "[gpu][backend][cnn][dgrad_fwd]") {
  testing::ScratchDir scratch("trctl_dgrad_fwd_gpu");
  EnvGuard env("TRCTL_AUTOTUNE_CACHE", (scratch.path / "none.txt").string());  // no cache: heuristics
  const BuiltBackend on = build_backend(spec_of({"train.conv_dgrad_fwd=on"})),
                     on2 = build_backend(spec_of({"train.conv_dgrad_fwd=on"})),
                     off = build_backend(spec_of({"train.conv_dgrad_fwd=off"})),
                     automatic = build_backend(spec_of({"train.conv_dgrad_fwd=auto"}));
  const int programs = dgrad_programs(*on.c);
  REQUIRE(programs >= 1);
  CHECK(on.be->conv_algo_sources()->dgrad_fwd == 2 * programs);  // conv1's and conv2's
  CHECK(off.be->conv_algo_sources()->dgrad_fwd == 0);
  CHECK(automatic.be->conv_algo_sources()->dgrad_fwd == 0);  // auto without measurements: cuDNN's data gradient
  const int64_t sample = 12 * 10 * 3;
  const double l1 = one_train_step(on, sample), l2 = one_train_step(on2, sample), lo = one_train_step(off, sample);
  CHECK(l1 == l2);
  CHECK(l1 == lo);  // the same forward
  const std::vector<float> g1 = floats_of(on.be->read_region(Region::Grads)),
                           g2 = floats_of(on2.be->read_region(Region::Grads)),
                           go = floats_of(off.be->read_region(Region::Grads));
  CHECK(g1 == g2);
  for (const char* name : {"conv2.weight.grad", "fc.weight.grad"})  // downstream of every data gradient: bitwise
    CHECK(value_slice(*on.c, g1, name) == value_slice(*off.c, go, name));
  for (const char* name : {"conv1.weight.grad", "stem.weight.grad"}) {
    const double r = testing::rel_diff(value_slice(*on.c, g1, name), value_slice(*off.c, go, name));
    INFO(name << ": relative difference " << r << " to cuDNN's data gradient");
    CHECK(r < 1e-2);
  }
}

TEST_CASE("train.conv_dgrad_fwd auto takes the data gradients whose forward the autotune cache measured faster",
          "[gpu][backend][cnn][dgrad_fwd][autotune]") {
  testing::ScratchDir scratch("trctl_dgrad_fwd_gpu");
  const std::string path = (scratch.path / "conv_autotune.txt").string();
  EnvGuard env("TRCTL_AUTOTUNE_CACHE", path);
  // auto (not the default): the autotune measures each data gradient's forward geometry only when the key is not off
  const BuiltBackend first = build_backend(spec_of({"train.conv_dgrad_fwd=auto"}));
  REQUIRE_OK(conv_autotune_spec(*first.c, path, false, nullptr));
  Result<AutotuneCache> cache = autotune_cache_load(path);
  REQUIRE_OK(cache);
  Result<AutotuneDevice> dev = autotune_device_current();
  REQUIRE_OK(dev);
  // conv1 (16 -> 32) and conv2 (32 -> 16) at N = 16, 12 x 10, as the backend keys them (f16, deterministic).
  ConvDesc c1, c2;
  c1.g = conv_geom(16, 12, 10, 16, 32, 3, 3, 1, 1, 1, 1);
  c2.g = conv_geom(16, 12, 10, 32, 16, 3, 3, 1, 1, 1, 1);
  c1.io = c2.io = GpuDType::F16;
  auto entry = [&](ConvDir dir, const ConvDesc& d) -> ConvAlgoChoice& {
    auto it = cache.value().entries.find(autotune_key(dev.value(), dir, d));
    REQUIRE(it != cache.value().entries.end());
    return it->second;
  };
  // conv1's data gradient: its forward (conv2's geometry) half the time -> taken; conv2's: its forward (conv1's
  // geometry) 1 % faster, inside the margin -> cuDNN's data gradient.
  entry(ConvDir::Dgrad, c1).ms = 1.0f;
  entry(ConvDir::Fwd, c2).ms = 0.5f;
  entry(ConvDir::Dgrad, c2).ms = 1.0f;
  entry(ConvDir::Fwd, c1).ms = 0.99f;
  REQUIRE_OK(autotune_cache_save(path, cache.value()));
  const BuiltBackend tuned = build_backend(spec_of({"train.conv_dgrad_fwd=auto"}));
  const int programs = dgrad_programs(*tuned.c);
  CHECK(tuned.be->conv_algo_sources()->dgrad_fwd == programs);  // conv1's only
  CHECK(build_backend(spec_of({})).be->conv_algo_sources()->dgrad_fwd == 0);  // the default: off
  CHECK(build_backend(spec_of({"train.conv_dgrad_fwd=on"})).be->conv_algo_sources()->dgrad_fwd == 2 * programs);
  const double l = one_train_step(tuned, 12 * 10 * 3);
  CHECK(std::isfinite(l));
}
