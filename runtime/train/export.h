// `trctl export`: a checkpoint's parameters and batch-norm running statistics as one safetensors file that
// PyTorch loads as it is: state_dict names, PyTorch's layouts, F32 / F16 / BF16, the model's or the EMA weights.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/ckpt/safetensors.h"
#include "core/graph/ir.h"
#include "core/util/error.h"

namespace trctl {

struct ExportOptions {
  std::string source;        // a checkpoint directory, or a run directory (its latest checkpoint)
  std::string output;        // FILE.safetensors, written atomically
  std::string config;        // the run's spec; "" = RUN_DIR/config.resolved.yaml beside the checkpoint
  bool ema = false;          // the exponential moving average (train.ema_decay) instead of the weights
  DType dtype = DType::F32;  // F32, F16 or BF16 (round to nearest even)
};

struct ExportReport {
  std::string checkpoint, config;      // what was read
  int64_t step = 0;                    // the checkpoint's optimizer steps
  int64_t tensors = 0, bytes = 0;      // written
  std::vector<std::string> relaid;     // tensors whose layout was changed to PyTorch's
};

// Names: the checkpoint's, "<layer name>.weight|bias|running_mean|running_var", which is the state_dict of
// nn.Sequential(OrderedDict((layer.name, module) for each layer of model.layers)). Layouts: convolution weights
// (K, R, S, C/g) -> (K, C/g, R, S); a linear layer fed by the flatten of an (H, W, C) image with C > 1 gets its
// input features reordered from (H, W, C) to PyTorch's (C, H, W). BN's num_batches_tracked is not written (an int64
// buffer that only momentum=None reads): load with strict=False, or add it. Errors: no checkpoint, a corrupt one,
// a config of another run (spec hash), --ema without EMA weights.
// export_prepare reads and converts (bad input: errors), export_checkpoint also writes opt.output atomically.
struct ExportFile {
  ExportReport report;
  std::vector<TensorView> tensors;
  SafetensorsMetadata metadata;
};
Result<ExportFile> export_prepare(const ExportOptions& opt);
Result<ExportReport> export_checkpoint(const ExportOptions& opt);

}  // namespace trctl
