// ResponseStore: the /v1/responses results the server keeps so a later request can continue one
// (previous_response_id) or fetch it (GET /v1/responses/{id}): each response with the chat
// messages that produced it. Bounded in memory: at most `max_entries` responses and `max_bytes`
// of their JSON text, the least recently used dropped first; nothing survives a restart.
// Thread-safe (one mutex, held only to copy an entry in or out); must not parse or render.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/json.h"

namespace kvasir::server {

class ResponseStore {
 public:
  struct Entry {
    Json messages;  // the conversation before this response (OpenAI chat shape, no system messages)
    Json response;  // the response object as returned
  };

  ResponseStore(size_t max_entries, size_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // Keeps `e` under `id` (replacing one there), evicting the least recently used past the bounds.
  // An entry larger than max_bytes on its own is not kept. False when nothing was kept.
  bool put(const std::string& id, Entry e);
  // A copy of the entry, now the most recently used; nullopt when unknown (or evicted).
  std::optional<Entry> get(const std::string& id);
  bool erase(const std::string& id);
  size_t size() const;
  size_t bytes() const;

 private:
  struct Slot {
    std::string id;
    Entry entry;
    size_t bytes = 0;
  };
  void evict_locked();

  const size_t max_entries_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Slot> lru_;  // front: most recently used
  std::unordered_map<std::string, std::list<Slot>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace kvasir::server
