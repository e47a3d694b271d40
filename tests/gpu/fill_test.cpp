// Fill, zero and step-counter kernels: every element written with the exact value, tails and misaligned views.
#include "runtime/ops/fill/fill_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

TEST_CASE("fill writes every element of f32 and i32 ranges, aligned or not", "[kernel][fill]") {
  CudaContext ctx = make_context();
  for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{4096}, int64_t{1000003}}) {
    for (int64_t off : {int64_t{0}, int64_t{1}, int64_t{3}}) {
      INFO("n=" << n << " offset=" << off);
      DevBuf f((n + off + 1) * 4), i((n + off + 1) * 4);
      poison(f);
      poison(i);
      REQUIRE_OK(fill_f32_cuda(ctx.stream, f.as<float>() + off, n, -0.375f));
      REQUIRE_OK(fill_i32_cuda(ctx.stream, i.as<int32_t>() + off, n, 123456789));
      sync_ok(ctx);
      const auto hf = from_device<float>(f.get(), n + off + 1);
      const auto hi = from_device<int32_t>(i.get(), n + off + 1);
      int64_t wrong_f = 0, wrong_i = 0, touched = 0;
      for (int64_t k = 0; k < n + off + 1; ++k) {
        const bool inside = k >= off && k < off + n;
        if (inside) {
          wrong_f += hf[k] != -0.375f;
          wrong_i += hi[k] != 123456789;
        } else {
          touched += !std::isnan(hf[k]) || hi[k] != -1;  // outside the range: still the poison
        }
      }
      CHECK(wrong_f == 0);
      CHECK(wrong_i == 0);
      CHECK(touched == 0);
    }
  }
}

TEST_CASE("zero_cuda clears bytes and counter_add_u32_cuda adds on the device, wrapping mod 2^32",
          "[kernel][fill]") {
  CudaContext ctx = make_context();
  DevBuf b(1000);
  poison(b);
  REQUIRE_OK(zero_cuda(ctx.stream, b.get(), 999));
  DevBuf c = to_device(std::vector<uint32_t>{0xFFFFFFFEu});
  REQUIRE_OK(counter_add_u32_cuda(ctx.stream, c.as<uint32_t>(), 1));
  REQUIRE_OK(counter_add_u32_cuda(ctx.stream, c.as<uint32_t>(), 2));
  sync_ok(ctx);
  const auto h = from_device<uint8_t>(b.get(), 1000);
  int64_t nonzero = 0;
  for (int k = 0; k < 999; ++k) nonzero += h[k] != 0;
  CHECK(nonzero == 0);
  CHECK(h[999] == 0xFF);
  CHECK(from_device<uint32_t>(c.get(), 1)[0] == 1u);
}
