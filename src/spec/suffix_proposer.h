// SuffixProposer: the `suffix` method (vLLM's suffix decoding) behind the Proposer interface. The
// trees live in SuffixDecoding (suffix_decoding.h); this adapter feeds them what the runner's
// proposal calls reveal: a request seen for the first time starts with its prompt, each later call
// appends the output tokens accepted since the previous one, and finish_request moves the output
// into the global tree of recent outputs. Rejected drafts never reach it (the history it is given
// holds accepted tokens only).
#pragma once

#include <string>
#include <unordered_map>

#include "spec/proposer.h"
#include "spec/suffix_decoding.h"

namespace kvasir {

class SuffixProposer final : public Proposer {
 public:
  // config must be valid (SuffixDecodingConfig::validate()).
  explicit SuffixProposer(const SuffixDecodingConfig& config);
  void propose(const ProposalContext& ctx, int max_num_drafts, std::vector<TokenId>* drafts) override;
  void finish_request(std::string_view req_id) override;

  const SuffixDecoding& trees() const { return trees_; }

 private:
  struct Tracked {
    RequestIdx idx = 0;
    size_t num_seen = 0;  // history tokens already in the request's tree
  };
  // The request's tree brought up to ctx's history; null when the history cannot be added (a
  // negative token id: then it is not proposed for).
  Tracked* track(const ProposalContext& ctx);

  SuffixDecoding trees_;
  std::unordered_map<std::string, Tracked> tracked_;
  RequestIdx next_idx_ = 0;
  SuffixDraft draft_;  // reused: a proposal allocates nothing once it has held the longest draft
};

}  // namespace kvasir
