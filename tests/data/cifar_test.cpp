// Tests of the CIFAR-10/100 binary reader (cifar_load, cifar_split_files, cifar_class_names) on small synthetic
// batch files: the CHW -> HWC transpose, labels, and every error path.
#include <catch2/catch.hpp>

#include <filesystem>

#include "data_test_util.h"
#include "dataio/cifar.h"

using namespace trctl;
using trctl::test::TempDir;

namespace {

// A distinct value for every (record, channel, row, column), so that a wrong transpose shows.
uint8_t cifar_pixel(int i, int c, int y, int x) { return static_cast<uint8_t>(i * 101 + c * 37 + y * 5 + x * 3); }

// Records as the CIFAR files store them: label byte(s), then (3, 32, 32) planar pixels. labels holds the CIFAR-10
// label or the CIFAR-100 fine label; CIFAR-100 records get coarse label fine / 5. first numbers the records
// for cifar_pixel.
std::vector<uint8_t> cifar_bytes(CifarKind kind, const std::vector<uint8_t>& labels, int first = 0) {
  std::vector<uint8_t> b;
  for (size_t k = 0; k < labels.size(); ++k) {
    if (kind == CifarKind::Cifar100) b.push_back(static_cast<uint8_t>(labels[k] / 5));
    b.push_back(labels[k]);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) b.push_back(cifar_pixel(first + int(k), c, y, x));
  }
  return b;
}

std::string write(const TempDir& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  std::string p = dir.file(name);
  test::write_file(p, bytes);
  return p;
}

// The single error of r, checked for its code and exact location.
template <class T>
Error single_error(const Result<T>& r, ErrCode code, const std::string& where) {
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  Error e = r.errors()[0];
  INFO(e.str());
  CHECK(e.code == code);
  CHECK(e.where == where);
  return e;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("cifar_load reads CIFAR-10 batches in order, transposing CHW planes to HWC", "[cifar]") {
  TempDir dir;
  std::string a = write(dir, "a.bin", cifar_bytes(CifarKind::Cifar10, {3, 0, 9}));
  std::string b = write(dir, "b.bin", cifar_bytes(CifarKind::Cifar10, {7, 1}, 3));
  auto r = cifar_load({a, b}, CifarKind::Cifar10);
  REQUIRE(r.ok());
  const ImageDataset& ds = r.value();
  CHECK(ds.n == 5);
  CHECK(ds.h == 32);
  CHECK(ds.w == 32);
  CHECK(ds.c == 3);
  CHECK(ds.num_classes == 10);
  CHECK(ds.labels == std::vector<int32_t>{3, 0, 9, 7, 1});
  REQUIRE(ds.pixels.size() == 5u * 32 * 32 * 3);
  int wrong = 0;
  for (int i = 0; i < 5; ++i)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x)
        for (int c = 0; c < 3; ++c) wrong += ds.pixels[((size_t(i) * 32 + y) * 32 + x) * 3 + c] != cifar_pixel(i, c, y, x);
  CHECK(wrong == 0);
  CHECK(ds.source == a + " + " + b);
}

TEST_CASE("cifar_load reads CIFAR-100 records with the fine label and 100 classes", "[cifar]") {
  TempDir dir;
  std::string p = write(dir, "train.bin", cifar_bytes(CifarKind::Cifar100, {99, 0, 42}));
  auto r = cifar_load({p}, CifarKind::Cifar100);
  REQUIRE(r.ok());
  CHECK(r->n == 3);
  CHECK(r->num_classes == 100);
  CHECK(r->labels == std::vector<int32_t>{99, 0, 42});
  CHECK(r->pixels[((size_t(2) * 32 + 31) * 32 + 5) * 3 + 1] == cifar_pixel(2, 1, 31, 5));
}

TEST_CASE("cifar_load reports a truncated last record at the offset where it starts", "[cifar]") {
  TempDir dir;
  std::vector<uint8_t> b = cifar_bytes(CifarKind::Cifar10, {1, 2, 3});
  b.resize(2 * 3073 + 100);
  std::string p = write(dir, "t.bin", b);
  Error e = single_error(cifar_load({p}, CifarKind::Cifar10), ErrCode::Format, p + ":offset 6146");
  CHECK(contains(e.message, "not a multiple of the CIFAR-10 record of 3073 bytes"));
  CHECK(contains(e.message, "truncated one of 100 bytes"));
}

TEST_CASE("cifar_load rejects a CIFAR-100 file read as CIFAR-10 by its length", "[cifar]") {
  TempDir dir;
  std::string p = write(dir, "train.bin", cifar_bytes(CifarKind::Cifar100, {5, 6}));  // 6148 = 2 * 3073 + 2
  single_error(cifar_load({p}, CifarKind::Cifar10), ErrCode::Format, p + ":offset 6146");
}

TEST_CASE("cifar_load reports a CIFAR-10 label >= 10 at its byte offset", "[cifar]") {
  TempDir dir;
  std::string p = write(dir, "l.bin", cifar_bytes(CifarKind::Cifar10, {0, 10, 1}));
  Error e = single_error(cifar_load({p}, CifarKind::Cifar10), ErrCode::Format, p + ":offset 3073");
  CHECK(contains(e.message, "record 1: label 10 out of range [0, 10)"));
}

TEST_CASE("cifar_load reports a CIFAR-100 fine label >= 100 or coarse label >= 20 at its byte offset", "[cifar]") {
  TempDir dir;
  std::vector<uint8_t> fine = cifar_bytes(CifarKind::Cifar100, {1, 2});
  fine[3074 + 1] = 100;
  std::string pf = write(dir, "fine.bin", fine);
  Error e = single_error(cifar_load({pf}, CifarKind::Cifar100), ErrCode::Format, pf + ":offset 3075");
  CHECK(contains(e.message, "label 100 out of range [0, 100)"));

  std::vector<uint8_t> coarse = cifar_bytes(CifarKind::Cifar100, {1, 2});
  coarse[3074] = 20;
  std::string pc = write(dir, "coarse.bin", coarse);
  e = single_error(cifar_load({pc}, CifarKind::Cifar100), ErrCode::Format, pc + ":offset 3074");
  CHECK(contains(e.message, "coarse label 20 out of range [0, 20)"));
}

TEST_CASE("cifar_load reports an empty file as a format error at offset 0", "[cifar]") {
  TempDir dir;
  std::string p = write(dir, "empty.bin", {});
  Error e = single_error(cifar_load({p}, CifarKind::Cifar10), ErrCode::Format, p + ":offset 0");
  CHECK(contains(e.message, "empty file"));
}

TEST_CASE("cifar_load reports a missing file as an I/O error naming it", "[cifar]") {
  TempDir dir;
  single_error(cifar_load({dir.file("nope.bin")}, CifarKind::Cifar10), ErrCode::Io, dir.file("nope.bin"));
}

TEST_CASE("cifar_load reports one error for each bad file, all at once", "[cifar]") {
  TempDir dir;
  std::string good = write(dir, "good.bin", cifar_bytes(CifarKind::Cifar10, {1}));
  std::string empty = write(dir, "empty.bin", {});
  auto r = cifar_load({good, dir.file("missing.bin"), empty}, CifarKind::Cifar10);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 2);
  CHECK(r.errors()[0].code == ErrCode::Io);
  CHECK(r.errors()[0].where == dir.file("missing.bin"));
  CHECK(r.errors()[1].code == ErrCode::Format);
  CHECK(r.errors()[1].where == empty + ":offset 0");
}

TEST_CASE("cifar_load with no files is an invalid request", "[cifar]") {
  auto r = cifar_load({}, CifarKind::Cifar100);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors()[0].code == ErrCode::Invalid);
}

TEST_CASE("cifar_split_files finds the CIFAR-10 train and test batches directly under root", "[cifar]") {
  TempDir dir;
  for (int i = 1; i <= 5; ++i) write(dir, "data_batch_" + std::to_string(i) + ".bin", {0});
  write(dir, "test_batch.bin", {0});
  auto train = cifar_split_files(dir.path(), CifarKind::Cifar10, true);
  REQUIRE(train.ok());
  REQUIRE(train->size() == 5);
  CHECK(train.value()[0] == dir.file("data_batch_1.bin"));
  CHECK(train.value()[4] == dir.file("data_batch_5.bin"));
  auto test = cifar_split_files(dir.path(), CifarKind::Cifar10, false);
  REQUIRE(test.ok());
  CHECK(test.value() == std::vector<std::string>{dir.file("test_batch.bin")});
}

TEST_CASE("cifar_split_files finds the files inside the archive's standard subfolder", "[cifar]") {
  TempDir dir;
  std::filesystem::create_directory(dir.file("cifar-100-binary"));
  write(dir, "cifar-100-binary/train.bin", {0});
  write(dir, "cifar-100-binary/test.bin", {0});
  auto train = cifar_split_files(dir.path(), CifarKind::Cifar100, true);
  REQUIRE(train.ok());
  CHECK(train.value() == std::vector<std::string>{dir.file("cifar-100-binary/train.bin")});
  auto test = cifar_split_files(dir.path(), CifarKind::Cifar100, false);
  REQUIRE(test.ok());
  CHECK(test.value() == std::vector<std::string>{dir.file("cifar-100-binary/test.bin")});
}

TEST_CASE("cifar_split_files names the folders searched and the files missing in each", "[cifar]") {
  TempDir dir;
  for (int i = 1; i <= 4; ++i) write(dir, "data_batch_" + std::to_string(i) + ".bin", {0});
  Error e = single_error(cifar_split_files(dir.path(), CifarKind::Cifar10, true), ErrCode::Io, dir.path());
  CHECK(contains(e.message, "CIFAR-10 train files not found"));
  CHECK(contains(e.message, dir.path() + " (missing data_batch_5.bin)"));
  CHECK(contains(e.message, dir.file("cifar-10-batches-bin") + " (no such folder)"));

  e = single_error(cifar_split_files(dir.path(), CifarKind::Cifar100, false), ErrCode::Io, dir.path());
  CHECK(contains(e.message, "(missing test.bin)"));
}

TEST_CASE("cifar_class_names reads one name per non-blank line, or numbers the classes without a meta file",
          "[cifar]") {
  TempDir dir;
  auto numbered = cifar_class_names(dir.path(), CifarKind::Cifar100);
  REQUIRE(numbered.ok());
  REQUIRE(numbered->size() == 100);
  CHECK(numbered.value()[0] == "0");
  CHECK(numbered.value()[99] == "99");

  std::string text = "airplane\r\nautomobile\r\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";
  std::filesystem::create_directory(dir.file("cifar-10-batches-bin"));
  write(dir, "cifar-10-batches-bin/batches.meta.txt", std::vector<uint8_t>(text.begin(), text.end()));
  auto names = cifar_class_names(dir.path(), CifarKind::Cifar10);
  REQUIRE(names.ok());
  REQUIRE(names->size() == 10);
  CHECK(names.value()[0] == "airplane");
  CHECK(names.value()[1] == "automobile");
  CHECK(names.value()[9] == "truck");
}

TEST_CASE("cifar_class_names rejects a meta file with the wrong number of names", "[cifar]") {
  TempDir dir;
  std::string text = "apple\nbaby\n";
  std::string p = write(dir, "fine_label_names.txt", std::vector<uint8_t>(text.begin(), text.end()));
  Error e = single_error(cifar_class_names(dir.path(), CifarKind::Cifar100), ErrCode::Format, p);
  CHECK(contains(e.message, "2 class names"));
  CHECK(contains(e.message, "expected 100"));
}
