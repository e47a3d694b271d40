// ckpt_save / ckpt_load: parameters <-> weights.safetensors, optimizer moments and TrainState <-> state.bin.
#include "core/ckpt/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/ckpt/safetensors.h"
#include "core/spec/spec.h"

namespace trctl {

bool TrainState::operator==(const TrainState& o) const {
  return step == o.step && epoch == o.epoch && std::memcmp(&loss_scale, &o.loss_scale, sizeof loss_scale) == 0 &&
         loss_scale_growth == o.loss_scale_growth && seed == o.seed && data_epoch == o.data_epoch &&
         data_batch == o.data_batch && updates() == o.updates();
}

namespace {

constexpr size_t kStateHeader = 24;  // magic 8, version u32, reserved u32, payload length u64
constexpr size_t kStateTrailer = 4;  // CRC32

uint32_t crc32_of(const std::byte* p, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(p), chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string shape_str(const std::vector<int64_t>& dims) { return Shape{dims}.str(); }

// Little-endian writer / bounds-checked reader for state.bin.
struct Writer {
  std::vector<std::byte> b;
  void u(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
  }
  void raw(const void* p, size_t n) {
    const std::byte* q = static_cast<const std::byte*>(p);
    b.insert(b.end(), q, q + n);
  }
};

struct Reader {
  const std::vector<std::byte>& b;
  std::string where;
  size_t base = 0;  // file offset of b[0] (for messages)
  size_t pos = 0;
  std::vector<Error> err;
  bool need(size_t n, const char* what) {
    if (!err.empty()) return false;
    if (b.size() - pos >= n) return true;
    err.push_back({ErrCode::Format, where + ":offset " + std::to_string(base + pos),
                   std::string("truncated or corrupt: ") + what + " runs past the end of the payload"});
    return false;
  }
  uint64_t u(int bytes, const char* what) {
    if (!need(static_cast<size_t>(bytes), what)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(b[pos + i]) << (8 * i);
    pos += static_cast<size_t>(bytes);
    return v;
  }
  int64_t i64(const char* what) { return static_cast<int64_t>(u(8, what)); }
  bool raw(void* out, size_t n, const char* what) {
    if (!need(n, what)) return false;
    if (n) std::memcpy(out, b.data() + pos, n);
    pos += n;
    return true;
  }
};

// One optimizer slot of one parameter as stored in state.bin.
struct SlotRecord {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
};

void write_train_state(Writer& w, uint64_t spec_hash, const TrainState& s) {
  w.u(spec_hash, 8);
  w.u(static_cast<uint64_t>(s.step), 8);
  w.u(static_cast<uint64_t>(s.epoch), 8);
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &s.loss_scale, 4);
  w.u(scale_bits, 4);
  w.u(static_cast<uint32_t>(s.loss_scale_growth), 4);
  w.u(s.seed, 8);
  w.u(static_cast<uint64_t>(s.data_epoch), 8);
  w.u(static_cast<uint64_t>(s.data_batch), 8);
  w.u(static_cast<uint64_t>(s.updates()), 8);  // version 2
}

std::vector<std::byte> state_encode(const Compiled& c, const std::vector<std::byte>& opt_state,
                                    const TrainState& s) {
  Writer w;
  write_train_state(w, ckpt_spec_hash(c.spec), s);
  w.u(c.graph.params.size(), 4);
  for (const ParamInfo& p : c.graph.params) {
    w.u(p.name.size(), 4);
    w.raw(p.name.data(), p.name.size());
    w.u(p.state.size(), 4);
    for (ValueId v : p.state) {
      const Value& val = c.graph.values[v];
      const Placement& pl = c.plan.values[v];
      w.u(static_cast<uint8_t>(val.dtype), 1);
      w.u(val.shape.dims.size(), 4);
      for (int64_t d : val.shape.dims) w.u(static_cast<uint64_t>(d), 8);
      w.u(static_cast<uint64_t>(pl.bytes), 8);
      w.raw(opt_state.data() + pl.offset, static_cast<size_t>(pl.bytes));
    }
  }
  Writer f;
  f.raw(kStateMagic, 8);
  f.u(kStateVersion, 4);
  f.u(0, 4);
  f.u(w.b.size(), 8);
  f.raw(w.b.data(), w.b.size());
  f.u(crc32_of(f.b.data(), f.b.size()), 4);
  return f.b;
}

// Checks magic, version, length and CRC; returns the payload.
Result<std::vector<std::byte>> state_unwrap(const std::vector<std::byte>& b, const std::string& where,
                                            uint32_t* version_out) {
  auto fail = [&](size_t off, const std::string& msg) -> Error {
    return {ErrCode::Format, where + ":offset " + std::to_string(off), msg};
  };
  if (b.size() < 8 || std::memcmp(b.data(), kStateMagic, 8) != 0)
    return fail(0, b.size() < 8 ? "truncated: " + std::to_string(b.size()) + " bytes, no magic"
                                : "bad magic (not a trctl state file; expected \"TRCTLST1\")");
  if (b.size() < kStateHeader + kStateTrailer)
    return fail(b.size(), "truncated: " + std::to_string(b.size()) + " bytes, shorter than the header");
  Reader r{b, where, 0, 8, {}};
  uint32_t version = static_cast<uint32_t>(r.u(4, "version"));
  if (version < 1 || version > kStateVersion)
    return fail(8, "unsupported state file version " + std::to_string(version) + " (this build reads versions 1 to " +
                       std::to_string(kStateVersion) + ")");
  *version_out = version;
  r.u(4, "reserved");
  uint64_t len = r.u(8, "payload length");
  if (len != b.size() - kStateHeader - kStateTrailer)
    return fail(16, "truncated or corrupt: payload length " + std::to_string(len) + " but the file holds " +
                        std::to_string(b.size() - kStateHeader - kStateTrailer) + " payload bytes");
  size_t crc_at = b.size() - kStateTrailer;
  uint32_t want = 0;
  for (int i = 0; i < 4; ++i) want |= static_cast<uint32_t>(b[crc_at + i]) << (8 * i);
  uint32_t got = crc32_of(b.data(), crc_at);
  if (want != got)
    return fail(crc_at, "checksum mismatch (stored CRC32 " + hex64(want).substr(8) + ", computed " +
                            hex64(got).substr(8) + "): the file is corrupt");
  return std::vector<std::byte>(b.begin() + kStateHeader, b.begin() + static_cast<long>(crc_at));
}

TrainState read_train_state(Reader& r, uint64_t& spec_hash, uint32_t version) {
  TrainState s;
  spec_hash = r.u(8, "spec hash");
  s.step = r.i64("step");
  s.epoch = r.i64("epoch");
  uint32_t scale_bits = static_cast<uint32_t>(r.u(4, "loss scale"));
  std::memcpy(&s.loss_scale, &scale_bits, 4);
  s.loss_scale_growth = static_cast<int32_t>(r.u(4, "loss scale growth"));
  s.seed = r.u(8, "seed");
  s.data_epoch = r.i64("data epoch");
  s.data_batch = r.i64("data batch");
  if (version >= 2) s.opt_updates = r.i64("optimizer updates");
  return s;
}

bool read_slot(Reader& r, SlotRecord& slot) {
  uint8_t dt = static_cast<uint8_t>(r.u(1, "slot dtype"));
  if (dt > static_cast<uint8_t>(DType::U8)) {
    if (r.err.empty()) r.err.push_back({ErrCode::Format, r.where, "unknown dtype code " + std::to_string(dt)});
    return false;
  }
  slot.dtype = static_cast<DType>(dt);
  uint64_t rank = r.u(4, "slot rank");
  if (rank > 8) {
    if (r.err.empty()) r.err.push_back({ErrCode::Format, r.where, "implausible rank " + std::to_string(rank)});
    return false;
  }
  for (uint64_t d = 0; d < rank; ++d) slot.shape.push_back(r.i64("slot shape"));
  uint64_t n = r.u(8, "slot size");
  if (!r.need(n, "slot data")) return false;
  slot.data.resize(n);
  return r.raw(slot.data.data(), n, "slot data");
}

// The payload after the TrainState: per parameter name, its slots.
using SlotMap = std::map<std::string, std::vector<SlotRecord>>;

bool read_slots(Reader& r, SlotMap& out) {
  uint64_t params = r.u(4, "parameter count");
  for (uint64_t i = 0; i < params && r.err.empty(); ++i) {
    uint64_t name_len = r.u(4, "name length");
    if (!r.need(name_len, "parameter name")) break;
    std::string name(name_len, '\0');
    r.raw(name.data(), name.size(), "parameter name");
    uint64_t slots = r.u(4, "slot count");
    std::vector<SlotRecord>& rec = out[name];
    for (uint64_t s = 0; s < slots && r.err.empty(); ++s) {
      rec.emplace_back();
      if (!read_slot(r, rec.back())) break;
    }
  }
  if (r.err.empty() && r.pos != r.b.size())
    r.err.push_back({ErrCode::Format, r.where, "unexpected bytes after the last parameter"});
  return r.err.empty();
}

Error spec_differs(const std::string& where, const std::string& saved, uint64_t now) {
  return {ErrCode::Invalid, where,
          "the checkpoint was saved with a different spec (spec hash " + saved + ", this spec " + hex64(now) +
              "); resume needs the same spec (weights-only loading accepts another one)"};
}

// Copies state.bin's slots into the OptState region, checking every parameter of c.
void place_slots(const Compiled& c, SlotMap& slots, const std::string& where, std::vector<std::byte>& region,
                 std::vector<Error>& errs) {
  for (const ParamInfo& p : c.graph.params) {
    auto it = slots.find(p.name);
    if (it == slots.end()) {
      errs.push_back({ErrCode::Invalid, where, "optimizer state of parameter '" + p.name + "' is missing"});
      continue;
    }
    if (it->second.size() != p.state.size()) {
      errs.push_back({ErrCode::Invalid, where,
                      "parameter '" + p.name + "' has " + std::to_string(it->second.size()) +
                          " optimizer slots in the checkpoint but " + std::to_string(p.state.size()) + " in the model"});
    } else {
      for (size_t s = 0; s < p.state.size(); ++s) {
        const Value& v = c.graph.values[p.state[s]];
        const SlotRecord& rec = it->second[s];
        if (rec.dtype != v.dtype || rec.shape != v.shape.dims) {
          errs.push_back({ErrCode::Invalid, where,
                          "optimizer slot " + std::to_string(s) + " of parameter '" + p.name + "' is " +
                              shape_str(rec.shape) + " " + to_string(rec.dtype) + " in the checkpoint but " +
                              v.shape.str() + " " + to_string(v.dtype) + " in the model"});
          continue;
        }
        std::memcpy(region.data() + c.plan.values[p.state[s]].offset, rec.data.data(), rec.data.size());
      }
    }
    slots.erase(it);
  }
  for (const auto& [name, rec] : slots)
    errs.push_back({ErrCode::Invalid, where, "the checkpoint has optimizer state for '" + name +
                                                 "', which is not a parameter of the model"});
}

// state.bin -> OptState region + TrainState (+ the saved spec hash and step for the cross-checks).
Status load_state(const std::string& path, const Compiled& c, Checkpoint& out, uint64_t& spec_hash) {
  Result<std::vector<std::byte>> file = file_read_bytes(path);
  if (!file.ok()) return file.errors();
  uint32_t version = 0;
  Result<std::vector<std::byte>> payload = state_unwrap(file.value(), path, &version);
  if (!payload.ok()) return payload.errors();
  Reader r{payload.value(), path, kStateHeader, 0, {}};
  out.state = read_train_state(r, spec_hash, version);
  SlotMap slots;
  if (!read_slots(r, slots)) return r.err;
  std::vector<Error> errs;
  place_slots(c, slots, path, out.opt_state, errs);
  if (!errs.empty()) return errs;
  return ok_status();
}

// One named tensor per parameter and per buffer (running statistics), in graph order.
std::vector<std::pair<std::string, ValueId>> saved_values(const Compiled& c) {
  std::vector<std::pair<std::string, ValueId>> out;
  for (const ParamInfo& p : c.graph.params) out.emplace_back(p.name, p.value);
  for (const BufferInfo& b : c.graph.buffers) out.emplace_back(b.name, b.value);
  return out;
}

std::vector<TensorView> weight_tensors(const Compiled& c, const std::vector<std::byte>& weights,
                                       const std::vector<std::byte>& buffers) {
  std::vector<TensorView> ts;
  for (const auto& [name, id] : saved_values(c)) {
    const Value& v = c.graph.values[id];
    const Placement& pl = c.plan.values[id];
    const std::byte* src = (pl.region == Region::Buffers ? buffers.data() : weights.data()) + pl.offset;
    ts.push_back({name, v.dtype, v.shape.dims, std::vector<std::byte>(src, src + pl.bytes)});
  }
  return ts;
}

uint32_t tensors_crc(const std::vector<TensorView>& ts) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const TensorView& t : ts) crc = crc32_combine(crc, crc32_of(t.data.data(), t.data.size()),
                                                      static_cast<z_off_t>(t.data.size()));
  return static_cast<uint32_t>(crc);
}

// weights.safetensors -> Weights region, checking every parameter; returns the metadata for the cross-checks.
Status load_weights(const std::string& path, const Compiled& c, Checkpoint& out, SafetensorsMetadata& md) {
  Result<SafetensorsFile> f = safetensors_read(path);
  if (!f.ok()) return f.errors();
  md = f->metadata;
  std::vector<Error> errs;
  if (md["trctl_version"] != "1")
    errs.push_back({ErrCode::Format, path, "not a trctl checkpoint of version 1 (metadata trctl_version is '" +
                                               md["trctl_version"] + "')"});
  if (md["data_crc32"] != hex64(tensors_crc(f->tensors)).substr(8))
    errs.push_back({ErrCode::Format, path, "checksum mismatch of the tensor data: the file is corrupt"});
  std::map<std::string, const TensorView*> by_name;
  for (const TensorView& t : f->tensors) by_name[t.name] = &t;
  for (const auto& [name, id] : saved_values(c)) {
    const Value& v = c.graph.values[id];
    const char* what = v.role == Role::Buffer ? "buffer" : "parameter";
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      errs.push_back({ErrCode::Invalid, path, std::string(what) + " '" + name + "' is missing from the checkpoint"});
      continue;
    }
    const TensorView& t = *it->second;
    by_name.erase(it);
    if (t.shape != v.shape.dims || t.dtype != v.dtype) {
      errs.push_back({ErrCode::Invalid, path,
                      std::string(what) + " '" + name + "' is " + shape_str(t.shape) + " " + to_string(t.dtype) +
                          " in the checkpoint but " + v.shape.str() + " " + to_string(v.dtype) + " in the model"});
      continue;
    }
    const Placement& pl = c.plan.values[id];
    std::memcpy((pl.region == Region::Buffers ? out.buffers : out.weights).data() + pl.offset, t.data.data(),
                t.data.size());
  }
  for (const auto& [name, t] : by_name)
    errs.push_back({ErrCode::Invalid, path, "the checkpoint has a tensor '" + name +
                                                "', which is not a parameter of the model"});
  if (!errs.empty()) return errs;
  return ok_status();
}

}  // namespace

uint64_t ckpt_spec_hash(const Spec& spec) {
  Spec s = spec;
  s.run = RunSpec{};
  s.train.checkpoint_every = 0;  // how often checkpoints are written (and which are kept) does not change the
  s.train.checkpoint_every_steps = 0;  // computation (a step checkpoint's resume is bitwise the uninterrupted run)
  s.train.keep_last = 0;
  s.train.keep_best = false;
  s.debug.fail_checkpoint_write = 0;  // a test hook on the writes, not on the computation
  s.train.grad_check = GradCheck::Auto;  // which values the non-finite check reads: the same skip decision
  s.train.conv_dgrad_fwd = ConvDgradFwd::Off;  // how cuDNN computes dX (like its algorithm choice): the same sums
  s.train.conv_wgrad_overlap = 0;  // which stream a weight gradient runs on: the same kernels
  s.train.conv_wgrad_low_priority = true;
  std::string text = spec_to_yaml(s);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

Status ckpt_save(const std::string& dir, const Compiled& c, const std::vector<std::byte>& weights,
                 const std::vector<std::byte>& opt_state, const TrainState& state, const AtomicWriteOptions& io,
                 const std::vector<std::byte>& buffers) {
  const int64_t wb = c.plan.region_bytes[static_cast<int>(Region::Weights)];
  const int64_t ob = c.plan.region_bytes[static_cast<int>(Region::OptState)];
  const int64_t bb = c.plan.region_bytes[static_cast<int>(Region::Buffers)];
  if (static_cast<int64_t>(weights.size()) != wb || static_cast<int64_t>(opt_state.size()) != ob ||
      static_cast<int64_t>(buffers.size()) != bb)
    return Error{ErrCode::Invalid, dir,
                 "region sizes do not match the plan (weights " + std::to_string(weights.size()) + " vs " +
                     std::to_string(wb) + ", opt_state " + std::to_string(opt_state.size()) + " vs " +
                     std::to_string(ob) + ", buffers " + std::to_string(buffers.size()) + " vs " +
                     std::to_string(bb) + " bytes)"};
  // Both files go into DIR.partial, which is renamed to DIR once complete: a crash (kill -9) at any point leaves
  // either no DIR or a whole one, never a directory with one file of two.
  namespace fs = std::filesystem;
  const std::string part = dir + kCkptPartialSuffix;
  std::error_code ec;
  fs::remove_all(part, ec);
  fs::create_directories(part, ec);
  if (ec) return Error{ErrCode::Io, part, "cannot create the checkpoint directory: " + ec.message()};
  // A failed write (ENOSPC, EIO) removes DIR.partial again (best effort: readers ignore *.partial anyway).
  auto abandon = [&](Status failed) {
    fs::remove_all(part, ec);
    return failed;
  };
  Status st = atomic_write_file(part + "/" + kCkptStateFile, state_encode(c, opt_state, state), io);
  if (!st.ok()) return abandon(st);
  std::vector<TensorView> ts = weight_tensors(c, weights, buffers);
  SafetensorsMetadata md{{"trctl_version", "1"},
                         {"spec_hash", hex64(ckpt_spec_hash(c.spec))},
                         {"step", std::to_string(state.step)},
                         {"data_crc32", hex64(tensors_crc(ts)).substr(8)}};
  st = safetensors_write(part + "/" + kCkptWeightsFile, ts, md, io);
  if (!st.ok()) return abandon(st);
  if (fs::exists(dir, ec)) fs::remove_all(dir, ec);  // re-saving a name replaces it
  fs::rename(part, dir, ec);
  if (ec) return Error{ErrCode::Io, dir, "cannot move the finished checkpoint into place: " + ec.message()};
  return sync_parent_dir(dir);
}

Result<CkptStateFile> ckpt_read_state(const std::string& path) {
  Result<std::vector<std::byte>> file = file_read_bytes(path);
  if (!file.ok()) return file.errors();
  uint32_t version = 0;
  Result<std::vector<std::byte>> payload = state_unwrap(file.value(), path, &version);
  if (!payload.ok()) return payload.errors();
  Reader r{payload.value(), path, kStateHeader, 0, {}};
  CkptStateFile out;
  out.state = read_train_state(r, out.spec_hash, version);
  SlotMap slots;
  if (!read_slots(r, slots)) return r.err;
  for (auto& [name, recs] : slots)
    for (SlotRecord& s : recs) {
      out.slots[name].push_back(std::move(s.data));
      out.slot_shapes[name].push_back(s.shape);
      out.slot_dtypes[name].push_back(s.dtype);
    }
  return out;
}

Result<Checkpoint> ckpt_load(const std::string& dir, const Compiled& c, const CkptLoadOptions& opt) {
  Checkpoint out;
  out.weights.assign(static_cast<size_t>(c.plan.region_bytes[static_cast<int>(Region::Weights)]), std::byte{0});
  out.opt_state.assign(static_cast<size_t>(c.plan.region_bytes[static_cast<int>(Region::OptState)]), std::byte{0});
  out.buffers.assign(static_cast<size_t>(c.plan.region_bytes[static_cast<int>(Region::Buffers)]), std::byte{0});
  const std::string wpath = dir + "/" + kCkptWeightsFile, spath = dir + "/" + kCkptStateFile;
  SafetensorsMetadata md;
  Status w = load_weights(wpath, c, out, md);
  std::vector<Error> errs = w.ok() ? std::vector<Error>{} : w.errors();
  const uint64_t now = ckpt_spec_hash(c.spec);
  if (opt.weights_only) {
    if (!errs.empty()) return errs;
    return out;
  }
  uint64_t saved_hash = 0;
  Status s = load_state(spath, c, out, saved_hash);
  if (!s.ok()) errs.insert(errs.end(), s.errors().begin(), s.errors().end());
  if (s.ok() && saved_hash != now)
    errs.push_back(spec_differs(spath, hex64(saved_hash), now));
  else if (w.ok() && md["spec_hash"] != hex64(now))
    errs.push_back(spec_differs(wpath, md["spec_hash"], now));
  if (w.ok() && s.ok() && md["step"] != std::to_string(out.state.step))
    errs.push_back({ErrCode::Format, dir, "weights (step " + md["step"] + ") and state (step " +
                                              std::to_string(out.state.step) + ") are from different saves"});
  if (!errs.empty()) return errs;
  return out;
}

}  // namespace trctl
