#include "dist/host_identity.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

namespace kvasir::dist {
namespace {

std::string first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::string link_target(const char* path) {
  char buf[128];
  const ssize_t n = readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}

}  // namespace

std::string this_host_id() {
  if (const char* id = std::getenv("KVASIR_HOST_ID"); id != nullptr && *id != '\0') return id;
  char name[65] = {};
  gethostname(name, sizeof(name) - 1);
  // The namespaces matter only where they are the kernel's own: a process whose /proc does not
  // show them gets "?" on every rank of its host alike.
  return first_line("/proc/sys/kernel/random/boot_id") + "/" + link_target("/proc/self/ns/net") + "/" +
         link_target("/proc/self/ns/mnt") + "/" + name;
}

HostMap::HostMap(const std::vector<std::string>& ids) {
  std::map<std::string, int> number;
  host_of_rank_.reserve(ids.size());
  for (const std::string& id : ids) {
    auto [it, fresh] = number.emplace(id, static_cast<int>(number.size()));
    host_of_rank_.push_back(it->second);
  }
  num_hosts_ = static_cast<int>(number.size());
}

int HostMap::local_rank(int rank) const {
  return static_cast<int>(std::count(host_of_rank_.begin(), host_of_rank_.begin() + rank, host_of_rank_[rank]));
}

int HostMap::ranks_on_host(int rank) const {
  return static_cast<int>(std::count(host_of_rank_.begin(), host_of_rank_.end(), host_of_rank_[rank]));
}

bool HostMap::on_one_host(const std::vector<int>& ranks) const {
  if (ranks.empty()) return true;
  return std::all_of(ranks.begin(), ranks.end(), [&](int r) { return host_of_rank_[r] == host_of_rank_[ranks[0]]; });
}

StatusOr<HostMap> exchange_host_ids(Communicator& world, const std::string& mine) {
  if (mine.empty() || mine.size() > HostMap::kMaxIdBytes)
    return invalid_argument("host id '" + mine + "' must have 1 to " + std::to_string(HostMap::kMaxIdBytes) +
                            " bytes");
  constexpr size_t kSlot = HostMap::kMaxIdBytes + 1;  // NUL-terminated
  char slot[kSlot] = {};
  std::memcpy(slot, mine.data(), mine.size());
  std::vector<char> all(kSlot * static_cast<size_t>(world.world_size()));
  KVASIR_RETURN_IF_ERROR(world.all_gather(slot, all.data(), kSlot));
  std::vector<std::string> ids;
  for (int r = 0; r < world.world_size(); ++r) {
    const char* s = all.data() + kSlot * static_cast<size_t>(r);
    ids.emplace_back(s, strnlen(s, kSlot));
  }
  return HostMap(ids);
}

}  // namespace kvasir::dist
