// Space-to-depth convolutions (s2d_conv.h): the transforms around cuDNN's stride-1 convolution.
#include "runtime/cuda/s2d_conv.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/ops/conv2d/s2d.h"
#include "runtime/ops/conv2d/s2d_cuda.h"

namespace trctl {
namespace {

// The plan must be the stride-1 conv of g in every field its descriptors hold.
Status check_plan(const Conv2dGeom& g, const CudnnConvPlan& p, const char* what) {
  if (!s2d_conv_eligible(g) || g.p <= 0 || g.q <= 0)
    return Error{ErrCode::Invalid, what, conv2d_geom_str(g) + ": not a finished s2d-eligible geometry"};
  const Conv2dGeom z = s2d_conv_geom(g), &q = p.desc.g;
  const bool same = q.n == z.n && q.h == z.h && q.w == z.w && q.c == z.c && q.k == z.k && q.r == z.r && q.s == z.s &&
                    q.stride_h == 1 && q.stride_w == 1 && q.pad_h == 0 && q.pad_w == 0 && q.dil_h == 1 &&
                    q.dil_w == 1 && q.groups == 1;
  if (!same)
    return Error{ErrCode::Invalid, what,
                 "the plan (" + conv2d_geom_str(q) + ") is not the stride-1 conv of " + conv2d_geom_str(g) + " (" +
                     conv2d_geom_str(z) + ")"};
  return ok_status();
}

}  // namespace

size_t s2d_conv_input_bytes(const Conv2dGeom& g, GpuDType t) {
  const Conv2dGeom z = s2d_conv_geom(g);
  return static_cast<size_t>(z.n * z.h * z.w * z.c) * gpu_dtype_size(t);
}

size_t s2d_conv_filter_bytes(const Conv2dGeom& g, GpuDType t) {
  const Conv2dGeom z = s2d_conv_geom(g);
  return static_cast<size_t>(z.k * z.r * z.s * z.c) * gpu_dtype_size(t);
}

Status s2d_conv_fwd(cudnnHandle_t h, cudaStream_t s, const Conv2dGeom& g, const CudnnConvPlan& plan, const void* x,
                    const void* w, const void* bias, void* y, void* z, void* w2, void* ws, size_t ws_bytes) {
  if (Status st = check_plan(g, plan, "s2d_conv_fwd"); !st) return st;
  const GpuDType t = plan.desc.io;
  if (Status st = s2d_input_cuda(s, g, t, x, z); !st) return st;
  if (Status st = s2d_filter_cuda(s, g, t, w, w2); !st) return st;
  return cudnn_conv_fwd(h, s, plan, z, w2, bias, y, ws, ws_bytes);
}

Status s2d_conv_wgrad(cudnnHandle_t h, cudaStream_t s, const Conv2dGeom& g, const CudnnConvPlan& plan,
                      const void* dy, const void* x, float* dw, void* z, void* dw2, void* ws, size_t ws_bytes) {
  if (Status st = check_plan(g, plan, "s2d_conv_wgrad"); !st) return st;
  const GpuDType t = plan.desc.io;
  if (Status st = s2d_input_cuda(s, g, t, x, z); !st) return st;
  if (Status st = cudnn_conv_wgrad(h, s, plan, dy, z, dw2, ws, ws_bytes); !st) return st;
  return s2d_filter_grad_cuda(s, g, t, dw2, dw);
}

}  // namespace trctl
