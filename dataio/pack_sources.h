// The sources `trctl pack-dts` reads: IDX pairs (MNIST format), CIFAR-10/100 binary batches, and image folders
// (torchvision ImageFolder layout: one sub-folder per class, JPEG files).
#pragma once
#include <memory>
#include <string>

#include "core/util/error.h"
#include "dataio/dataset.h"
#include "dataio/dts_writer.h"

namespace trctl {

// A decoded in-memory dataset (IDX, CIFAR) as raw u8 samples; the dataset is kept alive by the source.
PackSource pack_source_raw(std::shared_ptr<const ImageDataset> ds, const std::string& kind,
                           std::vector<std::string> classes);

Result<PackSource> pack_source_idx(const std::string& images, const std::string& labels);

// ImageFolder semantics: classes are the sorted names of dir's sub-folders (label = position); each class's files
// are found recursively and sorted by path; files ending in .jpg/.jpeg (any case) are samples, others are skipped
// and counted (meta "skipped_non_jpeg"). A class folder without JPEG files is an error, as in torchvision.
Result<PackSource> pack_source_folder(const std::string& dir);

}  // namespace trctl
