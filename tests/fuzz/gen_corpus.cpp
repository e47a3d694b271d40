// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/) with the repo's own writers: specs
// from configs/ and small hand-written variants, IDX pairs (plain and gzip), JPEGs from JpegCodec::encode, DTS
// files from dts_pack (raw and JPEG with a reduced level), safetensors and state.bin from ckpt_save. Valid inputs
// and near-valid ones (a truncation, a flipped byte). Usage: gen_corpus SOURCE_DIR OUT_DIR. Deterministic. The
// corpus also holds regress_* (inputs of fixed bugs) and grown-* (found by longer runs); this does not touch them.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/ckpt/safetensors.h"
#include "core/spec/spec.h"
#include "dataio/dts_reader.h"
#include "dataio/jpeg.h"
#include "dataio/pack_sources.h"
#include "tests/data/data_test_util.h"
#include "tests/fuzz/tiny_ckpt.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

fs::path g_out;
int g_files = 0;

template <class Bytes>
void put(const std::string& target, const std::string& name, uint8_t prefix_or_none, bool prefixed,
         const Bytes& body) {
  fs::create_directories(g_out / target);
  std::ofstream f(g_out / target / name, std::ios::binary);
  if (prefixed) f.put(char(prefix_or_none));
  f.write(reinterpret_cast<const char*>(body.data()), std::streamsize(body.size()));
  ++g_files;
}
template <class Bytes>
void put_plain(const std::string& target, const std::string& name, const Bytes& body) {
  put(target, name, 0, false, body);
}
template <class Bytes>
void put_prefixed(const std::string& target, const std::string& name, uint8_t prefix, const Bytes& body) {
  put(target, name, prefix, true, body);
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  const std::string s = read_text(p);
  return std::vector<uint8_t>(s.begin(), s.end());
}

template <class Bytes>
Bytes truncated(Bytes b, size_t keep) {
  b.resize(std::min(keep, b.size()));
  return b;
}

void spec_seeds(const fs::path& src) {
  const std::string minimal = "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, out_features: 10}\n";
  put_plain("fuzz_spec", "minimal.yaml", minimal);
  put_plain("fuzz_spec", "mlp_fmnist.yaml", read_text(src / "configs/mlp_fmnist.yaml"));
  put_plain("fuzz_spec", "cnn_fmnist.yaml", read_text(src / "configs/cnn_fmnist.yaml"));
  Result<Spec> mlp = spec_load((src / "configs/mlp_fmnist.yaml").string());
  if (mlp.ok()) put_plain("fuzz_spec", "mlp_fmnist_emitted.yaml", spec_to_yaml(mlp.value()));
  put_plain("fuzz_spec", "overrides.yaml",
            minimal + '\0' + "train.epochs=3" + '\0' + "optimizer.betas=[0.9, 0.99]" + '\0' +
                "model.layers.1.out_features=4");
  put_plain("fuzz_spec", "dts_transforms.yaml",
            "data:\n  dataset: dts\n  train_path: t.dts\n  val_path: v.dts\n  normalization: {mean: [0.5, 0.5, 0.5], "
            "std: [0.2, 0.2, 0.2]}\n  train_transforms:\n    - random_resized_crop: {size: 16, scale: [0.1, 1]}\n"
            "    - random_horizontal_flip: {p: 0.5}\n    - color_jitter: {brightness: 0.4, hue: 0.1}\n"
            "    - normalize\n  val_transforms:\n    - resize: {size: 18}\n    - center_crop: {size: 16}\n"
            "    - normalize\n" + minimal);
  put_plain("fuzz_spec", "alias.yaml", "train: &t {epochs: 2}\nrun: *t\n" + minimal);
  put_plain("fuzz_spec", "syntax_error.yaml", std::string("model:\n  layers: [\n    {type: relu}\n"));
  put_plain("fuzz_spec", "deep_flow.yaml", "model: " + std::string(40, '[') + std::string(40, ']') + "\n");
}

void idx_seeds() {
  const std::vector<uint8_t> images = test::idx_images_bytes(3, 4, 5), labels = test::idx_labels_bytes({2, 0, 1});
  auto pair = [](const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    std::vector<uint8_t> out{uint8_t(a.size() & 0xff), uint8_t(a.size() >> 8)};
    out.insert(out.end(), a.begin(), a.end());
    out.insert(out.end(), b.begin(), b.end());
    return out;
  };
  put_plain("fuzz_idx", "valid", pair(images, labels));
  put_plain("fuzz_idx", "valid_gzip", pair(test::gzip_bytes(images), test::gzip_bytes(labels)));
  put_plain("fuzz_idx", "truncated_images", pair(truncated(images, images.size() - 3), labels));
  std::vector<uint8_t> two = test::gzip_bytes(images), second = test::gzip_bytes(labels);
  two.insert(two.end(), second.begin(), second.end());  // two gzip members
  put_plain("fuzz_idx", "gzip_two_members", pair(two, labels));
}

std::vector<uint8_t> smooth_jpeg(JpegCodec& codec, int w, int h, int c, int quality, int k) {
  std::vector<uint8_t> px(size_t(w) * h * c);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(128 + 100 * std::sin(0.07 * double(i % 997) + k));
  return codec.encode(px.data(), w, h, c, quality, "gen").value();
}

void jpeg_seeds() {
  JpegCodec codec;
  put_plain("fuzz_jpeg", "rgb_17x11.jpg", smooth_jpeg(codec, 17, 11, 3, 80, 1));
  put_plain("fuzz_jpeg", "rgb_40x24_q30.jpg", smooth_jpeg(codec, 40, 24, 3, 30, 2));
  put_plain("fuzz_jpeg", "gray_9x16.jpg", smooth_jpeg(codec, 9, 16, 1, 90, 3));
  put_plain("fuzz_jpeg", "rgb_8x8_truncated.jpg", truncated(smooth_jpeg(codec, 8, 8, 3, 75, 4), 200));
}

void dts_seeds() {
  test::TempDir d;
  auto ds = std::make_shared<ImageDataset>(test::synthetic_dataset(6, 3, 4, 1));
  ds->num_classes = 3;
  for (int32_t& l : ds->labels) l %= 3;
  PackOptions o;
  o.block_size = kDtsMinBlockSize;
  o.threads = 1;
  if (!dts_pack(pack_source_raw(ds, "idx", {"a", "b", "c"}), o, d.file("raw.dts")).ok()) std::abort();
  JpegCodec codec;
  for (int cls = 0; cls < 2; ++cls) {
    fs::create_directories(d.file("f/c" + std::to_string(cls)));
    for (int i = 0; i < 2; ++i)
      test::write_file(d.file("f/c" + std::to_string(cls) + "/" + std::to_string(i) + ".jpg"),
                       smooth_jpeg(codec, 20 + i, 14 + cls, 3, 60, cls * 2 + i));
  }
  o.reduced = {PackLevelSpec{8, 70}};
  if (!dts_pack(pack_source_folder(d.file("f")).value(), o, d.file("jpg.dts")).ok()) std::abort();
  const std::vector<uint8_t> raw = read_bytes(d.file("raw.dts")), jpg = read_bytes(d.file("jpg.dts"));
  put_prefixed("fuzz_dts", "raw", 0, raw);
  put_prefixed("fuzz_dts", "raw_resealed", 1, raw);
  put_prefixed("fuzz_dts", "jpeg_two_levels", 0, jpg);
  put_prefixed("fuzz_dts", "jpeg_two_levels_resealed", 1, jpg);
  std::vector<uint8_t> flipped = raw;
  flipped[96] ^= 1;  // level_count 1 -> 0, checksums re-sealed by the harness
  put_prefixed("fuzz_dts", "raw_bad_level_count_resealed", 1, flipped);
}

void ckpt_seeds() {
  const fuzz::TinyCheckpoint t = fuzz::tiny_checkpoint();
  put_prefixed("fuzz_ckpt", "safetensors", 0, t.weights_file);
  std::vector<TensorView> ts(2);
  ts[0].name = "a";
  ts[0].dtype = DType::F16;
  ts[0].shape = {2, 1};
  ts[0].data.assign(4, std::byte{0x3c});
  ts[1].name = "b";
  ts[1].dtype = DType::U8;
  ts[1].shape = {};
  ts[1].data.assign(1, std::byte{7});
  put_prefixed("fuzz_ckpt", "safetensors_scalar_f16", 0, safetensors_encode(ts, {{"k", "v"}}).value());
  put_prefixed("fuzz_ckpt", "state", 1, t.state_file);
  const std::vector<std::byte> payload(t.state_file.begin() + 24, t.state_file.end() - 4);
  put_prefixed("fuzz_ckpt", "state_payload_v2", 2, payload);
  put_prefixed("fuzz_ckpt", "state_truncated", 1, truncated(t.state_file, t.state_file.size() / 2));
  put_prefixed("fuzz_ckpt", "weights", 3, t.weights_file);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gen_corpus SOURCE_DIR OUT_DIR\n");
    return 2;
  }
  g_out = argv[2];
  spec_seeds(argv[1]);
  idx_seeds();
  jpeg_seeds();
  dts_seeds();
  ckpt_seeds();
  std::printf("gen_corpus: %d files under %s\n", g_files, argv[2]);
  return 0;
}
