// export_checkpoint: weights.safetensors (and state.bin's EMA slots) -> PyTorch names, layouts and dtype.
#include "runtime/train/export.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/ckpt/checkpoint.h"
#include "core/ckpt/safetensors.h"
#include "core/passes/passes.h"
#include "core/spec/spec.h"
#include "dataio/image_ops.h"
#include "runtime/train/trainer.h"

namespace trctl {
namespace {

namespace fs = std::filesystem;

std::string hex(uint64_t v, int digits) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

// CRC32 of all tensor bytes in file order (the checkpoint's data_crc32).
uint32_t tensors_crc32(const std::vector<TensorView>& ts) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const TensorView& t : ts)
    for (size_t off = 0; off < t.data.size();) {
      const uInt n = static_cast<uInt>(std::min<size_t>(t.data.size() - off, 1u << 30));
      crc = crc32(crc, reinterpret_cast<const Bytef*>(t.data.data() + off), n);
      off += n;
    }
  return static_cast<uint32_t>(crc);
}

// A tensor's elements as float (the checkpoint stores the compute dtype: F32, or F64 for float64 plans).
Result<std::vector<float>> to_floats(const std::string& where, DType t, const std::vector<std::byte>& b) {
  std::vector<float> out;
  if (t == DType::F32) {
    out.resize(b.size() / 4);
    std::memcpy(out.data(), b.data(), out.size() * 4);
  } else if (t == DType::F64) {
    std::vector<double> d(b.size() / 8);
    std::memcpy(d.data(), b.data(), d.size() * 8);
    out.assign(d.begin(), d.end());
  } else {
    return Error{ErrCode::Format, where, std::string("dtype ") + to_string(t) + " is not a trctl checkpoint's"};
  }
  return out;
}

std::vector<std::byte> from_floats(const std::vector<float>& v, DType t) {
  std::vector<std::byte> b(v.size() * static_cast<size_t>(dtype_size(t)));
  if (t == DType::F32) {
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = t == DType::F16 ? float_to_half_bits(v[i]) : float_to_bf16_bits(v[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}

// Channels of the input images as the spec's dataset delivers them; 0 when only the data files can tell.
int64_t input_channels(const DataSpec& d) {
  switch (d.dataset) {
    case DatasetKind::FashionMnist:
    case DatasetKind::Idx: return 1;
    case DatasetKind::Cifar10:
    case DatasetKind::Cifar100:
    case DatasetKind::ImageFolder: return 3;
    case DatasetKind::Synthetic: return d.synthetic.channels;
    case DatasetKind::Dts: return 0;
  }
  return 0;
}

// For each linear layer fed (through element-wise layers) by the flatten of an (H, W, C) image: C. Walks the
// layers as graph_build does (inputs by name; empty = the previous layer).
Result<std::map<std::string, int64_t>> flattened_linears(const Spec& spec) {
  struct Flow {
    bool spatial = true;
    int64_t channels = 0;  // spatial: C (0 unknown)
    int64_t flat_c = 0;    // flat: C of the image it was flattened from (0: not a flattened image)
  };
  std::map<std::string, Flow> at;
  at["input"] = Flow{true, input_channels(spec.data), 0};
  std::string prev = "input";
  std::map<std::string, int64_t> out;
  for (const LayerSpec& l : spec.model.layers) {
    const Flow in = at[l.inputs.empty() ? prev : l.inputs[0]];
    Flow f = in;
    switch (l.kind) {
      case LayerKind::Flatten:
        if (in.spatial) {
          if (in.channels == 0)
            return Error{ErrCode::NotSupported, spec.source,
                         "layer '" + l.name + "' flattens the dataset's images, whose channel count only the data "
                         "files tell (dataset dts): cannot order the next linear layer's features for PyTorch"};
          f = Flow{false, 0, in.channels};
        }
        break;
      case LayerKind::Linear:
        if (in.flat_c > 1) out[l.name] = in.flat_c;
        f = Flow{false, 0, 0};
        break;
      case LayerKind::Conv2d: f = Flow{true, l.out_channels, 0}; break;
      case LayerKind::GlobalAvgPool: f = Flow{false, 0, 0}; break;
      default: break;  // relu, dropout, batch norm, pools, add: the layout of their (first) input
    }
    at[l.name] = f;
    prev = l.name;
  }
  return out;
}

// PyTorch's layout of one tensor (values in trctl's order). Returns true when it changed anything.
Result<bool> to_torch_layout(const std::string& name, std::vector<int64_t>& shape, std::vector<float>& v,
                             const std::map<std::string, int64_t>& flat_c) {
  if (shape.size() == 4) {  // convolution weight (K, R, S, Cg) -> (K, Cg, R, S)
    const int64_t k = shape[0], rs = shape[1] * shape[2], cg = shape[3];
    std::vector<float> t(v.size());
    for (int64_t o = 0; o < k; ++o)
      for (int64_t p = 0; p < rs; ++p)
        for (int64_t c = 0; c < cg; ++c) t[(o * cg + c) * rs + p] = v[(o * rs + p) * cg + c];
    v.swap(t);
    shape = {shape[0], shape[3], shape[1], shape[2]};
    return true;
  }
  const size_t dot = name.rfind('.');
  auto it = flat_c.find(name.substr(0, dot));
  if (shape.size() != 2 || dot == std::string::npos || name.substr(dot) != ".weight" || it == flat_c.end())
    return false;
  const int64_t out = shape[0], f = shape[1], c = it->second;  // features (H*W, C) -> (C, H*W)
  if (f % c != 0)
    return Error{ErrCode::Invalid, name, std::to_string(f) + " input features are no multiple of the " +
                                             std::to_string(c) + " channels flattened before it"};
  const int64_t hw = f / c;
  std::vector<float> t(v.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t s = 0; s < hw; ++s)
      for (int64_t ch = 0; ch < c; ++ch) t[o * f + ch * hw + s] = v[o * f + s * c + ch];
  v.swap(t);
  return true;
}

// The run's spec: --config, or config.resolved.yaml of the run directory that holds the checkpoint.
Result<Spec> export_spec(const ExportOptions& opt, const std::string& ckpt_dir, std::string* used) {
  std::string path = opt.config;
  if (path.empty()) {
    const fs::path d = fs::absolute(ckpt_dir).lexically_normal();
    const fs::path parent = d.parent_path();
    const fs::path run = parent.filename() == "checkpoints" ? parent.parent_path() : d;
    path = (run / "config.resolved.yaml").string();
    if (!fs::exists(path))
      return Error{ErrCode::Missing, ckpt_dir,
                   "no config.resolved.yaml beside this checkpoint (looked for " + path + "); export needs the "
                   "run's spec for PyTorch's layouts and the EMA: give it with --config"};
  }
  *used = path;
  return spec_load(path);
}

// The EMA slot of each parameter from state.bin (slot index optimizer_state_count: after the moments).
Status replace_with_ema(const Spec& spec, const std::string& ckpt_dir, std::vector<TensorView>& tensors) {
  if (!(spec.train.ema_decay > 0))
    return Error{ErrCode::Invalid, ckpt_dir,
                 "--ema: this checkpoint has no EMA weights (its run trained with train.ema_decay 0)"};
  const std::string path = ckpt_dir + "/" + kCkptStateFile;
  Result<CkptStateFile> st = ckpt_read_state(path);
  if (!st.ok()) return st.errors();
  if (st->state.updates() == 0)
    return Error{ErrCode::Invalid, path, "--ema: no optimizer update has been applied yet, so the EMA is empty"};
  const size_t k = static_cast<size_t>(optimizer_state_count(spec.optimizer));
  std::vector<Error> errs;
  for (TensorView& t : tensors) {
    auto it = st->slots.find(t.name);
    if (it == st->slots.end()) continue;  // a buffer (running statistics): the model's own, as AveragedModel's
    if (it->second.size() != k + 1 || st->slot_shapes[t.name][k] != t.shape || it->second[k].size() != t.data.size()) {
      errs.push_back({ErrCode::Format, path, "parameter '" + t.name + "' has no EMA slot of its shape (" +
                                                 std::to_string(it->second.size()) + " slots, expected " +
                                                 std::to_string(k + 1) + ")"});
      continue;
    }
    t.dtype = st->slot_dtypes[t.name][k];
    t.data = it->second[k];
  }
  if (!errs.empty()) return errs;
  return ok_status();
}

}  // namespace

Result<ExportFile> export_prepare(const ExportOptions& opt) {
  if (opt.dtype != DType::F32 && opt.dtype != DType::F16 && opt.dtype != DType::BF16)
    return Error{ErrCode::Invalid, opt.output, "export dtype must be f32, f16 or bf16"};
  Result<std::string> dir = checkpoint_dir_resolve(opt.source);
  if (!dir.ok()) return dir.errors();
  ExportFile file;
  ExportReport& rep = file.report;
  rep.checkpoint = dir.value();
  const std::string wpath = dir.value() + "/" + kCkptWeightsFile;
  Result<SafetensorsFile> w = safetensors_read(wpath);
  if (!w.ok()) return w.errors();
  SafetensorsMetadata& md = w->metadata;
  if (md["trctl_version"] != "1")
    return Error{ErrCode::Format, wpath, "not a trctl checkpoint of version 1 (metadata trctl_version '" +
                                             md["trctl_version"] + "')"};
  if (md["data_crc32"] != hex(tensors_crc32(w->tensors), 8))
    return Error{ErrCode::Format, wpath, "checksum mismatch of the tensor data: the file is corrupt"};
  Result<Spec> spec = export_spec(opt, dir.value(), &rep.config);
  if (!spec.ok()) return spec.errors();
  if (hex(ckpt_spec_hash(spec.value()), 16) != md["spec_hash"])
    return Error{ErrCode::Invalid, rep.config,
                 "this spec is not the checkpoint's (spec hash " + hex(ckpt_spec_hash(spec.value()), 16) +
                     ", checkpoint " + md["spec_hash"] + ")"};
  rep.step = std::strtoll(md["step"].c_str(), nullptr, 10);
  std::vector<TensorView> ts = std::move(w->tensors);
  if (opt.ema) {
    Status st = replace_with_ema(spec.value(), dir.value(), ts);
    if (!st.ok()) return st.errors();
  }
  Result<std::map<std::string, int64_t>> flat = flattened_linears(spec.value());
  if (!flat.ok()) return flat.errors();
  for (TensorView& t : ts) {
    Result<std::vector<float>> v = to_floats(wpath + ": " + t.name, t.dtype, t.data);
    if (!v.ok()) return v.errors();
    Result<bool> relaid = to_torch_layout(t.name, t.shape, v.value(), flat.value());
    if (!relaid.ok()) return relaid.errors();
    if (relaid.value()) rep.relaid.push_back(t.name);
    t.dtype = opt.dtype;
    t.data = from_floats(v.value(), opt.dtype);
    rep.bytes += static_cast<int64_t>(t.data.size());
  }
  rep.tensors = static_cast<int64_t>(ts.size());
  file.metadata = {{"format", "pt"},  // what safetensors.torch.save_file writes
                   {"trctl_export", "1"},
                   {"layout", "torch"},
                   {"weights", opt.ema ? "ema" : "model"},
                   {"step", md["step"]},
                   {"spec_hash", md["spec_hash"]},
                   {"source", fs::absolute(dir.value()).lexically_normal().string()}};
  file.tensors = std::move(ts);
  return file;
}

Result<ExportReport> export_checkpoint(const ExportOptions& opt) {
  Result<ExportFile> f = export_prepare(opt);
  if (!f.ok()) return f.errors();
  Status st = safetensors_write(opt.output, f->tensors, f->metadata);
  if (!st.ok()) return st.errors();
  return f->report;
}

}  // namespace trctl
