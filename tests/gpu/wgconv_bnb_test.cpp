// The ring px kernel's batch-norm backward epilogue (runtime/ops/conv2d/wgconv.h: WgConvBnBwd) on a data gradient,
// as train.conv_bn_backward fused runs it for a data gradient on wgconv: the stored g is, bitwise, the plain
// kernel's output masked by the ReLU recomputed from the batch norm's input bx (bn_elem.cuh's relu_kept emulated on
// the host: fmaf(bx - mean, gamma * invstd, beta) rounds to a positive value of the io type), and dbeta, dgamma are
// the float64 sums of the masked g and of g * (bx - mean) (times invstd) within 1e-5 of the sums of magnitudes; a
// rerun bitwise (deterministic), a one-CTA run's sums close (another grid, another order) and its g bitwise; nothing
// written past g; what the launch refuses. f16 and bf16, a geometry whose last tile runs past the plane and whose g
// has 128 channels (two output-channel tiles, so the second tile's channel offset), and a three-row wide one.
// Inputs on the 1/64 grid as the other wgconv tests'; the batch-norm parameters random per channel.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/ops/conv2d/wgconv.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/stem_conv_ref.h"
#include "tests/support/conv_geom.h"

using namespace trctl;
using trctl::testing::conv_geom;
using namespace trctl::gputest;

namespace {

constexpr size_t kTail = 256;  // bytes after g that must stay poisoned

// The plan of the data gradient of forward geometry g (K = 64: the ring px kernel's C), or a visible skip off compute
// capability 9.0.
bool dgrad_plan(const Conv2dGeom& g, GpuDType t, WgConvPlan* out) {
  const Conv2dGeom gd = wgconv_dgrad_geom(g);
  REQUIRE(wgconv_tile_fits(gd, WgConvTile::RingPx256N64));  // a case the kernel takes (else the test is wrong)
  Result<WgConvPlan> p = wgconv_plan(gd, t, WgConvTile::RingPx256N64);
  if (!p.ok() && p.errors().front().code == ErrCode::NotSupported && wgconv_eligible(gd, nullptr)) {
    WARN("skipped: " << p.error_text());
    return false;
  }
  if (!p.ok()) FAIL(p.error_text());
  *out = p.value();
  return true;
}

// Whether the fused ReLU kept element x of channel ch: the apply pass's value rounded to t is positive.
bool kept(GpuDType t, float x, float mean, float gamma, float invstd, float beta) {
  return round_to(t, std::fmaf(x - mean, gamma * invstd, beta)) > 0.0f;
}

}  // namespace

TEST_CASE("wgconv ring px batch-norm backward epilogue: g masked by the recomputed ReLU, its sums, deterministic",
          "[kernel][wgconv][conv2d][fuseddgrad]") {
  CudaContext ctx = make_context();
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"9x11 N=2 C=128 K=64", conv_geom(2, 9, 11, 128, 64, 3, 3, 1, 1, 1, 1)},  // two channel tiles of g
      {"3x224 N=2 C=64 K=64", conv_geom(2, 3, 224, 64, 64, 3, 3, 1, 1, 1, 1)}};
  uint64_t seed = 9900;
  for (const auto& [name, g] : cases)
    for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
      const std::string what = std::string("wgconv bn backward ") + name + " " + gpu_dtype_name(t);
      INFO(what << ": " << conv2d_geom_str(g));
      WgConvPlan plan;
      if (!dgrad_plan(g, t, &plan)) return;
      const StemInputs in = stem_inputs(g, true, ++seed);              // dy (N, H, W, K), w (K, 3, 3, C)
      const std::vector<float> bx = stem_inputs(g, true, seed + 500).x;  // the batch norm's input (N, H, W, C)
      Rng rng(seed + 900);
      std::vector<float> par(static_cast<size_t>(4 * g.c));  // gamma, beta, mean, invstd (C) each
      for (int64_t c = 0; c < g.c; ++c) {
        par[c] = rng.uniform(0.5f, 1.5f);
        par[g.c + c] = rng.uniform(-0.5f, 0.5f);
        par[2 * g.c + c] = rng.uniform(-0.3f, 0.3f);
        par[3 * g.c + c] = rng.uniform(0.8f, 1.2f);
      }
      const DevBuf dy = to_device_as(t, in.dy), w = to_device_as(t, in.w), bxd = to_device_as(t, bx),
                   pd = to_device(par);
      const size_t n = in.x.size(), g_bytes = n * gpu_dtype_size(t);
      DevBuf wf(in.w.size() * gpu_dtype_size(t)), plain(g_bytes), masked(g_bytes + kTail);
      DevBuf sums(static_cast<size_t>(2 * g.c) * sizeof(float)), ws(wgconv_stats_workspace_bytes(plan));
      REQUIRE_OK(wgconv_flip_filters_cuda(ctx.stream, t, w.get(), g.k, g.c, wf.get()));
      REQUIRE_OK(wgconv_fwd_cuda(ctx.stream, plan, dy.get(), wf.get(), plain.get()));
      const float* pf = static_cast<const float*>(pd.get());
      WgConvBnBwd bb;
      bb.x = bxd.get();
      bb.gamma = pf, bb.beta = pf + g.c, bb.mean = pf + 2 * g.c, bb.invstd = pf + 3 * g.c;
      bb.dgamma = static_cast<float*>(sums.get()), bb.dbeta = bb.dgamma + g.c;
      bb.ws = ws.get(), bb.ws_bytes = ws.bytes();
      auto run_bb = [&](const WgConvPlan& p) {
        poison(masked);
        poison(sums);
        REQUIRE_OK(wgconv_fwd_cuda(ctx.stream, p, dy.get(), wf.get(), masked.get(), nullptr, nullptr, &bb));
        sync_ok(ctx);
        return from_device<float>(sums.get(), static_cast<size_t>(2 * g.c));
      };
      const std::vector<float> got = run_bb(plan);
      const std::vector<float> gp = from_device_as(t, plain.get(), n), gm = from_device_as(t, masked.get(), n);
      check_tail_poisoned(what, masked, g_bytes, kTail);
      // g: the plain output where the ReLU kept the element, else 0 (bitwise).
      std::vector<double> ref_b(g.c), ref_q(g.c), mag_b(g.c), mag_q(g.c);
      int bad = 0, zeros = 0;
      for (size_t i = 0; i < n; ++i) {
        const size_t c = i % g.c;
        const float xr = round_to(t, bx[i]), m = par[2 * g.c + c];
        const bool k = kept(t, xr, m, par[c], par[3 * g.c + c], par[g.c + c]);
        const float want = k ? gp[i] : 0.0f;
        if (!(gm[i] == want) && bad++ < 4) WARN(what << " element " << i << ": " << gm[i] << " vs " << want);
        zeros += k ? 0 : 1;
        ref_b[c] += want, mag_b[c] += std::fabs(want);
        const double d = static_cast<double>(want) * (static_cast<double>(xr) - m);
        ref_q[c] += d, mag_q[c] += std::fabs(d);
      }
      CHECK(bad == 0);
      CHECK(zeros > 0);  // the mask is exercised both ways
      CHECK(zeros < static_cast<int>(n));
      auto check_sums = [&](const std::string& tag, const std::vector<float>& s) {
        int off = 0;
        for (int64_t c = 0; c < g.c; ++c) {
          const double inv = par[3 * g.c + c];
          const bool ok = std::fabs(s[g.c + c] - ref_b[c]) <= 1e-5 * mag_b[c] + 1e-6 &&
                          std::fabs(s[c] - inv * ref_q[c]) <= 1e-5 * inv * mag_q[c] + 1e-6;
          if (!ok && off++ < 4)
            WARN(what << tag << " channel " << c << ": dbeta " << s[g.c + c] << " vs " << ref_b[c] << ", dgamma "
                      << s[c] << " vs " << inv * ref_q[c]);
        }
        CHECK(off == 0);
      };
      check_sums("", got);
      CHECK_RESULT(compare_bitwise(what + " rerun", run_bb(plan).data(), got.data(), got.size() * sizeof(float), 4));
      WgConvPlan one = plan;
      one.grid_m = 1;
      check_sums(" (one CTA per channel tile)", run_bb(one));
      // g does not depend on the grid: with every tile of a channel tile in one CTA (each warpgroup storing many
      // tiles in turn) it is stored bitwise as with the planned grid.
      CHECK_RESULT(compare_bitwise(what + " one CTA: g", from_device_as(t, masked.get(), n).data(), gm.data(),
                                   n * sizeof(float), 4));
    }
  // Refusals: another tile, together with statistics, a short workspace, a misaligned x.
  const Conv2dGeom g = conv_geom(2, 9, 11, 64, 64, 3, 3, 1, 1, 1, 1);
  WgConvPlan px;
  if (!dgrad_plan(g, GpuDType::F16, &px)) return;
  Result<WgConvPlan> ring = wgconv_plan(wgconv_dgrad_geom(g), GpuDType::F16, WgConvTile::Ring128N64);
  REQUIRE(ring.ok());
  const StemInputs in = stem_inputs(g, true, 9990);
  const DevBuf dy = to_device_as(GpuDType::F16, in.dy), w = to_device_as(GpuDType::F16, in.w),
               bxd = to_device_as(GpuDType::F16, in.x), pd = to_device(std::vector<float>(6 * 64, 1.0f));
  DevBuf out(in.x.size() * 2), ws(wgconv_stats_workspace_bytes(px));
  const float* pf = static_cast<const float*>(pd.get());
  WgConvBnBwd bb;
  bb.x = bxd.get();
  bb.gamma = bb.beta = bb.mean = bb.invstd = pf;
  bb.dgamma = const_cast<float*>(pf + 4 * 64), bb.dbeta = const_cast<float*>(pf + 5 * 64);
  bb.ws = ws.get(), bb.ws_bytes = ws.bytes();
  // Whether the launch refuses with code c.
  auto refused = [&](ErrCode c, const WgConvPlan& p, const WgConvStats* st, const WgConvBnBwd& b) {
    const Status s = wgconv_fwd_cuda(ctx.stream, p, dy.get(), w.get(), out.get(), nullptr, st, &b);
    return !s.ok() && s.errors()[0].code == c;
  };
  CHECK(refused(ErrCode::NotSupported, ring.value(), nullptr, bb));
  WgConvStats st;
  st.sum = bb.dgamma, st.sqsum = bb.dbeta, st.ws = ws.get(), st.ws_bytes = ws.bytes();
  CHECK(refused(ErrCode::NotSupported, px, &st, bb));
  WgConvBnBwd shrt = bb;
  shrt.ws_bytes -= 4;
  CHECK(refused(ErrCode::Internal, px, nullptr, shrt));
  WgConvBnBwd odd = bb;
  odd.x = static_cast<const char*>(bxd.get()) + 2;
  CHECK(refused(ErrCode::Internal, px, nullptr, odd));
  sync_ok(ctx);
}
