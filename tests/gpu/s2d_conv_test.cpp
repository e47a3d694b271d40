// Space-to-depth convolutions on the GPU (kernels runtime/ops/conv2d/s2d_cuda.h, composition
// runtime/cuda/s2d_conv.h, backend path train.conv_s2d): the three transforms bitwise equal to the CPU references
// (f32, f16, bf16; aligned and unaligned z); the s2d forward (with and without bias) and weight gradient through the
// backend's pieces (s2d_conv_fwd / s2d_conv_wgrad over a cuDNN plan of s2d_conv_geom) against the float64 direct
// conv on the ResNet-50 stem and 3x3/2 geometries; captured and replayed bitwise like the eager run; a plan of the
// wrong geometry refused. End to end: a tiny CNN with a 7x7/2 stem trained under fp16 AMP with conv_s2d on and off
// gives losses within AMP tolerance, and each setting plans exactly the conv geometries `--autotune` measured for
// it (on: the stride-1 geometry over 16 channels; off: the old C = 3 paths), so run.json's counts stay right.
//
// Tolerances as tests/gpu/conv2d_test.cpp: |got - ref| <= acc * mag + u * |ref| per element (mag: the same conv of
// |inputs|; u: the unit roundoff of the type the result is rounded to) and a norm-wise relative error below rel.
//   f32 (full fp32 cuDNN): acc 1e-5, rel 1e-5. f16/bf16: inputs on the 1/64 grid (exact), products exact, fp32
//   accumulation, then the rounding to the io type (possibly twice: split reductions, the bias pass): acc 2u,
//   rel 1e-2. The weight gradient is cuDNN's dw2 in the io dtype widened exactly to fp32: the same bounds.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/compiler.h"
#include "runtime/cuda/conv_autotune.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/s2d_conv.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/s2d.h"
#include "runtime/ops/conv2d/s2d_cuda.h"
#include "runtime/run_facts.h"
#include "runtime/train/trainer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/stem_conv_ref.h"
#include "tests/gpu/gpu_train_util.h"
#include "tests/support/conv_geom.h"
#include "tests/support/gradcheck.h"
#include "tests/support/scratch_dir.h"

using namespace trctl;
using trctl::testing::ScratchDir;
using trctl::testing::conv_geom;
using namespace trctl::gputest;

namespace {

const GpuDType kTypes[] = {GpuDType::F32, GpuDType::F16, GpuDType::BF16};

// Host copy of v as the device holds it in type t: floats for f32, f16/bf16 bits otherwise.
std::vector<uint8_t> host_bytes(GpuDType t, const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * gpu_dtype_size(t));
  if (t == GpuDType::F32) {
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = lowp_bits(t, v[i]);
    std::memcpy(out.data(), bits.data(), out.size());
  }
  return out;
}

// The CPU reference of a transform over the bytes of type t (float copies, or bit copies for f16/bf16).
template <class Fn>
std::vector<uint8_t> host_transform(GpuDType t, const std::vector<uint8_t>& in, size_t out_elems, const Fn& fn) {
  std::vector<uint8_t> out(out_elems * gpu_dtype_size(t));
  if (t == GpuDType::F32) fn(reinterpret_cast<const float*>(in.data()), reinterpret_cast<float*>(out.data()));
  else fn(reinterpret_cast<const uint16_t*>(in.data()), reinterpret_cast<uint16_t*>(out.data()));
  return out;
}

std::vector<std::pair<const char*, Conv2dGeom>> kernel_cases() {
  return {{"r50 stem 7x7/2 pad 3", conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)},
          {"3x3/2 pad 1 C=3 odd 37x29", conv_geom(2, 37, 29, 3, 32, 3, 3, 2, 2, 1, 1)},
          {"4x4/2 pad 1 C=4", conv_geom(3, 20, 18, 4, 8, 4, 4, 2, 2, 1, 1)},
          {"5x3/2 pad 2x1 C=1", conv_geom(2, 23, 17, 1, 16, 5, 3, 2, 2, 2, 1)},
          {"2x6/2 pad 0x3 C=2", conv_geom(1, 16, 25, 2, 8, 2, 6, 2, 2, 0, 3)}};
}


CudnnConvPlan s2d_plan(const CudaContext& ctx, const Conv2dGeom& g, GpuDType t) {
  ConvDesc d;
  d.g = s2d_conv_geom(g);
  d.io = t;
  d.need_dgrad = false;
  Result<CudnnConvPlan> p = cudnn_conv_plan(ctx.cudnn, d);
  if (!p.ok()) FAIL(p.error_text());
  std::printf("  s2d of %s: %s\n", conv2d_geom_str(g).c_str(), cudnn_conv_describe(p.value()).c_str());
  return std::move(p.value());
}

// Device tensors of one case: operands, outputs, the s2d scratch and cuDNN's workspace.
struct Buffers {
  DevBuf x, w, b, dy, y, dw, z, w2, dw2, ws;
  size_t ws_bytes = 0;
};
Buffers make_buffers(const Conv2dGeom& g, GpuDType t, const StemInputs& in, const CudnnConvPlan& plan) {
  Buffers b;
  b.x = to_device_as(t, in.x), b.w = to_device_as(t, in.w), b.b = to_device_as(t, in.b), b.dy = to_device_as(t, in.dy);
  b.y = DevBuf(in.dy.size() * gpu_dtype_size(t));
  b.dw = DevBuf(in.w.size() * 4);
  b.z = DevBuf(s2d_conv_input_bytes(g, t));
  b.w2 = DevBuf(s2d_conv_filter_bytes(g, t));
  b.dw2 = DevBuf(s2d_conv_filter_bytes(g, t));
  b.ws_bytes = std::max<size_t>(cudnn_conv_workspace_bytes(plan), 256);
  b.ws = DevBuf(b.ws_bytes);
  return b;
}

Status fwd(const CudaContext& ctx, const Conv2dGeom& g, const CudnnConvPlan& p, Buffers& b, bool bias) {
  return s2d_conv_fwd(ctx.cudnn, ctx.stream, g, p, b.x.get(), b.w.get(), bias ? b.b.get() : nullptr, b.y.get(),
                      b.z.get(), b.w2.get(), b.ws.get(), b.ws_bytes);
}
Status wgrad(const CudaContext& ctx, const Conv2dGeom& g, const CudnnConvPlan& p, Buffers& b) {
  return s2d_conv_wgrad(ctx.cudnn, ctx.stream, g, p, b.dy.get(), b.x.get(), b.dw.as<float>(), b.z.get(), b.dw2.get(),
                        b.ws.get(), b.ws_bytes);
}

}  // namespace

TEST_CASE("s2d transforms on the GPU equal the CPU references bitwise (f32, f16, bf16; aligned and unaligned)",
          "[kernel][s2d][conv2d]") {
  CudaContext ctx = make_context();
  uint64_t seed = 100;
  for (const auto& kase : kernel_cases())
    for (GpuDType t : kTypes) {
      const char* name = kase.first;
      const Conv2dGeom g = kase.second;  // a plain variable: the lambdas below capture it
      INFO(name << " " << gpu_dtype_name(t) << ": " << conv2d_geom_str(g));
      const Conv2dGeom zg = s2d_conv_geom(g);
      const size_t e = gpu_dtype_size(t);
      const size_t nx = static_cast<size_t>(g.n * g.h * g.w * g.c), nw = static_cast<size_t>(g.k * g.r * g.s * g.c);
      const size_t nz = static_cast<size_t>(zg.n * zg.h * zg.w * zg.c);
      const size_t nw2 = static_cast<size_t>(zg.k * zg.r * zg.s * zg.c);
      Rng rng(++seed);
      const std::vector<float> x = rng.uniform_vec(nx, -2.0f, 2.0f), w = rng.uniform_vec(nw, -2.0f, 2.0f),
                               dw2 = rng.uniform_vec(nw2, -2.0f, 2.0f);
      const DevBuf dx = to_device_as(t, x), dwt = to_device_as(t, w), ddw2 = to_device_as(t, dw2);
      const std::vector<uint8_t> hx = host_bytes(t, x), hw = host_bytes(t, w), hdw2 = host_bytes(t, dw2);
      // z, at an aligned output and one element off (the kernel's scalar stores).
      const std::vector<uint8_t> want_z =
          host_transform(t, hx, nz, [&](const auto* in, auto* out) { s2d_input_cpu(g, in, out); });
      for (size_t off : {size_t{0}, e}) {
        INFO("z output offset " << off << " B");
        DevBuf out(nz * e + 16);
        poison(out);
        void* dst = static_cast<char*>(out.get()) + off;
        REQUIRE_OK(s2d_input_cuda(ctx.stream, g, t, dx.get(), dst));
        sync_ok(ctx);
        const std::vector<uint8_t> got = from_device<uint8_t>(dst, nz * e);
        CHECK_RESULT(compare_bitwise("s2d z " + std::string(name), got.data(), want_z.data(), nz * e, e));
      }
      // w2.
      const std::vector<uint8_t> want_w2 =
          host_transform(t, hw, nw2, [&](const auto* in, auto* out) { s2d_filter_cpu(g, in, out); });
      DevBuf w2(nw2 * e);
      poison(w2);
      REQUIRE_OK(s2d_filter_cuda(ctx.stream, g, t, dwt.get(), w2.get()));
      sync_ok(ctx);
      const std::vector<uint8_t> got_w2 = from_device<uint8_t>(w2.get(), nw2 * e);
      CHECK_RESULT(compare_bitwise("s2d w2 " + std::string(name), got_w2.data(), want_w2.data(), nw2 * e, e));
      // dw (fp32) from dw2 (type t): the CPU gather in t, widened exactly.
      const std::vector<uint8_t> gathered =
          host_transform(t, hdw2, nw, [&](const auto* in, auto* out) { s2d_filter_grad_cpu(g, in, out); });
      std::vector<float> want_dw(nw);
      for (size_t i = 0; i < nw; ++i) {
        if (t == GpuDType::F32) std::memcpy(&want_dw[i], gathered.data() + 4 * i, 4);
        else want_dw[i] = lowp_value(t, reinterpret_cast<const uint16_t*>(gathered.data())[i]);
      }
      DevBuf dwo(nw * 4);
      poison(dwo);
      REQUIRE_OK(s2d_filter_grad_cuda(ctx.stream, g, t, ddw2.get(), dwo.as<float>()));
      sync_ok(ctx);
      const std::vector<float> got_dw = from_device<float>(dwo.get(), nw);
      CHECK_RESULT(compare_bitwise("s2d dw " + std::string(name), got_dw.data(), want_dw.data(), nw * 4, 4));
    }
  // Geometries outside the rule are refused before anything is launched.
  DevBuf any(64);
  const Conv2dGeom stride1 = conv_geom(2, 16, 16, 3, 16, 3, 3, 1, 1, 1, 1);
  CHECK_FALSE(s2d_input_cuda(ctx.stream, stride1, GpuDType::F16, any.get(), any.get()).ok());
  CHECK_FALSE(s2d_filter_cuda(ctx.stream, stride1, GpuDType::F16, any.get(), any.get()).ok());
  CHECK_FALSE(s2d_filter_grad_cuda(ctx.stream, stride1, GpuDType::F16, any.get(), any.as<float>()).ok());
  sync_ok(ctx);
}

TEST_CASE("s2d conv forward and weight gradient match the float64 direct conv (ResNet-50 stem, 3x3/2)",
          "[kernel][s2d][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"r50 stem 7x7/2 pad 3", conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)},
      {"3x3/2 pad 1 C=3 57x45", conv_geom(2, 57, 45, 3, 32, 3, 3, 2, 2, 1, 1)}};
  uint64_t seed = 2000;
  for (const auto& [name, g] : cases)
    for (bool lowp : {false, true}) {
      const StemInputs in = stem_inputs(g, lowp, ++seed);
      const StemRef ref = stem_ref(g, in, &pool);
      for (const StemMode& m : kStemModes) {
        if ((m.io != GpuDType::F32) != lowp) continue;
        const std::string tag = std::string(name) + " " + gpu_dtype_name(m.io);
        INFO(tag << ": " << conv2d_geom_str(g));
        const CudnnConvPlan plan = s2d_plan(ctx, g, m.io);
        Buffers b = make_buffers(g, m.io, in, plan);
        const size_t ny = in.dy.size(), nw = in.w.size();
        const double u = unit_roundoff(m.io);
        for (bool bias : {false, true}) {
          poison(b.y);
          REQUIRE_OK(fwd(ctx, g, plan, b, bias));
          sync_ok(ctx);
          check_stem_close("s2d fwd" + std::string(bias ? "+bias " : " ") + tag, m.acc, m.rel, u,
                           from_device_as(m.io, b.y.get(), ny), bias ? ref.yb : ref.y, bias ? ref.yb_mag : ref.y_mag,
                           g.k);
        }
        poison(b.dw);
        poison(b.z);  // the weight gradient recomputes z
        REQUIRE_OK(wgrad(ctx, g, plan, b));
        sync_ok(ctx);
        check_stem_close("s2d wgrad dw " + tag, m.acc, m.rel, u, from_device<float>(b.dw.get(), nw), ref.dw,
                         ref.dw_mag, g.r * g.s * g.c);
      }
    }
}

TEST_CASE("s2d conv replayed from a captured CUDA graph equals the eager run bitwise", "[kernel][s2d][conv2d]") {
  CudaContext ctx = make_context();
  const Conv2dGeom g = conv_geom(2, 64, 48, 3, 64, 7, 7, 2, 2, 3, 3);
  for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
    INFO(gpu_dtype_name(t));
    const StemInputs in = stem_inputs(g, true, 4000);
    const CudnnConvPlan plan = s2d_plan(ctx, g, t);
    Buffers b = make_buffers(g, t, in, plan);
    const size_t ny = in.dy.size() * gpu_dtype_size(t), nw = in.w.size() * 4;
    auto launch = [&]() -> Status {
      if (Status st = fwd(ctx, g, plan, b, true); !st) return st;
      return wgrad(ctx, g, plan, b);
    };
    REQUIRE_OK(launch());  // eager, also cuDNN's first use of the plan before capture
    sync_ok(ctx);
    const std::vector<uint8_t> ey = from_device<uint8_t>(b.y.get(), ny), ew = from_device<uint8_t>(b.dw.get(), nw);
    cudaGraphExec_t exec = capture_graph(ctx, launch, cudaStreamCaptureModeThreadLocal);
    poison(b.y);
    poison(b.dw);
    poison(b.z);
    poison(b.w2);
    REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
    sync_ok(ctx);
    const std::vector<uint8_t> ry = from_device<uint8_t>(b.y.get(), ny), rw = from_device<uint8_t>(b.dw.get(), nw);
    REQUIRE_CUDA(cudaGraphExecDestroy(exec));
    CHECK_RESULT(compare_bitwise("s2d graph replay y", ey.data(), ry.data(), ny, gpu_dtype_size(t)));
    CHECK_RESULT(compare_bitwise("s2d graph replay dw", ew.data(), rw.data(), nw, 4));
  }
}

TEST_CASE("s2d conv refuses a cuDNN plan that is not the stride-1 conv of its geometry", "[kernel][s2d][conv2d]") {
  CudaContext ctx = make_context();
  const Conv2dGeom g = conv_geom(2, 32, 32, 3, 16, 7, 7, 2, 2, 3, 3);
  const StemInputs in = stem_inputs(g, true, 5000);
  ConvDesc d;
  d.g = s2d_conv_geom(g);
  d.g.n = 1;  // another batch size
  d.io = GpuDType::F16;
  d.need_dgrad = false;
  Result<CudnnConvPlan> other = cudnn_conv_plan(ctx.cudnn, d);
  REQUIRE_OK(other);
  Buffers b = make_buffers(g, GpuDType::F16, in, other.value());
  const Status f = fwd(ctx, g, other.value(), b, false);
  REQUIRE_FALSE(f.ok());
  CHECK(f.errors()[0].code == ErrCode::Invalid);
  CHECK(f.error_text().find("not the stride-1 conv") != std::string::npos);
  CHECK_FALSE(wgrad(ctx, g, other.value(), b).ok());
  sync_ok(ctx);
}

namespace {

namespace fs = std::filesystem;

// A 7x7/2 stem with a bias and no batch norm after it (so the bias stays on the conv: s2d forward + bias), then
// max pool -> conv 3x3 -> bn -> relu -> gap -> fc, on synthetic 32x32x3 images: 256 / 32 = 8 steps.
const char* kStemYaml = R"(
seed: 9
data:
  dataset: synthetic
  synthetic: {train_size: 256, val_size: 64, height: 32, width: 32, channels: 3, classes: 10}
  batch_size: 32
  val_batch_size: 32
  normalization: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}
model:
  layers:
    - {type: conv2d, name: stem, out_channels: 16, kernel_size: 7, stride: 2, padding: 3, bias: true}
    - {type: relu, name: stem_relu}
    - {type: max_pool, name: pool, kernel_size: 3, stride: 2, padding: 1}
    - {type: conv2d, name: conv2, out_channels: 32, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn2}
    - {type: relu, name: relu2}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 1, precision: fp16}
run: {progress: off}
)";

Spec stem_spec(const fs::path& out_dir, const char* s2d) {
  Result<Spec> s = spec_parse(kStemYaml, "s2d_stem.yaml",
                              {"run.out_dir=" + out_dir.string(), "run.name=r", std::string("train.conv_s2d=") + s2d,
                               "train.conv_fewc=off"});  // else the forward runs trctl's few-channel kernel
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

Compiled compiled_of(const Spec& spec) {
  Result<DataShape> shape = data_shape(spec);
  REQUIRE(shape.ok());
  CompileOptions copt;
  copt.storage = amp_storage(spec);
  Result<Compiled> c = compile_spec(spec, shape.value(), copt);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  return std::move(c.value());
}

struct Run {
  TrainResult result;
  RunFacts facts;
};
// Trains spec on the GPU into a fresh run directory; its result and run.json.
Run train_run(const Spec& spec) {
  Run r;
  r.result = gputest::train_cuda(spec, TrainOptions{});
  REQUIRE(!r.result.run_dir.empty());
  REQUIRE(r.result.epochs.size() == 1);
  std::ifstream f(fs::path(r.result.run_dir) / "run.json");
  REQUIRE(f.good());
  std::stringstream text;
  text << f.rdbuf();
  Result<RunFacts> facts = run_facts_parse(text.str(), r.result.run_dir + "/run.json");
  INFO((facts.ok() ? std::string() : facts.error_text()));
  REQUIRE(facts.ok());
  CHECK(facts->backend == "cuda");
  REQUIRE(facts->has_conv);
  r.facts = facts.value();
  return r;
}

bool has_key_with(const AutotuneCache& c, const std::string& part) {
  for (const auto& [key, choice] : c.entries)
    if (key.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("a 7x7/2 stem trains under fp16 AMP with conv_s2d on like off, each planning what --autotune measured",
          "[gpu][backend][cnn][s2d][autotune][amp]") {
  ScratchDir scratch("trctl_s2d_gpu");
  // The stem at N = 32: 32x32 -> 16x16; its s2d conv 19x19 over 16 channels with a 4x4 filter.
  const std::string s2d_key = "n=32 h=19 w=19 c=16 k=16 r=4 s=4 stride=1x1 pad=0x0";
  const std::string stem_key = "n=32 h=32 w=32 c=3 k=16 r=7 s=7 stride=2x2 pad=3x3";  // off: the C = 3 wgrad
  std::map<std::string, std::string> cache_of;
  for (const char* mode : {"on", "off"}) {
    const fs::path dir = scratch.path / mode;
    fs::create_directories(dir);
    cache_of[mode] = (dir / "conv_autotune.txt").string();
    REQUIRE_OK(conv_autotune_spec(compiled_of(stem_spec(dir / "runs", mode)), cache_of[mode], true, nullptr));
    Result<AutotuneCache> cache = autotune_cache_load(cache_of[mode]);
    REQUIRE_OK(cache);
    INFO("conv_s2d " << mode);
    CHECK(has_key_with(cache.value(), s2d_key) == (std::string(mode) == "on"));
    CHECK(has_key_with(cache.value(), stem_key) == (std::string(mode) == "off"));
  }
  // Each setting with its own cache: every cuDNN plan from the cache (5: the stem's fwd + wgrad, s2d or C = 3;
  // conv2's fwd, dgrad, wgrad). With the other setting's cache, the stem's plans are not found.
  std::map<std::string, Run> runs;
  for (const char* mode : {"on", "off"}) {
    INFO("conv_s2d " << mode);
    const fs::path dir = scratch.path / mode;
    {
      EnvGuard env("TRCTL_AUTOTUNE_CACHE", cache_of[mode]);
      runs[mode] = train_run(stem_spec(dir / "runs", mode));
      const ConvAlgoSources& f = runs[mode].facts.conv;
      CHECK(f.cache_exists);
      CHECK(f.from_cache == 5);
      CHECK(f.from_heuristics == 0);
    }
    {
      EnvGuard env("TRCTL_AUTOTUNE_CACHE", cache_of[std::string(mode) == "on" ? "off" : "on"]);
      const Run cross = train_run(stem_spec(dir / "runs", mode));
      CHECK(cross.facts.conv.from_cache + cross.facts.conv.from_heuristics == 5);
      CHECK(cross.facts.conv.from_heuristics == 2);  // the stem's fwd and wgrad
    }
  }
  const TrainResult &on = runs["on"].result, &off = runs["off"].result;
  INFO("train loss on " << on.epochs[0].train_loss << " off " << off.epochs[0].train_loss << "; val loss on "
                        << on.epochs[0].val_loss << " off " << off.epochs[0].val_loss);
  CHECK(std::isfinite(on.epochs[0].train_loss));
  CHECK(std::isfinite(on.epochs[0].val_loss));
  CHECK(std::abs(on.epochs[0].train_loss - off.epochs[0].train_loss) < 0.05);
  CHECK(std::abs(on.epochs[0].val_loss - off.epochs[0].val_loss) < 0.05);
}
