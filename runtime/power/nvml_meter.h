// NvmlMeter: the board's energy counter (NVML's nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver
// loaded), for `trctl bench CFG --layers --energy S` (runtime/cuda/cuda_profile.cpp): under a power cap a step's
// time follows its energy (RESULTS.md run 63: VGG16-BN's training run at the H100's 700 W cap), so the profile
// can say which nodes spend it. NVML comes with the NVIDIA driver, not the CUDA toolkit: libnvidia-ml.so.1 is
// loaded at run time (dlopen), so trctl links nothing for it and a machine without it gets an error saying so.
// Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>
#include <string>

#include "core/util/error.h"

namespace trctl {

// An open NVML session on one device; close with nvml_meter_close. Trivially copyable handles, no ownership logic:
// the caller closes it once.
struct NvmlMeter {
  void* lib = nullptr;     // dlopen handle of libnvidia-ml.so.1
  void* device = nullptr;  // nvmlDevice_t
  int (*energy)(void* device, unsigned long long* mj) = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int code) = nullptr;
};

// Opens NVML (`library`: the file to dlopen, default the driver's) and the device at `pci_bus_id` (as
// cudaDeviceGetPCIBusId writes it, e.g. "0000:00:06.0"), and reads the counter once. Errors (NotSupported): no
// such library, a missing symbol, NVML's own error text (no device, no energy counter on this board).
Result<NvmlMeter> nvml_meter_open(const std::string& pci_bus_id, const std::string& library = "libnvidia-ml.so.1");

// The counter now (mJ since the driver loaded). The board updates it every 20-100 ms: a measurement is the
// difference over an interval of a second or more.
Result<uint64_t> nvml_energy_mj(const NvmlMeter& m);

// Shuts NVML down and unloads the library; the meter is empty afterwards.
void nvml_meter_close(NvmlMeter* m);

}  // namespace trctl
