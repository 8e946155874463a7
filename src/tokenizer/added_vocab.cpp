#include "tokenizer/added_vocab.h"

#include <algorithm>

#include "tokenizer/unicode_util.h"

namespace kvasir::tok {

void AddedVocab::Trie::insert(std::string_view key, int32_t token) {
  if (key.empty()) return;
  root_used = true;
  int32_t node = 0;
  for (char ch : key) {
    uint8_t c = static_cast<uint8_t>(ch);
    auto& kids = nodes[node].children;
    auto it = std::find_if(kids.begin(), kids.end(), [c](const auto& p) { return p.first == c; });
    if (it != kids.end()) {
      node = it->second;
    } else {
      int32_t child = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(c, child);  // may reallocate `nodes`: no references kept
      nodes.emplace_back();
      node = child;
    }
  }
  // Two tokens with the same content: the first one keeps the match (stable behaviour).
  if (nodes[node].token < 0) nodes[node].token = token;
  first_byte[static_cast<uint8_t>(key[0])] = true;
}

void AddedVocab::Trie::finalize() {
  for (Node& n : nodes) std::sort(n.children.begin(), n.children.end());
}

int32_t AddedVocab::Trie::longest_at(std::string_view text, size_t pos, size_t* end) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& kids = nodes[node].children;
    uint8_t c = static_cast<uint8_t>(text[i]);
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1}));
    if (it == kids.end() || it->first != c) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      *end = i + 1;
    }
  }
  return best;
}

void AddedVocab::build(std::vector<AddedToken> tokens,
                       const std::vector<std::string>& normalized_contents) {
  tokens_ = std::move(tokens);
  raw_ = Trie();
  normalized_ = Trie();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.normalized) {
      const std::string& key = i < normalized_contents.size() ? normalized_contents[i] : t.content;
      normalized_.insert(key, static_cast<int32_t>(i));
    } else {
      raw_.insert(t.content, static_cast<int32_t>(i));
    }
  }
  raw_.finalize();
  normalized_.finalize();
}

void AddedVocab::split(std::string_view text, bool normalized_set, std::vector<Segment>* out) const {
  if (text.empty()) return;
  const Trie& trie = normalized_set ? normalized_ : raw_;
  size_t start_offset = 0;  // end of the last accepted match
  size_t pos = 0;           // where the non-overlapping search resumes
  if (trie.root_used) {
    while (pos < text.size()) {
      if (!trie.first_byte[static_cast<uint8_t>(text[pos])]) {
        ++pos;
        continue;
      }
      size_t mend = 0;
      int32_t idx = trie.longest_at(text, pos, &mend);
      if (idx < 0) {
        ++pos;
        continue;
      }
      const AddedToken& tok = tokens_[idx];
      size_t start = pos, stop = mend;
      pos = mend;  // the search resumes after the match, even when it is discarded below
      size_t n = 0;
      if (tok.single_word) {
        bool start_ok = start == 0 || !is_word_char(last_code_point(text.substr(0, start), &n));
        bool stop_ok = stop == text.size() || !is_word_char(first_code_point(text.substr(stop), &n));
        if (!start_ok || !stop_ok) continue;
      }
      if (start < start_offset) continue;  // inside whitespace a previous match already took
      if (tok.lstrip) {
        size_t s = start;
        while (s > start_offset && is_whitespace(last_code_point(text.substr(0, s), &n))) s -= n;
        start = s;
      }
      if (tok.rstrip) {
        while (stop < text.size() && is_whitespace(first_code_point(text.substr(stop), &n))) stop += n;
      }
      if (start_offset < start) out->push_back({start_offset, start, -1});
      out->push_back({start, stop, tok.id});
      start_offset = stop;
      pos = std::max(pos, stop);
    }
  }
  if (start_offset < text.size()) out->push_back({start_offset, text.size(), -1});
}

}  // namespace kvasir::tok
