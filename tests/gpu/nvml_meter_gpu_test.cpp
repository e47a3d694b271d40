// nvml_meter_open on the test's GPU (runtime/power/nvml_meter.h, what `bench --layers --energy` reads): NVML opens
// the device cudaDeviceGetPCIBusId names, and the board's energy counter grows over a second of a busy kernel loop;
// a CUDA training run's epoch records carry that counter's joules (Backend::energy_mj, the trainer).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "runtime/ops/fill/fill_cuda.h"
#include "runtime/power/nvml_meter.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/gpu_train_util.h"

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

TEST_CASE("a CUDA training run's epochs record the board's energy and power; a CPU run's none", "[gpu][energy]") {
  auto run = [](const char* device, int epochs) {
    std::vector<std::string> o = {std::string("train.device=") + device, "train.epochs=" + std::to_string(epochs)};
    if (const char* root = std::getenv("TRCTL_FMNIST_ROOT")) o.push_back(std::string("data.root=") + root);
    if (std::string(device) == "cpu") o.push_back("data.train_subset=1000");
    Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml", o);
    REQUIRE(s.ok());
    return train_cuda(s.value());  // the CUDA factory: train.device picks the backend
  };
  // 8 epochs of ~40 ms: the counter updates every 20-100 ms, so single epochs may read 0 J; their sum may not.
  const TrainResult gpu = run("cuda", 8);
  double joules = 0, seconds = 0;
  for (const EpochRecord& e : gpu.epochs) {
    INFO("epoch " << e.epoch << ": " << e.energy_j << " J, " << e.power_w() << " W, " << e.steps << " steps");
    REQUIRE(std::isfinite(e.energy_j));
    CHECK(e.energy_j >= 0);
    CHECK(e.steps == 300);  // 60,000 images at batch 200
    joules += e.energy_j;
    seconds += e.train_seconds;  // the energy's interval
  }
  INFO(joules << " J over " << seconds << " s");
  CHECK(joules > 0);
  CHECK(joules / seconds > 30);    // an H100/H200 idles at ~70 W
  CHECK(joules / seconds < 1500);  // and is capped at 700 W (the counter's update steps blur short epochs)
  const TrainResult cpu = run("cpu", 1);
  CHECK_FALSE(std::isfinite(cpu.epochs.at(0).energy_j));
}
