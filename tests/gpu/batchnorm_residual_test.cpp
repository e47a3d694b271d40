// Batch norm with a fused residual add (pass_fuse_bn_add: y = relu?(BN(x) + r)), training and eval forward, against
// the float64 CPU reference (batch norm, then the add, then the ReLU), f32/f16/bf16, with and without the ReLU, y
// written over r (the planner may place it there), and bitwise equal to itself on a rerun. Its backward
// (pass_fuse_bn_relu_grad): batchnorm_bwd_cuda storing the masked gradient g_out equals relu_bwd_cuda followed by
// the plain backward reading that gradient, bitwise (g, dx, dgamma, dbeta), with NaN and -0 in dy and y.
// Tolerance per element: the batch-norm bound of batchnorm_test.cpp (2u times a bound on every term's magnitude)
// plus 2u |r| for the residual (u = unit roundoff of the activation dtype; 1e-5 relative for f32): the sum is
// formed in fp32 and rounded once.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/ops/batchnorm/batchnorm.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "runtime/ops/relu/relu_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

constexpr float kEps = 1e-5f, kMomentum = 0.1f;
double tol_of(GpuDType t) { return t == GpuDType::F32 ? 1e-5 : 2 * unit_roundoff(t); }

struct Case {
  int64_t rows, c;
};
const Case kCases[] = {{2, 5}, {50, 65}, {196, 2048}, {25088, 256}};  // scalar path, odd c, stage-4 tail, stage-1
const GpuDType kTypes[] = {GpuDType::F32, GpuDType::F16, GpuDType::BF16};

struct Data {
  std::vector<float> x, r, gamma, beta, rm, rv;
};

Data make(Rng& rng, GpuDType t, Case s) {
  Data d;
  const std::vector<float> off = rng.uniform_vec(s.c, -1.0f, 1.0f), sd = rng.uniform_vec(s.c, 0.5f, 2.0f);
  for (int64_t i = 0; i < s.rows * s.c; ++i) d.x.push_back(round_to(t, off[i % s.c] + sd[i % s.c] * rng.normal(0, 1)));
  d.r = rng.normal_vec(s.rows * s.c, 0.0f, 1.0f);
  for (auto& v : d.r) v = round_to(t, v);
  d.gamma = rng.uniform_vec(s.c, -1.5f, 1.5f);
  d.beta = rng.normal_vec(s.c, 0.0f, 0.5f);
  d.rm = rng.normal_vec(s.c, 0.0f, 0.5f);
  d.rv = rng.uniform_vec(s.c, 0.5f, 2.0f);
  return d;
}

// Reference y and per-element bound; eval uses the running statistics, train the batch statistics.
void reference(GpuDType t, Case s, const Data& d, bool eval, bool relu, std::vector<double>& y,
               std::vector<double>& bound) {
  const int64_t n = s.rows * s.c;
  const auto x = to_double(d.x), r = to_double(d.r), g = to_double(d.gamma), b = to_double(d.beta);
  auto rm = to_double(d.rm), rv = to_double(d.rv);
  std::vector<double> mean(s.c), invstd(s.c);
  y.assign(n, 0.0);
  if (eval) {
    batchnorm_fwd_eval_cpu<double>(x.data(), g.data(), b.data(), rm.data(), rv.data(), y.data(), s.rows, s.c, kEps,
                                   nullptr);
    for (int64_t j = 0; j < s.c; ++j) mean[j] = rm[j], invstd[j] = 1.0 / std::sqrt(rv[j] + kEps);
  } else {
    batchnorm_fwd_train_cpu<double>(x.data(), g.data(), b.data(), y.data(), mean.data(), invstd.data(), rm.data(),
                                    rv.data(), s.rows, s.c, kEps, kMomentum, nullptr);
  }
  bound.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = i % s.c;
    y[i] += r[i];
    if (relu) y[i] = std::max(y[i], 0.0);
    const double scale = std::fabs(g[j]) * invstd[j] * (std::fabs(x[i] - mean[j]) + std::fabs(mean[j]) + 1) +
                         std::fabs(b[j]) + std::fabs(r[i]);
    bound[i] = tol_of(t) * scale;
  }
}

// Runs the kernel; over_r: y written over r's buffer.
std::vector<float> run(const CudaContext& ctx, GpuDType t, Case s, const Data& d, bool eval, bool relu, bool over_r) {
  const int64_t n = s.rows * s.c;
  DevBuf x = to_device_as(t, d.x), r = to_device_as(t, d.r), y(n * gpu_dtype_size(t) + 16);
  DevBuf g = to_device(d.gamma), b = to_device(d.beta), rm = to_device(d.rm), rv = to_device(d.rv);
  DevBuf mean(s.c * 4), invstd(s.c * 4), ws(batchnorm_workspace_bytes(s.rows, s.c) + 256);
  poison(y);
  poison(ws);
  void* out = over_r ? r.get() : y.get();
  if (eval)
    REQUIRE_OK(batchnorm_fwd_eval_cuda(ctx.stream, x.get(), t, g.as<float>(), b.as<float>(), rm.as<float>(),
                                       rv.as<float>(), out, s.rows, s.c, kEps, relu, r.get()));
  else
    REQUIRE_OK(batchnorm_fwd_train_cuda(ctx.stream, x.get(), t, g.as<float>(), b.as<float>(), out, mean.as<float>(),
                                        invstd.as<float>(), rm.as<float>(), rv.as<float>(), s.rows, s.c, kEps,
                                        kMomentum, relu, ws.get(), ws.bytes(), r.get()));
  sync_ok(ctx);
  return from_device_as(t, out, n);
}

}  // namespace

TEST_CASE("batchnorm with a fused residual add equals batch norm, add, ReLU in float64 (train and eval)",
          "[kernel][batchnorm][residual]") {
  CudaContext ctx = make_context();
  Rng rng(171);
  for (GpuDType t : kTypes)
    for (const Case& s : kCases)
      for (bool eval : {false, true})
        for (bool relu : {false, true}) {
          const std::string tag = std::string(gpu_dtype_name(t)) + " rows=" + std::to_string(s.rows) +
                                  " c=" + std::to_string(s.c) + (eval ? " eval" : " train") + (relu ? " relu" : "");
          INFO(tag);
          const Data d = make(rng, t, s);
          std::vector<double> ref, bound;
          reference(t, s, d, eval, relu, ref, bound);
          const std::vector<float> y = run(ctx, t, s, d, eval, relu, false);
          CHECK_RESULT(compare_close("bn+residual " + tag, to_double(y), ref, bound, s.c));
          const std::vector<float> over = run(ctx, t, s, d, eval, relu, true);  // y over r: same bits
          REQUIRE(over.size() == y.size());
          CHECK_RESULT(compare_bitwise("bn+residual in place " + tag, over.data(), y.data(), y.size() * 4, 4));
        }
}

namespace {

// The residual block's backward both ways: fused (g_out) or relu_bwd_cuda then the unmasked backward. off: every
// tensor a view `off` elements into its buffer (1: the scalar path). Returns g, dx, dgamma, dbeta concatenated.
std::vector<float> residual_bwd(const CudaContext& ctx, GpuDType t, Case s, const std::vector<float>& dy,
                                const std::vector<float>& x, const std::vector<float>& y, const Data& d,
                                const std::vector<float>& mean, const std::vector<float>& invstd, bool fused,
                                int64_t off) {
  const int64_t n = s.rows * s.c, es = gpu_dtype_size(t);
  auto upload = [&](const std::vector<float>& v) {
    std::vector<float> pad(static_cast<size_t>(off), 0.0f);
    pad.insert(pad.end(), v.begin(), v.end());
    return to_device_as(t, pad);
  };
  DevBuf dyb = upload(dy), xb = upload(x), yb = upload(y), g((n + off) * es + 16), dx((n + off) * es + 16);
  DevBuf gamma = to_device(d.gamma), m = to_device(mean), is = to_device(invstd);
  DevBuf dgamma(s.c * 4), dbeta(s.c * 4), ws(batchnorm_workspace_bytes(s.rows, s.c) + 256);
  for (const DevBuf* b : {&g, &dx, &dgamma, &dbeta, &ws}) poison(*b);
  auto at = [&](const DevBuf& b) { return b.as<char>() + off * es; };
  if (fused) {
    REQUIRE_OK(batchnorm_bwd_cuda(ctx.stream, at(dyb), at(xb), at(yb), t, gamma.as<float>(), m.as<float>(),
                                  is.as<float>(), at(dx), dgamma.as<float>(), dbeta.as<float>(), s.rows, s.c,
                                  ws.get(), ws.bytes(), nullptr, at(g)));
  } else {
    REQUIRE_OK(relu_bwd_cuda(ctx.stream, at(yb), at(dyb), at(g), n, t));
    REQUIRE_OK(batchnorm_bwd_cuda(ctx.stream, at(g), at(xb), nullptr, t, gamma.as<float>(), m.as<float>(),
                                  is.as<float>(), at(dx), dgamma.as<float>(), dbeta.as<float>(), s.rows, s.c,
                                  ws.get(), ws.bytes()));
  }
  sync_ok(ctx);
  std::vector<float> out = from_device_as(t, at(g), n);
  for (const std::vector<float>& v : {from_device_as(t, at(dx), n), from_device<float>(dgamma.get(), s.c),
                                      from_device<float>(dbeta.get(), s.c)})
    out.insert(out.end(), v.begin(), v.end());
  return out;
}

}  // namespace

TEST_CASE("batchnorm backward storing the masked gradient equals relu backward + batchnorm backward, bitwise",
          "[kernel][batchnorm][residual]") {
  CudaContext ctx = make_context();
  Rng rng(172);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (GpuDType t : kTypes)
    for (const Case& s : kCases)
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        const std::string tag = std::string(gpu_dtype_name(t)) + " rows=" + std::to_string(s.rows) +
                                " c=" + std::to_string(s.c) + (off ? " misaligned" : "");
        INFO(tag);
        const Data d = make(rng, t, s);
        const int64_t n = s.rows * s.c;
        std::vector<float> dy = rng.normal_vec(n, 0.0f, 1.0f), y = rng.normal_vec(n, 0.0f, 1.0f);
        for (auto& v : dy) v = round_to(t, v);
        for (auto& v : y) v = round_to(t, std::max(v, 0.0f));  // about half masked
        y[0] = -0.0f, dy[1] = -0.0f, y[1] = 1.0f;               // a masked -0 y; a kept -0 dy
        if (n > 8) y[2] = nan, dy[3] = nan, y[3] = 1.0f, dy[4] = nan, y[4] = 0.0f;  // NaN y masks; a kept NaN dy
        std::vector<float> mean(s.c), invstd(s.c);
        for (int64_t j = 0; j < s.c; ++j) mean[j] = 0.1f * static_cast<float>(j % 7), invstd[j] = 0.5f + 0.01f * j;
        const std::vector<float> fused = residual_bwd(ctx, t, s, dy, d.x, y, d, mean, invstd, true, off);
        const std::vector<float> plain = residual_bwd(ctx, t, s, dy, d.x, y, d, mean, invstd, false, off);
        REQUIRE(fused.size() == plain.size());
        CHECK_RESULT(compare_bitwise("masked g, dx, dgamma, dbeta " + tag, fused.data(), plain.data(),
                                     fused.size() * 4, 4));
      }
}
