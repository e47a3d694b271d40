// Which training batch norms' backward dx the few-channel weight gradient computes itself while staging its dy (its
// batch-norm prologue, runtime/ops/conv2d/fewc_cuda.h's FewcBnGradIn): the rule CudaBackend applies when planning.
// The batch norm's backward then runs its first two passes only (dgamma, dbeta), so its third pass (read g and x,
// write dx) and the weight gradient's read of dx become one read of g and x: VGG16-BN's features_1 backward, whose dx
// only features_0's weight gradient reads. Plain C++ (no CUDA), tested on the CPU.
#pragma once
#include <cstddef>
#include <vector>

#include "core/graph/ir.h"
#include "core/spec/spec.h"

namespace trctl {

struct FewcBnGradFold {
  int program = 0;
  size_t bn_grad = 0;  // the BatchNormGrad node: dgamma and dbeta only
  size_t wgrad = 0;    // the Conv2dGradWeight node right after it, reading its dx as dY
  ValueId g = kNoValue, x = kNoValue, dx = kNoValue;  // the batch norm's incoming gradient, input and (unwritten) dx
  ValueId relu_beta = kNoValue;  // with a fused ReLU: its forward's beta (the mask recomputed from x), else none
};

// Under AMP (fp16 or bf16) with train.conv_fewc: on, every BatchNormGrad node without a fused pool or residual whose
// dx (out[0]) is none of its program's named values and is read by no node but the next one, a Conv2dGradWeight
// routed to the few-channel kernel (conv_route: Fewc) taking it as dY (in[0]); with a fused ReLU, its forward (the
// BatchNorm that wrote its save_mean) must have fused the ReLU without a residual (the mask is recomputed from x
// with that forward's beta, as CudaBackend's plain backward does). Adjacent, because the memory plan keeps g and x
// alive only up to the batch norm's backward: no node may run between it and the weight gradient that reads them.
std::vector<FewcBnGradFold> fewc_bn_grad_choose(const Graph& graph, const Spec& spec);

}  // namespace trctl
