// graph_build: the spec's layer list -> forward graph of every program (train, train_last, eval, eval_last) with
// shapes and dtypes inferred at each node (train programs at the training sample size, eval programs at the
// validation one); graph_verify re-checks every node's shapes (used after each pass).
#pragma once
#include <cstdint>

#include "core/graph/ir.h"
#include "core/spec/spec.h"
#include "core/util/error.h"

namespace trctl {

// What the compiler needs to know about the data (from the loaded dataset).
struct DataShape {
  int64_t h = 0, w = 0, c = 0;  // training sample (H, W, C) after the train_transforms
  int num_classes = 0;
  int64_t train_n = 0, val_n = 0;
  // Validation sample (H, W) after the val_transforms: a recipe may train at one resolution and validate at another
  // (FixRes; torchvision's ResNet recipe trains at 176, validates at 224). 0: the training size.
  int64_t val_h = 0, val_w = 0;
};

// The validation sample's (H, W): DataShape::val_h / val_w, or the training size where they are 0.
inline int64_t data_val_h(const DataShape& d) { return d.val_h > 0 ? d.val_h : d.h; }
inline int64_t data_val_w(const DataShape& d) { return d.val_w > 0 ? d.val_w : d.w; }

// compute: dtype of every floating-point value but the epoch accumulators (F32, or F64 for gradient checks).
// Output size of a sliding window along one axis (PyTorch's floor rule): (in + 2 pad - dilation (k - 1) - 1) /
// stride + 1; 0 or less when the window does not fit.
int64_t window_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation);

Result<Graph> graph_build(const Spec& spec, const DataShape& data, DType compute = DType::F32);

// Shape/dtype rules per op, checked over every node of every program.
Status graph_verify(const Graph& g);

}  // namespace trctl
