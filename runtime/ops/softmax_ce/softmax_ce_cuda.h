// Softmax cross-entropy with label smoothing, forward and backward fused, with top-1 accuracy, on the GPU.
// Per row n of logits (N, C): logp = x - max - log(sum exp(x - max));
//   loss_n = (1 - eps) * (-logp[y_n]) + eps * mean_c(-logp[c]);            loss = (1/N) * sum_n loss_n
//   dlogits[n][c] = (softmax[n][c] - ((1 - eps) * [c == y_n] + eps / C)) * (loss_scale * grad_scale / N)
//   correct: argmax_c x[n][c] == y_n, first maximum wins on ties.
//   correct5: fewer than min(5, C) logits of the row strictly greater than x[n][y_n] (top-5 with ties counted
//   for the label; accuracy_topk_cpu's rule).
// A row whose label is outside [0, C) contributes nothing (loss 0, gradient row 0, not correct) and is counted in
// bad_labels; the mean still divides by N. All reductions are in a fixed order (warp butterflies per row, then one
// block over the rows in double), so every output is bitwise reproducible run to run.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

struct SoftmaxCeArgs {
  const void* logits = nullptr;     // (N, C) logits_type
  GpuDType logits_type = GpuDType::F32;
  const int32_t* labels = nullptr;  // (N)
  int64_t rows = 0;                 // N
  int64_t classes = 0;              // C
  float label_smoothing = 0.0f;     // eps
  const float* loss_scale = nullptr;  // device (1), read per launch; null = 1
  float grad_scale = 1.0f;          // dlogits also times this (1 / train.accumulate_steps)
  void* dlogits = nullptr;          // (N, C) dlogits_type; null = forward only (evaluation)
  GpuDType dlogits_type = GpuDType::F32;
  void* workspace = nullptr;        // softmax_ce_workspace_bytes(N), device
  size_t workspace_bytes = 0;
  // Device outputs. loss is overwritten every launch; the others are accumulators (+=) that the step program
  // zeroes at epoch start and the host reads at log intervals.
  float* loss = nullptr;            // (1) mean loss of this batch
  double* loss_sum = nullptr;       // (1) += sum_n loss_n (per-sample sum: epoch mean = loss_sum / samples); nullable
  int32_t* correct = nullptr;       // (1) += top-1 correct rows; nullable
  int32_t* correct5 = nullptr;      // (1) += top-5 correct rows; nullable
  int32_t* bad_labels = nullptr;    // (1) += rows with a label outside [0, C); nullable
};

size_t softmax_ce_workspace_bytes(int64_t rows);

Status softmax_ce_cuda(cudaStream_t stream, const SoftmaxCeArgs& args);

}  // namespace trctl
