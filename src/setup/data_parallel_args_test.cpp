#include "setup/data_parallel_args.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

void expect_refused(const DataParallelArgs& a, int d, bool headless, const std::string& says) {
  const Status s = a.validate(d, headless);
  ASSERT_FALSE(s.ok()) << says;
  EXPECT_NE(s.message().find(says), std::string::npos) << s.message();
}

TEST(DataParallelArgs, DefaultsPutEveryReplicaOnThisNode) {
  DataParallelArgs a;
  EXPECT_TRUE(a.validate(1, false).ok());
  EXPECT_TRUE(a.validate(4, false).ok());
  EXPECT_EQ(a.local_size(4), 4);
  EXPECT_FALSE(a.spans_nodes(4));
  EXPECT_EQ(a.rpc_port, 29550);
  EXPECT_EQ(a.address, "127.0.0.1");
}

TEST(DataParallelArgs, NodeZeroWithFewerLocalReplicasSpansNodes) {
  DataParallelArgs a;
  a.size_local = 1;
  a.address = "10.0.0.1";
  a.rpc_port = 13345;
  ASSERT_TRUE(a.validate(2, false).ok());
  EXPECT_TRUE(a.spans_nodes(2));
  EXPECT_EQ(a.replica_port(1), 13346);
  a.size_local = 0;  // an API-only node 0: every replica elsewhere
  EXPECT_TRUE(a.validate(2, false).ok());
}

TEST(DataParallelArgs, HeadlessNodeRunsItsShare) {
  DataParallelArgs a;
  a.size_local = 2;
  a.start_rank = 2;
  EXPECT_TRUE(a.validate(4, true).ok());
}

TEST(DataParallelArgs, BadCombinationsAreRefusedByName) {
  DataParallelArgs a;
  a.size_local = 1;
  expect_refused(a, 1, false, "--data-parallel-size-local needs --data-parallel-size > 1");
  a = {};
  a.start_rank = 1;
  expect_refused(a, 1, true, "--data-parallel-start-rank needs --data-parallel-size > 1");
  a = {};
  a.address_given = true;
  expect_refused(a, 1, false, "--data-parallel-address needs --data-parallel-size > 1");
  a = {};
  a.rpc_port_given = true;
  expect_refused(a, 1, false, "--data-parallel-rpc-port needs --data-parallel-size > 1");
  a = {};
  a.size_local = 3;
  expect_refused(a, 2, false, "--data-parallel-size-local 3 is not in [0, 2]");
  a = {};
  a.size_local = -1;
  expect_refused(a, 2, false, "--data-parallel-size-local -1 is not in [0, 2]");
  a = {};
  a.size_local = 1;
  a.start_rank = 2;
  expect_refused(a, 2, true, "--data-parallel-start-rank 2 is not in [0, 2)");
  a.size_local = 2;
  a.start_rank = 1;
  expect_refused(a, 2, true, "--data-parallel-start-rank 1 + --data-parallel-size-local 2 is past");
  a = {};
  a.size_local = 1;
  a.start_rank = 1;
  expect_refused(a, 2, false, "--data-parallel-start-rank 1 without --headless");
  a.start_rank = 0;
  expect_refused(a, 2, true, "--headless with --data-parallel-start-rank 0");
  a.size_local = 0;
  a.start_rank = 1;
  expect_refused(a, 2, true, "--headless with --data-parallel-size-local 0");
  a = {};
  a.size_local = 1;
  a.rpc_port = 65535;
  expect_refused(a, 2, false, "--data-parallel-rpc-port 65535");
  a.rpc_port = 0;
  expect_refused(a, 2, false, "--data-parallel-rpc-port 0");
  a = {};
  a.address = "";
  expect_refused(a, 2, false, "--data-parallel-address must not be empty");
}

}  // namespace
}  // namespace kvasir
