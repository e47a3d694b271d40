// Batch loader (see loader.h): the epoch permutation, and a Loader whose background producer thread fills batch
// i+1 into one of two buffers (A/B) while the caller reads batch i from the other; the samples of a batch are split
// across a ThreadPool. Every sample depends only on (seed, epoch, dataset index), so batches are bitwise
// independent of the number of workers.
#include "dataio/loader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/util/philox.h"
#include "core/util/thread_pool.h"

namespace trctl {

std::vector<int64_t> loader_epoch_order(int64_t n, bool shuffle, uint64_t seed, uint32_t epoch) {
  std::vector<int64_t> order(size_t(std::max<int64_t>(n, 0)));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (!shuffle) return order;
  PhiloxStream rng(seed, static_cast<uint32_t>(RngPurpose::Shuffle), epoch, 0);
  for (int64_t i = n - 1; i >= 1; --i) {  // Fisher-Yates; n <= 1e8 < 2^32, so below() covers [0, i]
    int64_t j = rng.below(static_cast<uint32_t>(i + 1));
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

Status loader_validate(const ImageDataset& data, const TransformPipeline& pipeline, const LoaderOptions& opt) {
  std::vector<Error> errs;
  auto bad = [&](const std::string& m) { errs.push_back({ErrCode::Invalid, data.source, "loader: " + m}); };
  size_t per = size_t(std::max(data.h, 0)) * size_t(std::max(data.w, 0)) * size_t(std::max(data.c, 0));
  size_t n = size_t(std::max<int64_t>(data.n, 0));
  // Sample indices key the transform stream as uint32.
  if (data.n < 0 || data.n > int64_t(UINT32_MAX) || data.pixels.size() != n * per || data.labels.size() != n) {
    bad("dataset arrays do not match its dims (n " + std::to_string(data.n) + ")");
  }
  if (pipeline.in_h != data.h || pipeline.in_w != data.w || pipeline.c != data.c) {
    bad("the transform pipeline was built for " + std::to_string(pipeline.in_h) + "x" +
        std::to_string(pipeline.in_w) + "x" + std::to_string(pipeline.c) + " images, the dataset has " +
        std::to_string(data.h) + "x" + std::to_string(data.w) + "x" + std::to_string(data.c));
  }
  if (opt.batch_size < 1) bad("batch_size must be >= 1");
  if (opt.workers < 1 || opt.workers > 256) bad("workers must be in [1, 256]");
  if (!errs.empty()) return errs;
  return ok_status();
}

struct Loader::Impl {
  struct Slot {
    std::vector<float> x;    // (batch_size, out_h, out_w, c) f32
    std::vector<int32_t> y;  // (batch_size,)
    int size = 0;
  };

  const ImageDataset* data;
  TransformPipeline pipe;
  LoaderOptions opt;
  size_t in_floats = 0, out_floats = 0;  // per sample: u8 in, f32 out
  ThreadPool pool;
  Slot slots[2];

  std::mutex mu;
  std::condition_variable cv;    // producer <-> consumer, both directions
  std::atomic<bool> cancel{false};
  std::thread producer;
  // Epoch state, guarded by mu.
  bool active = false;
  uint32_t epoch = 0;
  std::vector<int64_t> order;
  int64_t num_batches = 0;
  int64_t produced = 0;  // batches [0, produced) are filled
  int64_t returned = 0;  // batches [0, returned) were handed out by next()
  int64_t released = 0;  // batches [0, released) are no longer read by the caller
  std::exception_ptr error;

  Impl(const ImageDataset& d, const TransformPipeline& p, const LoaderOptions& o)
      : data(&d), pipe(p), opt(o), pool(o.workers) {
    in_floats = size_t(d.h) * size_t(d.w) * size_t(d.c);
    out_floats = size_t(p.out_h) * size_t(p.out_w) * size_t(p.c);
    size_t cap = size_t(std::min<int64_t>(opt.batch_size, std::max<int64_t>(d.n, 1)));
    for (Slot& s : slots) {
      s.x.resize(cap * out_floats);
      s.y.resize(cap);
    }
  }
  ~Impl() { stop(); }

  int64_t batch_count() const {
    int64_t bs = opt.batch_size;
    return opt.drop_last ? data->n / bs : (data->n + bs - 1) / bs;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu);
      cancel = true;
    }
    cv.notify_all();
    if (producer.joinable()) producer.join();
    cancel = false;
  }

  // Samples [b*bs, b*bs + size) of the epoch order into s; split by sample over the pool. Exceptions inside the
  // pool's threads are caught per chunk and rethrown here, on the producer thread.
  void fill(int64_t b, Slot* s) {
    int64_t first = b * opt.batch_size;
    int size = static_cast<int>(std::min<int64_t>(opt.batch_size, data->n - first));
    std::mutex err_mu;
    std::exception_ptr err;
    pool.parallel_for(size, 1, [&](int64_t lo, int64_t hi) {
      try {
        for (int64_t i = lo; i < hi && !cancel.load(std::memory_order_relaxed); ++i) {
          int64_t idx = order[size_t(first + i)];
          SampleParams params = transforms_draw(pipe, opt.seed, epoch, static_cast<uint32_t>(idx));
          transforms_apply(pipe, params, data->pixels.data() + size_t(idx) * in_floats,
                           s->x.data() + size_t(i) * out_floats);
          s->y[size_t(i)] = data->labels[size_t(idx)];
        }
      } catch (...) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (!err) err = std::current_exception();
      }
    });
    if (err) std::rethrow_exception(err);
    s->size = size;
  }

  // Producer thread body: batch b goes to slot b % 2 once the caller released batch b - 2.
  void produce() {
    try {
      for (int64_t b = 0; b < num_batches; ++b) {
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return cancel.load() || b < released + 2; });
          if (cancel) return;
        }
        fill(b, &slots[b % 2]);
        if (cancel) return;
        {
          std::lock_guard<std::mutex> lk(mu);
          produced = b + 1;
        }
        cv.notify_all();
      }
    } catch (...) {
      {
        std::lock_guard<std::mutex> lk(mu);
        error = std::current_exception();
      }
      cv.notify_all();
    }
  }

  void start(uint32_t e) {
    stop();
    std::vector<int64_t> o = loader_epoch_order(data->n, opt.shuffle, opt.seed, e);
    {
      std::lock_guard<std::mutex> lk(mu);
      epoch = e;
      order = std::move(o);
      num_batches = batch_count();
      produced = returned = released = 0;
      error = nullptr;
      active = true;
    }
    producer = std::thread([this] { produce(); });
  }

  bool next(BatchView* out) {
    std::unique_lock<std::mutex> lk(mu);
    if (!active) return false;
    released = returned;  // the batch handed out last time is no longer valid
    cv.notify_all();
    if (error) std::rethrow_exception(error);
    if (returned >= num_batches) return false;
    cv.wait(lk, [&] { return produced > returned || error; });
    if (error) std::rethrow_exception(error);
    const Slot& s = slots[returned % 2];
    out->x = s.x.data();
    out->y = s.y.data();
    out->size = s.size;
    out->index = static_cast<int>(returned);
    ++returned;
    return true;
  }
};

Loader::Loader(const ImageDataset& data, const TransformPipeline& pipeline, const LoaderOptions& opt) {
  Status st = loader_validate(data, pipeline, opt);
  if (!st.ok()) throw std::invalid_argument(st.error_text());
  impl_ = std::make_unique<Impl>(data, pipeline, opt);
}

Loader::~Loader() = default;

int64_t Loader::batches_per_epoch() const { return impl_->batch_count(); }

void Loader::start_epoch(uint32_t epoch) { impl_->start(epoch); }

bool Loader::next(BatchView* out) { return impl_->next(out); }

}  // namespace trctl
