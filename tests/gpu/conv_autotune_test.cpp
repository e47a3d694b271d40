// Measured cuDNN conv algorithms (runtime/cuda/conv_autotune.h): searched choices survive the cache file, plans
// from the cache run exactly them and match the float64 CPU reference (tolerances as in conv2d_test.cpp), garbled
// files and refused entries are errors naming where, deterministic searches pick deterministic algorithms only.
//
// Tolerances, per element: |got - ref| <= acc * mag + u * |ref| (mag: the same convolution of |inputs|), and
// norm-wise ||got - ref|| / ||ref|| < rel. f32: acc = rel = 1e-5 (FMA math). f16: inputs on a 1/64 grid (exact),
// fp32 accumulation, so only output rounding and intermediate roundings of partials remain: acc 2u, rel 1e-2.
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runtime/cuda/conv_autotune.h"
#include "runtime/cuda/cudnn_fused_conv.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

struct Mode {
  const char* name;
  GpuDType io;
  double acc, rel;
};
const Mode kF32{"f32", GpuDType::F32, 1e-5, 1e-5};
const Mode kF16{"f16", GpuDType::F16, 2 * std::ldexp(1.0, -11), 1e-2};

Conv2dGeom geom(int64_t n, int64_t hw, int64_t c, int64_t k, int64_t rs, int64_t stride, int64_t pad) {
  Conv2dGeom g;
  g.n = n, g.h = g.w = hw, g.c = c, g.k = k, g.r = g.s = rs;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  std::string why;
  if (!conv2d_geom_finish(g, &why)) FAIL(why);
  return g;
}

ConvDesc desc(const Conv2dGeom& g, const Mode& m, bool deterministic) {
  ConvDesc d;
  d.g = g, d.io = m.io, d.tf32 = false, d.deterministic = deterministic;
  return d;
}

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    dir = std::filesystem::temp_directory_path() / ("trctl_autotune_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// x (N,H,W,C), w (K,R,S,C), dy (N,P,Q,K): general floats for f32, multiples of 1/64 in [-1, 1] for f16 (exact).
struct Inputs {
  std::vector<float> x, w, dy;
};
Inputs make_inputs(const Conv2dGeom& g, bool lowp, uint64_t seed) {
  Rng rng(seed);
  auto draw = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = lowp ? static_cast<float>(rng.below(129) - 64) / 64.0f : rng.uniform(-1.0f, 1.0f);
    return v;
  };
  return {draw(g.n * g.h * g.w * g.c), draw(g.k * g.r * g.s * g.c), draw(g.n * g.p * g.q * g.k)};
}

std::vector<double> dbl(const std::vector<float>& v, bool absolute) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = absolute ? std::fabs(double(v[i])) : double(v[i]);
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

// Runs the three directions of plan p (groups 1, no bias) and compares each with the float64 reference; returns the
// raw output bytes (y, dx, dw) for bitwise run-to-run comparisons.
std::vector<std::vector<uint8_t>> run_and_check(const CudaContext& ctx, const CudnnConvPlan& p, const Mode& m,
                                                const Inputs& in, const std::string& tag) {
  const Conv2dGeom& g = p.desc.g;
  ThreadPool pool(0);
  std::vector<double> x = dbl(in.x, false), w = dbl(in.w, false), dy = dbl(in.dy, false);
  std::vector<double> ax = dbl(in.x, true), aw = dbl(in.w, true), ady = dbl(in.dy, true);
  std::vector<double> y(dy.size()), y_mag(dy.size()), dx(x.size()), dx_mag(x.size()), dw(w.size()), dw_mag(w.size());
  conv2d_fwd_cpu<double>(g, x.data(), w.data(), nullptr, y.data(), &pool);
  conv2d_fwd_cpu<double>(g, ax.data(), aw.data(), nullptr, y_mag.data(), &pool);
  conv2d_grad_input_cpu<double>(g, dy.data(), w.data(), dx.data(), &pool);
  conv2d_grad_input_cpu<double>(g, ady.data(), aw.data(), dx_mag.data(), &pool);
  conv2d_grad_weight_cpu<double>(g, dy.data(), x.data(), dw.data(), &pool);
  conv2d_grad_weight_cpu<double>(g, ady.data(), ax.data(), dw_mag.data(), &pool);

  const size_t e = gpu_dtype_size(m.io);
  DevBuf bx = to_device_as(m.io, in.x), bw = to_device_as(m.io, in.w), bdy = to_device_as(m.io, in.dy);
  DevBuf by(y.size() * e), bdx(x.size() * e), bdw(w.size() * e);
  const size_t wsb = cudnn_conv_workspace_bytes(p);
  DevBuf ws(wsb);
  for (const DevBuf* o : {&by, &bdx, &bdw}) poison(*o);
  REQUIRE_OK(cudnn_conv_fwd(ctx.cudnn, ctx.stream, p, bx.get(), bw.get(), nullptr, by.get(), ws.get(), wsb));
  REQUIRE_OK(cudnn_conv_dgrad(ctx.cudnn, ctx.stream, p, bdy.get(), bw.get(), bdx.get(), ws.get(), wsb));
  REQUIRE_OK(cudnn_conv_wgrad(ctx.cudnn, ctx.stream, p, bdy.get(), bx.get(), bdw.get(), ws.get(), wsb));
  sync_ok(ctx);
  check_close("cached conv fwd y " + tag, m, from_device_as(m.io, by.get(), y.size()), y, y_mag, g.k);
  check_close("cached conv dgrad dx " + tag, m, from_device_as(m.io, bdx.get(), x.size()), dx, dx_mag, g.c);
  check_close("cached conv wgrad dw " + tag, m, from_device_as(m.io, bdw.get(), w.size()), dw, dw_mag,
              g.r * g.s * g.c);
  return {from_device<uint8_t>(by.get(), y.size() * e), from_device<uint8_t>(bdx.get(), x.size() * e),
          from_device<uint8_t>(bdw.get(), w.size() * e)};
}

AutotuneDevice current_device() {
  auto dev = autotune_device_current();
  REQUIRE_OK(dev);
  return dev.value();
}

// Channel counts are multiples of 8, so f16 has tensor-core kernels for all of them.
std::vector<std::pair<const char*, Conv2dGeom>> cases() {
  return {{"3x3 64->64 pad 1", geom(8, 28, 64, 64, 3, 1, 1)},
          {"1x1 stride 2 64->128", geom(8, 28, 64, 128, 1, 2, 0)},
          {"3x3 stride 2 32->64 pad 1", geom(4, 27, 32, 64, 3, 2, 1)}};
}

}  // namespace

TEST_CASE("autotuned conv algorithms survive the cache file and cached plans run them, matching the reference",
          "[kernel][conv2d][autotune]") {
  CudaContext ctx = make_context();
  TempDir tmp;
  const std::string path = tmp.file("nested/conv_autotune.txt");  // the directory is created on save
  {
    EnvGuard env("TRCTL_AUTOTUNE_CACHE", path);
    CHECK(autotune_cache_path() == path);
  }
  AutotuneCache cache;
  for (const Mode* m : {&kF32, &kF16})
    for (const auto& [name, g] : cases()) REQUIRE_OK(cudnn_conv_autotune(ctx.cudnn, desc(g, *m, true), cache));
  CHECK(cache.entries.size() == 3 * 2 * cases().size());
  REQUIRE_OK(autotune_cache_save(path, cache));
  Result<AutotuneCache> loaded = autotune_cache_load(path);
  REQUIRE_OK(loaded);
  REQUIRE(loaded.value().entries.size() == cache.entries.size());
  for (const auto& [key, c] : cache.entries) {
    INFO(key);
    const ConvAlgoChoice& l = loaded.value().entries.at(key);
    CHECK(l.algo == c.algo);
    CHECK(l.math == c.math);
    CHECK(l.engine == c.engine);
    CHECK(l.workspace == c.workspace);
    CHECK(std::fabs(l.ms - c.ms) <= 1e-5f * std::max(1.0f, c.ms));
  }
  const AutotuneDevice dev = current_device();
  uint64_t seed = 7000;
  for (const Mode* m : {&kF32, &kF16})
    for (const auto& [name, g] : cases()) {
      const std::string tag = std::string(name) + " " + m->name;
      INFO(tag);
      const ConvDesc d = desc(g, *m, true);
      auto plan = cudnn_conv_plan_cached(ctx.cudnn, d, loaded.value());
      REQUIRE_OK(plan);
      std::printf("  autotuned %s: %s\n", tag.c_str(), cudnn_conv_describe(plan.value()).c_str());
      for (ConvDir dir : kConvDirs) {
        const ConvAlgoChoice& c = loaded.value().entries.at(autotune_key(dev, dir, d));
        const ConvDirPlan got = cudnn_conv_plan_dir(plan.value(), dir);
        INFO(conv_dir_name(dir));
        if (c.engine.engine >= 0) {  // a graph-API config won the autotune (f16 only): the plan runs exactly it
          CHECK(m->io == GpuDType::F16);
          REQUIRE(got.graph != nullptr);
          CHECK(got.graph->id == c.engine);
        } else {
          CHECK(got.graph == nullptr);
          CHECK(got.algo == c.algo);
          CHECK(static_cast<int>(got.math) == c.math);
        }
        CHECK(got.ws == c.workspace);
      }
      const Inputs in = make_inputs(g, m->io != GpuDType::F32, ++seed);
      const auto first = run_and_check(ctx, plan.value(), *m, in, tag);
      const auto second = run_and_check(ctx, plan.value(), *m, in, tag);
      for (size_t i = 0; i < first.size(); ++i)
        CHECK_RESULT(compare_bitwise("cached conv rerun output " + std::to_string(i) + " " + tag, first[i].data(),
                                     second[i].data(), first[i].size(), gpu_dtype_size(m->io)));
    }
}

TEST_CASE("a deterministic autotune never chooses a non-deterministic algorithm", "[kernel][conv2d][autotune]") {
  CudaContext ctx = make_context();
  const AutotuneDevice dev = current_device();
  for (const Mode* m : {&kF32, &kF16})
    for (const auto& [name, g] : cases()) {
      AutotuneCache det, any;
      REQUIRE_OK(cudnn_conv_autotune(ctx.cudnn, desc(g, *m, true), det));
      REQUIRE_OK(cudnn_conv_autotune(ctx.cudnn, desc(g, *m, false), any));
      for (ConvDir dir : kConvDirs) {
        INFO(name << " " << m->name << " " << conv_dir_name(dir));
        const ConvAlgoChoice& c = det.entries.at(autotune_key(dev, dir, desc(g, *m, true)));
        CHECK(cudnn_conv_algo_deterministic(dir, c.algo));
        // The unrestricted search keys its entries det=0: never mixed up with the deterministic ones.
        const ConvAlgoChoice& a = any.entries.at(autotune_key(dev, dir, desc(g, *m, false)));
        std::printf("  %s %s %s: deterministic %s %.4f ms, any %s %.4f ms\n", name, m->name, conv_dir_name(dir),
                    cudnn_conv_algo_name(dir, c.algo), double(c.ms), cudnn_conv_algo_name(dir, a.algo), double(a.ms));
      }
      CHECK(det.entries.size() == 3);
      CHECK(any.entries.size() == 3);
    }
}

TEST_CASE("a cache entry that cannot run these descriptors is an error naming the entry",
          "[kernel][conv2d][autotune]") {
  CudaContext ctx = make_context();
  const AutotuneDevice dev = current_device();
  const ConvDesc d = desc(cases()[0].second, kF32, true);
  auto refused = [&](ConvDir dir, int algo, int math) {
    AutotuneCache c;
    const std::string key = autotune_key(dev, dir, d);
    c.entries[key] = ConvAlgoChoice{algo, math, 0, 0.1f, {}};
    auto plan = cudnn_conv_plan_cached(ctx.cudnn, d, c);
    INFO(key << " algo " << algo << " math " << math);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error_text().find(key) != std::string::npos);
    return plan.errors()[0].code;
  };
  // Non-deterministic filter-gradient ALGO_0 under deterministic = true.
  CHECK(refused(ConvDir::Wgrad, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_FMA_MATH) == ErrCode::Invalid);
  // Tensor-op math for strict f32.
  CHECK(refused(ConvDir::Fwd, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_TENSOR_OP_MATH) == ErrCode::Invalid);
  // An algorithm id this cuDNN does not have.
  CHECK(refused(ConvDir::Dgrad, 99, CUDNN_FMA_MATH) == ErrCode::Invalid);
  // A key for another geometry is simply not used: the heuristics plan that direction.
  AutotuneCache other;
  ConvDesc d2 = d;
  d2.g.n += 1;
  other.entries[autotune_key(dev, ConvDir::Fwd, d2)] = ConvAlgoChoice{99, CUDNN_FMA_MATH, 0, 0.1f, {}};
  REQUIRE_OK(cudnn_conv_plan_cached(ctx.cudnn, d, other));
  // FFT with NHWC tensors and stride 2 is outside what cuDNN documents for FFT; its workspace query should refuse.
  AutotuneCache fft;
  const ConvDesc ds = desc(cases()[1].second, kF32, true);
  const std::string key = autotune_key(dev, ConvDir::Fwd, ds);
  fft.entries[key] = ConvAlgoChoice{CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_FMA_MATH, 0, 0.1f, {}};
  auto plan = cudnn_conv_plan_cached(ctx.cudnn, ds, fft);
  if (plan.ok()) {
    WARN("cuDNN's workspace query accepted FFT for NHWC stride 2 (" << cudnn_conv_describe(plan.value()) << ")");
  } else {
    std::printf("  refused as expected: %s", plan.error_text().c_str());
    CHECK(plan.error_text().find(key) != std::string::npos);
  }
}

TEST_CASE("a garbled autotune cache file is an error naming file:line", "[kernel][conv2d][autotune]") {
  TempDir tmp;
  const std::string path = tmp.file("conv_autotune.txt");
  AutotuneDevice dev;
  dev.gpu = "NVIDIA_H200", dev.cudnn_version = 91900, dev.cc_major = 9, dev.cc_minor = 0;
  const std::string good = autotune_key(dev, ConvDir::Fwd, desc(cases()[0].second, kF16, true)) +
                           " -> algo=1 math=1 ws=4096 ms=0.0125\n";
  const std::string header = "# trctl conv autotune v2\n";
  const std::string engine_line = std::string(good).replace(good.find("algo=1 math=1"), 13, "engine=7:2=3,15=-1");
  struct Bad {
    const char* what;
    std::string text;
    int line;
    const char* says;
    const char* not_says = nullptr;  // (v1 files: the message offers no engine= form)
  };
  const Bad bads[] = {
      {"no header", good, 1, "first line"},
      {"newer version", "# trctl conv autotune v3\n" + good, 1, "unsupported"},
      {"no arrow", header + good + "gpu=x what\n", 3, "garbled"},
      {"bad direction", header + "\n# comment\n" + std::string(good).replace(good.find("dir=fwd"), 7, "dir=up"), 4,
       "dir"},
      {"algo out of range", header + std::string(good).replace(good.find("algo=1"), 6, "algo=9"), 2, "algo"},
      {"bad math", header + std::string(good).replace(good.find("math=1"), 6, "math=x"), 2, "math"},
      {"negative time", header + std::string(good).replace(good.find("ms=0.0125"), 9, "ms=-1"), 2, "ms"},
      {"missing value", header + good.substr(0, good.find(" ms=")) + "\n", 2, "value"},
      {"not canonical", header + std::string(good).replace(good.find("n=8 "), 4, "n=08 "), 2, "canonical"},
      {"duplicate", header + good + good, 3, "duplicate"},
      {"empty file", "", 0, "empty"},
      {"engine entry in a v1 file", "# trctl conv autotune v1\n" + engine_line, 2,
       "value is not 'algo=A math=M ws=BYTES ms=T'", "or 'engine="},
      {"engine id not canonical", header + std::string(engine_line).replace(engine_line.find("7:"), 2, "07:"), 2,
       "engine="},
      {"engine id with a dangling knob", header + std::string(engine_line).replace(engine_line.find("15=-1"), 5, "15"),
       2, "engine="},
      {"engine entry with a math field", header + std::string(engine_line).replace(engine_line.find(" ws="), 0,
                                                                                     " math=1"),
       2, "or 'engine=E[:K=V,...] ws=BYTES ms=T'"},
  };
  for (const Bad& b : bads) {
    INFO(b.what);
    write_text(path, b.text);
    auto c = autotune_cache_load(path);
    REQUIRE_FALSE(c.ok());
    CHECK(c.errors()[0].where == path + ":" + std::to_string(b.line));
    CHECK(c.error_text().find(b.says) != std::string::npos);
    if (b.not_says) CHECK(c.error_text().find(b.not_says) == std::string::npos);
  }
  // The good line alone loads, and formats back to the same text.
  write_text(path, header + good);
  auto c = autotune_cache_load(path);
  REQUIRE_OK(c);
  REQUIRE(c.value().entries.size() == 1);
  CHECK(c.value().entries.begin()->second.workspace == 4096);
  // Legacy entries only: written as version 1 (what older builds read), from a v2 file or a v1 file alike.
  const std::string header_v1 = "# trctl conv autotune v1\n";
  CHECK(autotune_cache_format(c.value()) == header_v1 + good);
  write_text(path, header_v1 + good);
  auto v1 = autotune_cache_load(path);
  REQUIRE_OK(v1);
  CHECK(autotune_cache_format(v1.value()) == header_v1 + good);
  // A graph-API engine entry round-trips: engine index and knob choices, negative knob values included.
  write_text(path, header + engine_line);
  auto e = autotune_cache_load(path);
  REQUIRE_OK(e);
  const ConvAlgoChoice& ec = e.value().entries.begin()->second;
  CHECK(ec.engine.engine == 7);
  CHECK(ec.engine.knobs == std::vector<std::pair<int64_t, int64_t>>{{2, 3}, {15, -1}});
  CHECK(autotune_cache_format(e.value()) == header + engine_line);
  // A missing file is an empty cache.
  auto missing = autotune_cache_load(tmp.file("absent.txt"));
  REQUIRE_OK(missing);
  CHECK(missing.value().entries.empty());
}

TEST_CASE("graph-API engine configs of a plain convolution run each direction like the reference, pinned through "
          "the plan, replayed from a captured CUDA graph bitwise",
          "[kernel][conv2d][autotune][convgraph]") {
  CudaContext ctx = make_context();
  uint64_t seed = 9100;
  for (const bool det : {true, false})
    for (const auto& [name, g] : cases()) {
      const ConvDesc d = desc(g, kF16, det);
      std::array<std::vector<CudnnEngineId>, 3> ids;
      for (ConvDir dir : kConvDirs) {
        const ConvGraphDesc gd = conv_graph_desc(d, dir, size_t{256} << 20);
        std::string log;
        auto c = conv_graph_candidates(ctx.cudnn, gd, &log);
        INFO(name << " " << conv_dir_name(dir) << (det ? " deterministic" : "") << "\n" << log);
        REQUIRE_OK(c);
        REQUIRE_FALSE(c.value().empty());
        ids[static_cast<int>(dir)] = c.value();
        std::printf("  %s %s%s: %zu graph-API configs\n", name, conv_dir_name(dir), det ? " det" : "",
                    c.value().size());
      }
      // Up to three configs per direction, each direction pinned through cudnn_conv_plan_fixed.
      for (size_t i = 0; i < 3; ++i) {
        std::array<ConvAlgoFixed, 3> fixed;
        bool any = false;
        for (ConvDir dir : kConvDirs) {
          const auto& v = ids[static_cast<int>(dir)];
          if (i >= v.size()) continue;
          fixed[static_cast<int>(dir)].engine = v[i];
          fixed[static_cast<int>(dir)].origin = "test config #" + std::to_string(i);
          any = true;
        }
        if (!any) break;
        auto plan = cudnn_conv_plan_fixed(ctx.cudnn, d, fixed);
        if (!plan.ok()) {  // a heuristic may list a config whose plan cuDNN then refuses: say so, try the next
          WARN("config #" << i << " refused for " << name << ": " << plan.error_text().substr(0, 400));
          CHECK(plan.error_text().find("test config #") != std::string::npos);
          continue;
        }
        const std::string tag = std::string(name) + (det ? " det" : "") + " config #" + std::to_string(i);
        INFO(tag << ": " << cudnn_conv_describe(plan.value()));
        for (ConvDir dir : kConvDirs) {
          const ConvDirPlan dp = cudnn_conv_plan_dir(plan.value(), dir);
          if (fixed[static_cast<int>(dir)].engine.engine < 0) continue;
          REQUIRE(dp.graph != nullptr);
          CHECK(dp.graph->id == fixed[static_cast<int>(dir)].engine);
          if (det) CHECK_FALSE(dp.graph->nondeterministic);
        }
        const Inputs in = make_inputs(g, true, ++seed);
        const auto eager = run_and_check(ctx, plan.value(), kF16, in, tag);
        if (det) {
          const auto again = run_and_check(ctx, plan.value(), kF16, in, tag);
          for (size_t k = 0; k < eager.size(); ++k)
            CHECK_RESULT(compare_bitwise("graph-API conv rerun output " + std::to_string(k) + " " + tag,
                                         eager[k].data(), again[k].data(), eager[k].size(), 2));
        }
      }
    }
  // Replay: the forward and weight gradient of the first geometry's first configs, captured, equal the eager run.
  const Conv2dGeom g = cases()[0].second;  // a copy: cases() returns a temporary
  const ConvDesc d = desc(g, kF16, true);
  std::array<ConvAlgoFixed, 3> fixed;
  for (ConvDir dir : kConvDirs) {  // per direction the first listed config cuDNN builds a plan for
    ConvGraphDesc gd = conv_graph_desc(d, dir, size_t{256} << 20);
    auto c = conv_graph_candidates(ctx.cudnn, gd);
    REQUIRE_OK(c);
    for (const CudnnEngineId& id : c.value()) {
      gd.plan.pin = &id;
      if (conv_graph_plan(ctx.cudnn, gd).ok()) {
        fixed[static_cast<int>(dir)].engine = id;
        break;
      }
    }
    REQUIRE(fixed[static_cast<int>(dir)].engine.engine >= 0);
  }
  auto plan = cudnn_conv_plan_fixed(ctx.cudnn, d, fixed);
  REQUIRE_OK(plan);
  const Inputs in = make_inputs(g, true, 9999);
  DevBuf x = to_device_as(GpuDType::F16, in.x), w = to_device_as(GpuDType::F16, in.w);
  DevBuf dy = to_device_as(GpuDType::F16, in.dy);
  const size_t ny = in.dy.size(), nw = in.w.size(), wsb = cudnn_conv_workspace_bytes(plan.value());
  DevBuf y(ny * 2), dw(nw * 2), y2(ny * 2), dw2(nw * 2), ws(wsb);
  auto enqueue = [&](void* yo, void* dwo) -> Status {
    if (Status st = cudnn_conv_fwd(ctx.cudnn, ctx.stream, plan.value(), x.get(), w.get(), nullptr, yo, ws.get(), wsb);
        !st)
      return st;
    return cudnn_conv_wgrad(ctx.cudnn, ctx.stream, plan.value(), dy.get(), x.get(), dwo, ws.get(), wsb);
  };
  REQUIRE_OK(enqueue(y.get(), dw.get()));
  sync_ok(ctx);
  cudaGraphExec_t exec = capture_graph(ctx, [&] { return enqueue(y2.get(), dw2.get()); });
  REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
  sync_ok(ctx);
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  CHECK_RESULT(compare_bitwise("graph-API conv fwd replayed", from_device<uint8_t>(y.get(), ny * 2).data(),
                               from_device<uint8_t>(y2.get(), ny * 2).data(), ny * 2, 2));
  CHECK_RESULT(compare_bitwise("graph-API conv wgrad replayed", from_device<uint8_t>(dw.get(), nw * 2).data(),
                               from_device<uint8_t>(dw2.get(), nw * 2).data(), nw * 2, 2));
}

TEST_CASE("a graph-API cache entry cuDNN cannot build, or for an f32 conv, is an error naming the entry",
          "[kernel][conv2d][autotune][convgraph]") {
  CudaContext ctx = make_context();
  const AutotuneDevice dev = current_device();
  for (const Mode* m : {&kF16, &kF32}) {
    const ConvDesc d = desc(cases()[0].second, *m, true);
    AutotuneCache c;
    const std::string key = autotune_key(dev, ConvDir::Wgrad, d);
    ConvAlgoChoice choice;
    choice.engine.engine = 100000;  // no graph has that many engines
    c.entries[key] = choice;
    auto plan = cudnn_conv_plan_cached(ctx.cudnn, d, c);
    INFO(m->name);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error_text().find(key) != std::string::npos);
    CHECK(plan.error_text().find("engine config 100000") != std::string::npos);
  }
  // An autotune with the graph-API configs still writes an entry per direction, each of which plans.
  AutotuneCache measured;
  const ConvDesc d = desc(cases()[1].second, kF16, false);
  REQUIRE_OK(cudnn_conv_autotune(ctx.cudnn, d, measured, size_t{256} << 20, true));
  CHECK(measured.entries.size() == 3);
  REQUIRE_OK(cudnn_conv_plan_cached(ctx.cudnn, d, measured));
}
