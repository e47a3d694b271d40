// Bias add (y += b broadcast over rows) vs the host computation, every dtype, vector and scalar paths.
#include "runtime/ops/bias_add/bias_add_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

TEST_CASE("bias_add adds the bias to every row, rounded once", "[kernel][bias_add]") {
  CudaContext ctx = make_context();
  Rng rng(71);
  const std::pair<int64_t, int64_t> shapes[] = {{256 * 56 * 2, 64}, {1000, 3}, {77, 24}, {5, 1}};
  for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
    for (const auto& [rows, cols] : shapes) {
      INFO(gpu_dtype_name(t) << " rows " << rows << " cols " << cols);
      std::vector<float> y = rng.normal_vec(rows * cols, 0.0f, 1.0f), b = rng.normal_vec(cols, 0.0f, 1.0f);
      for (auto& v : y) v = round_to(t, v);
      for (auto& v : b) v = round_to(t, v);
      DevBuf dy = to_device_as(t, y), db = to_device_as(t, b);
      REQUIRE_OK(bias_add_cuda(ctx.stream, dy.get(), db.get(), rows, cols, t));
      sync_ok(ctx);
      const std::vector<float> got = from_device_as(t, dy.get(), rows * cols);
      std::vector<double> ref(got.size()), tol(got.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const double v = static_cast<double>(y[r * cols + c]) + b[c];
          ref[r * cols + c] = round_to(t, static_cast<float>(v));  // fp32 sum (exact here) rounded once to t
          tol[r * cols + c] = 0;
        }
      CHECK_RESULT(compare_close("bias_add", to_double(got), ref, tol));
    }
  }
}
