#include "sched/request_queue.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

Request make(RequestIdx idx, int prio, double t) {
  RequestOptions o;
  o.priority = prio;
  o.arrival_time = t;
  Request r("r" + std::to_string(idx), {1}, SamplingParams{}, o);
  r.set_idx(idx);
  return r;
}

std::vector<RequestIdx> ids(const RequestQueue& q) {
  std::vector<RequestIdx> out;
  for (const Request* r : q.ordered()) out.push_back(r->idx());
  return out;
}

TEST(RequestQueue, FcfsKeepsArrivalOrderAndPutsPreemptedFirst) {
  Request a = make(1, 5, 0), b = make(2, 0, 0), c = make(3, 0, 0);
  RequestQueue q(SchedulingPolicy::kFcfs);
  q.push_back(&a);
  q.push_back(&b);
  q.push_front(&c);
  EXPECT_EQ(ids(q), (std::vector<RequestIdx>{3, 1, 2}));
  EXPECT_TRUE(q.remove(&a));
  EXPECT_FALSE(q.remove(&a));
  EXPECT_EQ(q.front(), &c);
  q.pop_front();
  EXPECT_EQ(ids(q), (std::vector<RequestIdx>{2}));
}

TEST(RequestQueue, PriorityOrdersByPriorityThenArrival) {
  Request a = make(1, 2, 1.0), b = make(2, 0, 9.0), c = make(3, 2, 0.5), d = make(4, 2, 1.0);
  RequestQueue q(SchedulingPolicy::kPriority);
  for (Request* r : {&a, &b, &c}) q.push_back(r);
  q.push_front(&d);  // same (priority, arrival) as a: a preempted request goes first
  EXPECT_EQ(ids(q), (std::vector<RequestIdx>{2, 3, 4, 1}));
}

TEST(RequestQueue, RunningOrderKeyFollowsPolicy) {
  Request a = make(1, 9, 0.0), b = make(2, 0, 1.0);
  EXPECT_LT(running_order_key(SchedulingPolicy::kFcfs, a),
            running_order_key(SchedulingPolicy::kFcfs, b));
  EXPECT_LT(running_order_key(SchedulingPolicy::kPriority, b),
            running_order_key(SchedulingPolicy::kPriority, a));
}

}  // namespace
}  // namespace kvasir
