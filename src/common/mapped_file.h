// MappedFile: a read-only memory map of a whole file (weights are read in place, never copied).
// Must not interpret the bytes: parsers (GGUF, safetensors) validate every offset against size().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace kvasir {

class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole (small) text file such as config.json; refuses files above max_bytes.
StatusOr<std::string> read_text_file(const std::string& path, size_t max_bytes = 256u << 20);

}  // namespace kvasir
