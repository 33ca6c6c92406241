// The simulator against completion times worked out by hand, its determinism, and
// its bookkeeping under faults: every job finishes exactly once or is reported
// infeasible with its reason.
#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/units.h"
#include "sim/engine.h"
#include "sim/report.h"
#include "spec/fleet_spec.h"

namespace meridian::sim {
namespace {

using ::testing::HasSubstr;

spec::FleetSpec Fleet(const std::string& yaml) {
  StatusOr<spec::FleetSpec> f = spec::ParseFleet(yaml, "fleet.yaml", ".");
  EXPECT_TRUE(f.ok()) << f.status().message();
  return f.ok() ? std::move(*f) : spec::FleetSpec{};
}

Trace Csv(const std::string& text, const model::Fleet& fleet) {
  StatusOr<Trace> t = ParseGenericTrace(text, "trace.csv", fleet);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(*t) : Trace{};
}

SimResult Replay(const spec::FleetSpec& f, const Trace& trace, const std::string& policy = "meridian",
              SimOptions options = {}) {
  StatusOr<sched::Policy> p = NamedPolicy(policy, trace);
  EXPECT_TRUE(p.ok());
  options.policy_name = policy;
  options.policy = *p;
  StatusOr<SimResult> r = Simulate(f.fleet, f.throughput, trace, options, Env::Default());
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(*r) : SimResult{};
}

double JctOf(const SimResult& r, const std::string& job) {
  for (const JobOutcome& o : r.outcomes) {
    if (o.name == job && o.finish_us >= 0) return static_cast<double>(o.finish_us - o.arrival_us) / kSecondUs;
  }
  ADD_FAILURE() << "job " << job << " did not finish";
  return -1;
}

const char* kOneGpu = R"(
sites: [{name: dc}]
nodes: [{name: n, site: dc, cpu: 8, memory: 64GiB, devices: {type: T4, count: 1}, price: $1/h}]
)";

TEST(SimTest, FifoOnOneGpuMatchesTheHandWorkedTimes) {
  // One GPU; three 10 s jobs at 0, 0 and 5 s run back to back: 0-10, 10-20, 20-30.
  spec::FleetSpec f = Fleet(kOneGpu);
  Trace t = Csv("job,arrival_s,duration_s,gpus\na,0,10,1\nb,0,10,1\nc,5,10,1\n", f.fleet);
  SimResult r = Replay(f, t);
  EXPECT_EQ(r.finished_jobs, 3u);
  EXPECT_DOUBLE_EQ(JctOf(r, "a"), 10);
  EXPECT_DOUBLE_EQ(JctOf(r, "b"), 20);
  EXPECT_DOUBLE_EQ(JctOf(r, "c"), 25);
  EXPECT_DOUBLE_EQ(r.jct.mean, 55.0 / 3);
  EXPECT_DOUBLE_EQ(r.queueing.mean, 25.0 / 3);  // 0, 10, 15
  EXPECT_DOUBLE_EQ(r.makespan_s, 30);
  EXPECT_DOUBLE_EQ(r.gpu_utilisation, 1.0);
  // 30 s on a $1/h node.
  EXPECT_NEAR(static_cast<double>(r.compute_cost_micro_usd), 30.0 * 1e6 / 3600, 2);
}

TEST(SimTest, ALongReplayReportsItsProgressAndTheReportChangesNothing) {
  // 10,000 jobs a second apart, each half a second on the one GPU: 20,000 rounds.
  spec::FleetSpec f = Fleet(kOneGpu);
  std::string csv = "job,arrival_s,duration_s,gpus\n";
  for (int i = 0; i < 10'000; ++i) csv += fmt::format("j{},{},0.5,1\n", i, i);
  Trace t = Csv(csv, f.fleet);
  std::vector<SimProgress> seen;
  SimOptions o;
  o.progress_every_s = 1e-9;  // at every check (each 4,096 rounds)
  o.on_progress = [&](const SimProgress& p) { seen.push_back(p); };
  SimResult with = Replay(f, t, "meridian", o);
  SimResult without = Replay(f, t);
  EXPECT_EQ(ResultToJson(with, false).dump(), ResultToJson(without, false).dump());
  ASSERT_GE(seen.size(), 4u);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].jobs, 10'000u);
    EXPECT_DOUBLE_EQ(seen[i].span_s, 9'999);
    EXPECT_LE(seen[i].arrived, 10'000u);
    // A job arrives each simulated second, and the clock is where the last arrived.
    EXPECT_NEAR(seen[i].simulated_s, static_cast<double>(seen[i].arrived) - 1, 1) << i;
    if (i > 0) {
      EXPECT_GT(seen[i].arrived, seen[i - 1].arrived);
      EXPECT_GE(seen[i].wall_s, seen[i - 1].wall_s);
    }
  }
}

TEST(SimTest, FractionsShareOneGpu) {
  spec::FleetSpec f = Fleet(kOneGpu);
  Trace t = Csv("job,arrival_s,duration_s,gpus,gpu_milli,cpu_milli\na,0,10,1,500,1000\nb,0,10,1,500,1000\n"
                "c,0,10,1,600,1000\n", f.fleet);
  SimResult r = Replay(f, t);
  EXPECT_DOUBLE_EQ(JctOf(r, "a"), 10);
  EXPECT_DOUBLE_EQ(JctOf(r, "b"), 10);
  EXPECT_DOUBLE_EQ(JctOf(r, "c"), 20);  // 600 milli waits for a half to free
  EXPECT_GT(r.gpu_waiting_s, 0);
}

const char* kTwoTypes = R"(
sites: [{name: dc}]
nodes:
  - {name: slow, site: dc, cpu: 8, memory: 64GiB, devices: {type: K80, count: 1}, price: $1/h}
  - {name: fast, site: dc, cpu: 8, memory: 64GiB, devices: {type: V100, count: 1}, price: $1/h}
throughput:
  kinds:
    - {kind: train, unit: step, per_second: {K80: 1, V100: 10}}
)";

TEST(SimTest, WorkRunsAtTheSpeedOfTheDeviceItGot) {
  spec::FleetSpec f = Fleet(kTwoTypes);
  Trace t = Csv("job,arrival_s,kind,work,gpus,accelerators\na,0,train,100,1,K80|V100\n", f.fleet);
  EXPECT_DOUBLE_EQ(JctOf(Replay(f, t), "a"), 10);  // the V100: 100 steps at 10/s
  // cheapest-region takes the first cheapest pool (both $1/h): the K80, 100 s.
  EXPECT_DOUBLE_EQ(JctOf(Replay(f, t, "cheapest-region"), "a"), 100);
}

TEST(SimTest, AGangRunsAtThePaceOfItsSlowestMember) {
  // Two one-GPU replicas, 10 steps each: one lands on the V100 (1 s), the other on
  // the K80 (10 s); the job ends when both do.
  spec::FleetSpec f = Fleet(kTwoTypes);
  Trace t = Csv("job,task,arrival_s,kind,work,gpus,gang\nj,r0,0,train,10,1,g\nj,r1,0,train,10,1,g\n", f.fleet);
  SimResult r = Replay(f, t);
  EXPECT_DOUBLE_EQ(JctOf(r, "j"), 10);
  EXPECT_DOUBLE_EQ(r.queueing.mean, 0);
}

TEST(SimTest, ADependencyPullsItsInputOverTheLinkFirst) {
  // a runs at x (only x has T4s) for 10 s and writes 125 MB; b needs a V100, only
  // at y: it pulls 125 MB over 1 Gbps with 10 ms RTT (1.01 s), then runs 5 s.
  spec::FleetSpec f = Fleet(R"(
sites: [{name: x, egress: $0.10/GB}, {name: y}]
links: [{between: [x, y], rtt: 10ms, bandwidth: 1Gbps}]
nodes:
  - {name: nx, site: x, cpu: 8, memory: 64GiB, devices: {type: T4, count: 1}, price: $1/h}
  - {name: ny, site: y, cpu: 8, memory: 64GiB, devices: {type: V100, count: 1}, price: $1/h}
)");
  Trace t = Csv("job,task,arrival_s,duration_s,gpus,accelerators,after,output_bytes,input_bytes,input_site\n"
                "j,a,0,10,1,T4,,125000000,1000,x\n"
                "j,b,0,5,1,V100,a,0,,\n",
                f.fleet);
  SimResult r = Replay(f, t);
  EXPECT_DOUBLE_EQ(JctOf(r, "j"), 16.01);
  EXPECT_EQ(r.wan_bytes.at("x->y"), 125'000'000);
  EXPECT_EQ(r.egress_cost_micro_usd, 12'500);  // 0.125 GB at $0.10/GB
  // The per-job CSV names both sites and both device types, in the order used.
  const std::string csv = OutcomesCsv(r);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "job,arrival_s,start_s,finish_s,jct_s,outcome,restarts,cost_usd,sites,device_types,reason");
  EXPECT_THAT(csv, HasSubstr(",finished,0,"));
  EXPECT_THAT(csv, HasSubstr(",x;y,T4;V100,\n"));
  // The report's bytes by link and its cost columns.
  const std::string html = HtmlReport({r}, "dep");
  EXPECT_THAT(html, HasSubstr("<h2>WAN bytes by link</h2>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>x-&gt;y</td><td>119.21 MiB</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<td>119.21 MiB</td><td>$0.01</td>"));
}

TEST(SimTest, AnImpossibleJobIsReportedInfeasibleWithItsReasonAndTheRestFinish) {
  spec::FleetSpec f = Fleet(kOneGpu);
  Trace t = Csv("job,arrival_s,duration_s,gpus\nbig,0,10,4\nsmall,0,10,1\n", f.fleet);
  SimResult r = Replay(f, t);
  EXPECT_EQ(r.finished_jobs, 1u);
  EXPECT_EQ(r.infeasible_jobs, 1u);
  ASSERT_EQ(r.outcomes.size(), 2u);
  EXPECT_TRUE(r.outcomes[0].infeasible);
  EXPECT_THAT(r.outcomes[0].reason, HasSubstr("4"));
  EXPECT_EQ(r.outcomes[0].finish_us, -1);
  EXPECT_DOUBLE_EQ(JctOf(r, "small"), 10);
}

TEST(SimTest, ARemovedNodeSendsItsTaskBackToTheQueue) {
  // Two one-GPU nodes. a (100 s) takes node 0 at t=0, b (100 s) node 1 at t=1.
  // At 50 s one node leaves: the newest, node 1; b is queued again, waits for a
  // to finish at 100 s and runs 100-200: JCT 199 s.
  spec::FleetSpec f = Fleet(R"(
sites: [{name: dc}]
nodes: [{name: n, count: 2, site: dc, cpu: 8, memory: 64GiB, devices: {type: T4, count: 1}, price: $1/h}]
)");
  Trace t = Csv("job,arrival_s,duration_s,gpus\na,0,100,1\nb,1,100,1\n", f.fleet);
  SimOptions o;
  o.changes.push_back(FleetChange{50 * kSecondUs, 0, 1});
  SimResult r = Replay(f, t, "first-fit", o);
  EXPECT_DOUBLE_EQ(JctOf(r, "a"), 100);
  EXPECT_DOUBLE_EQ(JctOf(r, "b"), 199);
  EXPECT_EQ(r.task_restarts, 1);
  EXPECT_EQ(r.outcomes[1].restarts, 1);
}

TEST(SimTest, AddedNodesTakeWaitingWork) {
  spec::FleetSpec f = Fleet(kOneGpu);
  Trace t = Csv("job,arrival_s,duration_s,gpus\na,0,100,1\nb,0,100,1\n", f.fleet);
  SimOptions o;
  o.changes.push_back(FleetChange{30 * kSecondUs, 1, 0});
  SimResult r = Replay(f, t, "meridian", o);
  EXPECT_DOUBLE_EQ(JctOf(r, "b"), 130);
  EXPECT_EQ(r.nodes, 2u);
}

// The first pods of the real Alibaba trace on its first 100 nodes.
struct AlibabaSlice {
  spec::FleetSpec fleet;
  Trace trace;
};

AlibabaSlice LoadAlibabaSlice(size_t pods) {
  const char* dir = std::getenv("MERIDIAN_SOURCE_DIR");
  std::string root = dir ? dir : ".";
  AlibabaSlice s;
  s.fleet = Fleet(R"(
sites: [{name: a}, {name: b}]
links: [{between: [a, b], rtt: 5ms, bandwidth: 10Gbps}]
node_lists:
  - format: alibaba-gpu-2023
    path: )" + root + R"(/tests/fixtures/alibaba-node-list-gpu.csv
    sites: [a, b]
    cpu_price: $0.04/h
    gpu_prices: {T4: $0.35/h, V100M16: $2.48/h, V100M32: $2.48/h, P100: $1.46/h, A10: $1.01/h, G2: $0.35/h, G3: $2.48/h}
    limit: 100
)");
  StatusOr<Trace> t = LoadTrace(root + "/tests/fixtures/alibaba-pods-gpuspec33-400.csv",
                                TraceFormat::kAuto, s.fleet.fleet, s.fleet.throughput);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (t.ok()) {
    s.trace = std::move(*t);
    s.trace.jobs.resize(std::min(pods, s.trace.jobs.size()));
    s.trace = ScaleJobs(s.trace, 10);  // enough load that work waits
  }
  return s;
}

TEST(SimTest, TheSameSeedGivesTheSameMetrics) {
  AlibabaSlice s = LoadAlibabaSlice(150);
  for (const std::string policy : {"meridian", "random", "best-fit"}) {
    SimOptions o;
    o.seed = 7;
    o.node_mtbf_us = 200 * 24 * 3600 * kSecondUs;
    SimResult a = Replay(s.fleet, s.trace, policy, o);
    SimResult b = Replay(s.fleet, s.trace, policy, o);
    EXPECT_EQ(ResultToJson(a, false).dump(), ResultToJson(b, false).dump()) << policy;
    EXPECT_EQ(OutcomesCsv(a), OutcomesCsv(b)) << policy;
    EXPECT_GT(a.node_failures, 0) << policy;
  }
  // And the seed matters where chance does.
  SimOptions o1, o2;
  o1.seed = 1;
  o2.seed = 2;
  EXPECT_NE(OutcomesCsv(Replay(s.fleet, s.trace, "random", o1)), OutcomesCsv(Replay(s.fleet, s.trace, "random", o2)));
}

// Parking tasks with no room (sched::Backlog) saves scheduler work and changes no
// decision: every policy, under a backlog, with failures, preemptions (tasks
// queued again, behind younger ones of their class), nodes added and removed.
TEST(SimTest, ParkingTasksWithNoRoomChangesNoDecision) {
  AlibabaSlice s = LoadAlibabaSlice(150);
  for (model::Node& n : s.fleet.fleet.nodes) n.spot = n.id.value() % 4 == 0;
  Trace backlog = SaturatingTrace(s.trace, 900, 20, 1800 * kSecondUs, 3);
  for (const std::string& policy : PolicyNames()) {
    SimOptions o;
    o.seed = 5;
    o.node_mtbf_us = 20 * 24 * 3600 * kSecondUs;
    o.spot_mtbp_us = 5 * 24 * 3600 * kSecondUs;
    o.repair_us = 1800 * kSecondUs;
    o.changes = {FleetChange{30 * kSecondUs, 5, 0}, FleetChange{3600 * kSecondUs, 0, 8}};
    SimResult parked = Replay(s.fleet, backlog, policy, o);
    o.park = false;
    SimResult offered = Replay(s.fleet, backlog, policy, o);
    EXPECT_EQ(ResultToJson(parked, false).dump(), ResultToJson(offered, false).dump()) << policy;
    EXPECT_EQ(OutcomesCsv(parked), OutcomesCsv(offered)) << policy;
    EXPECT_EQ(parked.placements, offered.placements) << policy;
    EXPECT_GT(parked.task_restarts, 0) << policy;
    EXPECT_GT(parked.peak_waiting, 200u) << policy;
    // The point of parking: far fewer tasks offered to the scheduler.
    EXPECT_LT(parked.sched_decisions * 3, offered.sched_decisions) << policy;
  }
}

TEST(SimTest, UnderFailuresAndPreemptionsEveryJobEndsExactlyOnce) {
  AlibabaSlice s = LoadAlibabaSlice(150);
  for (model::Node& n : s.fleet.fleet.nodes) n.spot = n.id.value() % 3 == 0;
  SimOptions o;
  o.seed = 11;
  o.node_mtbf_us = 100 * 24 * 3600 * kSecondUs;
  o.spot_mtbp_us = 30 * 24 * 3600 * kSecondUs;
  o.max_restarts = 3;
  o.repair_us = 3600 * kSecondUs;
  SimResult r = Replay(s.fleet, s.trace, "meridian", o);
  EXPECT_GT(r.node_failures, 0);
  EXPECT_GT(r.preemptions, 0);
  EXPECT_GT(r.task_restarts, 0);
  EXPECT_EQ(r.finished_jobs + r.infeasible_jobs + r.failed_jobs, r.jobs);
  EXPECT_EQ(r.unfinished_jobs, 0u);
  size_t ended = 0;
  for (const JobOutcome& o2 : r.outcomes) {
    if (o2.infeasible || o2.failed) {
      ++ended;
      EXPECT_FALSE(o2.reason.empty());
      EXPECT_EQ(o2.finish_us, -1);
    } else {
      EXPECT_GE(o2.finish_us, o2.arrival_us);
    }
  }
  EXPECT_EQ(ended, r.infeasible_jobs + r.failed_jobs);
}

TEST(SimTest, FillExperimentTurnsAwayWhatDoesNotFit) {
  spec::FleetSpec f = Fleet(R"(
sites: [{name: dc}]
nodes: [{name: n, site: dc, cpu: 8, memory: 64GiB, devices: {type: T4, count: 2}, price: $1/h}]
)");
  Trace base = Csv("job,arrival_s,duration_s,gpus\na,0,10,1\n", f.fleet);
  Trace t = FillTrace(base, 2000, 2.0);
  ASSERT_EQ(t.jobs.size(), 4u);
  SimOptions o;
  o.fill = true;
  SimResult r = Replay(f, t, "best-fit", o);
  EXPECT_EQ(r.rejected_jobs, 2u);
  EXPECT_DOUBLE_EQ(r.unallocated_gpus_at_full, 0);
  ASSERT_FALSE(r.fill_curve.empty());
  EXPECT_DOUBLE_EQ(r.fill_curve.back().value, 1.0);
  EXPECT_THAT(HtmlReport({r}, "fill"), HasSubstr("GPU allocation as demand arrives"));
}

TEST(SimTest, HtmlReportIsSelfContained) {
  spec::FleetSpec f = Fleet(kOneGpu);
  Trace t = Csv("job,arrival_s,duration_s,gpus\na,0,10,1\nb,0,10,1\n", f.fleet);
  std::string html = HtmlReport({Replay(f, t), Replay(f, t, "first-fit")}, "test <report>");
  EXPECT_THAT(html, HasSubstr("<svg"));
  EXPECT_THAT(html, HasSubstr("test &lt;report&gt;"));
  EXPECT_THAT(html, HasSubstr("first-fit"));
  EXPECT_THAT(html, ::testing::Not(HasSubstr("<script src")));
  EXPECT_THAT(html, ::testing::Not(HasSubstr("http")));
}

// A policy keeps its colour whatever the order compared, and a legend of every
// policy stays inside the chart (one that would not fit wraps to another row).
TEST(SimTest, APolicyHasOneColourInEveryReportAndLegendsStayInside) {
  spec::FleetSpec f = Fleet(kOneGpu);
  Trace t = Csv("job,arrival_s,duration_s,gpus\na,0,10,1\nb,0,10,1\n", f.fleet);
  const SimResult meridian = Replay(f, t), best = Replay(f, t, "best-fit"), cheap = Replay(f, t, "cheapest-region");
  const std::string one = HtmlReport({meridian, best}, "one"), other = HtmlReport({cheap, best, meridian}, "other");
  for (const std::string* html : {&one, &other}) {
    EXPECT_THAT(*html, HasSubstr("<td style='color:#0072b2'>&#9632; meridian</td>"));
    EXPECT_THAT(*html, HasSubstr("<td style='color:#009e73'>&#9632; best-fit</td>"));
  }
  EXPECT_THAT(other, HasSubstr("<td style='color:#6b4c2a'>&#9632; cheapest-region</td>"));
  // All seven: every entry ends left of the plot's right edge (760 - 56).
  std::vector<SimResult> many;
  for (const char* p : {"meridian", "frag-aware", "first-fit", "best-fit", "random", "agnostic", "cheapest-region"}) {
    many.push_back(Replay(f, t, p));
  }
  const std::string html = HtmlReport(many, "many");
  size_t at = 0;
  int entries = 0;
  while ((at = html.find("<text x='", at)) != std::string::npos) {
    at += 9;
    const double x = std::atof(html.c_str() + at);
    const size_t close = html.find("</text>", at);
    const std::string text = html.substr(html.find('>', at) + 1, close - html.find('>', at) - 1);
    if (text.rfind("&#9632; ", 0) != 0) continue;
    ++entries;
    const double width = 28 + 7.0 * static_cast<double>(text.size() - 8);
    EXPECT_LE(x + width, 760 - 56) << text;
  }
  EXPECT_EQ(entries, 14);  // seven in each of the two charts
}

TEST(SimTest, RejectsAFleetWithoutNodesAndUnknownPolicies) {
  spec::FleetSpec f = Fleet(kOneGpu);
  Trace t = Csv("job,arrival_s,duration_s\na,0,1\n", f.fleet);
  EXPECT_THAT(std::string(NamedPolicy("fastest-ever", t).status().message()), HasSubstr("unknown policy 'fastest-ever'"));
  model::Fleet empty;
  SimOptions o;
  EXPECT_FALSE(Simulate(empty, f.throughput, t, o, Env::Default()).ok());
}

}  // namespace
}  // namespace meridian::sim
