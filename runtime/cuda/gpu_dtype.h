// Element types of device buffers that the CUDA kernels take type-erased (void* + GpuDType), and launch-size
// constants for the target GPU. Plain C++ (no CUDA headers), so host code and tests can include it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace trctl {

enum class GpuDType { F32, F16, BF16 };

inline size_t gpu_dtype_size(GpuDType t) { return t == GpuDType::F32 ? 4 : 2; }
inline const char* gpu_dtype_name(GpuDType t) {
  switch (t) {
    case GpuDType::F32: return "f32";
    case GpuDType::F16: return "f16";
    case GpuDType::BF16: return "bf16";
  }
  return "?";
}

// Launch sizing for H200 (sm_90, 132 SMs, 2048 resident threads per SM). Elementwise kernels use 256-thread blocks
// and a grid-stride loop capped at one full wave (132 * 8 blocks of 256 threads): larger grids only add block
// scheduling overhead for memory-bound loops, smaller ones leave SMs idle. The cap is a constant rather than a
// device query so that launches never depend on host state; on a GPU with fewer SMs the loop simply runs longer.
constexpr int kGpuSmCount = 132;
constexpr int kElementwiseBlock = 256;
constexpr int64_t kElementwiseMaxGrid = int64_t{kGpuSmCount} * 8;

inline unsigned elementwise_grid(int64_t work_items, int block = kElementwiseBlock) {
  int64_t g = (work_items + block - 1) / block;
  if (g < 1) g = 1;
  if (g > kElementwiseMaxGrid) g = kElementwiseMaxGrid;
  return static_cast<unsigned>(g);
}

// True when every non-null pointer is aligned to `bytes` (vector loads of that width are legal).
inline bool gpu_aligned(size_t bytes, const void* a, const void* b = nullptr, const void* c = nullptr,
                        const void* d = nullptr) {
  auto ok = [bytes](const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  return ok(a) && ok(b) && ok(c) && ok(d);
}

}  // namespace trctl
