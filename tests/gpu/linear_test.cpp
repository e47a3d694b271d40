// Linear layer op: forward (fused bias/ReLU) and backward (dX, dW, db) vs a double reference, for both bias
// gradient paths (deterministic kernel, cuBLASLt BGRADB epilogue or its reported fallback), f32 and f16 inputs.
#include <cmath>

#include "runtime/ops/linear/linear_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

// Tolerances as in gemm_test.cpp: 1e-5 (f32) / 1e-4 (f16 inputs) of sum |terms|, plus the f16 output rounding.
TEST_CASE("linear forward and backward match the reference with either bias-gradient path", "[gemm][linear]") {
  CudaContext ctx = make_context();
  const int64_t N = 200, IN = 784, OUT = 1024;
  Rng rng(95);
  for (GpuDType t : {GpuDType::F32, GpuDType::F16}) {
    for (BiasGradPath path : {BiasGradPath::Kernel, BiasGradPath::GemmEpilogue}) {
      const std::string tag = std::string(gpu_dtype_name(t)) +
                              (path == BiasGradPath::Kernel ? " db by kernel" : " db by epilogue");
      INFO(tag);
      LinearCudaDesc d;
      d.batch = N;
      d.in = IN;
      d.out = OUT;
      d.act_type = t;
      d.out_type = t;
      d.relu = true;
      d.bias_grad = path;
      auto plan = linear_cuda_plan(ctx, d);
      REQUIRE_OK(plan);
      LinearCudaPlan& p = plan.value();
      std::printf("  linear %s: db path %s%s%s\n", tag.c_str(),
                  p.bias_grad_path == BiasGradPath::Kernel ? "kernel" : "epilogue", p.notes.empty() ? "" : "; ",
                  p.notes.c_str());
      std::vector<float> x = rng.uniform_vec(N * IN, -1.0f, 1.0f), w = rng.uniform_vec(OUT * IN, -0.05f, 0.05f),
                         b = rng.uniform_vec(OUT, -0.5f, 0.5f), dy = rng.uniform_vec(N * OUT, -1.0f, 1.0f);
      for (auto* v : {&x, &w, &b, &dy}) {
        for (auto& e : *v) e = round_to(t, e);
      }
      DevBuf dx_ = to_device_as(t, x), dw_ = to_device_as(t, w), db_ = to_device_as(t, b), ddy = to_device_as(t, dy);
      DevBuf y(N * OUT * gpu_dtype_size(t)), gx(N * IN * gpu_dtype_size(t)), gw(OUT * IN * 4), gb(OUT * 4);
      for (const DevBuf* o : {&y, &gx, &gw, &gb}) poison(*o);
      REQUIRE_OK(linear_fwd_cuda(ctx, p, dx_.get(), dw_.get(), db_.get(), y.get(), nullptr));
      REQUIRE_OK(linear_bwd_cuda(ctx, p, dx_.get(), dw_.get(), ddy.get(), gx.get(), nullptr, gw.as<float>(),
                                 gb.as<float>()));
      sync_ok(ctx);
      const double acc = t == GpuDType::F32 ? 1e-5 : 1e-4;
      const double u = t == GpuDType::F32 ? 0.0 : unit_roundoff(t);
      const double sub = t == GpuDType::F16 ? std::ldexp(1.0, -25) : 0.0;
      // forward
      std::vector<double> ry(N * OUT), by(N * OUT);
      for (int64_t i = 0; i < N; ++i) {
        for (int64_t j = 0; j < OUT; ++j) {
          double s = b[j], mag = std::fabs(b[j]);
          for (int64_t k = 0; k < IN; ++k) {
            s += static_cast<double>(x[i * IN + k]) * w[j * IN + k];
            mag += std::fabs(static_cast<double>(x[i * IN + k]) * w[j * IN + k]);
          }
          ry[i * OUT + j] = std::max(s, 0.0);
          by[i * OUT + j] = acc * mag + u * (std::fabs(s) + acc * mag) + sub;
        }
      }
      CHECK_RESULT(compare_close("linear y " + tag, to_double(from_device_as(t, y.get(), N * OUT)), ry, by, OUT));
      // dX = dY W
      std::vector<double> rx(N * IN, 0.0), bx(N * IN, 0.0);
      for (int64_t i = 0; i < N; ++i) {
        for (int64_t j = 0; j < OUT; ++j) {
          const double g = dy[i * OUT + j];
          for (int64_t k = 0; k < IN; ++k) {
            rx[i * IN + k] += g * w[j * IN + k];
            bx[i * IN + k] += std::fabs(g * w[j * IN + k]);
          }
        }
      }
      for (int64_t e = 0; e < N * IN; ++e) bx[e] = acc * bx[e] + u * (std::fabs(rx[e]) + acc * bx[e]) + sub;
      CHECK_RESULT(compare_close("linear dx " + tag, to_double(from_device_as(t, gx.get(), N * IN)), rx, bx, IN));
      // dW = dY^T X (f32 output), db = column sums of dY (f32)
      std::vector<double> rw(OUT * IN, 0.0), bw(OUT * IN, 0.0), rb(OUT, 0.0), bb(OUT, 0.0);
      for (int64_t i = 0; i < N; ++i) {
        for (int64_t j = 0; j < OUT; ++j) {
          const double g = dy[i * OUT + j];
          rb[j] += g;
          bb[j] += std::fabs(g);
          for (int64_t k = 0; k < IN; ++k) {
            rw[j * IN + k] += g * x[i * IN + k];
            bw[j * IN + k] += std::fabs(g * x[i * IN + k]);
          }
        }
      }
      for (auto& e : bw) e *= acc;
      for (auto& e : bb) e *= acc;
      CHECK_RESULT(compare_close("linear dw " + tag, to_double(from_device<float>(gw.get(), OUT * IN)), rw, bw, IN));
      CHECK_RESULT(compare_close("linear db " + tag, to_double(from_device<float>(gb.get(), OUT)), rb, bb));
    }
  }
}
