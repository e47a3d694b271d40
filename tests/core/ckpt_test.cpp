// Checkpoint formats: safetensors (exact bytes, round trip, rejection of corrupt files), atomic file writes with
// injected failures, and ckpt_save/ckpt_load of a compiled MLP (round trip, corrupt state.bin, shape mismatch).
#include <catch2/catch.hpp>
#include <zlib.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/ckpt/atomic_file.h"
#include "core/ckpt/checkpoint.h"
#include "core/ckpt/safetensors.h"
#include "core/compiler.h"
#include "tests/support/mlp_spec.h"

using namespace trctl;
using namespace trctl::testing;
namespace fs = std::filesystem;

namespace {

// This process's scratch root, removed when the test process exits.
struct ScratchRoot {
  fs::path path = fs::temp_directory_path() / ("trctl_ckpt_" + std::to_string(::getpid()));
  ~ScratchRoot() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A fresh, empty directory for one test case.
fs::path test_dir(const std::string& name) {
  static const ScratchRoot root;
  fs::path d = root.path / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<std::byte> pattern(size_t n, unsigned seed) {
  std::vector<std::byte> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131 + seed * 17 + (i >> 8)) & 0xFF);
  return b;
}

void write_raw(const fs::path& p, const std::vector<std::byte>& b) {
  REQUIRE(atomic_write_file(p.string(), b, {}).ok());
}

std::vector<std::byte> read_raw(const fs::path& p) {
  Result<std::vector<std::byte>> r = file_read_bytes(p.string());
  REQUIRE(r.ok());
  return r.value();
}

// The safetensors bytes of one header JSON text (padded to 8) followed by `data`.
std::vector<std::byte> st_file(std::string header, const std::vector<std::byte>& data) {
  while (header.size() % 8) header += ' ';
  std::vector<std::byte> b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::byte>((header.size() >> (8 * i)) & 0xFF);
  std::vector<std::byte> h = bytes_of(header);
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string decode_error(const std::vector<std::byte>& b) {
  Result<SafetensorsFile> f = safetensors_decode(b, "x.safetensors");
  REQUIRE_FALSE(f.ok());
  return f.error_text();
}

std::vector<TensorView> sample_tensors() {
  std::vector<TensorView> ts;
  ts.push_back({"w.f32", DType::F32, {2, 3}, bytes_of(std::vector<float>{1, -2, 3.5f, 4, 5, 6})});
  ts.push_back({"w.f64", DType::F64, {2}, bytes_of(std::vector<double>{0.25, -1e300})});
  ts.push_back({"h.f16", DType::F16, {3}, pattern(6, 1)});
  ts.push_back({"h.bf16", DType::BF16, {1, 2}, pattern(4, 2)});
  ts.push_back({"i.i32", DType::I32, {4}, bytes_of(std::vector<int32_t>{-1, 0, 7, INT32_MAX})});
  ts.push_back({"scalar", DType::F32, {}, bytes_of(std::vector<float>{42})});
  ts.push_back({"empty", DType::U8, {0, 5}, {}});
  ts.push_back({"u8 \"quoted\"\n", DType::U8, {5}, pattern(5, 3)});
  return ts;
}

}  // namespace

// ---------------------------------------------------------------- safetensors

TEST_CASE("safetensors round trip keeps names, dtypes, shapes, bytes, order and metadata", "[ckpt][safetensors]") {
  fs::path d = test_dir("st_roundtrip");
  std::vector<TensorView> ts = sample_tensors();
  SafetensorsMetadata md{{"trctl_version", "1"}, {"note", "tab\there \xc3\xa9"}};
  REQUIRE(safetensors_write((d / "a.safetensors").string(), ts, md).ok());
  Result<SafetensorsFile> f = safetensors_read((d / "a.safetensors").string());
  REQUIRE(f.ok());
  REQUIRE(f->tensors.size() == ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    CHECK(f->tensors[i].name == ts[i].name);
    CHECK(f->tensors[i].dtype == ts[i].dtype);
    CHECK(f->tensors[i].shape == ts[i].shape);
    CHECK(f->tensors[i].data == ts[i].data);
  }
  CHECK(f->metadata == md);
  CHECK(f->find("scalar") != nullptr);
  CHECK(f->find("nope") == nullptr);
}

TEST_CASE("safetensors writes exactly the reference format bytes", "[ckpt][safetensors]") {
  std::vector<TensorView> ts{{"a", DType::F32, {2}, bytes_of(std::vector<float>{1.0f, 2.0f})}};
  Result<std::vector<std::byte>> b = safetensors_encode(ts, {{"k", "v"}});
  REQUIRE(b.ok());
  // 79 bytes of JSON + 1 space of padding = 80 = 0x50; then 1.0f = 00 00 80 3f, 2.0f = 00 00 00 40.
  std::string header = R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} )";
  REQUIRE(header.size() == 80);
  std::vector<std::byte> want{std::byte{0x50}, std::byte{0}, std::byte{0}, std::byte{0},
                              std::byte{0},    std::byte{0}, std::byte{0}, std::byte{0}};
  std::vector<std::byte> h = bytes_of(header);
  want.insert(want.end(), h.begin(), h.end());
  for (int v : {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40}) want.push_back(static_cast<std::byte>(v));
  CHECK(b.value() == want);
}

TEST_CASE("safetensors without metadata has no __metadata__ key", "[ckpt][safetensors]") {
  Result<std::vector<std::byte>> b = safetensors_encode({{"s", DType::U8, {}, pattern(1, 0)}}, {});
  REQUIRE(b.ok());
  std::string text(reinterpret_cast<const char*>(b->data()) + 8, b->size() - 9);
  CHECK(text == R"({"s":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})" + std::string(4, ' '));  // 52 + 4 = 56
}

TEST_CASE("safetensors reader accepts other producers' key order and whitespace", "[ckpt][safetensors]") {
  auto b = st_file(R"({ "b" : {"data_offsets":[4,6],"shape":[1],"dtype":"F16"}, "a":{"dtype":"I32","shape":[1],)"
                   R"("data_offsets":[0,4]} ,"__metadata__":{"u":"\u00e9\ud83d\ude00\/"}})",
                   pattern(6, 4));
  Result<SafetensorsFile> f = safetensors_decode(b, "x.safetensors");
  REQUIRE(f.ok());
  REQUIRE(f->tensors.size() == 2);
  CHECK(f->tensors[0].name == "a");  // layout order
  CHECK(f->tensors[1].name == "b");
  CHECK(f->metadata.at("u") == "\xc3\xa9\xf0\x9f\x98\x80/");
}

TEST_CASE("safetensors writer rejects data whose size does not match the shape", "[ckpt][safetensors]") {
  Result<std::vector<std::byte>> b = safetensors_encode({{"t", DType::F32, {3}, pattern(8, 0)}}, {});
  REQUIRE_FALSE(b.ok());
  CHECK_THAT(b.error_text(), Catch::Contains("tensor 't'") && Catch::Contains("needs 12"));
  CHECK_FALSE(safetensors_encode({{"t", DType::U8, {1}, pattern(1, 0)}, {"t", DType::U8, {1}, pattern(1, 0)}}, {}).ok());
}

TEST_CASE("safetensors reader rejects a file truncated at any length", "[ckpt][safetensors]") {
  Result<std::vector<std::byte>> full = safetensors_encode(sample_tensors(), {{"k", "v"}});
  REQUIRE(full.ok());
  for (size_t len : {size_t(0), size_t(3), size_t(7), size_t(8), size_t(20), size_t(100), full->size() - 1}) {
    std::vector<std::byte> cut(full->begin(), full->begin() + static_cast<long>(len));
    std::string e = decode_error(cut);
    INFO("length " << len << ": " << e);
    CHECK_THAT(e, Catch::Contains("x.safetensors:offset "));
    if (len < 8) CHECK_THAT(e, Catch::Contains("8-byte header length is missing"));
  }
}

TEST_CASE("safetensors reader rejects a header length beyond the file", "[ckpt][safetensors]") {
  Result<std::vector<std::byte>> full = safetensors_encode(sample_tensors(), {});
  REQUIRE(full.ok());
  std::vector<std::byte> b = full.value();
  b[0] = std::byte{0xF8};
  b[1] = std::byte{0xFF};
  CHECK_THAT(decode_error(b), Catch::Contains("offset 0") && Catch::Contains("beyond the end of the file"));
  b[5] = std::byte{0x01};
  CHECK_THAT(decode_error(b), Catch::Contains("exceeds the limit"));
}

TEST_CASE("safetensors reader rejects invalid JSON with the file offset", "[ckpt][safetensors]") {
  auto data = pattern(4, 0);
  auto err = [&](const std::string& h) { return decode_error(st_file(h, data)); };
  CHECK_THAT(err(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},})"), Catch::Contains("expected a string"));
  CHECK_THAT(err(R"({"a":{"dtype":"U8","shape":[4.0],"data_offsets":[0,4]}})"), Catch::Contains("only integers"));
  CHECK_THAT(err(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})"), Catch::Contains("expected '}'"));
  CHECK_THAT(err(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}x)"), Catch::Contains("after the JSON"));
  CHECK_THAT(err(R"({"a":{"dtype":"U\q","shape":[4],"data_offsets":[0,4]}})"), Catch::Contains("bad escape"));
  CHECK_THAT(err(R"({"a":{"dtype":"U8","shape":[04],"data_offsets":[0,4]}})"), Catch::Contains("leading zero"));
  CHECK_THAT(err(R"({"a":null})"), Catch::Contains("offset 13") && Catch::Contains("unexpected character 'n'"));
  CHECK_THAT(err(R"({"a":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,4]}})"),
             Catch::Contains("out of range"));
  CHECK_THAT(err(R"( {"a":{}})"), Catch::Contains("offset 8") && Catch::Contains("does not start with '{'"));
}

TEST_CASE("safetensors reader rejects an unknown dtype", "[ckpt][safetensors]") {
  std::string e = decode_error(st_file(R"({"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", pattern(4, 0)));
  CHECK_THAT(e, Catch::Contains("unknown dtype 'F8_E4M3'") && Catch::Contains("tensor 'a'") &&
                    Catch::Contains("offset 22"));
}

TEST_CASE("safetensors reader rejects offsets that do not match the shape", "[ckpt][safetensors]") {
  std::string e = decode_error(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", pattern(4, 0)));
  CHECK_THAT(e, Catch::Contains("hold 4 bytes but shape [2] of F32 needs 8"));
  e = decode_error(st_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[3,1]}})", pattern(4, 0)));
  CHECK_THAT(e, Catch::Contains("not 0 <= begin <= end"));
}

TEST_CASE("safetensors reader rejects overlapping, gapped and out-of-range offsets", "[ckpt][safetensors]") {
  auto err = [](const std::string& h, size_t n) { return decode_error(st_file(h, pattern(n, 0))); };
  CHECK_THAT(err(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],)"
                 R"("data_offsets":[2,6]}})", 6),
             Catch::Contains("tensor 'b'") && Catch::Contains("overlaps tensor 'a'"));
  CHECK_THAT(err(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[1,5]}})", 5), Catch::Contains("gap"));
  CHECK_THAT(err(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 3),
             Catch::Contains("beyond the end of the file"));
  CHECK_THAT(err(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 6), Catch::Contains("belong to no tensor"));
}

TEST_CASE("safetensors reader rejects duplicate tensor names", "[ckpt][safetensors]") {
  std::string e = decode_error(st_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                       R"("a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                                       pattern(4, 0)));
  CHECK_THAT(e, Catch::Contains("duplicate key \"a\""));
}

TEST_CASE("safetensors reader rejects every single flipped byte in the header or names it harmlessly",
          "[ckpt][safetensors]") {
  // A flipped byte must either be rejected or decode to something that differs visibly (never crash or read
  // out of bounds); flips of structural characters, digits of offsets and dtype letters are all rejected.
  std::vector<TensorView> ts{{"ab", DType::F32, {2}, pattern(8, 0)}, {"cd", DType::U8, {3}, pattern(3, 1)}};
  Result<std::vector<std::byte>> full = safetensors_encode(ts, {});
  REQUIRE(full.ok());
  size_t header_end = full->size() - 11;
  int rejected = 0;
  for (size_t i = 8; i < header_end; ++i) {
    std::vector<std::byte> b = full.value();
    b[i] ^= std::byte{0x01};
    Result<SafetensorsFile> f = safetensors_decode(b, "x.safetensors");
    if (!f.ok()) {
      ++rejected;
      CHECK_THAT(f.error_text(), Catch::Contains("x.safetensors:offset "));
    } else {
      bool same = f->tensors.size() == 2 && f->tensors[0].name == "ab" && f->tensors[1].name == "cd";
      CHECK_FALSE(same);  // only a name byte can flip and still parse
    }
  }
  CHECK(rejected > static_cast<int>(header_end - 8) * 3 / 4);
}

// ---------------------------------------------------------------- atomic files

TEST_CASE("atomic write replaces the file and leaves no temp file", "[ckpt][atomic]") {
  fs::path d = test_dir("atomic_ok");
  fs::path p = d / "f.bin";
  write_raw(p, pattern(1000, 1));
  write_raw(p, pattern(10, 2));
  CHECK(read_raw(p) == pattern(10, 2));
  CHECK_FALSE(fs::exists(atomic_temp_path(p.string())));
}

TEST_CASE("atomic write that fails mid-file keeps the previous file and removes the temp file", "[ckpt][atomic]") {
  fs::path d = test_dir("atomic_fail");
  fs::path p = d / "f.bin";
  write_raw(p, pattern(5000, 1));
  for (int64_t k : {int64_t(0), int64_t(1), int64_t(4096), int64_t(9999)}) {
    AtomicWriteOptions opt;
    opt.fail_after_bytes = k;
    Status s = atomic_write_file(p.string(), pattern(10000, 2), opt);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error_text(), Catch::Contains("No space left on device") && Catch::Contains("unchanged"));
    CHECK(read_raw(p) == pattern(5000, 1));
    CHECK_FALSE(fs::exists(atomic_temp_path(p.string())));
  }
  AtomicWriteOptions rename_fails;
  rename_fails.fail_rename = true;
  rename_fails.fail_errno = EXDEV;
  CHECK_FALSE(atomic_write_file(p.string(), pattern(10, 3), rename_fails).ok());
  CHECK(read_raw(p) == pattern(5000, 1));
  CHECK_FALSE(fs::exists(atomic_temp_path(p.string())));
  CHECK(std::distance(fs::directory_iterator(d), fs::directory_iterator()) == 1);
}

TEST_CASE("atomic write into a missing directory is an error with errno text", "[ckpt][atomic]") {
  fs::path d = test_dir("atomic_nodir");
  Status s = atomic_write_file((d / "no" / "f.bin").string(), pattern(4, 0));
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error_text(), Catch::Contains("No such file or directory"));
}

// ---------------------------------------------------------------- checkpoints

namespace {

Compiled compiled_mlp(int hidden) {
  Result<Compiled> c = compile_spec(mlp_spec(hidden, 5), small_data(20, 10));
  REQUIRE(c.ok());
  return c.value();
}

// Region bytes as a backend would hold them: a pattern over each parameter / slot, zero padding.
std::vector<std::byte> region_with_pattern(const Compiled& c, Region r, unsigned seed) {
  std::vector<std::byte> b(static_cast<size_t>(c.plan.region_bytes[static_cast<int>(r)]), std::byte{0});
  for (const ParamInfo& p : c.graph.params) {
    std::vector<ValueId> vs = r == Region::Weights ? std::vector<ValueId>{p.value} : p.state;
    for (ValueId v : vs) {
      const Placement& pl = c.plan.values[v];
      std::vector<std::byte> pat = pattern(static_cast<size_t>(pl.bytes), seed + static_cast<unsigned>(v));
      std::copy(pat.begin(), pat.end(), b.begin() + pl.offset);
    }
  }
  return b;
}

TrainState sample_state() {
  TrainState s;
  s.step = 1234;
  s.epoch = 3;
  s.loss_scale = 32768.0f;
  s.loss_scale_growth = 17;
  s.seed = 0xDEADBEEFCAFEull;
  s.data_epoch = 4;
  s.data_batch = 2;
  return s;
}

// Saves the sample checkpoint of an MLP with `hidden` units into a fresh directory.
fs::path saved_checkpoint(const std::string& name, const Compiled& c) {
  fs::path d = test_dir(name);
  Status s = ckpt_save(d.string(), c, region_with_pattern(c, Region::Weights, 1),
                       region_with_pattern(c, Region::OptState, 2), sample_state());
  REQUIRE(s.ok());
  return d;
}

std::string load_error(const fs::path& d, const Compiled& c) {
  Result<Checkpoint> r = ckpt_load(d.string(), c);
  REQUIRE_FALSE(r.ok());
  return r.error_text();
}

}  // namespace

TEST_CASE("checkpoint round trip restores identical region bytes and train state", "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  REQUIRE(c.graph.params.size() == 4);
  REQUIRE(c.graph.params[0].state.size() == 2);  // AdamW: m, v
  fs::path d = saved_checkpoint("ck_roundtrip", c);
  Result<Checkpoint> r = ckpt_load(d.string(), c);
  REQUIRE(r.ok());
  CHECK(r->weights == region_with_pattern(c, Region::Weights, 1));
  CHECK(r->opt_state == region_with_pattern(c, Region::OptState, 2));
  CHECK(r->state == sample_state());
  CHECK_FALSE(fs::exists(atomic_temp_path((d / "state.bin").string())));
}

TEST_CASE("checkpoint weights are a plain safetensors file with one tensor per parameter", "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  fs::path d = saved_checkpoint("ck_st", c);
  Result<SafetensorsFile> f = safetensors_read((d / "weights.safetensors").string());
  REQUIRE(f.ok());
  REQUIRE(f->tensors.size() == c.graph.params.size());
  for (size_t i = 0; i < c.graph.params.size(); ++i) {
    const ParamInfo& p = c.graph.params[i];
    CHECK(f->tensors[i].name == p.name);  // the plan's layout order
    CHECK(f->tensors[i].shape == c.graph.values[p.value].shape.dims);
    CHECK(f->tensors[i].dtype == DType::F32);
  }
  CHECK(f->find("fc1.weight") != nullptr);
  CHECK(f->metadata.at("trctl_version") == "1");
  CHECK(f->metadata.at("step") == "1234");
  CHECK(f->metadata.at("spec_hash").size() == 16);
}

TEST_CASE("a flipped bit in state.bin is a checksum error", "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  fs::path d = saved_checkpoint("ck_flip", c);
  std::vector<std::byte> b = read_raw(d / "state.bin");
  for (size_t at : {size_t(30), b.size() / 2, b.size() - 5}) {
    std::vector<std::byte> f = b;
    f[at] ^= std::byte{0x10};
    write_raw(d / "state.bin", f);
    CHECK_THAT(load_error(d, c), Catch::Contains("state.bin:offset") && Catch::Contains("checksum mismatch"));
  }
}

TEST_CASE("a flipped bit in the weights data is a checksum error", "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  fs::path d = saved_checkpoint("ck_flipw", c);
  std::vector<std::byte> b = read_raw(d / "weights.safetensors");
  b[b.size() - 3] ^= std::byte{0x01};
  write_raw(d / "weights.safetensors", b);
  CHECK_THAT(load_error(d, c), Catch::Contains("weights.safetensors") && Catch::Contains("checksum mismatch"));
}

TEST_CASE("a truncated state.bin is rejected as truncated", "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  fs::path d = saved_checkpoint("ck_trunc", c);
  std::vector<std::byte> b = read_raw(d / "state.bin");
  for (size_t len : {size_t(0), size_t(5), size_t(20), size_t(100), b.size() - 1}) {
    write_raw(d / "state.bin", std::vector<std::byte>(b.begin(), b.begin() + static_cast<long>(len)));
    std::string e = load_error(d, c);
    INFO(e);
    CHECK_THAT(e, Catch::Contains("state.bin:offset") && Catch::Contains("truncated"));
  }
}

TEST_CASE("a state.bin with the wrong magic or version is rejected by name", "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  fs::path d = saved_checkpoint("ck_magic", c);
  std::vector<std::byte> b = read_raw(d / "state.bin");
  std::vector<std::byte> m = b;
  m[0] = std::byte{'X'};
  write_raw(d / "state.bin", m);
  CHECK_THAT(load_error(d, c), Catch::Contains("bad magic"));
  std::vector<std::byte> v = b;
  v[8] = std::byte{3};
  write_raw(d / "state.bin", v);
  CHECK_THAT(load_error(d, c), Catch::Contains("offset 8") && Catch::Contains("unsupported state file version 3"));
}

TEST_CASE("a version-1 state.bin (no optimizer update count) still loads, its updates equal to its steps",
          "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  fs::path d = saved_checkpoint("ck_v1", c);
  std::vector<std::byte> b = read_raw(d / "state.bin");
  // Version 2 -> 1: drop the i64 opt_updates after data_batch (header 24 + 56 bytes of train state), then fix
  // the version, the payload length and the CRC.
  b.erase(b.begin() + 80, b.begin() + 88);
  b[8] = std::byte{1};
  const uint64_t len = b.size() - 24 - 4;
  for (int i = 0; i < 8; ++i) b[16 + i] = std::byte(uint8_t(len >> (8 * i)));
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(b.data()), static_cast<uInt>(b.size() - 4)));
  for (int i = 0; i < 4; ++i) b[b.size() - 4 + i] = std::byte(uint8_t(crc >> (8 * i)));
  write_raw(d / "state.bin", b);
  Result<Checkpoint> ck = ckpt_load(d.string(), c);
  INFO((ck.ok() ? std::string() : ck.error_text()));
  REQUIRE(ck.ok());
  CHECK(ck->state.opt_updates == -1);
  CHECK(ck->state.updates() == ck->state.step);
}

TEST_CASE("loading into a model of another shape names the parameter and both shapes", "[ckpt][checkpoint]") {
  Compiled c8 = compiled_mlp(8);
  Compiled c9 = compiled_mlp(9);
  fs::path d = saved_checkpoint("ck_shape", c8);
  std::string e = load_error(d, c9);
  CHECK_THAT(e, Catch::Contains("parameter 'fc1.weight' is (8, 16) f32 in the checkpoint but (9, 16) f32"));
  CHECK_THAT(e, Catch::Contains("parameter 'fc2.weight' is (3, 8) f32 in the checkpoint but (3, 9) f32"));
  CkptLoadOptions weights_only;
  weights_only.weights_only = true;
  CHECK_FALSE(ckpt_load(d.string(), c9, weights_only).ok());
}

TEST_CASE("a checkpoint of another spec is refused unless loading weights only", "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  fs::path d = saved_checkpoint("ck_spec", c);
  Spec other = mlp_spec(8, 5);
  other.optimizer.weight_decay = 0.02;
  Result<Compiled> c2 = compile_spec(other, small_data(20, 10));
  REQUIRE(c2.ok());
  CHECK_THAT(load_error(d, c2.value()), Catch::Contains("different spec"));
  CkptLoadOptions weights_only;
  weights_only.weights_only = true;
  Result<Checkpoint> r = ckpt_load(d.string(), c2.value(), weights_only);
  REQUIRE(r.ok());
  CHECK(r->weights == region_with_pattern(c, Region::Weights, 1));
  CHECK(r->state == TrainState{});
}

TEST_CASE("the spec hash ignores where the run writes its outputs", "[ckpt][checkpoint]") {
  Spec a = mlp_spec(8, 5), b = a;
  b.run.out_dir = "elsewhere";
  b.run.log_interval = 7;
  CHECK(ckpt_spec_hash(a) == ckpt_spec_hash(b));
  b.train.epochs = 5;
  CHECK(ckpt_spec_hash(a) != ckpt_spec_hash(b));
}

TEST_CASE("weights and state from different saves are detected", "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  fs::path d = saved_checkpoint("ck_mixed", c);
  TrainState later = sample_state();
  later.step += 1;
  fs::path d2 = test_dir("ck_mixed2");
  REQUIRE(ckpt_save(d2.string(), c, region_with_pattern(c, Region::Weights, 1),
                    region_with_pattern(c, Region::OptState, 2), later).ok());
  fs::copy_file(d2 / "state.bin", d / "state.bin", fs::copy_options::overwrite_existing);
  CHECK_THAT(load_error(d, c), Catch::Contains("from different saves"));
}

TEST_CASE("a checkpoint save that fails on a full disk keeps the previous checkpoint", "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  fs::path d = saved_checkpoint("ck_full", c);
  AtomicWriteOptions full_disk;
  full_disk.fail_after_bytes = 100;
  TrainState later = sample_state();
  later.step = 9999;
  Status s = ckpt_save(d.string(), c, region_with_pattern(c, Region::Weights, 7),
                       region_with_pattern(c, Region::OptState, 8), later, full_disk);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error_text(), Catch::Contains("No space left on device"));
  Result<Checkpoint> r = ckpt_load(d.string(), c);
  REQUIRE(r.ok());
  CHECK(r->state == sample_state());
  CHECK(std::distance(fs::directory_iterator(d), fs::directory_iterator()) == 2);
}

TEST_CASE("a missing checkpoint file is an I/O error naming it", "[ckpt][checkpoint]") {
  Compiled c = compiled_mlp(8);
  fs::path d = saved_checkpoint("ck_missing", c);
  fs::remove(d / "state.bin");
  CHECK_THAT(load_error(d, c), Catch::Contains("state.bin") && Catch::Contains("No such file or directory"));
}
