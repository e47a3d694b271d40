// The warpgroup tensor-core 3x3 conv forward on the GPU (runtime/ops/conv2d/wgconv.h: wgconv_plan,
// wgconv_fwd_cuda) against the float64 direct conv (tests/gpu/stem_conv_ref.h), every CTA tile (the row-ring
// kernels' where C == 64, pixels as M or as N, and with each CTA walking many tiles through its ring), f16 and
// bf16, on geometries whose pixel count is not a multiple of the tile (the last tile partly past the end), odd
// sizes, one row or one column images, C = 64..192 (one to three channel chunks) and K = 64..256 (one to four
// channel tiles);
// nothing written past y; a rerun and a captured graph's replay bitwise equal to the eager run; the tiles bitwise
// equal to each other (each output is one fixed-order fp32 sum whatever the tile); what the plan and the launch
// refuse; the data gradient through the same kernels with flipped filters; the batch-norm prologue; the statistics
// epilogue.
//
// Inputs on the 1/64 grid (exact in f16 and bf16): every product and every fp32 partial sum is exact (at most
// 9 * 192 terms of magnitude <= 1 on the 2^-12 grid: below 2^24 units), so y is the exact sum rounded once and the
// tolerance (2u of the magnitude) holds with room to spare.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/util/thread_pool.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/wgconv.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/stem_conv_ref.h"
#include "tests/support/conv_geom.h"

using namespace trctl;
using trctl::testing::conv_geom;
using namespace trctl::gputest;

namespace {

constexpr size_t kTail = 256;  // bytes after y that must stay poisoned

// The plan, or a visible skip when the device is not compute capability 9.0 (the kernel is sm_90a code).
bool wg_plan(const Conv2dGeom& g, GpuDType t, WgConvTile tile, WgConvPlan* out) {
  Result<WgConvPlan> p = wgconv_plan(g, t, tile);
  if (!p.ok() && p.errors().front().code == ErrCode::NotSupported && wgconv_eligible(g, nullptr)) {
    WARN("skipped: " << p.error_text());
    return false;
  }
  if (!p.ok()) FAIL(p.error_text());
  *out = p.value();
  return true;
}

struct Buffers {
  DevBuf x, w, y;
  size_t y_bytes = 0;
};
Buffers buffers(GpuDType t, const StemInputs& in) {
  Buffers b;
  b.x = to_device_as(t, in.x), b.w = to_device_as(t, in.w);
  b.y_bytes = in.dy.size() * gpu_dtype_size(t);
  b.y = DevBuf(b.y_bytes + kTail);
  return b;
}

std::vector<uint8_t> run(const CudaContext& ctx, const WgConvPlan& p, const Buffers& b) {
  poison(b.y);
  REQUIRE_OK(wgconv_fwd_cuda(ctx.stream, p, b.x.get(), b.w.get(), b.y.get()));
  sync_ok(ctx);
  return from_device<uint8_t>(b.y.get(), b.y_bytes);
}

void check_tail(const std::string& what, const Buffers& b) { check_tail_poisoned(what, b.y, b.y_bytes, kTail); }

}  // namespace

TEST_CASE("wgconv forward matches the float64 direct conv (every tile, f16 and bf16, partial last tiles, C = 64..192, "
          "K = 64..256) and reruns bitwise",
          "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"9x9 N=2 C=64 K=64 (162 pixels)", conv_geom(2, 9, 9, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"7x12 N=3 C=128 K=128", conv_geom(3, 7, 12, 128, 128, 3, 3, 1, 1, 1, 1)},
      {"16x16 N=1 C=64 K=256", conv_geom(1, 16, 16, 64, 256, 3, 3, 1, 1, 1, 1)},
      {"5x11 N=2 C=192 K=64", conv_geom(2, 5, 11, 192, 64, 3, 3, 1, 1, 1, 1)},
      {"1x37 N=4 C=64 K=128 (one row)", conv_geom(4, 1, 37, 64, 128, 3, 3, 1, 1, 1, 1)},
      {"29x1 N=3 C=128 K=64 (one column)", conv_geom(3, 29, 1, 128, 64, 3, 3, 1, 1, 1, 1)},
      {"24x24 N=2 C=64 K=64 (1152 pixels)", conv_geom(2, 24, 24, 64, 64, 3, 3, 1, 1, 1, 1)}};
  uint64_t seed = 9100;
  for (const auto& [name, g] : cases) {
    REQUIRE(wgconv_eligible(g, nullptr));
    const StemInputs in = stem_inputs(g, true, ++seed);
    const StemRef ref = stem_ref(g, in, &pool);
    for (const StemMode& m : kStemModes) {
      if (m.io == GpuDType::F32) continue;
      const Buffers b = buffers(m.io, in);
      std::vector<uint8_t> first_tile;
      for (WgConvTile tile : kWgConvTiles) {
        if (!wgconv_tile_fits(g, tile)) continue;
        const std::string what = std::string("wgconv ") + wgconv_tile_name(tile) + " " + name + " " +
                                 gpu_dtype_name(m.io);
        INFO(what << ": " << conv2d_geom_str(g));
        WgConvPlan plan;
        if (!wg_plan(g, m.io, tile, &plan)) return;
        const std::vector<uint8_t> got = run(ctx, plan, b);
        check_stem_close(what, m.acc, m.rel, unit_roundoff(m.io), from_device_as(m.io, b.y.get(), in.dy.size()),
                         ref.y, ref.y_mag, g.k);
        check_tail(what, b);
        const std::vector<uint8_t> again = run(ctx, plan, b);
        CHECK_RESULT(compare_bitwise(what + " rerun", again.data(), got.data(), b.y_bytes, 2));
        if (first_tile.empty())
          first_tile = got;
        else
          CHECK_RESULT(compare_bitwise(what + " vs the first tile", got.data(), first_tile.data(), b.y_bytes, 2));
      }
    }
  }
}

// The ring kernel with fewer CTAs than tiles: each CTA walks a run of consecutive tiles through its ring (wrapping it
// many times: the halo of a 224-wide plane is 227 rows, a tile 128), bitwise the one-tile-per-CTA run and close to
// the float64 conv. When the descriptors' swizzle phase is wrong the outputs are wrong; the other reading of the
// PTX descriptor (base offset from the start address) is then tried and reported, to say which one the hardware
// follows (run 60, H200: the default, base offset 0; the other reading gave wrong products).
TEST_CASE("wgconv ring kernel walking many tiles per CTA matches the float64 conv and the one-tile run bitwise",
          "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"5x224 N=1 C=64 K=64 (13 tiles)", conv_geom(1, 5, 224, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"30x30 N=2 C=64 K=128 (16 tiles)", conv_geom(2, 30, 30, 64, 128, 3, 3, 1, 1, 1, 1)},
      {"7x9 N=5 C=64 K=64 (images shorter than a tile)", conv_geom(5, 7, 9, 64, 64, 3, 3, 1, 1, 1, 1)}};
  uint64_t seed = 9400;
  for (const auto& [name, g] : cases) {
    const StemInputs in = stem_inputs(g, true, ++seed);
    const StemRef ref = stem_ref(g, in, &pool);
    for (GpuDType t : {GpuDType::F16, GpuDType::BF16})
      for (WgConvTile tile : {WgConvTile::Ring128N64, WgConvTile::Ring128N128, WgConvTile::RingPx256N64}) {
        if (!wgconv_tile_fits(g, tile)) continue;
        const std::string what = std::string("wgconv ") + wgconv_tile_name(tile) + " " + name + " " + gpu_dtype_name(t);
        INFO(what << ": " << conv2d_geom_str(g));
        WgConvPlan plan;
        if (!wg_plan(g, t, tile, &plan)) return;
        const Buffers b = buffers(t, in);
        const std::vector<uint8_t> want = run(ctx, plan, b);
        const std::vector<float> got = from_device_as(t, b.y.get(), in.dy.size());
        const double u = unit_roundoff(t), acc = 2 * u;
        std::vector<double> bound(ref.y.size());
        for (size_t i = 0; i < bound.size(); ++i) bound[i] = acc * ref.y_mag[i] + u * std::fabs(ref.y[i]);
        const CompareResult c = compare_close(what, to_double(got), ref.y, bound, g.k);
        if (!c.ok) {  // which descriptor reading does the hardware follow?
          WgConvPlan other = plan;
          other.phase_from_start = !plan.phase_from_start;
          (void)run(ctx, other, b);
          const CompareResult c2 = compare_close(what + " (other phase reading)",
                                                 to_double(from_device_as(t, b.y.get(), in.dy.size())), ref.y,
                                                 bound, g.k);
          WARN("wgconv ring: descriptor phase_from_start=" << plan.phase_from_start << " wrong; "
                                                            << (c2.ok ? "the other reading is right"
                                                                      : "the other reading is wrong too"));
        }
        CHECK_RESULT(c);
        check_tail(what, b);
        for (int64_t runs : {1, 2, 3}) {
          if (runs >= plan.grid_m) continue;
          WgConvPlan fewer = plan;
          fewer.grid_m = runs;
          const std::vector<uint8_t> got_runs = run(ctx, fewer, b);
          CHECK_RESULT(compare_bitwise(what + " in " + std::to_string(runs) + " runs", got_runs.data(), want.data(),
                                       b.y_bytes, 2));
          check_tail(what + " runs", b);
        }
      }
  }
}

// The data gradient: dy through the forward kernels with the flipped, transposed filters (wgconv_flip_filters_cuda)
// against the float64 conv2d_grad_input_cpu, every tile the dgrad geometry takes (the ring ones where K == 64).
TEST_CASE("wgconv data gradient (flipped filters through the forward kernels) matches the float64 input gradient",
          "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"9x9 N=2 C=64 K=64", conv_geom(2, 9, 9, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"12x7 N=2 C=64 K=128", conv_geom(2, 12, 7, 64, 128, 3, 3, 1, 1, 1, 1)},
      {"16x16 N=1 C=128 K=64", conv_geom(1, 16, 16, 128, 64, 3, 3, 1, 1, 1, 1)}};
  uint64_t seed = 9500;
  for (const auto& [name, g] : cases) {
    const StemInputs in = stem_inputs(g, true, ++seed);
    std::vector<double> ref(in.x.size()), mag(in.x.size());
    {
      const std::vector<double> dy = to_double(in.dy), w = to_double(in.w);
      std::vector<double> ady(dy.size()), aw(w.size());
      for (size_t i = 0; i < dy.size(); ++i) ady[i] = std::fabs(dy[i]);
      for (size_t i = 0; i < w.size(); ++i) aw[i] = std::fabs(w[i]);
      conv2d_grad_input_cpu<double>(g, dy.data(), w.data(), ref.data(), &pool);
      conv2d_grad_input_cpu<double>(g, ady.data(), aw.data(), mag.data(), &pool);
    }
    const Conv2dGeom gd = wgconv_dgrad_geom(g);
    REQUIRE(wgconv_eligible(gd, nullptr));
    for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
      const DevBuf dy = to_device_as(t, in.dy), w = to_device_as(t, in.w);
      const size_t dx_bytes = in.x.size() * gpu_dtype_size(t);
      DevBuf wf(in.w.size() * gpu_dtype_size(t)), dx(dx_bytes + kTail);
      REQUIRE_OK(wgconv_flip_filters_cuda(ctx.stream, t, w.get(), g.k, g.c, wf.get()));
      for (WgConvTile tile : kWgConvTiles) {
        if (!wgconv_tile_fits(gd, tile)) continue;
        const std::string what = std::string("wgconv dgrad ") + wgconv_tile_name(tile) + " " + name + " " +
                                 gpu_dtype_name(t);
        INFO(what << ": " << conv2d_geom_str(gd));
        WgConvPlan plan;
        if (!wg_plan(gd, t, tile, &plan)) return;
        poison(dx);
        REQUIRE_OK(wgconv_fwd_cuda(ctx.stream, plan, dy.get(), wf.get(), dx.get()));
        sync_ok(ctx);
        const double u = unit_roundoff(t);
        check_stem_close(what, 2 * u, 1e-2, u, from_device_as(t, dx.get(), in.x.size()), ref, mag, g.c);
        check_tail_poisoned(what, dx, dx_bytes, kTail);
      }
    }
  }
}

// The batch-norm prologue of the ring kernels: conv(relu(bn(x))) with the apply done while staging equals,
// bitwise, the plain kernel on the apply pass's output (emulated with bn_elem.cuh's float operations:
// stem_conv_ref.h's bn_apply_stored), and is close to the float64
// conv of that output; with and without the ReLU, f16 and bf16, runs of many tiles per CTA; a tiled plan refuses it.
TEST_CASE("wgconv ring kernels apply the input's batch norm while staging it, bitwise the separate apply (and write "
          "that activation out when asked)",
          "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  ThreadPool pool(0);
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"5x224 N=1 C=64 K=64", conv_geom(1, 5, 224, 64, 64, 3, 3, 1, 1, 1, 1)},
      {"9x11 N=3 C=64 K=128", conv_geom(3, 9, 11, 64, 128, 3, 3, 1, 1, 1, 1)}};
  uint64_t seed = 9600;
  for (const auto& [name, g] : cases) {
    const StemInputs in = stem_inputs(g, true, ++seed);
    Rng rng(seed);
    const std::vector<float> gamma = rng.uniform_vec(64, 0.5f, 1.5f), beta = rng.uniform_vec(64, -0.5f, 0.5f),
                             mean = rng.uniform_vec(64, -0.2f, 0.2f), invstd = rng.uniform_vec(64, 0.5f, 2.0f);
    const DevBuf dg = to_device(gamma), db = to_device(beta), dm = to_device(mean), di = to_device(invstd);
    for (GpuDType t : {GpuDType::F16, GpuDType::BF16})
      for (bool relu : {true, false}) {
        StemInputs ain = in;  // x replaced by the apply pass's output, as the io type stores it
        ain.x = bn_apply_stored(t, in.x, gamma, beta, mean, invstd, relu);
        const StemRef aref = stem_ref(g, ain, &pool);
        const Buffers b = buffers(t, in), ba = buffers(t, ain);
        WgConvPrologue pro;
        pro.gamma = static_cast<const float*>(dg.get()), pro.beta = static_cast<const float*>(db.get());
        pro.mean = static_cast<const float*>(dm.get()), pro.invstd = static_cast<const float*>(di.get());
        pro.relu = relu;
        for (WgConvTile tile : {WgConvTile::Ring128N64, WgConvTile::Ring128N128, WgConvTile::RingPx256N64}) {
          if (!wgconv_tile_fits(g, tile)) continue;
          const std::string what = std::string("wgconv prologue ") + wgconv_tile_name(tile) + " " + name + " " +
                                   gpu_dtype_name(t) + (relu ? " relu" : "");
          INFO(what << ": " << conv2d_geom_str(g));
          WgConvPlan plan;
          if (!wg_plan(g, t, tile, &plan)) return;
          const std::vector<uint8_t> want = run(ctx, plan, ba);
          for (int64_t runs : {plan.grid_m, int64_t{1}, int64_t{2}}) {
            WgConvPlan p = plan;
            p.grid_m = runs;
            poison(b.y);
            REQUIRE_OK(wgconv_fwd_cuda(ctx.stream, p, b.x.get(), b.w.get(), b.y.get(), &pro));
            sync_ok(ctx);
            const std::vector<uint8_t> got = from_device<uint8_t>(b.y.get(), b.y_bytes);
            CHECK_RESULT(compare_bitwise(what + " in " + std::to_string(runs) + " runs", got.data(), want.data(),
                                         b.y_bytes, 2));
            check_tail(what, b);
          }
          const double u = unit_roundoff(t);
          check_stem_close(what + " vs float64", 2 * u, 1e-2, u, from_device_as(t, b.y.get(), in.dy.size()), aref.y,
                           aref.y_mag, g.k);
          // The activation written out too: bitwise the apply pass's output, y unchanged, in one and several runs.
          const size_t x_bytes = in.x.size() * gpu_dtype_size(t);
          DevBuf act_out(x_bytes + kTail);
          WgConvPrologue pa = pro;
          pa.act_out = act_out.get();
          const std::vector<uint8_t> want_act = from_device<uint8_t>(ba.x.get(), x_bytes);
          for (int64_t runs : {plan.grid_m, int64_t{3}}) {
            WgConvPlan p = plan;
            p.grid_m = runs;
            poison(b.y);
            poison(act_out);
            REQUIRE_OK(wgconv_fwd_cuda(ctx.stream, p, b.x.get(), b.w.get(), b.y.get(), &pa));
            sync_ok(ctx);
            const std::vector<uint8_t> got = from_device<uint8_t>(b.y.get(), b.y_bytes),
                                       got_act = from_device<uint8_t>(act_out.get(), x_bytes);
            const std::string r = " in " + std::to_string(runs) + " runs";
            CHECK_RESULT(compare_bitwise(what + " +act y" + r, got.data(), want.data(), b.y_bytes, 2));
            CHECK_RESULT(compare_bitwise(what + " +act activation" + r, got_act.data(), want_act.data(), x_bytes, 2));
            check_tail_poisoned(what + " +act", act_out, x_bytes, kTail);
          }
        }
      }
    // A tiled plan does not take the prologue.
    WgConvPlan tiled;
    if (!wg_plan(g, GpuDType::F16, WgConvTile::M128N64, &tiled)) return;
    const Buffers b = buffers(GpuDType::F16, in);
    WgConvPrologue pro;
    pro.gamma = pro.beta = pro.mean = pro.invstd = static_cast<const float*>(dg.get());
    const Status st = wgconv_fwd_cuda(ctx.stream, tiled, b.x.get(), b.w.get(), b.y.get(), &pro);
    REQUIRE_FALSE(st.ok());
    CHECK(st.errors()[0].code == ErrCode::NotSupported);
  }
}

// The statistics epilogue (RingPx256N64): per-channel sum and sum of squares of y as stored, against float64 sums
// of the y read back (fp32 per thread: within 1e-5 of the sum of magnitudes), bitwise again on a rerun, close with
// fewer CTAs (other partials), and together with the prologue; other tiles and a short workspace refuse it.
TEST_CASE("wgconv ring px statistics epilogue sums y as stored per channel, deterministically",
          "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  const std::pair<const char*, Conv2dGeom> cases[] = {
      {"9x11 N=2 C=64 K=128", conv_geom(2, 9, 11, 64, 128, 3, 3, 1, 1, 1, 1)},
      {"5x224 N=1 C=64 K=64", conv_geom(1, 5, 224, 64, 64, 3, 3, 1, 1, 1, 1)}};
  uint64_t seed = 9700;
  for (const auto& [name, g] : cases)
    for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
      const std::string what = std::string("wgconv stats ") + name + " " + gpu_dtype_name(t);
      INFO(what << ": " << conv2d_geom_str(g));
      const StemInputs in = stem_inputs(g, true, ++seed);
      WgConvPlan plan;
      if (!wg_plan(g, t, WgConvTile::RingPx256N64, &plan)) return;
      const Buffers b = buffers(t, in);
      DevBuf sums(static_cast<size_t>(g.k) * 2 * sizeof(float)), ws(wgconv_stats_workspace_bytes(plan));
      WgConvStats st;
      st.sum = static_cast<float*>(sums.get()), st.sqsum = st.sum + g.k, st.ws = ws.get(), st.ws_bytes = ws.bytes();
      auto run_stats = [&](const WgConvPlan& p, const WgConvPrologue* pro) {
        poison(b.y);
        poison(sums);
        REQUIRE_OK(wgconv_fwd_cuda(ctx.stream, p, b.x.get(), b.w.get(), b.y.get(), pro, &st));
        sync_ok(ctx);
        return from_device<float>(sums.get(), static_cast<size_t>(g.k) * 2);
      };
      // The sums against float64 sums of the y just stored.
      auto check_sums = [&](const std::string& tag, const std::vector<float>& got) {
        const std::vector<float> y = from_device_as(t, b.y.get(), in.dy.size());
        std::vector<double> ref_s(g.k), ref_q(g.k), mag_s(g.k);
        for (size_t i = 0; i < y.size(); ++i) {
          const size_t c = i % g.k;
          ref_s[c] += y[i], ref_q[c] += static_cast<double>(y[i]) * y[i], mag_s[c] += std::fabs(y[i]);
        }
        int bad = 0;
        for (int64_t c = 0; c < g.k; ++c) {
          const bool ok = std::fabs(got[c] - ref_s[c]) <= 1e-5 * mag_s[c] + 1e-6 &&
                          std::fabs(got[g.k + c] - ref_q[c]) <= 1e-5 * ref_q[c] + 1e-6;
          if (!ok && bad++ < 4)
            WARN(what << tag << " channel " << c << ": sum " << got[c] << " vs " << ref_s[c] << ", sqsum "
                      << got[g.k + c] << " vs " << ref_q[c]);
        }
        CHECK(bad == 0);
      };
      const std::vector<float> got = run_stats(plan, nullptr);
      check_sums("", got);
      const std::vector<float> again = run_stats(plan, nullptr);
      CHECK_RESULT(compare_bitwise(what + " rerun", again.data(), got.data(), got.size() * sizeof(float), 4));
      WgConvPlan one = plan;
      one.grid_m = 1;
      const std::vector<float> single = run_stats(one, nullptr);
      for (int64_t c = 0; c < 2 * g.k; ++c) CHECK(std::fabs(single[c] - got[c]) <= 1e-5 * std::fabs(got[c]) + 1e-4);
      // With the batch-norm prologue (constant per-channel parameters).
      const std::vector<float> par(64, 0.75f);
      const DevBuf dp = to_device(par);
      WgConvPrologue pro;
      pro.gamma = pro.beta = pro.mean = pro.invstd = static_cast<const float*>(dp.get());
      check_sums(" with the prologue", run_stats(plan, &pro));
    }
  // Refusals: another tile; a short workspace.
  const Conv2dGeom g = conv_geom(2, 9, 11, 64, 64, 3, 3, 1, 1, 1, 1);
  const StemInputs in = stem_inputs(g, true, 9790);
  const Buffers b = buffers(GpuDType::F16, in);
  WgConvPlan ring, px;
  if (!wg_plan(g, GpuDType::F16, WgConvTile::Ring128N64, &ring)) return;
  if (!wg_plan(g, GpuDType::F16, WgConvTile::RingPx256N64, &px)) return;
  DevBuf sums(64 * 2 * sizeof(float)), ws(wgconv_stats_workspace_bytes(px));
  WgConvStats st;
  st.sum = static_cast<float*>(sums.get()), st.sqsum = st.sum + 64, st.ws = ws.get(), st.ws_bytes = ws.bytes();
  const Status other = wgconv_fwd_cuda(ctx.stream, ring, b.x.get(), b.w.get(), b.y.get(), nullptr, &st);
  REQUIRE_FALSE(other.ok());
  CHECK(other.errors()[0].code == ErrCode::NotSupported);
  st.ws_bytes -= 4;
  const Status shrt = wgconv_fwd_cuda(ctx.stream, px, b.x.get(), b.w.get(), b.y.get(), nullptr, &st);
  REQUIRE_FALSE(shrt.ok());
  CHECK(shrt.errors()[0].code == ErrCode::Internal);
  sync_ok(ctx);
}

TEST_CASE("wgconv forward replayed from a captured CUDA graph equals the eager run bitwise",
          "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  const Conv2dGeom g = conv_geom(2, 20, 13, 128, 128, 3, 3, 1, 1, 1, 1);
  for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
    INFO(gpu_dtype_name(t) << ": " << conv2d_geom_str(g));
    const StemInputs in = stem_inputs(g, true, 9200);
    WgConvPlan plan;
    if (!wg_plan(g, t, wgconv_default_tile(g), &plan)) return;
    const Buffers b = buffers(t, in);
    const std::vector<uint8_t> eager = run(ctx, plan, b);
    cudaGraphExec_t exec = capture_graph(
        ctx, [&] { return wgconv_fwd_cuda(ctx.stream, plan, b.x.get(), b.w.get(), b.y.get()); },
        cudaStreamCaptureModeThreadLocal);
    poison(b.y);
    REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
    sync_ok(ctx);
    const std::vector<uint8_t> replay = from_device<uint8_t>(b.y.get(), b.y_bytes);
    CHECK_RESULT(compare_bitwise("wgconv graph replay", replay.data(), eager.data(), b.y_bytes, 2));
    REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  }
}

TEST_CASE("wgconv refuses geometries, io types and pointers it does not cover", "[kernel][wgconv][conv2d]") {
  CudaContext ctx = make_context();
  std::string why;
  CHECK_FALSE(wgconv_eligible(conv_geom(2, 9, 9, 64, 64, 3, 3, 2, 2, 1, 1), &why));  // stride 2
  CHECK_FALSE(wgconv_eligible(conv_geom(2, 9, 9, 48, 64, 3, 3, 1, 1, 1, 1), &why));  // C % 64
  CHECK_FALSE(wgconv_eligible(conv_geom(2, 9, 9, 64, 96, 3, 3, 1, 1, 1, 1), &why));  // K % 64
  CHECK_FALSE(wgconv_eligible(conv_geom(2, 9, 9, 64, 64, 1, 1, 1, 1, 0, 0), &why));  // 1x1
  CHECK_FALSE(wgconv_eligible(conv_geom(2, 9, 9, 64, 64, 3, 3, 1, 1, 0, 0), &why));  // no padding
  const Conv2dGeom g = conv_geom(2, 9, 9, 64, 64, 3, 3, 1, 1, 1, 1);
  Result<WgConvPlan> f32 = wgconv_plan(g, GpuDType::F32, WgConvTile::M128N64);
  REQUIRE_FALSE(f32.ok());
  CHECK(f32.errors().front().code == ErrCode::NotSupported);
  Result<WgConvPlan> n128 = wgconv_plan(g, GpuDType::F16, WgConvTile::M128N128);  // K = 64 with a 128-wide tile
  REQUIRE_FALSE(n128.ok());
  CHECK(n128.errors().front().code == ErrCode::NotSupported);
  WgConvPlan plan;
  if (!wg_plan(g, GpuDType::F16, WgConvTile::M128N64, &plan)) return;
  const StemInputs in = stem_inputs(g, true, 9300);
  const Buffers b = buffers(GpuDType::F16, in);
  const Status st = wgconv_fwd_cuda(ctx.stream, plan, static_cast<const char*>(b.x.get()) + 2, b.w.get(), b.y.get());
  REQUIRE_FALSE(st.ok());
  CHECK(st.errors()[0].code == ErrCode::Internal);
  sync_ok(ctx);
}
