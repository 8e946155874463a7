// Decoder: turns token strings back into text with HF `tokenizers` decode_chain semantics:
// Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, WordPiece's cleanup.
// `continuation` decodes a slice that follows already-decoded text: start-of-text rules
// (Metaspace dropping the first token's marker, Strip on the fused text's start) are skipped,
// which is what the incremental detokenizer needs. Must not map ids to strings (the Tokenizer
// does that).
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "tokenizer/pattern.h"

namespace kvasir::tok {

class Decoder {
 public:
  // `j` is the tokenizer.json "decoder" value; null joins tokens with spaces (HF's default).
  static StatusOr<Decoder> from_json(const Json& j);

  void add_byte_level();
  void add_replace(Pattern pattern, std::string content);
  void add_byte_fallback();
  void add_fuse();
  void add_strip(std::string content, int start, int stop);
  // HF WordPiece decoder's `cleanup` on each token: " ." -> ".", " n't" -> "n't", ...
  void add_cleanup();

  bool has_byte_fallback() const { return has_byte_fallback_; }
  std::string decode(std::vector<std::string> tokens, bool continuation) const;

  // The bytes one token adds to decoded text that it continues: decode({token}, true) without
  // the lossy UTF-8 repair (a byte-level or <0xNN> token holding part of a character gives those
  // bytes, not U+FFFD). What a grammar engine matches tokens against.
  std::string token_bytes(std::string token) const;
  // Whether decode(tokens, true) is the concatenation of each token's token_bytes (then valid
  // UTF-8): false for WordPiece cleanup, a Strip of the text's end after a join, and no decoder
  // (tokens joined with spaces).
  bool per_token() const;

 private:
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace, kCleanup };
  struct Step {
    Kind kind;
    Pattern pattern;      // kReplace
    std::string content;  // kReplace replacement, kStrip character, kMetaspace replacement
    int start = 0;        // kStrip
    int stop = 0;
    bool prepend = true;  // kMetaspace: the encoder added a marker in front of the text
  };
  Status add_from_json(const Json& j);

  std::vector<Step> steps_;
  bool configured_ = false;  // false: no decoder in the file
  bool has_byte_fallback_ = false;
};

}  // namespace kvasir::tok
