// Backend helpers: params_init (deterministic Kaiming-uniform initialisation into the Weights layout), the float
// weight accessors and the defaults for backends without device-resident data.
#include <cmath>
#include <cstring>

#include "core/util/philox.h"
#include "runtime/backend.h"

namespace trctl {

namespace {

template <class T>
void init_into(const Compiled& c, uint64_t seed, std::byte* region) {
  const Graph& g = c.graph;
  for (size_t pi = 0; pi < g.params.size(); ++pi) {
    const ParamInfo& p = g.params[pi];
    const Value& v = g.values[p.value];
    if (v.shape.dims.size() < 2) continue;  // biases (and later norm shifts) start at zero
    T* dst = reinterpret_cast<T*>(region + c.plan.values[p.value].offset);
    const double bound = std::sqrt(6.0 / static_cast<double>(p.fan_in));
    PhiloxStream rng(seed, static_cast<uint32_t>(RngPurpose::Init), static_cast<uint32_t>(pi), 0);
    for (int64_t i = 0; i < v.shape.numel(); ++i)
      dst[i] = static_cast<T>((2.0 * rng.uniform_double() - 1.0) * bound);
  }
}

}  // namespace

std::vector<std::byte> params_init(const Compiled& c, uint64_t seed) {
  std::vector<std::byte> w(static_cast<size_t>(c.plan.weights_bytes), std::byte{0});
  if (c.graph.compute == DType::F64) init_into<double>(c, seed, w.data());
  else init_into<float>(c, seed, w.data());
  return w;
}

}  // namespace trctl

namespace trctl {

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

Status Backend::run_resident(int, DataSplit) {
  return Error{ErrCode::NotSupported, name() + " backend", "device-resident datasets are not supported"};
}

std::vector<float> Backend::read_weights() {
  std::vector<std::byte> b = read_region(Region::Weights);
  std::vector<float> w(b.size() / sizeof(float));
  std::memcpy(w.data(), b.data(), w.size() * sizeof(float));
  return w;
}

}  // namespace trctl
