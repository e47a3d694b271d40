// Gradient clipping by the global norm, the weights' EMA, swap and LARS on the GPU (optim_extra_cuda.h) against the
// CPU reference functions (grad_global_norm_cpu / grad_clip_factor, ema_update_cpu, lars_step_cpu, optim_step_cpu):
// random inputs, odd sizes and misaligned views, a LARS table of many small tensors and a few large ones, AMP
// unscaling, skipped steps, and capture in a CUDA graph.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/ops/optim/optim.h"
#include "runtime/ops/optim/optim_cuda.h"
#include "runtime/ops/optim/optim_extra_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

DevBuf hyper_to_device(const OptHyper& h) {
  DevBuf b(sizeof(OptHyper));
  copy_sync(b.get(), &h, sizeof h, cudaMemcpyHostToDevice);
  return b;
}

OptHyper hyper_from_device(const DevBuf& b) {
  OptHyper h;
  copy_sync(&h, b.get(), sizeof h, cudaMemcpyDeviceToHost);
  return h;
}

GradClipState clip_from_device(const DevBuf& b) {
  GradClipState c;
  copy_sync(&c, b.get(), sizeof c, cudaMemcpyDeviceToHost);
  return c;
}

// Distance in float ulps (of the larger magnitude) between two finite floats.
double ulps(float a, float b) {
  const float m = std::max(std::fabs(a), std::fabs(b));
  const float u = std::nextafter(m, INFINITY) - m;
  return std::fabs(static_cast<double>(a) - b) / u;
}

std::vector<float> scaled(const std::vector<float>& v, float s) {
  std::vector<float> r(v);
  for (float& x : r) x *= s;
  return r;
}

}  // namespace

// Tolerance: the norm is a sum of n exact double squares; any order of a recursive double sum is within
// (n - 1) * 2^-53 of the exact sum relative to it, so the GPU's and the CPU's sums differ by at most twice that
// and the norms (square roots) by about as much: bound (n + 1) * 2^-53. The factor is grad_clip_factor's float
// expression on float(norm); the two norms can fall either side of a float rounding boundary, which moves the
// factor by at most 2 ulp (one for the rounded norm, one for the division's result).
TEST_CASE("the global gradient norm and clip factor match grad_global_norm_cpu and grad_clip_factor",
          "[kernel][optim][clip]") {
  CudaContext ctx = make_context();
  for (const double loss_scale : {1.0, 1024.0}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{4}, int64_t{1001}, int64_t{4097},
                      int64_t{1000003}, int64_t{3000017}}) {
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        const std::string tag = "n=" + std::to_string(n) + " offset=" + std::to_string(off) +
                                " loss_scale=" + std::to_string(loss_scale);
        INFO(tag);
        Rng rng(71 + n);
        const std::vector<float> g = rng.normal_vec(n + off, 0.0f, 0.05f);  // unscaled gradients
        const double ref = grad_global_norm_cpu(g.data() + off, n);
        DevBuf dg = to_device(scaled(g, static_cast<float>(loss_scale)));  // exact: a power of two
        DevBuf ls = to_device(std::vector<float>{static_cast<float>(loss_scale)});
        DevBuf h = hyper_to_device(opt_hyper_sgd(0.1, 0.0, 0.0, 0.0, false));
        DevBuf ws(grad_global_norm_workspace_bytes(n));
        DevBuf clip(sizeof(GradClipState));
        // max_norm below the norm (factor < 1) and above it (factor 1)
        for (const double max_norm : {0.37 * ref + 1e-3, 2.0 * ref + 1.0}) {
          REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, h.as<OptHyper>(), nullptr, ls.as<float>(), nullptr, 0));
          REQUIRE_OK(grad_global_norm_cuda(ctx.stream, h.as<OptHyper>(), dg.as<float>() + off, n, max_norm,
                                           ws.get(), clip.as<GradClipState>()));
          sync_ok(ctx);
          const GradClipState c = clip_from_device(clip);
          const float fref = grad_clip_factor(ref, max_norm);
          INFO("max_norm " << max_norm << " norm gpu " << c.norm << " cpu " << ref << " factor gpu " << c.factor
                           << " cpu " << fref);
          CHECK(std::fabs(c.norm - ref) <= static_cast<double>(n + 1) * std::ldexp(1.0, -53) * ref);
          CHECK(ulps(c.factor, fref) <= 2.0);
          if (max_norm > ref) CHECK(c.factor == 1.0f);
          // the same launch again: bitwise the same norm (fixed reduction order)
          REQUIRE_OK(grad_global_norm_cuda(ctx.stream, h.as<OptHyper>(), dg.as<float>() + off, n, max_norm,
                                           ws.get(), clip.as<GradClipState>()));
          sync_ok(ctx);
          const GradClipState c2 = clip_from_device(clip);
          CHECK(std::memcmp(&c2.norm, &c.norm, sizeof c.norm) == 0);
        }
      }
    }
  }
}

// The fold is exact because the update kernels round g_raw * inv_scale on its own before using it (see
// optim_extra_cuda.h); this checks that claim against the optimizer kernel as it is now, bitwise, for every
// optimizer, with and without a loss scale.
TEST_CASE("folding the clip factor into inv_scale equals scaling the gradients in place", "[kernel][optim][clip]") {
  CudaContext ctx = make_context();
  struct Case {
    const char* name;
    CudaOptimizer kind;
    OptHyper h;
  };
  const Case cases[] = {
      {"adamw", CudaOptimizer::AdamW, opt_hyper_adam(1e-3, 0.9, 0.999, 1e-8, 0.05)},
      {"adam", CudaOptimizer::Adam, opt_hyper_adam(1e-3, 0.9, 0.999, 1e-8, 0.01)},
      {"sgd momentum", CudaOptimizer::Sgd, opt_hyper_sgd(0.05, 0.9, 0.1, 5e-4, false)},
      {"sgd nesterov", CudaOptimizer::Sgd, opt_hyper_sgd(0.05, 0.9, 0.0, 5e-4, true)},
      {"sgd plain", CudaOptimizer::Sgd, opt_hyper_sgd(0.1, 0.0, 0.0, 5e-4, false)},
  };
  const int64_t n = 100003;
  for (const Case& c : cases) {
    for (const double loss_scale : {1.0, 1024.0}) {
      const std::string tag = std::string(c.name) + " loss_scale=" + std::to_string(loss_scale);
      INFO(tag);
      Rng rng(72);
      const std::vector<float> p0 = rng.normal_vec(n, 0.0f, 1.0f);
      DevBuf ls = to_device(std::vector<float>{static_cast<float>(loss_scale)});
      std::vector<std::vector<float>> results;
      for (int path = 0; path < 2; ++path) {  // 0: fold into inv_scale, 1: scale the gradients in place
        DevBuf p = to_device(p0), g(n * 4), s1 = to_device(std::vector<float>(n, 0.0f)),
               s2 = to_device(std::vector<float>(n, 0.0f));
        DevBuf h = hyper_to_device(c.h), ws(grad_global_norm_workspace_bytes(n)), clip(sizeof(GradClipState));
        OptHyper* hd = h.as<OptHyper>();
        Rng grng(73);
        for (int step = 0; step < 3; ++step) {
          upload(g.get(), scaled(grng.normal_vec(n, 0.0f, 0.5f), static_cast<float>(loss_scale)));
          REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, hd, nullptr, ls.as<float>(), nullptr, 0));
          REQUIRE_OK(grad_global_norm_cuda(ctx.stream, hd, g.as<float>(), n, 1.0, ws.get(),
                                           clip.as<GradClipState>()));
          if (path == 0) REQUIRE_OK(grad_clip_fold_cuda(ctx.stream, hd, clip.as<GradClipState>()));
          if (path == 1) REQUIRE_OK(grad_clip_scale_cuda(ctx.stream, hd, clip.as<GradClipState>(), g.as<float>(), n));
          REQUIRE_OK(optimizer_step_cuda(ctx.stream, c.kind, hd, p.as<float>(), g.as<float>(), s1.as<float>(),
                                         s2.as<float>(), n, n / 2));
        }
        sync_ok(ctx);
        const GradClipState cl = clip_from_device(clip);
        CHECK(cl.factor < 1.0f);  // max_norm 1 against a norm of ~158: the clip is active
        std::vector<float> all = from_device<float>(p.get(), n);
        for (const DevBuf* s : {&s1, &s2}) {
          const std::vector<float> v = from_device<float>(s->get(), n);
          all.insert(all.end(), v.begin(), v.end());
        }
        results.push_back(all);
      }
      CHECK_RESULT(compare_bitwise("fold vs in-place scale, p|s1|s2 " + tag, results[0].data(), results[1].data(),
                                   results[0].size() * 4, 4));
    }
  }
}

// Tolerance: the CPU applies the clipped update with its own float formulas (optim_cpu.cpp), which the GPU kernel
// evaluates with FMAs and, for Adam's moments, as b1*m + (1-b1)*g instead of m + (1-b1)*(g - m): each result may
// differ by a few f32 roundings of the terms that form it. Each step starts both sides from the GPU's state, so
// differences do not compound; the bound is 1e-6 (about 16 ulp) times the sum of those terms' magnitudes.
TEST_CASE("a clipped optimizer step on the GPU matches the CPU's clip then update within 1e-6 relative",
          "[kernel][optim][clip]") {
  CudaContext ctx = make_context();
  struct Case {
    const char* name;
    OptimizerKind kind;
    double lr, wd, momentum;
  };
  for (const Case& c : {Case{"sgd momentum", OptimizerKind::Sgd, 0.05, 5e-4, 0.9},
                        Case{"adamw", OptimizerKind::AdamW, 1e-3, 0.05, 0.0}}) {
    for (int64_t n : {int64_t{7}, int64_t{1000003}}) {
      const std::string tag = std::string(c.name) + " n=" + std::to_string(n);
      INFO(tag);
      OptimizerSpec spec;
      spec.kind = c.kind;
      spec.weight_decay = c.wd;
      spec.momentum = c.momentum;
      const bool adam = c.kind != OptimizerKind::Sgd;
      const OptHyper h0 = adam ? opt_hyper_adam(c.lr, spec.beta1, spec.beta2, spec.eps, c.wd)
                               : opt_hyper_sgd(c.lr, c.momentum, spec.dampening, c.wd, spec.nesterov);
      Rng rng(74 + n);
      const int64_t split = n / 2;
      DevBuf p = to_device(rng.normal_vec(n, 0.0f, 1.0f)), g(n * 4), s1 = to_device(std::vector<float>(n, 0.0f)),
             s2 = to_device(std::vector<float>(n, 0.0f));
      DevBuf h = hyper_to_device(h0), ws(grad_global_norm_workspace_bytes(n)), clip(sizeof(GradClipState));
      OptHyper* hd = h.as<OptHyper>();
      for (int step = 1; step <= 3; ++step) {
        INFO("step " << step);
        std::vector<float> gh = rng.normal_vec(n, 0.0f, 0.5f);
        std::vector<float> pc = from_device<float>(p.get(), n), m = from_device<float>(s1.get(), n),
                           v = from_device<float>(s2.get(), n);
        const std::vector<float> p_in = pc, m_in = m, v_in = v;
        const double max_norm = 0.25 * std::sqrt(static_cast<double>(n));  // below the norm (~0.5 sqrt(n))
        // CPU: clip_grad_norm_ then the update, as CpuBackend::optimizer_step
        const float f = grad_clip_factor(grad_global_norm_cpu(gh.data(), n), max_norm);
        std::vector<float> gc(gh);
        for (float& x : gc) x *= f;
        const OptimScalars s = optim_scalars(spec, c.lr, step);
        optim_step_cpu(s, true, pc.data(), gc.data(), m.data(), adam ? v.data() : nullptr, split, nullptr);
        optim_step_cpu(s, false, pc.data() + split, gc.data() + split, m.data() + split,
                       adam ? v.data() + split : nullptr, n - split, nullptr);
        // GPU
        upload(g.get(), gh);
        REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, hd, nullptr, nullptr, nullptr, 0));
        REQUIRE_OK(grad_global_norm_cuda(ctx.stream, hd, g.as<float>(), n, max_norm, ws.get(),
                                         clip.as<GradClipState>()));
        REQUIRE_OK(grad_clip_fold_cuda(ctx.stream, hd, clip.as<GradClipState>()));
        REQUIRE_OK(optimizer_step_cuda(ctx.stream, adam ? CudaOptimizer::AdamW : CudaOptimizer::Sgd, hd,
                                       p.as<float>(), g.as<float>(), s1.as<float>(), s2.as<float>(), n, split));
        sync_ok(ctx);
        CHECK(ulps(clip_from_device(clip).factor, f) <= 2.0);
        std::vector<double> bp(n), bm(n), bv(n);
        for (int64_t i = 0; i < n; ++i) {
          const double gi = std::fabs(gc[i]) + c.wd * std::fabs(p_in[i]);
          // plus the update's own rounding: Adam's m / (sqrt(v) + eps) differs in its last bits between the CPU's
          // lerp form and the kernel's b1 m + (1 - b1) g (H200 run 22: 5.5e-6 of a 6e-6 update at p ~ 0)
          bp[i] = 1e-6 * (std::fabs(p_in[i]) + std::fabs(pc[i])) + 2e-5 * std::fabs(double(p_in[i]) - pc[i]) + 1e-30;
          bm[i] = 1e-6 * (std::fabs(m_in[i]) + gi + std::fabs(m[i])) + 1e-30;
          bv[i] = 1e-6 * (std::fabs(v_in[i]) + gi * gi + std::fabs(v[i])) + 1e-30;
        }
        CHECK_RESULT(compare_close("clipped p " + tag, to_double(from_device<float>(p.get(), n)), to_double(pc), bp));
        CHECK_RESULT(compare_close("clipped m/buf " + tag, to_double(from_device<float>(s1.get(), n)), to_double(m),
                                   bm));
        if (adam) {
          CHECK_RESULT(compare_close("clipped v " + tag, to_double(from_device<float>(s2.get(), n)), to_double(v),
                                     bv));
        }
      }
    }
  }
}

// Tolerance: none. ema_update_cpu and the kernel evaluate the same float expression with the same roundings (the
// kernel's __f*_rn operations are never contracted into FMAs; the CPU build has no FMA).
TEST_CASE("the EMA update copies on the first step, then lerps, bitwise as ema_update_cpu", "[kernel][optim][ema]") {
  CudaContext ctx = make_context();
  for (const double decay : {0.999, 0.75}) {
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{4096}, int64_t{1000003}}) {
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        const std::string tag = "decay=" + std::to_string(decay) + " n=" + std::to_string(n) +
                                " offset=" + std::to_string(off);
        INFO(tag);
        Rng rng(75 + n);
        std::vector<float> ema_ref = rng.normal_vec(n, 0.0f, 1.0f);  // stale contents: the first step overwrites
        DevBuf w(4 * (n + off)), ema(4 * (n + off));
        upload(ema.as<float>() + off, ema_ref);
        DevBuf h = hyper_to_device(opt_hyper_sgd(0.1, 0.0, 0.0, 0.0, false));
        for (int step = 1; step <= 4; ++step) {
          const std::vector<float> wh = rng.normal_vec(n, 0.0f, 1.0f);
          upload(w.as<float>() + off, wh);
          REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, h.as<OptHyper>(), nullptr, nullptr, nullptr, 0));
          REQUIRE_OK(ema_update_cuda(ctx.stream, h.as<OptHyper>(), w.as<float>() + off, ema.as<float>() + off, n,
                                     decay));
          ema_update_cpu(decay, step == 1, wh.data(), ema_ref.data(), n);
          sync_ok(ctx);
          const std::vector<float> got = from_device<float>(ema.as<float>() + off, n);
          CHECK_RESULT(compare_bitwise("ema step " + std::to_string(step) + " " + tag, got.data(), ema_ref.data(),
                                       n * 4, 4));
        }
      }
    }
  }
}

TEST_CASE("swap exchanges two ranges and twice is the identity", "[kernel][optim][ema]") {
  CudaContext ctx = make_context();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
    for (int64_t off : {int64_t{0}, int64_t{1}}) {
      INFO("n=" << n << " offset=" << off);
      Rng rng(76 + n);
      const std::vector<float> a0 = rng.normal_vec(n + off, 0.0f, 1.0f), b0 = rng.normal_vec(n + off, 0.0f, 1.0f);
      DevBuf a = to_device(a0), b = to_device(b0);
      REQUIRE_OK(swap_cuda(ctx.stream, a.as<float>() + off, b.as<float>() + off, n));
      sync_ok(ctx);
      std::vector<float> wa(a0.begin(), a0.begin() + off), wb(b0.begin(), b0.begin() + off);
      wa.insert(wa.end(), b0.begin() + off, b0.end());  // the element before the view stays
      wb.insert(wb.end(), a0.begin() + off, a0.end());
      CHECK_RESULT(compare_bitwise("swap a", from_device<float>(a.get(), n + off).data(), wa.data(), (n + off) * 4, 4));
      CHECK_RESULT(compare_bitwise("swap b", from_device<float>(b.get(), n + off).data(), wb.data(), (n + off) * 4, 4));
      REQUIRE_OK(swap_cuda(ctx.stream, a.as<float>() + off, b.as<float>() + off, n));
      sync_ok(ctx);
      CHECK_RESULT(compare_bitwise("swap twice", from_device<float>(a.get(), n + off).data(), a0.data(), (n + off) * 4, 4));
    }
  }
}

namespace {

// A weight layout as the memory planner makes it: tensors at 64-float (256-byte) aligned offsets with padding
// between them; a few tensors larger than a chunk (one of exactly a chunk, one a chunk + 1), odd sizes, 200 small
// ones (biases, norm scales), every fourth without the trust ratio (adapt 0), one all-zero tensor (|p| = 0:
// ratio 1) and one with zero gradients (|g| = 0: ratio 1).
struct LarsLayout {
  std::vector<LarsTensor> tensors;
  int64_t total = 0;
  std::vector<float> p, g_sd;  // initial weights (padding 0); per tensor the gradients' standard deviation
};

constexpr int kZeroP = 4, kZeroG = 8;

LarsLayout lars_layout(Rng& rng) {
  std::vector<int64_t> sizes = {1, 3, 64, 257, 1000, kLarsChunkElems, kLarsChunkElems + 1, 100003, 70001, 9};
  for (int k = 0; k < 200; ++k) sizes.push_back(1 + rng.below(300));
  LarsLayout l;
  for (size_t k = 0; k < sizes.size(); ++k) {
    LarsTensor t;
    t.offset = l.total;
    t.n = sizes[k];
    t.adapt = k % 4 != 3 ? 1 : 0;
    l.tensors.push_back(t);
    l.total += (sizes[k] + 63) / 64 * 64;
    // gradients 1e-3 .. 2e-2 relative to weights ~1: the ratio / lr of trust clipping lands both sides of 1
    l.g_sd.push_back(1e-3f * static_cast<float>(1 + k % 20));
  }
  l.p.assign(static_cast<size_t>(l.total), 0.0f);
  for (size_t k = 0; k < l.tensors.size(); ++k) {
    if (k == kZeroP) continue;
    const std::vector<float> v = rng.normal_vec(static_cast<size_t>(l.tensors[k].n), 0.0f, 1.0f);
    std::copy(v.begin(), v.end(), l.p.begin() + l.tensors[k].offset);
  }
  return l;
}

std::vector<float> lars_grads(const LarsLayout& l, Rng& rng) {
  std::vector<float> g(static_cast<size_t>(l.total), 0.0f);
  for (size_t k = 0; k < l.tensors.size(); ++k) {
    if (k == kZeroG) continue;
    const std::vector<float> v = rng.normal_vec(static_cast<size_t>(l.tensors[k].n), 0.0f, l.g_sd[k]);
    std::copy(v.begin(), v.end(), g.begin() + l.tensors[k].offset);
  }
  return g;
}

// Device copies of the tables and the workspace.
struct LarsOnDevice {
  DevBuf tensors, chunks, norms;
  LarsDevice view;
};

LarsOnDevice lars_to_device(const std::vector<LarsTensor>& tensors) {
  Result<LarsTables> t = lars_tables(tensors);
  REQUIRE_OK(t);
  LarsOnDevice d;
  d.tensors = to_device(t->tensors);
  d.chunks = to_device(t->chunks);
  const int32_t count = static_cast<int32_t>(t->chunks.size());
  d.norms = DevBuf(lars_workspace_bytes(count) + 16);
  d.view.tensors = d.tensors.as<LarsTensor>();
  d.view.chunks = d.chunks.as<LarsChunk>();
  d.view.chunk_count = count;
  d.view.norms = d.norms.as<double>();
  return d;
}

struct LarsCase {
  const char* name;
  double lr, wd, momentum, dampening;
  bool nesterov, trust_clip;
  double loss_scale;
  bool two_groups;  // tensors from kGroupSplit on: a second group with its own lr and weight decay
};
constexpr size_t kGroupSplit = 100;
constexpr double kGroup1Lr = 0.03, kGroup1Wd = 5e-4;

OptHyper lars_hyper(const LarsCase& c, const LarsLayout& l) {
  OptHyper h = opt_hyper_sgd(c.lr, c.momentum, c.dampening, c.wd, c.nesterov);
  h.eps = 1e-8;
  if (c.two_groups) {
    h.groups = 2;
    h.group[0].end = l.tensors[kGroupSplit].offset;
    h.group[1].lr = kGroup1Lr;
    h.group[1].weight_decay = kGroup1Wd;
  }
  return h;
}

}  // namespace

// Tolerance: lars_step_cpu's float operations are the kernel's, in the same order and rounding (no FMAs); only the
// norms are summed in another order, so float(|p|) or float(|g|) may round to the neighbouring float, moving the
// trust ratio by a few ulp. Each step starts both sides from the GPU's state (no compounding), and each element's
// bound is 1e-6 (about 16 ulp) times the magnitudes of the terms that form it (host estimate of the ratio); the
// padding between tensors must stay bitwise untouched.
TEST_CASE("lars_step_cuda follows lars_step_cpu tensor by tensor over a layout of many tensors",
          "[kernel][optim][lars]") {
  CudaContext ctx = make_context();
  const LarsCase cases[] = {
      {"momentum", 0.1, 1e-4, 0.9, 0.0, false, false, 1.0, false},
      {"nesterov", 0.1, 5e-4, 0.9, 0.0, true, false, 1.0, false},
      {"dampening", 0.05, 1e-4, 0.9, 0.1, false, false, 1.0, false},
      {"no momentum", 0.1, 1e-4, 0.0, 0.0, false, false, 1.0, false},
      {"trust clip", 0.2, 1e-4, 0.9, 0.0, false, true, 1.0, false},
      {"no weight decay (plain sgd)", 0.1, 0.0, 0.9, 0.0, false, false, 1.0, false},
      {"amp loss scale 1024", 0.1, 1e-4, 0.9, 0.0, false, false, 1024.0, false},
      {"two parameter groups", 0.1, 1e-4, 0.9, 0.0, false, true, 1.0, true},
  };
  const double coef = 0.002;
  for (const LarsCase& c : cases) {
    INFO(c.name);
    Rng rng(81);
    const LarsLayout l = lars_layout(rng);
    LarsOnDevice tables = lars_to_device(l.tensors);
    const int64_t total = l.total;
    const bool has_buf = c.momentum != 0.0;
    DevBuf p = to_device(l.p), g(total * 4), buf = to_device(std::vector<float>(total, 0.0f));
    DevBuf h = hyper_to_device(lars_hyper(c, l)), ls = to_device(std::vector<float>{static_cast<float>(c.loss_scale)});
    LarsConsts consts;
    consts.trust_coefficient = coef;
    consts.trust_clip = c.trust_clip;
    OptimizerSpec spec;
    spec.kind = OptimizerKind::Lars;
    spec.momentum = c.momentum;
    spec.dampening = c.dampening;
    spec.nesterov = c.nesterov;
    spec.eps = 1e-8;
    spec.trust_coefficient = coef;
    spec.trust_clip = c.trust_clip;
    for (int step = 1; step <= 3; ++step) {
      INFO("step " << step);
      const std::vector<float> gh = lars_grads(l, rng);
      const std::vector<float> p_in = from_device<float>(p.get(), total), b_in = from_device<float>(buf.get(), total);
      std::vector<float> p_ref = p_in, b_ref = b_in;
      std::vector<double> bp(total, 0.0), bb(total, 0.0);  // padding: bound 0, bitwise untouched
      for (size_t k = 0; k < l.tensors.size(); ++k) {
        const LarsTensor& t = l.tensors[k];
        const bool g1 = c.two_groups && k >= kGroupSplit;
        const double lr = g1 ? kGroup1Lr : c.lr, wd = g1 ? kGroup1Wd : c.wd;
        OptimScalars s = optim_scalars(spec, lr, step);
        s.weight_decay = wd;
        lars_step_cpu(s, t.adapt != 0, p_ref.data() + t.offset, gh.data() + t.offset,
                      has_buf ? b_ref.data() + t.offset : nullptr, t.n);
        // magnitudes for the bounds
        const bool adapted = t.adapt != 0 && wd != 0.0;
        double pn = 0, gn = 0;
        for (int64_t i = t.offset; i < t.offset + t.n; ++i) {
          pn += static_cast<double>(p_in[i]) * p_in[i];
          gn += static_cast<double>(gh[i]) * gh[i];
        }
        pn = std::sqrt(pn);
        gn = std::sqrt(gn);
        double r = 1.0;
        if (adapted) {
          if (pn > 0 && gn > 0) r = coef * pn / (gn + wd * pn + 1e-8);
          if (c.trust_clip) r = std::min(r / lr, 1.0);
        }
        for (int64_t i = t.offset; i < t.offset + t.n; ++i) {
          const double d = adapted ? (std::fabs(gh[i]) + wd * std::fabs(p_in[i])) * r : std::fabs(gh[i]);
          const double b = step == 1 ? d : c.momentum * std::fabs(b_in[i]) + (1 - c.dampening) * d;
          const double u = !has_buf ? d : c.nesterov ? d + c.momentum * b : b;
          bp[i] = 1e-6 * (std::fabs(p_in[i]) + lr * u + std::fabs(p_ref[i])) + 1e-30;
          bb[i] = has_buf ? 1e-6 * (c.momentum * std::fabs(b_in[i]) + d + std::fabs(b_ref[i])) + 1e-30 : 0.0;
        }
      }
      upload(g.get(), scaled(gh, static_cast<float>(c.loss_scale)));
      REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, h.as<OptHyper>(), nullptr, ls.as<float>(), nullptr, 0));
      REQUIRE_OK(lars_step_cuda(ctx.stream, h.as<OptHyper>(), tables.view, consts, p.as<float>(), g.as<float>(),
                                has_buf ? buf.as<float>() : nullptr));
      sync_ok(ctx);
      CHECK_RESULT(compare_close(std::string("lars p ") + c.name, to_double(from_device<float>(p.get(), total)),
                                 to_double(p_ref), bp));
      if (has_buf) {
        CHECK_RESULT(compare_close(std::string("lars buf ") + c.name, to_double(from_device<float>(buf.get(), total)),
                                   to_double(b_ref), bb));
      }
    }
  }
}

TEST_CASE("lars_tables splits tensors into chunks in layout order and refuses bad entries", "[kernel][optim][lars]") {
  std::vector<LarsTensor> t(3);
  t[0].offset = 0;
  t[0].n = 10;
  t[1].offset = 64;
  t[1].n = 0;
  t[2].offset = 128;
  t[2].n = 25;
  Result<LarsTables> r = lars_tables(t, 8);
  REQUIRE_OK(r);
  REQUIRE(r->chunks.size() == 2 + 4);
  CHECK(r->tensors[0].first_chunk == 0);
  CHECK(r->tensors[0].chunks == 2);
  CHECK(r->tensors[1].chunks == 0);
  CHECK(r->tensors[2].first_chunk == 2);
  CHECK(r->tensors[2].chunks == 4);
  CHECK(r->chunks[1].begin == 8);
  CHECK(r->chunks[1].end == 10);
  CHECK(r->chunks[5].begin == 152);
  CHECK(r->chunks[5].end == 153);
  CHECK(r->chunks[5].tensor == 2);
  t[1].n = -1;
  CHECK(!lars_tables(t, 8).ok());
}

// found_inf set: every kernel here is a no-op, whatever ran before in the step.
TEST_CASE("a skipped step leaves the clip state, inv_scale, gradients, weights, momentum and EMA untouched",
          "[kernel][optim][clip][ema][lars]") {
  CudaContext ctx = make_context();
  Rng rng(82);
  const LarsLayout l = lars_layout(rng);
  const int64_t n = l.total;
  LarsOnDevice tables = lars_to_device(l.tensors);
  DevBuf p = to_device(l.p), g = to_device(lars_grads(l, rng)), buf = to_device(std::vector<float>(n, 0.0f)),
         ema = to_device(std::vector<float>(n, 0.0f)), flag = to_device(std::vector<int32_t>{0}),
         ls = to_device(std::vector<float>{256.0f}), ws(grad_global_norm_workspace_bytes(n)),
         clip(sizeof(GradClipState));
  DevBuf h = hyper_to_device(opt_hyper_sgd(0.1, 0.9, 0.0, 1e-4, false));
  OptHyper* hd = h.as<OptHyper>();
  auto step = [&] {
    REQUIRE_OK(opt_hyper_advance_cuda(ctx.stream, hd, flag.as<int32_t>(), ls.as<float>(), nullptr, 0));
    REQUIRE_OK(grad_global_norm_cuda(ctx.stream, hd, g.as<float>(), n, 1e-3, ws.get(), clip.as<GradClipState>()));
    REQUIRE_OK(grad_clip_fold_cuda(ctx.stream, hd, clip.as<GradClipState>()));
    REQUIRE_OK(lars_step_cuda(ctx.stream, hd, tables.view, LarsConsts{}, p.as<float>(), g.as<float>(), buf.as<float>()));
    REQUIRE_OK(ema_update_cuda(ctx.stream, hd, p.as<float>(), ema.as<float>(), n, 0.99));
    REQUIRE_OK(grad_clip_scale_cuda(ctx.stream, hd, clip.as<GradClipState>(), g.as<float>(), n));
  };
  step();  // a clean step; the in-place scale runs in it too, so that the skipped step checks it leaves g alone
  sync_ok(ctx);
  auto snapshot = [&] {
    std::vector<float> all;
    for (const DevBuf* b : {&p, &g, &buf, &ema}) {
      const std::vector<float> v = from_device<float>(b->get(), n);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const std::vector<float> before = snapshot();
  const GradClipState clip_before = clip_from_device(clip);
  CHECK(clip_before.factor < 1.0f);
  upload(flag.get(), std::vector<int32_t>{1});
  step();
  sync_ok(ctx);
  const OptHyper hh = hyper_from_device(h);
  CHECK(hh.skip == 1);
  CHECK(hh.step == 1);
  CHECK(hh.inv_scale == 1.0f / 256.0f);  // as the advance kernel wrote it: not multiplied by the factor
  const GradClipState clip_after = clip_from_device(clip);
  CHECK(std::memcmp(&clip_after, &clip_before, sizeof clip_after) == 0);
  const std::vector<float> after = snapshot();
  CHECK_RESULT(compare_bitwise("skipped step p|g|buf|ema", after.data(), before.data(), after.size() * 4, 4));
}

TEST_CASE("clip, lars and the EMA captured once in a CUDA graph replay bitwise as eager launches",
          "[kernel][optim][graph]") {
  CudaContext ctx = make_context();
  Rng rng(83);
  const LarsLayout l = lars_layout(rng);
  const int64_t n = l.total;
  const std::vector<float> gh = scaled(lars_grads(l, rng), 128.0f);
  struct Run {
    DevBuf p, g, buf, ema, ls, ws, clip, h;
  };
  std::vector<std::vector<float>> out;
  std::vector<OptHyper> hyper;
  std::vector<GradClipState> clips;
  LarsConsts consts;
  consts.trust_clip = true;
  for (int graph = 0; graph < 2; ++graph) {
    LarsOnDevice tables = lars_to_device(l.tensors);
    Run r{to_device(l.p), to_device(gh), to_device(std::vector<float>(n, 0.0f)), to_device(std::vector<float>(n, 0.0f)),
          to_device(std::vector<float>{128.0f}), DevBuf(grad_global_norm_workspace_bytes(n)),
          DevBuf(sizeof(GradClipState)), hyper_to_device(opt_hyper_sgd(0.5, 0.9, 0.0, 1e-4, true))};
    OptHyper* hd = r.h.as<OptHyper>();
    auto enqueue = [&]() -> Status {
      for (Status st : {opt_hyper_advance_cuda(ctx.stream, hd, nullptr, r.ls.as<float>(), nullptr, 0),
                        grad_global_norm_cuda(ctx.stream, hd, r.g.as<float>(), n, 1.0, r.ws.get(), r.clip.as<GradClipState>()),
                        grad_clip_fold_cuda(ctx.stream, hd, r.clip.as<GradClipState>()),
                        lars_step_cuda(ctx.stream, hd, tables.view, consts, r.p.as<float>(), r.g.as<float>(), r.buf.as<float>()),
                        ema_update_cuda(ctx.stream, hd, r.p.as<float>(), r.ema.as<float>(), n, 0.9)}) {
        if (!st.ok()) return st;
      }
      return ok_status();
    };
    if (graph) {
      cudaGraphExec_t exec = capture_graph(ctx, enqueue);
      for (int s = 0; s < 3; ++s) REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
      sync_ok(ctx);
      REQUIRE_CUDA(cudaGraphExecDestroy(exec));
    } else {
      for (int s = 0; s < 3; ++s) REQUIRE_OK(enqueue());
      sync_ok(ctx);
    }
    std::vector<float> all;
    for (const DevBuf* b : {&r.p, &r.buf, &r.ema}) {
      const std::vector<float> v = from_device<float>(b->get(), n);
      all.insert(all.end(), v.begin(), v.end());
    }
    out.push_back(all);
    hyper.push_back(hyper_from_device(r.h));
    clips.push_back(clip_from_device(r.clip));
  }
  CHECK(hyper[1].step == 3);
  CHECK(hyper[0].step == 3);
  CHECK(hyper[1].inv_scale == hyper[0].inv_scale);
  CHECK(clips[0].factor < 1.0f);
  CHECK(std::memcmp(&clips[0], &clips[1], sizeof clips[0]) == 0);
  CHECK_RESULT(compare_bitwise("graph vs eager p|buf|ema", out[1].data(), out[0].data(), out[0].size() * 4, 4));
}
