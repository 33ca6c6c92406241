#include "agent/gang.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meridian::agent {
namespace {

using ::testing::ElementsAre;

// Five ranks on three nodes of two sites, the second node holding ranks 1, 2 and 4.
model::GangInfo FiveRanks(uint32_t rank) {
  model::GangInfo g;
  g.name = "worker";
  g.rank = rank;
  g.members = {{"a", "eu", "10.0.0.1"},
               {"b", "eu", "10.0.0.2"},
               {"b", "eu", "10.0.0.2"},
               {"c", "us", "10.1.0.1"},
               {"b", "eu", "10.0.0.2"}};
  g.master_addr = "10.0.0.1";
  g.master_port = 29517;
  return g;
}

TEST(GangTest, EachRankIsToldItsPlaceAsDistributedFrameworksExpect) {
  StatusOr<std::vector<std::string>> r4 = GangEnvironment(FiveRanks(4));
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_THAT(*r4, ElementsAre("RANK=4", "WORLD_SIZE=5", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=3", "NODE_RANK=1",
                               "GROUP_RANK=1", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29517", "MERIDIAN_GANG=worker",
                               "MERIDIAN_GANG_FAILURE=restart"));
  StatusOr<std::vector<std::string>> r3 = GangEnvironment(FiveRanks(3));
  ASSERT_TRUE(r3.ok());
  EXPECT_THAT(*r3, ElementsAre("RANK=3", "WORLD_SIZE=5", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "NODE_RANK=2",
                               "GROUP_RANK=2", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29517", "MERIDIAN_GANG=worker",
                               "MERIDIAN_GANG_FAILURE=restart"));
  EXPECT_EQ(GangPeersText(FiveRanks(0)),
            "0 a eu 10.0.0.1\n1 b eu 10.0.0.2\n2 b eu 10.0.0.2\n3 c us 10.1.0.1\n4 b eu 10.0.0.2\n");
}

TEST(GangTest, AGangThatDoesNotHoldTogetherIsRefusedWithWhy) {
  EXPECT_EQ(GangEnvironment(FiveRanks(5)).status().message(), "gang 'worker': rank 5 of 5 members");
  model::GangInfo none = FiveRanks(0);
  none.members.clear();
  EXPECT_EQ(GangEnvironment(none).status().message(), "gang 'worker' has 0 members (1 to 4096)");
  model::GangInfo huge = FiveRanks(0);
  huge.members.resize(model::kMaxGangMembers + 1, huge.members[0]);
  EXPECT_EQ(GangEnvironment(huge).status().message(), "gang 'worker' has 4097 members (1 to 4096)");
  model::GangInfo portless = FiveRanks(1);
  portless.master_port = 0;
  EXPECT_EQ(GangEnvironment(portless).status().message(), "gang 'worker': no rank-0 address ('10.0.0.1' port 0)");
  portless.master_port = 70000;
  EXPECT_FALSE(GangEnvironment(portless).ok());
}

TEST(GangTest, APortSomeoneListensOnIsTaken) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  Status taken = CheckPortFree(port);
  EXPECT_EQ(taken.code(), StatusCode::kUnavailable);
  EXPECT_THAT(taken.message(), ::testing::StartsWith(fmt::format("port {} (MASTER_PORT) is taken on this host", port)));
  close(fd);
  EXPECT_TRUE(CheckPortFree(port).ok());
}

}  // namespace
}  // namespace meridian::agent
