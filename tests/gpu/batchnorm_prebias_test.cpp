// Batch norm with a folded conv bias (pass_fold_conv_bias: the kernels take the conv bias b as `prebias`, x standing
// for x + b), training and eval forward, against the float64 CPU reference with the same prebias (itself checked
// against batch norm of x + b in runtime/ops/batchnorm/batchnorm_test.cpp), f32/f16/bf16, plain, with the ReLU, and
// with the ReLU and a residual; train: y, the saved mean and invstd of x, the running statistics of x + b. Bitwise
// equal to itself on a rerun, and a prebias of zeros gives bitwise the results without one.
// Tolerances: as batchnorm_test.cpp / batchnorm_residual_test.cpp (2u times a bound on every term's magnitude, u the
// activation dtype's unit roundoff, 1e-5 relative for f32 and for the fp32 statistics), the running mean's bound
// adding |b| (mean + b is formed in fp32), eval's |running_mean - b| in the term bound (formed in fp32).
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

struct Case {
  int64_t rows, c;
};
const Case kCases[] = {{2, 5}, {50, 65}, {196, 2048}, {25088, 256}};  // scalar path, odd c, stage-4 tail, VGG-like
const GpuDType kTypes[] = {GpuDType::F32, GpuDType::F16, GpuDType::BF16};

struct Variant {
  bool relu, residual;
  const char* name;
};
const Variant kVariants[] = {{false, false, ""}, {true, false, " relu"}, {true, true, " relu+residual"}};

struct Data {
  std::vector<float> x, r, b, gamma, beta, rm, rv;
};

Data make(Rng& rng, GpuDType t, Case s) {
  Data d;
  const std::vector<float> off = rng.uniform_vec(s.c, -1.0f, 1.0f), sd = rng.uniform_vec(s.c, 0.5f, 2.0f);
  for (int64_t i = 0; i < s.rows * s.c; ++i) d.x.push_back(round_to(t, off[i % s.c] + sd[i % s.c] * rng.normal(0, 1)));
  d.r = rng.normal_vec(s.rows * s.c, 0.0f, 1.0f);
  for (auto& v : d.r) v = round_to(t, v);
  d.b = rng.uniform_vec(s.c, -3.0f, 3.0f);  // conv biases, larger than the spread of x's channel means
  d.gamma = rng.uniform_vec(s.c, -1.5f, 1.5f);
  d.beta = rng.normal_vec(s.c, 0.0f, 0.5f);
  d.rm = rng.normal_vec(s.c, 0.0f, 0.5f);
  d.rv = rng.uniform_vec(s.c, 0.5f, 2.0f);
  return d;
}

struct Out {
  std::vector<float> y, mean, invstd, rm, rv;  // train: all; eval: y
};

struct Ref {
  std::vector<double> y, mean, invstd, rm, rv;
  std::vector<double> y_bound, mean_bound, invstd_bound, rm_bound, rv_bound;
};

Ref reference(GpuDType t, Case s, const Data& d, bool eval, Variant v) {
  const int64_t n = s.rows * s.c;
  const auto x = to_double(d.x), r = to_double(d.r), b = to_double(d.b), g = to_double(d.gamma);
  const auto beta = to_double(d.beta);
  Ref o;
  o.rm = to_double(d.rm), o.rv = to_double(d.rv);
  o.y.assign(n, 0.0);
  o.mean.resize(s.c), o.invstd.resize(s.c);
  std::vector<double> centre(s.c);  // what x is centred by: the batch mean of x, or running_mean - b
  if (eval) {
    batchnorm_fwd_eval_cpu<double>(x.data(), g.data(), beta.data(), o.rm.data(), o.rv.data(), o.y.data(), s.rows, s.c,
                                   kEps, nullptr, b.data());
    for (int64_t j = 0; j < s.c; ++j) centre[j] = o.rm[j] - b[j], o.invstd[j] = 1.0 / std::sqrt(o.rv[j] + kEps);
  } else {
    batchnorm_fwd_train_cpu<double>(x.data(), g.data(), beta.data(), o.y.data(), o.mean.data(), o.invstd.data(),
                                    o.rm.data(), o.rv.data(), s.rows, s.c, kEps, kMomentum, nullptr, b.data());
    centre = o.mean;
  }
  o.y_bound.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = i % s.c;
    if (v.residual) o.y[i] += r[i];
    if (v.relu) o.y[i] = std::max(o.y[i], 0.0);
    const double scale = std::fabs(g[j]) * o.invstd[j] * (std::fabs(x[i] - centre[j]) + std::fabs(centre[j]) + 1) +
                         std::fabs(beta[j]) + (v.residual ? std::fabs(r[i]) : 0.0);
    o.y_bound[i] = tol_act(t) * scale;
  }
  for (int64_t j = 0; j < s.c && !eval; ++j) {
    const double sd = 1.0 / o.invstd[j];
    o.mean_bound.push_back(kTol32 * (std::fabs(o.mean[j]) + sd));
    o.invstd_bound.push_back(kTol32 * o.invstd[j]);
    o.rm_bound.push_back(kTol32 * (std::fabs(o.rm[j]) + sd + std::fabs(b[j])));
    o.rv_bound.push_back(kTol32 * std::fabs(o.rv[j]));
  }
  return o;
}

// Runs the kernel; zero_prebias: a prebias of zeros instead of d.b; no_prebias: nullptr.
Out run(const CudaContext& ctx, GpuDType t, Case s, const Data& d, bool eval, Variant v, bool zero_prebias = false,
        bool no_prebias = false) {
  const int64_t n = s.rows * s.c;
  DevBuf x = to_device_as(t, d.x), r = to_device_as(t, d.r), y(n * gpu_dtype_size(t) + 16);
  DevBuf g = to_device(d.gamma), be = to_device(d.beta), rm = to_device(d.rm), rv = to_device(d.rv);
  DevBuf pb = to_device(zero_prebias ? std::vector<float>(s.c, 0.0f) : d.b);
  DevBuf mean(s.c * 4), invstd(s.c * 4), ws(batchnorm_workspace_bytes(s.rows, s.c) + 256);
  for (const DevBuf* p : {&y, &ws, &mean, &invstd}) poison(*p);
  const void* res = v.residual ? r.get() : nullptr;
  const float* prebias = no_prebias ? nullptr : pb.as<float>();
  if (eval)
    REQUIRE_OK(batchnorm_fwd_eval_cuda(ctx.stream, x.get(), t, g.as<float>(), be.as<float>(), rm.as<float>(),
                                       rv.as<float>(), y.get(), s.rows, s.c, kEps, v.relu, res, prebias));
  else
    REQUIRE_OK(batchnorm_fwd_train_cuda(ctx.stream, x.get(), t, g.as<float>(), be.as<float>(), y.get(),
                                        mean.as<float>(), invstd.as<float>(), rm.as<float>(), rv.as<float>(), s.rows,
                                        s.c, kEps, kMomentum, v.relu, ws.get(), ws.bytes(), res, prebias));
  sync_ok(ctx);
  Out o;
  o.y = from_device_as(t, y.get(), n);
  if (!eval) {
    o.mean = from_device<float>(mean.get(), s.c);
    o.invstd = from_device<float>(invstd.get(), s.c);
    o.rm = from_device<float>(rm.get(), s.c);
    o.rv = from_device<float>(rv.get(), s.c);
  }
  return o;
}

void check_bitwise(const std::string& what, const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  CHECK_RESULT(compare_bitwise(what, a.data(), b.data(), a.size() * sizeof(float), 4));
}

}  // namespace

TEST_CASE("batchnorm with a folded conv bias matches the float64 reference (train and eval)",
          "[kernel][batchnorm][prebias]") {
  CudaContext ctx = make_context();
  Rng rng(181);
  for (GpuDType t : kTypes)
    for (const Case& s : kCases)
      for (bool eval : {false, true})
        for (const Variant& v : kVariants) {
          const std::string tag = std::string(gpu_dtype_name(t)) + " rows=" + std::to_string(s.rows) +
                                  " c=" + std::to_string(s.c) + (eval ? " eval" : " train") + v.name;
          INFO(tag);
          const Data d = make(rng, t, s);
          const Ref ref = reference(t, s, d, eval, v);
          const Out o = run(ctx, t, s, d, eval, v);
          CHECK_RESULT(compare_close("bn prebias y " + tag, to_double(o.y), ref.y, ref.y_bound, s.c));
          if (!eval) {
            CHECK_RESULT(compare_close("bn prebias save_mean " + tag, to_double(o.mean), ref.mean, ref.mean_bound));
            CHECK_RESULT(
                compare_close("bn prebias save_invstd " + tag, to_double(o.invstd), ref.invstd, ref.invstd_bound));
            CHECK_RESULT(compare_close("bn prebias running_mean " + tag, to_double(o.rm), ref.rm, ref.rm_bound));
            CHECK_RESULT(compare_close("bn prebias running_var " + tag, to_double(o.rv), ref.rv, ref.rv_bound));
          }
          const Out again = run(ctx, t, s, d, eval, v);
          check_bitwise("bn prebias rerun y " + tag, again.y, o.y);
          if (!eval) check_bitwise("bn prebias rerun running_mean " + tag, again.rm, o.rm);
        }
}

TEST_CASE("batchnorm with a prebias of zeros gives bitwise the results without one", "[kernel][batchnorm][prebias]") {
  CudaContext ctx = make_context();
  Rng rng(182);
  for (GpuDType t : kTypes)
    for (const Case& s : {Case{50, 65}, Case{1000, 256}})
      for (bool eval : {false, true}) {
        const Variant v{true, false, " relu"};
        const std::string tag = std::string(gpu_dtype_name(t)) + " rows=" + std::to_string(s.rows) +
                                " c=" + std::to_string(s.c) + (eval ? " eval" : " train");
        INFO(tag);
        const Data d = make(rng, t, s);
        const Out zero = run(ctx, t, s, d, eval, v, true, false), none = run(ctx, t, s, d, eval, v, false, true);
        check_bitwise("zero prebias y " + tag, zero.y, none.y);
        if (eval) continue;
        check_bitwise("zero prebias save_mean " + tag, zero.mean, none.mean);
        check_bitwise("zero prebias save_invstd " + tag, zero.invstd, none.invstd);
        check_bitwise("zero prebias running_mean " + tag, zero.rm, none.rm);
        check_bitwise("zero prebias running_var " + tag, zero.rv, none.rv);
      }
}
