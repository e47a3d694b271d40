// pass_fuse_bn_pool: a batch norm + ReLU whose output only a max pool (and, in train programs, the pool's and the
// batch norm's backward) reads takes the pool in, forward and backward, train and eval: VGG16-BN gets five fused
// nodes per program (tiling 2x2/2), ResNet-50 its stem (overlapping 3x3/2 pad 1); pools with padding, overlapping
// or non-tiling windows fuse, a stride larger than the kernel or a window over 256 elements does not; a Y with a
// second reader and a batch norm with a fused residual are left alone; the stage's place and its switch;
// graph_verify on the fused nodes; the planned activations shrink.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/compiler.h"
#include "tests/support/cnn_spec.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

Compiled compiled(const Spec& s, const DataShape& d, bool fuse = true) {
  CompileOptions opt;
  opt.fuse_bn_pool = fuse;
  Result<Compiled> c = compile_spec(s, d, opt);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  return c.value();
}

int count(const Program& p, OpKind op, bool pool) {
  return static_cast<int>(std::count_if(p.nodes.begin(), p.nodes.end(),
                                        [&](const Node& n) { return n.op == op && n.attrs.pool == pool; }));
}

int fused(const Program& p) {
  return count(p, OpKind::BatchNorm, true) + count(p, OpKind::BatchNormEval, true);
}

// conv1 3x3 p1 -> bn1 -> relu1 -> pool1 (max, kernel/stride/pad as given) -> gap -> fc.
Spec pool_spec(int kernel, int stride, int pad) {
  Spec s = cnn_base_spec(3);
  cnn_push(s, conv_layer("conv1", 5, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool1", kernel, stride, pad));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  return s;
}

}  // namespace

TEST_CASE("fuse_bn_pool fuses VGG16-BN's five batch norm + ReLU + 2x2/2 max pools, forward and backward",
          "[passes][cnn][fuse_bn_pool]") {
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/vgg16bn.yaml");
  INFO((spec.ok() ? std::string() : spec.error_text()));
  REQUIRE(spec.ok());
  const DataShape data = image_data(2560, 512, 224, 3, 1000);
  const Compiled c = compiled(spec.value(), data);
  const Compiled u = compiled(spec.value(), data, false);
  const Graph& g = c.graph;
  for (const Program& p : g.programs) {
    INFO(p.name);
    CHECK(fused(p) == 5);
    CHECK(count(p, OpKind::MaxPool, false) == 0);
    CHECK(count(p, OpKind::MaxPoolGrad, false) == 0);
    const bool train = p.kind == ProgramKind::Train;
    CHECK(count(p, OpKind::BatchNormGrad, true) == (train ? 5 : 0));
    CHECK(count(p, OpKind::BatchNormGrad, false) == (train ? 8 : 0));  // the 13 batch norms' other 8
    const Program* up = u.graph.find_program(p.name);
    REQUIRE(up);
    CHECK(up->nodes.size() == p.nodes.size() + (train ? 10 : 5));  // each pool and its backward gone
    for (const Node& n : p.nodes) {
      if (!n.attrs.pool) continue;
      CHECK(n.attrs.relu);
      CHECK_FALSE(n.attrs.residual);
      CHECK(n.attrs.kernel == 2);
      CHECK(n.attrs.stride == 2);
      CHECK(n.attrs.pad == 0);
      if (n.op == OpKind::BatchNormGrad) {  // pooled dY, X, gamma, mean, invstd, beta, argmax
        REQUIRE(n.in.size() == 7);
        const Shape& x = g.values[n.in[1]].shape;
        CHECK(g.values[n.in[0]].shape == Shape{{x.dims[0], x.dims[1] / 2, x.dims[2] / 2, x.dims[3]}});
        CHECK(g.values[n.in[6]].dtype == DType::U8);
        continue;
      }
      const Shape& x = g.values[n.in[0]].shape;
      CHECK(g.values[n.out[0]].shape == Shape{{x.dims[0], x.dims[1] / 2, x.dims[2] / 2, x.dims[3]}});
      CHECK(n.out.size() == (train ? 4u : 1u));
      if (train) CHECK(g.values[n.out[3]].dtype == DType::U8);
    }
  }
  // The first block's full-resolution output (256, 224, 224, 64) is never stored, and the arena shrinks.
  const Program* train = g.find_program("train");
  REQUIRE(train);
  const Node* bn = nullptr;
  for (const Node& n : train->nodes)
    if (n.op == OpKind::BatchNorm && n.attrs.pool && !bn) bn = &n;
  REQUIRE(bn);
  CHECK(bn->name == "features_4+features_5+features_6");
  CHECK(g.values[bn->out[0]].shape == Shape{{256, 112, 112, 64}});
  CHECK(c.plan.region_bytes[static_cast<int>(Region::Activations)] <
        u.plan.region_bytes[static_cast<int>(Region::Activations)]);
  const std::string dump = graph_dump(g);
  CHECK_THAT(dump, Catch::Contains("[relu][prebias][max_pool k=2 s=2]"));
}

TEST_CASE("fuse_bn_pool fuses ResNet-50's stem: batch norm + ReLU + the overlapping 3x3/2 pad 1 max pool",
          "[passes][cnn][fuse_bn_pool]") {
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/resnet50.yaml");
  INFO((spec.ok() ? std::string() : spec.error_text()));
  REQUIRE(spec.ok());
  const DataShape data = image_data(2560, 512, 224, 3, 1000);
  const Compiled c = compiled(spec.value(), data);
  const Compiled u = compiled(spec.value(), data, false);
  const Graph& g = c.graph;
  for (const Program& p : g.programs) {
    INFO(p.name);
    const bool train = p.kind == ProgramKind::Train;
    CHECK(fused(p) == 1);
    CHECK(count(p, OpKind::MaxPool, false) == 0);
    CHECK(count(p, OpKind::MaxPoolGrad, false) == 0);
    CHECK(count(p, OpKind::BatchNormGrad, true) == (train ? 1 : 0));
    const Program* up = u.graph.find_program(p.name);
    REQUIRE(up);
    CHECK(up->nodes.size() == p.nodes.size() + (train ? 2 : 1));
    for (const Node& n : p.nodes) {
      if (!n.attrs.pool) continue;
      CHECK(n.attrs.kernel == 3);
      CHECK(n.attrs.stride == 2);
      CHECK(n.attrs.pad == 1);
      const Shape& x = g.values[n.in[n.op == OpKind::BatchNormGrad ? 1 : 0]].shape;  // (N,112,112,64)
      CHECK(x == Shape{{x.dims[0], 112, 112, 64}});
      const Shape pooled{{x.dims[0], 56, 56, 64}};
      if (n.op == OpKind::BatchNormGrad) {  // pooled dY, X, gamma, mean, invstd, beta, argmax
        REQUIRE(n.in.size() == 7);
        CHECK(g.values[n.in[0]].shape == pooled);
        CHECK(g.values[n.in[6]].shape == pooled);
        CHECK(g.values[n.in[6]].dtype == DType::U8);
        continue;
      }
      CHECK(n.name == "bn1+relu+maxpool");
      CHECK(g.values[n.out[0]].shape == pooled);
      CHECK(n.out.size() == (train ? 4u : 1u));
      if (train) CHECK(g.values[n.out[3]].dtype == DType::U8);
    }
  }
  CHECK(c.plan.region_bytes[static_cast<int>(Region::Activations)] <
        u.plan.region_bytes[static_cast<int>(Region::Activations)]);
  CHECK_THAT(graph_dump(g), Catch::Contains("[relu][max_pool k=3 s=2 p=1]"));
}

TEST_CASE("fuse_bn_pool fuses tiling, overlapping and padded max pools, not strides past the kernel or big windows",
          "[passes][cnn][fuse_bn_pool]") {
  struct Geo {
    int kernel, stride, pad;
    int64_t side;
    bool fuses;
  };
  for (const Geo& k : {Geo{2, 2, 0, 8, true}, Geo{3, 3, 0, 9, true}, Geo{3, 2, 1, 8, true}, Geo{3, 2, 1, 9, true},
                       Geo{3, 1, 1, 7, true}, Geo{2, 1, 0, 8, true}, Geo{3, 2, 0, 9, true}, Geo{2, 2, 0, 7, true},
                       Geo{2, 2, 1, 8, true}, Geo{16, 1, 0, 17, true}, Geo{2, 3, 0, 8, false},
                       Geo{17, 1, 0, 18, false}, Geo{17, 17, 0, 17, false}}) {
    INFO("kernel " << k.kernel << " stride " << k.stride << " pad " << k.pad << " side " << k.side);
    const Compiled c = compiled(pool_spec(k.kernel, k.stride, k.pad), image_data(7, 5, k.side));
    for (const Program& p : c.graph.programs) {
      INFO(p.name);
      CHECK(fused(p) == (k.fuses ? 1 : 0));
      CHECK(count(p, OpKind::MaxPool, false) == (k.fuses ? 0 : 1));
      if (p.kind == ProgramKind::Train) CHECK(count(p, OpKind::BatchNormGrad, true) == (k.fuses ? 1 : 0));
      for (const Node& n : p.nodes) {
        if (!n.attrs.pool) continue;
        CHECK(n.attrs.kernel == k.kernel);
        CHECK(n.attrs.stride == k.stride);
        CHECK(n.attrs.pad == k.pad);
      }
    }
  }
}

TEST_CASE("fuse_bn_pool leaves a batch norm whose output has a second reader alone", "[passes][cnn][fuse_bn_pool]") {
  // relu1 feeds pool1 (max 2) and pool_b (avg 2); their sum goes on.
  Spec s = cnn_base_spec(3);
  cnn_push(s, conv_layer("conv1", 5, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool1", 2));
  LayerSpec avg = pool_layer(LayerKind::AvgPool, "pool_b", 2);
  avg.inputs = {"relu1"};
  cnn_push(s, avg);
  cnn_push(s, cnn_layer(LayerKind::Add, "add", {"pool1", "pool_b"}));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  const Compiled c = compiled(s, image_data(7, 5));
  for (const Program& p : c.graph.programs) {
    INFO(p.name);
    CHECK(fused(p) == 0);
    CHECK(count(p, OpKind::MaxPool, false) == 1);
  }
}

TEST_CASE("fuse_bn_pool leaves a batch norm with a fused residual alone", "[passes][cnn][fuse_bn_pool]") {
  Spec s = resnet_block_spec(3);  // ... add [bn2, ds_bn] -> relu2 (one residual batch norm with its ReLU)
  s.model.layers.insert(s.model.layers.end() - 2, pool_layer(LayerKind::MaxPool, "pool2", 2));
  for (size_t i = 0; i < s.model.layers.size(); ++i) s.model.layers[i].line = static_cast<int>(i) + 3;
  const Compiled c = compiled(s, image_data(7, 5));
  for (const Program& p : c.graph.programs) {
    INFO(p.name);
    bool residual = false;
    for (const Node& n : p.nodes) residual |= n.attrs.residual;
    CHECK(residual);
    CHECK(fused(p) == 0);
    CHECK(count(p, OpKind::MaxPool, false) == 1);
  }
}

TEST_CASE("fuse_bn_pool runs right after fold_conv_bias and can be switched off", "[passes][fuse_bn_pool]") {
  const std::vector<std::string>& st = compiler_stages();
  auto at = [&](const std::string& s) { return std::find(st.begin(), st.end(), s) - st.begin(); };
  CHECK(at("fuse_bn_pool") == at("fold_conv_bias") + 1);
  CHECK(at("fuse_bn_pool") < at("memplan"));
  const Compiled off = compiled(small_cnn_spec(3), image_data(7, 5), false);
  CHECK(std::find(off.stages.begin(), off.stages.end(), "fuse_bn_pool") == off.stages.end());
  for (const Program& p : off.graph.programs) CHECK(fused(p) == 0);
  const Compiled on = compiled(small_cnn_spec(3), image_data(7, 5));
  for (const Program& p : on.graph.programs) CHECK(fused(p) == 1);
}

TEST_CASE("graph_verify rejects a fused max pool whose geometry the kernels cannot run or whose outputs disagree",
          "[passes][fuse_bn_pool][verify]") {
  const Compiled c = compiled(small_cnn_spec(3), image_data(7, 5));
  REQUIRE(graph_verify(c.graph).ok());
  auto broken = [&](auto&& edit) {
    Graph g = c.graph;
    for (Program& p : g.programs)
      for (Node& n : p.nodes)
        if (n.attrs.pool) edit(g, n);
    return !graph_verify(g).ok();
  };
  CHECK(broken([](Graph&, Node& n) { n.attrs.stride = 1; }));  // the pooled shapes no longer match
  CHECK(broken([](Graph&, Node& n) { n.attrs.stride = 3; }));  // stride past the kernel
  CHECK(broken([](Graph&, Node& n) { n.attrs.pad = 2; }));     // more than half the kernel
  CHECK(broken([](Graph&, Node& n) { n.attrs.kernel = 17; }));
  CHECK(broken([](Graph&, Node& n) { n.attrs.relu = false; }));
  CHECK(broken([](Graph& g, Node& n) {
    if (n.op == OpKind::BatchNorm) g.values[n.out[3]].dtype = DType::F32;
  }));
  CHECK(broken([](Graph&, Node& n) {
    if (n.op == OpKind::BatchNormGrad) n.in.pop_back();
  }));
}

TEST_CASE("graph_verify accepts the fused stem pool 3x3/2 pad 1 and checks its pooled shape",
          "[passes][fuse_bn_pool][verify]") {
  const Compiled c = compiled(pool_spec(3, 2, 1), image_data(7, 5, 9));  // 9x9 -> 5x5
  REQUIRE(graph_verify(c.graph).ok());
  int seen = 0;
  for (const Program& p : c.graph.programs)
    for (const Node& n : p.nodes)
      if (n.attrs.pool && n.op != OpKind::BatchNormGrad) {
        CHECK(c.graph.values[n.out[0]].shape.dims[1] == 5);
        ++seen;
      }
  CHECK(seen > 0);
  Graph g = c.graph;
  for (Program& p : g.programs)
    for (Node& n : p.nodes)
      if (n.attrs.pool) n.attrs.pad = 0;  // 9x9 3x3/2 pad 0 would be 4x4
  CHECK_FALSE(graph_verify(g).ok());
}
