#include "api/launch_plan.h"

#include <cerrno>
#include <cstdlib>

namespace kvasir {
namespace {

constexpr const char* kLoopback = "127.0.0.1";

// An environment variable that must hold a non-negative integer; nullopt when unset.
StatusOr<std::optional<int>> env_int(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (v == nullptr) return std::optional<int>();
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0 || n < 0 || n > (1 << 20))
    return invalid_argument(std::string("$") + name + " is '" + v + "', not a rank or a count");
  return std::optional<int>(static_cast<int>(n));
}

// The group's ranks: tensor x pipeline model ranks, and under the multiprocess executor the front
// (rank 0 of its step group, api/multiprocess_executor.h) as well.
int group_size(const EngineArgs& args) {
  return args.parallel_layout().world_size() + (args.distributed_executor_backend == "mp" ? 1 : 0);
}

StatusOr<LaunchPlan> plan_mpirun(const EngineArgs& args, const EnvLookup& env, int size) {
  const LaunchArgs& l = args.launch;
  const int tp = group_size(args);
  KVASIR_ASSIGN_OR_RETURN(std::optional<int> rank, env_int(env, "OMPI_COMM_WORLD_RANK"));
  KVASIR_ASSIGN_OR_RETURN(std::optional<int> local_size, env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"));
  KVASIR_ASSIGN_OR_RETURN(std::optional<int> local_rank, env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"));
  if (!rank || *rank >= size)
    return invalid_argument("mpirun: $OMPI_COMM_WORLD_SIZE is set but $OMPI_COMM_WORLD_RANK is missing or not below it");
  if (l.nnodes != 1 || l.node_rank != 0)
    return invalid_argument("--nnodes / --node-rank under mpirun: mpirun places the ranks (one per MPI rank); "
                            "drop them, or start kvasir without mpirun");
  if (l.headless)
    return invalid_argument("--headless under mpirun: every MPI rank gets the same command line; rank 0 serves "
                            "and the others are headless already");
  if (size != tp)
    return invalid_argument("mpirun started " + std::to_string(size) + " processes but --tensor-parallel-size is " +
                            std::to_string(tp) + ": start exactly one MPI rank per tensor-parallel rank (mpirun -np " +
                            std::to_string(tp) + ")");
  LaunchPlan p;
  if (size == 1) return p;  // one rank: no group, as without mpirun
  // Which GPU a rank drives depends on its place on its host, which only mpirun knows.
  if (!local_rank || !local_size || *local_rank >= *local_size || *local_size > size)
    return invalid_argument("mpirun: $OMPI_COMM_WORLD_LOCAL_RANK and $OMPI_COMM_WORLD_LOCAL_SIZE must be set, the rank "
                            "below the size and the size at most $OMPI_COMM_WORLD_SIZE (Open MPI sets them; another "
                            "MPI's launcher is not supported)");
  p.launcher = LaunchPlan::Launcher::kMpirun;
  p.world_size = size;
  p.rank = *rank;
  p.local_rank = *local_rank;
  p.ranks_on_host = *local_size;
  p.tcp = true;
  p.master_port = l.master_port;
  p.master_addr = l.master_addr;
  if (p.master_addr.empty()) {
    // All ranks on this host: rank 0 is reachable on loopback. Across hosts nobody here knows
    // rank 0's address (there is no MPI exchange), so it must be given.
    if (!local_size || *local_size != size)
      return invalid_argument("mpirun across hosts needs --master-addr: the address of the host of MPI rank 0, where "
                              "rank 0 listens on --master-port for the other ranks");
    p.master_addr = kLoopback;
  }
  return p;
}

}  // namespace

StatusOr<LaunchPlan> plan_launch(const EngineArgs& args, const EnvLookup& env) {
  const LaunchArgs& l = args.launch;
  const int tp = group_size(args);
  KVASIR_RETURN_IF_ERROR(l.validate(tp));
  KVASIR_ASSIGN_OR_RETURN(std::optional<int> mpi_size, env_int(env, "OMPI_COMM_WORLD_SIZE"));
  KVASIR_ASSIGN_OR_RETURN(std::optional<int> started_rank, env_int(env, "KVASIR_TP_RANK"));
  const char* group = env("KVASIR_TP_GROUP");
  // A worker started by a launcher on its node: the rank it was given, in the group it was told.
  // (Under mpirun nobody starts workers, so mpirun's variables, inherited, do not apply to it.)
  if (started_rank && group != nullptr && *started_rank > 0) {
    if (*started_rank >= tp)
      return invalid_argument("$KVASIR_TP_RANK " + std::to_string(*started_rank) + " is not below --tensor-parallel-size " +
                              std::to_string(tp));
    LaunchPlan p;
    p.launcher = l.nnodes > 1 ? LaunchPlan::Launcher::kNodes : LaunchPlan::Launcher::kOneHost;
    p.world_size = tp;
    p.rank = *started_rank;
    // Its node's ranks are contiguous: node k has ranks k*per_node .. (k+1)*per_node - 1.
    p.ranks_on_host = tp / l.nnodes;
    p.local_rank = p.rank % p.ranks_on_host;
    p.started_by_launcher = true;
    p.tcp = l.nnodes > 1;
    p.master_addr = l.master_addr;
    p.master_port = l.master_port;
    p.group_id = group;
    return p;
  }
  if (args.distributed_executor_backend == "mp" && (mpi_size || l.nnodes > 1))
    return unimplemented("--distributed-executor-backend mp starts its model ranks on this host; with --nnodes or "
                         "mpirun it is not supported yet (leave the flag unset: rank 0 then runs in the serving "
                         "process)");
  if (mpi_size) return plan_mpirun(args, env, *mpi_size);
  if (l.nnodes == 1) {
    if (!l.master_addr.empty())
      return invalid_argument("--master-addr applies to ranks spread over hosts: give --nnodes > 1, or start the "
                              "ranks with mpirun (one host without either meets over shared memory)");
    if (l.headless)
      return invalid_argument("--headless applies to a node other than node 0: give --nnodes > 1 and --node-rank > 0");
    if (l.master_port_given)
      return invalid_argument("--master-port applies to ranks spread over hosts: give --nnodes > 1, or start the "
                              "ranks with mpirun (one host without either meets over shared memory)");
  }
  LaunchPlan p;
  if (tp == 1) return p;
  p.world_size = tp;
  if (l.nnodes == 1) {
    p.launcher = LaunchPlan::Launcher::kOneHost;
    p.num_ranks_to_start = tp - 1;
    p.ranks_on_host = tp;
    return p;
  }
  const int per_node = tp / l.nnodes;
  p.launcher = LaunchPlan::Launcher::kNodes;
  p.rank = l.node_rank * per_node;
  p.num_ranks_to_start = per_node - 1;
  p.ranks_on_host = per_node;  // local rank 0: the node's first
  p.tcp = true;
  p.master_addr = l.master_addr;
  p.master_port = l.master_port;
  return p;
}

StatusOr<LaunchPlan> plan_launch(const EngineArgs& args) {
  return plan_launch(args, [](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace kvasir
