// cuDNN conv2d (runtime/cuda/cudnn_conv.h): forward (with bias), data and filter gradients vs the float64 CPU
// reference on ResNet-50 / VGG layers, dilation and groups, in f32, tf32, f16 and bf16; deterministic plans
// bitwise identical run to run and when replayed from a captured CUDA graph; clear errors for bad geometries.
//
// Tolerances, per element: |got - ref| <= acc * mag + u * |ref|, where mag = the same convolution of |inputs|
// (sum of |terms|, the scale of any accumulation error) and u the unit roundoff of the output type; plus a
// norm-wise relative error ||got - ref|| / ||ref|| < rel.
//   f32  acc 1e-5,  rel 1e-5:  fp32 FMA accumulation (no tensor cores), error ~ u32 * sum|terms| << 1e-5.
//   tf32 acc 2e-3,  rel 2e-3:  inputs rounded to 10-bit mantissas (2^-11 relative each), fp32 accumulation.
//   f16 / bf16: inputs are multiples of 1/64 in [-1, 1] (7 significant bits), exact in f16 and bf16, so products
//     are exact and fp32 accumulation of them is exact too while |partial sums| < 4096; what remains is the final
//     rounding to the io type (u|ref|) and any intermediate rounding of partials to the io type that a kernel may
//     do (split reductions, the bias pass): acc = 2u (f16 1e-3, bf16 7.8e-3), rel 1e-2.
#include <cmath>
#include <cstdio>

#include "runtime/cuda/cudnn_conv.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

struct Mode {
  const char* name;
  GpuDType io;
  bool tf32;
  double acc, rel;  // see the file comment
};
const Mode kModes[] = {{"f32", GpuDType::F32, false, 1e-5, 1e-5},
                       {"tf32", GpuDType::F32, true, 2e-3, 2e-3},
                       {"f16", GpuDType::F16, false, 2 * std::ldexp(1.0, -11), 1e-2},
                       {"bf16", GpuDType::BF16, false, 2 * std::ldexp(1.0, -8), 1e-2}};

Conv2dGeom geom(int64_t n, int64_t hw, int64_t c, int64_t k, int64_t rs, int64_t stride, int64_t pad,
                int64_t dil = 1, int64_t groups = 1) {
  Conv2dGeom g;
  g.n = n, g.h = g.w = hw, g.c = c, g.k = k, g.r = g.s = rs;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  g.dil_h = g.dil_w = dil;
  g.groups = groups;
  std::string why;
  if (!conv2d_geom_finish(g, &why)) FAIL(why);
  return g;
}

// Inputs of one dtype family: general floats for f32/tf32, multiples of 1/64 (exact in f16 and bf16) otherwise.
struct ConvInputs {
  std::vector<float> x, w, b, dy;  // x (N,H,W,C), w (K,R,S,C/G), b (K), dy (N,P,Q,K)
};
ConvInputs make_inputs(const Conv2dGeom& g, bool lowp, uint64_t seed) {
  Rng rng(seed);
  auto draw = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = lowp ? static_cast<float>(rng.below(129) - 64) / 64.0f : rng.uniform(-1.0f, 1.0f);
    return v;
  };
  ConvInputs in;
  in.x = draw(g.n * g.h * g.w * g.c);
  in.w = draw(g.k * g.r * g.s * (g.c / g.groups));
  in.b = draw(g.k);
  in.dy = draw(g.n * g.p * g.q * g.k);
  return in;
}

// Float64 results of the three directions and the same convolutions of |inputs| (the error scale).
struct ConvRef {
  std::vector<double> y, y_mag, dx, dx_mag, dw, dw_mag;
};
ConvRef make_ref(const Conv2dGeom& g, const ConvInputs& in, ThreadPool* pool) {
  auto d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  auto a = [](const std::vector<float>& v) {
    std::vector<double> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(static_cast<double>(v[i]));
    return r;
  };
  const std::vector<double> x = d(in.x), w = d(in.w), b = d(in.b), dy = d(in.dy);
  const std::vector<double> ax = a(in.x), aw = a(in.w), ab = a(in.b), ady = a(in.dy);
  ConvRef r;
  r.y.resize(dy.size()), r.y_mag.resize(dy.size()), r.dx.resize(x.size()), r.dx_mag.resize(x.size());
  r.dw.resize(w.size()), r.dw_mag.resize(w.size());
  conv2d_fwd_cpu<double>(g, x.data(), w.data(), b.data(), r.y.data(), pool);
  conv2d_fwd_cpu<double>(g, ax.data(), aw.data(), ab.data(), r.y_mag.data(), pool);
  conv2d_grad_input_cpu<double>(g, dy.data(), w.data(), r.dx.data(), pool);
  conv2d_grad_input_cpu<double>(g, ady.data(), aw.data(), r.dx_mag.data(), pool);
  conv2d_grad_weight_cpu<double>(g, dy.data(), x.data(), r.dw.data(), pool);
  conv2d_grad_weight_cpu<double>(g, ady.data(), ax.data(), r.dw_mag.data(), pool);
  return r;
}

void check_close(const std::string& what, const Mode& m, const std::vector<float>& got, const std::vector<double>& ref,
                 const std::vector<double>& mag, int64_t cols) {
  const double u = unit_roundoff(m.io);
  std::vector<double> bound(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) bound[i] = m.acc * mag[i] + u * std::fabs(ref[i]);
  CHECK_RESULT(compare_close(what, to_double(got), ref, bound, cols));
  const testing::Diff d = testing::diff(got, ref);
  INFO(what << ": norm-wise " << d.str());
  CHECK(d.rel < m.rel);
}

// Device buffers of one case: inputs in the io type, poisoned outputs, the plan's workspace.
struct ConvBuffers {
  DevBuf x, w, b, dy, y, dx, dw, ws;
  size_t ws_bytes = 0;
};
ConvBuffers make_buffers(const CudnnConvPlan& p, const ConvInputs& in) {
  const GpuDType t = p.desc.io;
  const size_t e = gpu_dtype_size(t);
  ConvBuffers b;
  b.x = to_device_as(t, in.x), b.w = to_device_as(t, in.w), b.b = to_device_as(t, in.b), b.dy = to_device_as(t, in.dy);
  b.y = DevBuf(in.dy.size() * e), b.dx = DevBuf(in.x.size() * e), b.dw = DevBuf(in.w.size() * e);
  b.ws_bytes = cudnn_conv_workspace_bytes(p);
  b.ws = DevBuf(b.ws_bytes);
  return b;
}

void launch_all(const CudaContext& ctx, const CudnnConvPlan& p, const ConvBuffers& b) {
  REQUIRE_OK(cudnn_conv_fwd(ctx.cudnn, ctx.stream, p, b.x.get(), b.w.get(), b.b.get(), b.y.get(), b.ws.get(),
                            b.ws_bytes));
  REQUIRE_OK(cudnn_conv_dgrad(ctx.cudnn, ctx.stream, p, b.dy.get(), b.w.get(), b.dx.get(), b.ws.get(), b.ws_bytes));
  REQUIRE_OK(cudnn_conv_wgrad(ctx.cudnn, ctx.stream, p, b.dy.get(), b.x.get(), b.dw.get(), b.ws.get(), b.ws_bytes));
}

// Raw bytes of y, dx, dw (for bitwise comparisons).
std::vector<std::vector<uint8_t>> outputs_raw(const ConvBuffers& b, size_t ny, size_t nx, size_t nw, size_t e) {
  return {from_device<uint8_t>(b.y.get(), ny * e), from_device<uint8_t>(b.dx.get(), nx * e),
          from_device<uint8_t>(b.dw.get(), nw * e)};
}

bool lowp_misaligned(const Conv2dGeom& g) { return (g.c / g.groups) % 8 != 0 || (g.k / g.groups) % 8 != 0; }

// One geometry in one mode: plan, run twice (poisoned outputs each time), compare values and run-to-run bits.
void run_case(const CudaContext& ctx, const std::string& name, const Conv2dGeom& g, const Mode& m,
              const ConvInputs& in, const ConvRef& ref) {
  const std::string tag = name + " " + m.name;
  INFO(tag << ": " << conv2d_geom_str(g));
  ConvDesc d;
  d.g = g, d.io = m.io, d.tf32 = m.tf32, d.deterministic = true;
  auto plan = cudnn_conv_plan(ctx.cudnn, d);
  if (!plan.ok() && m.io != GpuDType::F32 && lowp_misaligned(g) && plan.errors()[0].code == ErrCode::NotSupported) {
    // Documented in cudnn_conv.h: channel counts not a multiple of 8 may have no f16/bf16 kernel. Reported, not
    // failed, so the log shows which layers would need f32 (or padded channels).
    std::printf("  [not supported] %s: %s\n", tag.c_str(), plan.error_text().c_str());
    WARN(tag << " not supported: " << plan.error_text());
    return;
  }
  REQUIRE_OK(plan);
  const CudnnConvPlan& p = plan.value();
  std::printf("  %s: %s\n", tag.c_str(), cudnn_conv_describe(p).c_str());
  ConvBuffers b = make_buffers(p, in);
  const size_t e = gpu_dtype_size(m.io), ny = in.dy.size(), nx = in.x.size(), nw = in.w.size();
  std::vector<std::vector<uint8_t>> runs[2];
  for (auto& run : runs) {
    for (const DevBuf* o : {&b.y, &b.dx, &b.dw}) poison(*o);
    launch_all(ctx, p, b);
    sync_ok(ctx);
    run = outputs_raw(b, ny, nx, nw, e);
  }
  check_close("conv fwd+bias y " + tag, m, from_device_as(m.io, b.y.get(), ny), ref.y, ref.y_mag, g.k);
  check_close("conv dgrad dx " + tag, m, from_device_as(m.io, b.dx.get(), nx), ref.dx, ref.dx_mag, g.c);
  check_close("conv wgrad dw " + tag, m, from_device_as(m.io, b.dw.get(), nw), ref.dw, ref.dw_mag,
              g.r * g.s * (g.c / g.groups));
  const char* names[3] = {" y", " dx", " dw"};
  for (int i = 0; i < 3; ++i)
    CHECK_RESULT(compare_bitwise("conv rerun" + std::string(names[i]) + " " + tag, runs[0][i].data(),
                                 runs[1][i].data(), runs[0][i].size(), e));
}

// Every mode on each geometry; one float64 reference per input family (general floats, 1/64 grid).
void run_geometries(const std::vector<std::pair<std::string, Conv2dGeom>>& cases, uint64_t seed) {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  for (const auto& [name, g] : cases) {
    for (bool lowp : {false, true}) {
      const ConvInputs in = make_inputs(g, lowp, ++seed);
      const ConvRef ref = make_ref(g, in, &pool);
      for (const Mode& m : kModes) {
        if ((m.io != GpuDType::F32) == lowp) run_case(ctx, name, g, m, in, ref);
      }
    }
  }
}

}  // namespace

TEST_CASE("cudnn conv2d matches the float64 reference on ResNet-50 and VGG layers in f32, tf32, f16, bf16, "
          "bitwise identical run to run",
          "[kernel][conv2d]") {
  run_geometries({{"resnet50 1x1 64->256", geom(8, 56, 64, 256, 1, 1, 0)},
                  {"resnet50 3x3 64->64 pad 1", geom(8, 56, 64, 64, 3, 1, 1)},
                  {"resnet50 stem 7x7 stride 2 pad 3 C=3", geom(8, 224, 3, 64, 7, 2, 3)},
                  {"resnet50 downsample 1x1 stride 2 256->512", geom(8, 56, 256, 512, 1, 2, 0)},
                  {"vgg 3x3 64->128 pad 1", geom(8, 56, 64, 128, 3, 1, 1)},
                  {"vgg 3x3 128->128 pad 1", geom(8, 28, 128, 128, 3, 1, 1)}},
                 1000);
}

TEST_CASE("cudnn conv2d matches the float64 reference with dilation, groups and depthwise filters",
          "[kernel][conv2d]") {
  run_geometries({{"3x3 dilation 2 pad 2", geom(4, 28, 64, 64, 3, 1, 2, 2)},
                  {"3x3 groups 4", geom(4, 28, 64, 128, 3, 1, 1, 1, 4)},
                  {"3x3 depthwise 64", geom(4, 28, 64, 64, 3, 1, 1, 1, 64)},
                  {"5x5 stride 2 pad 2 odd size", geom(3, 27, 32, 48, 5, 2, 2)}},
                 2000);
}

TEST_CASE("cudnn conv2d replayed from a captured CUDA graph equals the eager run bitwise", "[kernel][conv2d]") {
  CudaContext ctx = make_context();
  const Conv2dGeom g = geom(8, 28, 64, 128, 3, 1, 1);
  for (const Mode& m : {kModes[0], kModes[2]}) {
    INFO(m.name);
    ConvDesc d;
    d.g = g, d.io = m.io;
    auto plan = cudnn_conv_plan(ctx.cudnn, d);
    REQUIRE_OK(plan);
    const CudnnConvPlan& p = plan.value();
    const ConvInputs in = make_inputs(g, m.io != GpuDType::F32, 3000);
    ConvBuffers b = make_buffers(p, in);
    const size_t e = gpu_dtype_size(m.io);
    launch_all(ctx, p, b);  // eager run; also loads cuDNN's kernels before capture
    sync_ok(ctx);
    const auto eager = outputs_raw(b, in.dy.size(), in.x.size(), in.w.size(), e);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    REQUIRE_CUDA(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
    launch_all(ctx, p, b);
    REQUIRE_CUDA(cudaStreamEndCapture(ctx.stream, &graph));
    REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (const DevBuf* o : {&b.y, &b.dx, &b.dw}) poison(*o);
    REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
    sync_ok(ctx);
    const auto replay = outputs_raw(b, in.dy.size(), in.x.size(), in.w.size(), e);
    REQUIRE_CUDA(cudaGraphExecDestroy(exec));
    REQUIRE_CUDA(cudaGraphDestroy(graph));
    for (int i = 0; i < 3; ++i)
      CHECK_RESULT(compare_bitwise(std::string("conv graph replay ") + m.name + " output " + std::to_string(i),
                                   eager[i].data(), replay[i].data(), eager[i].size(), e));
  }
}

TEST_CASE("cudnn conv2d plan rejects bad geometries and bad execute arguments with clear errors",
          "[kernel][conv2d]") {
  CudaContext ctx = make_context();
  ConvDesc d;
  d.g.n = 2, d.g.h = d.g.w = 8, d.g.c = 6, d.g.k = 8, d.g.r = d.g.s = 3, d.g.groups = 4;  // C not divisible
  auto bad = cudnn_conv_plan(ctx.cudnn, d);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.errors()[0].code == ErrCode::Invalid);
  CHECK(bad.error_text().find("groups") != std::string::npos);
  d.g.groups = 2;
  auto plan = cudnn_conv_plan(ctx.cudnn, d);
  REQUIRE_OK(plan);
  CHECK(plan.value().desc.g.p == 6);
  CHECK(cudnn_conv_describe(plan.value()).find("fwd ") != std::string::npos);
  // Null tensors are refused before anything is launched.
  const Status st = cudnn_conv_fwd(ctx.cudnn, ctx.stream, plan.value(), nullptr, nullptr, nullptr, nullptr, nullptr,
                                   size_t{1} << 30);
  CHECK_FALSE(st.ok());
  sync_ok(ctx);
}
