// Which conv -> training batch norm pairs take their batch statistics from the convolution's epilogue under
// train.conv_bn_stats (core/spec/spec.h; cuDNN's conv + genstats graph, runtime/cuda/cudnn_fused_conv.h): the rule
// CudaBackend::plan_conv_bn_stats applies before asking cuDNN for engines. Plain C++ (no CUDA), tested on the CPU.
#pragma once
#include <cstddef>
#include <vector>

#include "core/graph/ir.h"
#include "core/memplan/memplan.h"
#include "core/spec/spec.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/conv_route.h"
#include "runtime/ops/conv2d/fewc_bn_grad.h"

namespace trctl {

// One pair to fuse: the Conv2d node (index in its program) whose output y (N, P, Q, K) a BatchNorm node of the
// same program normalises; g its real (finished) geometry; route: Cudnn (cuDNN's conv + genstats graph), Fewc
// (trctl's few-channel forward with the statistics in its epilogue, runtime/ops/conv2d/fewc_cuda.h) or Wgconv (the
// ring px forward with its statistics epilogue, runtime/ops/conv2d/wgconv.h; train.conv_wgconv fwd or both).
struct ConvBnStatsPair {
  int program = 0;
  size_t conv = 0;
  ValueId y = kNoValue;
  Conv2dGeom g;
  ConvRoute route = ConvRoute::Cudnn;
};

struct ConvBnStatsChoice {
  std::vector<ConvBnStatsPair> fuse;  // in program order, then node order
  int separate = 0;                   // candidate pairs left to the statistics pass (ineligible, or below auto's size)
};

// Pixels per image an output needs under auto: at batch 256 the fused graph + finalize beat the conv + statistics
// pass at every VGG16-BN size measured, 224² to 28² (RESULTS.md run 56: -0.61, -0.15, -0.23, -0.14 ms; run 25 at
// N = 32 had it slower below 56²); 14² is unmeasured and stays separate.
constexpr int64_t kConvBnStatsAutoMinPixels = 28 * 28;

// Every BatchNorm (training) node whose input is the output of a Conv2d node of the same program is a candidate.
// Under effective_conv_bn_stats (core/spec/spec.h) fused or auto (separate, as with train.deterministic true or
// precision fp32 / tf32: none, nothing counted) a candidate is fused when the conv, without a bias input, is either
// one the CUDA backend runs as a plain cuDNN convolution: not pointwise (those are cuBLASLt GEMMs), routed to cuDNN
// (conv_route: not fewc / im2col / s2d), planned on its real channels (no AMP channel padding), with groups 1 and
// K % 8 == 0 (the sums' alignment); or one routed to the few-channel kernel (an RGB stem: route Fewc) or to wgconv
// (route Wgconv). Under auto
// its output also needs at least kConvBnStatsAutoMinPixels pixels per image. Every other candidate counts as
// separate.
ConvBnStatsChoice conv_bn_stats_choose(const Graph& graph, const Spec& spec);

// A training batch norm + ReLU whose normalisation the next convolution applies (train.conv_bn_apply: prologue): its
// output y (N, H, W, C) is read only by that Conv2d (its X) and by weight gradients of it (their X); both then run
// on the batch norm's input x with the batch norm's per-channel scale and shift.
struct ConvBnApplyFold {
  int program = 0;
  size_t bn = 0;              // the BatchNorm node
  size_t conv = 0;            // the Conv2d node reading y: a pair of `stats.fuse` (its own statistics fused)
  std::vector<size_t> wgrads; // Conv2dGradWeight nodes reading y as X
  ValueId x = kNoValue, y = kNoValue;
};

// With train.conv_bn_apply: prologue and precision fp16 (else none; cuDNN's prologue weight gradient takes f16):
// every BatchNorm node with a fused ReLU, no residual and no fused pool whose output y no node of its program reads
// except one Conv2d of stats.fuse with route Cudnn (as X), Conv2dGradWeight nodes (as X; cuDNN-routed) and the batch norm's own
// backward (which recomputes its ReLU mask from x and does not read y), which is not one of the program's named
// values (input, logits, loss, ...), and whose backward (reading x) comes after the conv and those weight
// gradients: the memory plan keeps x alive only to its last reader, and the folded readers read x in y's place.
std::vector<ConvBnApplyFold> conv_bn_apply_choose(const Graph& graph, const Spec& spec,
                                                  const ConvBnStatsChoice& stats);

// train.conv_wgconv fwd or both (AMP: the route's precisions, fp16 and bf16): every BatchNorm node with a fused
// ReLU, no residual and no fused pool, whose output y is not a named value, nothing reads before it, whose first
// reader after it is a Conv2d without bias routed to wgconv (as X, not W), and whose backward (reading x) comes after
// that conv. Independent of train.conv_bn_stats (the conv's own statistics epilogue is a pair of that choice). The
// batch norm then computes its statistics alone; the conv applies the normalisation + ReLU to x's rows as they land
// (its prologue) and writes the normalised rows to y -- bitwise the apply pass's output -- so every later reader of y
// (the conv's weight gradient) is unchanged. x stays alive to the backward. When y's only other readers are the
// conv's weight gradients routed to the ring kernel (train.conv_wgconv: all) and the batch norm's own backward,
// `wgrads` lists those weight gradients: they apply the batch norm to x's rows themselves (wgconv_wgrad_plan's
// prologue) and y is never written (the conv's prologue without act_out); else `wgrads` is empty.
std::vector<ConvBnApplyFold> wgconv_bn_apply_choose(const Graph& graph, const Spec& spec);

// A training batch norm + ReLU's backward whose reductions the preceding convolution data gradient computes
// (train.conv_bn_backward fused or auto; cuDNN's dgrad + ReLU backward + BN-backward-weights graph): that
// Conv2dGradInput writes the masked incoming gradient g in its output's place plus dgamma and dbeta, and the
// BatchNormGrad runs its dx pass only -- or nothing, when a few-channel weight gradient computes its dx (fewc_dx:
// fewc_bn_grad_choose's fold, whose prologue then takes the masked g and applies no mask of its own).
struct ConvBnBwdPair {
  int program = 0;
  size_t dgrad = 0;    // the Conv2dGradInput node: its output is the batch norm's dY
  size_t bn_grad = 0;  // the BatchNormGrad node right after it
  Conv2dGeom g;        // the convolution's real (finished) geometry
  ValueId beta = kNoValue;  // the forward's beta (the ReLU mask recomputed from x)
  bool fewc_dx = false;     // the batch norm is a FewcBnGradFold's: its dx is the next weight gradient's prologue
  bool wgconv = false;      // the data gradient runs on wgconv (train.conv_wgconv): its own epilogue, not graph (d)
};
struct ConvBnBwdChoice {
  std::vector<ConvBnBwdPair> fuse;
  int separate = 0;  // batch-norm backwards with a fused ReLU that stay as they are (ineligible)
};
// With effective_conv_bn_backward fused (train.conv_bn_backward fused or auto, train.deterministic false, precision
// fp16) -- or, with wgconv_bn_backward_pairs alone (conv_wgconv routing data gradients, auto under deterministic:
// true or bf16), the pairs whose data gradient runs on wgconv only, the cuDNN ones counted separate; else none,
// nothing counted --: every BatchNormGrad node with a fused ReLU, no residual and no fused pool whose
// forward (the BatchNorm that wrote its save_mean) fused the ReLU without a residual, whose dY (in[0]) the node
// right before it writes — a Conv2dGradInput without accumulation that
// the CUDA backend runs as a plain cuDNN data gradient (conv_route Cudnn, real channels, groups 1, C % 8 == 0:
// graph (d)) or on wgconv (conv_route Wgconv: the ring px kernel's batch-norm backward epilogue, the pair's wgconv) —
// and that no other node reads (nor is a named value) -- its dx may be computed by a few-channel weight gradient
// (`fewc`: fewc_bn_grad_choose's folds; the pair's fewc_dx: VGG16-BN's features_1) --, and whose dgamma and dbeta the
// data gradient may write one node early (memplan_early_write_safe: always in the gradient region; a frozen
// gamma/beta's are activations that could share storage with the data gradient's input). Adjacent, because the
// fused graph reads x and recomputes the mask at the data gradient's place in the schedule. Every other
// BatchNormGrad with a fused ReLU counts as separate.
ConvBnBwdChoice conv_bn_bwd_choose(const Graph& graph, const MemoryPlan& plan, const Spec& spec,
                                   const std::vector<FewcBnGradFold>& fewc);

}  // namespace trctl
