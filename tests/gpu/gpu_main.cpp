// Main of test_gpu: without a CUDA device it prints "skipped: no CUDA device" and exits 77 (ctest: Skipped, never
// Passed); with one it prints what it runs on and runs the Catch2 session. --list-* and --help work without one.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace {

// A loaded NVIDIA kernel driver: then a failing device query is an error, not an absent device.
bool nvidia_driver_loaded() { return access("/proc/driver/nvidia/version", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0; }

// Listing or help needs no device: those invocations run the session even without one.
bool listing_only(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    for (const char* opt : {"-l", "--list-tests", "--list-test-names-only", "--list-tags", "--list-reporters", "-h",
                            "-?", "--help"}) {
      if (std::strcmp(argv[i], opt) == 0) return true;
    }
  }
  return false;
}

void print_device(int count) {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("CUDA driver %d, runtime %d, cuBLASLt %zu, %d device(s)\n", driver, runtime, cublasLtGetVersion(),
              count);
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) {
    std::printf("device 0: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB\n", p.name, p.major, p.minor,
                p.multiProcessorCount, static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0),
                p.l2CacheSize >> 20);
    if (p.major != 9 || p.minor != 0) {
      std::printf("note: the kernels are built for sm_90 only; on this device launches will fail with "
                  "cudaErrorNoKernelImageForDevice\n");
    }
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (listing_only(argc, argv)) {
    Catch::Session().run(argc, argv);
    return 0;
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  const bool absent = (err == cudaSuccess && count == 0) || err == cudaErrorNoDevice ||
                      (err == cudaErrorInsufficientDriver && !nvidia_driver_loaded());
  if (absent) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  if (err != cudaSuccess) {
    std::fprintf(stderr, "error: cudaGetDeviceCount failed with an NVIDIA driver present: %s (%s)\n",
                 cudaGetErrorName(err), cudaGetErrorString(err));
    return 1;
  }
  print_device(count);
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const int failed = session.run();
  return failed == 77 ? 1 : failed;  // 77 failures must not read as "skipped"
}
