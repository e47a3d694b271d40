// spec_parse / spec_to_yaml for the CNN layer types (conv2d, batch_norm, max_pool, avg_pool, global_avg_pool, add)
// and the synthetic dataset: keys and defaults, keys of other types, required keys, ranges, add's input count
// (a graph_build error at the layer's location) and the YAML round trip of every new field.
#include <catch2/catch.hpp>

#include "core/graph/build.h"
#include "core/spec/spec.h"
#include "tests/core/spec_test_util.h"

using namespace trctl;
using namespace trctl::spec_test;

namespace {

// A model whose first layer is `item` (a flow map on line 3, column 7), followed by a valid head.
std::string model_with(const std::string& item) {
  return "model:\n  layers:\n    - " + item + "\n    - {type: flatten}\n    - {type: linear, out_features: 10}\n";
}

// By value: callers pass a temporary Result.
LayerSpec first_layer(Result<Spec> r) {
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  REQUIRE_FALSE(r.value().model.layers.empty());
  return r.value().model.layers[0];
}

ErrCode only_code(const Result<Spec>& r) {
  INFO((r.ok() ? std::string("parsed") : r.error_text()));
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  return r.errors()[0].code;
}

// The fields first_difference (spec_test_util.h) predates: the CNN layer keys and data.synthetic.
std::string cnn_difference(const Spec& a, const Spec& b) {
  std::ostringstream o;
  diff_field(o, "data.synthetic.train_size", a.data.synthetic.train_size, b.data.synthetic.train_size);
  diff_field(o, "data.synthetic.val_size", a.data.synthetic.val_size, b.data.synthetic.val_size);
  diff_field(o, "data.synthetic.height", a.data.synthetic.height, b.data.synthetic.height);
  diff_field(o, "data.synthetic.width", a.data.synthetic.width, b.data.synthetic.width);
  diff_field(o, "data.synthetic.channels", a.data.synthetic.channels, b.data.synthetic.channels);
  diff_field(o, "data.synthetic.classes", a.data.synthetic.classes, b.data.synthetic.classes);
  for (size_t i = 0; i < a.model.layers.size() && i < b.model.layers.size(); ++i) {
    const LayerSpec &x = a.model.layers[i], &y = b.model.layers[i];
    diff_field(o, "layer.out_channels", x.out_channels, y.out_channels);
    diff_field(o, "layer.kernel_size", x.kernel_size, y.kernel_size);
    diff_field(o, "layer.stride", x.stride, y.stride);
    diff_field(o, "layer.padding", x.padding, y.padding);
    diff_field(o, "layer.dilation", x.dilation, y.dilation);
    diff_field(o, "layer.groups", x.groups, y.groups);
    diff_field(o, "layer.eps", x.eps, y.eps);
    diff_field(o, "layer.momentum", x.momentum, y.momentum);
  }
  const std::string older = first_difference(a, b);
  return older.empty() ? o.str() : older;
}

LayerSpec layer(LayerKind k, const std::string& name, std::vector<std::string> inputs = {}) {
  LayerSpec l;
  l.kind = k;
  l.name = name;
  l.inputs = std::move(inputs);
  return l;
}

// A spec with every CNN layer type, every new key away from its default, and a synthetic dataset.
Spec cnn_spec_all_fields() {
  Spec s;
  s.data.dataset = DatasetKind::Synthetic;
  s.data.synthetic.train_size = 1234567;
  s.data.synthetic.val_size = 89;
  s.data.synthetic.height = 33;
  s.data.synthetic.width = 17;
  s.data.synthetic.channels = 4;
  s.data.synthetic.classes = 7;
  LayerSpec conv = layer(LayerKind::Conv2d, "conv");
  conv.out_channels = 12;
  conv.kernel_size = 5;
  conv.stride = 2;
  conv.padding = 3;
  conv.dilation = 2;
  conv.groups = 4;
  conv.bias = false;
  LayerSpec bn = layer(LayerKind::BatchNorm, "bn");
  bn.eps = 1e-3;
  bn.momentum = 0.01;
  LayerSpec mp = layer(LayerKind::MaxPool, "mp");
  mp.kernel_size = 3;
  mp.stride = 2;
  mp.padding = 1;
  LayerSpec ap = layer(LayerKind::AvgPool, "ap", {"conv"});
  ap.kernel_size = 3;
  ap.stride = 1;
  ap.padding = 1;
  LayerSpec fc = layer(LayerKind::Linear, "fc");
  fc.out_features = 7;
  s.model.layers = {conv, bn, layer(LayerKind::Relu, "relu"), mp, ap, layer(LayerKind::Add, "sum", {"mp", "ap"}),
                    layer(LayerKind::GlobalAvgPool, "gap"), fc};
  return s;
}

// spec_parse(spec_to_yaml(s)), with the emitted text and the errors for the failure message.
struct Reparsed {
  std::string yaml;
  Result<Spec> back;
  std::string errors() const { return back.ok() ? std::string() : back.error_text(); }
};
Reparsed reparse(const Spec& s) {
  std::string y = spec_to_yaml(s);
  Result<Spec> back = spec_parse(y, "emitted.yaml");
  return {std::move(y), std::move(back)};
}

}  // namespace

// ---- each layer type: its keys and defaults ----

TEST_CASE("conv2d parses all its keys", "[spec][cnn]") {
  Result<Spec> r = parse(model_with("{type: conv2d, out_channels: 8, kernel_size: 3, stride: 2, padding: 1, "
                                    "dilation: 2, groups: 2, bias: false}"));
  const LayerSpec l = first_layer(r);
  CHECK(l.kind == LayerKind::Conv2d);
  CHECK(l.name == "conv2d0");
  CHECK(l.out_channels == 8);
  CHECK(l.kernel_size == 3);
  CHECK(l.stride == 2);
  CHECK(l.padding == 1);
  CHECK(l.dilation == 2);
  CHECK(l.groups == 2);
  CHECK_FALSE(l.bias);
  CHECK(l.line == 3);
  CHECK(l.col == 7);
}

TEST_CASE("conv2d defaults: stride 0 (= 1), padding 0, dilation 1, groups 1, bias true", "[spec][cnn]") {
  const LayerSpec l = first_layer(parse(model_with("{type: conv2d, out_channels: 8, kernel_size: 3}")));
  CHECK(l.stride == 0);
  CHECK(l.padding == 0);
  CHECK(l.dilation == 1);
  CHECK(l.groups == 1);
  CHECK(l.bias);
}

TEST_CASE("batch_norm parses eps and momentum and defaults to PyTorch's 1e-5 and 0.1", "[spec][cnn]") {
  const LayerSpec l = first_layer(parse(model_with("{type: batch_norm, eps: 0.001, momentum: 0.03}")));
  CHECK(l.kind == LayerKind::BatchNorm);
  CHECK(l.eps == 0.001);
  CHECK(l.momentum == 0.03);
  const LayerSpec d = first_layer(parse(model_with("{type: batch_norm}")));
  CHECK(d.eps == 1e-5);
  CHECK(d.momentum == 0.1);
}

TEST_CASE("max_pool and avg_pool parse kernel_size, stride and padding; stride defaults to 0 (= kernel)",
          "[spec][cnn]") {
  const LayerSpec m = first_layer(parse(model_with("{type: max_pool, kernel_size: 3, stride: 2, padding: 1}")));
  CHECK(m.kind == LayerKind::MaxPool);
  CHECK(m.kernel_size == 3);
  CHECK(m.stride == 2);
  CHECK(m.padding == 1);
  const LayerSpec a = first_layer(parse(model_with("{type: avg_pool, kernel_size: 2}")));
  CHECK(a.kind == LayerKind::AvgPool);
  CHECK(a.kernel_size == 2);
  CHECK(a.stride == 0);
  CHECK(a.padding == 0);
}

TEST_CASE("global_avg_pool and add take no type-specific keys", "[spec][cnn]") {
  Result<Spec> r = parse("model:\n  layers:\n    - {type: conv2d, name: c, out_channels: 2, kernel_size: 1}\n"
                         "    - {type: add, inputs: [c, input]}\n    - {type: global_avg_pool}\n"
                         "    - {type: linear, out_features: 10}\n");
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  REQUIRE(r->model.layers.size() == 4);
  CHECK(r->model.layers[1].kind == LayerKind::Add);
  CHECK(r->model.layers[1].name == "add1");
  CHECK(r->model.layers[1].inputs == std::vector<std::string>{"c", "input"});
  CHECK(r->model.layers[2].kind == LayerKind::GlobalAvgPool);
  CHECK(r->model.layers[2].name == "global_avg_pool2");
}

// ---- keys of other types, required keys, ranges ----

TEST_CASE("a key of another layer type is rejected naming the type it is for", "[spec][cnn]") {
  Result<Spec> r = parse(model_with("{type: batch_norm, kernel_size: 3}"));
  CHECK(only_code(r) == ErrCode::Invalid);
  CHECK(has_error(r, "test.yaml:3:26: key 'model.layers[0].kernel_size' does not apply to layer type 'batch_norm' "
                     "(it is for conv2d)"));
  Result<Spec> pool = parse(model_with("{type: max_pool, kernel_size: 2, out_channels: 4}"));
  CHECK(only_code(pool) == ErrCode::Invalid);
  CHECK(has_error(pool, "key 'model.layers[0].out_channels' does not apply to layer type 'max_pool' "
                        "(it is for conv2d)"));
  Result<Spec> conv = parse(model_with("{type: conv2d, out_channels: 4, kernel_size: 3, eps: 0.1}"));
  CHECK(only_code(conv) == ErrCode::Invalid);
  CHECK(has_error(conv, "key 'model.layers[0].eps' does not apply to layer type 'conv2d' (it is for batch_norm)"));
  Result<Spec> gap = parse(model_with("{type: global_avg_pool, bias: false}"));
  CHECK(only_code(gap) == ErrCode::Invalid);
  CHECK(has_error(gap, "does not apply to layer type 'global_avg_pool' (it is for linear)"));
  Result<Spec> lin = parse(model_with("{type: linear, out_features: 3, dilation: 2}"));
  CHECK(only_code(lin) == ErrCode::Invalid);
  CHECK(has_error(lin, "does not apply to layer type 'linear' (it is for conv2d)"));
  Result<Spec> add = parse(model_with("{type: add, inputs: [input, input], momentum: 0.5}"));
  CHECK(only_code(add) == ErrCode::Invalid);
  CHECK(has_error(add, "does not apply to layer type 'add' (it is for batch_norm)"));
}

TEST_CASE("conv2d without out_channels or kernel_size is an error naming each", "[spec][cnn]") {
  Result<Spec> r = parse(model_with("{type: conv2d}"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 2);
  CHECK(count_errors(r, "test.yaml:3:7: missing 'model.layers[0].out_channels' (required for conv2d)") == 1);
  CHECK(count_errors(r, "test.yaml:3:7: missing 'model.layers[0].kernel_size' (required for conv2d)") == 1);
  Result<Spec> k = parse(model_with("{type: conv2d, out_channels: 3}"));
  CHECK(only_code(k) == ErrCode::Missing);
  CHECK(has_error(k, "missing 'model.layers[0].kernel_size'"));
}

TEST_CASE("a pool without kernel_size is an error", "[spec][cnn]") {
  Result<Spec> r = parse(model_with("{type: avg_pool}"));
  CHECK(only_code(r) == ErrCode::Missing);
  CHECK(has_error(r, "missing 'model.layers[0].kernel_size' (required for avg_pool)"));
}

TEST_CASE("conv2d values are range-checked", "[spec][cnn]") {
  Result<Spec> r = parse(model_with("{type: conv2d, out_channels: 0, kernel_size: 0, padding: -1, dilation: 0, "
                                    "groups: 0}"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 5);
  CHECK(has_error(r, "value '0' for 'model.layers[0].out_channels' is out of range; expected >= 1"));
  CHECK(has_error(r, "value '-1' for 'model.layers[0].padding' is out of range; expected >= 0"));
}

TEST_CASE("conv2d out_channels must be divisible by groups", "[spec][cnn]") {
  Result<Spec> r = parse(model_with("{type: conv2d, out_channels: 6, kernel_size: 3, groups: 4}"));
  CHECK(only_code(r) == ErrCode::Invalid);
  CHECK(has_error(r, "'model.layers[0].out_channels' (6) must be divisible by groups (4)"));
}

TEST_CASE("batch_norm eps must be > 0 and momentum in [0, 1]", "[spec][cnn]") {
  Result<Spec> r = parse(model_with("{type: batch_norm, eps: 0, momentum: 1.5}"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 2);
  CHECK(has_error(r, "'model.layers[0].eps'"));
  CHECK(has_error(r, "'model.layers[0].momentum'"));
  CHECK(parse(model_with("{type: batch_norm, momentum: 0}")).ok());
  CHECK(parse(model_with("{type: batch_norm, momentum: 1}")).ok());
}

TEST_CASE("pool padding larger than half the kernel is rejected at the padding", "[spec][cnn]") {
  Result<Spec> r = parse(model_with("{type: max_pool, kernel_size: 3, padding: 2}"));
  CHECK(only_code(r) == ErrCode::OutOfRange);
  CHECK(has_error(r, "test.yaml:3:49: 'model.layers[0].padding' must be at most half of kernel_size (3)"));
  Result<Spec> a = parse(model_with("{type: avg_pool, kernel_size: 2, padding: 2}"));
  CHECK(only_code(a) == ErrCode::OutOfRange);
  CHECK(parse(model_with("{type: avg_pool, kernel_size: 2, padding: 1}")).ok());  // exactly half is allowed
  CHECK(parse(model_with("{type: max_pool, kernel_size: 3, padding: 1}")).ok());
}

// ---- add: exactly two inputs (checked by graph_build, located at the layer) ----

namespace {

DataShape image_shape() {
  DataShape d;
  d.h = 4;
  d.w = 4;
  d.c = 2;
  d.num_classes = 10;
  d.train_n = 8;
  d.val_n = 4;
  return d;
}

Result<Graph> build_yaml(const std::string& yaml) {
  Result<Spec> s = parse(yaml);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return graph_build(s.value(), image_shape());
}

}  // namespace

TEST_CASE("add with one input is a graph_build error at the layer's file:line:col", "[spec][cnn]") {
  Result<Graph> g = build_yaml(
      "model:\n  layers:\n    - {type: conv2d, name: c, out_channels: 2, kernel_size: 1}\n"
      "    - {type: add, inputs: [c]}\n    - {type: global_avg_pool}\n    - {type: linear, out_features: 10}\n");
  REQUIRE_FALSE(g.ok());
  CHECK(g.errors().size() == 1);
  CHECK_THAT(g.error_text(), Catch::Contains("test.yaml:4:7") && Catch::Contains("add1") &&
                                 Catch::Contains("takes 2 inputs") && Catch::Contains("got 1"));
}

TEST_CASE("add with three inputs is a graph_build error at the layer's file:line:col", "[spec][cnn]") {
  Result<Graph> g = build_yaml(
      "model:\n  layers:\n    - {type: conv2d, name: c, out_channels: 2, kernel_size: 1}\n"
      "    - {type: relu, name: r}\n"
      "    - {type: add, name: s, inputs: [c, r, input]}\n    - {type: global_avg_pool}\n"
      "    - {type: linear, out_features: 10}\n");
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.error_text(), Catch::Contains("test.yaml:5:7") && Catch::Contains("'s'") &&
                                 Catch::Contains("got 3"));
}

TEST_CASE("add without inputs (the previous layer only) is a graph_build error", "[spec][cnn]") {
  Result<Graph> g = build_yaml("model:\n  layers:\n    - {type: relu}\n    - {type: add}\n"
                               "    - {type: global_avg_pool}\n    - {type: linear, out_features: 10}\n");
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.error_text(), Catch::Contains("test.yaml:4:7") && Catch::Contains("got 0"));
}

TEST_CASE("add with two inputs of one shape builds", "[spec][cnn]") {
  Result<Graph> g = build_yaml(
      "model:\n  layers:\n    - {type: conv2d, name: c, out_channels: 2, kernel_size: 1}\n"
      "    - {type: add, inputs: [c, input]}\n    - {type: global_avg_pool}\n    - {type: linear, out_features: 10}\n");
  INFO((g.ok() ? std::string() : g.error_text()));
  CHECK(g.ok());
}

// ---- data.synthetic ----

TEST_CASE("dataset synthetic parses its section", "[spec][cnn][synthetic]") {
  Result<Spec> r = parse("data:\n  dataset: synthetic\n  synthetic: {train_size: 64, val_size: 32, height: 8, "
                         "width: 6, channels: 3, classes: 4}\n" +
                         std::string(kMinimal));
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  const SyntheticSpec& s = r->data.synthetic;
  CHECK(r->data.dataset == DatasetKind::Synthetic);
  CHECK(s.train_size == 64);
  CHECK(s.val_size == 32);
  CHECK(s.height == 8);
  CHECK(s.width == 6);
  CHECK(s.channels == 3);
  CHECK(s.classes == 4);
}

TEST_CASE("dataset synthetic without its section keeps the defaults", "[spec][cnn][synthetic]") {
  Result<Spec> r = parse("data: {dataset: synthetic}\n" + std::string(kMinimal));
  REQUIRE(r.ok());
  const SyntheticSpec d;
  CHECK(r->data.synthetic.train_size == d.train_size);
  CHECK(r->data.synthetic.height == d.height);
  CHECK(r->data.synthetic.classes == d.classes);
}

TEST_CASE("an unknown key in data.synthetic is rejected with a suggestion", "[spec][cnn][synthetic]") {
  Result<Spec> r = parse("data:\n  dataset: synthetic\n  synthetic: {height: 8, widht: 8}\n" + std::string(kMinimal));
  CHECK(only_code(r) == ErrCode::UnknownKey);
  CHECK(has_error(r, "test.yaml:3:26: unknown key 'widht' in 'data.synthetic' (did you mean 'width'?)"));
}

TEST_CASE("data.synthetic values are range-checked", "[spec][cnn][synthetic]") {
  Result<Spec> r = parse("data:\n  synthetic: {train_size: 0, channels: 5, classes: 1}\n" + std::string(kMinimal));
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 3);
  CHECK(has_error(r, "'data.synthetic.train_size'"));
  CHECK(has_error(r, "'data.synthetic.channels'"));
  CHECK(has_error(r, "'data.synthetic.classes'"));
  Result<Spec> m = parse("data: {synthetic: [1, 2]}\n" + std::string(kMinimal));
  CHECK(only_code(m) == ErrCode::WrongType);
}

// ---- round trip ----

TEST_CASE("spec_to_yaml round-trips every CNN layer key and the synthetic section", "[spec][cnn][emit]") {
  const Spec s = cnn_spec_all_fields();
  Reparsed r = reparse(s);
  INFO(r.yaml << r.errors());
  REQUIRE(r.back.ok());
  CHECK(cnn_difference(r.back.value(), s) == "");
  CHECK(spec_to_yaml(r.back.value()) == r.yaml);
}

TEST_CASE("spec_to_yaml round-trips CNN layers left at their defaults (stride 0)", "[spec][cnn][emit]") {
  Result<Spec> r = parse("data: {dataset: synthetic}\nmodel:\n  layers:\n"
                         "    - {type: conv2d, out_channels: 4, kernel_size: 3}\n"
                         "    - {type: batch_norm}\n    - {type: max_pool, kernel_size: 2}\n"
                         "    - {type: avg_pool, kernel_size: 2}\n    - {type: global_avg_pool}\n"
                         "    - {type: linear, out_features: 10}\n");
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  Reparsed re = reparse(r.value());
  INFO(re.yaml << re.errors());
  REQUIRE(re.back.ok());
  CHECK(cnn_difference(re.back.value(), r.value()) == "");
}
