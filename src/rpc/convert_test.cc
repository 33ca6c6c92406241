#include "rpc/convert.h"

#include <gtest/gtest.h>

namespace meridian::rpc {
namespace {

TEST(ConvertTest, AssignmentRoundTripsEveryField) {
  model::TaskAssignment a;
  a.key = {7, 3, 2};
  a.job_name = "j";
  a.task_name = "part/3";
  a.index = 3;
  a.kernel = "sum";
  a.command = {"echo", "hi"};
  a.args = {{"range", "1000"}};
  a.inputs = {std::string("a\0b", 3), ""};
  a.device_type = "A100";
  a.allocation = {1500, 1 << 20, {0, 2}, 500};
  a.timeout_us = 42;
  v1::Assignment p;
  ToProto(a, &p);
  model::TaskAssignment b = FromProto(p);
  EXPECT_EQ(b.key, a.key);
  EXPECT_EQ(b.task_name, a.task_name);
  EXPECT_EQ(b.index, 3u);
  EXPECT_EQ(b.command, a.command);
  EXPECT_EQ(b.args, a.args);
  EXPECT_EQ(b.inputs, a.inputs);
  EXPECT_EQ(b.allocation.devices, a.allocation.devices);
  EXPECT_EQ(b.allocation.device_share_milli, 500);
  EXPECT_EQ(b.allocation.cpu_milli, 1500);
  EXPECT_EQ(b.timeout_us, 42);
  EXPECT_TRUE(b.gang.name.empty());
}

// A reason quoting what a task's input held (a kernel's error) may hold any bytes; a
// protobuf string that is not UTF-8 makes the receiver refuse the whole message (an
// agent's heartbeat, for ever). It travels with U+FFFD for each such byte.
TEST(ConvertTest, AReasonThatIsNotUtf8TravelsAsUtf8) {
  model::TaskUpdate u;
  u.key = {1, 0, 1};
  u.kind = model::UpdateKind::kFailed;
  u.reason = "kernel logstats: input 0: '\xff" "a b' is not a logstats row";
  u.output = "\xff raw";
  v1::TaskUpdate p;
  ToProto(u, &p);
  v1::TaskUpdate back;
  ASSERT_TRUE(back.ParseFromString(p.SerializeAsString()));
  const model::TaskUpdate got = FromProto(back);
  EXPECT_EQ(got.reason, "kernel logstats: input 0: '\xef\xbf\xbd" "a b' is not a logstats row");
  EXPECT_EQ(got.output, "\xff raw");  // bytes, as they are
}

TEST(ConvertTest, AGangMembersViewOfItsGangRoundTrips) {
  model::TaskAssignment a;
  a.key = {7, 5, 1};
  a.gang.name = "worker";
  a.gang.rank = 1;
  a.gang.members = {{"n0", "eu-west", "10.200.1.2"}, {"n1", "factory", "10.200.2.2"}};
  a.gang.master_addr = "10.200.1.2";
  a.gang.master_port = 29517;
  a.gang.secret = "5ec2e7";
  v1::Assignment p;
  ToProto(a, &p);
  model::TaskAssignment b = FromProto(p);
  EXPECT_EQ(b.gang.name, "worker");
  EXPECT_EQ(b.gang.rank, 1u);
  ASSERT_EQ(b.gang.members.size(), 2u);
  EXPECT_EQ(b.gang.members[1].node, "n1");
  EXPECT_EQ(b.gang.members[1].site, "factory");
  EXPECT_EQ(b.gang.members[1].host, "10.200.2.2");
  EXPECT_EQ(b.gang.master_addr, "10.200.1.2");
  EXPECT_EQ(b.gang.master_port, 29517);
  EXPECT_EQ(b.gang.secret, "5ec2e7");
}

TEST(ConvertTest, UpdateKindsSurvive) {
  for (model::UpdateKind k : {model::UpdateKind::kRunning, model::UpdateKind::kSucceeded,
                              model::UpdateKind::kFailed, model::UpdateKind::kCancelled}) {
    model::TaskUpdate u;
    u.key = {1, 2, 3};
    u.kind = k;
    u.exit_code = 9;
    u.output = "out";
    v1::TaskUpdate p;
    ToProto(u, &p);
    model::TaskUpdate back = FromProto(p);
    EXPECT_EQ(back.kind, k);
    EXPECT_EQ(back.exit_code, 9);
    EXPECT_EQ(back.output, "out");
  }
}

TEST(ConvertTest, EmulatedLinksCarryTheirJitterWithinTheFleetFilesBound) {
  model::RegistrationReply r;
  r.links = {model::EmulatedLink{"eu-west", 80'000, 1'000'000'000, 20'000, 15'000},
             model::EmulatedLink{"factory", 25'000, 0, 0, model::kMaxLinkJitterUs + 1}};
  v1::RegisterResponse p;
  ToProto(r, &p);
  p.mutable_links(1)->set_jitter_us(-5);  // a peer may send anything
  model::RegistrationReply back = FromProto(p);
  ASSERT_EQ(back.links.size(), 2u);
  EXPECT_EQ(back.links[0].to_site, "eu-west");
  EXPECT_EQ(back.links[0].rtt_us, 80'000);
  EXPECT_EQ(back.links[0].jitter_us, 15'000);
  EXPECT_EQ(back.links[1].jitter_us, 0);
  p.mutable_links(1)->set_jitter_us(model::kMaxLinkJitterUs + 1);
  EXPECT_EQ(FromProto(p).links[1].jitter_us, model::kMaxLinkJitterUs);
}

TEST(ConvertTest, StatusCodesMapBothWays) {
  Status s = InvalidArgumentError("bad field");
  grpc::Status g = ToGrpc(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(FromGrpc(g), s);
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x")).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace meridian::rpc
