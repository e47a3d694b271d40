// Reader of the spec's `data` section: dataset and files, batching, normalization, and the transform lists
// (each item `- kind` or `- kind: {params}`).
#include "core/spec/spec_fields.h"
#include "core/spec/spec_sections.h"

namespace trctl::spec_detail {
namespace {

std::vector<TransformKind> transform_kinds() {
  return {TransformKind::Pad,
          TransformKind::RandomCrop,
          TransformKind::RandomRotation,
          TransformKind::RandomScale,
          TransformKind::Normalize,
          TransformKind::RandomErasing,
          TransformKind::RandomResizedCrop,
          TransformKind::RandomHorizontalFlip,
          TransformKind::ColorJitter,
          TransformKind::Resize,
          TransformKind::CenterCrop};
}

// Output sides of the variable-size image transforms (as dataio/jpeg.h's largest JPEG side).
constexpr IntRange kImageSide{1, 16384};

void require_keys(Diagnostics& d, const YamlNode& params, const YamlLoc& at, const std::string& path,
                  const std::vector<std::string>& keys) {
  for (const std::string& key : keys)
    if (!params.find(key)) d.error(ErrCode::Missing, at, "missing '" + join_path(path, key) + "' (required)");
}

// The parameters of one transform for variable-size images (see parse_transform_params). Required: the size of
// random_resized_crop, resize and center_crop; the rest have torchvision's defaults (color_jitter: all off).
void parse_image_transform_params(Diagnostics& d, const YamlNode& params, const YamlLoc& at, const std::string& path,
                                  TransformSpec& t) {
  switch (t.kind) {
    case TransformKind::RandomResizedCrop:
      check_keys(d, params, path, {"size", "scale", "ratio"});
      require_keys(d, params, at, path, {"size"});
      get_int(d, params, path, "size", kImageSide, t.size);
      get_double_pair(d, params, path, "scale", above(0), true, t.crop_scale_min, t.crop_scale_max);
      get_double_pair(d, params, path, "ratio", above(0), true, t.crop_ratio_min, t.crop_ratio_max);
      break;
    case TransformKind::RandomHorizontalFlip:
      check_keys(d, params, path, {"p"});
      get_double(d, params, path, "p", closed(0, 1), t.p);
      break;
    case TransformKind::ColorJitter:
      check_keys(d, params, path, {"brightness", "contrast", "saturation", "hue"});
      get_double(d, params, path, "brightness", at_least(0), t.brightness);
      get_double(d, params, path, "contrast", at_least(0), t.contrast);
      get_double(d, params, path, "saturation", at_least(0), t.saturation);
      get_double(d, params, path, "hue", closed(0, 0.5), t.hue);
      break;
    case TransformKind::Resize:
    case TransformKind::CenterCrop:
      check_keys(d, params, path, {"size"});
      require_keys(d, params, at, path, {"size"});
      get_int(d, params, path, "size", kImageSide, t.size);
      break;
    default:
      break;
  }
}

// The parameters of one transform; `at` locates errors about missing keys. Required parameters: pad.padding,
// random_crop.size, random_rotation.degrees, random_scale.min and .max; random_erasing's all have defaults.
void parse_transform_params(Diagnostics& d, const YamlNode& params, const YamlLoc& at, const std::string& path,
                            TransformSpec& t) {
  switch (t.kind) {
    case TransformKind::Pad:
      check_keys(d, params, path, {"padding"});
      require_keys(d, params, at, path, {"padding"});
      get_int(d, params, path, "padding", int_at_least(0), t.padding);
      break;
    case TransformKind::RandomCrop:
      check_keys(d, params, path, {"size"});
      require_keys(d, params, at, path, {"size"});
      get_int(d, params, path, "size", int_at_least(1), t.size);
      break;
    case TransformKind::RandomRotation:
      check_keys(d, params, path, {"degrees"});
      require_keys(d, params, at, path, {"degrees"});
      get_double(d, params, path, "degrees", at_least(0), t.degrees);
      break;
    case TransformKind::RandomScale: {
      check_keys(d, params, path, {"min", "max"});
      require_keys(d, params, at, path, {"min", "max"});
      bool ok = get_double(d, params, path, "min", above(0), t.scale_min);
      ok &= get_double(d, params, path, "max", above(0), t.scale_max);
      if (ok && params.find("min") && params.find("max") && t.scale_min > t.scale_max)
        d.error(ErrCode::OutOfRange, params.find("min")->loc,
                "'" + path + "': min (" + params.find("min")->text + ") must be <= max (" +
                    params.find("max")->text + ")");
      break;
    }
    case TransformKind::Normalize:
      check_keys(d, params, path, {});
      break;
    case TransformKind::RandomErasing:
      check_keys(d, params, path, {"p", "scale", "ratio", "value"});
      get_double(d, params, path, "p", closed(0, 1), t.p);
      get_double_pair(d, params, path, "scale", open_closed(0, 1), true, t.erase_scale_min, t.erase_scale_max);
      get_double_pair(d, params, path, "ratio", above(0), true, t.ratio_min, t.ratio_max);
      get_double(d, params, path, "value", any_double(), t.value);
      break;
    case TransformKind::RandomResizedCrop:
    case TransformKind::RandomHorizontalFlip:
    case TransformKind::ColorJitter:
    case TransformKind::Resize:
    case TransformKind::CenterCrop:
      parse_image_transform_params(d, params, at, path, t);
      break;
  }
}

// One list item: a bare kind name (`- normalize`) or a one-key map `- kind: {params}` / `- kind: null`.
bool parse_transform(Diagnostics& d, const YamlNode& item, const std::string& path, TransformSpec& t) {
  YamlNode empty_params;
  empty_params.kind = YamlNode::Kind::Map;
  empty_params.loc = item.loc;
  YamlNode name;
  const YamlNode* params = &empty_params;
  if (item.kind == YamlNode::Kind::Bad) return false;
  if (item.kind == YamlNode::Kind::Scalar) {
    name = item;
  } else if (item.kind == YamlNode::Kind::Map && item.keys.size() == 1) {
    name.kind = YamlNode::Kind::Scalar;
    name.text = item.keys[0];
    name.loc = item.key_locs[0];
    if (item.items[0].kind != YamlNode::Kind::Null) params = &item.items[0];
  } else {
    std::string got = item.kind == YamlNode::Kind::Map
                          ? "a map with " + std::to_string(item.keys.size()) + " keys"
                          : yaml_describe(item);
    d.error(ErrCode::WrongType, item.loc,
            "expected a transform for '" + path + "' (`- normalize` or a one-key map such as `- pad: {padding: 2}`), "
            "got " + got);
    return false;
  }
  const std::vector<TransformKind> kinds = transform_kinds();
  size_t index = 0;
  if (!enum_by_name(d, name, path, enum_names(kinds), index)) return false;
  t = TransformSpec{};
  t.kind = kinds[index];
  const std::string params_path = path + "." + name.text;
  if (!node_is(d, *params, YamlNode::Kind::Map, params_path)) return false;
  parse_transform_params(d, *params, name.loc, params_path, t);
  return true;
}

void parse_transform_list(Diagnostics& d, const YamlNode& map, const char* key, std::vector<TransformSpec>& out) {
  const YamlNode* list = map.find(key);
  if (!list) return;
  const std::string path = join_path("data", key);
  if (list->kind == YamlNode::Kind::Null) {  // `train_transforms:` with nothing: no transforms
    out.clear();
    return;
  }
  if (!node_is(d, *list, YamlNode::Kind::Seq, path)) return;
  out.clear();
  for (size_t i = 0; i < list->items.size(); ++i) {
    TransformSpec t;
    if (parse_transform(d, list->items[i], index_path(path, i), t)) out.push_back(t);
  }
}

// data.normalization: {mean: [...], std: [...]}, std > 0, both the same non-empty length.
void parse_normalization(Diagnostics& d, const YamlNode& data, DataSpec& out) {
  const YamlNode* norm = data.find("normalization");
  if (!norm) return;
  const std::string path = "data.normalization";
  if (!node_is(d, *norm, YamlNode::Kind::Map, path)) return;
  check_keys(d, *norm, path, {"mean", "std"});
  bool ok = get_double_list(d, *norm, path, "mean", any_double(), out.mean);
  ok &= get_double_list(d, *norm, path, "std", above(0), out.std);
  if (ok && (out.mean.empty() || out.mean.size() != out.std.size()))
    d.error(ErrCode::Invalid, norm->loc,
            "'" + path + "': mean and std must have the same non-zero length (one per channel), got " +
                std::to_string(out.mean.size()) + " and " + std::to_string(out.std.size()));
}

// data.synthetic: {train_size, val_size, height, width, channels, classes}, each optional.
void parse_synthetic(Diagnostics& d, const YamlNode& data, SyntheticSpec& out) {
  const YamlNode* syn = data.find("synthetic");
  if (!syn) return;
  const std::string path = "data.synthetic";
  if (!node_is(d, *syn, YamlNode::Kind::Map, path)) return;
  check_keys(d, *syn, path, {"train_size", "val_size", "height", "width", "channels", "classes"});
  get_int64(d, *syn, path, "train_size", IntRange{1, int64_t{1} << 24}, out.train_size);
  get_int64(d, *syn, path, "val_size", IntRange{1, int64_t{1} << 24}, out.val_size);
  get_int(d, *syn, path, "height", IntRange{1, 4096}, out.height);
  get_int(d, *syn, path, "width", IntRange{1, 4096}, out.width);
  get_int(d, *syn, path, "channels", IntRange{1, 4}, out.channels);
  get_int(d, *syn, path, "classes", IntRange{2, 1 << 20}, out.classes);
}

}  // namespace

void parse_data_section(Diagnostics& d, const YamlNode& map, DataSpec& out) {
  const std::string s = "data";
  check_keys(d, map, s,
             {"dataset", "synthetic", "root", "train_images", "train_labels", "val_images", "val_labels", "train_path",
              "val_path", "dts_level", "in_memory", "io_threads", "cache_val", "batch_size",
              "val_batch_size", "workers", "train_subset", "drop_last", "normalization", "train_transforms",
              "val_transforms"});
  get_enum(d, map, s, "dataset",
           {DatasetKind::FashionMnist, DatasetKind::Idx, DatasetKind::Synthetic, DatasetKind::Dts,
            DatasetKind::ImageFolder, DatasetKind::Cifar10, DatasetKind::Cifar100},
           out.dataset);
  parse_synthetic(d, map, out.synthetic);
  get_string(d, map, s, "root", out.root);
  get_string(d, map, s, "train_images", out.train_images);
  get_string(d, map, s, "train_labels", out.train_labels);
  get_string(d, map, s, "val_images", out.val_images);
  get_string(d, map, s, "val_labels", out.val_labels);
  get_string(d, map, s, "train_path", out.train_path);
  get_string(d, map, s, "val_path", out.val_path);
  get_int(d, map, s, "dts_level", IntRange{0, 16384}, out.dts_level);
  get_bool(d, map, s, "in_memory", out.in_memory);
  get_int(d, map, s, "io_threads", IntRange{1, 64}, out.io_threads);
  get_bool(d, map, s, "cache_val", out.cache_val);
  const bool paths = out.dataset == DatasetKind::Dts || out.dataset == DatasetKind::ImageFolder;
  if (paths && (out.train_path.empty() || out.val_path.empty()))
    d.error(ErrCode::Missing, map.loc, "'data': dataset " + std::string(to_string(out.dataset)) +
                                           " needs train_path and val_path");
  if (out.cache_val && !paths)
    d.error(ErrCode::Invalid, map.loc, "'data.cache_val': applies to dts and image_folder datasets only (the others "
                                       "validate from memory already)");
  get_int(d, map, s, "batch_size", int_at_least(1), out.batch_size);
  get_int(d, map, s, "val_batch_size", int_at_least(0), out.val_batch_size);
  get_int(d, map, s, "workers", int_at_least(1), out.workers);
  get_int64(d, map, s, "train_subset", IntRange{0, std::numeric_limits<int64_t>::max()}, out.train_subset);
  get_bool(d, map, s, "drop_last", out.drop_last);
  parse_normalization(d, map, out);
  parse_transform_list(d, map, "train_transforms", out.train_transforms);
  parse_transform_list(d, map, "val_transforms", out.val_transforms);
}

}  // namespace trctl::spec_detail
