#include "spec/suffix_tree.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "common/check.h"

namespace kvasir {

SuffixTree::SuffixTree(int max_depth) : max_depth_(max_depth) {
  KVASIR_CHECK_MSG(max_depth >= 1, "a suffix tree needs max_depth >= 1");
  nodes_.push_back(Node{});  // the root
}

SuffixTree::Cursor SuffixTree::new_cursor() const {
  Cursor cursor;
  cursor.open_.assign(static_cast<size_t>(max_depth_), kNone);
  cursor.removal_epoch_ = removal_epoch_;
  return cursor;
}

void SuffixTree::append(Cursor& cursor, TokenId token) {
  KVASIR_CHECK_MSG(
      cursor.removal_epoch_ == removal_epoch_ && cursor.open_.size() == static_cast<size_t>(max_depth_),
      "suffix tree cursor used after a removal or on another tree");
  // Every open suffix grows by the token (the longest falls off once it reaches max_depth), and the
  // token alone starts a new one: open_[j] becomes child(open_[j-1], token). Longest first, so
  // open_[j-1] is read before it is overwritten. Once one of these children already exists, every
  // shorter one does too (a run's suffixes occur wherever it does) and is its suffix link away, so
  // only the new nodes cost a hash lookup.
  std::vector<int32_t>& open = cursor.open_;
  const int num_extend = std::min(cursor.num_open_, max_depth_ - 1);
  int found = -1;  // the longest level whose child existed
  for (int j = num_extend; j >= 0; --j) {
    const int32_t parent = j == 0 ? kRoot : open[static_cast<size_t>(j) - 1];
    int32_t child;
    if (found >= 0) {
      child = nodes_[static_cast<size_t>(open[static_cast<size_t>(j) + 1])].suffix_link;
    } else {
      child = find_child(parent, token);
      if (child == kNone) {
        child = new_child(parent, token);
      } else {
        found = j;
      }
    }
    bump(parent, child);
    open[static_cast<size_t>(j)] = child;
  }
  for (int j = num_extend; j > found; --j) {
    nodes_[static_cast<size_t>(open[static_cast<size_t>(j)])].suffix_link =
        j == 0 ? kRoot : open[static_cast<size_t>(j) - 1];
  }
  cursor.num_open_ = num_extend + 1;
  num_tokens_++;
}

void SuffixTree::append(Cursor& cursor, std::span<const TokenId> tokens) {
  for (TokenId t : tokens) append(cursor, t);
}

void SuffixTree::insert_sequence(std::span<const TokenId> tokens) {
  Cursor cursor = new_cursor();
  append(cursor, tokens);
}

void SuffixTree::remove_sequence(std::span<const TokenId> tokens) {
  removal_epoch_++;
  const size_t n = tokens.size();
  KVASIR_CHECK_MSG(num_tokens_ >= static_cast<int64_t>(n), "removing more tokens than held");
  // insert counted each run tokens[j, j+len) with len <= max_depth once; walk the same runs by their
  // start. Along one path a child never counts more than its parent, so the nodes that reach 0 are
  // the path's lower end, freed bottom-up.
  for (size_t j = 0; j < n; ++j) {
    num_tokens_--;
    const size_t len = std::min(static_cast<size_t>(max_depth_), n - j);
    int32_t node = kRoot;
    for (size_t k = 0; k < len; ++k) {
      int32_t child = find_child(node, tokens[j + k]);
      KVASIR_CHECK_MSG(child != kNone, "removing a sequence the suffix tree does not hold");
      Node& c = nodes_[static_cast<size_t>(child)];
      KVASIR_CHECK(c.count > 0);
      c.count--;
      if (node != kRoot && nodes_[static_cast<size_t>(node)].best_child == child) rescan_best_child(node);
      node = child;
    }
    while (node != kRoot && nodes_[static_cast<size_t>(node)].count == 0) {
      int32_t parent = nodes_[static_cast<size_t>(node)].parent;
      free_node(node);
      node = parent;
    }
  }
}

int32_t SuffixTree::count(std::span<const TokenId> pattern) const {
  if (pattern.empty() || pattern.size() > static_cast<size_t>(max_depth_)) return 0;
  int32_t node = find_path(pattern);
  return node == kNone ? 0 : nodes_[static_cast<size_t>(node)].count;
}

int SuffixTree::longest_match_len(std::span<const TokenId> context) const {
  return match_suffix(context).len;
}

SuffixTree::Match SuffixTree::match_suffix(std::span<const TokenId> context) const {
  // Matching statistics: read the context left to right keeping the longest suffix read so far that
  // the tree holds; when the next token cannot extend it, drop its first token (the suffix link)
  // and try again. O(context) lookups instead of a walk from the root per suffix length.
  Match match{kRoot, 0};
  for (TokenId t : context.last(std::min(context.size(), static_cast<size_t>(max_depth_)))) {
    for (;;) {
      int32_t child = match.len < max_depth_ ? find_child(match.node, t) : kNone;
      if (child != kNone) {
        match.node = child;
        match.len++;
        break;
      }
      if (match.node == kRoot) break;
      match.node = nodes_[static_cast<size_t>(match.node)].suffix_link;
      match.len--;
    }
  }
  return match;
}

SuffixTree::Candidate SuffixTree::best_candidate(std::span<const TokenId> context,
                                                 const SuffixSpeculateParams& params) const {
  KVASIR_CHECK(params.max_tokens >= 0);
  // Every suffix of the longest match also occurs; visit them longest first through suffix links,
  // so the longer match wins a tie.
  Match match = match_suffix(context);
  Candidate best;
  int32_t node = match.node;
  for (int m = match.len; m >= 1; --m, node = nodes_[static_cast<size_t>(node)].suffix_link) {
    // The epsilon keeps a factor like 0.1 * 10 from flooring to 0.
    double allowed = std::floor(params.max_spec_factor * m + params.max_spec_offset + 1e-6);
    int max_tokens = static_cast<int>(std::clamp(allowed, 0.0, static_cast<double>(params.max_tokens)));
    // Each token adds at most 1 to a score, and shorter matches may draft no more: once the cap
    // cannot beat the best score strictly, no shorter match can either.
    if (best.node != kNone && max_tokens <= best.score) break;
    double score = 0.0;
    grow(node, max_tokens, params.min_token_prob, nullptr, &score);
    if (best.node == kNone || score > best.score) best = Candidate{node, m, max_tokens, score};
  }
  return best;
}

void SuffixTree::append_draft(const Candidate& candidate, double min_token_prob,
                              std::vector<TokenId>* out) const {
  if (candidate.node == kNone) return;
  double score = 0.0;
  grow(candidate.node, candidate.max_tokens, min_token_prob, out, &score);
  KVASIR_CHECK_MSG(score == candidate.score, "suffix tree candidate used after the tree changed");
}

SuffixDraft SuffixTree::speculate(std::span<const TokenId> context,
                                  const SuffixSpeculateParams& params) const {
  Candidate best = best_candidate(context, params);
  SuffixDraft draft;
  draft.match_len = best.match_len;
  draft.score = best.score;
  append_draft(best, params.min_token_prob, &draft.token_ids);
  return draft;
}

int SuffixTree::grow(int32_t node, int max_tokens, double min_token_prob, std::vector<TokenId>* out,
                     double* score) const {
  double prob = 1.0;
  double total = 0.0;
  int k = 0;
  while (k < max_tokens) {
    const Node& n = nodes_[static_cast<size_t>(node)];
    if (n.best_child == kNone) break;
    const Node& c = nodes_[static_cast<size_t>(n.best_child)];
    prob *= static_cast<double>(c.count) / n.count;
    if (prob < min_token_prob) break;
    if (out != nullptr) out->push_back(c.token);
    total += prob;
    ++k;
    node = n.best_child;
  }
  *score = total;
  return k;
}

bool SuffixTree::better(int32_t a, int32_t b) const {
  const Node& x = nodes_[static_cast<size_t>(a)];
  const Node& y = nodes_[static_cast<size_t>(b)];
  return x.count > y.count || (x.count == y.count && x.token < y.token);
}

int32_t SuffixTree::new_child(int32_t parent, TokenId token) {
  int32_t child;
  if (free_head_ != kNone) {
    child = free_head_;
    free_head_ = nodes_[static_cast<size_t>(child)].next_sibling;
  } else {
    KVASIR_CHECK_MSG(nodes_.size() < static_cast<size_t>(INT32_MAX), "suffix tree past 2^31 nodes");
    child = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& c = nodes_[static_cast<size_t>(child)];
  c = Node{};
  c.token = token;
  c.parent = parent;
  Node& p = nodes_[static_cast<size_t>(parent)];
  c.next_sibling = p.first_child;
  if (p.first_child != kNone) nodes_[static_cast<size_t>(p.first_child)].prev_sibling = child;
  p.first_child = child;
  children_.insert(parent, token, child);
  num_live_++;
  return child;
}

void SuffixTree::bump(int32_t parent, int32_t child) {
  int32_t& count = nodes_[static_cast<size_t>(child)].count;
  KVASIR_CHECK_MSG(count < INT32_MAX, "suffix tree count past 2^31");
  count++;
  // Only this child grew, so it either stays behind the best or becomes it.
  if (parent != kRoot) {
    int32_t& best = nodes_[static_cast<size_t>(parent)].best_child;
    if (best == kNone || better(child, best)) best = child;
  }
}

void SuffixTree::free_node(int32_t id) {
  Node& n = nodes_[static_cast<size_t>(id)];
  KVASIR_CHECK(n.count == 0 && n.first_child == kNone);
  children_.erase(n.parent, n.token);
  Node& p = nodes_[static_cast<size_t>(n.parent)];
  if (n.prev_sibling != kNone) {
    nodes_[static_cast<size_t>(n.prev_sibling)].next_sibling = n.next_sibling;
  } else {
    p.first_child = n.next_sibling;
  }
  if (n.next_sibling != kNone) nodes_[static_cast<size_t>(n.next_sibling)].prev_sibling = n.prev_sibling;
  // The parent's best was rescanned when this child dropped; a zero-count child is never chosen.
  KVASIR_CHECK(p.best_child != id);
  n = Node{};
  n.next_sibling = free_head_;
  free_head_ = id;
  num_live_--;
}

void SuffixTree::rescan_best_child(int32_t parent) {
  int32_t best = kNone;
  for (int32_t c = nodes_[static_cast<size_t>(parent)].first_child; c != kNone;
       c = nodes_[static_cast<size_t>(c)].next_sibling) {
    if (nodes_[static_cast<size_t>(c)].count > 0 && (best == kNone || better(c, best))) best = c;
  }
  nodes_[static_cast<size_t>(parent)].best_child = best;
}

int32_t SuffixTree::find_path(std::span<const TokenId> pattern) const {
  int32_t node = kRoot;
  for (TokenId t : pattern) {
    node = find_child(node, t);
    if (node == kNone) return kNone;
  }
  return node;
}

int32_t SuffixTree::find_child(int32_t parent, TokenId token) const { return children_.find(parent, token); }

void SuffixTree::check_invariants() const {
  int64_t live = 0;
  std::vector<int> depth(nodes_.size(), -1);
  depth[kRoot] = 0;
  // Walk the tree through the sibling lists (every node is reachable, every child points back).
  std::vector<int32_t> stack = {kRoot};
  while (!stack.empty()) {
    int32_t id = stack.back();
    stack.pop_back();
    const Node& n = nodes_[static_cast<size_t>(id)];
    int64_t child_sum = 0;
    int32_t best = kNone;
    int32_t prev = kNone;
    for (int32_t c = n.first_child; c != kNone; c = nodes_[static_cast<size_t>(c)].next_sibling) {
      const Node& cn = nodes_[static_cast<size_t>(c)];
      KVASIR_CHECK(cn.parent == id && cn.prev_sibling == prev && cn.count > 0);
      KVASIR_CHECK(find_child(id, cn.token) == c);
      // The link drops the first token: the root for one token, else the parent's link's child.
      KVASIR_CHECK(cn.suffix_link == (id == kRoot ? kRoot : find_child(n.suffix_link, cn.token)));
      child_sum += cn.count;
      if (best == kNone || better(c, best)) best = c;
      depth[static_cast<size_t>(c)] = depth[static_cast<size_t>(id)] + 1;
      KVASIR_CHECK(depth[static_cast<size_t>(c)] <= max_depth_);
      stack.push_back(c);
      prev = c;
      live++;
    }
    // Each occurrence of a run continues into at most one child.
    KVASIR_CHECK(child_sum <= (id == kRoot ? num_tokens_ : n.count));
    if (id != kRoot) KVASIR_CHECK(n.best_child == best);
  }
  KVASIR_CHECK(live == num_live_ && live == children_.size());
  children_.check_invariants();
  int64_t num_free = 0;
  for (int32_t f = free_head_; f != kNone; f = nodes_[static_cast<size_t>(f)].next_sibling) {
    KVASIR_CHECK(depth[static_cast<size_t>(f)] == -1);
    num_free++;
  }
  KVASIR_CHECK(num_free + live + 1 == static_cast<int64_t>(nodes_.size()));
  KVASIR_CHECK(num_live_ <= num_tokens_ * max_depth_);
}

}  // namespace kvasir
