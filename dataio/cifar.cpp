// CIFAR-10 / CIFAR-100 binary reader: record checks, the CHW -> HWC transpose, split file names and class names
// (see cifar.h).
#include "dataio/cifar.h"

#include <filesystem>

#include "dataio/idx.h"

namespace trctl {

namespace {

namespace fs = std::filesystem;

constexpr int kCifar100Coarse = 20;  // CIFAR-100 coarse labels (superclasses), checked but not kept

const char* cifar_name(CifarKind kind) { return kind == CifarKind::Cifar10 ? "CIFAR-10" : "CIFAR-100"; }

// The folder the official archive unpacks to; the files are also accepted directly under root.
const char* cifar_subfolder(CifarKind kind) {
  return kind == CifarKind::Cifar10 ? "cifar-10-batches-bin" : "cifar-100-binary";
}

std::string at_offset(const std::string& path, uint64_t offset) {
  return path + ":offset " + std::to_string(offset);
}

Error format_error(const std::string& path, uint64_t offset, const std::string& message) {
  return Error{ErrCode::Format, at_offset(path, offset), message};
}

// Checks the length and every label of one file's bytes, then appends its records to ds. On error ds is
// unchanged.
Status cifar_append(const std::vector<uint8_t>& b, const std::string& path, CifarKind kind, ImageDataset* ds) {
  const size_t rec = size_t(cifar_record_bytes(kind));
  const std::string what = std::string(cifar_name(kind)) + " record of " + std::to_string(rec) + " bytes";
  if (b.empty()) return format_error(path, 0, "empty file (expected whole " + what + ")");
  const size_t n = b.size() / rec;
  if (b.size() % rec != 0) {
    return format_error(path, n * rec,
                        "file length " + std::to_string(b.size()) + " is not a multiple of the " + what + ": " +
                            std::to_string(n) + " whole records, then a truncated one of " +
                            std::to_string(b.size() - n * rec) + " bytes");
  }
  const int label_at = kind == CifarKind::Cifar10 ? 0 : 1;  // CIFAR-100: coarse byte, then the fine label
  const int classes = cifar_num_classes(kind);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* r = b.data() + i * rec;
    if (kind == CifarKind::Cifar100 && r[0] >= kCifar100Coarse) {
      return format_error(path, i * rec, "record " + std::to_string(i) + ": coarse label " + std::to_string(r[0]) +
                                             " out of range [0, " + std::to_string(kCifar100Coarse) + ")");
    }
    if (r[label_at] >= classes) {
      return format_error(path, i * rec + label_at,
                          "record " + std::to_string(i) + ": label " + std::to_string(r[label_at]) +
                              " out of range [0, " + std::to_string(classes) + ") of " + cifar_name(kind));
    }
  }

  constexpr int kPlane = kCifarSide * kCifarSide;
  const size_t first = ds->pixels.size();
  ds->pixels.resize(first + n * kCifarPixelBytes);
  ds->labels.reserve(ds->labels.size() + n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* r = b.data() + i * rec;
    const uint8_t* chw = r + label_at + 1;                       // (3, 32, 32) planar
    uint8_t* hwc = ds->pixels.data() + first + i * kCifarPixelBytes;  // (32, 32, 3)
    for (int p = 0; p < kPlane; ++p)
      for (int c = 0; c < 3; ++c) hwc[3 * p + c] = chw[c * kPlane + p];
    ds->labels.push_back(r[label_at]);
  }
  ds->n += static_cast<int64_t>(n);
  return ok_status();
}

std::vector<std::string> cifar_file_names(CifarKind kind, bool train) {
  if (kind == CifarKind::Cifar100) return {train ? "train.bin" : "test.bin"};
  if (!train) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

// Strips ASCII whitespace (including the '\r' of CRLF files) from both ends.
std::string trim(const std::string& s) {
  const char* ws = " \t\r\n\v\f";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

int cifar_num_classes(CifarKind kind) { return kind == CifarKind::Cifar10 ? 10 : 100; }

int cifar_record_bytes(CifarKind kind) { return (kind == CifarKind::Cifar10 ? 1 : 2) + kCifarPixelBytes; }

Result<ImageDataset> cifar_load(const std::vector<std::string>& batch_files, CifarKind kind) {
  if (batch_files.empty()) return Error{ErrCode::Invalid, "", std::string("no ") + cifar_name(kind) + " files given"};
  ImageDataset ds;
  ds.h = ds.w = kCifarSide;
  ds.c = 3;
  ds.num_classes = cifar_num_classes(kind);
  std::vector<Error> errors;
  for (const std::string& path : batch_files) {
    auto bytes = idx_read_file(path);
    Status st = bytes.ok() ? cifar_append(bytes.value(), path, kind, &ds) : Status(bytes.errors());
    if (!st.ok()) errors.insert(errors.end(), st.errors().begin(), st.errors().end());
    ds.source += (ds.source.empty() ? "" : " + ") + path;
  }
  if (!errors.empty()) return errors;
  return ds;
}

Result<std::vector<std::string>> cifar_split_files(const std::string& root, CifarKind kind, bool train) {
  const std::vector<std::string> names = cifar_file_names(kind, train);
  std::string looked;
  for (const fs::path& dir : {fs::path(root), fs::path(root) / cifar_subfolder(kind)}) {
    std::vector<std::string> paths;
    std::string missing;
    for (const std::string& name : names) {
      fs::path p = dir / name;
      std::error_code ec;
      if (!fs::is_regular_file(p, ec)) missing += (missing.empty() ? "" : ", ") + name;
      paths.push_back(p.string());
    }
    if (missing.empty()) return paths;
    std::error_code ec;
    looked += (looked.empty() ? "" : "; ") + dir.string() +
              (fs::is_directory(dir, ec) ? " (missing " + missing + ")" : " (no such folder)");
  }
  return Error{ErrCode::Io, root,
               std::string(cifar_name(kind)) + " " + (train ? "train" : "test") +
                   " files not found; looked in " + looked};
}

Result<std::vector<std::string>> cifar_class_names(const std::string& root, CifarKind kind) {
  const int classes = cifar_num_classes(kind);
  const char* meta = kind == CifarKind::Cifar10 ? "batches.meta.txt" : "fine_label_names.txt";
  for (const fs::path& p : {fs::path(root) / meta, fs::path(root) / cifar_subfolder(kind) / meta}) {
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) continue;
    auto bytes = idx_read_file(p.string());
    if (!bytes.ok()) return bytes.errors();
    std::vector<std::string> names;
    std::string line;
    for (size_t i = 0; i <= bytes->size(); ++i) {
      if (i < bytes->size() && bytes.value()[i] != '\n') {
        line += static_cast<char>(bytes.value()[i]);
        continue;
      }
      std::string name = trim(line);
      if (!name.empty()) names.push_back(name);
      line.clear();
    }
    if (static_cast<int>(names.size()) != classes) {
      return Error{ErrCode::Format, p.string(),
                   std::to_string(names.size()) + " class names (one per non-blank line), expected " +
                       std::to_string(classes) + " for " + cifar_name(kind)};
    }
    return names;
  }
  std::vector<std::string> names;
  for (int i = 0; i < classes; ++i) names.push_back(std::to_string(i));
  return names;
}

}  // namespace trctl
