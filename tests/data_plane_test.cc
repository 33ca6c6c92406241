// The data plane end to end, as real processes: objects put on agents at one site and
// fetched at another over the transfer protocol (with the fleet's links emulated),
// datasets whose map tasks run where the data is or move it when that pays, and the
// bytes each job moved between sites. Transfer faults (a cut connection, a corrupted
// chunk) are tested on the transfer layer itself, src/objects/objects_test.cc.
#include <fstream>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "local_cluster.h"

namespace meridian::testing {
namespace {

// `size` bytes that differ everywhere (a misplaced chunk shows).
void WritePattern(const std::string& path, size_t size, uint64_t seed) {
  std::ofstream out(path, std::ios::binary);
  std::string block(1 << 20, '\0');
  uint64_t x = seed;
  for (size_t done = 0; done < size;) {
    for (size_t i = 0; i + 8 <= block.size(); i += 8) {
      uint64_t v = (x += 0x9E3779B97F4A7C15ull);
      v = (v ^ (v >> 31)) * 0xBF58476D1CE4E5B9ull;
      std::memcpy(block.data() + i, &v, 8);
    }
    size_t n = std::min(block.size(), size - done);
    out.write(block.data(), static_cast<std::streamsize>(n));
    done += n;
  }
}

bool SameFiles(const std::string& a, const std::string& b) {
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  std::string ba(1 << 20, '\0'), bb(1 << 20, '\0');
  while (fa && fb) {
    fa.read(ba.data(), static_cast<std::streamsize>(ba.size()));
    fb.read(bb.data(), static_cast<std::streamsize>(bb.size()));
    if (fa.gcount() != fb.gcount() || std::memcmp(ba.data(), bb.data(), static_cast<size_t>(fa.gcount())) != 0) {
      return false;
    }
  }
  return fa.eof() && fb.eof();
}

std::map<std::pair<std::string, std::string>, int64_t> Traffic(const model::JobView& v) {
  std::map<std::pair<std::string, std::string>, int64_t> out;
  for (const model::JobTraffic& t : v.traffic) out[{t.from_site, t.to_site}] += t.bytes;
  return out;
}

const model::TaskView& TaskNamed(const model::JobView& v, const std::string& name) {
  for (const model::TaskView& t : v.tasks) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no task " << name;
  static model::TaskView none;
  return none;
}

TEST(DataPlaneTest, ObjectsRoundTripBetweenSitesByteExact) {
  LocalCluster cluster(SourceDir() + "/tests/fleets/local-three-sites.yaml");
  ASSERT_TRUE(cluster.Up());
  for (size_t size : {size_t{0}, size_t{1}, (size_t{5} << 20) + 3}) {
    const std::string in = cluster.dir() + "/in-" + std::to_string(size);
    const std::string back = cluster.dir() + "/back-" + std::to_string(size);
    WritePattern(in, size, size + 1);
    CommandResult put = Meridian({"objects", "put", in, "--site", "factory", "--dir", cluster.dir(), "--json"});
    ASSERT_EQ(put.exit_code, 0) << put.err;
    nlohmann::json placed = nlohmann::json::parse(put.out);
    ASSERT_EQ(placed["replicas"].size(), 1u);
    EXPECT_EQ(placed["replicas"][0]["site"], "factory");
    CommandResult get = Meridian({"objects", "get", placed["id"].get<std::string>(), "-o", back, "--site", "eu-west",
                                  "--dir", cluster.dir()});
    ASSERT_EQ(get.exit_code, 0) << get.err;
    EXPECT_NE(get.out.find("from edge-t4@factory"), std::string::npos) << get.out;
    EXPECT_TRUE(SameFiles(in, back)) << size << " bytes came back different";
  }
  // By name, and the errors.
  const std::string named = cluster.WriteFile("named.txt", "hello, objects\n");
  ASSERT_EQ(Meridian({"objects", "put", named, "--name", "greeting", "--dir", cluster.dir()}).exit_code, 0);
  CommandResult got = Meridian({"objects", "get", "greeting", "--dir", cluster.dir()});
  EXPECT_EQ(got.out, "hello, objects\n");
  CommandResult again = Meridian({"objects", "put", cluster.WriteFile("other.txt", "x"), "--name", "greeting",
                                  "--dir", cluster.dir()});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("the name 'greeting' is taken"), std::string::npos) << again.err;
  CommandResult missing = Meridian({"objects", "get", "nothing-here", "--dir", cluster.dir()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("no object named 'nothing-here'"), std::string::npos) << missing.err;

  // Deleting: a put undone lets the node drop the object; a named one is kept.
  const std::string once = cluster.WriteFile("once.txt", "put once\n");
  CommandResult put = Meridian({"objects", "put", once, "--dir", cluster.dir(), "--json"});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  const std::string id = nlohmann::json::parse(put.out)["id"];
  CommandResult rm = Meridian({"objects", "rm", id, "--dir", cluster.dir()});
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(rm.out, "object " + id + " (9 B): one put undone; the node lets go of it once nothing else holds it\n");
  // Again: nothing left to undo; or, once the node's heartbeat said it dropped the
  // object, no such object.
  CommandResult twice = Meridian({"objects", "rm", id, "--dir", cluster.dir()});
  EXPECT_EQ(twice.exit_code, 2);
  const std::string no_put = "meridian: objects rm " + id + ": tenant 'default' has no put of object " + id +
                             " to undo (only puts since the coordinator last started are; a task's output goes with "
                             "its job: meridian delete JOB)\n";
  const std::string no_object = "meridian: objects rm " + id + ": no object " + id + " in the cluster\n";
  EXPECT_TRUE(twice.err == no_put || twice.err == no_object) << twice.err;
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = Meridian({"objects", "get", id, "--dir", cluster.dir()}).err.find("no object " + id) != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "object " << id << " is still in the cluster after its one put was undone";
  CommandResult kept = Meridian({"objects", "rm", "greeting", "--dir", cluster.dir()});
  EXPECT_EQ(kept.exit_code, 2);
  EXPECT_EQ(kept.err, "meridian: objects rm greeting: 'greeting' is not an object id (32 hex digits); objects are "
                      "deleted by id\n");
}

TEST(DataPlaneTest, AnObjectOverOneGibMovesBetweenAgentsAtTwoSites) {
  LocalCluster cluster(SourceDir() + "/tests/fleets/two-sites-fast.yaml");
  ASSERT_TRUE(cluster.Up());
  const size_t size = (size_t{1} << 30) + 4097;
  const std::string in = cluster.dir() + "/big";
  WritePattern(in, size, 7);
  CommandResult put = Meridian({"data", "put", in, "--name", "big", "--site", "east", "--dir", cluster.dir()});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  std::filesystem::remove(in);
  // Only the west node has an A100: its agent fetches the shard from east's, checks
  // every chunk and the id, and hands it to the task. A kernel holds its inputs in the
  // agent: this one asks for the memory (1 GiB, what it gets by default, is too little).
  StatusOr<model::JobView> v = cluster.RunJob(
      "name: pull\ntasks:\n  - name: read\n    kernel: noop\n    map: {over: dataset://big}\n"
      "    resources: {accelerator: A100, memory: 2GiB}\n");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->summary.job.status, model::JobStatus::kSucceeded) << v->summary.job.reason;
  EXPECT_EQ(TaskNamed(*v, "read/0").record.site, "west");
  EXPECT_EQ((Traffic(*v)[{"east", "west"}]), static_cast<int64_t>(size));
  // And back out through the CLI, byte for byte.
  WritePattern(in, size, 7);
  CommandResult ls = Meridian({"data", "ls", "big", "--json", "--dir", cluster.dir()});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  const std::string id = nlohmann::json::parse(ls.out)[0]["shards"][0]["id"];
  const std::string back = cluster.dir() + "/big-back";
  ASSERT_EQ(Meridian({"objects", "get", id, "-o", back, "--dir", cluster.dir()}).exit_code, 0);
  EXPECT_TRUE(SameFiles(in, back));
}

TEST(DataPlaneTest, MapTasksRunWhereTheirShardsAreWhenLinksAreSlow) {
  LocalCluster cluster(SourceDir() + "/tests/fleets/local-three-sites.yaml");
  ASSERT_TRUE(cluster.Up());
  // Two shards at us-east, two at factory: 460 KB of words each, few distinct ones.
  for (const char* site : {"us-east", "factory"}) {
    std::filesystem::create_directories(cluster.dir() + "/words/" + site);
    for (int i = 0; i < 2; ++i) {
      std::ofstream out(cluster.dir() + "/words/" + site + "/" + std::to_string(i) + ".txt");
      for (int k = 0; k < 20'000; ++k) out << "alpha beta gamma delta ";
      out << site << " " << site << "\n";
    }
  }
  CommandResult put = Meridian({"data", "put", cluster.dir() + "/words", "--by-site", "--name", "words", "--dir",
                                cluster.dir()});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  EXPECT_NE(put.out.find("4 shards"), std::string::npos) << put.out;
  StatusOr<model::JobView> v = cluster.RunJob(
      "name: count\ntasks:\n  - {name: count, kernel: wordcount, map: {over: dataset://words}}\n"
      "  - {name: total, kernel: wordcount, reduce: count}\n");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->summary.job.status, model::JobStatus::kSucceeded) << v->summary.job.reason;
  // Shards in order of site name: factory's, then us-east's.
  EXPECT_EQ(TaskNamed(*v, "count/0").record.site, "factory");
  EXPECT_EQ(TaskNamed(*v, "count/1").record.site, "factory");
  EXPECT_EQ(TaskNamed(*v, "count/2").record.site, "us-east");
  EXPECT_EQ(TaskNamed(*v, "count/3").record.site, "us-east");
  const model::TaskView& total = TaskNamed(*v, "total");
  EXPECT_NE(total.record.output.find("alpha 80000\n"), std::string::npos) << total.record.output;
  EXPECT_NE(total.record.output.find("factory 4\n"), std::string::npos) << total.record.output;
  EXPECT_NE(total.record.output.find("us 4\n"), std::string::npos) << total.record.output;  // "us-east" splits at '-'
  // The shards were read where they lay; only the small word counts crossed sites.
  auto traffic = Traffic(*v);
  EXPECT_GT((traffic[{"factory", "factory"}]), 900'000);
  EXPECT_GT((traffic[{"us-east", "us-east"}]), 900'000);
  int64_t crossed = 0;
  for (const auto& [sites, bytes] : traffic) crossed += sites.first != sites.second ? bytes : 0;
  EXPECT_LT(crossed, 1000);
  // `job get` shows it, against moving all the raw data to one site.
  CommandResult get = Meridian({"job", "get", std::to_string(v->summary.job.id), "--dir", cluster.dir()});
  EXPECT_NE(get.out.find("Moving all"), std::string::npos) << get.out;
  EXPECT_NE(get.out.find("saved"), std::string::npos) << get.out;
}

TEST(DataPlaneTest, SmallInputsFromOneHolderComeInOneRequest) {
  LocalCluster cluster(SourceDir() + "/tests/fleets/local-three-sites.yaml");
  ASSERT_TRUE(cluster.Up());
  // Six 16 KiB shards at the factory, read by one task that needs an A100 (eu-west):
  // one request over the 25 ms link for all six, not two for each.
  ASSERT_TRUE(cluster.PutLetterShards("parts", "factory", 6, 16 << 10));
  const std::string gather = cluster.WriteFile(
      "gather.yaml",
      "name: gather\ntasks:\n  - {name: gather, kernel: wordcount, inputs: [dataset://parts], "
      "resources: {accelerator: A100}}\n");
  // `plan` against the live cluster sees the dataset where it is and the nodes alive.
  CommandResult plan = Meridian({"plan", gather, "--json", "--dir", cluster.dir()});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const nlohmann::json planned = nlohmann::json::parse(plan.out);
  EXPECT_EQ(planned["tasks"][0]["placement"]["node"], "eu-a100") << plan.out;
  EXPECT_EQ(planned["tasks"][0]["placement"]["transfers"].size(), 6u) << plan.out;
  ASSERT_EQ(planned["links"].size(), 1u) << plan.out;
  EXPECT_EQ(planned["links"][0]["from"], "factory");
  EXPECT_EQ(planned["links"][0]["to"], "eu-west");
  EXPECT_EQ(planned["links"][0]["bytes"], 6 * (16 << 10));
  CommandResult unknown = Meridian({"plan", cluster.WriteFile("nope.yaml", "name: nope\ntasks:\n  - {name: n, kernel: wordcount, inputs: [dataset://nope]}\n"), "--dir", cluster.dir()});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("nope"), std::string::npos) << unknown.err;
  StatusOr<model::JobView> v = cluster.RunJob(
      "name: gather\ntasks:\n  - {name: gather, kernel: wordcount, inputs: [dataset://parts], "
      "resources: {accelerator: A100}}\n");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->summary.job.status, model::JobStatus::kSucceeded) << v->summary.job.reason;
  EXPECT_EQ(TaskNamed(*v, "gather").record.site, "eu-west");
  EXPECT_EQ((Traffic(*v)[{"factory", "eu-west"}]), 6 * (16 << 10));
  // What the factory's agent sent to eu-west, as it reports it (heartbeats carry it).
  // A heartbeat may carry the figures before the last transfer is counted (CI once read
  // 5 of the 6): wait for all six bytes-worth, then check every figure.
  nlohmann::json sent;
  for (int i = 0; i < 100 && (sent.is_null() || sent["bytes"] != 6 * (16 << 10)); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sent = nullptr;
    CommandResult nodes = Meridian({"nodes", "--json", "--dir", cluster.dir()});
    ASSERT_EQ(nodes.exit_code, 0) << nodes.err;
    for (const nlohmann::json& n : nlohmann::json::parse(nodes.out)) {
      if (n["name"] != "edge-t4") continue;
      for (const nlohmann::json& x : n["sent"]) {
        if (x["to_site"] == "eu-west") sent = x;
      }
    }
  }
  ASSERT_FALSE(sent.is_null());
  EXPECT_EQ(sent["transfers"], 6);
  EXPECT_EQ(sent["requests"], 1);
  EXPECT_EQ(sent["waited_us"], 25'000);  // the factory -> eu-west link's round trip, once (no jitter)
  EXPECT_EQ(sent["bytes"], 6 * (16 << 10));
  // With the only A100's agent dead, the plan says the task has nowhere to run.
  cluster.Kill9("agent-eu-a100");
  ASSERT_TRUE(WaitFor(
      [&] {
        auto nodes = cluster.client().Nodes();
        if (!nodes.ok()) return false;
        for (const model::NodeView& n : *nodes) {
          if (n.node.name == "eu-a100") return !n.alive;
        }
        return false;
      },
      30));
  CommandResult stranded = Meridian({"plan", gather, "--dir", cluster.dir()});
  EXPECT_EQ(stranded.exit_code, 1) << stranded.err;
  EXPECT_NE(stranded.out.find("gather [infeasible]"), std::string::npos) << stranded.out;
  EXPECT_NE(stranded.out.find("; the live cluster (its nodes as if idle): 3 nodes at 3 sites"), std::string::npos) << stranded.out;
  EXPECT_NE(stranded.err.find("1 of 1 tasks of job 'gather' cannot be placed"), std::string::npos) << stranded.err;
}

TEST(DataPlaneTest, DataMovesWhenTheLinkIsFastAndTheRemoteGpuMuchFaster) {
  LocalCluster cluster(SourceDir() + "/tests/fleets/data-gravity.yaml");
  ASSERT_TRUE(cluster.Up());
  for (const char* site : {"near", "far"}) {
    std::filesystem::create_directories(cluster.dir() + "/frames/" + site);
    std::ofstream(cluster.dir() + "/frames/" + site + "/0.bin") << std::string(4 << 20, site[0]);
  }
  CommandResult put = Meridian({"data", "put", cluster.dir() + "/frames", "--by-site", "--name", "frames", "--dir",
                                cluster.dir()});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  // 1000 TFLOP: 20 s on a T4, 4 s on an A100. Moving 4 MiB from near to the hub takes
  // milliseconds; from far, 17 s over 2 Mbit/s.
  StatusOr<model::JobView> v = cluster.RunJob(
      "name: crunch\ntasks:\n  - name: crunch\n    kernel: noop\n    map: {over: dataset://frames}\n"
      "    work: {kind: gemm-fp16, amount: 1000}\n    resources: {accelerator: {any_of: [T4, A100]}}\n");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->summary.job.status, model::JobStatus::kSucceeded) << v->summary.job.reason;
  EXPECT_EQ(TaskNamed(*v, "crunch/0").record.site, "far");      // far's shard stays
  EXPECT_EQ(TaskNamed(*v, "crunch/1").record.site, "gpu-hub");  // near's moves to the A100s
  auto traffic = Traffic(*v);
  EXPECT_EQ((traffic[{"near", "gpu-hub"}]), 4 << 20);
  EXPECT_EQ((traffic[{"far", "far"}]), 4 << 20);
}

TEST(DataPlaneTest, ABigResultStaysAnObjectAndRunFetchesIt) {
  LocalCluster cluster(SourceDir() + "/tests/fleets/local-three-sites.yaml");
  ASSERT_TRUE(cluster.Up());
  // 2,000,000 sorted integers: about 19 MB of output, beyond what travels inline.
  const std::string job = cluster.WriteFile(
      "sort.yaml", "name: big-sort\ntasks:\n  - {name: sort, kernel: sort, args: {generate: 2000000, seed: 3}}\n");
  const std::string dir = cluster.dir() + "/results";
  CommandResult run = Meridian({"run", job, "--output-dir", dir, "--no-progress", "--dir", cluster.dir()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("the whole output is object"), std::string::npos) << run.out.substr(0, 2000);
  EXPECT_NE(run.out.find("1 result ("), std::string::npos) << run.out.substr(run.out.size() - 500);
  std::ifstream in(dir + "/sort");
  int64_t lines = 0, previous = -1, v = 0;
  bool sorted = true;
  while (in >> v) {
    sorted = sorted && v >= previous;
    previous = v;
    ++lines;
  }
  EXPECT_EQ(lines, 2'000'000);
  EXPECT_TRUE(sorted);
  EXPECT_GT(std::filesystem::file_size(dir + "/sort"), size_t{10} << 20);
}

TEST(DataPlaneTest, OutputsLostWithAKilledAgentAreMadeAgainByLineage) {
  LocalCluster cluster(SourceDir() + "/tests/fleets/local-three-sites.yaml");
  ASSERT_TRUE(cluster.Up());
  // Six parts (3 cores each: one per node at a time, so they spread), a gate that
  // holds `total` back for 10 s, and `total`, which reads every part's output: objects
  // on the nodes that made them (5,000 bytes each, over what travels whole, and each
  // different: objects are named by their content).
  StatusOr<rpc::SubmitResult> r = cluster.client().Submit(
      "name: lineage\ntasks:\n"
      "  - {name: part, command: [sh, -c, 'yes $MERIDIAN_TASK_INDEX | head -n 2500'], count: 6, resources: {cpu: 3}}\n"
      "  - {name: gate, command: [sleep, '10'], after: [part], resources: {cpu: 1}}\n"
      "  - {name: total, kernel: sum, after: [part, gate], resources: {cpu: 1}}\n",
      "lineage.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Once the gate runs, kill a node that holds a part's output and does not run the gate.
  std::string victim, lost_part;
  ASSERT_TRUE(WaitFor(
      [&] {
        StatusOr<model::JobView> v = cluster.client().GetJob(r->job_id, true);
        if (!v.ok()) return false;
        const model::TaskView& gate = TaskNamed(*v, "gate");
        if (gate.record.status != model::TaskStatus::kRunning) return false;
        for (const model::TaskView& t : v->tasks) {
          if (t.name.rfind("part/", 0) == 0 && t.record.node != gate.record.node && !t.record.output_object.empty()) {
            victim = t.record.node;
            lost_part = t.name;
            return true;
          }
        }
        return false;
      },
      30));
  cluster.Kill9("agent-" + victim);
  StatusOr<model::JobSummary> done = cluster.client().Watch(r->job_id, [](const model::JobSummary&) { return true; });
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  StatusOr<model::JobView> v = cluster.client().GetJob(r->job_id, true);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->summary.job.status, model::JobStatus::kSucceeded) << v->summary.job.reason;
  EXPECT_EQ(TaskNamed(*v, "total").record.output, "37500");  // 2,500 times 0 + 1 + ... + 5
  // Every part the victim had made ran again elsewhere, its first attempt marked lost.
  int rebuilt = 0;
  for (const model::TaskView& t : v->tasks) {
    if (t.name.rfind("part/", 0) != 0 || t.history.empty() || t.history.front().node != victim) continue;
    ++rebuilt;
    EXPECT_EQ(t.history.front().outcome, "output lost") << t.name;
    EXPECT_NE(t.history.front().reason.find("lost with node " + victim), std::string::npos) << t.history.front().reason;
    EXPECT_EQ(t.record.status, model::TaskStatus::kSucceeded);
    EXPECT_NE(t.record.node, victim);
  }
  EXPECT_GE(rebuilt, 1) << lost_part;
}

}  // namespace
}  // namespace meridian::testing
