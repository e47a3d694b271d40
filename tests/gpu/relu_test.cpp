// ReLU forward/backward kernels vs the exact host reference: every dtype, sizes around the vector width, misaligned
// views (scalar path), in-place use, NaN propagation, bitwise run-to-run identity.
#include <cmath>

#include "runtime/ops/relu/relu_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

char* elem_ptr(const DevBuf& b, GpuDType t, int64_t off) { return b.as<char>() + off * gpu_dtype_size(t); }

// Inputs with exact zeros, negative zeros and values of both signs, already rounded to the dtype.
std::vector<float> relu_inputs(Rng& rng, GpuDType t, size_t n) {
  std::vector<float> x = rng.normal_vec(n, 0.0f, 2.0f);
  for (size_t i = 0; i < n; i += 7) x[i] = (i % 2) ? 0.0f : -0.0f;
  for (auto& v : x) v = round_to(t, v);
  return x;
}

}  // namespace

TEST_CASE("relu forward and backward equal the reference exactly for every dtype, size and alignment",
          "[kernel][relu]") {
  CudaContext ctx = make_context();
  Rng rng(11);
  for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{1000}, int64_t{(1 << 20) + 5}}) {
      for (int64_t off : {int64_t{0}, int64_t{1}}) {
        const std::string tag = std::string(gpu_dtype_name(t)) + " n=" + std::to_string(n) +
                                " offset=" + std::to_string(off);
        INFO(tag);
        std::vector<float> x = relu_inputs(rng, t, n), dy = rng.normal_vec(n, 0.0f, 1.0f);
        for (auto& v : dy) v = round_to(t, v);
        std::vector<float> xpad(off, 0.0f), dypad(off, 0.0f);
        xpad.insert(xpad.end(), x.begin(), x.end());
        dypad.insert(dypad.end(), dy.begin(), dy.end());
        DevBuf dx_in = to_device_as(t, xpad), ddy = to_device_as(t, dypad);
        DevBuf dyout((n + off) * gpu_dtype_size(t)), ddx((n + off) * gpu_dtype_size(t));
        poison(dyout);
        poison(ddx);
        REQUIRE_OK(relu_fwd_cuda(ctx.stream, elem_ptr(dx_in, t, off), elem_ptr(dyout, t, off), n, t));
        REQUIRE_OK(relu_bwd_cuda(ctx.stream, elem_ptr(dyout, t, off), elem_ptr(ddy, t, off), elem_ptr(ddx, t, off),
                                 n, t));
        sync_ok(ctx);
        std::vector<double> ref_y(n), ref_dx(n), zero(n, 0.0);
        for (int64_t i = 0; i < n; ++i) {
          ref_y[i] = x[i] > 0.0f ? x[i] : 0.0;
          ref_dx[i] = ref_y[i] > 0.0 ? dy[i] : 0.0;
        }
        const std::vector<float> y = from_device_as(t, elem_ptr(dyout, t, off), n);
        const std::vector<float> gx = from_device_as(t, elem_ptr(ddx, t, off), n);
        CHECK_RESULT(compare_close("relu_fwd " + tag, to_double(y), ref_y, zero));
        CHECK_RESULT(compare_close("relu_bwd " + tag, to_double(gx), ref_dx, zero));
        // Run again into the same (re-poisoned) outputs: bitwise identical.
        poison(ddx);
        REQUIRE_OK(relu_bwd_cuda(ctx.stream, elem_ptr(dyout, t, off), elem_ptr(ddy, t, off), elem_ptr(ddx, t, off),
                                 n, t));
        sync_ok(ctx);
        const std::vector<float> gx2 = from_device_as(t, elem_ptr(ddx, t, off), n);
        CHECK_RESULT(compare_bitwise("relu_bwd rerun " + tag, gx.data(), gx2.data(), n * sizeof(float), 4));
      }
    }
  }
}

TEST_CASE("relu works in place and propagates NaN like torch.relu", "[kernel][relu]") {
  CudaContext ctx = make_context();
  std::vector<float> x = {1.5f, -2.0f, NAN, 0.0f, -0.0f, INFINITY, -INFINITY, 3.0f, -1e-30f};
  DevBuf d = to_device(x);
  REQUIRE_OK(relu_fwd_cuda(ctx.stream, d.get(), d.get(), static_cast<int64_t>(x.size()), GpuDType::F32));
  sync_ok(ctx);
  const std::vector<float> y = from_device<float>(d.get(), x.size());
  CHECK(y[0] == 1.5f);
  CHECK(y[1] == 0.0f);
  CHECK(std::isnan(y[2]));
  CHECK((y[3] == 0.0f && !std::signbit(y[3])));
  CHECK((y[4] == 0.0f && !std::signbit(y[4])));
  CHECK(y[5] == INFINITY);
  CHECK(y[6] == 0.0f);
  CHECK(y[7] == 3.0f);
  CHECK(y[8] == 0.0f);
}

TEST_CASE("relu launchers reject bad arguments without launching and accept n = 0", "[kernel][relu]") {
  CudaContext ctx = make_context();
  CHECK(relu_fwd_cuda(ctx.stream, nullptr, nullptr, 0, GpuDType::F32).ok());
  CHECK_FALSE(relu_fwd_cuda(ctx.stream, nullptr, nullptr, 10, GpuDType::F32).ok());
  CHECK_FALSE(relu_bwd_cuda(ctx.stream, nullptr, nullptr, nullptr, -1, GpuDType::F16).ok());
  sync_ok(ctx);
}
