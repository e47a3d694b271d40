// Activation kernels (relu6, leaky_relu, elu, silu, hardswish, sigmoid, tanh) against the float64 CPU reference
// (activation.h) evaluated on the same dtype-rounded inputs: f32, f16 and bf16 storage, vector and scalar paths,
// PyTorch's boundary points, in-place use, and bitwise run-to-run identity.
// Tolerance per element: u_T |ref| (the output's rounding to the storage type; u = 2^-24, 2^-11, 2^-8) plus
// 2^-20 (1 + |x|) max(1, |dy|) for the f32 arithmetic (expf, tanhf, expm1f are within 2 ulp; the formulas add a few
// more; the (1 + |x|) covers silu's x (1 - s) and hardswish's x / 3 terms).
#include <cmath>

#include "runtime/ops/activation/activation.h"
#include "runtime/ops/activation/activation_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

const ActKind kAll[] = {ActKind::Relu6, ActKind::LeakyRelu, ActKind::Elu,  ActKind::Silu,
                        ActKind::Hardswish, ActKind::Sigmoid, ActKind::Tanh};

char* elem_ptr(const DevBuf& b, GpuDType t, int64_t off) { return b.as<char>() + off * gpu_dtype_size(t); }

float param_of(ActKind k) { return k == ActKind::LeakyRelu ? 0.1f : k == ActKind::Elu ? 0.7f : 0.0f; }

// Normal inputs over the interesting range plus the kinks (0, -0, +-3, 6), rounded to the dtype.
std::vector<float> act_inputs(Rng& rng, GpuDType t, size_t n) {
  std::vector<float> x = rng.normal_vec(n, 0.0f, 4.0f);
  const float edges[] = {0.0f, -0.0f, 3.0f, -3.0f, 6.0f, -8.0f, 12.0f, -20.0f};
  for (size_t i = 0; i < n; i += 5) x[i] = edges[(i / 5) % 8];
  for (auto& v : x) v = round_to(t, v);
  return x;
}

}  // namespace

TEST_CASE("activation kernels equal the float64 reference for every kind, dtype, size and alignment",
          "[kernel][activation]") {
  CudaContext ctx = make_context();
  Rng rng(23);
  for (ActKind k : kAll) {
    const float a = param_of(k);
    for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{1000}, int64_t{(1 << 18) + 3}}) {
        for (int64_t off : {int64_t{0}, int64_t{1}}) {
          const std::string tag = std::string(to_string(k)) + " " + gpu_dtype_name(t) + " n=" + std::to_string(n) +
                                  " offset=" + std::to_string(off);
          INFO(tag);
          std::vector<float> x = act_inputs(rng, t, n), dy = rng.normal_vec(n, 0.0f, 1.0f);
          for (auto& v : dy) v = round_to(t, v);
          std::vector<float> xp(off, 0.0f), dyp(off, 0.0f);
          xp.insert(xp.end(), x.begin(), x.end());
          dyp.insert(dyp.end(), dy.begin(), dy.end());
          DevBuf dxin = to_device_as(t, xp), ddy = to_device_as(t, dyp);
          DevBuf dyout((n + off) * gpu_dtype_size(t)), ddx((n + off) * gpu_dtype_size(t));
          poison(dyout);
          poison(ddx);
          REQUIRE_OK(activation_fwd_cuda(ctx.stream, k, a, elem_ptr(dxin, t, off), elem_ptr(dyout, t, off), n, t));
          sync_ok(ctx);
          const std::vector<float> y = from_device_as(t, elem_ptr(dyout, t, off), n);
          // The backward reads what the graph saves: the kernel's own (rounded) output for sigmoid/tanh, else x.
          const bool from_y = act_grad_uses_output(k);
          const void* saved = from_y ? elem_ptr(dyout, t, off) : elem_ptr(dxin, t, off);
          REQUIRE_OK(activation_bwd_cuda(ctx.stream, k, a, saved, elem_ptr(ddy, t, off), elem_ptr(ddx, t, off), n, t));
          sync_ok(ctx);
          const std::vector<float> gx = from_device_as(t, elem_ptr(ddx, t, off), n);
          std::vector<double> ref_y(n), ref_dx(n), by(n), bdx(n);
          const double u = unit_roundoff(t), arith = std::ldexp(1.0, -20);
          for (int64_t i = 0; i < n; ++i) {
            const double xi = x[i], si = from_y ? static_cast<double>(y[i]) : xi;
            ref_y[i] = act_forward<double>(k, xi, a);
            ref_dx[i] = act_backward<double>(k, dy[i], si, a);
            by[i] = u * std::abs(ref_y[i]) + arith * (1 + std::abs(xi));
            bdx[i] = u * std::abs(ref_dx[i]) + arith * (1 + std::abs(xi)) * std::max(1.0, std::abs(double(dy[i])));
          }
          CHECK_RESULT(compare_close("act_fwd " + tag, to_double(y), ref_y, by));
          CHECK_RESULT(compare_close("act_bwd " + tag, to_double(gx), ref_dx, bdx));
          poison(ddx);
          REQUIRE_OK(activation_bwd_cuda(ctx.stream, k, a, saved, elem_ptr(ddy, t, off), elem_ptr(ddx, t, off), n, t));
          sync_ok(ctx);
          const std::vector<float> gx2 = from_device_as(t, elem_ptr(ddx, t, off), n);
          CHECK_RESULT(compare_bitwise("act_bwd rerun " + tag, gx.data(), gx2.data(), n * sizeof(float), 4));
        }
      }
    }
  }
}

TEST_CASE("activation kernels keep PyTorch's gradient conventions at the kinks exactly", "[kernel][activation]") {
  CudaContext ctx = make_context();
  const std::vector<float> x = {0.0f, 6.0f, -3.0f, 3.0f, NAN};
  const std::vector<float> dy(x.size(), 1.0f);
  DevBuf dx_in = to_device(x), ddy = to_device(dy), ddx(x.size() * 4), dy_out(x.size() * 4);
  auto grad = [&](ActKind k, float a) {
    REQUIRE_OK(activation_bwd_cuda(ctx.stream, k, a, dx_in.get(), ddy.get(), ddx.get(), 4, GpuDType::F32));
    sync_ok(ctx);
    return from_device<float>(ddx.get(), 4);
  };
  CHECK(grad(ActKind::Relu6, 0)[0] == 0.0f);     // hardtanh_backward: 0 at 0 and 6
  CHECK(grad(ActKind::Relu6, 0)[1] == 0.0f);
  CHECK(grad(ActKind::LeakyRelu, 0.2f)[0] == 0.2f);  // the slope at 0
  CHECK(grad(ActKind::Elu, 0.7f)[0] == 0.7f);        // alpha at 0 (from the input)
  CHECK(grad(ActKind::Hardswish, 0)[2] == 0.0f);     // x = -3 (torch 2.11)
  CHECK(grad(ActKind::Hardswish, 0)[3] == 1.0f);     // x = 3
  for (ActKind k : kAll) {
    INFO(to_string(k));
    REQUIRE_OK(activation_fwd_cuda(ctx.stream, k, param_of(k), dx_in.get(), dy_out.get(), 5, GpuDType::F32));
    sync_ok(ctx);
    CHECK(std::isnan(from_device<float>(dy_out.get(), 5)[4]));  // NaN propagates
  }
}

TEST_CASE("activation kernels work in place and reject bad arguments", "[kernel][activation]") {
  CudaContext ctx = make_context();
  std::vector<float> x = {-2.0f, -0.5f, 0.5f, 2.0f, 7.0f};
  DevBuf d = to_device(x);
  REQUIRE_OK(activation_fwd_cuda(ctx.stream, ActKind::Relu6, 0.0f, d.get(), d.get(), 5, GpuDType::F32));
  sync_ok(ctx);
  CHECK(from_device<float>(d.get(), 5) == std::vector<float>{0.0f, 0.0f, 0.5f, 2.0f, 6.0f});
  CHECK(activation_fwd_cuda(ctx.stream, ActKind::Silu, 0.0f, nullptr, nullptr, 0, GpuDType::F16).ok());
  CHECK_FALSE(activation_fwd_cuda(ctx.stream, ActKind::Silu, 0.0f, nullptr, nullptr, 3, GpuDType::F16).ok());
  CHECK_FALSE(activation_bwd_cuda(ctx.stream, ActKind::Tanh, 0.0f, d.get(), d.get(), d.get(), -1, GpuDType::F32).ok());
  sync_ok(ctx);
}
