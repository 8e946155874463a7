// plan_launch: every launcher's placement of this process (rank, ranks it starts, rendezvous) and
// every flag/environment combination that must be refused, with the flag named in the message.
#include "api/launch_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace kvasir {
namespace {

struct Env {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

EngineArgs tp(int n) {
  EngineArgs a;
  a.tensor_parallel_size = n;
  return a;
}

Env mpirun(int rank, int size, int local_size) {
  return Env{{{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
              {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
              {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank % local_size)},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)}}};
}

void expect_refused(const EngineArgs& a, const Env& env, const std::string& says) {
  auto p = plan_launch(a, env.lookup());
  ASSERT_FALSE(p.ok()) << "expected a refusal saying: " << says;
  EXPECT_NE(p.status().message().find(says), std::string::npos) << p.status().message();
}

TEST(LaunchPlan, NoGroupAtOneRank) {
  auto p = plan_launch(tp(1), Env{}.lookup());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->launcher, LaunchPlan::Launcher::kNone);
  EXPECT_FALSE(p->is_worker());
}

TEST(LaunchPlan, OneHostRankZeroStartsTheRestOverSharedMemory) {
  auto p = plan_launch(tp(4), Env{}.lookup());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->launcher, LaunchPlan::Launcher::kOneHost);
  EXPECT_EQ(p->rank, 0);
  EXPECT_EQ(p->num_ranks_to_start, 3);
  EXPECT_FALSE(p->tcp);
  EXPECT_EQ(p->local_rank, 0);
  EXPECT_EQ(p->ranks_on_host, 4);
}

TEST(LaunchPlan, StartedWorkerTakesItsRankAndGroup) {
  auto p = plan_launch(tp(4), Env{{{"KVASIR_TP_RANK", "2"}, {"KVASIR_TP_GROUP", "tp-1-2"}}}.lookup());
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->is_worker());
  EXPECT_TRUE(p->started_by_launcher);
  EXPECT_EQ(p->rank, 2);
  EXPECT_EQ(p->num_ranks_to_start, 0);
  EXPECT_EQ(p->group_id, "tp-1-2");
  EXPECT_FALSE(p->tcp);
  EXPECT_EQ(p->local_rank, 2);  // one host: GPU 2
  EXPECT_EQ(p->ranks_on_host, 4);
  expect_refused(tp(2), Env{{{"KVASIR_TP_RANK", "2"}, {"KVASIR_TP_GROUP", "g"}}}, "not below --tensor-parallel-size");
  expect_refused(tp(2), Env{{{"KVASIR_TP_RANK", "x"}, {"KVASIR_TP_GROUP", "g"}}}, "$KVASIR_TP_RANK is 'x'");
}

TEST(LaunchPlan, EachNodeStartsItsOwnRanksAndAllMeetOverTcp) {
  EngineArgs a = tp(4);
  a.launch.nnodes = 2;
  a.launch.master_addr = "10.0.0.1";
  a.launch.master_port = 4000;
  for (int node = 0; node < 2; ++node) {
    a.launch.node_rank = node;
    auto p = plan_launch(a, Env{}.lookup());
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->launcher, LaunchPlan::Launcher::kNodes);
    EXPECT_EQ(p->rank, 2 * node);
    EXPECT_EQ(p->num_ranks_to_start, 1);
    EXPECT_TRUE(p->tcp);
    EXPECT_EQ(p->master_addr, "10.0.0.1");
    EXPECT_EQ(p->master_port, 4000);
    EXPECT_EQ(p->local_rank, 0);  // each node's launched rank is its first
    EXPECT_EQ(p->ranks_on_host, 2);
  }
  // Node 1's started rank 3 joins over TCP too.
  auto w = plan_launch(a, Env{{{"KVASIR_TP_RANK", "3"}, {"KVASIR_TP_GROUP", "kvasir-tp"}}}.lookup());
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->rank, 3);
  EXPECT_EQ(w->local_rank, 1);  // node 1's second rank drives its GPU 1, not GPU 3
  EXPECT_EQ(w->ranks_on_host, 2);
  EXPECT_TRUE(w->tcp);
  EXPECT_TRUE(w->started_by_launcher);
  a.launch.headless = true;  // accepted where it applies
  EXPECT_TRUE(plan_launch(a, Env{}.lookup()).ok());
}

TEST(LaunchPlan, RefusesNodeFlagsThatDoNotFit) {
  EngineArgs a = tp(4);
  a.launch.nnodes = 3;
  a.launch.master_addr = "10.0.0.1";
  expect_refused(a, Env{}, "--nnodes 3 does not divide the world size 4");
  a.launch.nnodes = 2;
  a.launch.node_rank = 2;
  expect_refused(a, Env{}, "--node-rank 2 is not in [0, 2)");
  a.launch.node_rank = -1;
  expect_refused(a, Env{}, "--node-rank -1 is not in [0, 2)");
  a.launch.node_rank = 1;
  a.launch.master_addr = "";
  expect_refused(a, Env{}, "needs --master-addr");
  a.launch.master_addr = "10.0.0.1";
  a.launch.node_rank = 0;
  a.launch.headless = true;
  expect_refused(a, Env{}, "--headless on --node-rank 0");
  EngineArgs one = tp(2);
  one.launch.node_rank = 1;
  expect_refused(one, Env{}, "--node-rank 1 needs --nnodes > 1");
  one.launch.node_rank = 0;
  one.launch.master_addr = "10.0.0.1";
  expect_refused(one, Env{}, "--master-addr applies to ranks spread over hosts");
  one.launch.master_addr = "";
  one.launch.headless = true;
  expect_refused(one, Env{}, "--headless applies to a node other than node 0");
  one.launch.headless = false;
  one.launch.master_port_given = true;
  expect_refused(one, Env{}, "--master-port applies to ranks spread over hosts");
  one.launch.headless = false;
  one.launch.master_port = 0;
  expect_refused(one, Env{}, "--master-port must be in [1, 65535]");
}

TEST(LaunchPlan, EachMpiRankIsOneRankAndNobodyIsStarted) {
  for (int r = 0; r < 3; ++r) {
    auto p = plan_launch(tp(3), mpirun(r, 3, 3).lookup());
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->launcher, LaunchPlan::Launcher::kMpirun);
    EXPECT_EQ(p->rank, r);
    EXPECT_EQ(p->num_ranks_to_start, 0);
    EXPECT_FALSE(p->started_by_launcher);
    EXPECT_TRUE(p->tcp);
    EXPECT_EQ(p->master_addr, "127.0.0.1");  // all on this host
    EXPECT_EQ(p->master_port, LaunchArgs::kDefaultMasterPort);
  }
  EngineArgs a = tp(2);
  a.launch.master_addr = "10.0.0.1";
  auto p = plan_launch(a, mpirun(1, 2, 1).lookup());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->master_addr, "10.0.0.1");
  EXPECT_TRUE(p->is_worker());
  EXPECT_EQ(p->local_rank, 0);  // alone on its host: GPU 0
  EXPECT_EQ(p->ranks_on_host, 1);
  // --map-by node over 2 hosts of 2: MPI rank 3 is its host's second.
  EngineArgs four = tp(4);
  four.launch.master_addr = "10.0.0.1";
  Env alternating = mpirun(3, 4, 2);
  alternating.vars["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";
  auto q = plan_launch(four, alternating.lookup());
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->local_rank, 1);
  EXPECT_EQ(q->ranks_on_host, 2);
  // One MPI rank at TP=1: no group.
  auto single = plan_launch(tp(1), mpirun(0, 1, 1).lookup());
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->launcher, LaunchPlan::Launcher::kNone);
}

TEST(LaunchPlan, RefusesMpirunCombinationsThatDoNotFit) {
  expect_refused(tp(2), mpirun(0, 3, 3), "mpirun started 3 processes but --tensor-parallel-size is 2");
  expect_refused(tp(2), mpirun(0, 2, 1), "mpirun across hosts needs --master-addr");
  EngineArgs a = tp(2);
  a.launch.nnodes = 2;
  a.launch.master_addr = "10.0.0.1";
  expect_refused(a, mpirun(0, 2, 2), "--nnodes / --node-rank under mpirun");
  EngineArgs h = tp(2);
  h.launch.headless = true;
  expect_refused(h, mpirun(1, 2, 2), "--headless under mpirun");
  expect_refused(tp(2), Env{{{"OMPI_COMM_WORLD_SIZE", "2"}}}, "$OMPI_COMM_WORLD_RANK is missing");
  Env no_local = mpirun(1, 2, 2);
  no_local.vars.erase("OMPI_COMM_WORLD_LOCAL_RANK");
  expect_refused(tp(2), no_local, "$OMPI_COMM_WORLD_LOCAL_RANK and $OMPI_COMM_WORLD_LOCAL_SIZE must be set");
  Env past = mpirun(1, 2, 2);
  past.vars["OMPI_COMM_WORLD_LOCAL_RANK"] = "2";
  expect_refused(tp(2), past, "the rank below the size");
}

}  // namespace
}  // namespace kvasir
