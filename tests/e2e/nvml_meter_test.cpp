// nvml_meter_open (runtime/power/nvml_meter.h) without NVML: a library that is not there, and one without NVML's
// symbols, give NotSupported errors that name the library (on the device, tests/gpu/nvml_meter_gpu_test.cpp reads
// the counter).
#include <catch2/catch.hpp>

#include "runtime/power/nvml_meter.h"

using namespace trctl;

TEST_CASE("nvml_meter_open says which library it could not load or use", "[bench][energy]") {
  Result<NvmlMeter> none = nvml_meter_open("0000:00:00.0", "libtrctl-no-such-nvml.so.1");
  REQUIRE_FALSE(none.ok());
  CHECK(none.errors()[0].code == ErrCode::NotSupported);
  CHECK_THAT(none.error_text(), Catch::Contains("energy: cannot load libtrctl-no-such-nvml.so.1 (NVML, part of the "
                                                "NVIDIA driver)"));
  Result<NvmlMeter> libm = nvml_meter_open("0000:00:00.0", "libm.so.6");  // loads, but is not NVML
  REQUIRE_FALSE(libm.ok());
  CHECK_THAT(libm.error_text(), Catch::Contains("libm.so.6 lacks one of nvmlInit_v2"));
  NvmlMeter closed;
  CHECK_FALSE(nvml_energy_mj(closed).ok());
  nvml_meter_close(&closed);  // an empty meter: nothing to do
}
