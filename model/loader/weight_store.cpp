// WeightStore: the tensors of a model directory, from model.safetensors or from the shards
// that model.safetensors.index.json names; see safetensors.h.
#include "model/loader/safetensors.h"

#include <system_error>

#include <nlohmann/json.hpp>

#include "model/loader/json_file.h"
#include "model/loader/model_error.h"
#include "model/loader/shape_string.h"

namespace pagedserve::model {

namespace {

using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool file_exists(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// A shard must be a plain file name next to the index: an absolute path or ".." in a
// downloaded index would let it read files outside the model directory.
bool is_plain_file_name(const std::string& name) {
  const std::filesystem::path p(name);
  return !name.empty() && !p.has_root_path() && p.has_filename() && p == p.filename() &&
         name != "." && name != "..";
}

// The files and tensor index of a sharded model, as model.safetensors.index.json describes it.
struct ShardSet {
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::map<std::string, const TensorView*> index;
};

// Reads the index's weight_map, opens every shard it names once, and checks each shard holds
// the tensors the index promised.
ShardSet open_shards(const std::filesystem::path& model_dir,
                     const std::filesystem::path& index_path) {
  const std::string where = index_path.string() + ": ";
  const json index = detail::read_json_file(index_path);
  if (!index.is_object()) {
    throw ModelError(where + "top level must be a JSON object, got " + detail::json_kind(index));
  }
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end()) throw ModelError(where + "missing field weight_map");
  if (!weight_map->is_object()) {
    throw ModelError(where + "field weight_map must be an object, got " +
                     detail::json_kind(*weight_map));
  }

  // Open each shard once, however many tensors it holds.
  ShardSet out;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  for (const auto& [tensor_name, shard_value] : weight_map->items()) {
    if (!shard_value.is_string()) {
      throw ModelError(where + "weight_map entry for " + tensor_name + " must be a string, got " +
                       detail::json_kind(shard_value));
    }
    const auto& shard_name = shard_value.get_ref<const std::string&>();
    if (!is_plain_file_name(shard_name)) {
      throw ModelError(where + "shard " + shard_name + " for " + tensor_name +
                       " is not a file name in the model directory");
    }
    auto& shard = shards[shard_name];
    if (!shard) {
      try {
        shard = SafetensorsFile::open(model_dir / shard_name);
      } catch (const ModelError& e) {
        // Say which index sent us there; the shard's own message follows.
        throw ModelError(where + "shard " + shard_name + " listed in weight_map: " + e.what());
      }
      out.files.push_back(shard);
    }
    auto found = shard->tensors().find(tensor_name);
    if (found == shard->tensors().end()) {
      throw ModelError(where + "tensor " + tensor_name +
                       " promised by weight_map is missing from shard " + shard->path().string());
    }
    out.index.emplace(tensor_name, &found->second);
  }
  return out;
}

}  // namespace

WeightStore WeightStore::open(const std::filesystem::path& model_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec)) {
    throw ModelError(model_dir.string() + ": model directory not found");
  }

  WeightStore store;
  const std::filesystem::path single = model_dir / kSingleFile;
  if (file_exists(single)) {
    store.source_ = single;
    std::shared_ptr<SafetensorsFile> file = SafetensorsFile::open(single);
    for (const auto& [name, view] : file->tensors()) store.index_.emplace(name, &view);
    store.files_.push_back(std::move(file));
    return store;
  }

  const std::filesystem::path index_path = model_dir / kIndexFile;
  if (!file_exists(index_path)) {
    throw ModelError(model_dir.string() + ": no " + kSingleFile + " or " + kIndexFile);
  }
  store.source_ = index_path;
  ShardSet shards = open_shards(model_dir, index_path);
  store.files_ = std::move(shards.files);
  store.index_ = std::move(shards.index);
  return store;
}

const TensorView* WeightStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& WeightStore::require(const std::string& name,
                                       const std::vector<int64_t>& shape) const {
  const TensorView* tensor = find(name);
  if (tensor == nullptr) throw ModelError(source_.string() + ": missing tensor " + name);
  if (tensor->shape != shape) {
    throw ModelError(source_.string() + ": tensor " + name + " has shape " +
                     detail::shape_string(tensor->shape) + ", expected " +
                     detail::shape_string(shape));
  }
  return *tensor;
}

}  // namespace pagedserve::model
