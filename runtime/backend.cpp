// Backend helpers: params_init (deterministic Kaiming-uniform initialisation into the Weights layout), the float
// weight accessors and the defaults for backends without device-resident data.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/util/philox.h"
#include "runtime/backend.h"

namespace trctl {

namespace {

template <class T>
void init_into(const Compiled& c, uint64_t seed, std::byte* region) {
  const Graph& g = c.graph;
  for (const ParamInfo& p : g.params) {
    const Value& v = g.values[p.value];
    T* dst = reinterpret_cast<T*>(region + c.plan.values[p.value].offset);
    if (p.init != ParamInfo::Init::Kaiming) {  // biases and norm shifts 0, norm scales 1 (PyTorch's defaults)
      std::fill(dst, dst + v.shape.numel(), static_cast<T>(p.init == ParamInfo::Init::Ones ? 1 : 0));
      continue;
    }
    const double bound = std::sqrt(6.0 / static_cast<double>(p.fan_in));
    PhiloxStream rng(seed, static_cast<uint32_t>(RngPurpose::Init), static_cast<uint32_t>(p.init_index), 0);
    for (int64_t i = 0; i < v.shape.numel(); ++i)
      dst[i] = static_cast<T>((2.0 * rng.uniform_double() - 1.0) * bound);
  }
}

template <class T>
void buffers_into(const Compiled& c, std::byte* region) {
  for (const BufferInfo& b : c.graph.buffers) {
    T* dst = reinterpret_cast<T*>(region + c.plan.values[b.value].offset);
    std::fill(dst, dst + c.graph.values[b.value].shape.numel(), static_cast<T>(b.init));
  }
}

}  // namespace

std::vector<std::byte> buffers_init(const Compiled& c) {
  std::vector<std::byte> b(static_cast<size_t>(c.plan.region_bytes[static_cast<int>(Region::Buffers)]), std::byte{0});
  if (c.graph.compute == DType::F64) buffers_into<double>(c, b.data());
  else buffers_into<float>(c, b.data());
  return b;
}

std::vector<std::byte> params_init(const Compiled& c, uint64_t seed) {
  std::vector<std::byte> w(static_cast<size_t>(c.plan.weights_bytes), std::byte{0});
  if (c.graph.compute == DType::F64) init_into<double>(c, seed, w.data());
  else init_into<float>(c, seed, w.data());
  return w;
}

}  // namespace trctl

namespace trctl {

bool is_conv_op(OpKind k) {
  return k == OpKind::Conv2d || k == OpKind::Conv2dGradInput || k == OpKind::Conv2dGradWeight;
}

std::pair<ValueId, ValueId> conv_operands(const Node& n) {
  switch (n.op) {
    case OpKind::Conv2dGradInput: return {n.out[0], n.in[1]};
    case OpKind::Conv2dGradWeight: return {n.in[1], n.out[0]};
    default: return {n.in[0], n.in[1]};
  }
}

Conv2dGeom conv2d_geom_of(const Graph& gr, const Node& n, ValueId x, ValueId w) {
  const Shape &xs = gr.values[x].shape, &ws = gr.values[w].shape;
  Conv2dGeom g;
  g.n = xs.dims[0];
  g.h = xs.dims[1];
  g.w = xs.dims[2];
  g.c = xs.dims[3];
  g.k = ws.dims[0];
  g.r = g.s = n.attrs.kernel;
  g.stride_h = g.stride_w = n.attrs.stride;
  g.pad_h = g.pad_w = n.attrs.pad;
  g.dil_h = g.dil_w = n.attrs.dilation;
  g.groups = n.attrs.groups;
  std::string why;
  if (!conv2d_geom_finish(g, &why)) throw std::logic_error("conv2d " + n.name + ": " + why);
  return g;
}

Pool2dGeom pool2d_geom_of(const Graph& gr, const Node& n, ValueId x) {
  const Shape& xs = gr.values[x].shape;
  Pool2dGeom g;
  g.n = xs.dims[0];
  g.h = xs.dims[1];
  g.w = xs.dims[2];
  g.c = xs.dims[3];
  g.kh = g.kw = n.attrs.kernel;
  g.sh = g.sw = n.attrs.stride;
  g.ph = g.pw = n.attrs.pad;
  if (!pool2d_geom_finish(g)) throw std::logic_error("pool " + n.name + ": bad geometry");
  return g;
}

ValueId bn_grad_relu_beta(const Graph& g, const Node& bn_grad) {
  if (bn_grad.in.size() < 4) return kNoValue;
  for (const Program& p : g.programs)
    for (const Node& f : p.nodes)
      if (f.op == OpKind::BatchNorm && f.out.size() > 1 && f.out[1] == bn_grad.in[3])
        return f.attrs.relu && !f.attrs.residual ? f.in[2] : kNoValue;
  return kNoValue;
}

bool read_only_at(const Program& p, ValueId v, size_t node, size_t slot) {
  bool at_slot = false;
  for (size_t ni = 0; ni < p.nodes.size(); ++ni)
    for (size_t k = 0; k < p.nodes[ni].in.size(); ++k)
      if (p.nodes[ni].in[k] == v) {
        if (ni != node || k != slot) return false;
        at_slot = true;
      }
  return at_slot;
}

Status Backend::write_weights(const std::vector<float>& weights) {
  std::vector<std::byte> b(weights.size() * sizeof(float));
  std::memcpy(b.data(), weights.data(), b.size());
  return write_region(Region::Weights, b);
}

Status Backend::upload_split(DataSplit, const ImageDataset&, const TransformPipeline&) {
  return Error{ErrCode::NotSupported, name() + " backend", "device-resident datasets are not supported"};
}

Status Backend::begin_epoch(DataSplit, uint32_t, const std::vector<int64_t>&) {
  return Error{ErrCode::NotSupported, name() + " backend", "device-resident datasets are not supported"};
}

Result<StepProfile> Backend::profile(int, const ProfileOptions&) {
  return Error{ErrCode::NotSupported, name() + " backend", "per-node profiling is supported on the cuda backend only"};
}

Status Backend::run_resident(int, DataSplit) {
  return Error{ErrCode::NotSupported, name() + " backend", "device-resident datasets are not supported"};
}

std::vector<float> Backend::read_weights() {
  std::vector<std::byte> b = read_region(Region::Weights);
  std::vector<float> w(b.size() / sizeof(float));
  std::memcpy(w.data(), b.data(), w.size() * sizeof(float));
  return w;
}

Status Backend::seek_resident(DataSplit, int64_t) {
  return Error{ErrCode::NotSupported, name() + " backend", "device-resident data is not supported by this backend"};
}

void* Backend::host_alloc(size_t bytes) { return std::aligned_alloc(256, (bytes + 255) / 256 * 256); }

void Backend::host_free(void* p) { std::free(p); }

}  // namespace trctl
