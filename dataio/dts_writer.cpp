// dts_pack: scan (read, probe, re-encode reduced levels) -> first-fit-decreasing block assignment -> blocks filled
// and written in parallel at their fixed offsets -> meta, index, header -> fsync, rename.
#include "dataio/dts_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "dataio/image_ops.h"
#include "dataio/jpeg.h"

namespace trctl {
namespace {

// Runs fn(i) for i in [0, n) on `threads` threads (dynamic assignment; results must be written per index), calling
// progress from this thread while it waits.
// fn(worker, i): worker in [0, threads) owns its scratch.
void parallel_each(int64_t n, int threads, const std::function<void(int, int64_t)>& fn,
                   const std::function<void(int64_t, int64_t)>& progress) {
  std::atomic<int64_t> next{0}, done{0};
  auto work = [&](int worker) {
    for (int64_t i; (i = next.fetch_add(1)) < n; done.fetch_add(1)) fn(worker, i);
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
  while (progress && done.load() < n) {
    progress(done.load(), n);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  for (auto& t : pool) t.join();
  if (progress) progress(n, n);
}

// Max-segment tree over block capacities: the leftmost block with room for `size`, in O(log blocks).
struct FitTree {
  size_t leaves = 1;
  std::vector<uint64_t> t;
  FitTree(size_t n, uint64_t cap) {
    while (leaves < n) leaves *= 2;
    t.assign(2 * leaves, 0);
    for (size_t i = 0; i < n; ++i) t[leaves + i] = cap;
    for (size_t i = leaves - 1; i >= 1; --i) t[i] = std::max(t[2 * i], t[2 * i + 1]);
  }
  size_t take(uint64_t size) {  // precondition: t[1] >= size
    size_t i = 1;
    while (i < leaves) i = t[2 * i] >= size ? 2 * i : 2 * i + 1;
    const size_t leaf = i - leaves;
    t[i] -= size;
    for (i /= 2; i >= 1; i /= 2) t[i] = std::max(t[2 * i], t[2 * i + 1]);
    return leaf;
  }
};

// What the scan learns of one sample at one level; bytes kept only for re-encoded levels.
struct Encoded {
  uint32_t size = 0;
  int h = 0, w = 0, c = 0;
  std::vector<uint8_t> bytes;
};

// The short side resized to `side` (torchvision Resize: long = int(side * long / short)), re-encoded at quality q.
// Images whose short side is already <= side keep their bytes.
Status reduce_jpeg(JpegCodec& codec, const PackSample& s, const PackLevelSpec& lv, DecodedImage& img,
                   std::vector<uint8_t>& resized, Encoded* out, const std::string& where) {
  const int shortest = std::min(s.h, s.w);
  if (shortest <= lv.short_side) {
    *out = Encoded{static_cast<uint32_t>(s.bytes.size()), s.h, s.w, s.c, s.bytes};
    return ok_status();
  }
  const int oh = s.h <= s.w ? lv.short_side : static_cast<int>(int64_t(lv.short_side) * s.h / s.w);
  const int ow = s.w < s.h ? lv.short_side : static_cast<int>(int64_t(lv.short_side) * s.w / s.h);
  Status st = codec.decode(s.bytes.data(), s.bytes.size(), s.c, ow, oh, &img, where);
  if (!st.ok()) return st;
  resized.resize(size_t(oh) * ow * s.c);
  ResizeScratch rs;
  const ImageView view{img.pixels.data(), img.h, img.w, img.c, size_t(img.w) * img.c};
  resize_region_u8(view, 0.f, 0.f, float(img.w), float(img.h), resized.data(), oh, ow, rs);
  Result<std::vector<uint8_t>> enc = codec.encode(resized.data(), ow, oh, s.c, lv.quality, where);
  if (!enc.ok()) return enc.errors();
  *out = Encoded{static_cast<uint32_t>(enc->size()), oh, ow, s.c, std::move(enc.value())};
  return ok_status();
}

// Reads sample i and fills its level-0 facts (dims from the JPEG header) and its reduced levels.
Status scan_sample(const PackSource& src, const PackOptions& opt, int64_t i, JpegCodec& codec, DecodedImage& img,
                   std::vector<uint8_t>& resized, std::vector<Encoded>* levels, int32_t* label) {
  PackSample s;
  Status st = src.read(i, &s);
  if (!st.ok()) return st;
  const std::string where = src.where(i);
  if (s.encoding == DtsEncoding::Jpeg) {
    Result<JpegInfo> info = codec.probe(s.bytes.data(), s.bytes.size(), where);
    if (!info.ok()) return info.errors();
    s.h = info->height;
    s.w = info->width;
    s.c = info->channels == 1 ? 1 : 3;
    // A full decode: a corrupt body is found now, not in the middle of training.
    if (!(st = codec.decode(s.bytes.data(), s.bytes.size(), s.c, 0, 0, &img, where)).ok()) return st;
  } else if (s.bytes.size() != size_t(s.h) * s.w * s.c || s.h < 1 || s.w < 1 || s.c < 1 || s.c > 4) {
    return Error{ErrCode::Internal, where, "raw sample size does not match its dimensions"};
  }
  if (s.h > int(kDtsMaxDim) || s.w > int(kDtsMaxDim))
    return Error{ErrCode::Format, where, "image " + std::to_string(s.w) + "x" + std::to_string(s.h) + " exceeds " + std::to_string(kDtsMaxDim)};
  if (s.bytes.size() > UINT32_MAX) return Error{ErrCode::Format, where, "sample over 4 GiB"};
  *label = s.label;
  (*levels)[0] = Encoded{static_cast<uint32_t>(s.bytes.size()), s.h, s.w, s.c, {}};
  for (size_t l = 0; l < opt.reduced.size(); ++l)
    if (!(st = reduce_jpeg(codec, s, opt.reduced[l], img, resized, &(*levels)[l + 1], where)).ok()) return st;
  return ok_status();
}

Status write_all(int fd, const std::string& path, uint64_t off, const void* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(fd, static_cast<const char*>(p) + done, n - done, static_cast<off_t>(off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Error{ErrCode::Io, path, std::string("write failed: ") + std::strerror(errno)};
    done += static_cast<size_t>(w);
  }
  return ok_status();
}

Status fsync_dir(const std::string& file) {
  std::string dir = std::filesystem::path(file).parent_path().string();
  int d = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return Error{ErrCode::Io, dir, "cannot open the directory to sync it"};
  int r = ::fsync(d);
  ::close(d);
  return r == 0 ? ok_status() : Status(Error{ErrCode::Io, dir, "fsync of the directory failed"});
}

}  // namespace

std::vector<std::pair<uint32_t, uint32_t>> dts_pack_ffd(const std::vector<uint32_t>& sizes, uint64_t block_size,
                                                        uint32_t* blocks_used) {
  std::vector<int64_t> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return sizes[a] > sizes[b]; });
  FitTree tree(std::max<size_t>(sizes.size(), 1), block_size);
  std::vector<std::pair<uint32_t, uint32_t>> at(sizes.size());
  uint32_t used = 0;
  for (int64_t i : order) {
    const size_t b = tree.take(sizes[i]);
    at[i] = {static_cast<uint32_t>(b), static_cast<uint32_t>(block_size - tree.t[tree.leaves + b] - sizes[i])};
    used = std::max(used, static_cast<uint32_t>(b + 1));
  }
  *blocks_used = used;
  return at;
}

Result<PackReport> dts_pack(const PackSource& src, const PackOptions& opt, const std::string& out_path) {
  const int threads = opt.threads > 0 ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
  const size_t nl = 1 + opt.reduced.size();
  if (opt.block_size < kDtsMinBlockSize || opt.block_size > kDtsMaxBlockSize || opt.block_size % 4096)
    return Error{ErrCode::OutOfRange, "pack-dts", "block size must be a multiple of 4 KiB in [4 KiB, 1 GiB]"};
  if (nl > kDtsMaxLevels) return Error{ErrCode::OutOfRange, "pack-dts", "at most " + std::to_string(kDtsMaxLevels - 1) + " reduced levels"};
  if (src.count < 1) return Error{ErrCode::Format, src.path, "the source has no samples"};
  if (!opt.reduced.empty() && src.kind != "image_folder")
    return Error{ErrCode::NotSupported, src.path, "reduced levels need a JPEG source (an image folder)"};
  for (const PackLevelSpec& r : opt.reduced)
    if (r.short_side < 1 || r.short_side > int(kDtsMaxDim) || r.quality < 1 || r.quality > 100)
      return Error{ErrCode::OutOfRange, "pack-dts", "a reduced level needs short side in [1, 16384] and quality in [1, 100]"};
  auto stage = [&](const char* name) {
    return [&, name](int64_t d, int64_t n) { if (opt.progress) opt.progress(name, d, n); };
  };

  // 1. Scan: every sample read, JPEGs decoded once, reduced levels encoded.
  std::vector<std::vector<Encoded>> enc(src.count, std::vector<Encoded>(nl));
  std::vector<int32_t> labels(src.count);
  std::vector<std::vector<Error>> bad(src.count);
  std::vector<JpegCodec> codecs(threads);
  std::vector<DecodedImage> imgs(threads);
  std::vector<std::vector<uint8_t>> scratch(threads);
  parallel_each(src.count, threads, [&](int t, int64_t i) {
    Status st = scan_sample(src, opt, i, codecs[t], imgs[t], scratch[t], &enc[i], &labels[i]);
    if (!st.ok()) bad[i] = st.errors();
  }, stage("scan"));

  PackReport rep;
  std::vector<int64_t> keep;  // source index of every packed sample, in source order
  std::vector<Error> fatal;
  for (int64_t i = 0; i < src.count; ++i) {
    if (bad[i].empty()) { keep.push_back(i); continue; }
    if (opt.skip_bad) rep.skipped.insert(rep.skipped.end(), bad[i].begin(), bad[i].end());
    else fatal.insert(fatal.end(), bad[i].begin(), bad[i].end());
  }
  if (!fatal.empty()) return fatal;
  if (keep.empty()) return Error{ErrCode::Format, src.path, "no sample could be read"};
  for (int64_t i : keep) {
    if (labels[i] < 0 || labels[i] >= static_cast<int32_t>(src.classes.size()))
      return Error{ErrCode::Format, src.where(i), "label " + std::to_string(labels[i]) + " outside the class table"};
    for (size_t l = 0; l < nl; ++l)
      if (enc[i][l].size > opt.block_size)
        return Error{ErrCode::OutOfRange, src.where(i), "encoded sample of " + std::to_string(enc[i][l].size) +
                                                         " bytes is larger than the block size"};
  }
  const int64_t n = static_cast<int64_t>(keep.size());

  // 2. Placement, level by level: each level's blocks follow the previous level's.
  DtsHeader h;
  h.sample_count = static_cast<uint64_t>(n);
  h.block_size = opt.block_size;
  h.level_count = static_cast<uint32_t>(nl);
  h.class_count = static_cast<uint32_t>(src.classes.size());
  std::vector<DtsLevel> levels(nl);
  std::vector<DtsSlot> slots(nl * n);
  std::vector<DtsBlock> blocks;
  rep.level_bytes.assign(nl, 0);
  for (size_t l = 0; l < nl; ++l) {
    std::vector<uint32_t> sizes(n);
    for (int64_t k = 0; k < n; ++k) sizes[k] = enc[keep[k]][l].size;
    uint32_t used = 0;
    auto at = dts_pack_ffd(sizes, opt.block_size, &used);
    DtsLevel& lv = levels[l];
    lv.short_side = l ? static_cast<uint32_t>(opt.reduced[l - 1].short_side) : 0;
    lv.quality = l ? static_cast<uint32_t>(opt.reduced[l - 1].quality) : 0;
    lv.encoding = src.kind == "image_folder" ? DtsEncoding::Jpeg : DtsEncoding::RawU8;
    lv.first_block = static_cast<uint32_t>(blocks.size());
    lv.block_count = used;
    blocks.resize(blocks.size() + used, DtsBlock{static_cast<uint32_t>(l), 0, 0, 0});
    for (int64_t k = 0; k < n; ++k) {
      const Encoded& e = enc[keep[k]][l];
      const Encoded& e0 = enc[keep[k]][0];
      DtsSlot& s = slots[l * n + k];
      s = DtsSlot{lv.first_block + at[k].first, at[k].second, e.size, labels[keep[k]],
                  static_cast<uint16_t>(e.h), static_cast<uint16_t>(e.w), static_cast<uint16_t>(e0.h),
                  static_cast<uint16_t>(e0.w), static_cast<uint8_t>(e.c), lv.encoding};
      DtsBlock& b = blocks[s.block];
      b.used_bytes = std::max(b.used_bytes, s.offset + s.size);
      b.sample_count++;
      rep.level_bytes[l] += e.size;
    }
  }
  h.block_count = blocks.size();

  // 3. Blocks: filled and checksummed in parallel, each written at its fixed offset of a temp file.
  const std::string tmp = out_path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error{ErrCode::Io, tmp, std::string("cannot create: ") + std::strerror(errno)};
  auto fail = [&](std::vector<Error> e) -> Result<PackReport> {
    ::close(fd);
    ::unlink(tmp.c_str());
    return e;
  };
  std::vector<std::vector<std::pair<uint32_t, int64_t>>> members(blocks.size());  // (level, k) per block
  for (size_t l = 0; l < nl; ++l)
    for (int64_t k = 0; k < n; ++k) members[slots[l * n + k].block].push_back({static_cast<uint32_t>(l), k});
  std::vector<std::vector<Error>> werr(blocks.size());
  std::vector<std::vector<uint8_t>> bufs(threads);
  parallel_each(static_cast<int64_t>(blocks.size()), threads, [&](int t, int64_t b) {
    std::vector<uint8_t>& buf = bufs[t];
    buf.assign(opt.block_size, 0);
    for (auto [l, k] : members[b]) {
      const DtsSlot& s = slots[l * n + k];
      const Encoded& e = enc[keep[k]][l];
      if (!e.bytes.empty()) {
        std::memcpy(buf.data() + s.offset, e.bytes.data(), e.size);
        continue;
      }
      PackSample ps;  // level 0 (or a kept-as-is reduced sample): re-read from the source
      Status st = src.read(keep[k], &ps);
      if (st.ok() && ps.bytes.size() != e.size)
        st = Error{ErrCode::Io, src.where(keep[k]), "changed while packing (size differs from the first read)"};
      if (!st.ok()) { werr[b] = st.errors(); return; }
      std::memcpy(buf.data() + s.offset, ps.bytes.data(), e.size);
    }
    blocks[b].hash = dts_hash(buf.data(), buf.size());
    Status st = write_all(fd, tmp, kDtsDataOffset + uint64_t(b) * opt.block_size, buf.data(), buf.size());
    if (!st.ok()) werr[b] = st.errors();
  }, stage("write"));
  for (auto& e : werr)
    if (!e.empty()) return fail(e);

  // 4. Meta, index, header; then durable and visible in one rename.
  DtsMeta meta;
  meta.params = {{"format", "trctl dts"}, {"source_kind", src.kind}, {"source", src.path},
                 {"block_size", std::to_string(opt.block_size)}, {"skipped_bad", std::to_string(rep.skipped.size())}};
  for (const auto& p : src.params) meta.params.push_back(p);
  for (size_t l = 1; l < nl; ++l)
    meta.params.push_back({"level " + std::to_string(l), "short_side " + std::to_string(opt.reduced[l - 1].short_side) +
                                                             " quality " + std::to_string(opt.reduced[l - 1].quality)});
  meta.classes = src.classes;
  const std::string mt = dts_meta_text(meta);
  ByteWriter iw;
  for (const DtsLevel& lv : levels) dts_write_level(iw, lv);
  for (const DtsBlock& b : blocks) dts_write_block(iw, b);
  for (const DtsSlot& s : slots) dts_write_slot(iw, s);
  h.meta_offset = kDtsDataOffset + h.block_count * h.block_size;
  h.meta_bytes = mt.size();
  h.meta_hash = dts_hash(mt.data(), mt.size());
  h.index_offset = h.meta_offset + h.meta_bytes;
  h.index_bytes = iw.b.size();
  h.index_hash = dts_hash(iw.b.data(), iw.b.size());
  const std::vector<uint8_t> hb = dts_header_bytes(h);
  std::vector<uint8_t> head(kDtsDataOffset, 0);
  std::memcpy(head.data(), hb.data(), hb.size());
  Status st = write_all(fd, tmp, 0, head.data(), head.size());
  if (st.ok()) st = write_all(fd, tmp, h.meta_offset, mt.data(), mt.size());
  if (st.ok()) st = write_all(fd, tmp, h.index_offset, iw.b.data(), iw.b.size());
  if (st.ok() && ::fsync(fd) != 0) st = Error{ErrCode::Io, tmp, "fsync failed"};
  if (!st.ok()) return fail(st.errors());
  ::close(fd);
  if (::rename(tmp.c_str(), out_path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return Error{ErrCode::Io, out_path, std::string("rename failed: ") + std::strerror(errno)};
  }
  if (!(st = fsync_dir(out_path)).ok()) return st.errors();
  rep.samples = n;
  rep.blocks = h.block_count;
  rep.file_bytes = h.index_offset + h.index_bytes;
  return rep;
}

}  // namespace trctl
