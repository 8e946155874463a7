#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kvasir {

StatusOr<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + " is not a regular file");
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return internal_error("mmap failed for " + path + ": " + std::strerror(errno));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

StatusOr<std::string> read_text_file(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  in.seekg(0, std::ios::end);
  auto size = in.tellg();
  if (size < 0) return data_loss("cannot size " + path);
  if (static_cast<size_t>(size) > max_bytes) {
    return out_of_range(path + " is larger than " + std::to_string(max_bytes) + " bytes");
  }
  in.seekg(0);
  std::string s(static_cast<size_t>(size), '\0');
  in.read(s.data(), size);
  if (!in) return data_loss("short read on " + path);
  return s;
}

}  // namespace kvasir
