#!/usr/bin/env python3
"""benchmarks/nvml_energy.py without a GPU: a missing NVML library gives no meter and says why (a benchmark then
records no energy rather than failing), a window's joules per step and watts from two counter reads, no figure
from a failed or wrapped read, and the NVML UUID of a torch device's properties. Run by ctest ("tools: nvml
energy"); stdlib only."""
import os
import sys

from tool_check import ROOT, check, finish

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import nvml_energy  # noqa: E402


class Props:  # what torch.cuda.get_device_properties() gives, reduced to the uuid
    def __init__(self, uuid):
        self.uuid = uuid


def main():
    meter = nvml_energy.NvmlEnergy.open(lib_name="libnvidia-ml-not-here.so.1")
    check("no NVML library: no meter", meter is None, repr(meter))
    check("... and the reason names the library", "libnvidia-ml-not-here.so.1" in nvml_energy.NvmlEnergy.last_error,
          nvml_energy.NvmlEnergy.last_error)
    # 3,750,000 mJ over 100 steps in 5.5 s: 37.5 J per step at 681.8 W
    j, w = nvml_energy.window_energy(1_000_000, 4_750_000, 100, 5.5)
    check("window: 37.5 J per step", j is not None and abs(j - 37.5) < 1e-9, repr(j))
    check("window: 681.8 W", w is not None and abs(w - 3750 / 5.5) < 1e-9, repr(w))
    check("a failed read: no figure", nvml_energy.window_energy(None, 5, 100, 1.0) == (None, None))
    check("a counter that went backwards: no figure", nvml_energy.window_energy(10, 5, 100, 1.0) == (None, None))
    check("no steps: no figure", nvml_energy.window_energy(0, 5, 0, 1.0) == (None, None))
    uuid = "5e8c1f4a-0b7d-4c2e-9a31-2f6d8e0c7b19"
    check("torch's uuid gets NVML's GPU- prefix", nvml_energy.torch_device_uuid(Props(uuid)) == "GPU-" + uuid)
    check("one already prefixed is kept", nvml_energy.torch_device_uuid(Props("GPU-" + uuid)) == "GPU-" + uuid)
    check("no uuid: None", nvml_energy.torch_device_uuid(object()) is None)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
