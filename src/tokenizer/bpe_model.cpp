#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>

#include "common/quoted_text.h"
#include "tokenizer/unicode_util.h"

namespace kvasir::tok {
namespace {

// Heap order: lowest rank first, then leftmost position (HF's Merge ordering).
struct CandidateAfter {
  bool operator()(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

std::string byte_token(int b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  return buf;
}

}  // namespace

StatusOr<BpeModel> BpeModel::from_merges(TokenMap vocab,
                                         const std::vector<std::pair<std::string, std::string>>& merges,
                                         BpeOptions options) {
  BpeModel m;
  m.options_ = std::move(options);
  m.token_to_id_ = std::move(vocab);
  int32_t max_id = -1;
  for (const auto& [tok, id] : m.token_to_id_) {
    if (id < 0) return invalid_argument("BPE vocabulary has a negative id for '" + quoted_text(tok) + "'");
    max_id = std::max(max_id, id);
  }
  m.id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  m.has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [tok, id] : m.token_to_id_) {
    m.id_to_token_[id] = tok;
    m.has_id_[id] = true;
  }
  const size_t prefix_len = m.options_.continuing_subword_prefix.size();
  std::vector<std::pair<uint64_t, Merge>> entries;
  entries.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    int32_t a_id = m.token_to_id(a);
    int32_t b_id = m.token_to_id(b);
    std::string merged = a;
    if (prefix_len > 0 && b.compare(0, prefix_len, m.options_.continuing_subword_prefix) == 0) {
      merged.append(b, prefix_len);
    } else {
      merged.append(b);
    }
    int32_t new_id = m.token_to_id(merged);
    if (a_id < 0 || b_id < 0 || new_id < 0) {
      return invalid_argument("BPE merge '" + quoted_text(a + " " + b) + "' uses a token outside the vocabulary");
    }
    entries.emplace_back(pair_key(a_id, b_id), Merge{static_cast<int32_t>(rank), new_id});
  }
  m.merges_.build(entries);
  m.build_lookup_tables();
  return m;
}

StatusOr<BpeModel> BpeModel::from_scores(const std::vector<std::string>& tokens,
                                         const std::vector<float>& scores, BpeOptions options) {
  if (scores.size() != tokens.size()) {
    return invalid_argument("SentencePiece vocabulary: tokens and scores differ in length");
  }
  BpeModel m;
  m.options_ = std::move(options);
  m.id_to_token_ = tokens;
  m.has_id_.assign(tokens.size(), true);
  m.token_to_id_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    m.token_to_id_[tokens[i]] = static_cast<int32_t>(i);  // later duplicates win, as a dict does
  }
  struct Candidate {
    float score;
    uint32_t left_chars, right_chars;
    int32_t left, right, merged;
  };
  auto num_chars = [](std::string_view s) {
    uint32_t n = 0;
    for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    return n;
  };
  std::vector<Candidate> all;
  std::vector<Candidate> local;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id];
    if (m.token_to_id(t) != static_cast<int32_t>(id)) continue;  // shadowed duplicate
    local.clear();
    for (size_t k = 1; k < t.size(); ++k) {
      if ((static_cast<uint8_t>(t[k]) & 0xC0) == 0x80) continue;  // not a character boundary
      std::string_view l = std::string_view(t).substr(0, k), r = std::string_view(t).substr(k);
      int32_t a = m.token_to_id(l);
      if (a < 0) continue;
      int32_t b = m.token_to_id(r);
      if (b < 0) continue;
      local.push_back({scores[id], num_chars(l), num_chars(r), a, b, static_cast<int32_t>(id)});
    }
    std::sort(local.begin(), local.end(), [](const Candidate& x, const Candidate& y) {
      return x.left != y.left ? x.left < y.left : x.right < y.right;
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  // Descending (score, left length, right length); ties keep vocabulary order (a stable sort).
  std::stable_sort(all.begin(), all.end(), [](const Candidate& x, const Candidate& y) {
    if (x.score != y.score) return x.score > y.score;
    if (x.left_chars != y.left_chars) return x.left_chars > y.left_chars;
    return x.right_chars > y.right_chars;
  });
  std::vector<std::pair<uint64_t, Merge>> entries;
  entries.reserve(all.size());
  for (size_t rank = 0; rank < all.size(); ++rank) {
    const Candidate& c = all[rank];
    entries.emplace_back(pair_key(c.left, c.right), Merge{static_cast<int32_t>(rank), c.merged});
  }
  m.merges_.build(entries);
  m.build_lookup_tables();
  return m;
}

void BpeModel::build_lookup_tables() {
  plain_chars_ = options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty();
  bmp_ids_.assign(0x10000, -1);
  for (size_t id = 0; id < id_to_token_.size(); ++id) {
    if (!has_id_[id]) continue;
    const std::string& t = id_to_token_[id];
    if (t.empty() || t.size() > 3) continue;
    size_t n = 0;
    uint32_t cp = first_code_point(t, &n);
    // Keep the id token_to_id would give, so that duplicates resolve the same way.
    if (n == t.size() && cp < 0x10000) bmp_ids_[cp] = token_to_id(t);
  }
  byte_fallback_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) byte_fallback_ids_[b] = token_to_id(byte_token(b));
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::MergeTable::build(const std::vector<std::pair<uint64_t, Merge>>& entries) {
  size_t cap = 16;
  while (cap < entries.size() * 2) cap <<= 1;  // load factor <= 1/2 keeps probes short
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
  for (const auto& [key, merge] : entries) {
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == key) break;  // a repeated pair: the first (best-ranked) one wins, as in HF
      if (s.key == kEmpty) {
        s.key = key;
        s.merge = merge;
        ++size_;
        break;
      }
    }
  }
}

const BpeModel::Merge* BpeModel::find_merge(int32_t a, int32_t b) const {
  return merges_.find(pair_key(a, b));
}

void BpeModel::init_symbols(std::string_view word, BpeScratch* scratch) const {
  auto& syms = scratch->symbols;
  syms.clear();
  auto add = [&](int32_t id, uint32_t len) {
    int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({id, idx - 1, -1, len});
    if (idx > 0) syms[idx - 1].next = idx;
  };
  int32_t unk_len = 0;  // pending unknown run (bytes), flushed before the next known symbol
  auto flush_unk = [&] {
    if (unk_len > 0) add(options_.unk_id, static_cast<uint32_t>(unk_len));
    unk_len = 0;
  };
  std::string decorated;
  for (size_t i = 0; i < word.size();) {
    size_t n = 0;
    uint32_t cp = first_code_point(word.substr(i), &n);
    std::string_view ch = word.substr(i, n);
    int32_t id = -1;
    if (plain_chars_) {
      id = cp < 0x10000 ? bmp_ids_[cp] : token_to_id(ch);
    } else {
      decorated.clear();
      if (i > 0) decorated += options_.continuing_subword_prefix;
      decorated += ch;
      if (i + n == word.size()) decorated += options_.end_of_word_suffix;
      id = token_to_id(decorated);
    }
    i += n;
    if (id >= 0) {
      flush_unk();
      add(id, static_cast<uint32_t>(n));
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        flush_unk();
        for (char c : ch) add(byte_fallback_ids_[static_cast<uint8_t>(c)], 1);
        continue;
      }
    }
    if (options_.unk_id < 0) continue;  // no unk token: HF drops the character
    if (!options_.fuse_unk) flush_unk();
    unk_len += static_cast<int32_t>(n);
  }
  flush_unk();
}

void BpeModel::push_candidate(BpeScratch* scratch, int32_t pos) const {
  const auto& syms = scratch->symbols;
  int32_t next = syms[pos].next;
  if (next < 0) return;
  const Merge* m = find_merge(syms[pos].id, syms[next].id);
  if (m == nullptr) return;
  scratch->heap.push_back({m->rank, pos, m->new_id});
  std::push_heap(scratch->heap.begin(), scratch->heap.end(), CandidateAfter{});
}

void BpeModel::encode(std::string_view word, BpeScratch* scratch, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    int32_t id = token_to_id(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  init_symbols(word, scratch);
  auto& syms = scratch->symbols;
  auto& heap = scratch->heap;
  heap.clear();
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) {
    const Merge* m = find_merge(syms[i].id, syms[i + 1].id);
    if (m != nullptr) heap.push_back({m->rank, i, m->new_id});
  }
  std::make_heap(heap.begin(), heap.end(), CandidateAfter{});
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandidateAfter{});
    BpeScratch::Candidate top = heap.back();
    heap.pop_back();
    auto& left = syms[top.pos];
    if (left.len == 0 || left.next < 0) continue;  // merged away, or now the last symbol
    int32_t right_pos = left.next;
    auto& right = syms[right_pos];
    // A stale entry: the pair at this position changed since it was queued.
    const Merge* now = find_merge(left.id, right.id);
    if (now == nullptr || now->new_id != top.new_id) continue;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) syms[left.next].prev = top.pos;
    if (left.prev >= 0) push_candidate(scratch, left.prev);
    push_candidate(scratch, top.pos);
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) out->push_back(syms[i].id);
}

}  // namespace kvasir::tok
