#include "loader/weight_source.h"

#include <sys/stat.h>

#include <algorithm>

#include "loader/gguf_file.h"
#include "loader/safetensors_file.h"

namespace kvasir {

namespace {

class GgufWeightSource final : public WeightSource {
 public:
  explicit GgufWeightSource(std::unique_ptr<GgufFile> file) : file_(std::move(file)) {}

  WeightFormat format() const override { return WeightFormat::kGguf; }
  const std::string& path() const override { return file_->path(); }
  std::vector<std::string> tensor_names() const override {
    std::vector<std::string> names;
    names.reserve(file_->tensor_infos().size());
    for (const auto& t : file_->tensor_infos()) names.emplace_back(t.name);
    std::sort(names.begin(), names.end());
    return names;
  }
  bool has_tensor(std::string_view name) const override {
    return file_->find_tensor(name) != nullptr;
  }
  StatusOr<WeightTensor> tensor(std::string_view name) const override {
    return file_->tensor(name);
  }
  const GgufFile* gguf() const override { return file_.get(); }

 private:
  std::unique_ptr<GgufFile> file_;
};

class SafetensorsWeightSource final : public WeightSource {
 public:
  SafetensorsWeightSource(std::unique_ptr<SafetensorsShards> shards, std::string path)
      : shards_(std::move(shards)), path_(std::move(path)) {}

  WeightFormat format() const override { return WeightFormat::kSafetensors; }
  const std::string& path() const override { return path_; }
  std::vector<std::string> tensor_names() const override { return shards_->tensor_names(); }
  bool has_tensor(std::string_view name) const override {
    return shards_->find_tensor(name) != nullptr;
  }
  StatusOr<WeightTensor> tensor(std::string_view name) const override {
    return shards_->tensor(name);
  }

 private:
  std::unique_ptr<SafetensorsShards> shards_;
  std::string path_;
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::unique_ptr<WeightSource> gguf_weight_source(std::unique_ptr<GgufFile> file) {
  return std::make_unique<GgufWeightSource>(std::move(file));
}

StatusOr<std::unique_ptr<WeightSource>> open_gguf_weights(const std::string& path) {
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(path));
  return std::unique_ptr<WeightSource>(new GgufWeightSource(std::move(file)));
}

StatusOr<std::unique_ptr<WeightSource>> open_safetensors_weights(const std::string& dir_or_file) {
  struct stat st {};
  if (::stat(dir_or_file.c_str(), &st) != 0) return not_found("cannot open " + dir_or_file);
  auto shards = S_ISDIR(st.st_mode) ? SafetensorsShards::open_dir(dir_or_file)
                                    : SafetensorsShards::open_file(dir_or_file);
  if (!shards.ok()) return shards.status();
  return std::unique_ptr<WeightSource>(
      new SafetensorsWeightSource(std::move(shards).value(), dir_or_file));
}

StatusOr<std::unique_ptr<WeightSource>> open_weights(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return not_found("no such file or directory: " + path);
  if (S_ISDIR(st.st_mode)) return open_safetensors_weights(path);
  if (ends_with(path, ".safetensors")) return open_safetensors_weights(path);
  if (ends_with(path, ".gguf")) return open_gguf_weights(path);
  return invalid_argument(path + ": expected a .gguf file, a .safetensors file or an HF directory");
}

}  // namespace kvasir
