// AMP kernels: casts vs independent host rounding (bitwise, with specials), the non-finite gradient check, and the
// loss scale update sequence of torch.cuda.amp.GradScaler.
#include <cfloat>
#include <cmath>

#include "runtime/ops/amp/amp_cuda.h"
#include "runtime/ops/cast/cast_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

// Random values over many binades plus the hard cases: ties, the f16 overflow boundary, subnormals, specials.
std::vector<float> cast_inputs(size_t n_random) {
  Rng rng(21);
  std::vector<float> v;
  for (size_t i = 0; i < n_random; ++i) {
    const float mant = rng.uniform(-2.0f, 2.0f);
    v.push_back(std::ldexp(mant, static_cast<int>(rng.below(60)) - 40));
  }
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, -70000.0f,
                            std::ldexp(1.0f, -14), std::ldexp(1.0f, -24), std::ldexp(1.0f, -25),
                            std::ldexp(1.5f, -25), std::ldexp(1.0f, -26), 1.0f + std::ldexp(1.0f, -11),
                            1.0f + 3 * std::ldexp(1.0f, -11), 1.0f + std::ldexp(1.0f, -8),
                            1.0f + 3 * std::ldexp(1.0f, -8), FLT_MAX, -FLT_MAX, FLT_MIN, std::ldexp(1.0f, -140),
                            INFINITY, -INFINITY, NAN, 3.14159265f, -2.71828183f, 1e-3f, 1e4f};
  v.insert(v.end(), std::begin(specials), std::end(specials));
  return v;
}

}  // namespace

TEST_CASE("cast f32 to f16 and bf16 rounds to nearest even exactly like the host reference", "[kernel][cast]") {
  CudaContext ctx = make_context();
  const std::vector<float> x = cast_inputs(100000);
  const int64_t n = static_cast<int64_t>(x.size());
  for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
    for (int64_t off : {int64_t{0}, int64_t{1}}) {
      INFO(gpu_dtype_name(t) << " offset " << off);
      std::vector<float> xp(off, 0.0f);
      xp.insert(xp.end(), x.begin(), x.end());
      DevBuf src = to_device(xp), dst((n + off) * 2);
      poison(dst);
      REQUIRE_OK(cast_cuda(ctx.stream, src.as<float>() + off, GpuDType::F32, dst.as<uint16_t>() + off, t, n));
      sync_ok(ctx);
      const auto got = from_device<uint16_t>(dst.as<uint16_t>() + off, n);
      int64_t wrong = 0, first = -1;
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t ref = lowp_bits(t, x[i]);
        const bool both_nan = std::isnan(lowp_value(t, ref)) && std::isnan(lowp_value(t, got[i]));
        if (got[i] != ref && !both_nan) {
          if (wrong++ == 0) first = i;
        }
      }
      if (wrong) {
        FAIL_CHECK(wrong << " of " << n << " casts differ; first at [" << first << "] x=" << x[first] << " got 0x"
                         << std::hex << got[first] << " ref 0x" << lowp_bits(t, x[first]));
      } else {
        std::printf("  [ok] cast f32->%s offset %lld: %lld values bitwise equal to the host rounding\n",
                    gpu_dtype_name(t), static_cast<long long>(off), static_cast<long long>(n));
      }
      // Back to f32 is exact.
      DevBuf back(n * 4);
      poison(back);
      REQUIRE_OK(cast_cuda(ctx.stream, dst.as<uint16_t>() + off, t, back.get(), GpuDType::F32, n));
      sync_ok(ctx);
      const auto hb = from_device<float>(back.get(), n);
      int64_t wrong_back = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float ref = lowp_value(t, got[i]);
        wrong_back += !(hb[i] == ref || (std::isnan(hb[i]) && std::isnan(ref)));
      }
      CHECK(wrong_back == 0);
    }
  }
}

TEST_CASE("non-finite check sets the flag for inf or NaN anywhere and never clears it", "[kernel][amp]") {
  CudaContext ctx = make_context();
  const int64_t n = (1 << 20) + 3;
  Rng rng(22);
  for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
    std::vector<float> g = rng.normal_vec(n, 0.0f, 100.0f);
    DevBuf flag = to_device(std::vector<int32_t>{0});
    DevBuf dg = to_device_as(t, g);
    REQUIRE_OK(grad_check_nonfinite_cuda(ctx.stream, dg.get(), t, n, flag.as<int32_t>()));
    sync_ok(ctx);
    CHECK(from_device<int32_t>(flag.get(), 1)[0] == 0);
    const int64_t positions[] = {0, 12345, n - 1, n - 2};
    const float values[] = {INFINITY, -INFINITY, NAN, NAN};
    for (int k = 0; k < 4; ++k) {
      INFO(gpu_dtype_name(t) << " non-finite " << values[k] << " at " << positions[k]);
      std::vector<float> h = g;
      h[positions[k]] = values[k];
      DevBuf d = to_device_as(t, h);
      upload(flag.get(), std::vector<int32_t>{0});
      REQUIRE_OK(grad_check_nonfinite_cuda(ctx.stream, d.get(), t, n, flag.as<int32_t>()));
      // A later clean range does not clear it.
      REQUIRE_OK(grad_check_nonfinite_cuda(ctx.stream, dg.get(), t, n, flag.as<int32_t>()));
      sync_ok(ctx);
      CHECK(from_device<int32_t>(flag.get(), 1)[0] == 1);
    }
    // Misaligned view (scalar path) with the NaN in the last element.
    std::vector<float> h = g;
    h[n - 1] = NAN;
    DevBuf d = to_device_as(t, h);
    upload(flag.get(), std::vector<int32_t>{0});
    REQUIRE_OK(grad_check_nonfinite_cuda(ctx.stream, static_cast<char*>(d.get()) + gpu_dtype_size(t), t, n - 1,
                                         flag.as<int32_t>()));
    sync_ok(ctx);
    CHECK(from_device<int32_t>(flag.get(), 1)[0] == 1);
  }
  {  // f16 overflow of a finite f32 value is the typical AMP case: the cast makes it inf
    std::vector<float> g(1000, 1.0f);
    g[999] = 1e5f;
    DevBuf d = to_device_as(GpuDType::F16, g), flag = to_device(std::vector<int32_t>{0});
    REQUIRE_OK(grad_check_nonfinite_cuda(ctx.stream, d.get(), GpuDType::F16, 1000, flag.as<int32_t>()));
    sync_ok(ctx);
    CHECK(from_device<int32_t>(flag.get(), 1)[0] == 1);
  }
}

TEST_CASE("grad scaler doubles after growth_interval clean steps and halves on inf, all on the device",
          "[kernel][amp]") {
  CudaContext ctx = make_context();
  GradScalerState init;
  REQUIRE(init.scale == 65536.0f);
  REQUIRE(init.growth_interval == 2000);
  DevBuf s(sizeof(GradScalerState));
  copy_sync(s.get(), &init, sizeof init, cudaMemcpyHostToDevice);
  auto* sd = s.as<GradScalerState>();
  auto read = [&] {
    GradScalerState h;
    sync_ok(ctx);
    copy_sync(&h, s.get(), sizeof h, cudaMemcpyDeviceToHost);
    return h;
  };
  for (int i = 0; i < 1999; ++i) REQUIRE_OK(grad_scaler_update_cuda(ctx.stream, sd));
  GradScalerState h = read();
  CHECK(h.scale == 65536.0f);
  CHECK(h.growth_tracker == 1999);
  REQUIRE_OK(grad_scaler_update_cuda(ctx.stream, sd));
  h = read();
  CHECK(h.scale == 131072.0f);
  CHECK(h.growth_tracker == 0);
  // An overflow step: found_inf set (as grad_check_nonfinite_cuda would) -> halve, reset the tracker.
  for (int i = 0; i < 10; ++i) REQUIRE_OK(grad_scaler_update_cuda(ctx.stream, sd));
  const int32_t one = 1, zero = 0;
  copy_sync(&sd->found_inf, &one, sizeof one, cudaMemcpyHostToDevice);
  REQUIRE_OK(grad_scaler_update_cuda(ctx.stream, sd));
  h = read();
  CHECK(h.scale == 65536.0f);
  CHECK(h.growth_tracker == 0);
  CHECK(h.found_inf == 1);  // left for the next step's zeroing
  REQUIRE_OK(grad_scaler_update_cuda(ctx.stream, sd));
  h = read();
  CHECK(h.scale == 32768.0f);
  // Growth that would overflow to inf keeps the scale (PyTorch: only finite new scales are taken).
  GradScalerState big;
  big.scale = std::ldexp(1.0f, 127);
  big.growth_interval = 1;
  copy_sync(s.get(), &big, sizeof big, cudaMemcpyHostToDevice);
  copy_sync(&sd->found_inf, &zero, sizeof zero, cudaMemcpyHostToDevice);
  REQUIRE_OK(grad_scaler_update_cuda(ctx.stream, sd));
  h = read();
  CHECK(h.scale == std::ldexp(1.0f, 127));
  CHECK(h.growth_tracker == 0);
}
