// Batch norm + ReLU with the max pool that follows it fused (pass_fuse_bn_pool): the fused kernels against the
// unfused chain they replace, bitwise. Training forward (batchnorm_fwd_train_pool_cuda vs batchnorm_fwd_train_cuda
// + maxpool2d_fwd_idx_cuda: pooled y, argmax, saved and running statistics), eval forward (vs
// batchnorm_fwd_eval_cuda + maxpool2d_fwd_cuda), backward (batchnorm_bwd_pool_cuda vs maxpool2d_bwd_idx_cuda +
// batchnorm_bwd_cuda with the mask recomputed from x: dx, dgamma, dbeta); f32/f16/bf16; tiling windows (VGG-like
// 2x2/2 shapes at small N, 3x3/3) and general ones (ResNet's stem 3x3/2 pad 1 on even and odd sizes, 3x3/1 pad 1,
// 2x2/1, 2x2/2 on odd sizes, 3x3/2), odd channel counts, inputs with ties and a NaN channel, vector and scalar
// (misaligned) paths; capture and replay; the launchers' geometry checks; the x elements at the argmax and the
// backward's pooled statistics (tiling windows; within rounding of the full-resolution pass, not bitwise); then
// small CNNs of conv-BN-ReLU-pool blocks (2x2/2 pools, and a 3x3/2 pad 1 stem pool) trained 20 fp32 steps on CUDA
// vs the CPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/compiler.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "runtime/ops/pool/pool.h"
#include "runtime/ops/pool/pool_cuda.h"
#include "runtime/train/trainer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/gpu_train_util.h"
#include "tests/support/weights_diff.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

constexpr float kEps = 1e-5f, kMomentum = 0.1f;
const GpuDType kTypes[] = {GpuDType::F32, GpuDType::F16, GpuDType::BF16};

// x (n,h,w,c), pooled over k x k windows with stride s and padding pad.
struct Geo {
  int64_t n, h, w, c;
  int k, s, pad;
  Pool2dGeom pool() const {
    Pool2dGeom p;
    p.n = n;
    p.h = h;
    p.w = w;
    p.c = c;
    p.kh = p.kw = k;
    p.sh = p.sw = s;
    p.ph = p.pw = pad;
    REQUIRE(pool2d_geom_finish(p));
    return p;
  }
  int64_t rows() const { return n * h * w; }
  int64_t full() const { return n * h * w * c; }
  int64_t pooled() const {
    const Pool2dGeom p = pool();
    return n * p.p * p.q * c;
  }
};
// Tiling: scalar-path sizes, odd channels, VGG's stage shapes at small N (14x14x512, 28x28x256, 56x56x128), 3x3/3.
// General: the ResNet stem's 3x3/2 pad 1 (its 112x112x64 at N=2, odd sizes, 5 and 24 channels), 3x3/1 pad 1, 2x2/1,
// 2x2/2 on odd sizes (not tiling: the last row and column in no window), 3x3/2 without padding.
const Geo kGeos[] = {{2, 4, 4, 5, 2, 2, 0},     {3, 6, 10, 64, 2, 2, 0},  {2, 8, 8, 67, 2, 2, 0},
                     {2, 14, 14, 512, 2, 2, 0}, {2, 28, 28, 256, 2, 2, 0}, {1, 56, 56, 128, 2, 2, 0},
                     {2, 6, 6, 24, 3, 3, 0},    {2, 12, 12, 33, 3, 3, 0},  {2, 112, 112, 64, 3, 2, 1},
                     {2, 11, 11, 5, 3, 2, 1},   {3, 9, 13, 24, 3, 2, 1},   {2, 8, 8, 64, 3, 2, 1},
                     {2, 7, 9, 33, 3, 1, 1},    {2, 8, 7, 16, 2, 1, 0},    {2, 7, 7, 8, 2, 2, 0},
                     {2, 9, 9, 40, 3, 2, 0}};

std::string tag_of(GpuDType t, const Geo& g, int64_t off) {
  return std::string(gpu_dtype_name(t)) + " (" + std::to_string(g.n) + "," + std::to_string(g.h) + "," +
         std::to_string(g.w) + "," + std::to_string(g.c) + ") " + std::to_string(g.k) + "x" + std::to_string(g.k) +
         "/" + std::to_string(g.s) + " pad " + std::to_string(g.pad) + (off ? " misaligned" : "");
}

struct Data {
  std::vector<float> x, dyp, gamma, beta, rm, rv;
};

// x on a coarse grid per channel (ties inside windows, and after the ReLU many all-zero windows); channel 1 has a
// NaN (NaN statistics: the whole channel NaN); dy pooled with a -0 and a NaN.
Data make_data(Rng& rng, GpuDType t, const Geo& g, bool nan) {
  Data d;
  const std::vector<float> off = rng.uniform_vec(g.c, -1.0f, 1.0f);
  for (int64_t i = 0; i < g.full(); ++i)
    d.x.push_back(round_to(t, off[i % g.c] + 0.25f * static_cast<float>(rng.below(9) - 4)));
  if (nan && g.c > 1) d.x[g.c + 1] = std::numeric_limits<float>::quiet_NaN();
  d.dyp = rng.normal_vec(g.pooled(), 0.0f, 1.0f);
  for (auto& v : d.dyp) v = round_to(t, v);
  if (nan) {
    d.dyp[0] = -0.0f;
    d.dyp[g.pooled() / 2] = std::numeric_limits<float>::quiet_NaN();
  }
  d.gamma = rng.uniform_vec(g.c, -1.5f, 1.5f);
  d.beta = rng.normal_vec(g.c, 0.0f, 0.5f);
  d.rm = rng.normal_vec(g.c, 0.0f, 0.5f);
  d.rv = rng.uniform_vec(g.c, 0.5f, 2.0f);
  return d;
}

// A device array of n elements of t starting `off` elements into its allocation (off = 1: the scalar path).
struct View {
  DevBuf buf;
  void* p = nullptr;
  View(GpuDType t, int64_t n, int64_t off) : buf(static_cast<size_t>((n + 8) * 4)) {
    poison(buf);
    p = static_cast<char*>(buf.get()) + off * (t == GpuDType::F32 ? 4 : 2);
  }
  View(GpuDType t, const std::vector<float>& v, int64_t off) : View(t, static_cast<int64_t>(v.size()), off) {
    DevBuf tmp = to_device_as(t, v);
    copy_sync(p, tmp.get(), v.size() * (t == GpuDType::F32 ? 4 : 2), cudaMemcpyDeviceToDevice);
  }
};

struct Outs {
  std::vector<uint8_t> y, idx, dx;  // raw bytes (bitwise comparison)
  std::vector<float> mean, invstd, rm, rv, dgamma, dbeta, y_eval;
};

std::vector<uint8_t> bytes_of(const void* p, size_t n) { return from_device<uint8_t>(p, n); }

// The whole train forward + backward and the eval forward, fused or as the unfused chain.
Outs run(const CudaContext& ctx, GpuDType t, const Geo& g, const Data& d, bool fused, int64_t off) {
  const size_t es = t == GpuDType::F32 ? 4 : 2;
  const int64_t c = g.c;
  View x(t, d.x, off), dyp(t, d.dyp, off), y(t, g.pooled(), off), ye(t, g.pooled(), off), dx(t, g.full(), off);
  View yfull(t, g.full(), off), dyfull(t, g.full(), off);
  DevBuf idx(static_cast<size_t>(g.pooled()) + 16), gamma = to_device(d.gamma), beta = to_device(d.beta);
  DevBuf rm = to_device(d.rm), rv = to_device(d.rv), mean(c * 4), invstd(c * 4), dgamma(c * 4), dbeta(c * 4);
  DevBuf ws(batchnorm_workspace_bytes(g.rows(), c));
  for (const DevBuf* b : {&idx, &mean, &invstd, &dgamma, &dbeta}) poison(*b);
  const Pool2dGeom pg = g.pool();
  uint8_t* ip = idx.as<uint8_t>();
  const float *ga = gamma.as<float>(), *be = beta.as<float>();
  float *mp = mean.as<float>(), *sp = invstd.as<float>();
  if (fused) {
    REQUIRE_OK(batchnorm_fwd_train_pool_cuda(ctx.stream, x.p, t, ga, be, y.p, ip, mp, sp, rm.as<float>(),
                                             rv.as<float>(), pg, kEps, kMomentum, true, ws.get(), ws.bytes()));
    REQUIRE_OK(batchnorm_bwd_pool_cuda(ctx.stream, dyp.p, ip, x.p, t, ga, be, mp, sp, dx.p, dgamma.as<float>(),
                                       dbeta.as<float>(), pg, ws.get(), ws.bytes()));
    REQUIRE_OK(batchnorm_fwd_eval_pool_cuda(ctx.stream, x.p, t, ga, be, rm.as<float>(), rv.as<float>(), ye.p, pg,
                                            kEps, true));
  } else {
    REQUIRE_OK(batchnorm_fwd_train_cuda(ctx.stream, x.p, t, ga, be, yfull.p, mp, sp, rm.as<float>(), rv.as<float>(),
                                        g.rows(), c, kEps, kMomentum, true, ws.get(), ws.bytes()));
    REQUIRE_OK(maxpool2d_fwd_idx_cuda(ctx.stream, pg, yfull.p, y.p, ip, t));
    REQUIRE_OK(maxpool2d_bwd_idx_cuda(ctx.stream, pg, dyp.p, ip, dyfull.p, t));
    REQUIRE_OK(batchnorm_bwd_cuda(ctx.stream, dyfull.p, x.p, nullptr, t, ga, mp, sp, dx.p, dgamma.as<float>(),
                                  dbeta.as<float>(), g.rows(), c, ws.get(), ws.bytes(), be));
    REQUIRE_OK(batchnorm_fwd_eval_cuda(ctx.stream, x.p, t, ga, be, rm.as<float>(), rv.as<float>(), yfull.p, g.rows(),
                                       c, kEps, true));
    REQUIRE_OK(maxpool2d_fwd_cuda(ctx.stream, pg, yfull.p, ye.p, t));
  }
  sync_ok(ctx);
  Outs o;
  o.y = bytes_of(y.p, g.pooled() * es);
  o.idx = bytes_of(ip, g.pooled());
  o.dx = bytes_of(dx.p, g.full() * es);
  o.y_eval = from_device_as(t, ye.p, g.pooled());
  o.mean = from_device<float>(mp, c);
  o.invstd = from_device<float>(sp, c);
  o.rm = from_device<float>(rm.get(), c);
  o.rv = from_device<float>(rv.get(), c);
  o.dgamma = from_device<float>(dgamma.get(), c);
  o.dbeta = from_device<float>(dbeta.get(), c);
  return o;
}

template <class V>
void check_bitwise(const std::string& what, const V& a, const V& b, size_t elem) {
  REQUIRE(a.size() == b.size());
  CHECK_RESULT(compare_bitwise(what, a.data(), b.data(), a.size() * sizeof(a[0]), elem));
}

void check_same(const std::string& tag, const Outs& f, const Outs& u, GpuDType t) {
  const size_t es = t == GpuDType::F32 ? 4 : 2;
  check_bitwise("pooled y " + tag, f.y, u.y, es);
  check_bitwise("argmax " + tag, f.idx, u.idx, 1);
  check_bitwise("save_mean " + tag, f.mean, u.mean, 4);
  check_bitwise("save_invstd " + tag, f.invstd, u.invstd, 4);
  check_bitwise("running_mean " + tag, f.rm, u.rm, 4);
  check_bitwise("running_var " + tag, f.rv, u.rv, 4);
  check_bitwise("dx " + tag, f.dx, u.dx, es);
  check_bitwise("dgamma " + tag, f.dgamma, u.dgamma, 4);
  check_bitwise("dbeta " + tag, f.dbeta, u.dbeta, 4);
  check_bitwise("eval pooled y " + tag, f.y_eval, u.y_eval, 4);
}

}  // namespace

TEST_CASE("fused batch norm + ReLU + max pool equals the unfused kernels bitwise, forward, eval and backward",
          "[gpu][kernel][batchnorm][bnpool]") {
  CudaContext ctx = make_context();
  Rng rng(91);
  for (GpuDType t : kTypes)
    for (const Geo& g : kGeos)
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        const std::string tag = tag_of(t, g, off);
        INFO(tag);
        const Data d = make_data(rng, t, g, false);
        check_same(tag, run(ctx, t, g, d, true, off), run(ctx, t, g, d, false, off), t);
      }
}

TEST_CASE("fused batch norm + ReLU + max pool equals the unfused kernels bitwise with NaN inputs and a -0 gradient",
          "[gpu][kernel][batchnorm][bnpool]") {
  CudaContext ctx = make_context();
  Rng rng(92);
  for (GpuDType t : kTypes)
    for (const Geo& g : {Geo{2, 4, 4, 5, 2, 2, 0}, Geo{2, 8, 8, 64, 2, 2, 0}, Geo{2, 6, 6, 24, 3, 3, 0},
                         Geo{2, 11, 11, 5, 3, 2, 1}, Geo{2, 8, 8, 64, 3, 2, 1}, Geo{2, 7, 9, 33, 3, 1, 1},
                         Geo{2, 8, 7, 16, 2, 1, 0}}) {
      const std::string tag = tag_of(t, g, 0) + " nan";
      INFO(tag);
      const Data d = make_data(rng, t, g, true);
      check_same(tag, run(ctx, t, g, d, true, 0), run(ctx, t, g, d, false, 0), t);
    }
}

TEST_CASE("fused batch norm + ReLU + max pool backward: every gather mode gives bitwise the same gradients",
          "[gpu][kernel][batchnorm][bnpool]") {
  CudaContext ctx = make_context();
  Rng rng(94);
  for (GpuDType t : kTypes)
    for (const Geo& g : {Geo{2, 112, 112, 64, 3, 2, 1}, Geo{3, 9, 13, 24, 3, 2, 1}, Geo{2, 11, 11, 5, 3, 2, 1},
                         Geo{2, 7, 9, 33, 3, 1, 1}, Geo{2, 9, 9, 40, 3, 2, 0}, Geo{2, 28, 28, 256, 2, 2, 0},
                         Geo{2, 12, 12, 33, 3, 3, 0}})
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        const std::string tag = tag_of(t, g, off);
        INFO(tag);
        const size_t es = t == GpuDType::F32 ? 4 : 2;
        const Data d = make_data(rng, t, g, false);
        View x(t, d.x, off), dyp(t, d.dyp, off), y(t, g.pooled(), off), dx(t, g.full(), off);
        DevBuf idx(static_cast<size_t>(g.pooled()) + 16), gamma = to_device(d.gamma), beta = to_device(d.beta);
        DevBuf rm = to_device(d.rm), rv = to_device(d.rv), mean(g.c * 4), invstd(g.c * 4), dgamma(g.c * 4),
               dbeta(g.c * 4), ws(batchnorm_workspace_bytes(g.rows(), g.c));
        const Pool2dGeom pg = g.pool();
        REQUIRE_OK(batchnorm_fwd_train_pool_cuda(ctx.stream, x.p, t, gamma.as<float>(), beta.as<float>(), y.p,
                                                 idx.as<uint8_t>(), mean.as<float>(), invstd.as<float>(),
                                                 rm.as<float>(), rv.as<float>(), pg, kEps, kMomentum, true, ws.get(),
                                                 ws.bytes()));
        std::vector<uint8_t> first_dx;
        std::vector<float> first_dg, first_db;
        for (BnPoolGather mode : {BnPoolGather::kOnceStored, BnPoolGather::kTwice, BnPoolGather::kPoolThenDense,
                                  BnPoolGather::kWindowDx, BnPoolGather::kAuto}) {
          for (const DevBuf* b : {&dgamma, &dbeta}) poison(*b);
          REQUIRE_OK(batchnorm_bwd_pool_cuda(ctx.stream, dyp.p, idx.as<uint8_t>(), x.p, t, gamma.as<float>(),
                                             beta.as<float>(), mean.as<float>(), invstd.as<float>(), dx.p,
                                             dgamma.as<float>(), dbeta.as<float>(), pg, ws.get(), ws.bytes(), mode));
          sync_ok(ctx);
          std::vector<uint8_t> got = bytes_of(dx.p, g.full() * es);
          std::vector<float> dg = from_device<float>(dgamma.get(), g.c), db = from_device<float>(dbeta.get(), g.c);
          if (first_dx.empty()) {
            first_dx = got, first_dg = dg, first_db = db;
            continue;
          }
          const std::string m = " mode " + std::to_string(static_cast<int>(mode)) + " " + tag;
          check_bitwise("dx" + m, got, first_dx, es);
          check_bitwise("dgamma" + m, dg, first_dg, 4);
          check_bitwise("dbeta" + m, db, first_db, 4);
        }
      }
}

TEST_CASE("fused batch norm + ReLU + max pool: the x elements at the argmax, and the backward's pooled statistics",
          "[gpu][kernel][batchnorm][bnpool]") {
  // Tiling windows only: the forward with x_at_max writes y and idx bitwise as without and each window's x element at
  // its argmax; the backward's statistics over the pooled pixels hold the same terms as the full-resolution pass in
  // another order (dgamma, dbeta within float rounding of it, and dx within a rounding of the io type), bitwise
  // repeatable; over overlapping windows both launchers refuse x_at_max.
  CudaContext ctx = make_context();
  Rng rng(95);
  for (GpuDType t : kTypes)
    for (const Geo& g : {Geo{2, 4, 4, 5, 2, 2, 0}, Geo{3, 6, 10, 64, 2, 2, 0}, Geo{2, 28, 28, 256, 2, 2, 0},
                         Geo{1, 56, 56, 128, 2, 2, 0}, Geo{2, 12, 12, 33, 3, 3, 0}})
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        const std::string tag = tag_of(t, g, off);
        INFO(tag);
        const size_t es = t == GpuDType::F32 ? 4 : 2;
        const Data d = make_data(rng, t, g, false);
        View x(t, d.x, off), dyp(t, d.dyp, off), y(t, g.pooled(), off), y2(t, g.pooled(), off), xa(t, g.pooled(), off);
        View dx(t, g.full(), off), dx2(t, g.full(), off);
        DevBuf idx(static_cast<size_t>(g.pooled()) + 16), idx2(static_cast<size_t>(g.pooled()) + 16);
        DevBuf gamma = to_device(d.gamma), beta = to_device(d.beta), rm = to_device(d.rm), rv = to_device(d.rv);
        DevBuf mean(g.c * 4), invstd(g.c * 4), dg(g.c * 4), db(g.c * 4), dg2(g.c * 4), db2(g.c * 4);
        DevBuf ws(batchnorm_workspace_bytes(g.rows(), g.c));
        const Pool2dGeom pg = g.pool();
        const float *ga = gamma.as<float>(), *be = beta.as<float>();
        REQUIRE_OK(batchnorm_fwd_train_pool_cuda(ctx.stream, x.p, t, ga, be, y.p, idx.as<uint8_t>(), mean.as<float>(),
                                                 invstd.as<float>(), rm.as<float>(), rv.as<float>(), pg, kEps,
                                                 kMomentum, true, ws.get(), ws.bytes()));
        REQUIRE_OK(batchnorm_fwd_train_pool_cuda(ctx.stream, x.p, t, ga, be, y2.p, idx2.as<uint8_t>(),
                                                 mean.as<float>(), invstd.as<float>(), rm.as<float>(), rv.as<float>(),
                                                 pg, kEps, kMomentum, true, ws.get(), ws.bytes(), nullptr, {}, xa.p));
        sync_ok(ctx);
        check_bitwise("pooled y with x_at_max " + tag, bytes_of(y2.p, g.pooled() * es), bytes_of(y.p, g.pooled() * es),
                      es);
        const std::vector<uint8_t> ib = bytes_of(idx.get(), g.pooled());
        check_bitwise("argmax with x_at_max " + tag, bytes_of(idx2.get(), g.pooled()), ib, 1);
        const std::vector<float> xv = from_device_as(t, x.p, g.full()), xav = from_device_as(t, xa.p, g.pooled());
        int64_t wrong = 0;
        for (int64_t i = 0; i < g.pooled(); ++i) {
          const int64_t ch = i % g.c, pix = i / g.c, q = pix % pg.q, p = (pix / pg.q) % pg.p, b = pix / (pg.q * pg.p);
          const int64_t r = ib[i] / g.k, s = ib[i] % g.k;
          const float want = xv[((b * g.h + p * g.k + r) * g.w + q * g.k + s) * g.c + ch];
          if (std::memcmp(&want, &xav[i], 4) != 0) ++wrong;
        }
        CHECK(wrong == 0);
        for (BnPoolGather mode : {BnPoolGather::kAuto, BnPoolGather::kTwice, BnPoolGather::kWindowDx}) {
          const std::string m = " mode " + std::to_string(static_cast<int>(mode)) + " " + tag;
          REQUIRE_OK(batchnorm_bwd_pool_cuda(ctx.stream, dyp.p, idx.as<uint8_t>(), x.p, t, ga, be, mean.as<float>(),
                                             invstd.as<float>(), dx.p, dg.as<float>(), db.as<float>(), pg, ws.get(),
                                             ws.bytes(), mode));
          const std::vector<float> ref_dx = from_device_as(t, dx.p, g.full());
          const std::vector<float> ref_dg = from_device<float>(dg.get(), g.c);
          const std::vector<float> ref_db = from_device<float>(db.get(), g.c);
          std::vector<std::vector<uint8_t>> runs;
          for (int rep = 0; rep < 2; ++rep) {
            for (const DevBuf* b : {&dg2, &db2}) poison(*b);
            poison(dx2.buf);
            REQUIRE_OK(batchnorm_bwd_pool_cuda(ctx.stream, dyp.p, idx.as<uint8_t>(), x.p, t, ga, be, mean.as<float>(),
                                               invstd.as<float>(), dx2.p, dg2.as<float>(), db2.as<float>(), pg,
                                               ws.get(), ws.bytes(), mode, xa.p));
            sync_ok(ctx);
            runs.push_back(bytes_of(dx2.p, g.full() * es));
            const std::vector<uint8_t> sums = bytes_of(dg2.get(), g.c * 4), sums_b = bytes_of(db2.get(), g.c * 4);
            runs.back().insert(runs.back().end(), sums.begin(), sums.end());
            runs.back().insert(runs.back().end(), sums_b.begin(), sums_b.end());
          }
          check_bitwise("pooled statistics rerun" + m, runs[1], runs[0], 1);
          const std::vector<float> got_dg = from_device<float>(dg2.get(), g.c);
          const std::vector<float> got_db = from_device<float>(db2.get(), g.c);
          const std::vector<float> got_dx = from_device_as(t, dx2.p, g.full());
          // The sums: the same terms in another order -- float rounding only (a wrong mask or pixel moves them by
          // whole terms, O(1)).
          double scale = 1.0;
          for (int64_t ch = 0; ch < g.c; ++ch)
            scale = std::max({scale, std::fabs(static_cast<double>(ref_dg[ch])),
                              std::fabs(static_cast<double>(ref_db[ch]))});
          const double sum_tol = 2e-4 * scale + 1e-6 * static_cast<double>(g.rows());
          for (int64_t ch = 0; ch < g.c; ++ch) {
            CHECK(std::fabs(static_cast<double>(got_dg[ch]) - ref_dg[ch]) <= sum_tol);
            CHECK(std::fabs(static_cast<double>(got_db[ch]) - ref_db[ch]) <= sum_tol);
          }
          const double rel = t == GpuDType::F32 ? 1e-4 : (t == GpuDType::F16 ? 4e-3 : 2e-2);
          double worst = 0;
          for (int64_t i = 0; i < g.full(); ++i)
            worst = std::max(worst, std::fabs(static_cast<double>(got_dx[i]) - ref_dx[i]) /
                                        (std::fabs(static_cast<double>(ref_dx[i])) + 1e-2));
          INFO("worst relative dx difference " << worst << m);
          CHECK(worst <= rel);
        }
      }
  // Overlapping windows: no x at the argmax.
  const Geo g{2, 8, 8, 64, 3, 2, 1};
  const Pool2dGeom pg = g.pool();
  DevBuf x(g.full() * 2), y(g.pooled() * 2), xa(g.pooled() * 2), idx(g.pooled() + 16), dx(g.full() * 2);
  DevBuf gamma(g.c * 4), beta(g.c * 4), mean(g.c * 4), invstd(g.c * 4), ws(batchnorm_workspace_bytes(g.rows(), g.c));
  const Status f = batchnorm_fwd_train_pool_cuda(ctx.stream, x.get(), GpuDType::F16, gamma.as<float>(),
                                                 beta.as<float>(), y.get(), idx.as<uint8_t>(), mean.as<float>(),
                                                 invstd.as<float>(), nullptr, nullptr, pg, kEps, kMomentum, true,
                                                 ws.get(), ws.bytes(), nullptr, {}, xa.get());
  CHECK_FALSE(f.ok());
  const Status b = batchnorm_bwd_pool_cuda(ctx.stream, y.get(), idx.as<uint8_t>(), x.get(), GpuDType::F16,
                                           gamma.as<float>(), beta.as<float>(), mean.as<float>(), invstd.as<float>(),
                                           dx.get(), mean.as<float>(), invstd.as<float>(), pg, ws.get(), ws.bytes(),
                                           BnPoolGather::kAuto, xa.get());
  CHECK_FALSE(b.ok());
}

TEST_CASE("fused batch norm + ReLU + max pool vector and scalar paths agree bitwise", "[gpu][kernel][bnpool]") {
  CudaContext ctx = make_context();
  Rng rng(93);
  for (GpuDType t : kTypes)
    for (const Geo& g : {Geo{2, 14, 14, 512, 2, 2, 0}, Geo{2, 56, 56, 64, 3, 2, 1}}) {
      const Data d = make_data(rng, t, g, false);
      check_same(tag_of(t, g, 0) + " vector vs scalar", run(ctx, t, g, d, true, 0), run(ctx, t, g, d, true, 1), t);
    }
}

TEST_CASE("fused batch norm + ReLU + max pool captured in a CUDA graph replays bitwise like eager launches",
          "[gpu][kernel][bnpool]") {
  CudaContext ctx = make_context();
  Rng rng(94);
  const GpuDType t = GpuDType::F16;
  for (const Geo& g : {Geo{2, 28, 28, 256, 2, 2, 0}, Geo{2, 56, 56, 64, 3, 2, 1}}) {
    INFO(tag_of(t, g, 0));
    const Pool2dGeom pg = g.pool();
    const Data d = make_data(rng, t, g, false);
    DevBuf x = to_device_as(t, d.x), dyp = to_device_as(t, d.dyp), y(g.pooled() * 2), dx(g.full() * 2);
    DevBuf idx(g.pooled() + 16), gamma = to_device(d.gamma), beta = to_device(d.beta), rm(g.c * 4), rv(g.c * 4);
    DevBuf mean(g.c * 4), invstd(g.c * 4), dgamma(g.c * 4), dbeta(g.c * 4);
    DevBuf ws(batchnorm_workspace_bytes(g.rows(), g.c));
    auto enqueue = [&]() -> Status {
      Status st = batchnorm_fwd_train_pool_cuda(ctx.stream, x.get(), t, gamma.as<float>(), beta.as<float>(), y.get(),
                                                idx.as<uint8_t>(), mean.as<float>(), invstd.as<float>(),
                                                rm.as<float>(), rv.as<float>(), pg, kEps, kMomentum, true, ws.get(),
                                                ws.bytes());
      if (!st) return st;
      return batchnorm_bwd_pool_cuda(ctx.stream, dyp.get(), idx.as<uint8_t>(), x.get(), t, gamma.as<float>(),
                                     beta.as<float>(), mean.as<float>(), invstd.as<float>(), dx.get(),
                                     dgamma.as<float>(), dbeta.as<float>(), pg, ws.get(), ws.bytes());
    };
    auto reset = [&] {
      for (const DevBuf* b : {&y, &dx, &idx, &mean, &invstd, &dgamma, &dbeta}) poison(*b);
      upload(rm.get(), d.rm);
      upload(rv.get(), d.rv);
    };
    auto outputs = [&] {
      return std::vector<std::vector<uint8_t>>{
          bytes_of(y.get(), g.pooled() * 2), bytes_of(dx.get(), g.full() * 2), bytes_of(idx.get(), g.pooled()),
          bytes_of(mean.get(), g.c * 4),     bytes_of(invstd.get(), g.c * 4),  bytes_of(rm.get(), g.c * 4),
          bytes_of(rv.get(), g.c * 4),       bytes_of(dgamma.get(), g.c * 4),  bytes_of(dbeta.get(), g.c * 4)};
    };
    reset();
    REQUIRE_OK(enqueue());
    sync_ok(ctx);
    const auto eager = outputs();
    cudaGraphExec_t exec = capture_graph(ctx, enqueue);
    reset();
    REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
    sync_ok(ctx);
    const auto replay = outputs();
    REQUIRE_CUDA(cudaGraphExecDestroy(exec));
    for (size_t i = 0; i < eager.size(); ++i)
      check_bitwise("bn+pool graph replay output " + std::to_string(i), eager[i], replay[i], 1);
  }
}

TEST_CASE("fused batch norm + max pool launchers reject geometries the kernels cannot run", "[gpu][kernel][bnpool]") {
  CudaContext ctx = make_context();
  DevBuf a(4096), b(4096), p(256), q(256), ws(batchnorm_workspace_bytes(2 * 17 * 17, 4));
  auto f = [](const DevBuf& d) { return d.as<float>(); };
  auto geom = [](int64_t h, int64_t w, int64_t k, int64_t s, bool finish) {
    Pool2dGeom g;
    g.n = 2;
    g.h = h;
    g.w = w;
    g.c = 4;
    g.kh = g.kw = k;
    g.sh = g.sw = s;
    if (finish) REQUIRE(pool2d_geom_finish(g));
    return g;
  };
  // A stride past the kernel, a window of 17 x 17 > 256 elements, and an unfinished geometry (p = q = 0).
  for (const Pool2dGeom& g : {geom(6, 4, 2, 3, true), geom(17, 17, 17, 1, true), geom(6, 6, 3, 2, false)}) {
    INFO("kernel " << g.kh << " stride " << g.sh << " p " << g.p);
    CHECK_FALSE(batchnorm_fwd_train_pool_cuda(ctx.stream, a.get(), GpuDType::F32, f(p), f(q), b.get(),
                                              b.as<uint8_t>(), f(p), f(q), nullptr, nullptr, g, kEps, kMomentum, true,
                                              ws.get(), ws.bytes())
                     .ok());
    CHECK_FALSE(batchnorm_fwd_eval_pool_cuda(ctx.stream, a.get(), GpuDType::F32, f(p), f(q), f(p), f(q), b.get(), g,
                                             kEps, true)
                    .ok());
    CHECK_FALSE(batchnorm_bwd_pool_cuda(ctx.stream, a.get(), b.as<uint8_t>(), b.get(), GpuDType::F32, f(p), f(q),
                                        f(p), f(q), a.get(), f(p), f(q), g, ws.get(), ws.bytes())
                    .ok());
  }
  sync_ok(ctx);
}

namespace {

// conv(bias) 3x3 -> bn -> relu -> max pool 2 -> conv 3x3 (odd channels) -> bn -> relu -> max pool 2 -> conv 3x3 ->
// bn -> relu -> gap -> fc on synthetic 16x16x3 images: 640 / 32 = 20 steps in the epoch. Both pools fuse.
const char* kYaml = R"(
seed: 5
data:
  dataset: synthetic
  synthetic: {train_size: 640, val_size: 96, height: 16, width: 16, channels: 3, classes: 10}
  batch_size: 32
  val_batch_size: 48
  normalization: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}
model:
  layers:
    - {type: conv2d, name: conv1, out_channels: 16, kernel_size: 3, padding: 1, bias: true}
    - {type: batch_norm, name: bn1}
    - {type: relu, name: relu1}
    - {type: max_pool, name: pool1, kernel_size: 2, stride: 2}
    - {type: conv2d, name: conv2, out_channels: 21, kernel_size: 3, padding: 1}
    - {type: batch_norm, name: bn2}
    - {type: relu, name: relu2}
    - {type: max_pool, name: pool2, kernel_size: 2, stride: 2}
    - {type: conv2d, name: conv3, out_channels: 32, kernel_size: 3, padding: 1}
    - {type: batch_norm, name: bn3}
    - {type: relu, name: relu3}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 1.0e-4}
train: {epochs: 1, precision: fp32}
run: {progress: off}
)";

// Trains the yaml's CNN one epoch in fp32 on the CPU and on CUDA (its two max pools fused) and compares.
void check_trains_like_cpu(const std::string& yaml) {
  Result<Spec> sr = spec_parse(yaml, "bn_pool.yaml", {});
  INFO((sr.ok() ? std::string() : sr.error_text()));
  REQUIRE(sr.ok());
  const Spec s = sr.value();
  {
    Result<DataShape> d = data_shape(s);
    REQUIRE(d.ok());
    Result<Compiled> c = compile_spec(s, d.value());
    REQUIRE(c.ok());
    for (const auto& p : c->graph.programs) {
      int fused = 0, pools = 0;
      for (const auto& n : p.nodes) {
        fused += (n.op == OpKind::BatchNorm || n.op == OpKind::BatchNormEval) && n.attrs.pool;
        pools += n.op == OpKind::MaxPool || n.op == OpKind::MaxPoolGrad;
      }
      INFO(p.name);
      CHECK(fused == 2);
      CHECK(pools == 0);
    }
  }
  TrainOptions opt;
  opt.write_run_dir = false;
  Spec cpu = s, gpu = s;
  cpu.train.device = DeviceKind::Cpu;
  gpu.train.device = DeviceKind::Cuda;
  const TrainResult a = train_cuda(cpu, opt), b = train_cuda(gpu, opt);
  CHECK(b.backend == "cuda");
  REQUIRE(a.epochs.size() == 1);
  REQUIRE(b.epochs.size() == 1);
  CHECK(a.epochs[0].step == 20);
  REQUIRE(a.final_weights.size() == b.final_weights.size());
  const double r = testing::rel_diff(b.final_weights, a.final_weights);
  INFO("relative weight difference " << r << "; train loss cpu " << a.epochs[0].train_loss << " gpu "
                                     << b.epochs[0].train_loss << "; val loss cpu " << a.epochs[0].val_loss << " gpu "
                                     << b.epochs[0].val_loss);
  CHECK(r < 2e-3);
  CHECK(std::abs(a.epochs[0].train_loss - b.epochs[0].train_loss) < 2e-3);
  CHECK(std::abs(a.epochs[0].val_loss - b.epochs[0].val_loss) < 5e-3);
}

}  // namespace

TEST_CASE("a CNN of conv-BN-ReLU-pool blocks with fused pools trains on the GPU to the CPU backend's weights (fp32)",
          "[gpu][backend][cnn][bnpool]") {
  check_trains_like_cpu(kYaml);
}

TEST_CASE("a CNN with a fused 3x3/2 pad 1 stem pool trains on the GPU to the CPU backend's weights (fp32)",
          "[gpu][backend][cnn][bnpool]") {
  std::string yaml = kYaml;  // pool1: ResNet's stem pool, 16x16 -> 8x8
  const std::string tiling = "{type: max_pool, name: pool1, kernel_size: 2, stride: 2}";
  const size_t at = yaml.find(tiling);
  REQUIRE(at != std::string::npos);
  yaml.replace(at, tiling.size(), "{type: max_pool, name: pool1, kernel_size: 3, stride: 2, padding: 1}");
  check_trains_like_cpu(yaml);
}
