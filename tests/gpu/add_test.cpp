// Elementwise add (+ fused ReLU) kernel vs the exact host reference: every dtype, sizes around the vector width,
// misaligned views (scalar path), in-place use (y aliasing a or b), NaN/inf propagation, bitwise run-to-run identity.
#include <cmath>

#include "runtime/ops/add/add_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

char* elem_ptr(const DevBuf& b, GpuDType t, int64_t off) { return b.as<char>() + off * gpu_dtype_size(t); }

std::vector<float> rounded_normal(Rng& rng, GpuDType t, size_t n) {
  std::vector<float> v = rng.normal_vec(n, 0.0f, 2.0f);
  for (auto& x : v) x = round_to(t, x);
  return v;
}

DevBuf upload_at(GpuDType t, const std::vector<float>& v, int64_t off) {
  std::vector<float> p(static_cast<size_t>(off), 0.0f);
  p.insert(p.end(), v.begin(), v.end());
  return to_device_as(t, p);
}

// The exact sum of two dtype values (exact in double), with the optional ReLU (NaN kept).
std::vector<double> add_ref(const std::vector<float>& a, const std::vector<float>& b, bool relu) {
  std::vector<double> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double s = static_cast<double>(a[i]) + static_cast<double>(b[i]);
    r[i] = relu && !(s > 0.0) && !std::isnan(s) ? 0.0 : s;
  }
  return r;
}

// Allowed |got - ref|. f32: the fp32 add is the correctly rounded exact sum, so ref is rounded to f32 in place and
// must match exactly.
// f16/bf16: one rounding of the fp32 sum to t: u_t * |ref| plus 2^-24 relative for the fp32 step (double rounding),
// plus half the f16 subnormal spacing.
std::vector<double> round_ref_and_bound(GpuDType t, std::vector<double>& ref) {
  std::vector<double> b(ref.size(), 0.0);
  if (t == GpuDType::F32) {
    for (auto& r : ref) r = static_cast<float>(r);
    return b;
  }
  const double ut = unit_roundoff(t), floor_abs = t == GpuDType::F16 ? std::ldexp(1.0, -25) : 0.0;
  for (size_t i = 0; i < ref.size(); ++i) b[i] = (ut + std::ldexp(1.0, -24)) * std::fabs(ref[i]) + floor_abs;
  return b;
}

}  // namespace

TEST_CASE("add and add+relu equal the reference for every dtype, size and alignment", "[kernel][add]") {
  CudaContext ctx = make_context();
  Rng rng(31);
  for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{1001}, int64_t{(1 << 20) + 3}}) {
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        for (bool relu : {false, true}) {
          const std::string tag = std::string(gpu_dtype_name(t)) + " n=" + std::to_string(n) +
                                  " offset=" + std::to_string(off) + (relu ? " relu" : "");
          INFO(tag);
          const std::vector<float> a = rounded_normal(rng, t, n), b = rounded_normal(rng, t, n);  // (n) each
          DevBuf da = upload_at(t, a, off), db = upload_at(t, b, off), dy((n + off) * gpu_dtype_size(t));
          poison(dy);
          auto launch = [&] {
            REQUIRE_OK(add_cuda(ctx.stream, elem_ptr(da, t, off), elem_ptr(db, t, off), elem_ptr(dy, t, off), n, t,
                                relu));
            sync_ok(ctx);
          };
          launch();
          const std::vector<float> y = from_device_as(t, elem_ptr(dy, t, off), n);
          std::vector<double> ref = add_ref(a, b, relu);
          const std::vector<double> bound = round_ref_and_bound(t, ref);
          CHECK_RESULT(compare_close("add " + tag, to_double(y), ref, bound));
          const auto y1 = from_device<unsigned char>(elem_ptr(dy, t, off), n * gpu_dtype_size(t));
          poison(dy);
          launch();
          const auto y2 = from_device<unsigned char>(elem_ptr(dy, t, off), n * gpu_dtype_size(t));
          CHECK_RESULT(compare_bitwise("add rerun " + tag, y1.data(), y2.data(), y1.size(), gpu_dtype_size(t)));
        }
      }
    }
  }
}

TEST_CASE("add works in place with y aliasing a or b", "[kernel][add]") {
  CudaContext ctx = make_context();
  Rng rng(32);
  const int64_t n = 4099;  // vector chunks plus a scalar tail
  for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
    INFO(gpu_dtype_name(t));
    const std::vector<float> a = rounded_normal(rng, t, n), b = rounded_normal(rng, t, n);
    DevBuf expect_a = to_device_as(t, a), expect_b = to_device_as(t, b), expect_y(n * gpu_dtype_size(t));
    poison(expect_y);
    REQUIRE_OK(add_cuda(ctx.stream, expect_a.get(), expect_b.get(), expect_y.get(), n, t, true));
    sync_ok(ctx);
    const auto want = from_device<unsigned char>(expect_y.get(), n * gpu_dtype_size(t));
    {
      DevBuf da = to_device_as(t, a), db = to_device_as(t, b);
      REQUIRE_OK(add_cuda(ctx.stream, da.get(), db.get(), da.get(), n, t, true));  // a += b
      sync_ok(ctx);
      const auto got = from_device<unsigned char>(da.get(), n * gpu_dtype_size(t));
      CHECK_RESULT(compare_bitwise("add in place into a", want.data(), got.data(), want.size(), gpu_dtype_size(t)));
    }
    {
      DevBuf da = to_device_as(t, a), db = to_device_as(t, b);
      REQUIRE_OK(add_cuda(ctx.stream, da.get(), db.get(), db.get(), n, t, true));  // b = a + b
      sync_ok(ctx);
      const auto got = from_device<unsigned char>(db.get(), n * gpu_dtype_size(t));
      CHECK_RESULT(compare_bitwise("add in place into b", want.data(), got.data(), want.size(), gpu_dtype_size(t)));
    }
  }
}

TEST_CASE("add propagates NaN and inf, and its relu keeps NaN and maps -0 to +0", "[kernel][add]") {
  CudaContext ctx = make_context();
  const std::vector<float> a = {NAN, 1.0f, INFINITY, INFINITY, -0.0f, -2.0f, 1.0f, -INFINITY};
  const std::vector<float> b = {1.0f, NAN, -INFINITY, 1.0f, -0.0f, 1.0f, 2.0f, 1.0f};
  const int64_t n = static_cast<int64_t>(a.size());
  for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
    INFO(gpu_dtype_name(t));
    DevBuf da = to_device_as(t, a), db = to_device_as(t, b), dy(n * gpu_dtype_size(t)), dr(n * gpu_dtype_size(t));
    REQUIRE_OK(add_cuda(ctx.stream, da.get(), db.get(), dy.get(), n, t, false));
    REQUIRE_OK(add_cuda(ctx.stream, da.get(), db.get(), dr.get(), n, t, true));
    sync_ok(ctx);
    const std::vector<float> y = from_device_as(t, dy.get(), n), r = from_device_as(t, dr.get(), n);
    CHECK((std::isnan(y[0]) && std::isnan(y[1]) && std::isnan(y[2])));
    CHECK(y[3] == INFINITY);
    CHECK((y[4] == 0.0f && std::signbit(y[4])));  // -0 + -0 = -0
    CHECK(y[5] == -1.0f);
    CHECK(y[6] == 3.0f);
    CHECK(y[7] == -INFINITY);
    CHECK((std::isnan(r[0]) && std::isnan(r[1]) && std::isnan(r[2])));
    CHECK(r[3] == INFINITY);
    CHECK((r[4] == 0.0f && !std::signbit(r[4])));
    CHECK(r[5] == 0.0f);
    CHECK(r[6] == 3.0f);
    CHECK(r[7] == 0.0f);
  }
}

TEST_CASE("add launcher rejects bad arguments without launching and accepts n = 0", "[kernel][add]") {
  CudaContext ctx = make_context();
  CHECK(add_cuda(ctx.stream, nullptr, nullptr, nullptr, 0, GpuDType::F32, false).ok());
  CHECK_FALSE(add_cuda(ctx.stream, nullptr, nullptr, nullptr, 5, GpuDType::F16, true).ok());
  CHECK_FALSE(add_cuda(ctx.stream, nullptr, nullptr, nullptr, -1, GpuDType::BF16, false).ok());
  sync_ok(ctx);
}
