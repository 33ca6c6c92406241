// What the coordinator pushes and when it learns an agent is gone, at fleet scale:
// assignments pushed to the streams of the nodes that got work (and no other), job
// summaries pushed to watchers, streams closed when a session ends, heartbeats that
// grow rarer as the fleet grows, and a closed connection noticed without them.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "coordinator/coordinator.h"
#include "coordinator/coordinator_test_util.h"
#include "rpc/node_client.h"
#include "rpc/server.h"
#include "testing/raw_sockets.h"
#include "testing/in_memory_state_store.h"

namespace meridian::coordinator {
namespace {

// A stream that records what is pushed to it, as the gRPC server's would write it.
template <typename T>
class RecordingSink final : public rpc::StreamSink<T> {
 public:
  bool Push(T& item) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || gone_) return false;
    pushed_.push_back(std::move(item));
    item = T{};
    return true;
  }
  void Close(const Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    close_status_ = status;
  }
  bool open() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !closed_ && !gone_;
  }
  // The reader went away (the agent's connection closed).
  void Drop() {
    std::lock_guard<std::mutex> lock(mu_);
    gone_ = true;
  }
  std::vector<T> pushed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pushed_;
  }
  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  Status close_status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return close_status_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<T> pushed_;
  bool closed_ = false;
  bool gone_ = false;
  Status close_status_ = OkStatus();
};

using AssignmentRecorder = RecordingSink<model::AssignmentBatch>;
using WatchRecorder = RecordingSink<model::JobSummary>;

size_t Assignments(const AssignmentRecorder& sink) {
  size_t n = 0;
  for (const model::AssignmentBatch& b : sink.pushed()) n += b.assignments.size();
  return n;
}

TEST_F(CoordinatorTest, WorkIsPushedToTheStreamsOfTheNodesThatGotItAndNoOther) {
  Start();
  model::RegistrationReply n1 = Register(Node("n1"));
  model::RegistrationReply n2 = Register(Node("n2"));
  auto s1 = std::make_shared<AssignmentRecorder>();
  auto s2 = std::make_shared<AssignmentRecorder>();
  ASSERT_TRUE(coord_->ConnectAssignments(n1.node_id, n1.session, s1).ok());
  ASSERT_TRUE(coord_->ConnectAssignments(n2.node_id, n2.session, s2).ok());
  // Three tasks of 3 cores: a 4-core node takes one at a time, so each node gets work.
  auto r = coord_->Submit("name: three\ntasks:\n  - {name: t, kernel: noop, count: 3, resources: {cpu: 3}}\n",
                          "three.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Pushed during Submit itself, before it returned: nothing had to poll for it.
  EXPECT_EQ(Assignments(*s1) + Assignments(*s2), 2u);
  EXPECT_EQ(Assignments(*s1), 1u);
  EXPECT_EQ(Assignments(*s2), 1u);
  // n1 finishes: the third task goes to n1 only.
  const model::TaskKey k1 = s1->pushed().at(0).assignments.at(0).key;
  Report(n1, {Done(k1, "")});
  EXPECT_EQ(Assignments(*s1), 2u);
  EXPECT_EQ(Assignments(*s2), 1u);
  EXPECT_EQ(s1->pushed().size(), 2u);
  EXPECT_EQ(s2->pushed().size(), 1u);
}

TEST_F(CoordinatorTest, WorkMadeWhileNoStreamIsConnectedGoesWhenOneConnects) {
  Start();
  model::RegistrationReply n = Register(Node("n1"));
  auto r = coord_->Submit("name: one\ntasks:\n  - {name: t, kernel: noop}\n", "one.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto sink = std::make_shared<AssignmentRecorder>();
  ASSERT_TRUE(coord_->ConnectAssignments(n.node_id, n.session, sink).ok());
  ASSERT_EQ(Assignments(*sink), 1u);
  EXPECT_EQ(sink->pushed()[0].assignments[0].key.job, r->job_id);
}

TEST_F(CoordinatorTest, AStreamOfAnEndedSessionIsClosedAndRefused) {
  Start();
  model::RegistrationReply old = Register(Node("n1"));
  auto first = std::make_shared<AssignmentRecorder>();
  ASSERT_TRUE(coord_->ConnectAssignments(old.node_id, old.session, first).ok());
  // A second stream of the same session replaces the first.
  auto second = std::make_shared<AssignmentRecorder>();
  ASSERT_TRUE(coord_->ConnectAssignments(old.node_id, old.session, second).ok());
  EXPECT_TRUE(first->closed());
  EXPECT_EQ(first->close_status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(second->closed());
  // The agent registers again (it restarted): the old session's stream is closed, so
  // the agent behind it registers again too; a stream of the old session is refused.
  model::AgentRegistration again = Node("n1");
  again.previous_session = old.session;
  model::RegistrationReply fresh = Register(again);
  EXPECT_TRUE(second->closed());
  EXPECT_EQ(second->close_status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(second->close_status().message(), "this session is no longer the node's; register again");
  auto stale = std::make_shared<AssignmentRecorder>();
  EXPECT_EQ(coord_->ConnectAssignments(old.node_id, old.session, stale).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(coord_->ConnectAssignments(fresh.node_id, fresh.session, stale).ok());
}

TEST_F(CoordinatorTest, ANodeWhoseConnectionClosedIsDeadAfterTheTimeoutThoughHeartbeatsAreRare) {
  Start();
  // 300 nodes: heartbeats every 1.2 s (4 ms a node), a silent node dead after 3.6 s;
  // a closed connection counts after the configured timeout (1 s in these tests).
  std::vector<model::RegistrationReply> nodes;
  for (int i = 0; i < 300; ++i) nodes.push_back(Register(Node("n" + std::to_string(i))));
  ASSERT_EQ(coord_->HeartbeatIntervalUs(), 1'200'000);
  auto s0 = std::make_shared<AssignmentRecorder>();
  auto s1 = std::make_shared<AssignmentRecorder>();
  ASSERT_TRUE(coord_->ConnectAssignments(nodes[0].node_id, nodes[0].session, s0).ok());
  ASSERT_TRUE(coord_->ConnectAssignments(nodes[1].node_id, nodes[1].session, s1).ok());
  auto alive = [&](const std::string& name) {
    for (const model::NodeView& v : coord_->ListNodes()) {
      if (v.node.name == name) return v.alive;
    }
    return false;
  };
  // Both connections close; n1's agent still heartbeats (its stream is being renewed),
  // n0's is gone (killed). The loop looks every 600 ms (of the fake clock; it wakes
  // every 600 ms of real time to see).
  s0->Drop();
  s1->Drop();
  auto step = [&] {
    env_.fake().Advance(600'000);
    Report(nodes[1], {});
    std::this_thread::sleep_for(std::chrono::milliseconds(900));
  };
  step();  // the closed streams are noticed
  step();  // 0.6 s since: within the configured timeout
  EXPECT_TRUE(alive("n0"));
  // Past the configured timeout since n0's connection closed, with no heartbeat: dead,
  // long before its heartbeats would have said so. n1 heartbeated: alive; n2, silent
  // as long (1.8 s) but with no stream that closed, is within its 3.6 s.
  step();
  EXPECT_TRUE(Eventually([&] { return !alive("n0"); }));
  EXPECT_TRUE(alive("n1"));
  EXPECT_TRUE(alive("n2"));
}

TEST_F(CoordinatorTest, HeartbeatsGrowRarerAsTheFleetGrows) {
  Start(std::make_unique<testing::InMemoryStateStore>(), {}, [](CoordinatorOptions& o) {
    o.heartbeat_interval_us = 200'000;
    o.heartbeat_timeout_us = 2'000'000;
  });
  // Up to 50 nodes (200 ms x 250/s): the configured interval.
  for (int i = 0; i < 50; ++i) {
    model::RegistrationReply r = Register(Node("n" + std::to_string(i)));
    EXPECT_EQ(r.heartbeat_interval_us, 200'000);
  }
  EXPECT_EQ(coord_->HeartbeatIntervalUs(), 200'000);
  // Past that, 4 ms a node: 250 idle heartbeats a second in all.
  for (int i = 50; i < 1000; ++i) Register(Node("n" + std::to_string(i)));
  EXPECT_EQ(coord_->HeartbeatIntervalUs(), 4'000'000);
  model::RegistrationReply last = Register(Node("n1000"));
  EXPECT_EQ(last.heartbeat_interval_us, 4'004'000);
  // A node silent for 3 s is still alive at that interval (3 intervals: 12 s).
  env_.fake().Advance(3'000'000);
  Report(last, {});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  size_t alive = 0;
  for (const model::NodeView& v : coord_->ListNodes()) alive += v.alive ? 1 : 0;
  EXPECT_EQ(alive, 1001u);
}

TEST_F(CoordinatorTest, AWatchIsPushedEachChangeAndClosedOnceTheJobHasFinished) {
  Start();
  model::RegistrationReply n = Register(Node("n1"));
  auto r = coord_->Submit("name: two\ntasks:\n  - {name: a, kernel: noop}\n  - {name: b, kernel: noop, after: [a]}\n",
                          "two.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto watch = std::make_shared<WatchRecorder>();
  ASSERT_TRUE(coord_->WatchJob(r->job_id, 0, watch).ok());
  // What it is now, at once.
  ASSERT_EQ(watch->pushed().size(), 1u);
  EXPECT_EQ(watch->pushed()[0].job.status, model::JobStatus::kRunning);
  std::vector<model::TaskAssignment> a = Next(n);
  ASSERT_EQ(a.size(), 1u);
  Report(n, {Done(a[0].key, "")});
  // One push per commit that changed it: a's result, then b's placement.
  ASSERT_EQ(watch->pushed().size(), 3u);
  EXPECT_EQ(watch->pushed()[1].succeeded, 1);
  EXPECT_EQ(watch->pushed()[1].running, 0);
  EXPECT_EQ(watch->pushed()[2].running, 1);
  EXPECT_FALSE(watch->closed());
  std::vector<model::TaskAssignment> b = Next(n);
  ASSERT_EQ(b.size(), 1u);
  Report(n, {Done(b[0].key, "")});
  ASSERT_EQ(watch->pushed().size(), 4u);
  EXPECT_EQ(watch->pushed()[3].job.status, model::JobStatus::kSucceeded);
  EXPECT_EQ(watch->pushed()[3].succeeded, 2);
  EXPECT_TRUE(watch->closed());
  EXPECT_TRUE(watch->close_status().ok());
  // A watch of a finished job gets its summary and is closed at once; of no job, NotFound.
  auto late = std::make_shared<WatchRecorder>();
  ASSERT_TRUE(coord_->WatchJob(r->job_id, 0, late).ok());
  ASSERT_EQ(late->pushed().size(), 1u);
  EXPECT_EQ(late->pushed()[0].job.status, model::JobStatus::kSucceeded);
  EXPECT_TRUE(late->closed());
  EXPECT_EQ(coord_->WatchJob(r->job_id + 1, 0, std::make_shared<WatchRecorder>()).code(), StatusCode::kNotFound);
}

// What the server's callback thread may do in place: a job of at most `max_tasks`
// tasks is stored and placed as Submit would; a larger one is found while its spec
// is read and nothing is stored (a worker submits it); a bad spec is refused alike.
TEST_F(CoordinatorTest, SubmitSmallStoresOnlyJobsWithinItsBound) {
  Start();
  Register(Node("n1"));
  auto small = coord_->SubmitSmall("name: s\ntasks:\n  - {name: a, kernel: noop, count: 4}\n", "s.yaml", "", 4);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  ASSERT_TRUE(small->has_value());
  EXPECT_EQ((*small)->tasks, 4);
  EXPECT_EQ(coord_->ListJobs(0, {}).size(), 1u);
  for (const char* spec : {"name: l\ntasks:\n  - {name: a, kernel: noop, count: 5}\n",
                           "name: l\ntasks:\n  - {name: a, kernel: noop, count: 3}\n  - {name: b, kernel: noop, count: 2}\n"}) {
    auto large = coord_->SubmitSmall(spec, "l.yaml", "", 4);
    ASSERT_TRUE(large.ok()) << large.status().ToString();
    EXPECT_FALSE(large->has_value()) << spec;
  }
  EXPECT_EQ(coord_->ListJobs(0, {}).size(), 1u);
  auto bad = coord_->SubmitSmall("name: b\ntasks:\n  - {name: a, kernel: nosuch}\n", "b.yaml", "", 4);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  // Without a bound, the same large job is stored.
  auto unbounded = coord_->SubmitSmall("name: l\ntasks:\n  - {name: a, kernel: noop, count: 5}\n", "l.yaml", "", 0);
  ASSERT_TRUE(unbounded.ok() && unbounded->has_value()) << unbounded.status().ToString();
  EXPECT_EQ((*unbounded)->tasks, 5);
  EXPECT_EQ(coord_->ListJobs(0, {}).size(), 2u);
}

// A small job is stored in the same commit as its first placements (one commit less
// on its way to an agent), a large one alone first; either way its id is the
// coordinator's, past every id the store gave out, and nothing is pushed before it
// is stored.
// Group commit: the state store's write is made without the coordinator's lock. Seven
// reports that arrive while a commit is being written are applied at once, and a job
// submitted meanwhile is placed; all of it is stored in one transaction after that
// write, and the job's assignments go out only once it is stored.
TEST_F(CoordinatorTest, ChangesMadeWhileACommitIsWrittenAreStoredTogetherAndSentOnceStored) {
  auto owned = std::make_unique<StallingStore>();
  StallingStore* store = owned.get();
  Start(std::move(owned), {}, [](CoordinatorOptions& o) { o.run_loop = false; });
  constexpr int kNodes = 8;
  std::vector<model::RegistrationReply> nodes;
  std::vector<std::shared_ptr<AssignmentRecorder>> sinks;
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back(Register(Node(fmt::format("n{}", i))));
    sinks.push_back(std::make_shared<AssignmentRecorder>());
    ASSERT_TRUE(coord_->ConnectAssignments(nodes[i].node_id, nodes[i].session, sinks[i]).ok());
  }
  // A whole node each (a node has 4 cores).
  auto job = coord_->Submit("name: g\ntasks:\n  - {name: t, kernel: noop, count: 8, resources: {cpu: 4}}\n",
                            "g.yaml", "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::vector<model::TaskKey> keys;
  for (int i = 0; i < kNodes; ++i) {
    std::vector<model::AssignmentBatch> b = sinks[i]->pushed();
    ASSERT_EQ(b.size(), 1u) << i;
    ASSERT_EQ(b[0].assignments.size(), 1u) << i;
    keys.push_back(b[0].assignments[0].key);
  }
  const int before = store->commits();
  EXPECT_EQ(coord_->CommitsQueued(), 0u);

  store->Hold();
  std::thread first([&] { Report(nodes[0], {Done(keys[0], "ok")}); });
  store->AwaitAWrite();
  std::vector<std::thread> threads;
  for (int i = 1; i < kNodes; ++i) threads.emplace_back([&, i] { Report(nodes[i], {Done(keys[i], "ok")}); });
  threads.emplace_back([&] {
    auto next = coord_->Submit("name: h\ntasks:\n  - {name: t, kernel: noop, resources: {cpu: 4}}\n", "h.yaml", "");
    EXPECT_TRUE(next.ok()) << next.status().ToString();
  });
  // Each report and the submission queue one change; none waits for the write.
  for (int i = 0; i < 30'000 && coord_->CommitsQueued() < kNodes; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(coord_->CommitsQueued(), static_cast<size_t>(kNodes));
  EXPECT_EQ(store->commits(), before);
  size_t pushed = 0;
  for (const auto& sink : sinks) pushed += Assignments(*sink);
  EXPECT_EQ(pushed, static_cast<size_t>(kNodes));  // the new job's assignment waits for its commit

  store->Release();
  first.join();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(store->commits(), before + 2);  // the first report's; then the other eight changes
  EXPECT_EQ(coord_->CommitsQueued(), 0u);
  pushed = 0;
  for (const auto& sink : sinks) pushed += Assignments(*sink);
  EXPECT_EQ(pushed, static_cast<size_t>(kNodes + 1));
  EXPECT_EQ(Job(job->job_id).summary.job.status, model::JobStatus::kSucceeded);
  store::LoadedState stored = *store->inner().Load();
  ASSERT_EQ(stored.jobs.size(), 2u);
  EXPECT_EQ(stored.jobs[0].status, model::JobStatus::kSucceeded);
  EXPECT_EQ(stored.jobs[1].status, model::JobStatus::kRunning);
  ASSERT_EQ(stored.tasks.size(), 1u);  // the unfinished job's
  EXPECT_EQ(stored.tasks[0].status, model::TaskStatus::kAssigned);
}

// An assignment waits in the commit queue until its placement is stored; a stream that
// ends meanwhile does not lose it: it goes to the node's next stream.
TEST_F(CoordinatorTest, AnAssignmentWhoseStreamEndedWhileItWasStoredGoesToTheNextStream) {
  auto owned = std::make_unique<StallingStore>();
  StallingStore* store = owned.get();
  Start(std::move(owned), {}, [](CoordinatorOptions& o) { o.run_loop = false; });
  model::RegistrationReply n = Register(Node("n1"));
  auto first = std::make_shared<AssignmentRecorder>();
  ASSERT_TRUE(coord_->ConnectAssignments(n.node_id, n.session, first).ok());
  store->Hold();
  std::thread submit([&] {
    auto r = coord_->Submit("name: one\ntasks:\n  - {name: t, kernel: noop}\n", "one.yaml", "");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
  });
  store->AwaitAWrite();
  first->Drop();  // the agent's connection closes while its placement is written
  store->Release();
  submit.join();
  EXPECT_EQ(Assignments(*first), 0u);
  auto second = std::make_shared<AssignmentRecorder>();
  ASSERT_TRUE(coord_->ConnectAssignments(n.node_id, n.session, second).ok());
  ASSERT_EQ(second->pushed().size(), 1u);
  ASSERT_EQ(second->pushed()[0].assignments.size(), 1u);
  EXPECT_EQ(second->pushed()[0].assignments[0].key.job, 1u);
}

// A stream whose Close blocks until let go: closing it, the coordinator holds its state
// lock for as long as the test likes (ConnectAssignments closes a node's old stream).
class StuckCloseSink final : public rpc::AssignmentSink {
 public:
  bool Push(model::AssignmentBatch&) override { return true; }
  void Close(const Status&) override {
    std::unique_lock<std::mutex> lock(mu_);
    closing_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return let_go_; });
  }
  bool open() const override { return true; }
  void AwaitClosing() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return closing_; });
  }
  void LetGo() {
    std::lock_guard<std::mutex> lock(mu_);
    let_go_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  bool let_go_ = false;
};

// What a client reads of jobs, as one string: ListJobs, GetJob's summary, JobTenant and
// WaitJob (which does not wait: its version is older).
std::string ReadJobs(Coordinator& c, uint64_t id) {
  std::string out;
  for (const model::JobSummary& s : c.ListJobs(0, {})) {
    out += fmt::format("list {} {} {}/{};", s.job.id, model::JobStatusName(s.job.status), s.succeeded, s.tasks_total);
  }
  StatusOr<model::JobView> v = c.GetJob(id, 0, 0);
  out += v.ok() ? fmt::format("get {} {};", model::JobStatusName(v->summary.job.status), v->summary.succeeded)
                : v.status().ToString();
  StatusOr<std::string> tenant = c.JobTenant(id);
  out += tenant.ok() ? "tenant " + *tenant + ";" : tenant.status().ToString();
  StatusOr<model::JobSummary> w = c.WaitJob(id, 0, 10'000'000);
  out += w.ok() ? fmt::format("wait {}", model::JobStatusName(w->job.status)) : w.status().ToString();
  return out;
}

// Client reads of jobs take neither the state's lock nor wait for the store: one that
// holds the lock long (here a stream's close; in life a long placement or a large
// registration) stalls none of them. A call that takes the lock (ListNodes) waits.
TEST_F(CoordinatorTest, ClientReadsOfJobsAnswerWhileTheStateLockIsHeld) {
  Start(std::make_unique<testing::InMemoryStateStore>(), {}, [](CoordinatorOptions& o) { o.run_loop = false; });
  model::RegistrationReply n = Register(Node("n1"));
  auto stuck = std::make_shared<StuckCloseSink>();
  ASSERT_TRUE(coord_->ConnectAssignments(n.node_id, n.session, stuck).ok());
  auto r = coord_->Submit("name: one\ntasks:\n  - {name: t, kernel: noop}\n", "one.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Another stream of the node replaces the stuck one: closing it, ConnectAssignments
  // holds the lock until LetGo.
  std::thread replace([&] {
    EXPECT_TRUE(coord_->ConnectAssignments(n.node_id, n.session, std::make_shared<AssignmentRecorder>()).ok());
  });
  stuck->AwaitClosing();
  std::future<std::string> reads = std::async(std::launch::async, [&] { return ReadJobs(*coord_, r->job_id); });
  std::future<size_t> nodes = std::async(std::launch::async, [&] { return coord_->ListNodes().size(); });
  const std::future_status read_status = reads.wait_for(std::chrono::seconds(30));
  const std::future_status nodes_status = nodes.wait_for(std::chrono::milliseconds(100));
  stuck->LetGo();
  replace.join();
  EXPECT_EQ(read_status, std::future_status::ready);
  EXPECT_EQ(nodes_status, std::future_status::timeout);  // the lock was held all along
  EXPECT_EQ(reads.get(), fmt::format("list {0} running 0/1;get running 0;tenant default;wait running", r->job_id));
  EXPECT_EQ(nodes.get(), 1u);
}

// What client reads show is what is stored: while a task's report is written, they
// answer at once with the job as it was; once it is stored, as it is.
TEST_F(CoordinatorTest, ClientReadsShowWhatIsStoredNotWhatIsBeingWritten) {
  auto owned = std::make_unique<StallingStore>();
  StallingStore* store = owned.get();
  Start(std::move(owned), {}, [](CoordinatorOptions& o) { o.run_loop = false; });
  model::RegistrationReply n = Register(Node("n1"));
  auto sink = std::make_shared<AssignmentRecorder>();
  ASSERT_TRUE(coord_->ConnectAssignments(n.node_id, n.session, sink).ok());
  auto r = coord_->Submit("name: one\ntasks:\n  - {name: t, kernel: noop}\n", "one.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(Assignments(*sink), 1u);
  const model::TaskKey key = sink->pushed()[0].assignments[0].key;
  const uint64_t running_version = coord_->WaitJob(r->job_id, 0, 0)->version;

  store->Hold();
  std::thread report([&] { Report(n, {Done(key, "ok")}); });
  store->AwaitAWrite();
  std::future<std::string> during = std::async(std::launch::async, [&] { return ReadJobs(*coord_, r->job_id); });
  const std::future_status during_status = during.wait_for(std::chrono::seconds(30));
  store->Release();
  report.join();
  EXPECT_EQ(during_status, std::future_status::ready);
  EXPECT_EQ(during.get(), fmt::format("list {0} running 0/1;get running 0;tenant default;wait running", r->job_id));
  EXPECT_EQ(ReadJobs(*coord_, r->job_id),
            fmt::format("list {0} succeeded 1/1;get succeeded 1;tenant default;wait succeeded", r->job_id));
  // A waiter for a newer version than the running one's is answered with the end.
  StatusOr<model::JobSummary> next = coord_->WaitJob(r->job_id, running_version, 10'000'000);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->job.status, model::JobStatus::kSucceeded);
  EXPECT_GT(next->version, running_version);
}

// A stream that hands each item to `on_push` as the coordinator pushes it.
template <typename T>
class CallingSink final : public rpc::StreamSink<T> {
 public:
  explicit CallingSink(std::function<void(const T&)> on_push) : on_push_(std::move(on_push)) {}
  bool Push(T& item) override {
    on_push_(item);
    return true;
  }
  void Close(const Status&) override {}
  bool open() const override { return true; }

 private:
  std::function<void(const T&)> on_push_;
};

// Heads are published before what the same change makes due is pushed: an agent given
// a task of a new job finds the job (its tenant, which reading its inputs asks for), and
// a watcher told of a change reads the job as it was told.
TEST_F(CoordinatorTest, WhatIsPushedIsReadableWhenItArrives) {
  Start(std::make_unique<testing::InMemoryStateStore>(), {}, [](CoordinatorOptions& o) { o.run_loop = false; });
  model::RegistrationReply n = Register(Node("n1"));
  std::vector<std::string> seen;  // pushed from the committer, one at a time
  std::vector<model::TaskKey> keys;
  auto agent = std::make_shared<CallingSink<model::AssignmentBatch>>([&](const model::AssignmentBatch& b) {
    for (const model::TaskAssignment& a : b.assignments) {
      keys.push_back(a.key);
      StatusOr<std::string> tenant = coord_->JobTenant(a.key.job);
      seen.push_back(tenant.ok() ? "assigned; job of " + *tenant : tenant.status().ToString());
    }
  });
  ASSERT_TRUE(coord_->ConnectAssignments(n.node_id, n.session, agent).ok());
  auto r = coord_->Submit("name: one\ntasks:\n  - {name: t, kernel: noop}\n", "one.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto watcher = std::make_shared<CallingSink<model::JobSummary>>([&](const model::JobSummary& s) {
    StatusOr<model::JobView> v = coord_->GetJob(s.job.id, 0, 0);
    seen.push_back(fmt::format("told {} v{}; read {}", model::JobStatusName(s.job.status), s.version,
                               v.ok() ? fmt::format("{} v{}", model::JobStatusName(v->summary.job.status),
                                                    v->summary.version)
                                      : v.status().ToString()));
  });
  ASSERT_TRUE(coord_->WatchJob(r->job_id, 0, watcher).ok());
  ASSERT_EQ(keys.size(), 1u);
  const uint64_t running = coord_->WaitJob(r->job_id, 0, 0)->version;
  Report(n, {Done(keys[0], "ok")});
  const uint64_t done = coord_->WaitJob(r->job_id, 0, 0)->version;
  EXPECT_EQ(seen, (std::vector<std::string>{"assigned; job of default",
                                            fmt::format("told running v{0}; read running v{0}", running),
                                            fmt::format("told succeeded v{0}; read succeeded v{0}", done)}));
}

TEST_F(CoordinatorTest, ASmallJobIsStoredInTheCommitThatPlacesItALargeOneFirst) {
  auto owned = std::make_unique<testing::InMemoryStateStore>();
  testing::InMemoryStateStore* store = owned.get();
  model::JobRecord old;
  old.name = "old";
  old.id = 41;
  old.status = model::JobStatus::kSucceeded;
  ASSERT_TRUE(store->CreateJob(old, {}).ok());  // a job stored before: ids go on past it
  Start(std::move(owned));
  // Finished long ago, it goes at the first retention pass (its id is not given again).
  for (int i = 0; i < 200 && !coord_->ListJobs(0, {}).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(coord_->ListJobs(0, {}).empty());
  model::RegistrationReply n = Register(Node("n1"));
  auto sink = std::make_shared<AssignmentRecorder>();
  ASSERT_TRUE(coord_->ConnectAssignments(n.node_id, n.session, sink).ok());
  const int before = store->commits();
  auto small = coord_->Submit("name: s\ntasks:\n  - {name: a, kernel: noop, count: 3}\n", "s.yaml", "");
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(small->job_id, 42u);
  EXPECT_EQ(store->commits(), before + 1);
  EXPECT_EQ(Assignments(*sink), 3u);
  store::LoadedState stored = *store->Load();
  ASSERT_EQ(stored.jobs.size(), 1u);
  EXPECT_EQ(stored.jobs[0].id, 42u);
  ASSERT_EQ(stored.tasks.size(), 3u);
  EXPECT_EQ(stored.tasks[0].status, model::TaskStatus::kAssigned);

  const std::string large = fmt::format("name: l\ntasks:\n  - {{name: a, kernel: noop, count: {}, resources: {{cpu: 1}}}}\n",
                                        kStoredWithPlacementsTasks + 1);
  const int between = store->commits();
  auto big = coord_->Submit(large, "l.yaml", "");
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(big->job_id, 43u);
  EXPECT_EQ(store->commits(), between + 2);  // the job and its tasks; then what was placed
  EXPECT_EQ(store->Load()->next_job_id, 44u);
  // A job with nothing placed (no room) is stored all the same.
  auto waiting = coord_->Submit("name: w\ntasks:\n  - {name: a, kernel: noop, resources: {cpu: 1}}\n", "w.yaml", "");
  ASSERT_TRUE(waiting.ok()) << waiting.status().ToString();
  EXPECT_EQ(store->Load()->jobs.back().id, waiting->job_id);
  EXPECT_EQ(store->Load()->jobs.back().name, "w");
}

TEST_F(CoordinatorTest, AWatchOfACancelledJobIsPushedItsEndAndClosed) {
  Start();
  Register(Node("n1"));
  auto r = coord_->Submit("name: one\ntasks:\n  - {name: t, kernel: noop}\n", "one.yaml", "");
  ASSERT_TRUE(r.ok());
  auto watch = std::make_shared<WatchRecorder>();
  ASSERT_TRUE(coord_->WatchJob(r->job_id, 0, watch).ok());
  ASSERT_TRUE(coord_->CancelJob(r->job_id).ok());
  EXPECT_TRUE(watch->closed());
  EXPECT_TRUE(watch->close_status().ok());
  EXPECT_EQ(watch->pushed().back().job.status, model::JobStatus::kCancelled);
}

// The coordinator behind a real gRPC server (plaintext, on loopback), and node n1
// registered through it.
struct ServedNode {
  std::unique_ptr<rpc::Server> server;
  std::unique_ptr<rpc::NodeClient> client;
  model::RegistrationReply node;
};
StatusOr<ServedNode> ServeAndRegister(Coordinator& coord) {
  rpc::ServerSecurity insecure;
  insecure.insecure = true;
  ServedNode out;
  MERIDIAN_ASSIGN_OR_RETURN(out.server, rpc::Server::Start("127.0.0.1:0", coord, coord, coord, coord, coord, insecure));
  out.client = std::make_unique<rpc::NodeClient>(fmt::format("127.0.0.1:{}", out.server->port()));
  MERIDIAN_ASSIGN_OR_RETURN(out.node, out.client->Register(Node("n1"), 5'000'000));
  return out;
}

// The HTTP/2 frame types in what a server sent (its frames, read one after another).
std::vector<int> FrameTypes(const std::string& bytes) {
  std::vector<int> types;
  for (size_t at = 0; at + 9 <= bytes.size();) {
    const auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<unsigned char>(bytes[at + i])); };
    types.push_back(static_cast<int>(byte(3)));
    at += 9 + (byte(0) << 16 | byte(1) << 8 | byte(2));
  }
  return types;
}

// Connections that prove nothing are not kept: one that has not ended its handshake
// (here HTTP/2's preface and first SETTINGS; with TLS, that first) within the
// handshake timeout is closed, whether sent a byte at a time or nothing; one that
// ended it but opens no call is sent GOAWAY and closed after the idle timeout. A
// client is served meanwhile, and its channel, whose connection idled, opens a new
// one for its next call.
TEST_F(CoordinatorTest, ConnectionsThatProveNothingAreNotKept) {
  Start();
  rpc::ServerSecurity security;
  security.insecure = true;
  security.handshake_timeout_ms = 1'000;
  security.idle_timeout_ms = 3'000;
  StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start("127.0.0.1:0", *coord_, *coord_, *coord_, *coord_, *coord_, security);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  const std::string preface = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + std::string("\0\0\0\4\0\0\0\0\0", 9);
  const auto closed = [](const std::string& got) {
    return got.size() < sizeof(testing::kStillOpen) - 1 ||
           got.compare(got.size() - (sizeof(testing::kStillOpen) - 1), std::string::npos, testing::kStillOpen) != 0;
  };
  std::vector<int> slow;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(testing::ConnectFrom(port));
    ASSERT_GE(slow.back(), 0);
  }
  const int silent = testing::ConnectFrom(port);
  const int idle = testing::ConnectFrom(port);
  ASSERT_GE(silent, 0);
  ASSERT_GE(idle, 0);
  ASSERT_EQ(send(idle, preface.data(), preface.size(), MSG_NOSIGNAL), static_cast<ssize_t>(preface.size()));
  // The slow ones send the preface a byte every 100 ms: 3.3 s in all.
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    for (size_t i = 0; i < preface.size() && !stop.load(); ++i) {
      for (int fd : slow) send(fd, &preface[i], 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  rpc::NodeClient client(fmt::format("127.0.0.1:{}", port));
  StatusOr<model::RegistrationReply> first = client.Register(Node("n1"), 5'000'000);
  ASSERT_TRUE(first.ok()) << "a client was not served beside connections that prove nothing: "
                          << first.status().ToString();
  for (int fd : slow) EXPECT_TRUE(closed(testing::ReadUntilClosed(fd, 3'000))) << "a slow handshake was kept";
  EXPECT_TRUE(closed(testing::ReadUntilClosed(silent, 3'000))) << "a silent connection was kept";
  stop.store(true);
  trickle.join();
  // The one that ended its handshake outlives the handshake timeout, then idles out.
  const std::string idled = testing::ReadUntilClosed(idle, 6'000);
  EXPECT_TRUE(closed(idled)) << "an idle connection was kept";
  const std::vector<int> frames = FrameTypes(idled);
  EXPECT_EQ(std::count(frames.begin(), frames.end(), 7), 1) << "not one GOAWAY before the close: " << ::testing::PrintToString(frames);
  // The client's connection idled out too; its next call goes on a new one.
  StatusOr<model::RegistrationReply> second = client.Register(Node("n2"), 5'000'000);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_NE(second->node_id, first->node_id);
  for (int fd : slow) close(fd);
  close(silent);
  close(idle);
}

// Over real gRPC on loopback: an agent's session carries its assignments one way and
// its reports (heartbeats) the other, each acknowledged there once applied; a report
// of another session ends the session with why; with no session open a heartbeat goes
// as a call of its own.
TEST_F(CoordinatorTest, ReportsGoOnTheNodesSessionAndAreAcknowledgedThere) {
  Start();
  StatusOr<ServedNode> served = ServeAndRegister(*coord_);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  std::unique_ptr<rpc::Server>& server = served->server;
  rpc::NodeClient& client = *served->client;
  const model::RegistrationReply* node = &served->node;

  std::mutex mu;
  std::vector<model::TaskAssignment> assigned;
  Status ended = OkStatus();
  auto open_session = [&] {
    return std::thread([&] {
      Status s = client.StreamAssignments(node->node_id, node->session, 30'000'000, [&](model::AssignmentBatch b) {
        std::lock_guard<std::mutex> lock(mu);
        for (model::TaskAssignment& a : b.assignments) assigned.push_back(std::move(a));
      });
      std::lock_guard<std::mutex> lock(mu);
      ended = s;
    });
  };
  auto assigned_count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return assigned.size();
  };
  std::thread session = open_session();
  // The session is open once the coordinator pushes to it.
  auto job = coord_->Submit("name: one\ntasks:\n  - {name: t, kernel: noop}\n", "one.yaml", "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  for (int i = 0; i < 500 && assigned_count() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(assigned_count(), 1u);

  model::AgentHeartbeat hb;
  hb.node_id = node->node_id;
  hb.session = node->session;
  hb.updates = {Done(assigned[0].key, "out")};
  std::optional<StatusOr<rpc::NodeClient::HeartbeatAnswer>> reported = client.Report(hb, 5'000'000);
  ASSERT_TRUE(reported.has_value());
  StatusOr<rpc::NodeClient::HeartbeatAnswer> answer = *reported;
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_TRUE(answer->on_session);
  EXPECT_FALSE(answer->reregister);
  EXPECT_EQ(answer->interval_us, 20'000);
  // Acknowledged: applied and stored.
  EXPECT_EQ(coord_->GetJob(job->job_id, 0, 10)->summary.job.status, model::JobStatus::kSucceeded);
  EXPECT_EQ(coord_->GetJob(job->job_id, 0, 10)->tasks.at(0).record.output, "out");

  // A report of another session on this one: the session ends, saying why, with the
  // report unacknowledged; as a call, the session's being unknown asks the agent to
  // register again.
  model::AgentHeartbeat stale = hb;
  stale.session = node->session + 1;
  stale.updates.clear();
  EXPECT_FALSE(client.Report(stale, 5'000'000).has_value());
  answer = client.Heartbeat(stale, 5'000'000);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_FALSE(answer->on_session);
  EXPECT_TRUE(answer->reregister);
  session.join();
  EXPECT_EQ(ended.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ended.message(), fmt::format("a report of node id {} session {} on the session of node id {} session {}",
                                         node->node_id, node->session + 1, node->node_id, node->session));

  // No session open: no report on one; a call; a session opened again carries them again.
  hb.updates.clear();
  EXPECT_FALSE(client.Report(hb, 5'000'000).has_value());
  answer = client.Heartbeat(hb, 5'000'000);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_FALSE(answer->on_session);
  EXPECT_FALSE(answer->reregister);
  session = open_session();
  auto second = coord_->Submit("name: two\ntasks:\n  - {name: t, kernel: noop}\n", "two.yaml", "");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  for (int i = 0; i < 500 && assigned_count() == 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(assigned_count(), 2u);
  hb.updates = {Done(assigned[1].key, "")};
  reported = client.Report(hb, 5'000'000);
  ASSERT_TRUE(reported.has_value());
  ASSERT_TRUE(reported->ok()) << reported->status().ToString();
  EXPECT_TRUE((*reported)->on_session);
  EXPECT_EQ(coord_->GetJob(second->job_id, 0, 10)->summary.job.status, model::JobStatus::kSucceeded);
  client.CancelStream();
  session.join();
  EXPECT_EQ(ended.code(), StatusCode::kCancelled);
  server->Shutdown();
}

// Pushes that come faster than a session's writes: each is written, or folded into
// the next write while one is in flight, and none is lost or sent twice. Each write
// goes on from whichever comes last of its StartWrite returning and gRPC saying it is
// done (PushSink): under ThreadSanitizer the reuse of the message written was once
// reported as a race with gRPC's reading it, and ended the coordinator mid-job.
TEST_F(CoordinatorTest, AssignmentsPushedFasterThanTheSessionWritesEachArriveOnce) {
  Start();
  StatusOr<ServedNode> served = ServeAndRegister(*coord_);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  std::mutex mu;
  std::vector<model::TaskKey> assigned;
  int batches = 0;
  std::thread session([&] {
    auto take = [&](model::AssignmentBatch b) {
      std::lock_guard<std::mutex> lock(mu);
      ++batches;
      for (const model::TaskAssignment& a : b.assignments) assigned.push_back(a.key);
    };
    Status s = served->client->StreamAssignments(served->node.node_id, served->node.session, 60'000'000, take);
    EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  });
  auto assigned_count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return assigned.size();
  };
  // The first job's assignment says the session is open.
  constexpr int kJobs = 400;
  std::vector<uint64_t> ids;
  auto first = coord_->Submit("name: j0\ntasks:\n  - {name: t, kernel: noop, resources: {cpu: 1m}}\n", "j.yaml", "");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ids.push_back(first->job_id);
  for (int i = 0; i < 500 && assigned_count() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(assigned_count(), 1u);
  // From four threads at once, as clients' submissions come.
  std::mutex ids_mu;
  std::vector<std::thread> submitters;
  for (int t = 0; t < 4; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 1 + t; i < kJobs; i += 4) {
        auto job = coord_->Submit(fmt::format("name: j{}\ntasks:\n  - {{name: t, kernel: noop, resources: {{cpu: 1m}}}}\n", i),
                                  "j.yaml", "");
        ASSERT_TRUE(job.ok()) << job.status().ToString();
        std::lock_guard<std::mutex> lock(ids_mu);
        ids.push_back(job->job_id);
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  for (int i = 0; i < 3000 && assigned_count() < kJobs; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  served->client->CancelStream();
  session.join();
  served->server->Shutdown();
  std::vector<uint64_t> jobs;
  for (const model::TaskKey& k : assigned) {
    EXPECT_EQ(k.task, 0u);
    EXPECT_EQ(k.attempt, 1u);
    jobs.push_back(k.job);
  }
  std::sort(jobs.begin(), jobs.end());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(jobs, ids);  // every job's task once
  // Some came folded together: fewer writes than pushes (the figure is in the output).
  std::printf("%zu assignments in %d writes\n", assigned.size(), batches);
}

}  // namespace
}  // namespace meridian::coordinator
