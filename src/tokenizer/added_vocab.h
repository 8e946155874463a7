// AddedVocab: the added/special tokens that HF `tokenizers` cuts out of the input before
// normalization and pre-tokenization, with leftmost-longest matching and the lstrip, rstrip,
// single_word and normalized flags. Matching walks a byte trie from each candidate start, gated by
// a first-byte table, so plain text costs one table lookup per byte. Must not encode the text
// between matches.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

class AddedVocab {
 public:
  struct Segment {
    size_t begin;
    size_t end;
    int32_t id;  // -1: text to encode
  };

  // `normalized_contents[i]` is tokens[i].content after the tokenizer's normalizer (used for
  // tokens with normalized = true, which match against normalized text).
  void build(std::vector<AddedToken> tokens, const std::vector<std::string>& normalized_contents);

  bool empty() const { return tokens_.empty(); }
  bool has_normalized() const { return normalized_.root_used; }
  // Covers `text` with segments: matches of the raw set (normalized = false) or of the
  // normalized set, and the text between them. Empty text gives no segments.
  void split(std::string_view text, bool normalized_set, std::vector<Segment>* out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token = -1;  // index into tokens_ when a token ends here
    };
    std::vector<Node> nodes{Node{}};
    std::array<bool, 256> first_byte{};
    bool root_used = false;
    void insert(std::string_view key, int32_t token);
    void finalize();
    // Longest token starting at text[pos]: its index and end, or -1.
    int32_t longest_at(std::string_view text, size_t pos, size_t* end) const;
  };

  std::vector<AddedToken> tokens_;
  Trie raw_;
  Trie normalized_;
};

}  // namespace kvasir::tok
