// Writer and Reader: the little-endian byte layout shared by the wire codecs of one step
// (sched/scheduler_output_codec.h, sched/runner_output_codec.h). Plain values, length-prefixed
// strings and vectors, optional values behind a 0/1 byte. The Reader checks every length against
// the bytes left and turns any overrun or bad flag byte into ok() == false (then reads zeros), so
// the decoders check once at the end and never crash or allocate past the message.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace kvasir::wire {

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void str(const std::string& s) {
    pod(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  template <typename T>
  void pods(const std::vector<T>& v) {
    pod(static_cast<uint32_t>(v.size()));
    const size_t at = out_.size();
    out_.resize(at + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(out_.data() + at, v.data(), v.size() * sizeof(T));
  }
  void strs(const std::vector<std::string>& v) {
    pod(static_cast<uint32_t>(v.size()));
    for (const auto& s : v) str(s);
  }
  template <typename T>
  void opt(const std::optional<T>& v) {
    pod<uint8_t>(v.has_value());
    if (v) pod(*v);
  }

 private:
  std::vector<uint8_t>& out_;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), left_(n) {}
  bool ok() const { return ok_; }
  void fail() { ok_ = false; }
  size_t left() const { return left_; }
  template <typename T>
  T pod() {
    T v{};
    if (!take(&v, sizeof(T))) return T{};
    return v;
  }
  // A count of elements of at least `min_bytes` each: refused when the bytes left cannot hold it.
  uint32_t count(size_t min_bytes) {
    const uint32_t n = pod<uint32_t>();
    if (static_cast<uint64_t>(n) * min_bytes > left_) ok_ = false;
    return ok_ ? n : 0;
  }
  std::string str() {
    const uint32_t n = count(1);
    std::string s(n, '\0');
    if (n) take(s.data(), n);
    return s;
  }
  template <typename T>
  std::vector<T> pods() {
    const uint32_t n = count(sizeof(T));
    std::vector<T> v(n);
    if (n) take(v.data(), n * sizeof(T));
    return v;
  }
  std::vector<std::string> strs() {
    const uint32_t n = count(4);
    std::vector<std::string> v;
    v.reserve(n);
    for (uint32_t i = 0; i < n && ok_; ++i) v.push_back(str());
    return v;
  }
  template <typename T>
  std::optional<T> opt() {
    const uint8_t has = pod<uint8_t>();
    if (has > 1) ok_ = false;
    if (has != 1 || !ok_) return std::nullopt;
    return pod<T>();
  }
  bool boolean() {
    const uint8_t b = pod<uint8_t>();
    if (b > 1) ok_ = false;
    return b == 1;
  }

 private:
  bool take(void* dst, size_t n) {
    if (!ok_ || n > left_) {
      ok_ = false;
      return false;
    }
    std::memcpy(dst, p_, n);
    p_ += n;
    left_ -= n;
    return true;
  }
  const uint8_t* p_;
  size_t left_;
  bool ok_ = true;
};

}  // namespace kvasir::wire
