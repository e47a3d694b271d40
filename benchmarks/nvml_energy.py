"""The board's energy counter through NVML (libnvidia-ml.so.1 by ctypes; no torch, no pynvml): what the PyTorch
side-by-side scripts read around their timed windows, as trctl reads it around its training epochs (Backend::
energy_mj: nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver loaded).

    meter = NvmlEnergy.open(uuid="GPU-...")   # or pci_bus_id="00000000:19:00.0"; None where NVML is unavailable
    mj = meter.read_mj()                      # None when a read fails
    meter.close()

Where NVML is missing (no NVIDIA driver, a GPU without the counter) open() returns None with the reason in
`NvmlEnergy.last_error`, so a benchmark records no energy instead of failing.
"""
import ctypes

NVML_SUCCESS = 0


class NvmlEnergy:
    last_error = ""  # why the last open() gave None

    def __init__(self, lib, handle):
        self._lib = lib
        self._handle = handle

    @classmethod
    def open(cls, uuid=None, pci_bus_id=None, lib_name="libnvidia-ml.so.1"):
        """The device named by its UUID ("GPU-..." as nvidia-smi prints it; torch's props.uuid with "GPU-" added)
        or PCI bus id; with neither, the only device (None when there are several: which one would be a guess)."""
        try:
            lib = ctypes.CDLL(lib_name)
        except OSError as e:
            cls.last_error = f"{lib_name}: {e}"
            return None
        init = getattr(lib, "nvmlInit_v2", None) or getattr(lib, "nvmlInit", None)
        if init is None or init() != NVML_SUCCESS:
            cls.last_error = "nvmlInit failed"
            return None
        handle = ctypes.c_void_p()
        if uuid:
            rc = lib.nvmlDeviceGetHandleByUUID(ctypes.c_char_p(uuid.encode()), ctypes.byref(handle))
        elif pci_bus_id:
            rc = lib.nvmlDeviceGetHandleByPciBusId_v2(ctypes.c_char_p(pci_bus_id.encode()), ctypes.byref(handle))
        else:
            count = ctypes.c_uint()
            rc = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
            if rc == NVML_SUCCESS and count.value != 1:
                lib.nvmlShutdown()
                cls.last_error = f"{count.value} NVML devices and none named"
                return None
            if rc == NVML_SUCCESS:
                rc = lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(0), ctypes.byref(handle))
        if rc != NVML_SUCCESS:
            lib.nvmlShutdown()
            cls.last_error = f"no NVML device for uuid={uuid} pci_bus_id={pci_bus_id} (nvml error {rc})"
            return None
        meter = cls(lib, handle)
        if meter.read_mj() is None:
            meter.close()
            cls.last_error = "nvmlDeviceGetTotalEnergyConsumption is not supported on this device"
            return None
        return meter

    def read_mj(self):
        """The counter in millijoules (an int), or None when the read fails."""
        if self._lib is None:
            return None
        mj = ctypes.c_ulonglong()
        rc = self._lib.nvmlDeviceGetTotalEnergyConsumption(self._handle, ctypes.byref(mj))
        return mj.value if rc == NVML_SUCCESS else None

    def close(self):
        if self._lib is not None:
            self._lib.nvmlShutdown()
            self._lib = None


def torch_device_uuid(props):
    """NVML's "GPU-..." UUID of a torch.cuda.get_device_properties() result, or None where torch does not give one."""
    u = getattr(props, "uuid", None)
    if u is None:
        return None
    s = str(u)
    return s if s.startswith("GPU-") else "GPU-" + s


def window_energy(mj_before, mj_after, steps, seconds):
    """A timed window's joules per step and mean watts from two counter reads (None, None when either failed)."""
    if mj_before is None or mj_after is None or steps <= 0 or seconds <= 0 or mj_after < mj_before:
        return None, None
    joules = (mj_after - mj_before) * 1e-3
    return joules / steps, joules / seconds
