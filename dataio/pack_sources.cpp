// PackSource builders: raw in-memory datasets (IDX, CIFAR) and image folders.
#include "dataio/pack_sources.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "dataio/idx.h"

namespace trctl {

PackSource pack_source_raw(std::shared_ptr<const ImageDataset> ds, const std::string& kind,
                           std::vector<std::string> classes) {
  PackSource s;
  s.kind = kind;
  s.path = ds->source;
  s.count = ds->n;
  s.classes = std::move(classes);
  s.read = [ds](int64_t i, PackSample* out) {
    const size_t per = size_t(ds->h) * ds->w * ds->c;
    out->bytes.assign(ds->pixels.begin() + i * per, ds->pixels.begin() + (i + 1) * per);
    out->encoding = DtsEncoding::RawU8;
    out->h = ds->h;
    out->w = ds->w;
    out->c = ds->c;
    out->label = ds->labels[i];
    return ok_status();
  };
  s.where = [ds](int64_t i) { return ds->source + ":sample " + std::to_string(i); };
  s.labels = ds->labels;
  return s;
}

Result<PackSource> pack_source_idx(const std::string& images, const std::string& labels) {
  Result<ImageDataset> ds = idx_load(images, labels);
  if (!ds.ok()) return ds.errors();
  std::vector<std::string> classes;
  for (int k = 0; k < ds->num_classes; ++k) classes.push_back(std::to_string(k));
  PackSource s = pack_source_raw(std::make_shared<const ImageDataset>(std::move(ds.value())), "idx", classes);
  s.params = {{"images", images}, {"labels", labels}};
  return s;
}

namespace {
bool is_jpeg_name(const std::filesystem::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e == ".jpg" || e == ".jpeg";
}

Result<std::vector<uint8_t>> read_whole(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Error{ErrCode::Io, path, "cannot open"};
  std::vector<uint8_t> b;
  uint8_t chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) b.insert(b.end(), chunk, chunk + got);
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) return Error{ErrCode::Io, path, "read failed"};
  return b;
}
}  // namespace

Result<PackSource> pack_source_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Error{ErrCode::Io, dir, "not a directory"};
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory()) classes.push_back(e.path().filename().string());
  if (ec) return Error{ErrCode::Io, dir, "cannot list: " + ec.message()};
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) return Error{ErrCode::Format, dir, "no class sub-folders (expected DIR/CLASS/IMAGE.jpg)"};
  auto files = std::make_shared<std::vector<std::pair<std::string, int32_t>>>();
  int64_t skipped = 0;
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::string> mine;
    const fs::path cd = fs::path(dir) / classes[c];
    for (auto it = fs::recursive_directory_iterator(cd, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      if (is_jpeg_name(it->path())) mine.push_back(it->path().string());
      else ++skipped;
    }
    if (ec) return Error{ErrCode::Io, cd.string(), "cannot list: " + ec.message()};
    if (mine.empty()) return Error{ErrCode::Format, cd.string(), "class folder without JPEG files"};
    std::sort(mine.begin(), mine.end());
    for (auto& m : mine) files->push_back({std::move(m), static_cast<int32_t>(c)});
  }
  PackSource s;
  s.kind = "image_folder";
  s.path = dir;
  s.count = static_cast<int64_t>(files->size());
  s.classes = classes;
  s.read = [files](int64_t i, PackSample* out) -> Status {
    Result<std::vector<uint8_t>> b = read_whole((*files)[i].first);
    if (!b.ok()) return b.errors();
    out->bytes = std::move(b.value());
    out->encoding = DtsEncoding::Jpeg;
    out->label = (*files)[i].second;
    return ok_status();
  };
  s.where = [files](int64_t i) { return (*files)[i].first; };
  s.params = {{"skipped_non_jpeg", std::to_string(skipped)}};
  for (const auto& f : *files) s.labels.push_back(f.second);
  return s;
}

}  // namespace trctl
