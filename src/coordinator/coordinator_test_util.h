// What the coordinator's tests share: a fake clock, nodes and task updates, and a
// fixture that starts a coordinator and plays its agents through the plain C++ API.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "coordinator/coordinator.h"
#include "testing/fake_clock.h"
#include "testing/forwarding_state_store.h"
#include "testing/in_memory_state_store.h"

namespace meridian::coordinator {

// Polls `done` for up to 5 s (the coordinator's loop works on its own thread).
inline bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

class TestEnv : public Env {
 public:
  const Clock& clock() const override { return clock_; }
  testing::FakeClock& fake() { return clock_; }

 private:
  testing::FakeClock clock_{1'000'000};
};

inline model::AgentRegistration Node(const std::string& name, const std::string& site = "s1") {
  model::AgentRegistration r;
  r.node.name = name;
  r.node.cpu_milli = 4000;
  r.node.memory_bytes = int64_t{8} << 30;
  r.site = site;
  r.kernels = {"sum", "noop"};
  return r;
}

inline model::TaskUpdate Done(const model::TaskKey& key, const std::string& output) {
  model::TaskUpdate u;
  u.key = key;
  u.kind = model::UpdateKind::kSucceeded;
  u.output = output;
  return u;
}

// A running attempt's report of its output since the last: each stream's new bytes,
// and (the report's totals) as many in all.
inline model::TaskUpdate Running(const model::TaskKey& key, std::string out, std::string err = "") {
  model::TaskUpdate u;
  u.key = key;
  u.kind = model::UpdateKind::kRunning;
  u.stdout_bytes = static_cast<int64_t>(out.size());
  u.stderr_bytes = static_cast<int64_t>(err.size());
  u.stdout_tail = std::move(out);
  u.stderr_tail = std::move(err);
  return u;
}

inline model::TaskUpdate Failed(const model::TaskKey& key, const std::string& reason) {
  model::TaskUpdate u;
  u.key = key;
  u.kind = model::UpdateKind::kFailed;
  u.exit_code = 1;
  u.reason = reason;
  return u;
}

// A success whose output is an object of 10,000 bytes on the node: the report carries
// its first 4 KiB, and dependents fetch the object.
inline model::TaskUpdate DoneAsObject(const model::TaskKey& key, const std::string& id) {
  model::TaskUpdate u = Done(key, std::string(model::kOutputPreviewBytes, '7'));
  u.output_object = model::HeldObject{id, 10'000};
  return u;
}

// An attempt stopped because it could not read `object`; `damaged` names the holders
// whose copies it found bad (none: it could not reach them).
inline model::TaskUpdate InputLost(const model::TaskKey& key, const std::string& object, const std::string& reason,
                                   std::vector<std::string> damaged = {}) {
  model::TaskUpdate u;
  u.key = key;
  u.kind = model::UpdateKind::kCancelled;
  u.reason = reason;
  u.lost_inputs = {model::LostInput{object, std::move(damaged)}};
  return u;
}

// A node with the only T4 (tasks asking for one go there) ...
inline model::AgentRegistration NodeWithT4(const std::string& name, const std::string& site = "s1") {
  model::AgentRegistration r = Node(name, site);
  r.node.devices = {model::Device{"T4", 0, int64_t{16} << 30, true, 1.0}};
  return r;
}

// ... and one with 8 cores (tasks asking for 6 go there).
inline model::AgentRegistration NodeWith8Cores(const std::string& name, const std::string& site = "s1") {
  model::AgentRegistration r = Node(name, site);
  r.node.cpu_milli = 8000;
  return r;
}

// A store whose writes wait while held: the coordinator's commits stall (made without
// its lock, calls go on; each waits for its answer until what it saw is stored).
class StallingStore : public testing::ForwardingStateStore {
 public:
  StallingStore() : ForwardingStateStore(inner_) {}
  Status Apply(const store::StoreBatch& batch) override {
    {
      std::unique_lock<std::mutex> lock(m_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return !held_; });
      --waiting_;
    }
    return ForwardingStateStore::Apply(batch);
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(m_);
    held_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(m_);
    held_ = false;
    cv_.notify_all();
  }
  void AwaitAWrite() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [this] { return waiting_ > 0; });
  }
  // Transactions written (not counting one held).
  int commits() { return inner_.commits(); }
  testing::InMemoryStateStore& inner() { return inner_; }

 private:
  testing::InMemoryStateStore inner_;
  std::mutex m_;
  std::condition_variable cv_;
  bool held_ = false;
  int waiting_ = 0;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  // `tweak` changes the options the tests start with.
  void Start(std::unique_ptr<store::StateStore> store = std::make_unique<testing::InMemoryStateStore>(),
             model::Fleet fleet = {}, const std::function<void(CoordinatorOptions&)>& tweak = nullptr) {
    CoordinatorOptions options;
    options.fleet = std::move(fleet);
    options.heartbeat_interval_us = 20'000;
    options.heartbeat_timeout_us = 1'000'000;
    options.reconcile_grace_us = 1'000'000;
    if (tweak) tweak(options);
    auto c = Coordinator::Create(std::move(options), std::move(store), env_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    coord_ = std::move(*c);
  }

  model::RegistrationReply Register(const model::AgentRegistration& r) {
    auto reply = coord_->Register(r);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return *reply;
  }

  // The next batch of assignments for the node (waits up to 2 s).
  std::vector<model::TaskAssignment> Next(const model::RegistrationReply& node) {
    auto b = coord_->NextAssignments(node.node_id, node.session, 2'000'000);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? b->assignments : std::vector<model::TaskAssignment>{};
  }

  // Lets every node but `alive` fall silent past the heartbeat timeout (1 s): in two
  // steps, with a heartbeat from `alive` between them, so that the coordinator's loop,
  // whenever it looks, never finds `alive` silent too long as well.
  void SilenceAllBut(const model::RegistrationReply& alive) {
    env_.fake().Advance(600'000);
    Report(alive, {});
    env_.fake().Advance(900'000);
    Report(alive, {});
  }

  void Report(const model::RegistrationReply& node, std::vector<model::TaskUpdate> updates,
              std::vector<model::HeldObject> objects_added = {}) {
    model::AgentHeartbeat hb;
    hb.node_id = node.node_id;
    hb.session = node.session;
    hb.updates = std::move(updates);
    hb.objects_added = std::move(objects_added);
    auto r = coord_->Heartbeat(hb);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(*r);
  }

  // Two nodes, n1 with the only T4 and n2 with 8 cores, and a job whose a (T4: n1)
  // makes the object `object` that b (6 cores: n2) reads; a has finished and b's first
  // attempt is placed.
  struct ObjectDag {
    model::RegistrationReply n1, n2;
    uint64_t job = 0;
    model::TaskUpdate a_done;  // a's report (its key is the first attempt's)
    model::TaskAssignment b;
  };
  ObjectDag StartObjectDag(const std::string& object) {
    ObjectDag d;
    Start();
    d.n1 = Register(NodeWithT4("n1"));
    d.n2 = Register(NodeWith8Cores("n2"));
    auto r = coord_->Submit(
        "name: dag\ntasks:\n  - {name: a, kernel: sum, resources: {accelerator: T4}}\n"
        "  - {name: b, kernel: sum, after: [a], resources: {cpu: 6}}\n",
        "dag.yaml", "");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    d.job = r.ok() ? r->job_id : 0;
    std::vector<model::TaskAssignment> a = Next(d.n1);
    EXPECT_EQ(a.size(), 1u);
    if (a.empty()) return d;
    d.a_done = DoneAsObject(a[0].key, object);
    Report(d.n1, {d.a_done}, {model::HeldObject{object, 10'000}});
    std::vector<model::TaskAssignment> b = Next(d.n2);
    EXPECT_EQ(b.size(), 1u);
    if (!b.empty()) d.b = b[0];
    return d;
  }

  model::JobView Job(uint64_t id) {
    auto v = coord_->GetJob(id, 0, rpc::kMaxTasksPerPage);
    EXPECT_TRUE(v.ok());
    return *v;
  }

  // Every page of the job's logs (of the task called `task`, when set), as a client
  // reads them: from each page's `next` until there is none.
  StatusOr<std::vector<rpc::TaskLog>> Logs(uint64_t id, const std::string& task) {
    std::vector<rpc::TaskLog> out;
    for (std::optional<rpc::LogCursor> from = rpc::LogCursor{}; from;) {
      MERIDIAN_ASSIGN_OR_RETURN(rpc::LogPage page, coord_->Logs(id, task, *from));
      out.insert(out.end(), page.logs.begin(), page.logs.end());
      if (page.next && !(*from < *page.next)) return InternalError("a page's next is not past its start");
      from = page.next;
    }
    return out;
  }

  TestEnv env_;
  std::unique_ptr<Coordinator> coord_;
};

}  // namespace meridian::coordinator
