// IDX (MNIST format) reader: whole-file read, gzip inflation with a size cap, header and length checks, and
// idx_load (see dataset.h and idx.h).
#include "dataio/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "dataio/dataset.h"

namespace trctl {

namespace {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // u8 data, 3 dims (N, H, W)
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // u8 data, 1 dim (N)
constexpr uint32_t kIdxMaxCount = 100000000;      // N <= 1e8
constexpr uint32_t kIdxMaxSide = 4096;            // H, W in [1, 4096]

std::string at_offset(const std::string& path, uint64_t offset) {
  return path + ":offset " + std::to_string(offset);
}

Error format_error(const std::string& where, const std::string& message) {
  return Error{ErrCode::Format, where, message};
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

bool is_gzip(const std::vector<uint8_t>& b, size_t at = 0) {
  return b.size() >= at + 2 && b[at] == 0x1f && b[at + 1] == 0x8b;
}

}  // namespace

Result<std::vector<uint8_t>> idx_read_file(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) return Error{ErrCode::Io, path, std::string("cannot open: ") + std::strerror(errno)};
  struct stat st {};
  if (fstat(fileno(f.get()), &st) != 0) {
    return Error{ErrCode::Io, path, std::string("cannot stat: ") + std::strerror(errno)};
  }
  if (!S_ISREG(st.st_mode)) return Error{ErrCode::Io, path, "not a regular file"};
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), f.get());
  if (got != bytes.size()) {
    return Error{ErrCode::Io, path,
                 "short read: " + std::to_string(got) + " of " + std::to_string(bytes.size()) + " bytes"};
  }
  return bytes;
}

Result<std::vector<uint8_t>> idx_gunzip(const std::vector<uint8_t>& gz, const std::string& path, size_t max_out) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return Error{ErrCode::Internal, path, "inflateInit2 failed"};
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, inflateEnd);

  // The gzip trailer's ISIZE (size mod 2^32) is only a hint for the first allocation; the cap is what counts.
  // The hint is believed only up to what deflate can produce from this input (at most 1032 bytes per input
  // byte), so a few bytes claiming 4 GiB do not allocate it (found by fuzz_idx).
  size_t hint = gz.size() >= 4 ? (size_t(gz[gz.size() - 1]) << 24) | (size_t(gz[gz.size() - 2]) << 16) |
                                     (size_t(gz[gz.size() - 3]) << 8) | size_t(gz[gz.size() - 4])
                               : 0;
  constexpr size_t kDeflateMaxRatio = 1032;
  hint = std::min(hint, gz.size() * kDeflateMaxRatio);
  size_t limit = max_out + 1;  // room for one byte beyond the cap, so that "too big" is observable
  std::vector<uint8_t> out(std::min(limit, std::max<size_t>({hint, gz.size() * 4, size_t(1) << 16})));
  size_t in_pos = 0, out_pos = 0;
  constexpr size_t kChunk = size_t(1) << 30;  // avail_in / avail_out are 32-bit
  for (;;) {
    if (out_pos == out.size()) {
      if (out.size() >= limit) break;
      out.resize(std::min(limit, out.size() * 2));
    }
    if (zs.avail_in == 0 && in_pos < gz.size()) {
      zs.next_in = const_cast<Bytef*>(gz.data() + in_pos);
      zs.avail_in = static_cast<uInt>(std::min(kChunk, gz.size() - in_pos));
      in_pos += zs.avail_in;
    }
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(std::min(kChunk, out.size() - out_pos));
    size_t before = zs.avail_out;
    int rc = inflate(&zs, Z_NO_FLUSH);
    out_pos += before - zs.avail_out;
    size_t consumed = in_pos - zs.avail_in;
    if (rc == Z_STREAM_END) {
      if (consumed == gz.size()) break;
      if (!is_gzip(gz, consumed)) {
        return format_error(at_offset(path, consumed), std::to_string(gz.size() - consumed) +
                                                           " trailing bytes after the end of the gzip stream");
      }
      inflateReset(&zs);  // the next member of a multi-member file
      continue;
    }
    // Output room and input were both provided, so "no progress" means the input ran out.
    if (rc == Z_BUF_ERROR && consumed == gz.size()) {
      return format_error(at_offset(path, consumed), "truncated gzip stream (input ends before the stream does)");
    }
    if (rc != Z_OK) {
      return format_error(at_offset(path, consumed),
                          std::string("corrupt gzip stream: ") +
                              (zs.msg ? std::string(zs.msg) : "inflate error " + std::to_string(rc)));
    }
  }
  if (out_pos > max_out) {
    return format_error(at_offset(path, in_pos - zs.avail_in),
                        "gzip stream inflates to more than " + std::to_string(max_out) +
                            " bytes (limit against decompression bombs)");
  }
  out.resize(out_pos);
  return out;
}

Result<std::vector<uint8_t>> idx_read_bytes(const std::string& path, size_t max_inflated, bool* was_gzip) {
  auto raw = idx_read_file(path);
  bool gz = raw.ok() && is_gzip(raw.value());
  if (was_gzip) *was_gzip = gz;
  if (!gz) return raw;
  return idx_gunzip(raw.value(), path, max_inflated);
}

namespace {

// A checked IDX header: dims[0] is the count N; data starts at header_bytes.
struct IdxHeader {
  std::vector<uint32_t> dims;
  size_t header_bytes = 0;
};

// Checks magic, dims (count in [1, 1e8], sides in [1, 4096]) and that the length is exactly header + data.
Result<IdxHeader> idx_parse_header(const std::vector<uint8_t>& b, const std::string& path, uint32_t magic,
                                   const char* what) {
  int ndims = static_cast<int>(magic & 0xff);
  IdxHeader h;
  h.header_bytes = 4 + 4 * size_t(ndims);
  if (b.size() < 4) {
    return format_error(at_offset(path, b.size()), "file too short for an IDX magic number (" +
                                                       std::to_string(b.size()) + " bytes)");
  }
  uint32_t got = read_be32(b.data());
  if (got != magic) {
    return format_error(at_offset(path, 0), "bad IDX magic " + hex32(got) + " (expected " + hex32(magic) +
                                                ", an IDX " + what + " file)");
  }
  if (b.size() < h.header_bytes) {
    return format_error(at_offset(path, b.size()), "truncated IDX header: expected " +
                                                       std::to_string(h.header_bytes) + " bytes, file has " +
                                                       std::to_string(b.size()));
  }
  uint64_t data_bytes = 1;
  std::string dims_text;
  for (int d = 0; d < ndims; ++d) {
    uint32_t v = read_be32(b.data() + 4 + 4 * d);
    uint32_t hi = d == 0 ? kIdxMaxCount : kIdxMaxSide;
    if (v < 1 || v > hi) {
      return format_error(at_offset(path, 4 + 4 * size_t(d)),
                          std::string(d == 0 ? "sample count" : "image side") + " " + std::to_string(v) +
                              " out of range [1, " + std::to_string(hi) + "]");
    }
    h.dims.push_back(v);
    data_bytes *= v;
    dims_text += (d ? "x" : "") + std::to_string(v);
  }
  uint64_t expected = h.header_bytes + data_bytes;
  std::string sizes = "expected " + std::to_string(expected) + " bytes (" + std::to_string(h.header_bytes) +
                      "-byte header + " + dims_text + "), file has " + std::to_string(b.size());
  if (b.size() < expected) return format_error(at_offset(path, b.size()), "truncated IDX data: " + sizes);
  if (b.size() > expected) return format_error(at_offset(path, expected), "trailing bytes after IDX data: " + sizes);
  return h;
}

// Reads and checks one IDX file; for gzip files the messages say that offsets count decompressed bytes.
Result<std::vector<uint8_t>> idx_read_checked(const std::string& path, uint32_t magic, const char* what,
                                              IdxHeader* header) {
  bool gz = false;
  auto bytes = idx_read_bytes(path, kIdxMaxInflatedBytes, &gz);
  if (!bytes.ok()) return bytes;
  auto h = idx_parse_header(bytes.value(), path, magic, what);
  if (!h.ok()) {
    Error e = h.errors()[0];
    if (gz) e.message += " (offsets count decompressed bytes)";
    return e;
  }
  *header = std::move(h.value());
  return bytes;
}

}  // namespace

Result<ImageDataset> idx_load(const std::string& images_path, const std::string& labels_path) {
  IdxHeader img, lab;
  auto img_bytes = idx_read_checked(images_path, kIdxImagesMagic, "images (u8, N x H x W)", &img);
  if (!img_bytes.ok()) return img_bytes.errors();
  auto lab_bytes = idx_read_checked(labels_path, kIdxLabelsMagic, "labels (u8, N)", &lab);
  if (!lab_bytes.ok()) return lab_bytes.errors();
  if (lab.dims[0] != img.dims[0]) {
    return format_error(labels_path, std::to_string(lab.dims[0]) + " labels, but " + images_path + " has " +
                                         std::to_string(img.dims[0]) + " images");
  }

  ImageDataset ds;
  ds.n = img.dims[0];
  ds.h = static_cast<int>(img.dims[1]);
  ds.w = static_cast<int>(img.dims[2]);
  ds.c = 1;
  const std::vector<uint8_t>& ib = img_bytes.value();
  ds.pixels.assign(ib.begin() + static_cast<std::ptrdiff_t>(img.header_bytes), ib.end());
  const std::vector<uint8_t>& lb = lab_bytes.value();
  ds.labels.assign(lb.begin() + static_cast<std::ptrdiff_t>(lab.header_bytes), lb.end());
  int32_t max_label = *std::max_element(ds.labels.begin(), ds.labels.end());  // u8, so < 256
  ds.num_classes = max_label + 1;
  ds.source = images_path + " + " + labels_path;
  return ds;
}

}  // namespace trctl
