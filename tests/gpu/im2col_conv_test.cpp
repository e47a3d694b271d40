// im2col + cuBLASLt convolutions (runtime/cuda/im2col_conv.h, kernel runtime/ops/conv2d/im2col_cuda.h): the im2col
// kernel bitwise equal to the CPU reference (f32, f16, bf16; aligned and unaligned output, row ranges, odd
// geometries); forward (with and without bias) and fp32 weight gradient vs the float64 CPU conv on the ResNet-50
// and VGG16 stems at small N and on an odd geometry; a weight gradient over several chunks equal to one chunk
// within tolerance and bitwise run to run; captured and replayed bitwise like the eager run.
//
// Tolerances as tests/gpu/conv2d_test.cpp: |got - ref| <= acc * mag + u * |ref| per element (mag: the same conv of
// |inputs|; u: the output type's unit roundoff) and a norm-wise relative error below rel.
//   forward f32 (full fp32 GEMM): acc 1e-5, rel 1e-5. f16/bf16: inputs on the 1/64 grid (exact), products and fp32
//   sums exact, then the rounding to the output type, possibly twice (before and after the bias epilogue): acc 2u,
//   rel 1e-2.
//   weight gradient (fp32 output, fp32 accumulation over N*P*Q rows and over chunks): acc 1e-5, rel 1e-5.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/cuda/im2col_conv.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/im2col.h"
#include "runtime/ops/conv2d/im2col_cuda.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/stem_conv_ref.h"
#include "tests/support/gradcheck.h"
#include "tests/support/conv_geom.h"

using namespace trctl;
using trctl::testing::conv_geom;
using namespace trctl::gputest;

namespace {

const GpuDType kTypes[] = {GpuDType::F32, GpuDType::F16, GpuDType::BF16};

// Values of x as the device holds them (rounded to t), for the CPU reference: floats for f32, bits for f16/bf16.
std::vector<uint8_t> host_cols(const Conv2dGeom& g, GpuDType t, const std::vector<float>& x, int64_t row0,
                               int64_t rows, int64_t kc) {
  std::vector<uint8_t> out(static_cast<size_t>(rows * kc) * gpu_dtype_size(t));
  if (t == GpuDType::F32) {
    im2col_cpu<float>(g, x.data(), row0, rows, kc, reinterpret_cast<float*>(out.data()));
  } else {
    std::vector<uint16_t> bits(x.size());
    for (size_t i = 0; i < x.size(); ++i) bits[i] = lowp_bits(t, x[i]);
    im2col_cpu<uint16_t>(g, bits.data(), row0, rows, kc, reinterpret_cast<uint16_t*>(out.data()));
  }
  return out;
}

constexpr double kWgradAcc = 1e-5, kWgradRel = 1e-5;


// Device tensors of one case and the workspace for the plans given.
struct Buffers {
  DevBuf x, w, b, dy, y, dw, ws;
  size_t ws_bytes = 0;
};
Buffers make_buffers(GpuDType t, const StemInputs& in, size_t ws_bytes) {
  Buffers b;
  b.x = to_device_as(t, in.x), b.w = to_device_as(t, in.w), b.b = to_device_as(t, in.b), b.dy = to_device_as(t, in.dy);
  b.y = DevBuf(in.dy.size() * gpu_dtype_size(t));
  b.dw = DevBuf(in.w.size() * 4);
  b.ws_bytes = ws_bytes;
  b.ws = DevBuf(ws_bytes);
  return b;
}

Im2colConvPlan plan_of(const CudaContext& ctx, const Conv2dGeom& g, GpuDType t, Im2colDir dir, bool bias,
                       size_t max_cols = kIm2colMaxColsBytes) {
  Im2colConvDesc d;
  d.g = g, d.io = t, d.dir = dir, d.bias = bias, d.max_cols_bytes = max_cols;
  Result<Im2colConvPlan> p = im2col_conv_plan(ctx, d);
  if (!p.ok()) FAIL(p.error_text());
  std::printf("  %s\n", im2col_conv_describe(p.value()).c_str());
  return std::move(p.value());
}

// Forward with and without bias and the weight gradient of one geometry in one mode, against the float64 reference.
void run_case(const CudaContext& ctx, const std::string& name, const Conv2dGeom& g, const StemMode& m,
              const StemInputs& in, const StemRef& ref, size_t max_cols) {
  const std::string tag = name + " " + gpu_dtype_name(m.io);
  INFO(tag << ": " << conv2d_geom_str(g));
  Im2colConvPlan fwd = plan_of(ctx, g, m.io, Im2colDir::Fwd, false, max_cols);
  Im2colConvPlan fwdb = plan_of(ctx, g, m.io, Im2colDir::Fwd, true, max_cols);
  Im2colConvPlan wgrad = plan_of(ctx, g, m.io, Im2colDir::Wgrad, false, max_cols);
  const size_t wsb = std::max({im2col_conv_workspace_bytes(fwd), im2col_conv_workspace_bytes(fwdb),
                               im2col_conv_workspace_bytes(wgrad)});
  Buffers b = make_buffers(m.io, in, wsb);
  const size_t ny = in.dy.size(), nw = in.w.size();
  const double u = unit_roundoff(m.io);
  poison(b.y);
  REQUIRE_OK(im2col_conv_fwd(ctx, fwd, b.x.get(), b.w.get(), nullptr, b.y.get(), b.ws.get(), wsb));
  sync_ok(ctx);
  check_stem_close("im2col fwd y " + tag, m.acc, m.rel, u, from_device_as(m.io, b.y.get(), ny), ref.y, ref.y_mag, g.k);
  poison(b.y);
  REQUIRE_OK(im2col_conv_fwd(ctx, fwdb, b.x.get(), b.w.get(), b.b.get(), b.y.get(), b.ws.get(), wsb));
  sync_ok(ctx);
  check_stem_close("im2col fwd+bias y " + tag, m.acc, m.rel, u, from_device_as(m.io, b.y.get(), ny), ref.yb,
                   ref.yb_mag, g.k);
  poison(b.dw);
  REQUIRE_OK(im2col_conv_wgrad(ctx, wgrad, b.dy.get(), b.x.get(), b.dw.as<float>(), b.ws.get(), wsb));
  sync_ok(ctx);
  check_stem_close("im2col wgrad dw " + tag, kWgradAcc, kWgradRel, unit_roundoff(GpuDType::F32),
                   from_device<float>(b.dw.get(), nw), ref.dw, ref.dw_mag, g.r * g.s * g.c);
}

}  // namespace

TEST_CASE("im2col kernel equals the CPU reference bitwise (f32, f16, bf16; aligned and unaligned, row ranges)",
          "[kernel][im2col][conv2d]") {
  CudaContext ctx = make_context();
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"r50 stem 7x7/2 pad 3", conv_geom(2, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)},
      {"vgg 3x3 pad 1", conv_geom(2, 64, 48, 3, 64, 3, 3, 1, 1, 1, 1)},
      {"C=1 3x3 dilation 2 pad 3", conv_geom(3, 19, 23, 1, 8, 3, 3, 1, 1, 3, 3, 2, 2)},
      {"C=3 5x3 stride 2x1 pad 2x0 dil 1x2", conv_geom(2, 21, 17, 3, 16, 5, 3, 2, 1, 2, 0, 1, 2)},
      {"C=5 2x4 stride 3x2 pad 0x3", conv_geom(1, 14, 25, 5, 8, 2, 4, 3, 2, 0, 3)}};
  uint64_t seed = 100;
  for (const auto& [name, g] : cases)
    for (GpuDType t : kTypes) {
      INFO(name << " " << gpu_dtype_name(t) << ": " << conv2d_geom_str(g));
      const size_t e = gpu_dtype_size(t);
      Rng rng(++seed);
      std::vector<float> x = rng.uniform_vec(static_cast<size_t>(g.n * g.h * g.w * g.c), -2.0f, 2.0f);
      for (float& v : x) v = round_to(t, v);
      const DevBuf dx = to_device_as(t, x);
      const int64_t kc = im2col_cols(g), all = g.n * g.p * g.q;
      // (row0, rows, kc, output offset in elements): everything, an odd range, wider rows, an output not 16-byte
      // aligned (the kernel's scalar stores).
      const int64_t runs[][4] = {{0, all, kc, 0},
                                 {all / 3 + 1, all / 2 - 7, kc, 0},
                                 {5, std::min<int64_t>(301, all - 5), kc + 8, 0},
                                 {std::max<int64_t>(0, all - 77), std::min<int64_t>(77, all), kc, 1}};
      for (const auto& r : runs) {
        const int64_t row0 = r[0], rows = r[1], cols = r[2], off = r[3] * static_cast<int64_t>(e);
        INFO("rows [" << row0 << ", " << row0 + rows << ") of " << all << ", kc " << cols << ", output offset "
                      << off << " B");
        const size_t bytes = static_cast<size_t>(rows * cols) * e;
        DevBuf out(bytes + 16);
        poison(out);
        void* dst = static_cast<char*>(out.get()) + off;
        REQUIRE_OK(im2col_cuda(ctx.stream, g, t, dx.get(), row0, rows, cols, dst));
        sync_ok(ctx);
        const std::vector<uint8_t> got = from_device<uint8_t>(dst, bytes);
        const std::vector<uint8_t> want = host_cols(g, t, x, row0, rows, cols);
        CHECK_RESULT(compare_bitwise("im2col " + std::string(name) + " " + gpu_dtype_name(t), got.data(), want.data(),
                                     bytes, e));
      }
    }
  // Bad arguments are refused before anything is launched.
  const Conv2dGeom g = cases[0].second;
  DevBuf any(64);
  CHECK_FALSE(im2col_cuda(ctx.stream, g, GpuDType::F16, any.get(), 0, 1, 150, any.get()).ok());  // kc % 8
  CHECK_FALSE(im2col_cuda(ctx.stream, g, GpuDType::F16, any.get(), 0, 1, 144, any.get()).ok());  // kc < C*R*S
  CHECK_FALSE(im2col_cuda(ctx.stream, g, GpuDType::F16, any.get(), g.n * g.p * g.q, 1, 152, any.get()).ok());
  sync_ok(ctx);
}

TEST_CASE("im2col conv forward and fp32 weight gradient match the float64 reference on the RGB stems",
          "[kernel][im2col][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"r50 stem 7x7/2 pad 3", conv_geom(4, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)},
      {"vgg16 conv0 3x3 pad 1", conv_geom(2, 224, 224, 3, 64, 3, 3, 1, 1, 1, 1)},
      {"odd C=1 5x3 stride 2x1 pad 2x1 dil 1x2", conv_geom(3, 37, 29, 1, 24, 5, 3, 2, 1, 2, 1, 1, 2)}};
  uint64_t seed = 2000;
  for (const auto& [name, g] : cases)
    for (bool lowp : {false, true}) {
      const StemInputs in = stem_inputs(g, lowp, ++seed);
      const StemRef ref = stem_ref(g, in, &pool);
      for (const StemMode& m : kStemModes)
        if ((m.io != GpuDType::F32) == lowp) run_case(ctx, name, g, m, in, ref, kIm2colMaxColsBytes);
    }
}

TEST_CASE("im2col conv over several chunks equals one chunk (within tolerance), bitwise run to run",
          "[kernel][im2col][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const Conv2dGeom g = conv_geom(3, 61, 59, 3, 32, 7, 7, 2, 2, 3, 3);  // 3 x 31 x 30 = 2790 rows
  for (const StemMode& m : kStemModes) {
    const std::string tag = gpu_dtype_name(m.io);
    INFO(tag);
    const StemInputs in = stem_inputs(g, m.io != GpuDType::F32, 3000);
    const size_t row_bytes = static_cast<size_t>(im2col_cols(g)) * gpu_dtype_size(m.io);
    const size_t small = 256 * row_bytes;  // 256 rows a chunk: 11 chunks, the last 230 rows
    Im2colConvPlan one = plan_of(ctx, g, m.io, Im2colDir::Wgrad, false);
    Im2colConvPlan many = plan_of(ctx, g, m.io, Im2colDir::Wgrad, false, small);
    Im2colConvPlan fmany = plan_of(ctx, g, m.io, Im2colDir::Fwd, true, small);
    REQUIRE(one.chunks == 1);
    REQUIRE(many.chunks >= 3);
    REQUIRE(many.rows % many.chunk_rows != 0);  // a tail chunk
    const size_t wsb = std::max(im2col_conv_workspace_bytes(one), im2col_conv_workspace_bytes(fmany));
    Buffers b = make_buffers(m.io, in, wsb);
    const size_t nw = in.w.size(), ny = in.dy.size(), e = gpu_dtype_size(m.io);
    auto wgrad = [&](Im2colConvPlan& p) {
      poison(b.dw);
      REQUIRE_OK(im2col_conv_wgrad(ctx, p, b.dy.get(), b.x.get(), b.dw.as<float>(), b.ws.get(), wsb));
      sync_ok(ctx);
      return from_device<float>(b.dw.get(), nw);
    };
    auto fwd = [&](Im2colConvPlan& p) {
      poison(b.y);
      REQUIRE_OK(im2col_conv_fwd(ctx, p, b.x.get(), b.w.get(), b.b.get(), b.y.get(), b.ws.get(), wsb));
      sync_ok(ctx);
      return from_device<uint8_t>(b.y.get(), ny * e);
    };
    const std::vector<float> w1 = wgrad(one), wm = wgrad(many), wm2 = wgrad(many);
    CHECK_RESULT(compare_bitwise("chunked wgrad rerun " + tag, wm.data(), wm2.data(), nw * 4, 4));
    // Chunks only regroup fp32 sums: within the fp32 accumulation tolerance of the one-chunk result.
    StemInputs ad = in;
    for (auto* v : {&ad.x, &ad.dy})
      for (float& f : *v) f = std::fabs(f);
    std::vector<double> mag(nw);
    conv2d_grad_weight_cpu<double>(g, to_double(ad.dy).data(), to_double(ad.x).data(), mag.data(), &pool);
    check_stem_close("chunked wgrad vs one chunk " + tag, kWgradAcc, kWgradRel, unit_roundoff(GpuDType::F32), wm,
                     to_double(w1), mag, g.r * g.s * g.c);
    const std::vector<uint8_t> ym = fwd(fmany), ym2 = fwd(fmany);
    CHECK_RESULT(compare_bitwise("chunked fwd rerun " + tag, ym.data(), ym2.data(), ny * e, e));
    const StemRef ref = stem_ref(g, in, &pool);
    check_stem_close("chunked fwd+bias y " + tag, m.acc, m.rel, unit_roundoff(m.io),
                     from_device_as(m.io, b.y.get(), ny), ref.yb, ref.yb_mag, g.k);
  }
}

TEST_CASE("im2col conv replayed from a captured CUDA graph equals the eager run bitwise", "[kernel][im2col][conv2d]") {
  CudaContext ctx = make_context();
  const Conv2dGeom g = conv_geom(2, 45, 38, 3, 16, 3, 3, 1, 1, 1, 1);
  for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
    INFO(gpu_dtype_name(t));
    const StemInputs in = stem_inputs(g, true, 4000);
    const size_t small = 512 * static_cast<size_t>(im2col_cols(g)) * gpu_dtype_size(t);  // several chunks
    Im2colConvPlan fwd = plan_of(ctx, g, t, Im2colDir::Fwd, true, small);
    Im2colConvPlan wgrad = plan_of(ctx, g, t, Im2colDir::Wgrad, false, small);
    REQUIRE(wgrad.chunks > 1);
    const size_t wsb = std::max(im2col_conv_workspace_bytes(fwd), im2col_conv_workspace_bytes(wgrad));
    Buffers b = make_buffers(t, in, wsb);
    const size_t ny = in.dy.size() * gpu_dtype_size(t), nw = in.w.size() * 4;
    auto launch = [&]() -> Status {
      const Status st = im2col_conv_fwd(ctx, fwd, b.x.get(), b.w.get(), b.b.get(), b.y.get(), b.ws.get(), wsb);
      if (!st) return st;
      return im2col_conv_wgrad(ctx, wgrad, b.dy.get(), b.x.get(), b.dw.as<float>(), b.ws.get(), wsb);
    };
    REQUIRE_OK(launch());
    sync_ok(ctx);
    const std::vector<uint8_t> ey = from_device<uint8_t>(b.y.get(), ny), ew = from_device<uint8_t>(b.dw.get(), nw);
    cudaGraphExec_t exec = capture_graph(ctx, launch, cudaStreamCaptureModeThreadLocal);
    poison(b.y);
    poison(b.dw);
    REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
    sync_ok(ctx);
    const std::vector<uint8_t> ry = from_device<uint8_t>(b.y.get(), ny), rw = from_device<uint8_t>(b.dw.get(), nw);
    REQUIRE_CUDA(cudaGraphExecDestroy(exec));
    CHECK_RESULT(compare_bitwise("im2col graph replay y", ey.data(), ry.data(), ny, gpu_dtype_size(t)));
    CHECK_RESULT(compare_bitwise("im2col graph replay dw", ew.data(), rw.data(), nw, 4));
  }
}

TEST_CASE("im2col conv plan refuses geometries outside its rule and too small a cap", "[kernel][im2col][conv2d]") {
  CudaContext ctx = make_context();
  Im2colConvDesc d;
  d.g = conv_geom(2, 16, 16, 3, 12, 3, 3, 1, 1, 1, 1);  // K % 8 != 0
  Result<Im2colConvPlan> p = im2col_conv_plan(ctx, d);
  REQUIRE_FALSE(p.ok());
  CHECK(p.errors()[0].code == ErrCode::Invalid);
  d.g.k = 16;
  d.max_cols_bytes = 1000;
  p = im2col_conv_plan(ctx, d);
  REQUIRE_FALSE(p.ok());
  CHECK(p.error_text().find("128 rows") != std::string::npos);
  d.max_cols_bytes = kIm2colMaxColsBytes;
  REQUIRE_OK(im2col_conv_plan(ctx, d));
}
