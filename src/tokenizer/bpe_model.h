// BpeModel: turns one pre-tokenized word into token ids by byte-pair merges, the HF `tokenizers`
// BPE model: characters -> symbols (with byte fallback <0xNN> or unk for characters outside the
// vocabulary), then repeatedly the adjacent pair with the best merge rank (ties: leftmost) is
// merged, using a heap over a linked list of symbols. Ranks come from a merges list (GPT-2 style)
// or from piece scores (SentencePiece/llama.cpp style, higher score first). Immutable after
// construction, so one model serves concurrent encodes. Must not split text into words.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvasir::tok {

struct BpeOptions {
  bool byte_fallback = false;   // unknown characters -> <0xNN> tokens
  bool fuse_unk = false;        // consecutive unknown characters -> one unk
  bool ignore_merges = false;   // a word that is itself in the vocabulary skips merging
  int32_t unk_id = -1;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Reusable buffers for encode(): one per encoding call, so the hot loop does not allocate.
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BpeModel {
 public:
  BpeModel() = default;

  // `vocab`: token -> id (ids may be sparse). `merges`: pairs in rank order.
  static StatusOr<BpeModel> from_merges(TokenMap vocab,
                                        const std::vector<std::pair<std::string, std::string>>& merges,
                                        BpeOptions options);
  // SentencePiece BPE: tokens[i] has id i. Every split of a token into two tokens is a merge;
  // merges are ranked as HF derives them from a vocabulary (transformers' generate_merges):
  // higher score of the merged token first, then longer left piece, then longer right piece, then
  // token id and piece ids.
  static StatusOr<BpeModel> from_scores(const std::vector<std::string>& tokens,
                                        const std::vector<float>& scores, BpeOptions options);

  // Appends the ids of `word` to out.
  void encode(std::string_view word, BpeScratch* scratch, std::vector<int32_t>* out) const;

  int32_t token_to_id(std::string_view token) const;  // -1 when absent
  const std::string* id_to_token(int32_t id) const;   // nullptr when absent
  // One past the largest id.
  size_t vocab_size() const { return id_to_token_.size(); }
  size_t num_merges() const { return merges_.size(); }
  const BpeOptions& options() const { return options_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  // Open-addressing map (pair key -> Merge): the merge lookup is the hottest line of encoding,
  // and std::unordered_map's node chasing costs a cache miss per probe.
  class MergeTable {
   public:
    void build(const std::vector<std::pair<uint64_t, Merge>>& entries);
    const Merge* find(uint64_t key) const {
      if (slots_.empty()) return nullptr;
      for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
        const Slot& s = slots_[i];
        if (s.key == key) return &s.merge;
        if (s.key == kEmpty) return nullptr;
      }
    }
    size_t size() const { return size_; }

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative: never a real key
    struct Slot {
      uint64_t key = kEmpty;
      Merge merge{};
    };
    static size_t hash(uint64_t k) {
      k ^= k >> 33;
      k *= 0xff51afd7ed558ccdULL;
      k ^= k >> 33;
      return static_cast<size_t>(k);
    }
    std::vector<Slot> slots_;
    size_t mask_ = 0;
    size_t size_ = 0;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Merge* find_merge(int32_t a, int32_t b) const;
  void build_lookup_tables();
  // Initial symbols of `word` (characters, byte fallback, unk) into scratch->symbols.
  void init_symbols(std::string_view word, BpeScratch* scratch) const;
  void push_candidate(BpeScratch* scratch, int32_t pos) const;

  TokenMap token_to_id_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  MergeTable merges_;
  std::vector<int32_t> bmp_ids_;           // single-code-point tokens below U+10000
  std::vector<int32_t> byte_fallback_ids_;  // <0xNN> ids, -1 when missing
  bool plain_chars_ = true;                 // no subword prefix / suffix decoration
  BpeOptions options_;
};

}  // namespace kvasir::tok
