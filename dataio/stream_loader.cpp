// StreamSource builders, the epoch plan, and StreamLoader: IO threads fill groups of DTS blocks ahead of the
// decode workers; workers claim epoch positions in order, decode + transform each sample into its slot of the
// output ring; the caller takes finished batches in order. Every output sample depends only on (seed, epoch,
// sample index), so batches are bitwise independent of thread counts.
#include "dataio/stream_loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "core/util/philox.h"
#include "dataio/loader.h"
#include "dataio/pack_sources.h"

namespace trctl {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void shuffle_in_place(std::vector<int64_t>& v, PhiloxStream rng) {
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i >= 1; --i)
    std::swap(v[size_t(i)], v[size_t(rng.below(static_cast<uint32_t>(i + 1)))]);
}
}  // namespace

Result<std::shared_ptr<StreamSource>> stream_source_dts(const std::string& path, uint32_t level_short_side,
                                                        bool in_memory, int io_threads) {
  Result<std::shared_ptr<DtsFile>> f = DtsFile::open(path);
  if (!f.ok()) return f.errors();
  const int level = f.value()->find_level(level_short_side);
  if (level < 0)
    return Error{ErrCode::Invalid, path, "no level with short side " + std::to_string(level_short_side) +
                                             " (trctl dts info lists the levels; 0 = full size)"};
  auto s = std::make_shared<StreamSource>();
  s->kind = in_memory ? StreamSource::Kind::DtsMemory : StreamSource::Kind::DtsStream;
  s->where = path;
  s->dts = f.value();
  s->level = static_cast<uint32_t>(level);
  s->n = static_cast<int64_t>(s->dts->header().sample_count);
  s->classes = s->dts->meta().classes;
  for (int64_t i = 0; i < s->n; ++i) s->labels.push_back(s->dts->slot(s->level, i).label);
  if (!in_memory) return s;
  const DtsLevel& lv = s->dts->levels()[s->level];
  s->ram.resize(lv.block_count);
  std::atomic<uint32_t> next{0};
  std::vector<Error> errs;
  std::mutex mu;
  auto work = [&] {
    for (uint32_t b; (b = next.fetch_add(1)) < lv.block_count;) {
      Status st = s->dts->read_block(lv.first_block + b, &s->ram[b]);
      if (!st.ok()) {
        std::lock_guard<std::mutex> g(mu);
        errs.insert(errs.end(), st.errors().begin(), st.errors().end());
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, io_threads); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (!errs.empty()) return errs;
  return s;
}

Result<std::shared_ptr<StreamSource>> stream_source_folder(const std::string& dir) {
  Result<PackSource> p = pack_source_folder(dir);
  if (!p.ok()) return p.errors();
  auto s = std::make_shared<StreamSource>();
  s->kind = StreamSource::Kind::Folder;
  s->where = dir;
  s->n = p->count;
  s->labels = p->labels;
  s->classes = p->classes;
  s->folder = std::move(p.value());
  return s;
}

EpochPlan stream_epoch_plan(const StreamSource& s, bool shuffle, uint64_t seed, uint32_t epoch, int window_blocks) {
  EpochPlan plan;
  if (s.kind != StreamSource::Kind::DtsStream) {
    plan.order = loader_epoch_order(s.n, shuffle, seed, epoch);
    return plan;
  }
  const DtsLevel& lv = s.dts->levels()[s.level];
  std::vector<int64_t> blocks(lv.block_count);
  for (uint32_t b = 0; b < lv.block_count; ++b) blocks[b] = lv.first_block + b;
  const uint32_t purpose = static_cast<uint32_t>(RngPurpose::Shuffle);
  if (shuffle) shuffle_in_place(blocks, PhiloxStream(seed, purpose, epoch, 1));
  const size_t w = static_cast<size_t>(std::max(1, window_blocks));
  for (size_t g0 = 0; g0 < blocks.size(); g0 += w) {
    const uint32_t g = static_cast<uint32_t>(plan.groups.size());
    plan.groups.emplace_back();
    std::vector<int64_t> members;
    for (size_t k = g0; k < std::min(blocks.size(), g0 + w); ++k) {
      plan.groups.back().push_back(static_cast<uint32_t>(blocks[k]));
      const auto& in_block = s.dts->block_samples(static_cast<uint32_t>(blocks[k]));
      members.insert(members.end(), in_block.begin(), in_block.end());
    }
    if (shuffle) shuffle_in_place(members, PhiloxStream(seed, purpose, epoch, 2 + g));
    plan.order.insert(plan.order.end(), members.begin(), members.end());
    plan.group_of.insert(plan.group_of.end(), members.size(), g);
  }
  return plan;
}

struct StreamLoader::Impl {
  struct Slot {
    void* x = nullptr;        // (batch_size, out_h, out_w, c)
    std::vector<int32_t> y;   // (batch_size,)
    int64_t batch = -1;
    int size = 0, done = 0;
    std::vector<Error> errs;
  };
  struct Group {
    std::vector<std::vector<uint8_t>> bufs;  // per block of the group, in plan order
    size_t loaded = 0;
    int64_t remaining = 0;                   // positions (< used) still to decode
    std::vector<Error> errs;
  };

  std::shared_ptr<const StreamSource> src;
  ImagePipeline pipe;
  StreamLoaderOptions opt;
  size_t per_sample = 0;
  std::vector<Slot> slots;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::thread> threads;
  bool cancel = false;
  // Epoch state (guarded by mu, except next_pos).
  uint32_t epoch = 0;
  EpochPlan plan;
  int64_t used = 0, nb = 0;
  std::atomic<int64_t> next_pos{0};
  int64_t returned = 0, released = 0;
  bool holding = false;  // the caller holds batch returned-1
  std::vector<Group> groups;
  uint32_t oldest = 0;   // the first group with positions left
  StreamStats stats;

  ~Impl() {
    stop();
    for (Slot& s : slots)
      if (s.x) opt.release ? opt.release(s.x) : std::free(s.x);
  }

  void stop() {
    {
      std::lock_guard<std::mutex> g(mu);
      cancel = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
    cancel = false;
  }

  void advance_oldest() {  // under mu
    while (oldest < groups.size() && groups[oldest].remaining == 0) {
      groups[oldest].bufs.clear();
      groups[oldest].bufs.shrink_to_fit();
      ++oldest;
    }
  }

  void io_loop(int t) {
    std::vector<std::pair<uint32_t, size_t>> mine;  // (group, block within it), j = t, t+io, ...
    size_t j = 0;
    for (uint32_t g = 0; g < plan.groups.size(); ++g)
      for (size_t k = 0; k < plan.groups[g].size(); ++k, ++j)
        if (j % opt.io_threads == static_cast<size_t>(t)) mine.push_back({g, k});
    for (const auto& gk : mine) {
      const uint32_t g = gk.first;  // not a structured binding: the lambda below captures g (C++20 in clang)
      const size_t k = gk.second;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return cancel || g < oldest + static_cast<uint32_t>(opt.prefetch_groups); });
        if (cancel) return;
        if (groups[g].remaining == 0) continue;  // beyond drop_last's cut
      }
      std::vector<uint8_t> buf;
      const auto t0 = Clock::now();
      Status st = src->dts->read_block(plan.groups[g][k], &buf);
      const double dt = seconds_since(t0);
      std::lock_guard<std::mutex> lk(mu);
      stats.read_s += dt;
      stats.bytes_read += buf.size();
      if (!st.ok()) groups[g].errs.insert(groups[g].errs.end(), st.errors().begin(), st.errors().end());
      if (g >= oldest) groups[g].bufs[k] = std::move(buf);
      groups[g].loaded++;
      cv.notify_all();
    }
  }

  // The encoded bytes of position p (DtsStream: waits for its group).
  Status sample_bytes(int64_t p, int64_t i, std::vector<uint8_t>& own, const uint8_t** data, size_t* size,
                      double* read_s) {
    if (src->kind == StreamSource::Kind::Folder) {
      PackSample ps;
      const auto t0 = Clock::now();
      Status st = src->folder.read(i, &ps);
      *read_s += seconds_since(t0);
      if (!st.ok()) return st;
      own = std::move(ps.bytes);
      *data = own.data();
      *size = own.size();
      return ok_status();
    }
    const DtsSlot& s = src->dts->slot(src->level, i);
    const uint32_t rel = s.block - src->dts->levels()[src->level].first_block;
    if (src->kind == StreamSource::Kind::DtsMemory) {
      *data = src->ram[rel].data() + s.offset;
      *size = s.size;
      return ok_status();
    }
    const uint32_t g = plan.group_of[p];
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return cancel || groups[g].loaded == plan.groups[g].size(); });
    if (cancel) return Error{ErrCode::Internal, src->where, "cancelled"};
    if (!groups[g].errs.empty()) return groups[g].errs;
    const auto& blocks = plan.groups[g];
    const size_t k = std::find(blocks.begin(), blocks.end(), s.block) - blocks.begin();
    *data = groups[g].bufs[k].data() + s.offset;
    *size = s.size;
    return ok_status();
  }

  void worker_loop() {
    ImageScratch scratch;
    std::vector<uint8_t> own;
    for (int64_t p; (p = next_pos.fetch_add(1)) < used;) {
      const int64_t b = p / opt.batch_size;
      Slot& slot = slots[b % slots.size()];
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return cancel || slot.batch == b || (slot.batch < b && b < released + int64_t(slots.size())); });
        if (cancel) return;
        if (slot.batch != b) {
          slot.batch = b;
          slot.size = static_cast<int>(std::min<int64_t>(opt.batch_size, used - b * opt.batch_size));
          slot.done = 0;
          slot.errs.clear();
        }
      }
      const int64_t i = plan.order[p];
      const uint8_t* data = nullptr;
      size_t size = 0;
      double read_s = 0;
      Status st = sample_bytes(p, i, own, &data, &size, &read_s);
      const auto t0 = Clock::now();
      if (st.ok()) {
        const DtsSlot* ds = src->dts ? &src->dts->slot(src->level, i) : nullptr;
        const bool jpeg = !ds || ds->encoding == DtsEncoding::Jpeg;
        const std::string where = ds ? src->where + ":block " + std::to_string(ds->block) + " sample " + std::to_string(i)
                                     : src->folder.where(i);
        st = image_pipeline_apply(pipe, scratch, data, size, jpeg, ds ? ds->height : 0, ds ? ds->width : 0,
                                  ds ? ds->channels : 0, opt.seed, epoch, static_cast<uint32_t>(i), opt.dtype,
                                  static_cast<char*>(slot.x) + (p % opt.batch_size) * per_sample, where);
      }
      const double dec = seconds_since(t0);
      std::lock_guard<std::mutex> lk(mu);
      slot.y[p % opt.batch_size] = src->labels[i];
      if (!st.ok()) slot.errs.insert(slot.errs.end(), st.errors().begin(), st.errors().end());
      slot.done++;
      stats.samples++;
      stats.decode_s += dec;
      stats.read_s += read_s;
      if (src->kind == StreamSource::Kind::DtsStream && --groups[plan.group_of[p]].remaining == 0) advance_oldest();
      cv.notify_all();
    }
  }
};

StreamLoader::StreamLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamLoader::~StreamLoader() = default;

Result<std::unique_ptr<StreamLoader>> StreamLoader::create(std::shared_ptr<const StreamSource> src, ImagePipeline pipe,
                                                           StreamLoaderOptions opt) {
  if (opt.batch_size < 1 || opt.workers < 1 || opt.workers > 256 || opt.io_threads < 1 || opt.ring < 2 ||
      opt.window_blocks < 1 || opt.prefetch_groups < 1)
    return Error{ErrCode::Invalid, src->where, "loader: batch_size, workers (1..256), io_threads, window and prefetch must be >= 1, ring >= 2"};
  if (src->n < 1 || src->n > int64_t(UINT32_MAX)) return Error{ErrCode::Invalid, src->where, "loader: no samples"};
  auto impl = std::make_unique<Impl>();
  impl->src = std::move(src);
  impl->pipe = std::move(pipe);
  impl->opt = opt;
  const size_t elem = opt.dtype == OutDType::F32 ? 4 : 2;
  impl->per_sample = size_t(impl->pipe.out_h) * impl->pipe.out_w * impl->pipe.c * elem;
  impl->slots.resize(opt.ring);
  const size_t bytes = impl->per_sample * opt.batch_size;
  for (auto& s : impl->slots) {
    s.x = opt.alloc ? opt.alloc(bytes) : std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!s.x) return Error{ErrCode::Io, impl->src->where, "loader: cannot allocate " + std::to_string(bytes) + " bytes"};
    s.y.resize(opt.batch_size);
  }
  return std::unique_ptr<StreamLoader>(new StreamLoader(std::move(impl)));
}

int64_t StreamLoader::batches_per_epoch() const {
  const int64_t n = impl_->src->n, b = impl_->opt.batch_size;
  return impl_->opt.drop_last ? n / b : (n + b - 1) / b;
}

size_t StreamLoader::sample_bytes() const { return impl_->per_sample; }

int StreamLoader::batch_size() const { return impl_->opt.batch_size; }

void StreamLoader::start_epoch(uint32_t epoch) {
  Impl& m = *impl_;
  m.stop();
  m.epoch = epoch;
  m.plan = stream_epoch_plan(*m.src, m.opt.shuffle, m.opt.seed, epoch, m.opt.window_blocks);
  m.nb = batches_per_epoch();
  m.used = std::min<int64_t>(m.src->n, m.nb * m.opt.batch_size);
  m.next_pos = 0;
  m.returned = m.released = 0;
  m.holding = false;
  for (auto& s : m.slots) s.batch = -1;
  m.groups.assign(m.plan.groups.size(), Impl::Group{});
  for (size_t g = 0; g < m.groups.size(); ++g) m.groups[g].bufs.resize(m.plan.groups[g].size());
  for (int64_t p = 0; p < m.used && !m.plan.group_of.empty(); ++p) m.groups[m.plan.group_of[p]].remaining++;
  m.oldest = 0;
  m.advance_oldest();
  if (m.src->kind == StreamSource::Kind::DtsStream)
    for (int t = 0; t < m.opt.io_threads; ++t) m.threads.emplace_back([&m, t] { m.io_loop(t); });
  for (int t = 0; t < m.opt.workers; ++t) m.threads.emplace_back([&m] { m.worker_loop(); });
}

Result<bool> StreamLoader::next(StreamBatch* out) {
  Impl& m = *impl_;
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lk(m.mu);
  if (m.holding) {
    m.released = m.returned;
    m.holding = false;
    m.cv.notify_all();
  }
  if (m.returned >= m.nb || m.threads.empty()) return false;
  Impl::Slot& s = m.slots[m.returned % m.slots.size()];
  m.cv.wait(lk, [&] { return s.batch == m.returned && s.done == s.size; });
  m.stats.wait_s += seconds_since(t0);
  if (!s.errs.empty()) return s.errs;
  *out = StreamBatch{s.x, s.y.data(), s.size, m.returned};
  m.returned++;
  m.holding = true;
  return true;
}

StreamStats StreamLoader::stats() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->stats;
}

}  // namespace trctl
