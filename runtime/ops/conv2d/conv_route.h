// How the CUDA backend runs one direction of a (non-pointwise) convolution, and the geometry of its cuDNN plan:
// one rule for CudaBackend's planning and lowering (runtime/cuda/cuda_lower_cnn.cpp) and for what `trctl bench
// --autotune` measures (runtime/cuda/conv_autotune.cpp), so the autotune cache holds a key for every plan.
// Plain C++ (no CUDA), tested on the CPU.
#pragma once
#include "core/graph/ir.h"
#include "core/spec/spec.h"
#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

enum class ConvRoute {
  Cudnn,   // a cuDNN plan of conv_plan_geom
  Im2col,  // im2col + cuBLASLt GEMM, no cuDNN plan (runtime/cuda/im2col_conv.h)
  S2d,     // space-to-depth + a cuDNN plan of conv_plan_geom = s2d_conv_geom (runtime/cuda/s2d_conv.h)
  Fewc,    // trctl's few-channel tensor-core implicit GEMM, no cuDNN plan (runtime/ops/conv2d/fewc_cuda.h)
  Wgconv,  // a forward, data or weight gradient on trctl's wgmma ring kernels, no cuDNN plan (ops/conv2d/wgconv.h)
};

struct ConvRouteOptions {
  bool lowp = false;  // AMP (fp16/bf16 activations): the only case with other routes than cuDNN
  ConvIm2col im2col = ConvIm2col::Forward;
  ConvS2d s2d = ConvS2d::Forward;
  ConvFewc fewc = ConvFewc::On;
  ConvWgconv wgconv = ConvWgconv::Off;
};
ConvRouteOptions conv_route_options(const Spec& spec);
// Whether conv_fewc runs eligible weight gradients on the few-channel kernel: on (with the batch-norm dx folded in
// where fewc_bn_grad_choose finds one) and unfolded (the batch norm writes dx, the kernel reads it).
inline bool fewc_routes_wgrad(ConvFewc f) { return f == ConvFewc::On || f == ConvFewc::Unfolded; }

// op: Conv2d, Conv2dGradInput or Conv2dGradWeight; g: the real geometry. Under AMP, wgconv for the data gradient
// of a wgconv_dgrad_ring_eligible conv when conv_wgconv is dgrad, both, bwd or all, for the forward of a
// wgconv_fwd_ring_eligible one when it is fwd, both or all, and for the weight gradient of a
// wgconv_wgrad_route_eligible one when it is wgrad, bwd or all; the few-channel kernel for
// fewc_conv_eligible convs' forward unless conv_fewc is off, and for fewc_wgrad_eligible ones' weight gradient
// when it is on or unfolded; else space-to-depth for s2d_conv_eligible convs (forward unless conv_s2d is off, weight
// gradient when on), else im2col for im2col_conv_eligible ones (forward unless conv_im2col is off, weight gradient
// when on), else cuDNN.
ConvRoute conv_route(const ConvRouteOptions& o, OpKind op, const Conv2dGeom& g);

// The geometry of the cuDNN plan of route Cudnn or S2d (g for Fewc, which has none): s2d_conv_geom for S2d; under
// AMP the forward and data
// gradient of a groups-1 conv over C % 8 != 0 channels with C padded to a multiple of 8 (tensor cores; the zero
// channels add nothing), the weight gradient on the real channels; else g.
Conv2dGeom conv_plan_geom(const ConvRouteOptions& o, OpKind op, const Conv2dGeom& g);

}  // namespace trctl
