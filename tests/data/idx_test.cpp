// Tests of the IDX reader (idx_load, idx_gunzip) and dataset_load: generated raw and gzip files, the real
// Fashion-MNIST files, and malformed inputs that must come back as errors naming the file.
#include <catch2/catch.hpp>
#include <sys/resource.h>

#include <array>
#include <filesystem>

#include "data_test_util.h"
#include "dataio/dataset.h"
#include "dataio/idx.h"

using namespace trctl;
using trctl::test::TempDir;

namespace {

const std::string kFashionRoot = "/usr/share/datasets/fashion-mnist";

// Writes an images/labels pair (optionally gzip) and loads it.
Result<ImageDataset> load_pair(const TempDir& dir, const std::vector<uint8_t>& images,
                               const std::vector<uint8_t>& labels, bool gz = false) {
  std::string ip = dir.file(gz ? "img.gz" : "img"), lp = dir.file(gz ? "lab.gz" : "lab");
  test::write_file(ip, gz ? test::gzip_bytes(images) : images);
  test::write_file(lp, gz ? test::gzip_bytes(labels) : labels);
  return idx_load(ip, lp);
}

std::vector<uint8_t> labels_0_to(int n) {
  std::vector<uint8_t> l;
  for (int i = 0; i < n; ++i) l.push_back(static_cast<uint8_t>(i % 4));
  return l;
}

// The single error of r, checked to be of `code` and located in `where_prefix`.
Error single_error(const Result<ImageDataset>& r, ErrCode code, const std::string& where_prefix) {
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  Error e = r.errors()[0];
  INFO(e.str());
  CHECK(e.code == code);
  CHECK(e.where.rfind(where_prefix, 0) == 0);
  return e;
}

void require_fashion_files() {
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                        "t10k-labels-idx1-ubyte.gz"}) {
    if (!std::filesystem::exists(kFashionRoot + "/" + f)) {
      FAIL("Fashion-MNIST file " << kFashionRoot << "/" << f
                                 << " is missing; install the dataset there (CI does) to run this test");
    }
  }
}

}  // namespace

TEST_CASE("idx_load reads a raw IDX pair with its dims, pixels, labels and num_classes") {
  TempDir dir;
  auto r = load_pair(dir, test::idx_images_bytes(5, 3, 4), test::idx_labels_bytes({0, 3, 1, 3, 2}));
  REQUIRE(r.ok());
  CHECK(r->n == 5);
  CHECK(r->h == 3);
  CHECK(r->w == 4);
  CHECK(r->c == 1);
  CHECK(r->num_classes == 4);
  CHECK(r->labels == std::vector<int32_t>{0, 3, 1, 3, 2});
  REQUIRE(r->pixels.size() == 5 * 3 * 4);
  CHECK(r->pixels[(2 * 3 + 1) * 4 + 3] == test::test_pixel(2, 1, 3));
  CHECK(r->source.find(dir.file("img")) != std::string::npos);
}

TEST_CASE("idx_load inflates gzip files detected by their magic, whatever their names") {
  TempDir dir;
  auto images = test::idx_images_bytes(7, 5, 6);
  auto labels = test::idx_labels_bytes(labels_0_to(7));
  test::write_file(dir.file("images.idx"), test::gzip_bytes(images));  // gzip without ".gz"
  test::write_file(dir.file("labels.gz"), labels);                     // raw with ".gz"
  auto r = idx_load(dir.file("images.idx"), dir.file("labels.gz"));
  REQUIRE(r.ok());
  CHECK(r->n == 7);
  CHECK(std::equal(r->pixels.begin(), r->pixels.end(), images.begin() + 16));
  auto g = load_pair(dir, images, labels, true);
  REQUIRE(g.ok());
  CHECK(g->pixels == r->pixels);
  CHECK(g->labels == r->labels);
}

TEST_CASE("idx_gunzip inflates a multi-member gzip stream as their concatenation") {
  std::vector<uint8_t> a(1000, 7), b(3000, 9);
  auto gz = test::gzip_bytes(a), gzb = test::gzip_bytes(b);
  gz.insert(gz.end(), gzb.begin(), gzb.end());
  auto r = idx_gunzip(gz, "two.gz");
  REQUIRE(r.ok());
  std::vector<uint8_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  CHECK(r.value() == both);
}

TEST_CASE("idx_load reads Fashion-MNIST train: 60000 images of 28x28, 10 balanced classes") {
  require_fashion_files();
  auto r = idx_load(kFashionRoot + "/train-images-idx3-ubyte.gz", kFashionRoot + "/train-labels-idx1-ubyte.gz");
  REQUIRE(r.ok());
  CHECK(r->n == 60000);
  CHECK(r->h == 28);
  CHECK(r->w == 28);
  CHECK(r->num_classes == 10);
  CHECK(r->pixels.size() == size_t(60000) * 28 * 28);
  std::array<int, 10> per_class{};
  for (int32_t l : r->labels) per_class[size_t(l)]++;
  for (int count : per_class) CHECK(count == 6000);
  CHECK(r->labels[0] == 9);  // the first training image is an ankle boot
}

TEST_CASE("idx_load reads Fashion-MNIST t10k: 10000 images of 28x28, 10 balanced classes") {
  require_fashion_files();
  auto r = idx_load(kFashionRoot + "/t10k-images-idx3-ubyte.gz", kFashionRoot + "/t10k-labels-idx1-ubyte.gz");
  REQUIRE(r.ok());
  CHECK(r->n == 10000);
  CHECK(r->h == 28);
  CHECK(r->w == 28);
  CHECK(r->num_classes == 10);
  std::array<int, 10> per_class{};
  for (int32_t l : r->labels) per_class[size_t(l)]++;
  for (int count : per_class) CHECK(count == 1000);
}

TEST_CASE("dataset_load joins root and file names, with or without .gz, and subsets only the training split") {
  TempDir dir;
  test::write_file(dir.file("tr-img.gz"), test::gzip_bytes(test::idx_images_bytes(10, 4, 4)));
  test::write_file(dir.file("tr-lab"), test::idx_labels_bytes(labels_0_to(10)));
  test::write_file(dir.file("va-img"), test::idx_images_bytes(6, 4, 4));
  test::write_file(dir.file("va-lab"), test::idx_labels_bytes(labels_0_to(6)));
  DataSpec d;
  d.root = dir.path();
  d.train_images = "tr-img";      // the file on disk is tr-img.gz
  d.train_labels = "tr-lab.gz";   // the file on disk is tr-lab
  d.val_images = "va-img";
  d.val_labels = "va-lab";
  d.train_subset = 3;
  auto tr = dataset_load(d, true);
  REQUIRE(tr.ok());
  CHECK(tr->n == 3);
  CHECK(tr->pixels.size() == 3 * 16);
  CHECK(tr->labels == std::vector<int32_t>{0, 1, 2});
  CHECK(tr->num_classes == 4);  // of the whole file, not of the subset
  auto va = dataset_load(d, false);
  REQUIRE(va.ok());
  CHECK(va->n == 6);
  d.train_subset = 0;
  CHECK(dataset_load(d, true)->n == 10);
}

TEST_CASE("dataset_load rejects a train_subset larger than the training file") {
  TempDir dir;
  test::write_file(dir.file("i"), test::idx_images_bytes(10, 4, 4));
  test::write_file(dir.file("l"), test::idx_labels_bytes(labels_0_to(10)));
  DataSpec d;
  d.root = dir.path();
  d.train_images = "i";
  d.train_labels = "l";
  d.train_subset = 11;
  auto r = dataset_load(d, true);
  Error e = single_error(r, ErrCode::OutOfRange, dir.file("i"));
  CHECK(e.message.find("train_subset 11") != std::string::npos);
}

TEST_CASE("idx_load reports a wrong magic number at offset 0 of the file") {
  TempDir dir;
  auto labels = test::idx_labels_bytes(labels_0_to(3));
  auto r = load_pair(dir, labels, labels);  // a labels file where images are expected
  Error e = single_error(r, ErrCode::Format, dir.file("img") + ":offset 0");
  CHECK(e.message.find("0x00000801") != std::string::npos);
  CHECK(e.message.find("0x00000803") != std::string::npos);
}

TEST_CASE("idx_load reports truncated pixel data with expected and actual sizes") {
  TempDir dir;
  auto images = test::idx_images_bytes(4, 3, 3);
  images.resize(images.size() - 5);
  auto r = load_pair(dir, images, test::idx_labels_bytes(labels_0_to(4)));
  Error e = single_error(r, ErrCode::Format, dir.file("img") + ":offset 47");
  CHECK(e.message.find("truncated") != std::string::npos);
  CHECK(e.message.find("expected 52 bytes") != std::string::npos);
  CHECK(e.message.find("file has 47") != std::string::npos);
}

TEST_CASE("idx_load reports a truncated header") {
  TempDir dir;
  auto images = test::idx_images_bytes(4, 3, 3);
  images.resize(10);
  auto r = load_pair(dir, images, test::idx_labels_bytes(labels_0_to(4)));
  Error e = single_error(r, ErrCode::Format, dir.file("img") + ":offset 10");
  CHECK(e.message.find("header") != std::string::npos);
}

TEST_CASE("idx_load reports an empty file") {
  TempDir dir;
  auto r = load_pair(dir, {}, test::idx_labels_bytes(labels_0_to(4)));
  single_error(r, ErrCode::Format, dir.file("img") + ":offset 0");
}

TEST_CASE("idx_load reports trailing bytes after the data at the offset where they start") {
  TempDir dir;
  auto labels = test::idx_labels_bytes(labels_0_to(4));
  labels.push_back(0);
  auto r = load_pair(dir, test::idx_images_bytes(4, 3, 3), labels);
  Error e = single_error(r, ErrCode::Format, dir.file("lab") + ":offset 12");
  CHECK(e.message.find("trailing") != std::string::npos);
}

TEST_CASE("idx_load reports image and label counts that differ, naming both files") {
  TempDir dir;
  auto r = load_pair(dir, test::idx_images_bytes(4, 3, 3), test::idx_labels_bytes(labels_0_to(5)));
  Error e = single_error(r, ErrCode::Format, dir.file("lab"));
  CHECK(e.message.find("5 labels") != std::string::npos);
  CHECK(e.message.find(dir.file("img") + " has 4 images") != std::string::npos);
}

TEST_CASE("idx_load rejects zero dims at the offset of the dim") {
  TempDir dir;
  auto labels = test::idx_labels_bytes(labels_0_to(4));
  single_error(load_pair(dir, test::idx_images_bytes(4, 0, 3), labels), ErrCode::Format,
               dir.file("img") + ":offset 8");
  single_error(load_pair(dir, test::idx_images_bytes(0, 3, 3), test::idx_labels_bytes({})), ErrCode::Format,
               dir.file("img") + ":offset 4");
}

TEST_CASE("idx_load rejects absurd dims before reading data") {
  TempDir dir;
  auto labels = test::idx_labels_bytes(labels_0_to(4));
  auto wide = test::idx_images_bytes(1, 1, 1);
  wide[12] = 0x7f;  // W = 0x7f000001
  Error e = single_error(load_pair(dir, wide, labels), ErrCode::Format, dir.file("img") + ":offset 12");
  CHECK(e.message.find("out of range") != std::string::npos);
  auto many = test::idx_images_bytes(1, 1, 1);
  many[4] = 0x10;  // N > 1e8
  single_error(load_pair(dir, many, labels), ErrCode::Format, dir.file("img") + ":offset 4");
}

TEST_CASE("idx_load reports a corrupt gzip stream with its compressed offset") {
  TempDir dir;
  auto gz = test::gzip_bytes(test::idx_images_bytes(20, 8, 8));
  for (size_t i = 12; i < 40 && i < gz.size(); ++i) gz[i] ^= 0x5a;
  test::write_file(dir.file("img.gz"), gz);
  test::write_file(dir.file("lab"), test::idx_labels_bytes(labels_0_to(20)));
  auto r = idx_load(dir.file("img.gz"), dir.file("lab"));
  Error e = single_error(r, ErrCode::Format, dir.file("img.gz") + ":offset ");
  CHECK(e.message.find("gzip") != std::string::npos);
}

TEST_CASE("idx_load reports a truncated gzip stream") {
  TempDir dir;
  auto gz = test::gzip_bytes(test::idx_images_bytes(20, 8, 8));
  gz.resize(gz.size() / 2);
  test::write_file(dir.file("img.gz"), gz);
  test::write_file(dir.file("lab"), test::idx_labels_bytes(labels_0_to(20)));
  Error e = single_error(idx_load(dir.file("img.gz"), dir.file("lab")), ErrCode::Format, dir.file("img.gz"));
  CHECK(e.message.find("truncated gzip") != std::string::npos);
}

TEST_CASE("idx_gunzip reports garbage after the gzip stream") {
  auto gz = test::gzip_bytes(std::vector<uint8_t>(100, 1));
  size_t end = gz.size();
  gz.push_back(0x42);
  auto r = idx_gunzip(gz, "x.gz");
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors()[0].code == ErrCode::Format);
  CHECK(r.errors()[0].where == "x.gz:offset " + std::to_string(end));
}

TEST_CASE("idx_gunzip refuses output beyond its cap, as a guard against decompression bombs") {
  auto gz = test::gzip_bytes(std::vector<uint8_t>(size_t(1) << 20, 0));  // 1 MiB of zeros, ~1 KiB compressed
  auto capped = idx_gunzip(gz, "bomb.gz", 64 * 1024);
  REQUIRE_FALSE(capped.ok());
  CHECK(capped.errors()[0].code == ErrCode::Format);
  CHECK(capped.errors()[0].where.rfind("bomb.gz:offset ", 0) == 0);
  CHECK(capped.errors()[0].message.find("decompression bomb") != std::string::npos);
  auto exact = idx_gunzip(gz, "bomb.gz", size_t(1) << 20);  // exactly at the cap is fine
  REQUIRE(exact.ok());
  CHECK(exact->size() == size_t(1) << 20);
  CHECK(kIdxMaxInflatedBytes == size_t(1) << 30);
}

TEST_CASE("idx_gunzip does not allocate what a forged gzip trailer claims") {
  // Found by tests/fuzz/fuzz_idx: a few bytes of gzip whose ISIZE says ~4 GiB made the first allocation 1 GiB.
  auto gz = test::gzip_bytes(std::vector<uint8_t>(100, 7));
  for (size_t i = gz.size() - 4; i < gz.size(); ++i) gz[i] = 0xff;  // ISIZE = 2^32 - 1
  struct rusage before {}, after {};
  getrusage(RUSAGE_SELF, &before);
  auto r = idx_gunzip(gz, "forged.gz");
  getrusage(RUSAGE_SELF, &after);
  REQUIRE_FALSE(r.ok());  // zlib's length check fails: ISIZE is wrong
  CHECK(r.errors()[0].code == ErrCode::Format);
  CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024);  // KiB: far below the 1 GiB the hint asked for
}

TEST_CASE("idx_load reports a missing file as an I/O error naming it") {
  TempDir dir;
  test::write_file(dir.file("lab"), test::idx_labels_bytes(labels_0_to(4)));
  auto r = idx_load(dir.file("nope"), dir.file("lab"));
  Error e = single_error(r, ErrCode::Io, dir.file("nope"));
  CHECK(e.message.find("cannot open") != std::string::npos);
}

TEST_CASE("idx_load reports a directory as an I/O error naming it") {
  TempDir dir;
  test::write_file(dir.file("lab"), test::idx_labels_bytes(labels_0_to(4)));
  single_error(idx_load(dir.path(), dir.file("lab")), ErrCode::Io, dir.path());
}

TEST_CASE("idx_load says that offsets in a gzip file count decompressed bytes") {
  TempDir dir;
  auto images = test::idx_images_bytes(4, 3, 3);
  images.resize(images.size() - 1);
  test::write_file(dir.file("img.gz"), test::gzip_bytes(images));
  test::write_file(dir.file("lab"), test::idx_labels_bytes(labels_0_to(4)));
  Error e = single_error(idx_load(dir.file("img.gz"), dir.file("lab")), ErrCode::Format,
                         dir.file("img.gz") + ":offset 51");
  CHECK(e.message.find("decompressed") != std::string::npos);
}
