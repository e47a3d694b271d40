// Test helpers for tests/data: a temporary directory, IDX and gzip byte builders, synthetic datasets.
#pragma once
#include <stdlib.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "dataio/dataset.h"

namespace trctl {
namespace test {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "trctl_data_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

inline void put_be32(std::vector<uint8_t>* b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b->push_back(static_cast<uint8_t>(v >> s));
}

// A deterministic, asymmetric pixel value for sample i at (y, x).
inline uint8_t test_pixel(int64_t i, int y, int x) { return static_cast<uint8_t>((i * 31 + y * 7 + x * 3) % 256); }

// IDX images file bytes: magic 0x00000803, dims n, h, w, then test_pixel values.
inline std::vector<uint8_t> idx_images_bytes(uint32_t n, uint32_t h, uint32_t w) {
  std::vector<uint8_t> b;
  put_be32(&b, 0x00000803);
  put_be32(&b, n);
  put_be32(&b, h);
  put_be32(&b, w);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t y = 0; y < h; ++y)
      for (uint32_t x = 0; x < w; ++x) b.push_back(test_pixel(i, int(y), int(x)));
  return b;
}

inline std::vector<uint8_t> idx_labels_bytes(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> b;
  put_be32(&b, 0x00000801);
  put_be32(&b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// One gzip member (as `gzip` writes), via zlib's deflate with the gzip wrapper.
inline std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& raw) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  std::vector<uint8_t> out(deflateBound(&zs, static_cast<uLong>(raw.size())) + 64);
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate failed");
  out.resize(zs.total_out);
  return out;
}

// n samples of h x w x c, pixels test_pixel (per channel offset), labels = sample index.
inline ImageDataset synthetic_dataset(int64_t n, int h, int w, int c = 1) {
  ImageDataset ds;
  ds.n = n;
  ds.h = h;
  ds.w = w;
  ds.c = c;
  ds.num_classes = static_cast<int>(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int ch = 0; ch < c; ++ch) ds.pixels.push_back(static_cast<uint8_t>(test_pixel(i, y, x) + 50 * ch));
    ds.labels.push_back(static_cast<int32_t>(i));
  }
  ds.source = "synthetic";
  return ds;
}

}  // namespace test
}  // namespace trctl
