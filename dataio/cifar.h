// CIFAR-10 / CIFAR-100 binary-version reader (the "*-binary" archives of cs.toronto.edu/~kriz/cifar.html):
// the batch files into one ImageDataset, the standard file names of a split, and the class names.
#pragma once
#include <string>
#include <vector>

#include "core/util/error.h"
#include "dataio/dataset.h"

namespace trctl {

// CIFAR-10 records are 1 label byte + 3072 pixel bytes; CIFAR-100 records are 1 coarse label byte, 1 fine label
// byte + 3072 pixel bytes. Pixels are planar: 1024 R, 1024 G, 1024 B bytes, each plane 32 rows of 32.
enum class CifarKind { Cifar10, Cifar100 };

constexpr int kCifarSide = 32;
constexpr int kCifarPixelBytes = 3 * kCifarSide * kCifarSide;  // 3072

int cifar_num_classes(CifarKind kind);   // 10 or 100 (fine labels)
int cifar_record_bytes(CifarKind kind);  // 3073 or 3074

// All records of the files, in order, as (N, 32, 32, 3) u8 HWC pixels (transposed from the files' CHW planes),
// labels (CIFAR-100: the fine label) and num_classes 10 or 100. Every file is checked and one error per bad
// file is reported: missing or unreadable (ErrCode::Io, where = path), empty, length not a multiple of the
// record size (where = the truncated tail's offset) or a label out of range (where = the label byte's offset)
// are ErrCode::Format with where = "path:offset N". No files at all is ErrCode::Invalid.
Result<ImageDataset> cifar_load(const std::vector<std::string>& batch_files, CifarKind kind);

// The standard batch files of a split under root, or under root/cifar-10-batches-bin (CIFAR-10:
// data_batch_1.bin..data_batch_5.bin for train, test_batch.bin otherwise) or root/cifar-100-binary (CIFAR-100:
// train.bin / test.bin). The first folder holding every file wins; none is ErrCode::Io naming the folders
// searched and the files missing in each.
Result<std::vector<std::string>> cifar_split_files(const std::string& root, CifarKind kind, bool train);

// The class names, index = label: one per non-blank line of batches.meta.txt (CIFAR-10) or
// fine_label_names.txt (CIFAR-100) in root or its standard subfolder; "0".."9" / "0".."99" when that file is
// absent. A file with the wrong number of names is ErrCode::Format.
Result<std::vector<std::string>> cifar_class_names(const std::string& root, CifarKind kind);

}  // namespace trctl
