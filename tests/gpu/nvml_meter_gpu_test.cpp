// nvml_meter_open on the test's GPU (runtime/power/nvml_meter.h, what `bench --layers --energy` reads): NVML opens
// the device cudaDeviceGetPCIBusId names, and the board's energy counter grows over a second of a busy kernel loop.
#include <catch2/catch.hpp>

#include <chrono>

#include "runtime/ops/fill/fill_cuda.h"
#include "runtime/power/nvml_meter.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

TEST_CASE("the board's energy counter opens through NVML and grows while kernels run", "[gpu][energy]") {
  CudaContext ctx = make_context();
  char bus[32] = {};
  REQUIRE(cudaDeviceGetPCIBusId(bus, sizeof bus, ctx.device) == cudaSuccess);
  Result<NvmlMeter> m = nvml_meter_open(bus);
  INFO((m.ok() ? std::string("opened ") + bus : m.error_text()));
  REQUIRE(m.ok());
  Result<uint64_t> e0 = nvml_energy_mj(m.value());
  REQUIRE(e0.ok());
  DevBuf buf(size_t{256} << 20);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1200)) {
    for (int k = 0; k < 20; ++k) REQUIRE_OK(fill_f32_cuda(ctx.stream, buf.as<float>(), (int64_t{256} << 20) / 4, 1.0f));
    sync_ok(ctx);
  }
  Result<uint64_t> e1 = nvml_energy_mj(m.value());
  REQUIRE(e1.ok());
  // An H100/H200 idles at ~70 W and draws more while filling: over 1.2 s, well above 30 J.
  CHECK(e1.value() - e0.value() > 30000);
  nvml_meter_close(&m.value());
  CHECK(m.value().lib == nullptr);
}
