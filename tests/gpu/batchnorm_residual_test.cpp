// Batch norm with a fused residual add (pass_fuse_bn_add: y = relu?(BN(x) + r)), training and eval forward, against
// the float64 CPU reference (batch norm, then the add, then the ReLU), f32/f16/bf16, with and without the ReLU, y
// written over r (the planner may place it there), and bitwise equal to itself on a rerun.
// Tolerance per element: the batch-norm bound of batchnorm_test.cpp (2u times a bound on every term's magnitude)
// plus 2u |r| for the residual (u = unit roundoff of the activation dtype; 1e-5 relative for f32): the sum is
// formed in fp32 and rounded once.
#include <algorithm>
#include <cmath>

#include "runtime/ops/batchnorm/batchnorm.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
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
