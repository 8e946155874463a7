// Aligned host memory as a Buffer: used by the CPU backend for everything and by loaders of any
// backend for staging copies (unaligned safetensors payloads, converted norm vectors).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace kvasir {

StatusOr<std::unique_ptr<Buffer>> allocate_host_buffer(size_t bytes);

}  // namespace kvasir
