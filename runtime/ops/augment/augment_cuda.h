// Gather + augment on the GPU for device-resident datasets: the next `batch` samples of the epoch order are read
// from the uint8 dataset in device memory, their random transform parameters are drawn on the device from the
// same Philox stream as the CPU's transforms_draw (keyed by seed, epoch, dataset index), and each output pixel is
// computed by the same backward maps as transforms_apply (dataio/transforms_map.h). Cursor and epoch live in
// device memory, so one captured graph serves every batch of every epoch.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "dataio/transforms.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

constexpr int kGpuMaxSteps = 12;
constexpr int kGpuMaxChannels = 4;

// The pipeline as plain data for a kernel argument.
struct GpuPipeline {
  int32_t nsteps = 0;
  TransformSpec steps[kGpuMaxSteps];
  int32_t in_h = 0, in_w = 0, c = 0, out_h = 0, out_w = 0;
  float mean[kGpuMaxChannels] = {}, std_dev[kGpuMaxChannels] = {};
};

// NotSupported when the pipeline has more steps or channels than the kernel handles.
Result<GpuPipeline> gpu_pipeline_make(const TransformPipeline& p);
// No step but normalize and no resize: augment_batch_cuda's fp16 / bf16 batches then take normalize_batch_kernel (the
// batch's bytes in order through the table, bitwise the general kernel's output).
bool normalize_only(const GpuPipeline& p);

// Where a split lives on the device and where its epoch stands.
struct ResidentSplit {
  const uint8_t* pixels = nullptr;   // (n, in_h, in_w, c) u8
  const int32_t* labels = nullptr;   // (n)
  const int32_t* order = nullptr;    // (n) this epoch's sample order
  int64_t n = 0;
  uint32_t* cursor = nullptr;        // device: position in the order of the next batch's first sample
  const uint32_t* epoch = nullptr;   // device: the epoch key of the transforms
};

// Per-step bookkeeping folded into the kernel that advances the cursor (one graph node instead of three).
struct StepBookkeeping {
  uint32_t* step = nullptr;   // += 1 when given (the optimizer step counter; dropout's key without accumulation)
  int32_t* clear = nullptr;   // = 0 when given (AMP's found_inf flag, set later by the non-finite check)
  // Gradient accumulation over `accumulate` micro-batches per optimizer step (train.accumulate_steps > 1): first
  // *key = *steps * accumulate + *micro + 1 (dropout's key of this micro-batch: *steps optimizer steps done, *micro
  // micro-batches of the current one), then *micro = flush ? 0 : *micro + 1, then `step` as above. All three given
  // or none; `steps` is the counter that `step` (given on flush steps only) advances.
  uint32_t* key = nullptr;
  uint32_t* micro = nullptr;
  const uint32_t* steps = nullptr;
  uint32_t accumulate = 1;
  bool flush = false;
};

// x (batch, out_h, out_w, c) x_type, y (batch) i32; then advances *cursor by batch and does `book`. Two launches:
// one block per sample (its thread 0 draws the parameters into shared memory, all threads write pixels) -- or, for a
// normalize_only pipeline into fp16 / bf16, the batch's elements 8 at a time (normalize_batch_kernel) --, then one
// thread for the bookkeeping.
Status augment_batch_cuda(cudaStream_t stream, const GpuPipeline& p, const ResidentSplit& split, uint64_t seed,
                          int64_t batch, void* x, GpuDType x_type, int32_t* y, const StepBookkeeping& book = {});

// The same bookkeeping alone, for a step whose batch the host copied into the input slot (load_batch).
Status step_bookkeeping_cuda(cudaStream_t stream, const StepBookkeeping& book);

}  // namespace trctl
