#include "spec/job_spec.h"

#include <map>
#include <tuple>
#include <fmt/format.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/units.h"
#include "spec/fleet_spec.h"

namespace meridian::spec {
namespace {

using ::testing::HasSubstr;

constexpr const char* kFleet = R"(sites:
  - {name: us-east, region: us-east-1}
  - {name: eu-west, region: eu-west-1}
links:
  - {between: [us-east, eu-west], rtt: 80ms, bandwidth: 1Gbps}
nodes:
  - {name: a100, site: us-east, cpu: 96, memory: 680GiB, devices: {type: A100, count: 8}}
  - {name: t4, site: eu-west, cpu: 8, memory: 32GiB, devices: {type: T4}}
throughput:
  kinds:
    - {kind: gemm, unit: TFLOP, per_second: {A100: 250, T4: 50}}
)";

constexpr const char* kJob = R"(name: etl
tenant: default
priority: 5
objective: cheapest
deadline: 2h
budget: $12.50
regions: [eu, us-east]
datasets:
  - name: logs
    shards:
      - {size: 10GiB, at: eu-west}
      - {size: 2GiB, at: [us-east, eu-west], residency: [eu]}
tasks:
  - name: prep
    kernel: sum
    duration: 30s
  - name: count
    kernel: word_count
    map: {over: dataset://logs}
    after: [prep]
    work: {kind: gemm, amount: 100}
    resources: {accelerator: {any_of: [a100, T4]}, share: 0.5, min_memory: 16GiB, cpu: 2, memory: 4GiB}
    output_size: 1MiB
  - name: merge
    command: [./merge, --out, result]
    reduce: count
    inputs: [{name: dict, size: 1GiB, at: us-east}]
  - name: train
    kernel: matmul
    replicas: 3
    resources: {accelerator: A100, count: 2}
    retries: 2
    timeout: 1h
)";

class JobSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<FleetSpec> f = ParseFleet(kFleet, "fleet.yaml", "");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fleet_ = std::move(*f);
  }
  StatusOr<model::Job> Parse(const std::string& text) {
    return ParseJob(text, "job.yaml", fleet_.fleet, fleet_.throughput);
  }
  FleetSpec fleet_;
};

TEST_F(JobSpecTest, LoadsAndExpandsMapsReducesAndReplicas) {
  StatusOr<model::Job> job = Parse(kJob);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->name, "etl");
  EXPECT_EQ(job->priority, 5);
  EXPECT_EQ(job->objective, model::Objective::kCheapest);
  EXPECT_EQ(job->deadline_us, 2 * kHourUs);
  EXPECT_EQ(job->budget_micro_usd, 12'500'000);
  ASSERT_EQ(job->tasks.size(), 7u);  // prep, count/0, count/1, merge, train/0..2
  const model::Task* c1 = job->FindTask("count/1");
  ASSERT_NE(c1, nullptr);
  EXPECT_EQ(c1->inputs.size(), 1u);
  EXPECT_EQ(c1->inputs[0].size_bytes, 2 * kGiB);
  EXPECT_EQ(c1->inputs[0].locations.size(), 2u);
  EXPECT_EQ(c1->inputs[0].residency, std::vector<std::string>{"eu"});
  EXPECT_EQ(c1->after, std::vector<TaskId>{TaskId(0)});
  EXPECT_EQ(c1->resources.accelerator_any_of, (std::vector<std::string>{"A100", "T4"}));
  EXPECT_EQ(c1->resources.device_count, 1);
  EXPECT_EQ(c1->resources.device_share_milli, 500);
  EXPECT_EQ(c1->resources.min_device_memory_bytes, 16 * kGiB);
  EXPECT_EQ(c1->resources.cpu_milli, 2000);
  EXPECT_EQ(c1->work->amount, 100.0);
  const model::Task* merge = job->FindTask("merge");
  ASSERT_NE(merge, nullptr);
  EXPECT_EQ(merge->after, (std::vector<TaskId>{TaskId(1), TaskId(2)}));
  EXPECT_EQ(merge->command.size(), 3u);
  EXPECT_EQ(merge->resources.device_count, 0);
  const model::Task* t2 = job->FindTask("train/2");
  ASSERT_NE(t2, nullptr);
  EXPECT_EQ(t2->gang, "train");
  EXPECT_EQ(t2->resources.device_count, 2);
  EXPECT_EQ(t2->timeout_us, kHourUs);
  EXPECT_EQ(job->FindTask("prep")->duration_us, 30 * kSecondUs);
  // One gang, its members in rank order; the rest in none.
  ASSERT_EQ(job->gangs.size(), 1u);
  EXPECT_EQ(job->gangs[0].name, "train");
  EXPECT_EQ(job->gangs[0].members, (std::vector<TaskId>{TaskId(4), TaskId(5), TaskId(6)}));
  EXPECT_EQ(t2->gang_id, 0);
  EXPECT_EQ(t2->gang_rank, 2u);
  EXPECT_EQ(merge->gang_id, -1);
  EXPECT_EQ(job->gang_failure, model::GangFailure::kRestart);
}

TEST_F(JobSpecTest, TasksNamingOneGangAreItsMembersInTaskOrder) {
  StatusOr<model::Job> job = Parse(R"(name: g
gang_failure: fail
tasks:
  - {name: master, kernel: sum, gang: ring}
  - {name: solo, kernel: sum}
  - {name: worker, kernel: sum, count: 2, gang: ring}
)");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->gang_failure, model::GangFailure::kFail);
  ASSERT_EQ(job->gangs.size(), 1u);
  EXPECT_EQ(job->gangs[0].members, (std::vector<TaskId>{TaskId(0), TaskId(2), TaskId(3)}));
  EXPECT_EQ(job->FindTask("worker/1")->gang_rank, 2u);
  EXPECT_EQ(job->FindTask("solo")->gang_id, -1);
  StatusOr<model::Job> elastic = Parse("name: e\ngang_failure: elastic\ntasks:\n  - {name: w, kernel: sum, replicas: 2}\n");
  ASSERT_TRUE(elastic.ok()) << elastic.status().ToString();
  EXPECT_EQ(elastic->gang_failure, model::GangFailure::kElastic);
}

TEST_F(JobSpecTest, AGangMemberMayNotWaitForAnotherMemberOfItsGang) {
  StatusOr<model::Job> direct = Parse(R"(name: g
tasks:
  - {name: master, kernel: sum, gang: ring}
  - {name: worker, kernel: sum, gang: ring, after: [master]}
)");
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().message(),
            "job.yaml:4:5: tasks[1]: task 'worker' depends on 'master' (directly or through other tasks), a member "
            "of its own gang 'ring': a gang's members start together");
  StatusOr<model::Job> through = Parse(R"(name: g
tasks:
  - {name: master, kernel: sum, gang: ring}
  - {name: prep, kernel: sum, count: 2, after: [master]}
  - {name: worker, kernel: sum, replicas: 2, gang: ring, after: [prep]}
)");
  ASSERT_FALSE(through.ok());
  EXPECT_THAT(through.status().message(), HasSubstr("task 'worker/1' depends on 'master' (directly or through"));
}

struct BadJob {
  const char* name;
  std::string from;
  std::string to;
  const char* want;
};

class BadJobTest : public JobSpecTest, public ::testing::WithParamInterface<BadJob> {};

TEST_F(JobSpecTest, ACommandsEnvIsKeptAsWrittenAndItsNamesAreChecked) {
  StatusOr<model::Job> ok = Parse(
      "name: e\ntasks:\n  - {name: a, command: [env], env: {MODEL: resnet, BATCH: 64, _X1: 'a b'}, count: 2}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->tasks.size(), 2u);
  for (const model::Task& t : ok->tasks) {
    EXPECT_EQ(t.env, (std::map<std::string, std::string>{{"BATCH", "64"}, {"MODEL", "resnet"}, {"_X1", "a b"}}));
  }
  struct Bad {
    std::string env;
    std::string error;
  };
  const std::vector<Bad> bad = {
      {"{MERIDIAN_TASK: x}", "job.yaml:3:37: tasks[0].env.MERIDIAN_TASK: MERIDIAN_TASK is Meridian's to set "
                             "(MERIDIAN_*, HOME, CUDA_VISIBLE_DEVICES)"},
      {"{HOME: /root}", "job.yaml:3:37: tasks[0].env.HOME: HOME is Meridian's to set (MERIDIAN_*, HOME, "
                        "CUDA_VISIBLE_DEVICES)"},
      {"{1X: y}", "job.yaml:3:37: tasks[0].env.1X: a variable's name is letters, digits and '_' (not first), at "
                  "most 128 of them"},
      {"{A-B: y}", "job.yaml:3:37: tasks[0].env.A-B: a variable's name is letters, digits and '_' (not first), at "
                   "most 128 of them"},
      {"[A, B]", "job.yaml:3:36: tasks[0].env: expected a map of NAME: value"},
  };
  for (const Bad& b : bad) {
    StatusOr<model::Job> j = Parse("name: e\ntasks:\n  - {name: a, command: [env], env: " + b.env + "}\n");
    ASSERT_FALSE(j.ok()) << b.env;
    EXPECT_EQ(j.status().message(), b.error) << b.env;
  }
  StatusOr<model::Job> kernel = Parse("name: e\ntasks:\n  - {name: a, kernel: sum, env: {A: b}}\n");
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().message(),
            "job.yaml:3:33: tasks[0].env: only a command has an environment (a kernel reads 'args')");
  std::string many = "{";
  for (int i = 0; i < 65; ++i) many += (i ? ", V" : "V") + std::to_string(i) + ": x";
  StatusOr<model::Job> too_many = Parse("name: e\ntasks:\n  - {name: a, command: [env], env: " + many + "}}\n");
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().message(), "job.yaml:3:36: tasks[0].env: at most 64 variables, got 65");
  StatusOr<model::Job> long_value =
      Parse("name: e\ntasks:\n  - {name: a, command: [env], env: {A: " + std::string(4097, 'x') + "}}\n");
  ASSERT_FALSE(long_value.ok());
  EXPECT_EQ(long_value.status().message(),
            "job.yaml:3:40: tasks[0].env.A: a value is at most 4096 bytes, without NUL");
}

// A command stopped (cancelled, timed out) gets SIGTERM and `stop_grace` before
// SIGKILL: a server drains its requests (a service's replica asks 30 s).
TEST_F(JobSpecTest, ACommandsStopGraceIsReadAndBounded) {
  StatusOr<model::Job> ok = Parse("name: g\ntasks:\n  - {name: a, command: [srv], stop_grace: 30s, count: 2}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  for (const model::Task& t : ok->tasks) EXPECT_EQ(t.stop_grace_us, 30 * kSecondUs);
  StatusOr<model::Job> none = Parse("name: g\ntasks:\n  - {name: a, command: [srv]}\n");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->tasks[0].stop_grace_us, 0);
  StatusOr<model::Job> kernel = Parse("name: g\ntasks:\n  - {name: a, kernel: sum, stop_grace: 5s}\n");
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().message(),
            "job.yaml:3:40: tasks[0].stop_grace: only a command is stopped with a grace period");
  StatusOr<model::Job> long_grace = Parse("name: g\ntasks:\n  - {name: a, command: [srv], stop_grace: 10m}\n");
  ASSERT_FALSE(long_grace.ok());
  EXPECT_EQ(long_grace.status().message(), "job.yaml:3:43: tasks[0].stop_grace: expected 0s to "
                                           "5m 00s, got 10m 00s");
}

// `fallback`: where a job's tasks may run too once they have waited, with its own
// regions only, bounded, and every rule matching a site.
TEST_F(JobSpecTest, AFallbackIsReadWithItsRegionsAndWaitAndChecked) {
  StatusOr<model::Job> ok = Parse("name: f\nregions: [eu]\nfallback: {regions: [us-east], after: 20s}\ntasks:\n"
                                  "  - {name: a, command: [srv]}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->allowed_regions, std::vector<std::string>{"eu"});
  EXPECT_EQ(ok->fallback_regions, std::vector<std::string>{"us-east"});
  EXPECT_EQ(ok->fallback_after_us, 20 * kSecondUs);
  StatusOr<model::Job> none = Parse("name: f\nregions: [eu]\ntasks:\n  - {name: a, command: [srv]}\n");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->fallback_regions.empty());
  EXPECT_EQ(none->fallback_after_us, 0);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"fallback: {regions: [us-east], after: 20s}",
       "job.yaml:2:11: fallback: needs the job's 'regions': without them its tasks may run anywhere already"},
      {"regions: [eu]\nfallback: {regions: [ap], after: 20s}", "fallback.regions: 'ap' matches no site"},
      {"regions: [eu]\nfallback: {regions: [], after: 20s}",
       "job.yaml:3:21: fallback.regions: must name at least one region"},
      {"regions: [eu]\nfallback: {regions: [us-east]}",
       "job.yaml:3:11: fallback: missing required field 'after' (how long a task waits first)"},
      {"regions: [eu]\nfallback: {after: 20s}",
       "job.yaml:3:11: fallback: missing required field 'regions' (where its tasks may run then)"},
      {"regions: [eu]\nfallback: {regions: [us-east], after: 500ms}",
       "job.yaml:3:39: fallback.after: must be from 1s to 7d"},
      {"regions: [eu]\nfallback: {regions: [us-east], after: 8d}", "job.yaml:3:39: fallback.after: must be from 1s to 7d"},
      {"regions: [eu]\nfallback: {regions: [us-east], after: 20s, when: always}",
       "job.yaml:3:44: fallback: unknown field 'when' (expected one of: regions, after)"},
  };
  for (const auto& [header, want] : bad) {
    StatusOr<model::Job> job = Parse("name: f\n" + header + "\ntasks:\n  - {name: a, command: [srv]}\n");
    ASSERT_FALSE(job.ok()) << header;
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << header;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(want)) << header;
  }
}

TEST_F(JobSpecTest, NodeLabelsAndSpotRulesAreRead) {
  StatusOr<model::Job> ok = Parse(
      "name: l\ntasks:\n  - {name: a, kernel: sum, resources: {labels: {zone: a, tier: \"1\"}, spot: never}}\n"
      "  - {name: b, kernel: sum, resources: {spot: only}}\n  - {name: c, kernel: sum}\n"
      "  - {name: d, kernel: sum, resources: {spot: prefer}}\n  - {name: e, kernel: sum, resources: {spot: avoid}}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->tasks[0].resources.node_labels, (std::map<std::string, std::string>{{"tier", "1"}, {"zone", "a"}}));
  EXPECT_EQ(ok->tasks[0].resources.spot, model::SpotRule::kNever);
  EXPECT_EQ(ok->tasks[1].resources.spot, model::SpotRule::kOnly);
  EXPECT_EQ(ok->tasks[2].resources.spot, model::SpotRule::kAny);
  EXPECT_EQ(ok->tasks[3].resources.spot, model::SpotRule::kPrefer);
  EXPECT_EQ(ok->tasks[4].resources.spot, model::SpotRule::kAvoid);
  EXPECT_TRUE(ok->tasks[2].resources.node_labels.empty());
  StatusOr<model::Job> bad = Parse("name: l\ntasks:\n  - {name: a, kernel: sum, resources: {spot: maybe}}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("tasks[0].resources.spot"));
  StatusOr<model::Job> list = Parse("name: l\ntasks:\n  - {name: a, kernel: sum, resources: {labels: [zone]}}\n");
  ASSERT_FALSE(list.ok());
  EXPECT_THAT(std::string(list.status().message()),
              ::testing::HasSubstr("tasks[0].resources.labels: expected a map of label: value"));
}

TEST_F(JobSpecTest, OutputDatasetsAreNamedOncePerJobAndOnlyOnTheTasksThatWriteThem) {
  StatusOr<model::Job> ok = Parse(
      "name: o\ntasks:\n  - {name: part, kernel: sum, count: 5, output_dataset: parts}\n"
      "  - {name: merge, kernel: sum, reduce: {of: part, fan_in: 2}, output_dataset: merged}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  std::map<std::string, int> writers;
  for (const model::Task& t : ok->tasks) ++writers[t.output_dataset];
  EXPECT_EQ(writers["parts"], 5);
  EXPECT_EQ(writers["merged"], 1);  // the tree's inner merges write none
  for (const model::Task& t : ok->tasks) {
    if (t.name == "merge") {
      EXPECT_EQ(t.output_dataset, "merged");
    }
  }
  StatusOr<model::Job> twice = Parse(
      "name: o\ntasks:\n  - {name: a, kernel: sum, output_dataset: d}\n  - {name: b, kernel: sum, output_dataset: d}\n");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(),
            "job.yaml:4:44: tasks[1].output_dataset: task 'a' writes dataset 'd' already; each dataset is one task's "
            "outputs");
  StatusOr<model::Job> bad = Parse("name: o\ntasks:\n  - {name: a, kernel: sum, output_dataset: 'a/b'}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("tasks[0].output_dataset: "));
  StatusOr<model::Job> id = Parse("name: o\ntasks:\n  - {name: a, kernel: sum, output_dataset: " + std::string(32, 'f') + "}\n");
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(std::string(id.status().message()), ::testing::HasSubstr("must not read as an object id"));
}

TEST_F(JobSpecTest, ReduceWithAFanInBuildsATree) {
  StatusOr<model::Job> job = Parse(
      "name: tree\ntasks:\n  - {name: part, kernel: sum, count: 10}\n"
      "  - {name: total, kernel: sum, reduce: {of: part, fan_in: 3}}\n");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  // 10 parts -> 4 merges of up to 3 -> 2 merges -> total over those 2.
  std::map<std::string, std::vector<std::string>> deps;
  for (const model::Task& t : job->tasks) {
    for (TaskId d : t.after) deps[t.name].push_back(job->tasks[d.value()].name);
  }
  EXPECT_EQ(job->tasks.size(), 10u + 4u + 2u + 1u);
  EXPECT_EQ(deps["total/l1-0"], (std::vector<std::string>{"part/0", "part/1", "part/2"}));
  EXPECT_EQ(deps["total/l1-3"], (std::vector<std::string>{"part/9"}));
  EXPECT_EQ(deps["total/l2-1"], (std::vector<std::string>{"total/l1-3"}));
  EXPECT_EQ(deps["total"], (std::vector<std::string>{"total/l2-0", "total/l2-1"}));
  // A fan-in at least the number of inputs is one task, as without it.
  StatusOr<model::Job> flat = Parse(
      "name: flat\ntasks:\n  - {name: part, kernel: sum, count: 3}\n"
      "  - {name: total, kernel: sum, reduce: {of: part, fan_in: 8}}\n");
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->tasks.size(), 4u);
  StatusOr<model::Job> bad = Parse("name: x\ntasks:\n  - {name: part, kernel: sum}\n"
                                   "  - {name: total, kernel: sum, reduce: {of: part, fan_in: 1}}\n");

  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("fan_in"));
}

TEST_F(JobSpecTest, LargeReduceTreesKeepEveryMergeWhole) {
  // 200 parts at fan-in 2 grow the task list many times while the tree is built (a
  // reference into it once dangled: ASan caught a use-after-free, a cluster got empty
  // commands). Every merge must be a full copy of the template.
  for (auto [count, fan_in, merges] : {std::tuple{200, 2, 202}, std::tuple{500, 8, 72}}) {
    StatusOr<model::Job> job = Parse(fmt::format(
        "name: big\ntasks:\n  - {{name: part, kernel: sum, count: {}}}\n"
        "  - {{name: total, kernel: sum, args: {{n: 7}}, reduce: {{of: part, fan_in: {}}}}}\n",
        count, fan_in));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    EXPECT_EQ(job->tasks.size(), static_cast<size_t>(count + merges)) << count << "/" << fan_in;
    size_t roots = 0;
    for (const model::Task& t : job->tasks) {
      if (t.name.rfind("total", 0) != 0) continue;
      EXPECT_EQ(t.kernel, "sum") << t.name;
      EXPECT_EQ(t.args, (std::map<std::string, std::string>{{"n", "7"}})) << t.name;
      EXPECT_LE(t.after.size(), static_cast<size_t>(fan_in)) << t.name;
      EXPECT_FALSE(t.after.empty()) << t.name;
      if (t.name == "total") ++roots;
    }
    EXPECT_EQ(roots, 1u);
  }
}

// What is derived from data bound to places stays bound to them: outputs carry
// their inputs' and dependencies' residency, unless the job frees them.
TEST_F(JobSpecTest, OutputsInheritTheResidencyOfWhatTheyAreMadeFrom) {
  const std::string text = R"(name: derived
tasks:
  - name: clean
    kernel: sum
    inputs: [{name: raw, size: 1GiB, at: eu-west, residency: [eu]}]
  - name: mix
    kernel: sum
    inputs: [{name: other, size: 1GiB, at: [us-east, eu-west], residency: [eu-west, us-east]}]
    after: [clean]
  - name: free
    kernel: sum
  - name: report
    kernel: sum
    after: [mix, free]
)";
  StatusOr<model::Job> job = Parse(text);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->FindTask("clean")->output_residency, std::vector<std::string>{"eu"});
  // Two different rules: the sites that satisfy both, by name.
  EXPECT_EQ(job->FindTask("mix")->output_residency, std::vector<std::string>{"eu-west"});
  EXPECT_TRUE(job->FindTask("free")->output_residency.empty());
  EXPECT_EQ(job->FindTask("report")->output_residency, std::vector<std::string>{"eu-west"});

  StatusOr<model::Job> freed = Parse("output_residency: anywhere\n" + text);
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  for (const model::Task& t : freed->tasks) EXPECT_TRUE(t.output_residency.empty()) << t.name;
  EXPECT_THAT(Parse("output_residency: nowhere\n" + text).status().message(),
              HasSubstr("job.yaml:1:19: output_residency: expected inherit or anywhere, got 'nowhere'"));
}

TEST_F(JobSpecTest, TasksWithoutATimeUnderACostObjectiveAreWarnedAbout) {
  // `cheapest` (or a deadline, or a budget) weighs each task's time; a task with no
  // duration or work was priced at $0 without a word.
  StatusOr<model::Job> job = Parse(
      "name: cheap\nobjective: cheapest\ntasks:\n  - {name: a, kernel: sum}\n  - {name: b, kernel: sum, duration: 1m}\n");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->warnings.size(), 1u);
  EXPECT_THAT(job->warnings[0], HasSubstr(":4:5: tasks[0]: task 'a' has no 'duration' or 'work': its time and cost "
                                          "count as zero"));
  StatusOr<model::Job> fast = Parse("name: fast\ntasks:\n  - {name: a, kernel: sum}\n");
  ASSERT_TRUE(fast.ok());
  EXPECT_TRUE(fast->warnings.empty());
}

TEST_F(JobSpecTest, QubitsAskForTheDeviceMemoryOfTheirStateVector) {
  // 2^30 amplitudes of 16 bytes: 16 GiB of one device, more than a T4's own.
  StatusOr<model::Job> job = Parse(
      "name: q\ntasks:\n  - {name: a, kernel: qsim, resources: {qubits: 30}}\n"
      "  - {name: b, kernel: qsim, resources: {qubits: 20, min_memory: 1GiB, accelerator: A100}}\n");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->tasks[0].resources.device_count, 1);
  EXPECT_EQ(job->tasks[0].resources.min_device_memory_bytes, 16 * kGiB);
  EXPECT_EQ(job->tasks[1].resources.min_device_memory_bytes, 1 * kGiB);  // the larger of the two
  EXPECT_EQ(job->tasks[1].resources.accelerator_any_of, std::vector<std::string>{"A100"});
  StatusOr<model::Job> big = Parse("name: q\ntasks:\n  - {name: a, kernel: qsim, resources: {qubits: 41}}\n");
  EXPECT_THAT(big.status().message(), HasSubstr("tasks[0].resources.qubits: expected an integer from 1 to 40, got 41"));
  StatusOr<model::Job> none = Parse("name: q\ntasks:\n  - {name: a, kernel: qsim, resources: {qubits: 4, count: 0}}\n");
  EXPECT_THAT(none.status().message(), HasSubstr("'accelerator', 'share', 'min_memory' and 'qubits' need 'count' of at least 1"));
}

TEST_P(BadJobTest, RejectsWithLocatedMessageAndLoadsNothing) {
  const BadJob& c = GetParam();
  std::string text = kJob;
  size_t at = text.find(c.from);
  ASSERT_NE(at, std::string::npos) << c.from;
  text.replace(at, c.from.size(), c.to);
  StatusOr<model::Job> job = Parse(text);
  ASSERT_FALSE(job.ok()) << c.name;
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr(c.want)) << c.name;
  EXPECT_THAT(job.status().message(), HasSubstr("job.yaml:")) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadJobTest,
    ::testing::Values(
        BadJob{"syntax", "regions: [eu, us-east]", "regions: [eu, us-east", "invalid YAML"},
        BadJob{"unknown field", "    retries: 2", "    retry: 2",
               "job.yaml:32:5: tasks[3]: unknown field 'retry'"},
        BadJob{"wrong unit", "deadline: 2h", "deadline: 2 fortnights", "deadline: unknown unit 'fortnights'"},
        BadJob{"negative count", "count: 2", "count: -2", "tasks[3].resources.count: expected an integer from 0 to 64, got -2"},
        BadJob{"unknown site", "{size: 10GiB, at: eu-west}", "{size: 10GiB, at: ap-south}",
               "datasets[0].shards[0].at: unknown site 'ap-south'"},
        BadJob{"duplicate task", "  - name: merge", "  - name: prep", "duplicate task name 'prep'"},
        BadJob{"unknown dependency", "after: [prep]", "after: [prepare]", "tasks[1].after: unknown task 'prepare'"},
        BadJob{"unknown dataset", "dataset://logs}", "dataset://logz}", "map.over: expected dataset://NAME"},
        BadJob{"unknown objective", "objective: cheapest", "objective: cheap", "expected fastest, cheapest or balanced"},
        BadJob{"unknown work kind", "kind: gemm", "kind: fft", "work kind 'fft' is not in the fleet's throughput table (known: gemm)"},
        BadJob{"kernel and command", "    command: [./merge", "    kernel: x\n    command: [./merge", "exactly one of 'kernel' or 'command'"},
        BadJob{"share out of range", "share: 0.5", "share: 1.5", "share of each device in (0, 1]"},
        BadJob{"region matching nothing", "regions: [eu, us-east]", "regions: [ap]", "'ap' matches no site"},
        BadJob{"unknown accelerator", "accelerator: A100", "accelerator: B200", "unknown accelerator type 'B200'"},
        BadJob{"cycle", "  - name: prep\n    kernel: sum", "  - name: prep\n    after: [merge]\n    kernel: sum", "is on a dependency cycle"},
        BadJob{"negative budget", "budget: $12.50", "budget: $-12.50", "budget: an amount in USD must not be negative"},
        BadJob{"gang failure", "priority: 5", "priority: 5\ngang_failure: retry",
               "job.yaml:4:15: gang_failure: expected restart, fail or elastic, got 'retry'"},
        BadJob{"gang variable", "    reduce: count", "    reduce: count\n    gang: m\n    env: {RANK: '0'}",
               "tasks[2].env.RANK: RANK is Meridian's to set for a gang's members"}),

    [](const ::testing::TestParamInfo<BadJob>& info) {
      std::string n = info.param.name;
      for (char& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

}  // namespace
}  // namespace meridian::spec
