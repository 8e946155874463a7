// libFuzzer target for the safetensors parser: parses the input from memory and touches the first
// and last byte of every tensor. Not built by CMake yet; from the repo root:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
//     src/loader/fuzz/safetensors_fuzz.cpp src/loader/safetensors_file.cpp src/core/dtype.cpp \
//     src/common/json.cpp src/common/utf8.cpp src/common/mapped_file.cpp src/common/status.cpp \
//     src/common/log.cpp -o safetensors_fuzz
//   ./safetensors_fuzz -max_len=65536 -dict=<(printf
//   '"dtype"\n"shape"\n"data_offsets"\n"F32"\n"BF16"\n') corpus_dir/
#include <cstddef>
#include <cstdint>
#include <span>

#include "loader/safetensors_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kvasir::SafetensorsFile::parse(std::span<const uint8_t>(data, size));
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& info : (*file)->tensor_infos()) {
    auto raw = (*file)->raw_bytes(info);
    if (!raw.empty()) sink = sink ^ raw.front() ^ raw.back();
    (void)(*file)->tensor(info);
    (void)(*file)->find_tensor(info.name);
  }
  return 0;
}
