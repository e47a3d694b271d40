// Batch norm kernels vs the float64 CPU reference (runtime/ops/batchnorm/batchnorm.h): training forward (y, saved
// statistics, running statistics), eval, backward with and without the fused ReLU, f32/f16/bf16, odd, ResNet-like
// and large shapes; bitwise reruns, vector vs scalar path, dx aliasing dy, CUDA graph replay, argument errors.
// Tolerances, per element, relative to a scale that bounds the magnitude of every term of the result:
//   f32: 1e-5. The kernels sum at most ~100 terms deep in fp32 (rows of a thread, 16 row groups, strided row-block
//   partials, a 6-level tree), so rounding stays below ~6e-6 of the sum of magnitudes.
//   f16/bf16 activations: inputs are rounded to the dtype first (CPU and GPU see the same values); the output is
//   rounded once more (<= u |value|, u = 2^-11 / 2^-8, and |value| <= scale), so 2u * scale (>= u + 1e-5).
//   fp32 outputs of low-precision runs (statistics, dgamma, dbeta) come from exact inputs: 1e-5.
#include <algorithm>
#include <cmath>

#include "runtime/ops/batchnorm/batchnorm.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

constexpr double kTol32 = 1e-5;
constexpr float kEps = 1e-5f, kMomentum = 0.1f;

double tol_act(GpuDType t) { return t == GpuDType::F32 ? kTol32 : 2 * unit_roundoff(t); }

struct Shape {
  int64_t rows, c;
};
// rows = N*H*W. Tiny, odd c (scalar path), c = 65, ResNet stage-4 tail (c = 2048, few rows), mid, large rows.
const Shape kShapes[] = {{2, 5}, {32, 3}, {50, 65}, {196, 2048}, {1000, 256}, {200000, 64}};

std::string tag_of(GpuDType t, Shape s, const std::string& extra) {
  return std::string(gpu_dtype_name(t)) + " rows=" + std::to_string(s.rows) + " c=" + std::to_string(s.c) + extra;
}

// One case's host data; activations already rounded to the dtype.
struct BnData {
  Shape s;
  std::vector<float> x, dy, relu_y;        // (rows,c)
  std::vector<float> gamma, beta, rm, rv;  // (c)
};

BnData make_data(Rng& rng, GpuDType t, Shape s) {
  BnData d{s, {}, {}, {}, {}, {}, {}, {}};
  const std::vector<float> off = rng.uniform_vec(s.c, -1.0f, 1.0f), sd = rng.uniform_vec(s.c, 0.5f, 2.0f);
  d.x.resize(s.rows * s.c);
  for (int64_t i = 0; i < s.rows * s.c; ++i) d.x[i] = round_to(t, off[i % s.c] + sd[i % s.c] * rng.normal(0, 1));
  d.dy = rng.normal_vec(s.rows * s.c, 0.0f, 1.0f);
  d.relu_y = rng.normal_vec(s.rows * s.c, 0.0f, 1.0f);
  for (auto& v : d.dy) v = round_to(t, v);
  for (auto& v : d.relu_y) v = round_to(t, std::max(v, 0.0f));  // about half masked
  d.gamma = rng.uniform_vec(s.c, -1.5f, 1.5f);
  d.beta = rng.normal_vec(s.c, 0.0f, 0.5f);
  d.rm = rng.normal_vec(s.c, 0.0f, 0.5f);
  d.rv = rng.uniform_vec(s.c, 0.5f, 2.0f);
  return d;
}

char* elem_ptr(const DevBuf& b, GpuDType t, int64_t off) { return b.as<char>() + off * gpu_dtype_size(t); }

// Device copy of v (rounded to t) starting `off` elements into the buffer (off = 1: a misaligned view).
DevBuf upload_at(GpuDType t, const std::vector<float>& v, int64_t off) {
  std::vector<float> pad(off + v.size(), 0.0f);
  std::copy(v.begin(), v.end(), pad.begin() + off);
  return to_device_as(t, pad);
}

DevBuf workspace_for(Shape s) {
  DevBuf ws(batchnorm_workspace_bytes(s.rows, s.c) + 256);
  poison(ws);  // the kernels must not rely on a zeroed workspace
  return ws;
}

struct FwdOut {
  std::vector<float> y, mean, invstd, rm, rv;
};

// sums (2c: sum, then sum of squares of x's rows), when given: passed as BnSums (the statistics from them).
FwdOut gpu_train(const CudaContext& ctx, GpuDType t, const BnData& d, bool relu, int64_t off,
                 const std::vector<float>* sums = nullptr) {
  const int64_t n = d.s.rows * d.s.c;
  DevBuf x = upload_at(t, d.x, off), y((n + off) * gpu_dtype_size(t) + 16);
  DevBuf gamma = to_device(d.gamma), beta = to_device(d.beta), rm = to_device(d.rm), rv = to_device(d.rv);
  DevBuf mean(d.s.c * 4), invstd(d.s.c * 4), ws = workspace_for(d.s);
  DevBuf sd = to_device(sums ? *sums : std::vector<float>(2 * d.s.c, 0.0f));
  const BnSums bs = sums ? BnSums{sd.as<float>(), sd.as<float>() + d.s.c} : BnSums{};
  for (const DevBuf* b : {&y, &mean, &invstd}) poison(*b);
  REQUIRE_OK(batchnorm_fwd_train_cuda(ctx.stream, elem_ptr(x, t, off), t, gamma.as<float>(), beta.as<float>(),
                                      elem_ptr(y, t, off), mean.as<float>(), invstd.as<float>(), rm.as<float>(),
                                      rv.as<float>(), d.s.rows, d.s.c, kEps, kMomentum, relu, ws.get(), ws.bytes(),
                                      nullptr, nullptr, bs));
  sync_ok(ctx);
  return {from_device_as(t, elem_ptr(y, t, off), n), from_device<float>(mean.get(), d.s.c),
          from_device<float>(invstd.get(), d.s.c), from_device<float>(rm.get(), d.s.c),
          from_device<float>(rv.get(), d.s.c)};
}

struct BwdOut {
  std::vector<float> dx, dgamma, dbeta;
};

// Backward with the given saved statistics; alias: dx is written over dy.
BwdOut gpu_bwd(const CudaContext& ctx, GpuDType t, const BnData& d, bool use_relu, const std::vector<float>& mean,
               const std::vector<float>& invstd, int64_t off, bool alias) {
  const int64_t n = d.s.rows * d.s.c;
  DevBuf dy = upload_at(t, d.dy, off), x = upload_at(t, d.x, off), ry = upload_at(t, d.relu_y, off);
  DevBuf dx((n + off) * gpu_dtype_size(t) + 16), dgamma(d.s.c * 4), dbeta(d.s.c * 4), ws = workspace_for(d.s);
  DevBuf gamma = to_device(d.gamma), m = to_device(mean), s = to_device(invstd);
  for (const DevBuf* b : {&dx, &dgamma, &dbeta}) poison(*b);
  char* dxp = alias ? elem_ptr(dy, t, off) : elem_ptr(dx, t, off);
  REQUIRE_OK(batchnorm_bwd_cuda(ctx.stream, elem_ptr(dy, t, off), elem_ptr(x, t, off),
                                use_relu ? elem_ptr(ry, t, off) : nullptr, t, gamma.as<float>(), m.as<float>(),
                                s.as<float>(), dxp, dgamma.as<float>(), dbeta.as<float>(), d.s.rows, d.s.c, ws.get(),
                                ws.bytes()));
  sync_ok(ctx);
  return {from_device_as(t, dxp, n), from_device<float>(dgamma.get(), d.s.c),
          from_device<float>(dbeta.get(), d.s.c)};
}

// float64 reference of the training forward, with per-element bounds (see the file comment).
struct FwdRef {
  std::vector<double> y, mean, invstd, rm, rv;
  std::vector<double> y_bound, mean_bound, invstd_bound, rm_bound, rv_bound;
};

FwdRef ref_train(GpuDType t, const BnData& d, bool relu) {
  const int64_t rows = d.s.rows, c = d.s.c;
  FwdRef r;
  r.y.resize(rows * c), r.mean.resize(c), r.invstd.resize(c), r.rm = to_double(d.rm), r.rv = to_double(d.rv);
  const auto x = to_double(d.x), gamma = to_double(d.gamma), beta = to_double(d.beta);
  batchnorm_fwd_train_cpu<double>(x.data(), gamma.data(), beta.data(), r.y.data(), r.mean.data(), r.invstd.data(),
                                  r.rm.data(), r.rv.data(), rows, c, kEps, kMomentum, nullptr);
  r.y_bound.resize(rows * c);
  for (int64_t i = 0; i < rows * c; ++i) {
    const int64_t j = i % c;
    if (relu) r.y[i] = std::max(r.y[i], 0.0);
    const double xhat = (x[i] - r.mean[j]) * r.invstd[j];
    const double scale = std::fabs(gamma[j]) * (std::fabs(xhat) + 1 + std::fabs(r.mean[j]) * r.invstd[j]) +
                         std::fabs(beta[j]);
    r.y_bound[i] = tol_act(t) * scale;
  }
  for (int64_t j = 0; j < c; ++j) {
    const double sd = 1.0 / r.invstd[j];
    r.mean_bound.push_back(kTol32 * (std::fabs(r.mean[j]) + sd));
    r.invstd_bound.push_back(kTol32 * r.invstd[j]);
    r.rm_bound.push_back(kTol32 * (std::fabs(r.rm[j]) + sd));
    r.rv_bound.push_back(kTol32 * std::fabs(r.rv[j]));
  }
  return r;
}

struct BwdRef {
  std::vector<double> dx, dgamma, dbeta, dx_bound, dgamma_bound, dbeta_bound;
};

BwdRef ref_bwd(GpuDType t, const BnData& d, bool use_relu, const std::vector<float>& mean,
               const std::vector<float>& invstd) {
  const int64_t rows = d.s.rows, c = d.s.c;
  const auto x = to_double(d.x), gamma = to_double(d.gamma), m = to_double(mean), s = to_double(invstd);
  std::vector<double> g(rows * c), abs_g(c, 0.0), abs_gx(c, 0.0);  // g (rows,c); sums of |g|, |g xhat| (c)
  for (int64_t i = 0; i < rows * c; ++i) {
    const int64_t j = i % c;
    g[i] = (use_relu && !(d.relu_y[i] > 0.0f)) ? 0.0 : d.dy[i];
    abs_g[j] += std::fabs(g[i]);
    abs_gx[j] += std::fabs(g[i] * (x[i] - m[j]) * s[j]);
  }
  BwdRef r;
  r.dx.resize(rows * c), r.dgamma.resize(c), r.dbeta.resize(c), r.dx_bound.resize(rows * c);
  batchnorm_grad_cpu<double>(g.data(), x.data(), gamma.data(), m.data(), s.data(), r.dx.data(), r.dgamma.data(),
                             r.dbeta.data(), rows, c, nullptr);
  for (int64_t i = 0; i < rows * c; ++i) {
    const int64_t j = i % c;
    const double xhat = (x[i] - m[j]) * s[j];
    r.dx_bound[i] = tol_act(t) * std::fabs(gamma[j]) * s[j] *
                    (std::fabs(g[i]) + abs_g[j] / rows + std::fabs(xhat) * abs_gx[j] / rows);
  }
  for (int64_t j = 0; j < c; ++j) {
    r.dgamma_bound.push_back(kTol32 * abs_gx[j]);
    r.dbeta_bound.push_back(kTol32 * abs_g[j]);
  }
  return r;
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

void check_bitwise(const std::string& what, const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  CHECK_RESULT(compare_bitwise(what, a.data(), b.data(), a.size() * sizeof(float), 4));
}

const GpuDType kTypes[] = {GpuDType::F32, GpuDType::F16, GpuDType::BF16};

}  // namespace

TEST_CASE("batchnorm training forward matches the float64 reference: y, saved and running statistics",
          "[kernel][batchnorm]") {
  CudaContext ctx = make_context();
  Rng rng(71);
  for (GpuDType t : kTypes)
    for (const Shape& s : kShapes)
      for (bool relu : {false, true}) {
        const std::string tag = tag_of(t, s, relu ? " relu" : "");
        INFO(tag);
        const BnData d = make_data(rng, t, s);
        const FwdRef r = ref_train(t, d, relu);
        const FwdOut o = gpu_train(ctx, t, d, relu, 0);
        CHECK_RESULT(compare_close("bn fwd y " + tag, to_double(o.y), r.y, r.y_bound, s.c));
        CHECK_RESULT(compare_close("bn fwd save_mean " + tag, to_double(o.mean), r.mean, r.mean_bound));
        CHECK_RESULT(compare_close("bn fwd save_invstd " + tag, to_double(o.invstd), r.invstd, r.invstd_bound));
        CHECK_RESULT(compare_close("bn fwd running_mean " + tag, to_double(o.rm), r.rm, r.rm_bound));
        CHECK_RESULT(compare_close("bn fwd running_var " + tag, to_double(o.rv), r.rv, r.rv_bound));
        const FwdOut again = gpu_train(ctx, t, d, relu, 0);  // fresh buffers, same inputs: same bits
        check_bitwise("bn fwd rerun y " + tag, o.y, again.y);
        check_bitwise("bn fwd rerun save_mean " + tag, o.mean, again.mean);
        check_bitwise("bn fwd rerun save_invstd " + tag, o.invstd, again.invstd);
        check_bitwise("bn fwd rerun running_var " + tag, o.rv, again.rv);
      }
}

// The statistics from per-channel sums (BnSums: a fused conv's genstats) instead of the statistics pass: the sums
// are formed here in float64 and rounded to f32 as cuDNN hands them over; mean = sum / n and var = sqsum / n -
// mean^2 in double lose at most ~(1 + mean^2 / var) * 2^-24 relative to the exact variance (<= 5 here: |offset| <=
// 1, sd >= 0.5), far inside the statistics pass's bounds, which apply unchanged.
TEST_CASE("batchnorm training forward from given sums (BnSums) matches the float64 reference",
          "[kernel][batchnorm]") {
  CudaContext ctx = make_context();
  Rng rng(77);
  for (GpuDType t : kTypes)
    for (const Shape& s : kShapes)
      for (bool relu : {false, true}) {
        const std::string tag = tag_of(t, s, relu ? " relu, from sums" : " from sums");
        INFO(tag);
        const BnData d = make_data(rng, t, s);
        std::vector<double> sum(s.c, 0.0), sq(s.c, 0.0);
        for (int64_t i = 0; i < s.rows * s.c; ++i) {
          sum[i % s.c] += d.x[i];
          sq[i % s.c] += static_cast<double>(d.x[i]) * d.x[i];
        }
        std::vector<float> sums(2 * s.c);
        for (int64_t j = 0; j < s.c; ++j) {
          sums[j] = static_cast<float>(sum[j]);
          sums[s.c + j] = static_cast<float>(sq[j]);
        }
        const FwdRef r = ref_train(t, d, relu);
        const FwdOut o = gpu_train(ctx, t, d, relu, 0, &sums);
        CHECK_RESULT(compare_close("bn fwd (sums) y " + tag, to_double(o.y), r.y, r.y_bound, s.c));
        CHECK_RESULT(compare_close("bn fwd (sums) save_mean " + tag, to_double(o.mean), r.mean, r.mean_bound));
        CHECK_RESULT(compare_close("bn fwd (sums) save_invstd " + tag, to_double(o.invstd), r.invstd, r.invstd_bound));
        CHECK_RESULT(compare_close("bn fwd (sums) running_mean " + tag, to_double(o.rm), r.rm, r.rm_bound));
        CHECK_RESULT(compare_close("bn fwd (sums) running_var " + tag, to_double(o.rv), r.rv, r.rv_bound));
      }
}

// Without the apply (a consumer conv applies it: train.conv_bn_apply): the statistics and running statistics are
// bitwise those of the full training forward (same passes), and the (2, c) scale and shift are gamma * invstd and
// beta - mean * gamma * invstd rounded to f16 (within half an f16 ulp of the float64 value plus the fp32 product's
// rounding) or kept in f32 (1e-6 relative).
TEST_CASE("batchnorm training forward without the apply writes the statistics and the f16/f32 scale and shift",
          "[kernel][batchnorm]") {
  CudaContext ctx = make_context();
  Rng rng(78);
  for (GpuDType t : kTypes)
    for (const Shape& s : kShapes)
      for (GpuDType affine : {GpuDType::F16, GpuDType::F32}) {
        const std::string tag = tag_of(t, s, affine == GpuDType::F16 ? " consts f16" : " consts f32");
        INFO(tag);
        const BnData d = make_data(rng, t, s);
        const FwdOut full = gpu_train(ctx, t, d, true, 0);
        DevBuf x = upload_at(t, d.x, 0), gamma = to_device(d.gamma), beta = to_device(d.beta), rm = to_device(d.rm),
               rv = to_device(d.rv), mean(s.c * 4), invstd(s.c * 4), ws = workspace_for(s), consts(s.c * 8);
        REQUIRE_OK(batchnorm_fwd_train_consts_cuda(ctx.stream, x.get(), t, gamma.as<float>(), beta.as<float>(),
                                                   mean.as<float>(), invstd.as<float>(), rm.as<float>(),
                                                   rv.as<float>(), s.rows, s.c, kEps, kMomentum, ws.get(), ws.bytes(),
                                                   nullptr, BnSums{}, consts.get(), affine));
        sync_ok(ctx);
        check_bitwise("consts save_mean " + tag, from_device<float>(mean.get(), s.c), full.mean);
        check_bitwise("consts save_invstd " + tag, from_device<float>(invstd.get(), s.c), full.invstd);
        check_bitwise("consts running_mean " + tag, from_device<float>(rm.get(), s.c), full.rm);
        check_bitwise("consts running_var " + tag, from_device<float>(rv.get(), s.c), full.rv);
        const std::vector<float> got = affine == GpuDType::F16 ? from_device_as(GpuDType::F16, consts.get(), 2 * s.c)
                                                               : from_device<float>(consts.get(), 2 * s.c);
        std::vector<double> want(2 * s.c), bound(2 * s.c);
        const double u = affine == GpuDType::F16 ? unit_roundoff(GpuDType::F16) : 1e-6;
        for (int64_t j = 0; j < s.c; ++j) {
          const double scale = static_cast<double>(d.gamma[j]) * full.invstd[j];
          want[j] = scale;
          want[s.c + j] = d.beta[j] - static_cast<double>(full.mean[j]) * scale;
          // + 6e-8: f16 subnormals are spaced 2^-24 apart
          bound[j] = u * std::fabs(scale) + 1e-7 * std::fabs(scale) + 6e-8;
          bound[s.c + j] =
              u * std::fabs(want[s.c + j]) + 1e-6 * (std::fabs(d.beta[j]) + std::fabs(full.mean[j] * scale)) + 6e-8;
        }
        CHECK_RESULT(compare_close("consts scale/shift " + tag, to_double(got), want, bound));
      }
}

TEST_CASE("batchnorm eval forward normalises with the running statistics", "[kernel][batchnorm]") {
  CudaContext ctx = make_context();
  Rng rng(72);
  for (GpuDType t : kTypes)
    for (const Shape& s : kShapes)
      for (bool relu : {false, true}) {
        const std::string tag = tag_of(t, s, relu ? " relu" : "");
        INFO(tag);
        const BnData d = make_data(rng, t, s);
        const int64_t n = s.rows * s.c;
        const auto x = to_double(d.x), gamma = to_double(d.gamma), beta = to_double(d.beta);
        const auto rm = to_double(d.rm), rv = to_double(d.rv);
        std::vector<double> ref(n), bound(n);
        batchnorm_fwd_eval_cpu<double>(x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), ref.data(), s.rows,
                                       s.c, kEps, nullptr);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t j = i % s.c;
          const double invstd = 1.0 / std::sqrt(rv[j] + kEps);
          if (relu) ref[i] = std::max(ref[i], 0.0);
          bound[i] = tol_act(t) * (std::fabs(gamma[j]) * invstd * (std::fabs(x[i] - rm[j]) + std::fabs(rm[j]) + 1) +
                                   std::fabs(beta[j]));
        }
        DevBuf dx = to_device_as(t, d.x), dy(n * gpu_dtype_size(t) + 16);
        DevBuf dg = to_device(d.gamma), db = to_device(d.beta), drm = to_device(d.rm), drv = to_device(d.rv);
        poison(dy);
        REQUIRE_OK(batchnorm_fwd_eval_cuda(ctx.stream, dx.get(), t, dg.as<float>(), db.as<float>(), drm.as<float>(),
                                           drv.as<float>(), dy.get(), s.rows, s.c, kEps, relu));
        sync_ok(ctx);
        CHECK_RESULT(compare_close("bn eval y " + tag, to_double(from_device_as(t, dy.get(), n)), ref, bound, s.c));
      }
}

TEST_CASE("batchnorm backward matches the float64 reference with and without the fused ReLU mask",
          "[kernel][batchnorm]") {
  CudaContext ctx = make_context();
  Rng rng(73);
  for (GpuDType t : kTypes)
    for (const Shape& s : kShapes)
      for (bool use_relu : {false, true}) {
        const std::string tag = tag_of(t, s, use_relu ? " relu_y" : "");
        INFO(tag);
        const BnData d = make_data(rng, t, s);
        const FwdRef f = ref_train(t, d, use_relu);
        const std::vector<float> mean = to_float(f.mean), invstd = to_float(f.invstd);
        const BwdRef r = ref_bwd(t, d, use_relu, mean, invstd);
        const BwdOut o = gpu_bwd(ctx, t, d, use_relu, mean, invstd, 0, false);
        CHECK_RESULT(compare_close("bn bwd dx " + tag, to_double(o.dx), r.dx, r.dx_bound, s.c));
        CHECK_RESULT(compare_close("bn bwd dgamma " + tag, to_double(o.dgamma), r.dgamma, r.dgamma_bound));
        CHECK_RESULT(compare_close("bn bwd dbeta " + tag, to_double(o.dbeta), r.dbeta, r.dbeta_bound));
        const BwdOut again = gpu_bwd(ctx, t, d, use_relu, mean, invstd, 0, false);
        check_bitwise("bn bwd rerun dx " + tag, o.dx, again.dx);
        check_bitwise("bn bwd rerun dgamma " + tag, o.dgamma, again.dgamma);
        check_bitwise("bn bwd rerun dbeta " + tag, o.dbeta, again.dbeta);
        const BwdOut aliased = gpu_bwd(ctx, t, d, use_relu, mean, invstd, 0, true);  // dx written over dy
        check_bitwise("bn bwd dx aliasing dy " + tag, o.dx, aliased.dx);
        check_bitwise("bn bwd dgamma with dx aliasing dy " + tag, o.dgamma, aliased.dgamma);
      }
}

// Backward of a fused ReLU given the forward's stored output y (relu_y) or, with relu_beta, the mask recomputed from
// x: the two must agree bitwise (dx, dgamma, dbeta), including values that round to 0 in the dtype.
BwdOut gpu_bwd_mask(const CudaContext& ctx, GpuDType t, const BnData& d, const std::vector<float>& y,
                    const std::vector<float>& mean, const std::vector<float>& invstd, bool recompute, int64_t off) {
  const int64_t n = d.s.rows * d.s.c;
  DevBuf dy = upload_at(t, d.dy, off), x = upload_at(t, d.x, off), ry = upload_at(t, y, off);
  DevBuf dx((n + off) * gpu_dtype_size(t) + 16), dgamma(d.s.c * 4), dbeta(d.s.c * 4), ws = workspace_for(d.s);
  DevBuf gamma = to_device(d.gamma), beta = to_device(d.beta), m = to_device(mean), s = to_device(invstd);
  for (const DevBuf* b : {&dx, &dgamma, &dbeta}) poison(*b);
  REQUIRE_OK(batchnorm_bwd_cuda(ctx.stream, elem_ptr(dy, t, off), elem_ptr(x, t, off),
                                recompute ? nullptr : elem_ptr(ry, t, off), t, gamma.as<float>(), m.as<float>(),
                                s.as<float>(), elem_ptr(dx, t, off), dgamma.as<float>(), dbeta.as<float>(), d.s.rows,
                                d.s.c, ws.get(), ws.bytes(), recompute ? beta.as<float>() : nullptr));
  sync_ok(ctx);
  return {from_device_as(t, elem_ptr(dx, t, off), n), from_device<float>(dgamma.get(), d.s.c),
          from_device<float>(dbeta.get(), d.s.c)};
}

TEST_CASE("batchnorm backward with the ReLU mask recomputed from x equals the one reading the stored y, bitwise",
          "[kernel][batchnorm]") {
  CudaContext ctx = make_context();
  Rng rng(77);
  for (GpuDType t : kTypes)
    for (const Shape& s : {Shape{2, 5}, Shape{50, 65}, Shape{1000, 64}, Shape{196, 2048}, Shape{20000, 64}})
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        const std::string tag = tag_of(t, s, off ? " misaligned" : "");
        INFO(tag);
        BnData d = make_data(rng, t, s);
        // Every third channel: outputs of order 1e-6 around 0 (subnormal or 0 in f16, rounded away in bf16 only
        // at smaller scales): the mask must follow the rounding of the stored y, not the sign of the fp32 value.
        for (int64_t ch = 0; ch < s.c; ch += 3) {
          d.gamma[ch] = 1e-6f;
          d.beta[ch] = (ch % 2 ? 1 : -1) * 3e-8f;
        }
        const FwdOut f = gpu_train(ctx, t, d, true, off);
        int64_t zeros = 0, kept = 0;
        for (float v : f.y) (v > 0.0f ? kept : zeros) += 1;
        INFO("forward y: " << kept << " positive, " << zeros << " zero");
        const BwdOut stored = gpu_bwd_mask(ctx, t, d, f.y, f.mean, f.invstd, false, off);
        const BwdOut recomputed = gpu_bwd_mask(ctx, t, d, f.y, f.mean, f.invstd, true, off);
        check_bitwise("bn bwd dx, mask recomputed vs stored y " + tag, stored.dx, recomputed.dx);
        check_bitwise("bn bwd dgamma, mask recomputed vs stored y " + tag, stored.dgamma, recomputed.dgamma);
        check_bitwise("bn bwd dbeta, mask recomputed vs stored y " + tag, stored.dbeta, recomputed.dbeta);
      }
}

TEST_CASE("batchnorm vector and scalar paths give bitwise identical results", "[kernel][batchnorm]") {
  // A view one element off a 16-byte boundary takes the scalar path; the summation order is the same by design.
  CudaContext ctx = make_context();
  Rng rng(74);
  for (GpuDType t : kTypes)
    for (const Shape& s : {Shape{1000, 64}, Shape{196, 2048}, Shape{50, 66}}) {
      const std::string tag = tag_of(t, s, "");
      INFO(tag);
      const BnData d = make_data(rng, t, s);
      const FwdOut vec = gpu_train(ctx, t, d, true, 0), sca = gpu_train(ctx, t, d, true, 1);
      check_bitwise("bn fwd y vector vs scalar " + tag, vec.y, sca.y);
      check_bitwise("bn fwd save_mean vector vs scalar " + tag, vec.mean, sca.mean);
      check_bitwise("bn fwd save_invstd vector vs scalar " + tag, vec.invstd, sca.invstd);
      const BwdOut bv = gpu_bwd(ctx, t, d, true, vec.mean, vec.invstd, 0, false);
      const BwdOut bs = gpu_bwd(ctx, t, d, true, vec.mean, vec.invstd, 1, false);
      check_bitwise("bn bwd dx vector vs scalar " + tag, bv.dx, bs.dx);
      check_bitwise("bn bwd dgamma vector vs scalar " + tag, bv.dgamma, bs.dgamma);
      check_bitwise("bn bwd dbeta vector vs scalar " + tag, bv.dbeta, bs.dbeta);
    }
}

TEST_CASE("batchnorm forward and backward captured in a CUDA graph replay bitwise like eager launches",
          "[kernel][batchnorm]") {
  CudaContext ctx = make_context();
  Rng rng(75);
  const GpuDType t = GpuDType::F16;
  const Shape s{1000, 64};
  const int64_t n = s.rows * s.c;
  const BnData d = make_data(rng, t, s);
  DevBuf x = to_device_as(t, d.x), dy = to_device_as(t, d.dy), y(n * 2), dx(n * 2);
  DevBuf gamma = to_device(d.gamma), beta = to_device(d.beta), rm(s.c * 4), rv(s.c * 4);
  DevBuf mean(s.c * 4), invstd(s.c * 4), dgamma(s.c * 4), dbeta(s.c * 4), ws = workspace_for(s);
  // Forward with the fused ReLU, then the backward masked by its output y.
  auto enqueue = [&]() -> Status {
    Status st = batchnorm_fwd_train_cuda(ctx.stream, x.get(), t, gamma.as<float>(), beta.as<float>(), y.get(),
                                         mean.as<float>(), invstd.as<float>(), rm.as<float>(), rv.as<float>(), s.rows,
                                         s.c, kEps, kMomentum, true, ws.get(), ws.bytes());
    if (!st) return st;
    return batchnorm_bwd_cuda(ctx.stream, dy.get(), x.get(), y.get(), t, gamma.as<float>(), mean.as<float>(),
                              invstd.as<float>(), dx.get(), dgamma.as<float>(), dbeta.as<float>(), s.rows, s.c,
                              ws.get(), ws.bytes());
  };
  auto reset = [&] {
    for (const DevBuf* b : {&y, &dx, &mean, &invstd, &dgamma, &dbeta}) poison(*b);
    upload(rm.get(), d.rm);
    upload(rv.get(), d.rv);
  };
  auto outputs = [&] {
    return std::vector<std::vector<float>>{
        from_device_as(t, y.get(), n),           from_device_as(t, dx.get(), n),
        from_device<float>(mean.get(), s.c),     from_device<float>(invstd.get(), s.c),
        from_device<float>(rm.get(), s.c),       from_device<float>(rv.get(), s.c),
        from_device<float>(dgamma.get(), s.c),   from_device<float>(dbeta.get(), s.c)};
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
    check_bitwise("bn graph replay output " + std::to_string(i), eager[i], replay[i]);
}

TEST_CASE("batchnorm launchers reject bad arguments without launching", "[kernel][batchnorm]") {
  CudaContext ctx = make_context();
  const int64_t rows = 8, c = 4;
  DevBuf a(rows * c * 4), b(rows * c * 4), p(c * 4), q(c * 4), ws(batchnorm_workspace_bytes(rows, c));
  const GpuDType t = GpuDType::F32;
  float* f = p.as<float>();
  auto train = [&](int64_t r, void* w, size_t wb) {
    return batchnorm_fwd_train_cuda(ctx.stream, a.get(), t, f, f, b.get(), q.as<float>(), q.as<float>(), nullptr,
                                    nullptr, r, c, kEps, kMomentum, false, w, wb);
  };
  CHECK_FALSE(train(1, ws.get(), ws.bytes()).ok());  // PyTorch: more than one value per channel in training
  CHECK_FALSE(train(rows, nullptr, 0).ok());
  CHECK_FALSE(train(rows, ws.get(), ws.bytes() - 1).ok());
  CHECK_FALSE(batchnorm_fwd_train_cuda(ctx.stream, nullptr, t, f, f, b.get(), f, f, nullptr, nullptr, rows, c, kEps,
                                       kMomentum, false, ws.get(), ws.bytes())
                  .ok());
  CHECK_FALSE(batchnorm_fwd_eval_cuda(ctx.stream, a.get(), t, f, f, f, f, b.get(), rows, 0, kEps, false).ok());
  CHECK(batchnorm_fwd_eval_cuda(ctx.stream, nullptr, t, f, f, f, f, nullptr, 0, c, kEps, false).ok());  // rows 0
  // dx may alias dy but not x.
  CHECK_FALSE(batchnorm_bwd_cuda(ctx.stream, b.get(), a.get(), nullptr, t, f, f, f, a.get(), f, f, rows, c, ws.get(),
                                 ws.bytes())
                  .ok());
  CHECK_FALSE(batchnorm_bwd_cuda(ctx.stream, b.get(), a.get(), nullptr, t, f, f, f, b.get(), f, f, rows, c, nullptr,
                                 0)
                  .ok());
  sync_ok(ctx);
}
