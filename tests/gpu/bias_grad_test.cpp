// Deterministic column-sum kernel (bias gradient) vs a double reference: MLP widths, odd widths, strided rows,
// f16/bf16 inputs, accumulate mode, bitwise reruns.
#include <cmath>

#include "runtime/ops/bias_grad/bias_grad_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

// Tolerance: each thread sums ceil(rows/16) values, then 16 partials are added: the f32 error is at most
// (rows/16 + 16) ulp of sum |dy|, i.e. < 2e-6 * sum|dy| for rows <= 1000; bound 1e-5 * sum|dy| (+ 1e-5 * |db0| for
// accumulate).
TEST_CASE("bias_grad column sums match the double reference for MLP and odd shapes", "[kernel][bias_grad]") {
  CudaContext ctx = make_context();
  Rng rng(51);
  struct Shape {
    int64_t rows, cols, ld;
  };
  const Shape shapes[] = {{200, 1024, 0}, {200, 512, 0}, {200, 256, 0}, {200, 10, 0},   {1, 7, 0},
                          {1000, 33, 0},  {17, 1, 0},    {200, 100, 128}, {0, 5, 0}};
  for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
    for (const Shape& s : shapes) {
      for (bool acc : {false, true}) {
        const int64_t ld = s.ld ? s.ld : s.cols;
        const std::string tag = std::string(gpu_dtype_name(t)) + " rows=" + std::to_string(s.rows) +
                                " cols=" + std::to_string(s.cols) + " ld=" + std::to_string(ld) +
                                (acc ? " accumulate" : "");
        INFO(tag);
        std::vector<float> dy = rng.normal_vec(std::max<int64_t>(s.rows * ld, 1), 0.0f, 1.0f);
        for (auto& v : dy) v = round_to(t, v);
        const std::vector<float> db0 = rng.normal_vec(s.cols, 0.0f, 1.0f);
        DevBuf ddy = to_device_as(t, dy);
        DevBuf ddb = acc ? to_device(db0) : DevBuf(s.cols * 4);
        if (!acc) poison(ddb);
        REQUIRE_OK(bias_grad_cuda(ctx.stream, ddy.get(), t, s.rows, s.cols, s.ld, ddb.as<float>(), acc));
        sync_ok(ctx);
        std::vector<double> ref(s.cols, 0.0), bound(s.cols, 0.0);
        for (int64_t j = 0; j < s.cols; ++j) {
          double mag = 0;
          for (int64_t i = 0; i < s.rows; ++i) {
            ref[j] += dy[i * ld + j];
            mag += std::fabs(dy[i * ld + j]);
          }
          if (acc) {
            ref[j] += db0[j];
            mag += std::fabs(db0[j]);
          }
          bound[j] = 1e-5 * mag;
        }
        const auto got = from_device<float>(ddb.get(), s.cols);
        CHECK_RESULT(compare_close("bias_grad " + tag, to_double(got), ref, bound));
        if (!acc) {
          poison(ddb);
          REQUIRE_OK(bias_grad_cuda(ctx.stream, ddy.get(), t, s.rows, s.cols, s.ld, ddb.as<float>(), false));
          sync_ok(ctx);
          const auto again = from_device<float>(ddb.get(), s.cols);
          CHECK_RESULT(compare_bitwise("bias_grad rerun " + tag, got.data(), again.data(), s.cols * 4, 4));
        }
      }
    }
  }
}

// Convolution bias gradients: rows = N*P*Q up to millions. Two passes (row blocks, then their partials), each
// thread summing at most ceil(rpb/16) values: the same error bound as above with rows replaced by the larger of
// the two passes' lengths, well under 1e-5 * sum|dy|.
TEST_CASE("bias_grad_large column sums match the double reference for convolution shapes", "[kernel][bias_grad]") {
  CudaContext ctx = make_context();
  Rng rng(52);
  struct Shape {
    int64_t rows, cols;
  };
  const Shape shapes[] = {{8 * 224 * 224, 64}, {300000, 3}, {256 * 7 * 7, 512}, {1000, 64}, {1025, 96}};
  for (GpuDType t : {GpuDType::F32, GpuDType::F16}) {
    for (const Shape& s : shapes) {
      const std::string tag = std::string(gpu_dtype_name(t)) + " rows=" + std::to_string(s.rows) +
                              " cols=" + std::to_string(s.cols);
      INFO(tag);
      std::vector<float> dy = rng.normal_vec(s.rows * s.cols, 0.0f, 1.0f);
      for (auto& v : dy) v = round_to(t, v);
      DevBuf ddy = to_device_as(t, dy);
      DevBuf ddb(s.cols * 4);
      const size_t wsb = bias_grad_workspace_bytes(s.rows, s.cols);
      DevBuf ws(wsb + 16);
      poison(ddb);
      poison(ws);
      REQUIRE_OK(bias_grad_large_cuda(ctx.stream, ddy.get(), t, s.rows, s.cols, ddb.as<float>(), ws.get(), wsb));
      sync_ok(ctx);
      std::vector<double> ref(s.cols, 0.0), bound(s.cols, 0.0);
      for (int64_t i = 0; i < s.rows; ++i)
        for (int64_t j = 0; j < s.cols; ++j) {
          ref[j] += dy[i * s.cols + j];
          bound[j] += 1e-5 * std::fabs(dy[i * s.cols + j]);
        }
      const auto got = from_device<float>(ddb.get(), s.cols);
      CHECK_RESULT(compare_close("bias_grad_large " + tag, to_double(got), ref, bound));
      poison(ddb);
      REQUIRE_OK(bias_grad_large_cuda(ctx.stream, ddy.get(), t, s.rows, s.cols, ddb.as<float>(), ws.get(), wsb));
      sync_ok(ctx);
      const auto again = from_device<float>(ddb.get(), s.cols);
      CHECK_RESULT(compare_bitwise("bias_grad_large rerun " + tag, got.data(), again.data(), s.cols * 4, 4));
    }
  }
}
