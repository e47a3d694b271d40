// DtsFile::open and its structural checks, checksummed block reads, dts_verify and dts_info.
#include "dataio/dts_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "dataio/jpeg.h"

namespace trctl {
namespace {

std::string at_offset(const std::string& path, uint64_t off) { return path + ":offset " + std::to_string(off); }

// pread of exactly n bytes at off; short reads are Io errors.
Status pread_all(int fd, const std::string& path, uint64_t off, void* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, static_cast<char*>(dst) + got, n - got, static_cast<off_t>(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Error{ErrCode::Io, at_offset(path, off + got), std::string("read failed: ") + std::strerror(errno)};
    if (r == 0) return Error{ErrCode::Format, at_offset(path, off + got), "unexpected end of file (truncated?)"};
    got += static_cast<size_t>(r);
  }
  return ok_status();
}

Result<DtsHeader> parse_header(const uint8_t* b, const std::string& path) {
  if (std::memcmp(b, kDtsMagic, sizeof(kDtsMagic)) != 0)
    return Error{ErrCode::Format, at_offset(path, 0), "not a DTS file (bad magic)"};
  ByteReader r(b, kDtsHeaderBytes);
  r.skip(8);
  DtsHeader h;
  h.version = r.u32();
  if (h.version != kDtsVersion)
    return Error{ErrCode::Format, at_offset(path, 8),
                 "DTS version " + std::to_string(h.version) + "; this trctl reads version " + std::to_string(kDtsVersion)};
  if (r.u32() != kDtsHeaderBytes) return Error{ErrCode::Format, at_offset(path, 12), "bad header size"};
  uint64_t stored;
  std::memcpy(&stored, b + kDtsHeaderBytes - 8, 8);  // little-endian hosts only (x86-64, aarch64)
  if (stored != dts_hash(b, kDtsHeaderBytes - 8))
    return Error{ErrCode::Format, at_offset(path, 0), "header checksum mismatch (corrupt header)"};
  h.sample_count = r.u64();
  h.block_size = r.u64();
  h.block_count = r.u64();
  h.data_offset = r.u64();
  h.meta_offset = r.u64();
  h.meta_bytes = r.u64();
  h.meta_hash = r.u64();
  h.index_offset = r.u64();
  h.index_bytes = r.u64();
  h.index_hash = r.u64();
  h.level_count = r.u32();
  h.class_count = r.u32();
  return h;
}

// Sizes that the rest of open() relies on, checked before anything is allocated from them.
Status check_header(const DtsHeader& h, uint64_t file_bytes, const std::string& path) {
  auto bad = [&](const std::string& m) { return Error{ErrCode::Format, path, "header: " + m}; };
  if (h.block_size < kDtsMinBlockSize || h.block_size > kDtsMaxBlockSize || h.block_size % 4096 != 0)
    return bad("block size " + std::to_string(h.block_size) + " outside [4 KiB, 1 GiB] or not a multiple of 4 KiB");
  if (h.level_count < 1 || h.level_count > kDtsMaxLevels) return bad("level count " + std::to_string(h.level_count));
  if (h.data_offset < kDtsHeaderBytes) return bad("data offset inside the header");
  if (h.block_count > (file_bytes / h.block_size) + 1) return bad("more blocks than the file can hold");
  const uint64_t data_end = h.data_offset + h.block_count * h.block_size;
  const uint64_t expect = h.index_offset + h.index_bytes;
  if (h.meta_offset != data_end || h.index_offset != h.meta_offset + h.meta_bytes)
    return bad("meta/index offsets do not follow the data blocks");
  if (file_bytes < expect)
    return Error{ErrCode::Format, path,
                 "truncated: " + std::to_string(file_bytes) + " bytes, the header describes " + std::to_string(expect)};
  if (file_bytes > expect) return bad(std::to_string(file_bytes - expect) + " unexpected bytes after the index");
  const uint64_t want_index = h.level_count * kDtsLevelRecord + h.block_count * kDtsBlockRecord +
                              h.level_count * h.sample_count * kDtsSlotRecord;
  if (h.sample_count > file_bytes || h.index_bytes != want_index)
    return bad("index size " + std::to_string(h.index_bytes) + " does not match its counts");
  if (h.meta_bytes > (uint64_t(64) << 20)) return bad("meta text over 64 MiB");
  return ok_status();
}

}  // namespace

DtsFile::~DtsFile() {
  if (fd_ >= 0) ::close(fd_);
}

int DtsFile::find_level(uint32_t short_side) const {
  for (size_t i = 0; i < levels_.size(); ++i)
    if (levels_[i].short_side == short_side) return static_cast<int>(i);
  return -1;
}

Result<std::shared_ptr<DtsFile>> DtsFile::open(const std::string& path) {
  std::shared_ptr<DtsFile> f(new DtsFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) return Error{ErrCode::Io, path, std::string("cannot open: ") + std::strerror(errno)};
  struct stat st {};
  if (::fstat(f->fd_, &st) != 0 || !S_ISREG(st.st_mode)) return Error{ErrCode::Io, path, "not a regular file"};
  f->file_bytes_ = static_cast<uint64_t>(st.st_size);
  if (f->file_bytes_ < kDtsHeaderBytes)
    return Error{ErrCode::Format, path, "truncated: " + std::to_string(f->file_bytes_) + " bytes, shorter than a DTS header"};
  uint8_t hb[kDtsHeaderBytes];
  Status s = pread_all(f->fd_, path, 0, hb, sizeof(hb));
  if (!s.ok()) return s.errors();
  Result<DtsHeader> h = parse_header(hb, path);
  if (!h.ok()) return h.errors();
  f->h_ = h.value();
  if (!(s = check_header(f->h_, f->file_bytes_, path)).ok()) return s.errors();

  std::string meta(f->h_.meta_bytes, '\0');
  if (!(s = pread_all(f->fd_, path, f->h_.meta_offset, meta.data(), meta.size())).ok()) return s.errors();
  if (dts_hash(meta.data(), meta.size()) != f->h_.meta_hash)
    return Error{ErrCode::Format, at_offset(path, f->h_.meta_offset), "meta checksum mismatch (corrupt meta text)"};
  std::string merr = dts_meta_parse(meta, &f->meta_);
  if (!merr.empty()) return Error{ErrCode::Format, at_offset(path, f->h_.meta_offset), merr};

  std::vector<uint8_t> index(f->h_.index_bytes);
  if (!(s = pread_all(f->fd_, path, f->h_.index_offset, index.data(), index.size())).ok()) return s.errors();
  if (dts_hash(index.data(), index.size()) != f->h_.index_hash)
    return Error{ErrCode::Format, at_offset(path, f->h_.index_offset), "index checksum mismatch (corrupt index)"};
  if (!(s = f->parse(index)).ok()) return s.errors();
  return f;
}

Status DtsFile::parse(const std::vector<uint8_t>& index) {
  ByteReader r(index.data(), index.size());
  const std::string where = at_offset(path_, h_.index_offset);
  auto bad = [&](const std::string& m) { return Error{ErrCode::Format, where, "index: " + m}; };
  if (meta_.classes.size() != h_.class_count)
    return Error{ErrCode::Format, at_offset(path_, h_.meta_offset), "meta lists " + std::to_string(meta_.classes.size()) +
                                                                        " classes, the header " + std::to_string(h_.class_count)};
  uint32_t next_block = 0;
  for (uint32_t l = 0; l < h_.level_count; ++l) {
    levels_.push_back(dts_read_level(r));
    const DtsLevel& lv = levels_.back();
    if (lv.encoding != DtsEncoding::RawU8 && lv.encoding != DtsEncoding::Jpeg) return bad("level " + std::to_string(l) + ": unknown encoding");
    if (lv.first_block != next_block) return bad("level " + std::to_string(l) + ": blocks not contiguous");
    next_block += lv.block_count;
  }
  if (next_block != h_.block_count) return bad("levels cover " + std::to_string(next_block) + " blocks, the header " + std::to_string(h_.block_count));
  for (uint64_t b = 0; b < h_.block_count; ++b) {
    blocks_.push_back(dts_read_block(r));
    const DtsBlock& bl = blocks_.back();
    const DtsLevel* lv = bl.level < levels_.size() ? &levels_[bl.level] : nullptr;
    if (!lv || b < lv->first_block || b >= uint64_t(lv->first_block) + lv->block_count || bl.used_bytes > h_.block_size)
      return bad("block " + std::to_string(b) + ": level or used size out of range");
  }
  block_samples_.assign(h_.block_count, {});
  slots_.reserve(h_.level_count * h_.sample_count);
  for (uint32_t l = 0; l < h_.level_count; ++l) {
    for (uint64_t i = 0; i < h_.sample_count; ++i) {
      slots_.push_back(dts_read_slot(r));
      const DtsSlot& s = slots_.back();
      const std::string who = "sample " + std::to_string(i) + " level " + std::to_string(l);
      if (s.block < levels_[l].first_block || s.block >= levels_[l].first_block + levels_[l].block_count)
        return bad(who + ": block " + std::to_string(s.block) + " is not of its level");
      if (uint64_t(s.offset) + s.size > blocks_[s.block].used_bytes || s.size == 0)
        return bad(who + ": bytes [" + std::to_string(s.offset) + ", +" + std::to_string(s.size) + ") outside block " + std::to_string(s.block) + "'s data");
      if (s.label < 0 || static_cast<uint32_t>(s.label) >= h_.class_count) return bad(who + ": label " + std::to_string(s.label) + " out of range");
      if (s.height < 1 || s.width < 1 || s.height > kDtsMaxDim || s.width > kDtsMaxDim || s.channels < 1 || s.channels > 4)
        return bad(who + ": absurd dimensions " + std::to_string(s.height) + "x" + std::to_string(s.width) + "x" + std::to_string(s.channels));
      if (s.encoding != levels_[l].encoding) return bad(who + ": encoding differs from its level's");
      if (s.encoding == DtsEncoding::RawU8 && uint64_t(s.height) * s.width * s.channels != s.size)
        return bad(who + ": raw size " + std::to_string(s.size) + " is not height*width*channels");
      if (l > 0 && s.label != slots_[i].label) return bad(who + ": label differs from level 0's");
      block_samples_[s.block].push_back(static_cast<int64_t>(i));
    }
  }
  if (r.overrun || r.pos != index.size()) return bad("size does not match its records");
  // Samples in a block in their stored order: readers walk a block front to back.
  for (uint64_t b = 0; b < h_.block_count; ++b) {
    std::vector<int64_t>& v = block_samples_[b];
    const uint32_t l = blocks_[b].level;
    std::sort(v.begin(), v.end(), [&](int64_t a, int64_t c) { return slot(l, a).offset < slot(l, c).offset; });
    for (size_t k = 1; k < v.size(); ++k)
      if (slot(l, v[k - 1]).offset + slot(l, v[k - 1]).size > slot(l, v[k]).offset)
        return bad("block " + std::to_string(b) + ": samples overlap");
    if (v.size() != blocks_[b].sample_count) return bad("block " + std::to_string(b) + ": sample count differs from its slots");
  }
  return ok_status();
}

Status DtsFile::read_block(uint32_t b, std::vector<uint8_t>* buf) const {
  if (b >= blocks_.size()) return Error{ErrCode::Internal, path_, "block " + std::to_string(b) + " out of range"};
  const uint64_t off = h_.data_offset + uint64_t(b) * h_.block_size;
  buf->resize(h_.block_size);
  Status s = pread_all(fd_, path_, off, buf->data(), buf->size());
  if (!s.ok()) return s;
  if (dts_hash(buf->data(), buf->size()) != blocks_[b].hash)
    return Error{ErrCode::Format, path_ + ":block " + std::to_string(b) + " (offset " + std::to_string(off) + ")",
                 "block checksum mismatch (corrupt data)"};
  return ok_status();
}

Status dts_verify(const DtsFile& f, bool decode, int threads, const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t nb = static_cast<int64_t>(f.blocks().size());
  std::atomic<int64_t> next{0}, done{0};
  std::mutex mu;
  std::vector<Error> errors;
  auto work = [&]() {
    std::vector<uint8_t> buf;
    JpegCodec codec;
    DecodedImage img;
    for (int64_t b; (b = next.fetch_add(1)) < nb; done.fetch_add(1)) {
      Status s = f.read_block(static_cast<uint32_t>(b), &buf);
      std::vector<Error> found = s.ok() ? std::vector<Error>{} : s.errors();
      const uint32_t l = f.blocks()[b].level;
      for (int64_t i : s.ok() && decode ? f.block_samples(static_cast<uint32_t>(b)) : std::vector<int64_t>{}) {
        const DtsSlot& sl = f.slot(l, i);
        if (sl.encoding != DtsEncoding::Jpeg) continue;  // raw: its size was checked against the dims at open
        const std::string where = f.path() + ":block " + std::to_string(b) + " sample " + std::to_string(i) +
                                  " (level " + std::to_string(l) + ")";
        Status d = codec.decode(buf.data() + sl.offset, sl.size, sl.channels == 1 ? 1 : 3, 0, 0, &img, where);
        if (!d.ok()) found.insert(found.end(), d.errors().begin(), d.errors().end());
        else if (img.h != sl.height || img.w != sl.width)
          found.push_back(Error{ErrCode::Format, where, "decoded " + std::to_string(img.h) + "x" + std::to_string(img.w) +
                                                            ", the index says " + std::to_string(sl.height) + "x" + std::to_string(sl.width)});
      }
      if (!found.empty()) {
        std::lock_guard<std::mutex> g(mu);
        errors.insert(errors.end(), found.begin(), found.end());
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, threads); ++t) pool.emplace_back(work);
  std::thread reporter;
  std::atomic<bool> finished{false};
  if (progress)
    reporter = std::thread([&] {
      while (!finished.load()) {
        progress(done.load(), nb);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
    });
  work();
  for (auto& t : pool) t.join();
  finished = true;
  if (reporter.joinable()) reporter.join();
  if (progress) progress(nb, nb);
  if (errors.empty()) return ok_status();
  std::sort(errors.begin(), errors.end(), [](const Error& a, const Error& b) { return a.where < b.where; });
  return errors;
}

std::string dts_info(const DtsFile& f) {
  const DtsHeader& h = f.header();
  std::string s = "file: " + f.path() + "\nversion: " + std::to_string(h.version) +
                  "\nsamples: " + std::to_string(h.sample_count) + "\nclasses: " + std::to_string(h.class_count) +
                  "\nblock size: " + std::to_string(h.block_size) + " bytes\nblocks: " + std::to_string(h.block_count) + "\n";
  for (size_t l = 0; l < f.levels().size(); ++l) {
    const DtsLevel& lv = f.levels()[l];
    uint64_t used = 0;
    for (uint32_t b = lv.first_block; b < lv.first_block + lv.block_count; ++b) used += f.blocks()[b].used_bytes;
    const double fill = lv.block_count ? 100.0 * used / (double(lv.block_count) * h.block_size) : 0;
    char line[256];
    std::snprintf(line, sizeof line, "level %zu: %s, %s, %u blocks, %.1f MiB of samples (%.1f%% fill), mean %.1f KiB/sample\n", l,
                  lv.short_side ? ("short side " + std::to_string(lv.short_side) + " q" + std::to_string(lv.quality)).c_str() : "full size",
                  lv.encoding == DtsEncoding::Jpeg ? "jpeg" : "raw u8", lv.block_count, used / 1048576.0, fill,
                  h.sample_count ? used / 1024.0 / h.sample_count : 0.0);
    s += line;
  }
  for (const auto& [k, v] : f.meta().params) s += "param " + k + ": " + v + "\n";
  const size_t show = std::min<size_t>(f.meta().classes.size(), 10);
  s += "class names:";
  for (size_t i = 0; i < show; ++i) s += " " + f.meta().classes[i];
  if (show < f.meta().classes.size()) s += " ... (" + std::to_string(f.meta().classes.size()) + ")";
  return s + "\n";
}

}  // namespace trctl
