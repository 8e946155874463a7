#include "api/tensor_parallel_group.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include <algorithm>

#include "api/multiprocess_executor.h"
#include "api/rank_setup.h"
#include "common/log.h"
#include "executor/in_process_executor.h"
#include "executor/step_broadcast.h"
#include "dist/shm_communicator.h"
#include "dist/tcp_communicator.h"
#include "dist/tcp_socket.h"

extern char** environ;

namespace kvasir {
namespace {

constexpr const char* kRankEnv = "KVASIR_TP_RANK";
constexpr const char* kGroupEnv = "KVASIR_TP_GROUP";
constexpr const char* kTcpGroupId = "kvasir-tp";  // every node derives the same one
constexpr int64_t kJoinTimeoutMs = 60'000;

StatusOr<std::unique_ptr<dist::Communicator>> join_shm(const std::string& group, const LaunchPlan& plan,
                                                       std::function<Status()> while_attaching = nullptr) {
  dist::ShmCommunicatorOptions o;
  o.group_id = group;
  o.rank = plan.rank;
  o.world_size = plan.world_size;
  o.busy_wait_us = plan.busy_wait_us;
  o.timeout_ms = kJoinTimeoutMs;
  o.while_attaching = std::move(while_attaching);
  KVASIR_ASSIGN_OR_RETURN(auto c, dist::ShmCommunicator::create(o));
  return std::unique_ptr<dist::Communicator>(std::move(c));
}

// listen_fd: rank 0's already bound listener, or -1.
StatusOr<std::unique_ptr<dist::TcpCommunicator>> join_tcp(const LaunchPlan& plan, int listen_fd,
                                                          std::function<Status()> while_attaching) {
  dist::TcpCommunicatorOptions o;
  o.master_addr = plan.master_addr;
  o.master_port = plan.master_port;
  o.listen_fd = listen_fd;
  o.group_id = kTcpGroupId;
  o.rank = plan.rank;
  o.world_size = plan.world_size;
  o.timeout_ms = kJoinTimeoutMs;
  o.while_attaching = std::move(while_attaching);
  return dist::TcpCommunicator::create(o);
}

// This program's own arguments, as the kernel has them.
StatusOr<std::vector<std::string>> own_arguments() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  if (!f) return unavailable("tensor parallelism: cannot read /proc/self/cmdline to start the workers");
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return args;
}

// Starts ranks first..first+count-1 as this program with these arguments; their pids go to `pids`
// as they start (so a failure part-way still leaves them to be waited for).
Status start_workers(int first, int count, const std::string& group, std::vector<pid_t>& pids) {
  if (count == 0) return Status();
  KVASIR_ASSIGN_OR_RETURN(std::vector<std::string> args, own_arguments());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (int rank = first; rank < first + count; ++rank) {
    std::vector<std::string> env_strings = {std::string(kRankEnv) + "=" + std::to_string(rank),
                                            std::string(kGroupEnv) + "=" + group};
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      if (kv.rfind(std::string(kRankEnv) + "=", 0) != 0 && kv.rfind(std::string(kGroupEnv) + "=", 0) != 0)
        env_strings.push_back(kv);
    }
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    // Not the launching process's stdin: prompts read from it are rank 0's alone.
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, "/proc/self/exe", &files, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&files);
    if (rc != 0) return unavailable("tensor parallelism: cannot start worker rank " + std::to_string(rank));
    pids.push_back(pid);
  }
  return Status();
}

// While the group forms: a worker this process started that exits before joining (a bad flag, a
// model it cannot load) is named at once instead of after the join timeout.
std::function<Status()> watch_started(std::vector<pid_t>& workers, int first_started) {
  return [&workers, first_started]() -> Status {
    for (size_t i = 0; i < workers.size(); ++i) {
      int status = 0;
      if (workers[i] > 0 && waitpid(workers[i], &status, WNOHANG) == workers[i]) {
        workers[i] = -1;
        return unavailable("tensor parallelism: worker rank " + std::to_string(first_started + static_cast<int>(i)) +
                           " exited (status " +
                           std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) +
                           ") before joining the group; see its message above");
      }
    }
    return Status();
  };
}

}  // namespace

StatusOr<std::unique_ptr<TensorParallelProcesses>> form_tensor_parallel_group(const LaunchPlan& plan) {
  auto group = std::make_unique<TensorParallelProcesses>();
  const int first_started = plan.rank + 1;
  group->over_tcp = plan.tcp;
  group->local_rank = plan.local_rank;
  group->ranks_on_host = plan.ranks_on_host;
  if (plan.tcp) {
    // Rank 0 claims the rendezvous port before anyone dials it, so "in use" is its first word.
    int listen_fd = -1;
    if (plan.rank == 0) {
      auto listener = dist::listen_on(plan.master_addr, plan.master_port, 128);
      if (!listener.ok())
        return unavailable("tensor parallelism: rank 0 cannot listen on --master-addr " + plan.master_addr +
                           " --master-port " + std::to_string(plan.master_port) +
                           " (in use, or not an address of this host?): " + listener.status().message());
      listen_fd = fcntl(listener->fd(), F_DUPFD_CLOEXEC, 0);
      if (listen_fd < 0) return unavailable("tensor parallelism: cannot keep the rendezvous socket");
    }
    if (Status s = start_workers(first_started, plan.num_ranks_to_start, kTcpGroupId, group->workers); !s.ok()) {
      if (listen_fd >= 0) close(listen_fd);
      return s;
    }
    // Only rank 0 waits for joins (the others dial it), so only its own workers are watched.
    KVASIR_ASSIGN_OR_RETURN(auto comm, join_tcp(plan, listen_fd, watch_started(group->workers, first_started)));
    group->address = comm->address();
    group->comm = std::move(comm);
    return group;
  }
  if (plan.started_by_launcher) {
    KVASIR_ASSIGN_OR_RETURN(group->comm, join_shm(plan.group_id, plan));
    return group;
  }
  const std::string id = "tp-" + std::to_string(getpid()) + "-" +
                         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  KVASIR_RETURN_IF_ERROR(start_workers(first_started, plan.num_ranks_to_start, id, group->workers));
  auto comm = join_shm(id, plan, watch_started(group->workers, first_started));
  if (!comm.ok()) return comm.status();
  group->comm = std::move(comm).value();
  return group;
}

TensorParallelProcesses::~TensorParallelProcesses() {
  comm.reset();  // a worker still waiting for a step sees rank 0 leave and ends
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t pid : workers) {
    if (pid <= 0) continue;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        KVASIR_LOG_ERROR("tensor parallelism: worker %d did not exit; killing it", static_cast<int>(pid));
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      usleep(10'000);
    }
  }
}

StatusOr<int> agree_num_kv_blocks(dist::Communicator& comm, int mine) {
  std::vector<int32_t> all(static_cast<size_t>(comm.world_size()));
  const int32_t m = mine;
  KVASIR_RETURN_IF_ERROR(comm.all_gather(&m, all.data(), sizeof(m)));
  return *std::min_element(all.begin(), all.end());
}

}  // namespace kvasir

namespace kvasir {

int run_tensor_parallel_worker(const EngineArgs& args, const LaunchPlan& plan) {
  if (args.distributed_executor_backend == "mp") return run_multiprocess_worker(args, plan);
  const int rank = plan.rank;
  // A worker started by its node's launcher shares that process's terminal: Ctrl-C reaches the
  // whole process group, and rank 0 (or the launcher's exit) decides when it stops. A node's own
  // launched rank, or an mpirun rank, stops on Ctrl-C like any command, which breaks the group.
  if (plan.started_by_launcher) signal(SIGINT, SIG_IGN);
  // Test-only (tests/server/test_tensor_parallel.py): a worker that cannot start.
  if (std::getenv("KVASIR_TEST_TP_WORKER_FAIL_AT_START") != nullptr) {
    KVASIR_LOG_ERROR("tensor-parallel worker %d: failing at start ($KVASIR_TEST_TP_WORKER_FAIL_AT_START)", rank);
    return 1;
  }
  auto tp = form_tensor_parallel_group(plan);
  if (!tp.ok()) {
    KVASIR_LOG_ERROR("tensor-parallel worker %d: %s", rank, tp.status().to_string().c_str());
    return 1;
  }
  auto setup = set_up_rank(args, tp->get());
  if (!setup.ok()) {
    KVASIR_LOG_ERROR("tensor-parallel worker %d: %s", rank, setup.status().to_string().c_str());
    return 1;
  }
  RunnerWorker worker(std::move(setup->runner));
  Status s = serve_steps(*(*tp)->comm, worker);
  if (!s.ok()) {
    KVASIR_LOG_ERROR("tensor-parallel worker %d: %s", rank, s.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace kvasir
