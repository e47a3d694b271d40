// dataset_load: the train or validation split named by a DataSpec (file names joined to root, train_subset).
#include <cstring>
#include <filesystem>

#include "core/util/philox.h"
#include "dataio/cifar.h"
#include "dataio/dataset.h"

namespace trctl {

namespace {

// root/name (name as given when absolute or root is empty). ".gz" is optional in the spec: when the named file
// does not exist but its twin with ".gz" added (or removed) does, the twin is used; gzip is detected by content.
std::string dataset_path(const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = root.empty() ? fs::path(name) : fs::path(root) / name;
  std::error_code ec;
  if (fs::exists(p, ec)) return p.string();
  std::string s = p.string();
  const std::string gz = ".gz";
  bool has_gz = s.size() >= gz.size() && s.compare(s.size() - gz.size(), gz.size(), gz) == 0;
  std::string twin = has_gz ? s.substr(0, s.size() - gz.size()) : s + gz;
  if (fs::exists(twin, ec)) return twin;
  return s;  // idx_load reports it missing under the name the spec gave
}

// The first `count` samples of ds (count <= ds.n). num_classes stays that of the whole file, so that a model
// trained on a subset still has every class.
void dataset_truncate(ImageDataset* ds, int64_t count) {
  size_t per = size_t(ds->h) * size_t(ds->w) * size_t(ds->c);
  ds->pixels.resize(size_t(count) * per);
  ds->labels.resize(size_t(count));
  ds->n = count;
}

// Random uint8 pixels and labels from Philox(0, Synthetic, split): throughput measurements on a dataset of any
// size without files. Nothing can be learned from it; never report its accuracy.
ImageDataset synthetic_make(const SyntheticSpec& s, bool train) {
  ImageDataset ds;
  ds.n = train ? s.train_size : s.val_size;
  ds.h = s.height;
  ds.w = s.width;
  ds.c = s.channels;
  ds.num_classes = s.classes;
  ds.source = std::string("synthetic ") + (train ? "train" : "val") + " split";
  ds.pixels.resize(static_cast<size_t>(ds.n) * ds.h * ds.w * ds.c);
  ds.labels.resize(static_cast<size_t>(ds.n));
  const uint32_t split = train ? 0 : 1;
  PhiloxStream px(0, static_cast<uint32_t>(RngPurpose::Synthetic), split, 0);
  for (size_t i = 0; i + 4 <= ds.pixels.size(); i += 4) {
    const uint32_t r = px.next();
    std::memcpy(&ds.pixels[i], &r, 4);
  }
  for (size_t i = ds.pixels.size() / 4 * 4; i < ds.pixels.size(); ++i) ds.pixels[i] = static_cast<uint8_t>(px.next());
  PhiloxStream lab(0, static_cast<uint32_t>(RngPurpose::Synthetic), split, 1);
  for (auto& l : ds.labels) l = static_cast<int32_t>(lab.next() % static_cast<uint32_t>(s.classes));
  return ds;
}

Result<ImageDataset> cifar_split_load(const DataSpec& data, bool train) {
  const CifarKind kind = data.dataset == DatasetKind::Cifar10 ? CifarKind::Cifar10 : CifarKind::Cifar100;
  Result<std::vector<std::string>> files = cifar_split_files(data.root, kind, train);
  if (!files.ok()) return files.errors();
  return cifar_load(files.value(), kind);
}

}  // namespace

Result<ImageDataset> dataset_load(const DataSpec& data, bool train) {
  if (data.dataset == DatasetKind::Dts || data.dataset == DatasetKind::ImageFolder)
    return Error{ErrCode::Internal, data.root, "dataset_load: dts and image_folder datasets are streamed (stream_loader.h)"};
  const bool cifar = data.dataset == DatasetKind::Cifar10 || data.dataset == DatasetKind::Cifar100;
  const bool synthetic = data.dataset == DatasetKind::Synthetic;
  std::string images = synthetic ? "data.synthetic" : cifar ? data.root : dataset_path(data.root, train ? data.train_images : data.val_images);
  std::string labels = dataset_path(data.root, train ? data.train_labels : data.val_labels);
  Result<ImageDataset> ds = synthetic ? Result<ImageDataset>(synthetic_make(data.synthetic, train))
                            : cifar   ? cifar_split_load(data, train)
                                      : idx_load(images, labels);
  if (!ds.ok() || !train || data.train_subset == 0) return ds;
  if (data.train_subset < 0 || data.train_subset > ds->n) {
    return Error{ErrCode::OutOfRange, images,
                 "data.train_subset " + std::to_string(data.train_subset) + " is outside [0, " +
                     std::to_string(ds->n) + "] (the file's sample count; 0 = all)"};
  }
  dataset_truncate(&ds.value(), data.train_subset);
  return ds;
}

}  // namespace trctl
