// The Loss op on the GPU (BCE with logits, MSE, weighted cross-entropy; formulas in loss.h), forward and backward
// fused, with the accuracy counts. Kernels: (1) weighted cross-entropy only: one block sums the target-class weights
// Wt over the labels (double, fixed order); (2) one warp per row: the row's loss numerator, the flags (bad label,
// top-1, top-5) and, when dlogits is given, the gradient row; (3) one block reduces the rows in a fixed order and
// updates the accumulators. No atomics: every output is bitwise reproducible run to run.
// Accuracy: W = C: the label's logit is the first maximum (top-1), fewer than min(C, 5) logits are strictly greater
// (top-5), as the Accuracy op / softmax_ce; W = 1: predicted 1 iff the logit > 0, top-5 = every usable row.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/graph/act_loss.h"
#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

struct LossCudaArgs {
  LossFn fn = LossFn::Mse;
  const void* logits = nullptr;       // (N, W) logits_type
  GpuDType logits_type = GpuDType::F32;
  const int32_t* labels = nullptr;    // (N)
  int64_t rows = 0;                   // N
  int64_t width = 0;                  // W: 1 (binary bce head) or the number of classes
  float label_smoothing = 0.0f;       // weighted cross-entropy
  const float* class_weights = nullptr;  // device (W), weighted cross-entropy
  const float* loss_scale = nullptr;  // device (1), read per launch; null = 1
  float grad_scale = 1.0f;            // dlogits also times this (1 / train.accumulate_steps)
  void* dlogits = nullptr;            // (N, W) dlogits_type; null = forward only (evaluation)
  GpuDType dlogits_type = GpuDType::F32;
  void* workspace = nullptr;          // loss_cuda_workspace_bytes(N), device
  size_t workspace_bytes = 0;
  // Device outputs. loss is overwritten every launch; the others are accumulators (+=).
  float* loss = nullptr;              // (1) mean loss of this batch
  double* loss_sum = nullptr;         // (1) += loss * N (epoch mean = loss_sum / samples, as MetricAccumulate); nullable
  int32_t* correct = nullptr;         // (1) += top-1 correct rows; nullable
  int32_t* correct5 = nullptr;        // (1) += top-5 correct rows; nullable
  int32_t* bad_labels = nullptr;      // (1) += rows whose label the loss cannot use; nullable
};

size_t loss_cuda_workspace_bytes(int64_t rows);

Status loss_cuda(cudaStream_t stream, const LossCudaArgs& args);

}  // namespace trctl
