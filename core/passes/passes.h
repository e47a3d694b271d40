// Graph passes, each a named function over one program: fuse_linear_relu (ReLU into the GEMM epilogue),
// fuse_norm_add_relu (ReLU into batch norm and residual adds), fuse_bn_add (a residual add, with its ReLU, into
// the batch norm that produces one of its inputs),
// autodiff (backward nodes from per-op rules; gradients of values used twice are summed), fold_conv_bias (a
// conv's bias, when the conv's output goes only into a batch norm, folded into that batch norm; in train programs
// its gradient, exactly 0 through batch statistics, becomes a ZeroFill that reads nothing), fuse_bn_pool (a
// max pool, tiling or overlapping, and its backward, into the batch norm + ReLU whose output only it reads), fuse_bn_relu_grad (the
// ReLU backward of a batch norm + residual add + ReLU into that batch norm's backward), fuse_grad_accumulate
// (a gradient sum into the matrix-product dX node that produces one of its terms), accumulate_insert (gradient
// accumulation over train.accumulate_steps micro-batches: the GradAccumulate node and its accumulators),
// optimizer_insert (persistent optimizer state and the OptimizerStep node; none in a micro-batch program),
// overlap_wgrad (train.conv_wgrad_overlap: which nodes a weight gradient may run beside; core/passes/
// overlap_wgrad.cpp).
#pragma once
#include "core/graph/ir.h"
#include "core/spec/spec.h"
#include "core/util/error.h"

namespace trctl {

Status pass_fuse_linear_relu(Graph& g, Program& p);
Status pass_fuse_norm_add_relu(Graph& g, Program& p);
Status pass_fuse_bn_add(Graph& g, Program& p);
Status pass_autodiff(Graph& g, Program& p);
Status pass_fold_conv_bias(Graph& g, Program& p);
Status pass_fuse_bn_pool(Graph& g, Program& p);
Status pass_fuse_bn_relu_grad(Graph& g, Program& p);
Status pass_fuse_grad_accumulate(Graph& g, Program& p);
Status pass_accumulate_insert(Graph& g, Program& p);
// One of the values the trainer reads or writes (input, label, logits, loss, correct, correct5): a fusion must not
// remove it or change what it holds.
bool is_program_io(const Program& p, ValueId v);
// A convolution every backend runs as a matrix product over the N*H*W rows: 1x1, stride 1, no padding, one group.
bool pointwise_conv(const Node& n);
// ema: one more state copy per parameter (the exponential moving average, after the optimizer's own states).
Status pass_optimizer_insert(Graph& g, Program& p, const OptimizerSpec& opt, bool ema = false);

// data_gradients: train.conv_wgrad_overlap (0: no node gets a window).
Status pass_overlap_wgrad(Graph& g, Program& p, int data_gradients);

// Number of optimizer state tensors per parameter (adam/adamw: 2; sgd: 1 with momentum, else 0).
int optimizer_state_count(const OptimizerSpec& opt);

}  // namespace trctl
