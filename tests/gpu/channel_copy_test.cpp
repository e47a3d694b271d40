// Channel copy (pad 3 -> 8 with zeros, slice 8 -> 3, with casts) vs the obvious host loop, exactly.
#include "runtime/ops/channel_copy/channel_copy_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

TEST_CASE("channel_copy pads with zeros and slices, casting exactly", "[kernel][channel_copy]") {
  CudaContext ctx = make_context();
  Rng rng(61);
  struct Case {
    int64_t rows, c_src, c_dst;
    GpuDType ts, td;
  };
  const Case cases[] = {{256 * 224 + 7, 3, 8, GpuDType::F16, GpuDType::F16},
                        {64 * 49, 8, 3, GpuDType::F16, GpuDType::F32},
                        {1000, 3, 4, GpuDType::BF16, GpuDType::BF16},
                        {33, 5, 5, GpuDType::F32, GpuDType::F32}};
  for (const Case& c : cases) {
    INFO("rows " << c.rows << " " << c.c_src << " -> " << c.c_dst << " " << gpu_dtype_name(c.ts) << " -> "
                 << gpu_dtype_name(c.td));
    std::vector<float> src = rng.normal_vec(c.rows * c.c_src, 0.0f, 1.0f);
    for (auto& v : src) v = round_to(c.ts, v);
    DevBuf ds = to_device_as(c.ts, src);
    DevBuf dd(c.rows * c.c_dst * gpu_dtype_size(c.td));
    poison(dd);
    REQUIRE_OK(channel_copy_cuda(ctx.stream, ds.get(), c.ts, c.c_src, dd.get(), c.td, c.c_dst, c.rows));
    sync_ok(ctx);
    const std::vector<float> got = from_device_as(c.td, dd.get(), c.rows * c.c_dst);
    std::vector<double> ref(got.size());
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.c_dst; ++j) ref[r * c.c_dst + j] = j < c.c_src ? src[r * c.c_src + j] : 0.0;
    CHECK_RESULT(compare_close("channel_copy", to_double(got), ref, std::vector<double>(ref.size(), 0.0)));
  }
}
