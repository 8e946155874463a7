#include "loader/safetensors_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "loader/test_writers.h"
#include "loader/weight_source.h"

namespace kvasir {
namespace {

using testing::Bytes;
using testing::patch;
using testing::safetensors_bytes;
using testing::StTensor;

std::vector<StTensor> sample_tensors() {
  return {{"model.embed_tokens.weight", "BF16", {4, 3}, testing::iota_bytes(24)},
          {"model.norm.weight", "F32", {3}, testing::iota_bytes(12)},
          {"lm_head.bias", "F16", {}, testing::iota_bytes(2)},
          {"counts", "I64", {2}, testing::iota_bytes(16)},
          {"mask", "U8", {0, 5}, {}},
          {"flags", "U8", {3}, testing::iota_bytes(3)}};
}

Status parse_and_touch(const Bytes& bytes) {
  auto copy = std::make_unique<uint8_t[]>(bytes.size() + 1);
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  auto f = SafetensorsFile::parse(std::span<const uint8_t>(copy.get(), bytes.size()));
  if (!f.ok()) return f.status();
  volatile uint8_t sink = 0;
  for (const auto& info : (*f)->tensor_infos()) {
    for (uint8_t x : (*f)->raw_bytes(info)) sink = sink + x;
    (void)(*f)->tensor(info);
  }
  return Status();
}

void expect_error(const Bytes& bytes, std::initializer_list<const char*> words) {
  Status s = parse_and_touch(bytes);
  ASSERT_FALSE(s.ok()) << "expected an error mentioning " << *words.begin();
  EXPECT_FALSE(s.message().empty());
  for (const char* w : words) {
    EXPECT_NE(s.message().find(w), std::string::npos) << "message: " << s.message();
  }
}

void expect_header_error(const std::string& header, const Bytes& data,
                         std::initializer_list<const char*> words) {
  expect_error(safetensors_bytes(header, data), words);
}

TEST(SafetensorsFile, ParsesTensorsAndMetadata) {
  Bytes b = safetensors_bytes(sample_tensors(), R"({"format":"pt"})");
  auto f = SafetensorsFile::parse(b);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const SafetensorsFile& s = **f;
  EXPECT_EQ(s.data_offset() % 8, 0u);
  ASSERT_EQ(s.metadata().size(), 1u);
  EXPECT_EQ(s.metadata()[0].second, "pt");
  EXPECT_EQ(s.tensor_infos().size(), 6u);
  auto emb = s.tensor("model.embed_tokens.weight");
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ(emb->dtype, DType::kBF16);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(emb->nbytes, 24u);
  EXPECT_EQ(emb->data, b.data() + s.data_offset());
  EXPECT_EQ(emb->data[0], 1);
  auto norm = s.tensor("model.norm.weight");
  EXPECT_EQ(norm->dtype, DType::kF32);
  EXPECT_EQ(norm->data, b.data() + s.data_offset() + 24);
  auto scalar = s.tensor("lm_head.bias");
  EXPECT_EQ(scalar->dtype, DType::kF16);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->num_elements(), 1);
  EXPECT_EQ(s.tensor("counts")->dtype, DType::kI64);
  // U8 is carried raw: visible in the infos, refused as a WeightTensor.
  const SafetensorsTensorInfo* flags = s.find_tensor("flags");
  ASSERT_NE(flags, nullptr);
  EXPECT_EQ(flags->dtype, StDType::kU8);
  EXPECT_EQ(s.raw_bytes(*flags).size(), 3u);
  EXPECT_EQ(s.tensor("flags").status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.find_tensor("mask")->end - s.find_tensor("mask")->begin, 0u);
  EXPECT_EQ(s.tensor("nope").status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsMalformed, EveryTruncationFails) {
  Bytes full = safetensors_bytes(sample_tensors());
  ASSERT_TRUE(parse_and_touch(full).ok());
  for (size_t n = 0; n < full.size(); ++n) {
    Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    Status s = parse_and_touch(cut);
    ASSERT_FALSE(s.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_FALSE(s.message().empty());
  }
}

TEST(SafetensorsMalformed, BitFlipsAndRandomCorruptionNeverCrash) {
  Bytes full = safetensors_bytes(sample_tensors(), R"({"a":"b"})");
  uint64_t header_len = 0;
  std::memcpy(&header_len, full.data(), 8);
  int failures = 0;
  for (size_t pos = 0; pos < 8 + header_len; ++pos) {
    for (int bit = 0; bit < 8; ++bit) {
      Bytes b = full;
      b[pos] ^= static_cast<uint8_t>(1u << bit);
      Status s = parse_and_touch(b);
      if (!s.ok()) {
        ++failures;
        EXPECT_FALSE(s.message().empty());
      }
    }
  }
  EXPECT_GT(failures, 100);
  std::mt19937 rng(99);
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = full;
    for (int e = 0; e < 3; ++e)
      b[rng() % b.size()] = static_cast<uint8_t>("0123456789-,[]{}\"e."[rng() % 19]);
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    Status s = parse_and_touch(b);
    if (!s.ok()) {
      EXPECT_FALSE(s.message().empty());
    }
  }
}

TEST(SafetensorsMalformed, HeaderLength) {
  Bytes full = safetensors_bytes(sample_tensors());
  for (uint64_t n : {~uint64_t{0}, uint64_t{1} << 63, uint64_t{100u << 20} + 1}) {
    Bytes b = full;
    patch<uint64_t>(b, 0, n);
    expect_error(b, {"header length"});
  }
  Bytes b = full;
  patch<uint64_t>(b, 0, full.size());  // longer than what follows it
  expect_error(b, {"header length"});
  expect_error(Bytes{1, 2, 3}, {"8-byte"});
  expect_error(safetensors_bytes("", {}), {"JSON"});
}

TEST(SafetensorsMalformed, BadJsonAndStructure) {
  const Bytes d4 = testing::iota_bytes(4);
  expect_header_error("{", d4, {"JSON"});
  expect_header_error("[]", d4, {"object"});
  expect_header_error(R"({"x": 5})", d4, {"'x'", "object"});
  expect_header_error(R"({"x": {"shape":[1],"data_offsets":[0,4]}})", d4, {"'x'", "dtype"});
  expect_header_error(R"({"x": {"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", d4,
                      {"'x'", "unknown dtype"});
  expect_header_error(R"({"x": {"dtype":"F32","data_offsets":[0,4]}})", d4, {"'x'", "shape"});
  expect_header_error(R"({"x": {"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", d4,
                      {"'x'", "shape"});
  expect_header_error(R"({"x": {"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", d4,
                      {"'x'", "shape"});
  expect_header_error(R"({"x": {"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", d4,
                      {"'x'", "shape"});
  expect_header_error(
      R"({"x": {"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}})", d4,
      {"'x'", "overflow"});
  expect_header_error(
      R"({"x": {"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
      d4, {"'x'", "rank"});
  expect_header_error(R"({"x": {"dtype":"F32","shape":[1]}})", d4, {"'x'", "data_offsets"});
  expect_header_error(R"({"x": {"dtype":"F32","shape":[1],"data_offsets":[0]}})", d4,
                      {"'x'", "data_offsets"});
  expect_header_error(R"({"x": {"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", d4,
                      {"'x'", "data_offsets"});
  expect_header_error(R"({"x": {"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", d4,
                      {"'x'", "data_offsets"});
  expect_header_error(R"({"x": {"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", d4,
                      {"'x'", "outside"});
  expect_header_error(R"({"x": {"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d4,
                      {"'x'", "outside"});
  expect_header_error(
      R"({"x": {"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", d4, {"'x'"});
  expect_header_error(R"({"x": {"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", d4,
                      {"'x'", "does not match"});
  expect_header_error(R"({"x": {"dtype":"BF16","shape":[1],"data_offsets":[0,4]}})", d4,
                      {"'x'", "does not match"});
  expect_header_error(R"({"": {"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d4,
                      {"empty name"});
}

TEST(SafetensorsMalformed, OverlapsDuplicatesAndMetadata) {
  const Bytes d8 = testing::iota_bytes(8);
  const std::string a = R"("a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_header_error("{" + a + R"(, "b": {"dtype":"I16","shape":[2],"data_offsets":[2,6]}})", d8,
                      {"overlaps"});
  expect_header_error("{" + a + R"(, "b": {"dtype":"F32","shape":[0],"data_offsets":[2,2]}})", d8,
                      {"overlaps"});
  expect_header_error("{" + a + "," + a + "}", d8, {"duplicate", "'a'"});
  expect_header_error("{" + a + R"(, "__metadata__": 3})", d8, {"__metadata__"});
  expect_header_error("{" + a + R"(, "__metadata__": {"k": 1}})", d8, {"__metadata__", "'k'"});
  expect_header_error("{" + a + R"(, "__metadata__": {}, "__metadata__": {}})", d8,
                      {"__metadata__"});
  // Holes in the data section are tolerated; so is an empty header.
  EXPECT_TRUE(parse_and_touch(
                  safetensors_bytes(
                      "{" + a + R"(, "b": {"dtype":"F16","shape":[1],"data_offsets":[6,8]}})", d8))
                  .ok());
  EXPECT_TRUE(parse_and_touch(safetensors_bytes("{}", {})).ok());
}

TEST(SafetensorsMalformed, FileBytesInMessagesAreEscaped) {
  // JSON escapes put a CR, an ESC and a bidi override into names and dtypes; errors quote them
  // escaped, so a message stays one plain line.
  const Bytes d8 = testing::iota_bytes(8);
  const std::string a = R"("a\r\u001b[2J": {"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_header_error("{" + a + "," + a + "}", d8, {"duplicate tensor name 'a\\r\\x1B[2J'"});
  expect_header_error(R"({"w": {"dtype":"F\r32\u202e","shape":[1],"data_offsets":[0,4]}})", d8,
                      {"unknown dtype 'F\\r32\\u202E'"});
  expect_header_error("{" + a + R"(, "__metadata__": {"k\n": 1}})", d8, {"'k\\n'"});
  for (const std::string& header :
       {"{" + a + "," + a + "}",
        std::string(R"({"w": {"dtype":"F\r32","shape":[1],"data_offsets":[0,4]}})")}) {
    const Status s = parse_and_touch(safetensors_bytes(header, d8));
    for (unsigned char c : s.message()) EXPECT_TRUE(c >= 0x20 && c != 0x7F) << s.message();
  }
}

// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kvasir_st_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  void write(const std::string& name, const Bytes& b) const {
    std::ofstream(path_ + "/" + name, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  void write(const std::string& name, const std::string& s) const {
    std::ofstream(path_ + "/" + name, std::ios::binary) << s;
  }

 private:
  std::string path_;
};

TEST(SafetensorsShards, OpensShardedDirectory) {
  TempDir dir;
  dir.write("model-00001-of-00002.safetensors",
            safetensors_bytes({{"a.weight", "F32", {2}, testing::iota_bytes(8)},
                               {"b.weight", "BF16", {2, 2}, testing::iota_bytes(8)}}));
  dir.write("model-00002-of-00002.safetensors",
            safetensors_bytes({{"c.weight", "F16", {4}, testing::iota_bytes(8, 50)}}));
  dir.write("model.safetensors.index.json", R"({"metadata": {"total_size": 24}, "weight_map": {
      "a.weight": "model-00001-of-00002.safetensors",
      "b.weight": "model-00001-of-00002.safetensors",
      "c.weight": "model-00002-of-00002.safetensors"}})");
  auto src = open_weights(dir.path());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->format(), WeightFormat::kSafetensors);
  EXPECT_EQ((*src)->tensor_names(), (std::vector<std::string>{"a.weight", "b.weight", "c.weight"}));
  auto c = (*src)->tensor("c.weight");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(c->data[0], 50);
  EXPECT_EQ((*src)->tensor("b.weight")->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_FALSE((*src)->has_tensor("d.weight"));
  EXPECT_EQ((*src)->gguf(), nullptr);
}

TEST(SafetensorsShards, SingleFileDirectory) {
  TempDir dir;
  dir.write("model.safetensors", safetensors_bytes(sample_tensors()));
  auto src = open_weights(dir.path());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->tensor_names().size(), 6u);
  auto direct = open_weights(dir.path() + "/model.safetensors");
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  EXPECT_TRUE((*direct)->has_tensor("model.norm.weight"));
}

TEST(SafetensorsShards, BadIndexes) {
  TempDir dir;
  dir.write("s1.safetensors", safetensors_bytes({{"a", "F32", {1}, testing::iota_bytes(4)}}));
  auto open_with = [&](const std::string& index) {
    dir.write("model.safetensors.index.json", index);
    return open_weights(dir.path()).status();
  };
  Status s = open_with(R"({"weight_map": {"a": "../s1.safetensors"}})");
  EXPECT_NE(s.message().find("invalid shard"), std::string::npos) << s.message();
  s = open_with(R"({"weight_map": {"a": "/etc/passwd"}})");
  EXPECT_NE(s.message().find("invalid shard"), std::string::npos) << s.message();
  s = open_with(R"({"weight_map": {"a": "missing.safetensors"}})");
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.message();
  s = open_with(R"({"weight_map": {"b": "s1.safetensors"}})");
  EXPECT_NE(s.message().find("'b'"), std::string::npos) << s.message();
  s = open_with(R"({"weight_map": {"a": 1}})");
  EXPECT_NE(s.message().find("'a'"), std::string::npos) << s.message();
  s = open_with(R"({"weight_map": []})");
  EXPECT_NE(s.message().find("weight_map"), std::string::npos) << s.message();
  s = open_with("not json");
  EXPECT_NE(s.message().find("JSON"), std::string::npos) << s.message();
  TempDir empty;
  EXPECT_EQ(open_weights(empty.path()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(open_weights(empty.path() + "/nothing.gguf").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvasir
