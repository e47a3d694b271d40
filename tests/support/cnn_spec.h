// Test helper: small CNN specs built in code (no YAML): layer constructors, a plain conv net, a ResNet basic
// block with a downsample shortcut, and their DataShape.
#pragma once
#include <string>
#include <vector>

#include "core/graph/build.h"
#include "core/spec/spec.h"

namespace trctl::testing {

// A layer at a made-up YAML position (line = its index + 1 once added by cnn_push), so errors can be located.
inline LayerSpec cnn_layer(LayerKind k, const std::string& name, std::vector<std::string> inputs = {}) {
  LayerSpec l;
  l.kind = k;
  l.name = name;
  l.inputs = std::move(inputs);
  l.line = 1;
  l.col = 7;
  return l;
}

inline LayerSpec conv_layer(const std::string& name, int out, int kernel, int stride = 0, int pad = 0,
                            bool bias = false, std::vector<std::string> inputs = {}) {
  LayerSpec l = cnn_layer(LayerKind::Conv2d, name, std::move(inputs));
  l.out_channels = out;
  l.kernel_size = kernel;
  l.stride = stride;
  l.padding = pad;
  l.bias = bias;
  return l;
}

inline LayerSpec pool_layer(LayerKind k, const std::string& name, int kernel, int stride = 0, int pad = 0) {
  LayerSpec l = cnn_layer(k, name);
  l.kernel_size = kernel;
  l.stride = stride;
  l.padding = pad;
  return l;
}

inline LayerSpec linear_layer(const std::string& name, int out, std::vector<std::string> inputs = {}) {
  LayerSpec l = cnn_layer(LayerKind::Linear, name, std::move(inputs));
  l.out_features = out;
  return l;
}

// Appends a layer, giving it the line it would stand on in a one-layer-per-line YAML list.
inline void cnn_push(Spec& s, LayerSpec l) {
  l.line = static_cast<int>(s.model.layers.size()) + 3;
  s.model.layers.push_back(std::move(l));
}

inline Spec cnn_base_spec(int batch) {
  Spec s;
  s.source = "cnn.yaml";
  s.data.batch_size = batch;
  s.optimizer.kind = OptimizerKind::AdamW;
  s.optimizer.weight_decay = 0.01;
  return s;
}

// conv1 (bias) 3x3 p1 -> bn1 -> relu1 -> pool1 max 2 -> conv2 3x3 s2 p1 -> pool2 avg 2 -> gap -> fc.
// On 8x8 inputs: (8,8,c1) -> (4,4,c1) -> (2,2,c2) -> (1,1,c2) -> (c2) -> (classes).
inline Spec small_cnn_spec(int batch, int c1 = 4, int c2 = 6, int classes = 3) {
  Spec s = cnn_base_spec(batch);
  cnn_push(s, conv_layer("conv1", c1, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool1", 2));
  cnn_push(s, conv_layer("conv2", c2, 3, 2, 1));
  cnn_push(s, pool_layer(LayerKind::AvgPool, "pool2", 2));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", classes));
  return s;
}

// stem: conv0 3x3 p1 (c) -> bn0 -> relu0; basic block with downsample to 2c channels at stride 2:
//   conv1 3x3 s2 p1 -> bn1 -> relu1 -> conv2 3x3 p1 -> bn2;  shortcut: ds_conv 1x1 s2 (relu0) -> ds_bn;
//   add [bn2, ds_bn] -> relu2 -> gap -> fc.  On 8x8 inputs: (8,8,c) -> (4,4,2c) -> (2c) -> (classes).
inline Spec resnet_block_spec(int batch, int c = 4, int classes = 3) {
  Spec s = cnn_base_spec(batch);
  cnn_push(s, conv_layer("conv0", c, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn0"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu0"));
  cnn_push(s, conv_layer("conv1", 2 * c, 3, 2, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, conv_layer("conv2", 2 * c, 3, 1, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, conv_layer("ds_conv", 2 * c, 1, 2, 0, false, {"relu0"}));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "ds_bn"));
  cnn_push(s, cnn_layer(LayerKind::Add, "add", {"bn2", "ds_bn"}));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu2"));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", classes));
  return s;
}

inline DataShape image_data(int64_t train_n, int64_t val_n, int64_t side = 8, int64_t channels = 2,
                            int classes = 3) {
  DataShape d;
  d.h = side;
  d.w = side;
  d.c = channels;
  d.num_classes = classes;
  d.train_n = train_n;
  d.val_n = val_n;
  return d;
}

}  // namespace trctl::testing
