// data_prepare for fixed-size and streamed datasets, and the two HostFeed kinds.
#include "runtime/train/train_data.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "runtime/backend.h"

namespace trctl {
namespace {

// An empty transform list means "normalize only".
std::vector<TransformSpec> with_default(std::vector<TransformSpec> t) {
  if (t.empty()) t.push_back(TransformSpec{});  // kind defaults to Normalize
  return t;
}

std::string joined(const std::string& root, const std::string& p) {
  namespace fs = std::filesystem;
  return root.empty() || fs::path(p).is_absolute() ? p : (fs::path(root) / p).string();
}

Result<Data> fixed_prepare(const Spec& spec) {
  Data d;
  Result<ImageDataset> tr = dataset_load(spec.data, true);
  if (!tr.ok()) return tr.errors();
  Result<ImageDataset> va = dataset_load(spec.data, false);
  if (!va.ok()) return va.errors();
  d.train = std::move(tr.value());
  d.val = std::move(va.value());
  if (d.train.h != d.val.h || d.train.w != d.val.w || d.train.c != d.val.c)
    return Error{ErrCode::Invalid, d.val.source, "validation images differ in size from the training images"};
  auto tt = transforms_build(with_default(spec.data.train_transforms), spec.data.mean, spec.data.std, d.train.h,
                             d.train.w, d.train.c, spec.source);
  if (!tt.ok()) return tt.errors();
  auto vt = transforms_build(with_default(spec.data.val_transforms), spec.data.mean, spec.data.std, d.val.h,
                             d.val.w, d.val.c, spec.source);
  if (!vt.ok()) return vt.errors();
  d.train_tf = std::move(tt.value());
  d.val_tf = std::move(vt.value());
  d.train_n = d.train.n;
  d.val_n = d.val.n;
  d.out_h = d.train_tf.out_h;
  d.out_w = d.train_tf.out_w;
  d.val_h = d.val_tf.out_h;  // another size than training's is fine: the eval programs are compiled for it
  d.val_w = d.val_tf.out_w;
  d.c = d.train.c;
  d.num_classes = std::max(d.train.num_classes, d.val.num_classes);
  return d;
}

// Channels the pipeline produces: 3 for JPEG sources (grayscale JPEGs decode to RGB, as PIL's convert("RGB")),
// the stored channels for raw DTS files (IDX, CIFAR packed).
int source_channels(const StreamSource& s) {
  if (s.kind == StreamSource::Kind::Folder) return 3;
  const DtsSlot& first = s.dts->slot(s.level, 0);
  return first.encoding == DtsEncoding::Jpeg ? 3 : first.channels;
}

Result<Data> streamed_prepare(const Spec& spec) {
  const DataSpec& ds = spec.data;
  Data d;
  d.streamed = true;
  const bool dts = ds.dataset == DatasetKind::Dts;
  for (int split = 0; split < 2; ++split) {
    const std::string path = joined(ds.root, split == 0 ? ds.train_path : ds.val_path);
    Result<std::shared_ptr<StreamSource>> src =
        dts ? stream_source_dts(path, static_cast<uint32_t>(ds.dts_level), ds.in_memory, ds.io_threads)
            : stream_source_folder(path);
    if (!src.ok()) return src.errors();
    (split == 0 ? d.train_src : d.val_src) = src.value();
  }
  d.c = source_channels(*d.train_src);
  if (source_channels(*d.val_src) != d.c)
    return Error{ErrCode::Invalid, d.val_src->where, "validation images have other channels than the training images"};
  for (int split = 0; split < 2; ++split) {
    const auto& steps = split == 0 ? ds.train_transforms : ds.val_transforms;
    Result<ImagePipeline> p = image_pipeline_build(with_default(steps), ds.mean, ds.std, d.c, spec.source);
    if (!p.ok()) return p.errors();
    (split == 0 ? d.train_pipe : d.val_pipe) = std::move(p.value());
  }
  d.train_n = d.train_src->n;
  if (ds.train_subset > 0)
    return Error{ErrCode::NotSupported, spec.source, "data.train_subset with a streamed dataset (dts, image_folder)"};
  d.val_n = d.val_src->n;
  d.out_h = d.train_pipe.out_h;
  d.out_w = d.train_pipe.out_w;
  d.val_h = d.val_pipe.out_h;
  d.val_w = d.val_pipe.out_w;
  d.num_classes = static_cast<int>(std::max(d.train_src->classes.size(), d.val_src->classes.size()));
  return d;
}

class FixedFeed final : public HostFeed {
 public:
  FixedFeed(const ImageDataset& data, const TransformPipeline& tf, const LoaderOptions& o) : loader_(data, tf, o) {
    sample_h_ = tf.out_h;
    sample_w_ = tf.out_w;
  }
  int64_t batches_per_epoch() const override { return loader_.batches_per_epoch(); }
  void start_epoch(uint32_t e) override { loader_.start_epoch(e); }
  Result<bool> next(HostBatch* out) override {
    BatchView b;
    if (!loader_.next(&b)) return false;
    *out = HostBatch{b.x, b.y, b.size};
    return true;
  }

 private:
  Loader loader_;
};

class StreamFeed final : public HostFeed {
 public:
  StreamFeed(std::unique_ptr<StreamLoader> l, const ImagePipeline& p) : loader_(std::move(l)) {
    sample_h_ = p.out_h;
    sample_w_ = p.out_w;
  }
  int64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }
  void start_epoch(uint32_t e) override { loader_->start_epoch(e); }
  Result<bool> next(HostBatch* out) override {
    StreamBatch b;
    Result<bool> more = loader_->next(&b);
    if (more.ok() && more.value()) *out = HostBatch{b.x, b.y, b.size};
    return more;
  }

 private:
  std::unique_ptr<StreamLoader> loader_;
};

// data.cache_val: the first epoch passes the stream's batches through and keeps a copy of each (one buffer from
// the backend's host_alloc, pinned on a GPU); later epochs replay the copies. Only for validation, whose
// transforms draw nothing random, so every epoch's batches are the same.
class CachedFeed final : public HostFeed {
 public:
  CachedFeed(std::unique_ptr<StreamLoader> l, const ImagePipeline& p, Backend& be) : loader_(std::move(l)), be_(be) {
    sample_h_ = p.out_h;
    sample_w_ = p.out_w;
  }
  ~CachedFeed() override {
    if (cache_) be_.host_free(cache_);
  }
  int64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }
  void start_epoch(uint32_t e) override {
    pos_ = 0;
    if (!complete_) {
      sizes_.clear();
      labels_.clear();
      loader_->start_epoch(e);
    }
  }
  Result<bool> next(HostBatch* out) override {
    const size_t per = loader_->sample_bytes();
    if (complete_) {
      if (pos_ >= sizes_.size()) return false;
      const int64_t first = offset(pos_);
      *out = HostBatch{cache_ + first * per, labels_.data() + first, sizes_[pos_]};
      ++pos_;
      return true;
    }
    StreamBatch b;
    Result<bool> more = loader_->next(&b);
    if (!more.ok()) return more;
    if (!more.value()) {
      complete_ = true;  // a whole epoch is cached
      return false;
    }
    if (!cache_) {
      cache_ = static_cast<char*>(be_.host_alloc(per * size_t(batch_cap())));
      if (!cache_) return Error{ErrCode::Io, "data.cache_val", "cannot allocate the validation cache"};
    }
    const int64_t first = offset(sizes_.size());
    std::memcpy(cache_ + first * per, b.x, per * size_t(b.size));
    labels_.insert(labels_.end(), b.y, b.y + b.size);
    sizes_.push_back(b.size);
    *out = HostBatch{b.x, b.y, b.size};
    return true;
  }

 private:
  int64_t offset(size_t batch) const {
    int64_t o = 0;
    for (size_t k = 0; k < batch; ++k) o += sizes_[k];
    return o;
  }
  int64_t batch_cap() const { return loader_->batches_per_epoch() * loader_->batch_size(); }
  std::unique_ptr<StreamLoader> loader_;
  Backend& be_;
  char* cache_ = nullptr;  // (samples, H, W, C) in the loader's dtype
  std::vector<int32_t> labels_;
  std::vector<int> sizes_;
  size_t pos_ = 0;
  bool complete_ = false;
};

bool draws_randomness(const ImagePipeline& p) {
  for (const TransformSpec& t : p.steps)
    if (t.kind == TransformKind::RandomResizedCrop || t.kind == TransformKind::RandomHorizontalFlip ||
        t.kind == TransformKind::ColorJitter || t.kind == TransformKind::RandomErasing)
      return true;
  return false;
}

}  // namespace

Result<Data> data_prepare(const Spec& spec) {
  const DatasetKind k = spec.data.dataset;
  return k == DatasetKind::Dts || k == DatasetKind::ImageFolder ? streamed_prepare(spec) : fixed_prepare(spec);
}

DataShape shape_of(const Data& d) {
  return DataShape{d.out_h, d.out_w, d.c, d.num_classes, d.train_n, d.val_n, d.val_h, d.val_w};
}

Result<std::unique_ptr<HostFeed>> HostFeed::make(const Spec& spec, const Data& d, bool train, Backend& be) {
  const int vb = spec.data.val_batch_size > 0 ? spec.data.val_batch_size : spec.data.batch_size;
  const int batch = train ? spec.data.batch_size : vb;
  if (!d.streamed) {
    if (be.host_input_dtype() != OutDType::F32)
      return Error{ErrCode::Internal, "trainer", "a fixed-size dataset fed from the host needs f32 input"};
    LoaderOptions o{batch, train, train && spec.data.drop_last, spec.seed, spec.data.workers};
    return std::unique_ptr<HostFeed>(new FixedFeed(train ? d.train : d.val, train ? d.train_tf : d.val_tf, o));
  }
  StreamLoaderOptions o;
  o.batch_size = batch;
  o.shuffle = train;
  o.drop_last = train && spec.data.drop_last;
  o.seed = spec.seed;
  o.workers = spec.data.workers;
  o.io_threads = spec.data.io_threads;
  o.dtype = be.host_input_dtype();
  o.alloc = [&be](size_t n) { return be.host_alloc(n); };
  o.release = [&be](void* p) { be.host_free(p); };
  const bool cache = !train && spec.data.cache_val;
  if (cache && draws_randomness(d.val_pipe))
    return Error{ErrCode::Invalid, spec.source,
                 "data.cache_val: the val_transforms draw random parameters (random_resized_crop, flips, jitter, "
                 "erasing), so cached batches would differ from fresh ones"};
  const ImagePipeline& pipe = train ? d.train_pipe : d.val_pipe;
  Result<std::unique_ptr<StreamLoader>> l = StreamLoader::create(train ? d.train_src : d.val_src, pipe, o);
  if (!l.ok()) return l.errors();
  if (cache) return std::unique_ptr<HostFeed>(new CachedFeed(std::move(l.value()), pipe, be));
  return std::unique_ptr<HostFeed>(new StreamFeed(std::move(l.value()), pipe));
}

}  // namespace trctl
