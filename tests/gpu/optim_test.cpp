// Optimizer kernels (AdamW, Adam, SGD variants) over several steps vs the torch.optim formulas evaluated in double
// on the host, with AMP unscaling, the skip flag, the lr table, odd sizes and misaligned views, and bitwise reruns;
// the update's fused low-precision weight copy bitwise against the update followed by cast_cuda.
#include <cmath>

#include "runtime/ops/cast/cast_cuda.h"
#include "runtime/ops/optim/optim_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

enum class Kind { AdamW, Adam, Sgd };

struct OptCase {
  const char* name;
  Kind kind;
  OptHyper h;
  bool decay;
};

// Host state in double, plus running magnitudes that bound the device's f32 rounding errors. mag_g is the size of
// the gradient BEFORE a coupled decay term can cancel it (|g| + |wd p|): where g + wd p nearly cancels, the f32 sum
// has an error ~ u * mag_g, and Adam's scale-free update m / sqrt(v) passes it on with relative size mag_g / |g|.
// mag_p accumulates |p| plus the sensitivity of each update to its inputs' rounding (through m and through v).
struct HostState {
  std::vector<double> p, m, v, mag_p, mag_m, mag_v;
  int step = 0;
};

void host_step(const OptCase& c, HostState& s, const std::vector<float>& graw, double inv_scale, double lr) {
  const OptHyper& h = c.h;
  s.step += 1;
  const double t = s.step;
  const bool coupled_decay = c.decay && c.kind != Kind::AdamW;
  for (size_t i = 0; i < s.p.size(); ++i) {
    double g = graw[i] * inv_scale, p = s.p[i];
    double mag_g = std::fabs(g);
    if (coupled_decay) {
      g += h.group[0].weight_decay * p;
      mag_g += std::fabs(h.group[0].weight_decay * p);
    }
    double mp = std::fabs(p);
    if (c.kind == Kind::Sgd) {
      double gf = g, mag_gf = mag_g;
      if (h.momentum != 0) {
        if (s.step == 1) {
          s.m[i] = g;
          s.mag_m[i] = mag_g;
        } else {
          s.m[i] = h.momentum * s.m[i] + (1 - h.dampening) * g;
          s.mag_m[i] = h.momentum * s.mag_m[i] + (1 - h.dampening) * mag_g;
        }
        gf = h.nesterov ? g + h.momentum * s.m[i] : s.m[i];
        mag_gf = h.nesterov ? mag_g + h.momentum * s.mag_m[i] : s.mag_m[i];
      }
      p -= lr * gf;
      mp += lr * mag_gf;
    } else {
      if (c.kind == Kind::AdamW && c.decay) p *= 1 - lr * h.group[0].weight_decay;
      s.m[i] = h.beta1 * s.m[i] + (1 - h.beta1) * g;
      s.v[i] = h.beta2 * s.v[i] + (1 - h.beta2) * g * g;
      s.mag_m[i] = h.beta1 * s.mag_m[i] + (1 - h.beta1) * mag_g;
      s.mag_v[i] = h.beta2 * s.mag_v[i] + (1 - h.beta2) * mag_g * mag_g;
      const double step_size = lr / (1 - std::pow(h.beta1, t));
      const double bc2_sqrt = std::sqrt(1 - std::pow(h.beta2, t));
      const double sqrt_v = std::sqrt(s.v[i]);
      const double denom = sqrt_v / bc2_sqrt + h.eps;
      const double upd = step_size * s.m[i] / denom;
      p -= upd;
      const double via_m = step_size * s.mag_m[i] / denom;
      const double via_v = sqrt_v > 0 ? std::fabs(upd) * s.mag_v[i] / (2 * sqrt_v * bc2_sqrt * denom) : 0.0;
      mp += std::fabs(upd) + via_m + via_v;
    }
    s.p[i] = p;
    s.mag_p[i] = std::max(s.mag_p[i], mp);
  }
}

struct DevState {
  DevBuf p, g, m, v, h;
};

}  // namespace

// Tolerance: every kernel operation is one f32 rounding of a quantity bounded by the tracked magnitudes, so after
// T <= 6 steps the error is a few T ulp of mag_p; bound 1e-5 * mag_p (about 80 ulp), same for m and v. (A host
// emulation of the f32 kernel arithmetic over 1e6 elements x 5 steps stays below 0.1 of these bounds.)
TEST_CASE("optimizer kernels follow the torch.optim formulas over several steps", "[kernel][optim]") {
  CudaContext ctx = make_context();
  const OptCase cases[] = {
      {"adamw decay", Kind::AdamW, opt_hyper_adam(1e-3, 0.9, 0.999, 1e-8, 0.05), true},
      {"adamw no-decay", Kind::AdamW, opt_hyper_adam(3e-3, 0.8, 0.99, 1e-6, 0.05), false},
      {"adam decay", Kind::Adam, opt_hyper_adam(1e-3, 0.9, 0.999, 1e-8, 0.01), true},
      {"adam no-decay", Kind::Adam, opt_hyper_adam(1e-2, 0.9, 0.999, 1e-8, 0.01), false},
      {"sgd plain", Kind::Sgd, opt_hyper_sgd(0.1, 0.0, 0.0, 0.0, false), false},
      {"sgd plain decay", Kind::Sgd, opt_hyper_sgd(0.1, 0.0, 0.0, 5e-4, false), true},
      {"sgd momentum", Kind::Sgd, opt_hyper_sgd(0.05, 0.9, 0.0, 5e-4, false), true},
      {"sgd momentum dampening", Kind::Sgd, opt_hyper_sgd(0.05, 0.9, 0.1, 5e-4, false), false},
      {"sgd nesterov", Kind::Sgd, opt_hyper_sgd(0.05, 0.9, 0.0, 5e-4, true), true},
  };
  const double loss_scale = 1024.0;
  const int steps = 5;
  for (const OptCase& c : cases) {
    for (int64_t n : {int64_t{1}, int64_t{6}, int64_t{1000003}}) {
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        const std::string tag = std::string(c.name) + " n=" + std::to_string(n) + " offset=" + std::to_string(off);
        INFO(tag);
        Rng rng(61 + n);
        std::vector<float> p0 = rng.normal_vec(n + off, 0.0f, 1.0f);
        HostState hs;
        hs.p.assign(p0.begin() + off, p0.end());
        hs.m.assign(n, 0.0);
        hs.v.assign(n, 0.0);
        hs.mag_p.assign(n, 0.0);
        hs.mag_m.assign(n, 0.0);
        hs.mag_v.assign(n, 0.0);
        for (int64_t i = 0; i < n; ++i) hs.mag_p[i] = std::fabs(hs.p[i]);
        DevState d;
        d.p = to_device(p0);
        d.g = DevBuf((n + off) * 4);
        d.m = to_device(std::vector<float>(n + off, 0.0f));
        d.v = to_device(std::vector<float>(n + off, 0.0f));
        d.h = DevBuf(sizeof(OptHyper));
        copy_sync(d.h.get(), &c.h, sizeof(OptHyper), cudaMemcpyHostToDevice);
        DevBuf scale = to_device(std::vector<float>{static_cast<float>(loss_scale)});
        auto* hd = d.h.as<OptHyper>();
        float *pp = d.p.as<float>() + off, *gp = d.g.as<float>() + off, *mp = d.m.as<float>() + off,
              *vp = d.v.as<float>() + off;
        for (int s = 0; s < steps; ++s) {
          std::vector<float> g = rng.normal_vec(n + off, 0.0f, 0.5f);
          for (auto& x : g) x = static_cast<float>(x * loss_scale);  // scaled gradients, as in AMP
          // upload() waits for the device first: the previous step's kernel (on the non-blocking ctx.stream) must
          // have consumed the old gradient. H200 run 2 used a raw cudaMemcpy here, which does not wait for that
          // stream: in "adamw no-decay n=6 offset=0" step 3 ran with step 4's gradient (a host replay with the
          // gradient sequence g1 g2 g4 g4 g5 reproduces the device's p, m and v to f32 rounding).
          upload(d.g.get(), g);
          REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, hd, nullptr, scale.as<float>(), nullptr, 0));
          if (c.kind == Kind::AdamW) REQUIRE_OK(adamw_step_cuda(ctx.stream, hd, pp, gp, mp, vp, n, c.decay));
          if (c.kind == Kind::Adam) REQUIRE_OK(adam_step_cuda(ctx.stream, hd, pp, gp, mp, vp, n, c.decay));
          if (c.kind == Kind::Sgd) {
            REQUIRE_OK(sgd_step_cuda(ctx.stream, hd, pp, gp, c.h.momentum != 0 ? mp : nullptr, n, c.decay));
          }
          std::vector<float> gh(g.begin() + off, g.end());
          host_step(c, hs, gh, 1.0 / loss_scale, c.h.group[0].lr);
        }
        sync_ok(ctx);
        OptHyper hh;
        copy_sync(&hh, d.h.get(), sizeof hh, cudaMemcpyDeviceToHost);
        CHECK(hh.step == steps);
        CHECK(hh.iter == static_cast<uint32_t>(steps));
        CHECK(hh.skip == 0);
        CHECK(hh.inv_scale == static_cast<float>(1.0 / loss_scale));
        std::vector<double> bp(n), bm(n), bv(n);
        for (int64_t i = 0; i < n; ++i) {
          bp[i] = 1e-5 * hs.mag_p[i];
          bm[i] = 1e-5 * hs.mag_m[i] + 1e-30;
          bv[i] = 1e-5 * hs.mag_v[i] + 1e-30;
        }
        CHECK_RESULT(compare_close("opt p " + tag, to_double(from_device<float>(pp, n)), hs.p, bp));
        if (c.kind != Kind::Sgd || c.h.momentum != 0) {
          CHECK_RESULT(compare_close("opt m/buf " + tag, to_double(from_device<float>(mp, n)), hs.m, bm));
        }
        if (c.kind != Kind::Sgd) {
          CHECK_RESULT(compare_close("opt v " + tag, to_double(from_device<float>(vp, n)), hs.v, bv));
        }
      }
    }
  }
}

TEST_CASE("a skipped step (found_inf set) leaves parameters, state and the step count untouched",
          "[kernel][optim]") {
  CudaContext ctx = make_context();
  const int64_t n = 4099;
  Rng rng(62);
  const std::vector<float> p0 = rng.normal_vec(n, 0.0f, 1.0f), g = rng.normal_vec(n, 0.0f, 1.0f);
  DevBuf p = to_device(p0), dg = to_device(g), m = to_device(std::vector<float>(n, 0.0f)),
         v = to_device(std::vector<float>(n, 0.0f)), flag = to_device(std::vector<int32_t>{0});
  const OptHyper h0 = opt_hyper_adam(1e-3, 0.9, 0.999, 1e-8, 0.01);
  DevBuf h(sizeof(OptHyper));
  copy_sync(h.get(), &h0, sizeof h0, cudaMemcpyHostToDevice);
  auto* hd = h.as<OptHyper>();
  // One clean step, then a step with found_inf = 1.
  REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, hd, flag.as<int32_t>(), nullptr, nullptr, 0));
  REQUIRE_OK(adamw_step_cuda(ctx.stream, hd, p.as<float>(), dg.as<float>(), m.as<float>(), v.as<float>(), n, true));
  sync_ok(ctx);
  const auto p1 = from_device<float>(p.get(), n), m1 = from_device<float>(m.get(), n),
             v1 = from_device<float>(v.get(), n);
  upload(flag.get(), std::vector<int32_t>{1});
  REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, hd, flag.as<int32_t>(), nullptr, nullptr, 0));
  REQUIRE_OK(adamw_step_cuda(ctx.stream, hd, p.as<float>(), dg.as<float>(), m.as<float>(), v.as<float>(), n, true));
  REQUIRE_OK(sgd_step_cuda(ctx.stream, hd, p.as<float>(), dg.as<float>(), nullptr, n, true));
  sync_ok(ctx);
  OptHyper hh;
  copy_sync(&hh, h.get(), sizeof hh, cudaMemcpyDeviceToHost);
  CHECK(hh.skip == 1);
  CHECK(hh.step == 1);
  CHECK(hh.iter == 2u);
  const auto p2 = from_device<float>(p.get(), n), m2 = from_device<float>(m.get(), n),
             v2 = from_device<float>(v.get(), n);
  CHECK_RESULT(compare_bitwise("skipped step p", p1.data(), p2.data(), n * 4, 4));
  CHECK_RESULT(compare_bitwise("skipped step m", m1.data(), m2.data(), n * 4, 4));
  CHECK_RESULT(compare_bitwise("skipped step v", v1.data(), v2.data(), n * 4, 4));
}

TEST_CASE("opt_hyper_advance takes the lr from the device table and derives the bias corrections in double",
          "[kernel][optim]") {
  CudaContext ctx = make_context();
  const std::vector<double> table = {1e-3, 5e-4, 2.5e-4};
  DevBuf t = to_device(table);
  const OptHyper h0 = opt_hyper_adam(123.0, 0.9, 0.999, 1e-8, 0.1);
  DevBuf h(sizeof(OptHyper));
  copy_sync(h.get(), &h0, sizeof h0, cudaMemcpyHostToDevice);
  for (int s = 1; s <= 5; ++s) {
    REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, h.as<OptHyper>(), nullptr, nullptr, t.as<double>(), 3));
    sync_ok(ctx);
    OptHyper hh;
    copy_sync(&hh, h.get(), sizeof hh, cudaMemcpyDeviceToHost);
    const double lr = table[std::min(s, 3) - 1];
    INFO("step " << s);
    CHECK(hh.group[0].lr == lr);
    CHECK(hh.step == s);
    CHECK(hh.group[0].lr_f == static_cast<float>(lr));
    // The device's double pow may differ from the host's by an ulp of a double, which can flip the f32 rounding.
    CHECK(hh.group[0].step_size == Approx(lr / (1 - std::pow(0.9, s))).epsilon(1.2e-7));
    CHECK(hh.bc2_sqrt == Approx(std::sqrt(1 - std::pow(0.999, s))).epsilon(1.2e-7));
    CHECK(hh.group[0].decay_factor == static_cast<float>(1 - lr * 0.1));
    CHECK(hh.inv_scale == 1.0f);
  }
}

TEST_CASE("optimizer kernels are bitwise reproducible", "[kernel][optim]") {
  CudaContext ctx = make_context();
  const int64_t n = 100003;
  Rng rng(63);
  const std::vector<float> p0 = rng.normal_vec(n, 0.0f, 1.0f), g = rng.normal_vec(n, 0.0f, 1.0f);
  std::vector<std::vector<float>> results;
  for (int run = 0; run < 2; ++run) {
    DevBuf p = to_device(p0), dg = to_device(g), m = to_device(std::vector<float>(n, 0.0f)),
           v = to_device(std::vector<float>(n, 0.0f));
    const OptHyper h0 = opt_hyper_adam(1e-3, 0.9, 0.999, 1e-8, 0.01);
    DevBuf h(sizeof(OptHyper));
    copy_sync(h.get(), &h0, sizeof h0, cudaMemcpyHostToDevice);
    for (int s = 0; s < 3; ++s) {
      REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, h.as<OptHyper>(), nullptr, nullptr, nullptr, 0));
      REQUIRE_OK(adam_step_cuda(ctx.stream, h.as<OptHyper>(), p.as<float>(), dg.as<float>(), m.as<float>(),
                                v.as<float>(), n, true));
    }
    sync_ok(ctx);
    results.push_back(from_device<float>(p.get(), n));
  }
  CHECK_RESULT(compare_bitwise("adam 3 steps run 1 vs run 2", results[0].data(), results[1].data(), n * 4, 4));
}

// Tolerance: none. The fused copy rounds the updated f32 parameter with the same __float2half_rn /
// __float2bfloat16_rn as cast_kernel, so it must be bitwise the cast of the parameters the same update wrote; a
// skipped step (found_inf) writes neither the parameters nor the copy.
TEST_CASE("the optimizer's fused low-precision weight copy is bitwise the update followed by cast_cuda",
          "[kernel][optim][amp]") {
  CudaContext ctx = make_context();
  for (const CudaOptimizer kind : {CudaOptimizer::Sgd, CudaOptimizer::AdamW, CudaOptimizer::Adam}) {
    for (const GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
      for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{4096}, int64_t{100003}}) {
        for (const int64_t off : {int64_t{0}, int64_t{1}}) {  // off 1: misaligned views, the scalar path
          const char* kname = kind == CudaOptimizer::Sgd ? "sgd" : kind == CudaOptimizer::AdamW ? "adamw" : "adam";
          const std::string tag = std::string(kname) + (t == GpuDType::F16 ? " f16" : " bf16") +
                                  " n=" + std::to_string(n) + " off=" + std::to_string(off);
          INFO(tag);
          Rng rng(64 + n);
          const std::vector<float> p0 = rng.normal_vec(n, 0.0f, 3.0f), g = rng.normal_vec(n, 0.0f, 1.0f);
          const OptHyper h0 = kind == CudaOptimizer::Sgd ? opt_hyper_sgd(0.1, 0.9, 0.0, 1e-4, true)
                                                         : opt_hyper_adam(1e-2, 0.9, 0.999, 1e-8, 0.01);
          // a: update with the fused copy; b: update, then cast_cuda.
          DevBuf pa(4 * (n + off)), pb(4 * (n + off)), dg = to_device(g), ma = to_device(std::vector<float>(n, 0.0f)),
                 va = to_device(std::vector<float>(n, 0.0f)), mb = to_device(std::vector<float>(n, 0.0f)),
                 vb = to_device(std::vector<float>(n, 0.0f)), la(2 * (n + off)), lb(2 * (n + off)),
                 flag = to_device(std::vector<int32_t>{0});
          upload(pa.as<float>() + off, p0);
          upload(pb.as<float>() + off, p0);
          DevBuf ha(sizeof(OptHyper)), hb(sizeof(OptHyper));
          copy_sync(ha.get(), &h0, sizeof h0, cudaMemcpyHostToDevice);
          copy_sync(hb.get(), &h0, sizeof h0, cudaMemcpyHostToDevice);
          uint16_t* lap = la.as<uint16_t>() + off;
          uint16_t* lbp = lb.as<uint16_t>() + off;
          for (int step = 1; step <= 3; ++step) {
            INFO("step " << step << (step == 3 ? " (skipped)" : ""));
            if (step == 3) upload(flag.get(), std::vector<int32_t>{1});
            REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, ha.as<OptHyper>(), flag.as<int32_t>(), nullptr, nullptr, 0));
            REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, hb.as<OptHyper>(), flag.as<int32_t>(), nullptr, nullptr, 0));
            REQUIRE_OK(optimizer_step_cuda(ctx.stream, kind, ha.as<OptHyper>(), pa.as<float>() + off, dg.as<float>(),
                                           ma.as<float>(), va.as<float>(), n, n, LowpCopy{lap, t}));
            REQUIRE_OK(optimizer_step_cuda(ctx.stream, kind, hb.as<OptHyper>(), pb.as<float>() + off, dg.as<float>(),
                                           mb.as<float>(), vb.as<float>(), n, n));
            if (step < 3) REQUIRE_OK(cast_cuda(ctx.stream, pb.as<float>() + off, GpuDType::F32, lbp, t, n));
            sync_ok(ctx);
            const std::vector<float> got_p = from_device<float>(pa.as<float>() + off, n),
                                     want_p = from_device<float>(pb.as<float>() + off, n);
            CHECK_RESULT(compare_bitwise("params " + tag, got_p.data(), want_p.data(), n * 4, 4));
            const std::vector<uint16_t> got = from_device<uint16_t>(lap, n), want = from_device<uint16_t>(lbp, n);
            CHECK_RESULT(compare_bitwise("low-precision copy " + tag, got.data(), want.data(), n * 2, 2));
          }
        }
      }
    }
  }
}
