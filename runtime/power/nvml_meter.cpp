// nvml_meter_open / nvml_energy_mj / nvml_meter_close (see nvml_meter.h). The NVML entry points are declared here
// with NVML's C signatures (nvmlReturn_t is an int enum, 0 = success; nvmlDevice_t an opaque pointer), so no NVML
// header is needed to build.
#include "runtime/power/nvml_meter.h"

#include <dlfcn.h>

namespace trctl {
namespace {

using InitFn = int (*)();
using HandleFn = int (*)(const char* pci_bus_id, void** device);

Error nvml_error(const std::string& what) { return Error{ErrCode::NotSupported, "energy", what}; }

template <class F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

Result<NvmlMeter> nvml_meter_open(const std::string& pci_bus_id, const std::string& library) {
  NvmlMeter m;
  m.lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!m.lib) {
    const char* why = dlerror();
    return nvml_error("cannot load " + library + " (NVML, part of the NVIDIA driver): " + (why ? why : "unknown"));
  }
  const InitFn init = symbol<InitFn>(m.lib, "nvmlInit_v2");
  const HandleFn handle = symbol<HandleFn>(m.lib, "nvmlDeviceGetHandleByPciBusId_v2");
  m.energy = symbol<int (*)(void*, unsigned long long*)>(m.lib, "nvmlDeviceGetTotalEnergyConsumption");
  m.shutdown = symbol<int (*)()>(m.lib, "nvmlShutdown");
  m.error_string = symbol<const char* (*)(int)>(m.lib, "nvmlErrorString");
  if (!init || !handle || !m.energy || !m.shutdown || !m.error_string) {
    dlclose(m.lib);
    return nvml_error(library + " lacks one of nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2, "
                                "nvmlDeviceGetTotalEnergyConsumption, nvmlShutdown, nvmlErrorString");
  }
  auto fail = [&](const std::string& call, int code, bool initialized) {
    const std::string text = call + ": " + m.error_string(code) + " (NVML code " + std::to_string(code) + ")";
    if (initialized) m.shutdown();
    dlclose(m.lib);
    return nvml_error(text);
  };
  if (int r = init(); r != 0) return fail("nvmlInit_v2", r, false);
  if (int r = handle(pci_bus_id.c_str(), &m.device); r != 0)
    return fail("nvmlDeviceGetHandleByPciBusId_v2(" + pci_bus_id + ")", r, true);
  unsigned long long mj = 0;
  if (int r = m.energy(m.device, &mj); r != 0) return fail("nvmlDeviceGetTotalEnergyConsumption", r, true);
  return m;
}

Result<uint64_t> nvml_energy_mj(const NvmlMeter& m) {
  if (!m.lib || !m.energy) return Error{ErrCode::Internal, "energy", "nvml_energy_mj on a closed meter"};
  unsigned long long mj = 0;
  if (int r = m.energy(m.device, &mj); r != 0)
    return nvml_error(std::string("nvmlDeviceGetTotalEnergyConsumption: ") + m.error_string(r));
  return static_cast<uint64_t>(mj);
}

void nvml_meter_close(NvmlMeter* m) {
  if (!m || !m->lib) return;
  if (m->shutdown) m->shutdown();
  dlclose(m->lib);
  *m = NvmlMeter{};
}

}  // namespace trctl
