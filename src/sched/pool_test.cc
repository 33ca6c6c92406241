// PoolIndex kept exact by Move and Add, against a fresh Build of the same fleet.
#include <gtest/gtest.h>

#include "common/env.h"
#include "sched/pool.h"
#include "sched/schedule.h"
#include "sched/sched_test_util.h"

namespace meridian::sched {
namespace {

// The pool of every node, described by what pools are keyed by, and each pool's
// nodes in fleet order: equal for two indexes of one fleet however built.
std::vector<std::string> Describe(const PoolIndex& index, const model::Fleet& fleet) {
  std::vector<std::string> out;
  for (const model::Node& n : fleet.nodes) {
    const Pool& p = index.pools.at(index.pool_of_node.at(n.id.value()));
    std::string members;
    for (NodeId m : p.nodes) members += std::to_string(m.value()) + ",";
    out.push_back(std::string(p.device_type) + "/" + std::to_string(static_cast<int>(p.health)) + "/" +
                  std::to_string(p.price_micro_usd_per_hour) + ":" + members);
  }
  return out;
}

TEST(PoolIndexTest, MoveAndAddMatchAFreshBuild) {
  testing::FleetBuilder b;
  SiteId s = b.Site("s");
  b.Nodes(s, "A100", 6, 8, 1'000'000);
  b.Nodes(s, "T4", 5, 1, 300'000);
  model::Fleet fleet = b.Build();
  PoolIndex index = PoolIndex::Build(fleet);
  Random rng(5);
  for (int step = 0; step < 200; ++step) {
    if (rng.Uniform(10) == 0) {
      model::Node copy = fleet.nodes[rng.Uniform(fleet.nodes.size())];
      copy.id = NodeId(static_cast<uint32_t>(fleet.nodes.size()));
      fleet.nodes.push_back(copy);
      index.Add(fleet, copy.id);
    } else {
      model::Node& n = fleet.nodes[rng.Uniform(fleet.nodes.size())];
      n.health = static_cast<model::NodeHealth>(rng.Uniform(3));
      index.Move(fleet, n.id);
    }
    ASSERT_EQ(Describe(index, fleet), Describe(PoolIndex::Build(fleet), fleet)) << "step " << step;
  }
}

TEST(PoolIndexTest, AnUnhealthyNodeLeavesItsPoolAndComesBackInOrder) {
  testing::FleetBuilder b;
  SiteId s = b.Site("s");
  b.Nodes(s, "T4", 3, 1, 300'000);
  model::Fleet fleet = b.Build();
  PoolIndex index = PoolIndex::Build(fleet);
  ASSERT_EQ(index.pools.size(), 1u);
  fleet.nodes[1].health = model::NodeHealth::kUnhealthy;
  index.Move(fleet, NodeId(1));
  ASSERT_EQ(index.pools.size(), 2u);
  EXPECT_EQ(index.pools[0].nodes, (std::vector<NodeId>{NodeId(0), NodeId(2)}));
  EXPECT_EQ(index.pools[1].health, model::NodeHealth::kUnhealthy);
  EXPECT_EQ(index.pool_of_node[1], 1u);
  EXPECT_EQ(index.pools[1].type_index, index.pools[0].type_index);
  fleet.nodes[1].health = model::NodeHealth::kHealthy;
  index.Move(fleet, NodeId(1));
  EXPECT_EQ(index.pools[0].nodes, (std::vector<NodeId>{NodeId(0), NodeId(1), NodeId(2)}));
  EXPECT_TRUE(index.pools[1].nodes.empty());
}

TEST(PoolIndexTest, SchedulingOverAnEmptiedPoolExplainsTheRest) {
  testing::FleetBuilder b;
  SiteId s = b.Site("s");
  b.Nodes(s, "T4", 1, 1, 300'000);
  model::Fleet fleet = b.Build();
  auto index = std::make_shared<PoolIndex>(PoolIndex::Build(fleet));
  fleet.nodes[0].health = model::NodeHealth::kUnhealthy;
  index->Move(fleet, NodeId(0));
  ASSERT_TRUE(index->pools[0].nodes.empty());
  model::ThroughputTable tt;
  model::Job job = testing::MakeJob("j", {testing::GpuTask("t", {"T4"})});
  Snapshot snap = testing::MakeSnapshot(fleet, tt, {&job});
  snap.pools = index;
  Random rng(1);
  Plan plan = Schedule(snap, Policy{}, rng);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced[0].kind, UnplacedKind::kWaiting);
  EXPECT_NE(plan.unplaced[0].reason.find("0 of 1 nodes can run it now: 1 node "), std::string::npos)
      << plan.unplaced[0].reason;
}

}  // namespace
}  // namespace meridian::sched
