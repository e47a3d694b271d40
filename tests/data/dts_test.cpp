// DTS format: packing (first-fit-decreasing, determinism, atomic writes), reading (checksums, every kind of
// corruption named by file and block or offset), verification and info.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "data_test_util.h"
#include "dataio/dts_reader.h"
#include "dataio/dts_writer.h"
#include "dataio/pack_sources.h"

using namespace trctl;
using trctl::test::TempDir;

namespace {

// n raw (h, w, c) samples with test_pixel values and labels i % classes.
std::shared_ptr<const ImageDataset> raw_dataset(int64_t n, int h, int w, int c, int classes) {
  auto ds = std::make_shared<ImageDataset>();
  ds->n = n;
  ds->h = h;
  ds->w = w;
  ds->c = c;
  ds->num_classes = classes;
  ds->source = "raw-test";
  for (int64_t i = 0; i < n; ++i) {
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w * c; ++x) ds->pixels.push_back(test::test_pixel(i, y, x));
    ds->labels.push_back(static_cast<int32_t>(i % classes));
  }
  return ds;
}

PackSource raw_source(int64_t n, int h = 20, int w = 20, int c = 3, int classes = 4) {
  std::vector<std::string> names;
  for (int k = 0; k < classes; ++k) names.push_back("class" + std::to_string(k));
  return pack_source_raw(raw_dataset(n, h, w, c, classes), "idx", names);
}

PackOptions small_blocks(int threads = 2) {
  PackOptions o;
  o.block_size = 8192;  // 6 samples of 1200 bytes per block
  o.threads = threads;
  return o;
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void flip_bit(const std::string& p, uint64_t offset) {
  std::vector<uint8_t> b = slurp(p);
  b.at(offset) ^= 0x10;
  test::write_file(p, b);
}

}  // namespace

TEST_CASE("first-fit-decreasing puts each item in the first block with room, largest first", "[dts]") {
  uint32_t used = 0;
  // block 10: sorted 7,5,4,3,1 -> 7 in b0 (3 left), 5 in b1 (5 left), 4 in b1 (1 left), 3 in b0 (0 left), 1 in b1.
  auto at = dts_pack_ffd({4, 7, 1, 5, 3}, 10, &used);
  CHECK(used == 2);
  CHECK(at[1] == std::make_pair(0u, 0u));
  CHECK(at[3] == std::make_pair(1u, 0u));
  CHECK(at[0] == std::make_pair(1u, 5u));
  CHECK(at[4] == std::make_pair(0u, 7u));
  CHECK(at[2] == std::make_pair(1u, 9u));
}

TEST_CASE("a packed raw dataset reads back sample for sample, label for label", "[dts]") {
  TempDir d;
  PackSource src = raw_source(50);
  Result<PackReport> r = dts_pack(src, small_blocks(), d.file("a.dts"));
  REQUIRE(r.ok());
  CHECK(r->samples == 50);
  CHECK(r->blocks == 9);  // ceil(50 / 6)
  Result<std::shared_ptr<DtsFile>> f = DtsFile::open(d.file("a.dts"));
  REQUIRE(f.ok());
  const DtsFile& dts = *f.value();
  CHECK(dts.header().sample_count == 50);
  CHECK(dts.meta().classes == std::vector<std::string>{"class0", "class1", "class2", "class3"});
  std::vector<uint8_t> block;
  int64_t seen = 0;
  for (uint32_t b = 0; b < dts.blocks().size(); ++b) {
    REQUIRE(dts.read_block(b, &block).ok());
    for (int64_t i : dts.block_samples(b)) {
      const DtsSlot& s = dts.slot(0, i);
      PackSample want;
      REQUIRE(src.read(i, &want).ok());
      REQUIRE(s.size == want.bytes.size());
      CHECK(std::memcmp(block.data() + s.offset, want.bytes.data(), s.size) == 0);
      CHECK(s.label == i % 4);
      CHECK((s.height == 20 && s.width == 20 && s.channels == 3));
      ++seen;
    }
  }
  CHECK(seen == 50);
  CHECK_THAT(dts_info(dts), Catch::Contains("samples: 50") && Catch::Contains("level 0: full size, raw u8"));
}

TEST_CASE("packing is byte-identical for one source whatever the thread count, and leaves no temp file", "[dts]") {
  TempDir d;
  REQUIRE(dts_pack(raw_source(40), small_blocks(1), d.file("one.dts")).ok());
  REQUIRE(dts_pack(raw_source(40), small_blocks(3), d.file("three.dts")).ok());
  CHECK(slurp(d.file("one.dts")) == slurp(d.file("three.dts")));
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d.path())) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 2);
}

TEST_CASE("a failed pack leaves an existing output untouched and no temp file", "[dts]") {
  TempDir d;
  REQUIRE(dts_pack(raw_source(10), small_blocks(), d.file("out.dts")).ok());
  const auto before = slurp(d.file("out.dts"));
  PackSource bad = raw_source(10);
  auto inner = bad.read;
  bad.read = [inner](int64_t i, PackSample* s) -> Status {
    if (i == 7) return Error{ErrCode::Io, "sample 7", "unreadable"};
    return inner(i, s);
  };
  Result<PackReport> r = dts_pack(bad, small_blocks(), d.file("out.dts"));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error_text(), Catch::Contains("sample 7"));
  CHECK(slurp(d.file("out.dts")) == before);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d.path())) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 1);
  PackOptions skip = small_blocks();
  skip.skip_bad = true;
  Result<PackReport> s = dts_pack(bad, skip, d.file("skip.dts"));
  REQUIRE(s.ok());
  CHECK(s->samples == 9);
  REQUIRE(s->skipped.size() == 1);
  CHECK_THAT(DtsFile::open(d.file("skip.dts")).value()->meta().params[4].second, Catch::Equals("1"));
}

TEST_CASE("a sample larger than the block size is refused with its name", "[dts]") {
  TempDir d;
  PackOptions o = small_blocks();
  Result<PackReport> r = dts_pack(raw_source(3, 64, 64, 3), o, d.file("big.dts"));  // 12288 bytes > 8192
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error_text(), Catch::Contains("raw-test:sample 0") && Catch::Contains("larger than the block size"));
}

TEST_CASE("open refuses wrong magic, another version, a truncated file and trailing bytes", "[dts]") {
  TempDir d;
  REQUIRE(dts_pack(raw_source(12), small_blocks(), d.file("a.dts")).ok());
  const std::vector<uint8_t> good = slurp(d.file("a.dts"));

  std::vector<uint8_t> b = good;
  b[0] = 'X';
  test::write_file(d.file("magic.dts"), b);
  CHECK_THAT(DtsFile::open(d.file("magic.dts")).error_text(), Catch::Contains("magic.dts:offset 0: not a DTS file"));

  DtsHeader h;  // a well-formed header of version 2
  h.version = 2;
  b = good;
  const auto hb = dts_header_bytes(h);
  std::copy(hb.begin(), hb.end(), b.begin());
  test::write_file(d.file("v2.dts"), b);
  CHECK_THAT(DtsFile::open(d.file("v2.dts")).error_text(), Catch::Contains("version 2; this trctl reads version 1"));

  b.assign(good.begin(), good.end() - 100);
  test::write_file(d.file("short.dts"), b);
  CHECK_THAT(DtsFile::open(d.file("short.dts")).error_text(), Catch::Contains("truncated"));
  b.assign(good.begin(), good.begin() + 100);
  test::write_file(d.file("tiny.dts"), b);
  CHECK_THAT(DtsFile::open(d.file("tiny.dts")).error_text(), Catch::Contains("truncated"));

  b = good;
  b.push_back(0);
  test::write_file(d.file("long.dts"), b);
  CHECK_THAT(DtsFile::open(d.file("long.dts")).error_text(), Catch::Contains("unexpected bytes after the index"));
  CHECK_THAT(DtsFile::open(d.file("missing.dts")).error_text(), Catch::Contains("cannot open"));
}

TEST_CASE("a flipped bit in the header, meta, index or a block is caught and located", "[dts]") {
  TempDir d;
  const std::string p = d.file("a.dts");
  REQUIRE(dts_pack(raw_source(12), small_blocks(), p).ok());
  const std::vector<uint8_t> good = slurp(p);
  const DtsHeader h = DtsFile::open(p).value()->header();

  flip_bit(p, 20);
  CHECK_THAT(DtsFile::open(p).error_text(), Catch::Contains("header checksum mismatch"));
  test::write_file(p, good);
  flip_bit(p, h.meta_offset + 3);
  CHECK_THAT(DtsFile::open(p).error_text(), Catch::Contains("meta checksum mismatch"));
  test::write_file(p, good);
  flip_bit(p, h.index_offset + h.index_bytes - 5);
  CHECK_THAT(DtsFile::open(p).error_text(),
             Catch::Contains(":offset " + std::to_string(h.index_offset)) && Catch::Contains("index checksum mismatch"));

  test::write_file(p, good);
  flip_bit(p, h.data_offset + h.block_size + 77);  // inside block 1
  Result<std::shared_ptr<DtsFile>> f = DtsFile::open(p);
  REQUIRE(f.ok());  // blocks are checked when read
  std::vector<uint8_t> buf;
  CHECK(f.value()->read_block(0, &buf).ok());
  Status st = f.value()->read_block(1, &buf);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error_text(), Catch::Contains("a.dts:block 1 (offset " + std::to_string(h.data_offset + h.block_size) +
                                              ")") && Catch::Contains("checksum mismatch"));
  Status v = dts_verify(*f.value(), true, 2, {});
  REQUIRE_FALSE(v.ok());
  CHECK(v.errors().size() == 1);
  CHECK_THAT(v.error_text(), Catch::Contains("block 1"));
}

TEST_CASE("an index whose checksum was forged still cannot point outside its blocks", "[dts]") {
  TempDir d;
  const std::string p = d.file("a.dts");
  REQUIRE(dts_pack(raw_source(12), small_blocks(), p).ok());
  std::vector<uint8_t> b = slurp(p);
  DtsHeader h = DtsFile::open(p).value()->header();
  // Slot 0's offset (first slot record, after 1 level and the block records) set far past its block's data.
  const uint64_t slot0 = h.index_offset + kDtsLevelRecord + h.block_count * kDtsBlockRecord;
  b[slot0 + 4 + 2] = 0x7f;
  h.index_hash = dts_hash(b.data() + h.index_offset, h.index_bytes);
  const auto hb = dts_header_bytes(h);
  std::copy(hb.begin(), hb.end(), b.begin());
  test::write_file(p, b);
  CHECK_THAT(DtsFile::open(p).error_text(), Catch::Contains("sample 0 level 0") && Catch::Contains("outside block"));
}

TEST_CASE("the meta text round-trips and rejects malformed lines", "[dts]") {
  DtsMeta m;
  m.params = {{"source", "a\nb"}, {"k", "v"}};
  m.classes = {"cat", "dog"};
  DtsMeta back;
  CHECK(dts_meta_parse(dts_meta_text(m), &back).empty());
  CHECK(back.params[0].second == "a b");
  CHECK(back.classes == m.classes);
  CHECK_THAT(dts_meta_parse("novalue\n", &back), Catch::Contains("not 'key: value'"));
  CHECK_THAT(dts_meta_parse("class 1: x\n", &back), Catch::Contains("expected 'class 0'"));
  CHECK_THAT(dts_meta_parse("k: v", &back), Catch::Contains("not terminated"));
}
