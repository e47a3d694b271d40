// Dropout kernels vs the host Philox reference mask (exact identity, forward and backward), mask statistics
// (keep rate, per-lane rate, independence across steps and op ids), the step read from device memory, edge p.
#include <cmath>

#include "core/util/philox.h"
#include "runtime/ops/dropout/dropout_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

constexpr uint64_t kSeed = 0x0123456789ABCDEFull;

bool ref_keep(int64_t i, uint32_t step, uint32_t op_id, uint64_t seed, float p) {
  const Philox4 r = philox4x32(static_cast<uint32_t>(i >> 2), step, op_id, static_cast<uint32_t>(RngPurpose::Dropout),
                               static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return philox_uniform(r.v[i & 3]) >= p;
}

// Fraction of kept elements in a (poison-free) f32 output where every input is 1.
std::vector<uint8_t> kept_of(const std::vector<float>& y) {
  std::vector<uint8_t> k(y.size());
  for (size_t i = 0; i < y.size(); ++i) k[i] = y[i] != 0.0f;
  return k;
}

void check_fraction(const std::string& what, double count, double n, double p_expect) {
  const double frac = count / n, sd = std::sqrt(p_expect * (1.0 - p_expect) / n);
  INFO(what << ": fraction " << frac << " expected " << p_expect << " +- 6 * " << sd);
  std::printf("  [%s] %s: fraction %.6f expected %.6f (%.2f sigma)\n",
              std::fabs(frac - p_expect) <= 6.0 * sd ? "ok" : "FAIL", what.c_str(), frac, p_expect,
              (frac - p_expect) / sd);
  CHECK(std::fabs(frac - p_expect) <= 6.0 * sd);
}

}  // namespace

TEST_CASE("dropout keeps exactly the reference Philox mask and scales by 1/(1-p), forward and backward",
          "[kernel][dropout]") {
  CudaContext ctx = make_context();
  Rng rng(31);
  const uint32_t step = 5, op_id = 7;
  DevBuf step_dev = to_device(std::vector<uint32_t>{step});
  const DropoutParams prm = dropout_params(0.3f, kSeed, op_id, step_dev.as<uint32_t>());
  REQUIRE(prm.scale == 1.0f / (1.0f - 0.3f));
  for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{4099}, int64_t{(1 << 20) + 1}}) {
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        const std::string tag = std::string(gpu_dtype_name(t)) + " n=" + std::to_string(n) +
                                " offset=" + std::to_string(off);
        INFO(tag);
        const size_t es = gpu_dtype_size(t);
        std::vector<float> x = rng.uniform_vec(n + off, 0.5f, 2.0f), dy = rng.normal_vec(n + off, 0.0f, 1.0f);
        for (auto& v : x) v = round_to(t, v);
        for (auto& v : dy) v = round_to(t, v);
        DevBuf dx_in = to_device_as(t, x), ddy = to_device_as(t, dy), dyo((n + off) * es), ddx((n + off) * es);
        poison(dyo);
        poison(ddx);
        char *xin = dx_in.as<char>() + off * es, *yout = dyo.as<char>() + off * es;
        char *gin = ddy.as<char>() + off * es, *gout = ddx.as<char>() + off * es;
        REQUIRE_OK(dropout_fwd_cuda(ctx.stream, prm, xin, yout, n, t));
        REQUIRE_OK(dropout_bwd_cuda(ctx.stream, prm, gin, gout, n, t));
        sync_ok(ctx);
        std::vector<double> ref_y(n), ref_dx(n), zero(n, 0.0);
        for (int64_t i = 0; i < n; ++i) {
          const bool keep = ref_keep(i, step, op_id, kSeed, prm.p);
          ref_y[i] = keep ? round_to(t, x[off + i] * prm.scale) : 0.0f;
          ref_dx[i] = keep ? round_to(t, dy[off + i] * prm.scale) : 0.0f;
        }
        const auto y = from_device_as(t, yout, n), gx = from_device_as(t, gout, n);
        CHECK_RESULT(compare_close("dropout_fwd " + tag, to_double(y), ref_y, zero));
        CHECK_RESULT(compare_close("dropout_bwd " + tag, to_double(gx), ref_dx, zero));
        poison(dyo);
        REQUIRE_OK(dropout_fwd_cuda(ctx.stream, prm, xin, yout, n, t));
        sync_ok(ctx);
        const auto y2 = from_device_as(t, yout, n);
        CHECK_RESULT(compare_bitwise("dropout_fwd rerun " + tag, y.data(), y2.data(), n * 4, 4));
      }
    }
  }
}

TEST_CASE("dropout masks have the right keep rate per element lane and are independent across steps and ops",
          "[kernel][dropout]") {
  CudaContext ctx = make_context();
  const int64_t n = int64_t{1} << 22;
  DevBuf ones = to_device(std::vector<float>(n, 1.0f)), y(n * 4);
  DevBuf step_dev = to_device(std::vector<uint32_t>{100});
  for (float p : {0.1f, 0.5f, 0.9f}) {
    auto run = [&](uint32_t step, uint32_t op) {
      upload(step_dev.get(), std::vector<uint32_t>{step});
      REQUIRE_OK(dropout_fwd_cuda(ctx.stream, dropout_params(p, kSeed, op, step_dev.as<uint32_t>()), ones.get(),
                                  y.get(), n, GpuDType::F32));
      sync_ok(ctx);
      return kept_of(from_device<float>(y.get(), n));
    };
    const auto a = run(100, 1), b = run(101, 1), c = run(100, 2);
    const double q = 1.0 - p;
    double kept = 0, lane[4] = {0, 0, 0, 0}, same_ab = 0, same_ac = 0;
    for (int64_t i = 0; i < n; ++i) {
      kept += a[i];
      lane[i & 3] += a[i];
      same_ab += a[i] == b[i];
      same_ac += a[i] == c[i];
    }
    const std::string tag = "p=" + std::to_string(p);
    check_fraction("keep rate " + tag, kept, static_cast<double>(n), q);
    for (int j = 0; j < 4; ++j) check_fraction("keep rate lane " + std::to_string(j) + " " + tag, lane[j], n / 4.0, q);
    check_fraction("agreement step 100 vs 101 " + tag, same_ab, static_cast<double>(n), q * q + p * p);
    check_fraction("agreement op 1 vs 2 " + tag, same_ac, static_cast<double>(n), q * q + p * p);
  }
}

TEST_CASE("dropout reads the step from device memory: the same launch draws a new mask when the counter changes",
          "[kernel][dropout]") {
  CudaContext ctx = make_context();
  const int64_t n = 4096;
  DevBuf ones = to_device(std::vector<float>(n, 1.0f)), y(n * 4);
  DevBuf step_dev = to_device(std::vector<uint32_t>{1});
  const DropoutParams prm = dropout_params(0.5f, kSeed, 3, step_dev.as<uint32_t>());
  std::vector<std::vector<uint8_t>> masks;
  for (uint32_t s = 1; s <= 3; ++s) {
    upload(step_dev.get(), std::vector<uint32_t>{s});
    REQUIRE_OK(dropout_fwd_cuda(ctx.stream, prm, ones.get(), y.get(), n, GpuDType::F32));
    sync_ok(ctx);
    masks.push_back(kept_of(from_device<float>(y.get(), n)));
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) mismatches += masks.back()[i] != ref_keep(i, s, 3, kSeed, 0.5f);
    CHECK(mismatches == 0);
  }
  CHECK(masks[0] != masks[1]);
  CHECK(masks[1] != masks[2]);
}

TEST_CASE("dropout with p = 0 is the identity and with p = 1 writes zeros (no inf or NaN)", "[kernel][dropout]") {
  CudaContext ctx = make_context();
  Rng rng(32);
  const int64_t n = 10001;
  std::vector<float> x = rng.normal_vec(n, 0.0f, 3.0f);
  x[17] = INFINITY;
  DevBuf dx = to_device(x), y(n * 4), step_dev = to_device(std::vector<uint32_t>{9});
  REQUIRE_OK(dropout_fwd_cuda(ctx.stream, dropout_params(0.0f, kSeed, 1, step_dev.as<uint32_t>()), dx.get(), y.get(),
                              n, GpuDType::F32));
  sync_ok(ctx);
  const auto y0 = from_device<float>(y.get(), n);
  CHECK_RESULT(compare_bitwise("dropout p=0 is identity", y0.data(), x.data(), n * 4, 4));
  REQUIRE_OK(dropout_fwd_cuda(ctx.stream, dropout_params(1.0f, kSeed, 1, step_dev.as<uint32_t>()), dx.get(), y.get(),
                              n, GpuDType::F32));
  sync_ok(ctx);
  const auto y1 = from_device<float>(y.get(), n);
  int64_t nonzero = 0;
  for (float v : y1) nonzero += v != 0.0f;
  CHECK(nonzero == 0);
  CHECK_FALSE(dropout_fwd_cuda(ctx.stream, dropout_params(1.5f, kSeed, 1, step_dev.as<uint32_t>()), dx.get(),
                               y.get(), n, GpuDType::F32).ok());
  CHECK_FALSE(dropout_fwd_cuda(ctx.stream, dropout_params(0.5f, kSeed, 1, nullptr), dx.get(), y.get(), n,
                               GpuDType::F32).ok());
}
