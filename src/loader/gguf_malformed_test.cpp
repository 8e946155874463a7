// Malformed GGUF input: truncations, bit flips, huge counts and bad layouts must all come back as
// a Status with a message that names the problem, never a crash or an out-of-bounds read (run
// under ASan/UBSan: every case parses a heap copy sized exactly to the input).
#include <gtest/gtest.h>

#include <random>

#include "loader/gguf_file.h"
#include "loader/test_writers.h"

namespace kvasir {
namespace {

using testing::Bytes;
using testing::GgufWriter;
using testing::patch;

GgufWriter small_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("general.alignment", 32);
  w.add_u32("llama.block_count", 2);
  w.add_bool("flag", false);
  w.add_array("tok", GgufWriter::string_array({"<s>", "hello", "world"}));
  w.add_array("ids", GgufWriter::scalar_array<int32_t>(GgufType::kInt32, {1, 2, 3}));
  w.add_array("nest",
              GgufWriter::array_of_arrays({GgufWriter::scalar_array<uint8_t>(GgufType::kUint8, {1}),
                                           GgufWriter::string_array({"q"})}));
  w.add_tensor("w0", DType::kF32, {4, 2}, testing::iota_bytes(32));
  w.add_tensor("w1", DType::kQ8_0, {32}, testing::iota_bytes(34));
  return w;
}

// Parses an exact-size heap copy and, if it parsed, reads everything reachable through the API.
Status parse_and_touch(const Bytes& bytes) {
  auto copy = std::make_unique<uint8_t[]>(bytes.size() + 1);  // +1: never a zero-size allocation
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  auto f = GgufFile::parse(std::span<const uint8_t>(copy.get(), bytes.size()));
  if (!f.ok()) return f.status();
  const GgufFile& g = **f;
  for (const auto& kv : g.metadata()) {
    (void)g.describe(kv.value);
    if (kv.value.type == GgufType::kArray) {
      auto items = g.array_items(kv.value);
      if (items.ok()) {
        for (const auto& it : *items) (void)g.describe(it);
      }
      (void)g.get_string_array(kv.key);
      (void)g.get_i32_array(kv.key);
      (void)g.get_f32_array(kv.key);
    }
  }
  volatile uint8_t sink = 0;
  for (const auto& info : g.tensor_infos()) {
    WeightTensor t = g.tensor(info);
    for (size_t i = 0; i < t.nbytes; ++i) sink = sink + t.data[i];
  }
  return Status();
}

// No byte from the file reaches a message raw (common/quoted_text.h): one line, no escapes.
bool printable(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) return false;
  }
  return true;
}

// Expects a non-ok Status whose message mentions every one of `words`.
void expect_error(const Bytes& bytes, std::initializer_list<const char*> words) {
  Status s = parse_and_touch(bytes);
  ASSERT_FALSE(s.ok()) << "expected an error mentioning " << *words.begin();
  EXPECT_FALSE(s.message().empty());
  for (const char* w : words) {
    EXPECT_NE(s.message().find(w), std::string::npos) << "message: " << s.message();
  }
  EXPECT_TRUE(printable(s.message())) << s.message();
}

TEST(GgufMalformed, EveryTruncationFails) {
  Bytes full = small_writer().build();
  ASSERT_TRUE(parse_and_touch(full).ok());
  for (size_t n = 0; n < full.size(); ++n) {
    Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    Status s = parse_and_touch(cut);
    ASSERT_FALSE(s.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_FALSE(s.message().empty());
  }
}

TEST(GgufMalformed, BitFlipsNeverCrash) {
  GgufWriter w = small_writer();
  Bytes full = w.build();
  const size_t header_end = w.field("data");  // flips in tensor data are not format errors
  int failures = 0;
  for (size_t pos = 0; pos < header_end; ++pos) {
    for (int bit = 0; bit < 8; ++bit) {
      Bytes b = full;
      b[pos] ^= static_cast<uint8_t>(1u << bit);
      Status s = parse_and_touch(b);
      if (!s.ok()) {
        ++failures;
        EXPECT_FALSE(s.message().empty());
        EXPECT_TRUE(printable(s.message())) << s.message();
      }
    }
  }
  EXPECT_GT(failures, 100);  // most flips in counts, lengths and types are caught
}

TEST(GgufMalformed, RandomMultiByteCorruptionNeverCrashes) {
  Bytes full = small_writer().build();
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = full;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % b.size();
      switch (rng() % 3) {
        case 0:
          b[pos] = static_cast<uint8_t>(rng());
          break;
        case 1:
          b[pos] = 0xFF;
          break;
        default:
          if (pos + 8 <= b.size()) patch<uint64_t>(b, pos, uint64_t{1} << (rng() % 64));
      }
    }
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    Status s = parse_and_touch(b);
    if (!s.ok()) {
      EXPECT_FALSE(s.message().empty());
      EXPECT_TRUE(printable(s.message())) << s.message();
    }
  }
}

TEST(GgufMalformed, HeaderErrors) {
  GgufWriter w = small_writer();
  const Bytes full = w.build();
  Bytes b = full;
  b[0] = 'X';
  expect_error(b, {"magic"});
  for (uint32_t v : {0u, 1u, 4u, 0xFFFFFFFFu}) {
    b = full;
    patch<uint32_t>(b, w.field("version"), v);
    expect_error(b, {"version"});
  }
  b = full;
  patch<uint32_t>(b, w.field("version"), 0x03000000u);
  expect_error(b, {"big-endian"});
  expect_error(Bytes{'G', 'G', 'U', 'F'}, {"header"});
}

TEST(GgufMalformed, HugeCountsAreRejectedUpFront) {
  GgufWriter w = small_writer();
  const Bytes full = w.build();
  for (uint64_t n : {uint64_t{1} << 63, ~uint64_t{0}, uint64_t{1} << 32, uint64_t{100000}}) {
    Bytes b = full;
    patch<uint64_t>(b, w.field("n_kv"), n);
    expect_error(b, {"metadata count"});
    b = full;
    patch<uint64_t>(b, w.field("n_tensors"), n);
    expect_error(b, {"tensor count"});
  }
  // One more tensor than present: reads into the data section and fails there.
  Bytes b = full;
  patch<uint64_t>(b, w.field("n_tensors"), 3);
  EXPECT_FALSE(parse_and_touch(b).ok());
}

TEST(GgufMalformed, HugeStringAndArrayLengths) {
  GgufWriter w = small_writer();
  const Bytes full = w.build();
  for (uint64_t n : {~uint64_t{0}, uint64_t{1} << 62, uint64_t{1} << 40, uint64_t{5000}}) {
    Bytes b = full;
    patch<uint64_t>(b, w.field("kv:llama.block_count:len"), n);
    expect_error(b, {"key"});
    b = full;
    patch<uint64_t>(b, w.field("kv:general.architecture:value"), n);  // string value length
    expect_error(b, {"general.architecture"});
    b = full;
    patch<uint64_t>(b, w.field("kv:tok:value") + 4, n);  // array count
    expect_error(b, {"'tok'"});
    b = full;
    patch<uint64_t>(b, w.field("kv:tok:value") + 12, n);  // first string's length
    expect_error(b, {"'tok'"});
    b = full;
    patch<uint64_t>(b, w.field("kv:ids:value") + 4, n);
    expect_error(b, {"'ids'"});
    b = full;
    patch<uint64_t>(b, w.field("kv:nest:value") + 4, n);  // outer count
    expect_error(b, {"'nest'"});
    b = full;
    patch<uint64_t>(b, w.field("kv:nest:value") + 16, n);  // first inner array's count
    expect_error(b, {"'nest'"});
    b = full;
    patch<uint64_t>(b, w.field("tensor:w0:name"), n);
    expect_error(b, {"tensor #0"});
  }
}

TEST(GgufMalformed, BadValueTypes) {
  GgufWriter w = small_writer();
  const Bytes full = w.build();
  Bytes b = full;
  patch<uint32_t>(b, w.field("kv:llama.block_count:type"), 13);
  expect_error(b, {"llama.block_count", "unknown value type"});
  b = full;
  patch<uint32_t>(b, w.field("kv:ids:value"), 99);  // array element type
  expect_error(b, {"'ids'", "unknown type"});
  b = full;
  b[w.field("kv:flag:value")] = 7;
  expect_error(b, {"flag", "bool"});
  b = full;
  patch<uint32_t>(b, w.field("kv:general.alignment:type"), static_cast<uint32_t>(GgufType::kInt32));
  expect_error(b, {"general.alignment", "u32"});
  for (uint32_t a : {0u, 3u, 48u}) {
    b = full;
    patch<uint32_t>(b, w.field("kv:general.alignment:value"), a);
    expect_error(b, {"alignment"});
  }
  // general.architecture with a non-string type: retyped as u64 (its 8-byte length reads as one).
  b = full;
  patch<uint32_t>(b, w.field("kv:general.architecture:type"),
                  static_cast<uint32_t>(GgufType::kUint64));
  EXPECT_FALSE(parse_and_touch(b).ok());
}

TEST(GgufMalformed, DeeplyNestedArraysAreRefused) {
  Bytes inner = GgufWriter::scalar_array<uint8_t>(GgufType::kUint8, {1});
  for (int i = 0; i < GgufFile::kMaxArrayDepth + 2; ++i)
    inner = GgufWriter::array_of_arrays({inner});
  GgufWriter w;
  w.add_array("deep", inner);
  expect_error(w.build(), {"'deep'", "deeper"});
}

TEST(GgufMalformed, DuplicateKeysAndTensorNames) {
  GgufWriter w;
  w.add_u32("k", 1);
  w.add_u32("k", 2);
  expect_error(w.build(), {"duplicate metadata key 'k'"});
  GgufWriter t;
  t.add_tensor("x", DType::kF32, {1}, testing::iota_bytes(4));
  t.add_tensor("x", DType::kF32, {1}, testing::iota_bytes(4));
  expect_error(t.build(), {"duplicate tensor name 'x'"});
  GgufWriter e;
  e.add_u32("", 1);
  expect_error(e.build(), {"empty key"});
}

TEST(GgufMalformed, BadTensorInfos) {
  GgufWriter w = small_writer();
  const Bytes full = w.build();
  Bytes b = full;
  patch<uint32_t>(b, w.field("tensor:w0:n_dims"), 5);
  expect_error(b, {"'w0'", "n_dims"});
  b = full;
  patch<uint32_t>(b, w.field("tensor:w0:n_dims"), 0xFFFFFFFFu);
  expect_error(b, {"'w0'", "n_dims"});
  for (uint64_t d : {~uint64_t{0}, uint64_t{1} << 63, uint64_t{1} << 62}) {
    b = full;
    patch<uint64_t>(b, w.field("tensor:w0:dim0"), d);
    expect_error(b, {"'w0'"});
  }
  b = full;  // product 2^40 * 2^40 overflows int64
  patch<uint64_t>(b, w.field("tensor:w0:dim0"), uint64_t{1} << 40);
  patch<uint64_t>(b, w.field("tensor:w0:dim1"), uint64_t{1} << 40);
  expect_error(b, {"'w0'", "overflow"});
  b = full;  // large but representable: more bytes than the file
  patch<uint64_t>(b, w.field("tensor:w0:dim0"), uint64_t{1} << 30);
  expect_error(b, {"'w0'"});
  for (uint32_t type : {4u, 5u, 16u, 29u, 31u, 1000u, 0xFFFFFFFFu}) {
    b = full;
    patch<uint32_t>(b, w.field("tensor:w0:type"), type);
    expect_error(b, {"'w0'"});
  }
  b = full;  // q8_0 rows must be a multiple of 32 elements
  patch<uint64_t>(b, w.field("tensor:w1:dim0"), 16);
  expect_error(b, {"'w1'", "block size"});
  b = full;
  patch<uint64_t>(b, w.field("tensor:w0:name"), 0);
  EXPECT_FALSE(parse_and_touch(b).ok());
}

TEST(GgufMalformed, BadDataOffsets) {
  GgufWriter w = small_writer();
  const Bytes full = w.build();
  Bytes b = full;
  patch<uint64_t>(b, w.field("tensor:w1:offset"), 4);
  expect_error(b, {"'w1'", "alignment"});
  for (uint64_t off : {uint64_t{1} << 20, ~uint64_t{0} - 31, uint64_t{1} << 63}) {
    b = full;
    patch<uint64_t>(b, w.field("tensor:w1:offset"), off);
    expect_error(b, {"'w1'"});
  }
  b = full;  // w1 on top of w0
  patch<uint64_t>(b, w.field("tensor:w1:offset"), 0);
  expect_error(b, {"overlaps"});
  // Data section start past the end of the file.
  GgufWriter w2;
  w2.add_tensor("x", DType::kF32, {1}, testing::iota_bytes(4));
  Bytes c = w2.build();
  c.resize(w2.field("data") - 1);
  expect_error(c, {"data section"});
}

TEST(GgufMalformed, FileBytesInMessagesAreEscaped) {
  // A key, a tensor name and an architecture holding a CR, an ANSI escape and invalid UTF-8:
  // each error quotes them escaped (issue 14: a CR split the `kvasir serve:` line).
  GgufWriter dup_key;
  dup_key.add_u32("key\r\x1b[2J\xff", 1);
  dup_key.add_u32("key\r\x1b[2J\xff", 2);
  expect_error(dup_key.build(), {"duplicate metadata key 'key\\r\\x1B[2J\\xFF'"});
  GgufWriter dup_tensor;
  dup_tensor.add_tensor("w\n0", DType::kF32, {4}, testing::iota_bytes(16));
  dup_tensor.add_tensor("w\n0", DType::kF32, {4}, testing::iota_bytes(16));
  expect_error(dup_tensor.build(), {"duplicate tensor name 'w\\n0'"});
  GgufWriter bad_type;
  bad_type.add_tensor("t\x07", static_cast<DType>(250), {4}, testing::iota_bytes(4));
  expect_error(bad_type.build(), {"tensor 't\\x07' has unsupported ggml type 250"});
  GgufWriter overlap;
  overlap.add_tensor("a\r", DType::kF32, {8}, testing::iota_bytes(32));
  overlap.add_tensor("b\r", DType::kF32, {8}, testing::iota_bytes(32));
  Bytes b = overlap.build();
  patch<uint64_t>(b, overlap.field("tensor:b\r:offset"), 0);
  expect_error(b, {"'a\\r'", "'b\\r'", "overlaps"});
  // describe() (what tools print) escapes string values the same way.
  GgufWriter value;
  value.add_string("general.name", "x\r\ny");
  Bytes vb = value.build();
  auto f = GgufFile::parse(std::span<const uint8_t>(vb.data(), vb.size()));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->describe((*f)->metadata()[0].value), "\"x\\r\\ny\"");
}

}  // namespace
}  // namespace kvasir
