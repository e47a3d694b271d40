// Pooling kernels vs the float64 CPU references (pool.h) on inputs already rounded to the dtype: VGG and ResNet-stem
// shapes, odd C (scalar path), C = 6 (2-wide path), misaligned views, stride > kernel, tie-heavy inputs, NaN, global
// average (HW = 49, C = 2048); outputs poisoned first; bitwise run-to-run and graph-replay identity.
#include <cmath>
#include <string>

#include "runtime/ops/pool/pool.h"
#include "runtime/ops/pool/pool_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

struct PoolShape {
  const char* name;
  int64_t n, h, w, c, kh, kw, sh, sw, ph, pw;
  int64_t offset;  // elements: a view this far into the buffers (1 defeats every vector path)
  bool ties;       // inputs drawn from {-3, ..., 3}: most windows hold several equal maxima
};

const PoolShape kShapes[] = {
    {"vgg 224->112 k2 s2 c64", 4, 224, 224, 64, 2, 2, 2, 2, 0, 0, 0, false},
    {"resnet stem 112->56 k3 s2 p1 c64", 4, 112, 112, 64, 3, 3, 2, 2, 1, 1, 0, false},
    {"resnet stem ties", 2, 112, 112, 64, 3, 3, 2, 2, 1, 1, 0, true},
    {"c3 k3 s2 p1", 2, 17, 19, 3, 3, 3, 2, 2, 1, 1, 0, false},
    {"c5 k2 s1", 2, 15, 16, 5, 2, 2, 1, 1, 0, 0, 0, false},
    {"c6 k3x2 s1x2 p1x0", 2, 13, 14, 6, 3, 2, 1, 2, 1, 0, 0, false},
    {"c64 misaligned k3 s2 p1", 2, 20, 21, 64, 3, 3, 2, 2, 1, 1, 1, false},
    {"c16 k3 s2 p1 odd sizes ties", 2, 17, 19, 16, 3, 3, 2, 2, 1, 1, 0, true},  // the stem kernel's edges
    {"c24 k3 s2 p1 even x odd", 3, 14, 11, 24, 3, 3, 2, 2, 1, 1, 0, false},
    {"c8 stride > kernel k2 s3", 2, 11, 11, 8, 2, 2, 3, 3, 0, 0, 0, false},
    // windows that tile the input exactly (the recorded-argmax backward's one-thread-per-window path)
    {"c3 tiled k2 s2 ties", 2, 16, 18, 3, 2, 2, 2, 2, 0, 0, 0, true},
    {"c64 tiled k3 s3 misaligned", 2, 15, 12, 64, 3, 3, 3, 3, 0, 0, 1, false},
    {"c16 tiled k2x3 s2x3", 3, 8, 9, 16, 2, 3, 2, 3, 0, 0, 0, false},
};

const GpuDType kTypes[] = {GpuDType::F32, GpuDType::F16, GpuDType::BF16};

Pool2dGeom geom_of(const PoolShape& s) {
  Pool2dGeom g;
  g.n = s.n, g.h = s.h, g.w = s.w, g.c = s.c, g.kh = s.kh, g.kw = s.kw, g.sh = s.sh, g.sw = s.sw, g.ph = s.ph,
  g.pw = s.pw;
  REQUIRE(pool2d_geom_finish(g));
  return g;
}

char* elem_ptr(const DevBuf& b, GpuDType t, int64_t off) { return b.as<char>() + off * gpu_dtype_size(t); }

// Values rounded to t: normal, or small integers when ties are wanted.
std::vector<float> draw(Rng& rng, GpuDType t, size_t n, bool ties) {
  std::vector<float> v = rng.normal_vec(n, 0.0f, 1.0f);
  for (auto& x : v) x = round_to(t, ties ? static_cast<float>(rng.below(7) - 3) : x);
  return v;
}
// Device copy with `off` leading zeros, so that element `off` of the buffer is v[0].
DevBuf upload_at(GpuDType t, const std::vector<float>& v, int64_t off) {
  std::vector<float> p(static_cast<size_t>(off), 0.0f);
  p.insert(p.end(), v.begin(), v.end());
  return to_device_as(t, p);
}
DevBuf poisoned(GpuDType t, size_t n, int64_t off) {
  DevBuf b((n + static_cast<size_t>(off)) * gpu_dtype_size(t));
  poison(b);
  return b;
}
std::vector<unsigned char> raw(const DevBuf& b, GpuDType t, int64_t off, size_t n) {
  return from_device<unsigned char>(elem_ptr(b, t, off), n * gpu_dtype_size(t));
}

std::vector<double> abs_of(const std::vector<double>& v) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
  return a;
}

// Allowed |got - ref| for a result formed as an fp32 sum of at most `terms` values (then possibly one fp32
// division) and rounded once to t: fp32 accumulation (terms + 1) * 2^-24 * absref (absref = the same op on |inputs|),
// plus the final rounding u_t * |ref|, doubled for slack, plus the f16 subnormal spacing.
std::vector<double> sum_bound(GpuDType t, const std::vector<double>& ref, const std::vector<double>& absref,
                              int64_t terms) {
  const double u32 = std::ldexp(1.0, -24), ut = unit_roundoff(t);
  const double floor_abs = t == GpuDType::F16 ? std::ldexp(1.0, -24) : 0.0;
  std::vector<double> b(ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    b[i] = 2.0 * (ut * std::fabs(ref[i]) + static_cast<double>(terms + 1) * u32 * absref[i]) + floor_abs;
  return b;
}

std::string tag_of(const PoolShape& s, GpuDType t) { return std::string(s.name) + " " + gpu_dtype_name(t); }

}  // namespace

TEST_CASE("max pooling forward and backward equal the reference (exactly in f32) for every shape and dtype",
          "[kernel][pool]") {
  CudaContext ctx = make_context();
  Rng rng(21);
  for (const PoolShape& s : kShapes) {
    for (GpuDType t : kTypes) {
      const std::string tag = tag_of(s, t);
      INFO(tag);
      const Pool2dGeom g = geom_of(s);
      const size_t nin = g.n * g.h * g.w * g.c, nout = g.n * g.p * g.q * g.c;
      const std::vector<float> x = draw(rng, t, nin, s.ties), dy = draw(rng, t, nout, false);  // (N,H,W,C) (N,P,Q,C)
      const int64_t off = s.offset;
      DevBuf dx_in = upload_at(t, x, off), ddy = upload_at(t, dy, off);
      DevBuf dyo = poisoned(t, nout, off), ddx = poisoned(t, nin, off);
      auto launch = [&] {
        REQUIRE_OK(maxpool2d_fwd_cuda(ctx.stream, g, elem_ptr(dx_in, t, off), elem_ptr(dyo, t, off), t));
        REQUIRE_OK(maxpool2d_bwd_cuda(ctx.stream, g, elem_ptr(ddy, t, off), elem_ptr(dx_in, t, off),
                                      elem_ptr(ddx, t, off), t));
        sync_ok(ctx);
      };
      launch();
      const std::vector<double> y = to_double(from_device_as(t, elem_ptr(dyo, t, off), nout));
      const std::vector<double> gx = to_double(from_device_as(t, elem_ptr(ddx, t, off), nin));

      const std::vector<double> xd = to_double(x), dyd = to_double(dy);
      std::vector<double> ref_y(nout), ref_dx(nin), abs_dx(nin);
      maxpool2d_fwd_cpu(g, xd.data(), ref_y.data());
      maxpool2d_grad_cpu(g, dyd.data(), xd.data(), ref_dx.data());
      maxpool2d_grad_cpu(g, abs_of(dyd).data(), xd.data(), abs_dx.data());
      // The max is one of the inputs, so the forward is exact in every dtype.
      CHECK_RESULT(compare_close("maxpool fwd " + tag, y, ref_y, std::vector<double>(nout, 0.0), g.c));
      CHECK_RESULT(compare_close("maxpool bwd " + tag, gx, ref_dx, sum_bound(t, ref_dx, abs_dx, g.kh * g.kw), g.c));
      if (t == GpuDType::F32) {
        // The float reference adds each element's terms in the same (p, q) order as the gather: bitwise equal.
        std::vector<float> ref_f(nin);
        maxpool2d_grad_cpu(g, dy.data(), x.data(), ref_f.data());
        CHECK_RESULT(compare_close("maxpool bwd f32 exact " + tag, gx, to_double(ref_f),
                                   std::vector<double>(nin, 0.0), g.c));
      }
      const auto y1 = raw(dyo, t, off, nout), dx1 = raw(ddx, t, off, nin);
      poison(dyo);
      poison(ddx);
      launch();
      CHECK_RESULT(compare_bitwise("maxpool fwd rerun " + tag, y1.data(), raw(dyo, t, off, nout).data(), y1.size(),
                                   gpu_dtype_size(t)));
      CHECK_RESULT(compare_bitwise("maxpool bwd rerun " + tag, dx1.data(), raw(ddx, t, off, nin).data(), dx1.size(),
                                   gpu_dtype_size(t)));
    }
  }
}

TEST_CASE("average pooling forward and backward match the reference within fp32-sum tolerance",
          "[kernel][pool]") {
  CudaContext ctx = make_context();
  Rng rng(22);
  for (const PoolShape& s : kShapes) {
    for (GpuDType t : kTypes) {
      const std::string tag = tag_of(s, t);
      INFO(tag);
      const Pool2dGeom g = geom_of(s);
      const size_t nin = g.n * g.h * g.w * g.c, nout = g.n * g.p * g.q * g.c;
      const std::vector<float> x = draw(rng, t, nin, s.ties), dy = draw(rng, t, nout, false);
      const int64_t off = s.offset;
      DevBuf dx_in = upload_at(t, x, off), ddy = upload_at(t, dy, off);
      DevBuf dyo = poisoned(t, nout, off), ddx = poisoned(t, nin, off);
      auto launch = [&] {
        REQUIRE_OK(avgpool2d_fwd_cuda(ctx.stream, g, elem_ptr(dx_in, t, off), elem_ptr(dyo, t, off), t));
        REQUIRE_OK(avgpool2d_bwd_cuda(ctx.stream, g, elem_ptr(ddy, t, off), elem_ptr(ddx, t, off), t));
        sync_ok(ctx);
      };
      launch();
      const std::vector<double> y = to_double(from_device_as(t, elem_ptr(dyo, t, off), nout));
      const std::vector<double> gx = to_double(from_device_as(t, elem_ptr(ddx, t, off), nin));

      const std::vector<double> xd = to_double(x), dyd = to_double(dy);
      std::vector<double> ref_y(nout), abs_y(nout), ref_dx(nin), abs_dx(nin);
      avgpool2d_fwd_cpu(g, xd.data(), ref_y.data());
      avgpool2d_fwd_cpu(g, abs_of(xd).data(), abs_y.data());
      avgpool2d_grad_cpu(g, dyd.data(), ref_dx.data());
      avgpool2d_grad_cpu(g, abs_of(dyd).data(), abs_dx.data());
      const int64_t terms = g.kh * g.kw;
      CHECK_RESULT(compare_close("avgpool fwd " + tag, y, ref_y, sum_bound(t, ref_y, abs_y, terms), g.c));
      CHECK_RESULT(compare_close("avgpool bwd " + tag, gx, ref_dx, sum_bound(t, ref_dx, abs_dx, terms), g.c));

      const auto y1 = raw(dyo, t, off, nout), dx1 = raw(ddx, t, off, nin);
      poison(dyo);
      poison(ddx);
      launch();
      CHECK_RESULT(compare_bitwise("avgpool fwd rerun " + tag, y1.data(), raw(dyo, t, off, nout).data(), y1.size(),
                                   gpu_dtype_size(t)));
      CHECK_RESULT(compare_bitwise("avgpool bwd rerun " + tag, dx1.data(), raw(ddx, t, off, nin).data(), dx1.size(),
                                   gpu_dtype_size(t)));
    }
  }
}

TEST_CASE("global average pooling matches the reference for ResNet's head and odd channel counts",
          "[kernel][pool]") {
  CudaContext ctx = make_context();
  Rng rng(23);
  struct GShape {
    int64_t n, hw, c, off;
  };
  for (const GShape s : {GShape{4, 49, 2048, 0}, GShape{3, 49, 2048, 1}, GShape{5, 7, 3, 0}, GShape{2, 9, 6, 0}}) {
    for (GpuDType t : kTypes) {
      const std::string tag = std::string(gpu_dtype_name(t)) + " n=" + std::to_string(s.n) +
                              " hw=" + std::to_string(s.hw) + " c=" + std::to_string(s.c) +
                              " offset=" + std::to_string(s.off);
      INFO(tag);
      const size_t nin = s.n * s.hw * s.c, nout = s.n * s.c;
      const std::vector<float> x = draw(rng, t, nin, false), dy = draw(rng, t, nout, false);  // (N,HW,C) (N,C)
      DevBuf dx_in = upload_at(t, x, s.off), ddy = upload_at(t, dy, s.off);
      DevBuf dyo = poisoned(t, nout, s.off), ddx = poisoned(t, nin, s.off);
      auto launch = [&] {
        REQUIRE_OK(global_avgpool_fwd_cuda(ctx.stream, elem_ptr(dx_in, t, s.off), elem_ptr(dyo, t, s.off), s.n, s.hw,
                                           s.c, t));
        REQUIRE_OK(global_avgpool_bwd_cuda(ctx.stream, elem_ptr(ddy, t, s.off), elem_ptr(ddx, t, s.off), s.n, s.hw,
                                           s.c, t));
        sync_ok(ctx);
      };
      launch();
      const std::vector<double> y = to_double(from_device_as(t, elem_ptr(dyo, t, s.off), nout));
      const std::vector<double> gx = to_double(from_device_as(t, elem_ptr(ddx, t, s.off), nin));
      const std::vector<double> xd = to_double(x), dyd = to_double(dy);
      std::vector<double> ref_y(nout), abs_y(nout), ref_dx(nin);
      global_avgpool_fwd_cpu(xd.data(), ref_y.data(), s.n, s.hw, s.c);
      global_avgpool_fwd_cpu(abs_of(xd).data(), abs_y.data(), s.n, s.hw, s.c);
      global_avgpool_grad_cpu(dyd.data(), ref_dx.data(), s.n, s.hw, s.c);
      CHECK_RESULT(compare_close("global avg fwd " + tag, y, ref_y, sum_bound(t, ref_y, abs_y, s.hw), s.c));
      CHECK_RESULT(compare_close("global avg bwd " + tag, gx, ref_dx, sum_bound(t, ref_dx, abs_of(ref_dx), 1), s.c));

      const auto y1 = raw(dyo, t, s.off, nout), dx1 = raw(ddx, t, s.off, nin);
      poison(dyo);
      poison(ddx);
      launch();
      CHECK_RESULT(compare_bitwise("global avg fwd rerun " + tag, y1.data(), raw(dyo, t, s.off, nout).data(),
                                   y1.size(), gpu_dtype_size(t)));
      CHECK_RESULT(compare_bitwise("global avg bwd rerun " + tag, dx1.data(), raw(ddx, t, s.off, nin).data(),
                                   dx1.size(), gpu_dtype_size(t)));
    }
  }
}

TEST_CASE("max pooling on the GPU propagates NaN and -inf like the CPU reference", "[kernel][pool]") {
  CudaContext ctx = make_context();
  const float nan = NAN, inf = INFINITY;
  Pool2dGeom g;
  g.n = 1, g.h = 2, g.w = 6, g.c = 1, g.kh = 1, g.kw = 3, g.sh = 1, g.sw = 3;
  REQUIRE(pool2d_geom_finish(g));  // (1, 2, 6, 1) -> (1, 2, 2, 1)
  // Row 0: {1, NaN, 3} and {NaN, 5, NaN} (the last NaN takes the gradient); row 1: all -inf (the first does).
  const std::vector<float> x = {1, nan, 3, nan, 5, nan, -inf, -inf, -inf, -inf, -inf, -inf}, dy = {2, 4, 6, 8};
  for (GpuDType t : kTypes) {
    INFO(gpu_dtype_name(t));
    DevBuf dxin = to_device_as(t, x), ddy = to_device_as(t, dy), dyo(4 * gpu_dtype_size(t)),
           ddx(12 * gpu_dtype_size(t));
    poison(dyo);
    poison(ddx);
    REQUIRE_OK(maxpool2d_fwd_cuda(ctx.stream, g, dxin.get(), dyo.get(), t));
    REQUIRE_OK(maxpool2d_bwd_cuda(ctx.stream, g, ddy.get(), dxin.get(), ddx.get(), t));
    sync_ok(ctx);
    const std::vector<float> y = from_device_as(t, dyo.get(), 4), gx = from_device_as(t, ddx.get(), 12);
    CHECK((std::isnan(y[0]) && std::isnan(y[1]) && y[2] == -inf && y[3] == -inf));
    CHECK(gx == std::vector<float>{0, 2, 0, 0, 0, 4, 6, 0, 0, 8, 0, 0});
  }
}

TEST_CASE("pooling launches replay bitwise identically from a captured CUDA graph", "[kernel][pool]") {
  CudaContext ctx = make_context();
  Rng rng(24);
  const Pool2dGeom g = geom_of(kShapes[1]);  // ResNet stem
  const GpuDType t = GpuDType::BF16;
  const size_t nin = g.n * g.h * g.w * g.c, nout = g.n * g.p * g.q * g.c, e = gpu_dtype_size(t);
  DevBuf x = to_device_as(t, draw(rng, t, nin, false)), dy = to_device_as(t, draw(rng, t, nout, false));
  DevBuf ymax(nout * e), dxmax(nin * e), yavg(nout * e), dxavg(nin * e);
  auto enqueue = [&] {
    REQUIRE_OK(maxpool2d_fwd_cuda(ctx.stream, g, x.get(), ymax.get(), t));
    REQUIRE_OK(maxpool2d_bwd_cuda(ctx.stream, g, dy.get(), x.get(), dxmax.get(), t));
    REQUIRE_OK(avgpool2d_fwd_cuda(ctx.stream, g, x.get(), yavg.get(), t));
    REQUIRE_OK(avgpool2d_bwd_cuda(ctx.stream, g, dy.get(), dxavg.get(), t));
  };
  auto outputs = [&] {
    return std::vector<std::vector<unsigned char>>{
        from_device<unsigned char>(ymax.get(), nout * e), from_device<unsigned char>(dxmax.get(), nin * e),
        from_device<unsigned char>(yavg.get(), nout * e), from_device<unsigned char>(dxavg.get(), nin * e)};
  };
  enqueue();
  sync_ok(ctx);
  const auto eager = outputs();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  REQUIRE_CUDA(cudaStreamEndCapture(ctx.stream, &graph));
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (const DevBuf* o : {&ymax, &dxmax, &yavg, &dxavg}) poison(*o);
  REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
  sync_ok(ctx);
  const auto replay = outputs();
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  for (size_t i = 0; i < eager.size(); ++i)
    CHECK_RESULT(compare_bitwise("pool graph replay output " + std::to_string(i), eager[i].data(), replay[i].data(),
                                 eager[i].size(), e));
}

TEST_CASE("pooling launchers reject unfinished geometry and null pointers without launching", "[kernel][pool]") {
  CudaContext ctx = make_context();
  DevBuf a(1024), b(1024);
  Pool2dGeom g;
  g.n = 1, g.h = g.w = 4, g.c = 2, g.kh = g.kw = 2, g.sh = g.sw = 2;  // p, q not filled in yet
  CHECK_FALSE(maxpool2d_fwd_cuda(ctx.stream, g, a.get(), b.get(), GpuDType::F32).ok());
  REQUIRE(pool2d_geom_finish(g));
  CHECK(maxpool2d_fwd_cuda(ctx.stream, g, a.get(), b.get(), GpuDType::F32).ok());
  CHECK_FALSE(maxpool2d_bwd_cuda(ctx.stream, g, b.get(), nullptr, b.get(), GpuDType::F16).ok());
  CHECK_FALSE(avgpool2d_fwd_cuda(ctx.stream, g, nullptr, b.get(), GpuDType::BF16).ok());
  Pool2dGeom stale = g;
  stale.p = 3;  // inconsistent with the window
  CHECK_FALSE(avgpool2d_bwd_cuda(ctx.stream, stale, a.get(), b.get(), GpuDType::F32).ok());
  CHECK(global_avgpool_fwd_cuda(ctx.stream, nullptr, nullptr, 0, 49, 8, GpuDType::F32).ok());
  CHECK_FALSE(global_avgpool_fwd_cuda(ctx.stream, a.get(), b.get(), 1, 0, 8, GpuDType::F32).ok());
  CHECK_FALSE(global_avgpool_bwd_cuda(ctx.stream, nullptr, b.get(), 1, 49, 8, GpuDType::F16).ok());
  sync_ok(ctx);
}

TEST_CASE("max pooling with recorded argmax gives the same outputs and gradients bitwise, and the CPU's offsets",
          "[kernel][pool]") {
  CudaContext ctx = make_context();
  Rng rng(23);
  for (const PoolShape& s : kShapes) {
    for (GpuDType t : kTypes) {
      const std::string tag = tag_of(s, t);
      INFO(tag);
      const Pool2dGeom g = geom_of(s);
      const size_t nin = g.n * g.h * g.w * g.c, nout = g.n * g.p * g.q * g.c;
      const std::vector<float> x = draw(rng, t, nin, s.ties), dy = draw(rng, t, nout, false);
      const int64_t off = s.offset;
      DevBuf dx_in = upload_at(t, x, off), ddy = upload_at(t, dy, off);
      DevBuf y_a = poisoned(t, nout, off), y_b = poisoned(t, nout, off);
      DevBuf dx_a = poisoned(t, nin, off), dx_b = poisoned(t, nin, off);
      DevBuf idx(nout + 16);
      poison(idx);
      // (N,H,W,C) x -> (N,P,Q,C) y and u8 argmax offsets; then both backwards into their own dx.
      REQUIRE_OK(maxpool2d_fwd_cuda(ctx.stream, g, elem_ptr(dx_in, t, off), elem_ptr(y_a, t, off), t));
      REQUIRE_OK(maxpool2d_fwd_idx_cuda(ctx.stream, g, elem_ptr(dx_in, t, off), elem_ptr(y_b, t, off),
                                        idx.as<uint8_t>(), t));
      REQUIRE_OK(maxpool2d_bwd_cuda(ctx.stream, g, elem_ptr(ddy, t, off), elem_ptr(dx_in, t, off),
                                    elem_ptr(dx_a, t, off), t));
      REQUIRE_OK(maxpool2d_bwd_idx_cuda(ctx.stream, g, elem_ptr(ddy, t, off), idx.as<uint8_t>(),
                                        elem_ptr(dx_b, t, off), t));
      sync_ok(ctx);
      CHECK_RESULT(compare_bitwise("maxpool fwd_idx y " + tag, raw(y_a, t, off, nout).data(),
                                   raw(y_b, t, off, nout).data(), nout * gpu_dtype_size(t), gpu_dtype_size(t)));
      CHECK_RESULT(compare_bitwise("maxpool bwd_idx dx " + tag, raw(dx_a, t, off, nin).data(),
                                   raw(dx_b, t, off, nin).data(), nin * gpu_dtype_size(t), gpu_dtype_size(t)));
      std::vector<uint8_t> ref_idx(nout);
      maxpool2d_argmax_cpu(g, x.data(), ref_idx.data());  // x holds the dtype's exact values
      const std::vector<uint8_t> got_idx = from_device<uint8_t>(idx.get(), nout);
      CHECK_RESULT(compare_bitwise("maxpool argmax offsets " + tag, got_idx.data(), ref_idx.data(), nout, 1));
    }
  }
}
