// Test helper: small MLP specs built in code (no YAML), and their DataShape.
#pragma once
#include "core/graph/build.h"
#include "core/spec/spec.h"

namespace trctl::testing {

inline LayerSpec layer(LayerKind k, const std::string& name, int out = 0, double p = 0.5) {
  LayerSpec l;
  l.kind = k;
  l.name = name;
  l.out_features = out;
  l.p = p;
  l.line = 1;
  l.col = 1;
  return l;
}

// flatten -> fc1 (hidden) -> relu1 -> [dropout] -> fc2 (classes)
inline Spec mlp_spec(int hidden, int batch, bool dropout = false) {
  Spec s;
  s.source = "test.yaml";
  s.data.batch_size = batch;
  s.model.layers.push_back(layer(LayerKind::Flatten, "flatten"));
  s.model.layers.push_back(layer(LayerKind::Linear, "fc1", hidden));
  s.model.layers.push_back(layer(LayerKind::Relu, "relu1"));
  if (dropout) s.model.layers.push_back(layer(LayerKind::Dropout, "drop1", 0, 0.25));
  s.model.layers.push_back(layer(LayerKind::Linear, "fc2", 3));
  s.optimizer.kind = OptimizerKind::AdamW;
  s.optimizer.weight_decay = 0.01;
  return s;
}

inline DataShape small_data(int64_t train_n, int64_t val_n) {
  DataShape d;
  d.h = 4;
  d.w = 4;
  d.c = 1;
  d.num_classes = 3;
  d.train_n = train_n;
  d.val_n = val_n;
  return d;
}

}  // namespace trctl::testing
