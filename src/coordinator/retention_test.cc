// Finished jobs: what stays in memory, what is read back from the store, deleting
// them by hand and by the retention policy, and across a restart.
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "coordinator/coordinator_test_util.h"
#include "store/sqlite_state_store.h"

namespace meridian::coordinator {
namespace {

// a -> b; c alone. b's output is an object on the node (a result, kept there).
constexpr const char* kJob =
    "name: three\ntasks:\n  - {name: a, kernel: sum}\n  - {name: b, kernel: sum, after: [a]}\n"
    "  - {name: c, kernel: sum, retries: 1}\n";

class RetentionTest : public CoordinatorTest {
 protected:
  // Runs kJob on `node` to success, c failing once first; returns its id.
  uint64_t RunJob(const model::RegistrationReply& node, const std::string& object) {
    auto r = coord_->Submit(kJob, "three.yaml", "");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<model::TaskAssignment> first = Next(node);  // a and c
    EXPECT_EQ(first.size(), 2u);
    model::TaskUpdate a = Done(first[0].key, "1");
    a.stdout_tail = "a says hello\n";
    Report(node, {a, Failed(first[1].key, "exit code 1")});
    std::vector<model::TaskAssignment> second = Next(node);  // b, and c again
    EXPECT_EQ(second.size(), 2u);
    std::vector<model::TaskUpdate> done;
    for (const model::TaskAssignment& x : second) {
      done.push_back(x.task_name == "b" ? DoneAsObject(x.key, object) : Done(x.key, "3"));
    }
    Report(node, done, {model::HeldObject{object, 10'000}});
    EXPECT_EQ(coord_->WaitJob(r->job_id, 0, 0)->job.status, model::JobStatus::kSucceeded);
    return r->job_id;
  }
};

TEST_F(RetentionTest, AFinishedJobLeavesMemoryAndIsReadBackFromTheStore) {
  Start();
  model::RegistrationReply n = Register(Node("n1"));
  const uint64_t id = RunJob(n, std::string(32, 'b'));
  auto running = coord_->Submit("name: other\ntasks:\n  - {name: x, kernel: noop, count: 4}\n", "other.yaml", "");
  ASSERT_TRUE(running.ok());
  // Only the unfinished job's 4 tasks are in memory; the finished job's 3 are not.
  EXPECT_EQ(coord_->TasksInMemory(), 4u);
  model::JobView v = Job(id);
  EXPECT_EQ(v.summary.succeeded, 3);
  EXPECT_EQ(v.summary.retries, 1);
  ASSERT_EQ(v.tasks.size(), 3u);
  EXPECT_EQ(v.next_task, 3u);
  EXPECT_EQ(v.tasks[0].name, "a");
  EXPECT_FALSE(v.tasks[0].result);  // b reads it
  EXPECT_TRUE(v.tasks[1].result);
  EXPECT_EQ(v.tasks[1].record.output_object, std::string(32, 'b'));
  ASSERT_EQ(v.tasks[2].history.size(), 2u);
  EXPECT_EQ(v.tasks[2].history[0].outcome, "failed");
  EXPECT_EQ(v.tasks[2].history[0].reason, "exit code 1");
  // Paged: one task from index 1.
  StatusOr<model::JobView> page = coord_->GetJob(id, 1, 1);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->tasks.size(), 1u);
  EXPECT_EQ(page->tasks[0].name, "b");
  EXPECT_EQ(page->next_task, 2u);
  // Logs by task name, from the store.
  StatusOr<std::vector<rpc::TaskLog>> logs = Logs(id, "a");
  ASSERT_TRUE(logs.ok()) << logs.status().ToString();
  ASSERT_EQ(logs->size(), 1u);
  EXPECT_EQ((*logs)[0].task, "a");
  EXPECT_EQ((*logs)[0].record.stdout_tail, "a says hello\n");
  EXPECT_EQ(Logs(id, "zzz").status().code(), StatusCode::kNotFound);
}

// A running attempt's output, reported piece by piece with each stream's running
// total: read as it stands, each byte once whatever the agent sends again, a gap
// counted; once the attempt ends, its stored log replaces it.
TEST_F(RetentionTest, ARunningAttemptsOutputIsReadAsItComes) {
  Start();
  model::RegistrationReply n = Register(Node("n1"));
  auto r = coord_->Submit("name: live\ntasks:\n  - {name: t, command: [sh, -c, 'x']}\n", "live.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<model::TaskAssignment> a = Next(n);
  ASSERT_EQ(a.size(), 1u);
  auto live = [&](std::string out, int64_t out_total, std::string err, int64_t err_total) {
    model::TaskUpdate u = Running(a[0].key, std::move(out), std::move(err));
    u.stdout_bytes = out_total;
    u.stderr_bytes = err_total;
    return u;
  };
  auto only_log = [&] {
    StatusOr<std::vector<rpc::TaskLog>> logs = Logs(r->job_id, "t");
    EXPECT_TRUE(logs.ok()) << logs.status().ToString();
    EXPECT_EQ(logs.ok() ? logs->size() : 0, 1u);
    return logs.ok() && logs->size() == 1 ? (*logs)[0] : rpc::TaskLog{};
  };
  Report(n, {live("one\n", 4, "", 0)});
  rpc::TaskLog l = only_log();
  EXPECT_TRUE(l.running);
  EXPECT_EQ(l.record.node, "n1");
  EXPECT_EQ(l.record.stdout_tail, "one\n");
  EXPECT_EQ(l.record.stdout_bytes, 4);
  // Sent again with what came since (its acknowledgement was lost): no byte twice.
  Report(n, {live("one\ntwo\n", 8, "warn\n", 5)});
  l = only_log();
  EXPECT_EQ(l.record.stdout_tail, "one\ntwo\n");
  EXPECT_EQ(l.record.stdout_bytes, 8);
  EXPECT_EQ(l.record.stderr_tail, "warn\n");
  // A duplicate changes nothing; a report after a gap starts the tail afresh, its
  // total saying what was missed.
  Report(n, {live("two\n", 8, "", 5)});
  EXPECT_EQ(only_log().record.stdout_tail, "one\ntwo\n");
  Report(n, {live("ten\n", 40, "", 5)});
  l = only_log();
  EXPECT_EQ(l.record.stdout_tail, "ten\n");
  EXPECT_EQ(l.record.stdout_bytes, 40);
  EXPECT_EQ(l.record.stderr_tail, "warn\n");
  // A report of more than a tail holds keeps the tail's bound.
  Report(n, {live(std::string(model::kMaxTaskLogTailBytes + 10, 'x'), 40 + model::kMaxTaskLogTailBytes + 10, "", 5)});
  l = only_log();
  EXPECT_EQ(l.record.stdout_tail, std::string(model::kMaxTaskLogTailBytes, 'x'));
  EXPECT_EQ(l.record.stdout_bytes, 40 + static_cast<int64_t>(model::kMaxTaskLogTailBytes) + 10);
  // Ended: the stored log, whole, and nothing live.
  model::TaskUpdate done = Done(a[0].key, "");
  done.stdout_tail = "the end\n";
  done.stdout_bytes = 70'000;
  Report(n, {done});
  l = only_log();
  EXPECT_FALSE(l.running);
  EXPECT_EQ(l.record.stdout_tail, "the end\n");
  EXPECT_EQ(l.record.stdout_bytes, 70'000);
}

// An attempt whose node dies keeps, as its log, the output it reported while it ran:
// the last lines before a crash are what its user needs to see. The next attempt's
// output is read beside it.
TEST_F(RetentionTest, ALostAttemptKeepsTheOutputItReportedAsItsLog) {
  Start();
  model::RegistrationReply n1 = Register(Node("n1"));
  auto r = coord_->Submit("name: crash\ntasks:\n  - {name: t, command: [sh, -c, 'x']}\n", "crash.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<model::TaskAssignment> a = Next(n1);
  ASSERT_EQ(a.size(), 1u);
  Report(n1, {Running(a[0].key, "epoch 1\nepoch 2\n", "out of memory?\n")});
  model::RegistrationReply n2 = Register(Node("n2"));
  SilenceAllBut(n2);
  for (int i = 0; i < 200 && coord_->ListNodes()[0].alive; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(coord_->ListNodes()[0].alive);
  std::vector<model::TaskAssignment> again = Next(n2);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].key.attempt, 2u);
  Report(n2, {Running(again[0].key, "epoch 1\n")});
  StatusOr<std::vector<rpc::TaskLog>> logs = Logs(r->job_id, "t");
  ASSERT_TRUE(logs.ok()) << logs.status().ToString();
  ASSERT_EQ(logs->size(), 2u);
  const rpc::TaskLog& lost = (*logs)[0];
  EXPECT_EQ(lost.task, "t");
  EXPECT_EQ(lost.record.attempt, 1);
  EXPECT_EQ(lost.record.node, "n1");
  EXPECT_FALSE(lost.running);
  EXPECT_EQ(lost.record.stdout_tail, "epoch 1\nepoch 2\n");
  EXPECT_EQ(lost.record.stdout_bytes, 16);
  EXPECT_EQ(lost.record.stderr_tail, "out of memory?\n");
  EXPECT_EQ(lost.record.stderr_bytes, 15);
  EXPECT_EQ((*logs)[1].record.attempt, 2);
  EXPECT_EQ((*logs)[1].record.node, "n2");
  EXPECT_TRUE((*logs)[1].running);
  EXPECT_EQ((*logs)[1].record.stdout_tail, "epoch 1\n");
  // The second attempt's own last report replaces its live output, once.
  model::TaskUpdate done = Done(again[0].key, "");
  done.stdout_tail = "epoch 1\nepoch 2\nepoch 3\n";
  done.stdout_bytes = 24;
  Report(n2, {done});
  logs = Logs(r->job_id, "t");
  ASSERT_TRUE(logs.ok()) << logs.status().ToString();
  ASSERT_EQ(logs->size(), 2u);
  EXPECT_EQ((*logs)[0].record.stdout_tail, "epoch 1\nepoch 2\n");
  EXPECT_FALSE((*logs)[1].running);
  EXPECT_EQ((*logs)[1].record.stdout_tail, "epoch 1\nepoch 2\nepoch 3\n");
  EXPECT_EQ((*logs)[1].record.stderr_tail, "");
}

// A job's logs come a page at a time, within the page's bounds (2 logs, or the one
// whose tails reach 100 bytes here), the stored logs of ended attempts and the live
// output of running ones merged in (task, attempt) order: every log once, whatever
// the bounds cut.
class LogPageTest : public RetentionTest {
 protected:
  // t/0 ended (100 bytes), t/1 runs (100 live), t/2 failed once (10) and runs again
  // (10 live), t/3 ended (10).
  void StartFourTasks(uint32_t page_logs, int64_t page_bytes) {
    Start(std::make_unique<testing::InMemoryStateStore>(), {}, [&](CoordinatorOptions& o) {
      o.log_page_logs = page_logs;
      o.log_page_bytes = page_bytes;
    });
    model::RegistrationReply n = Register(Node("n1"));
    auto r = coord_->Submit("name: four\ntasks:\n  - {name: t, command: [x], count: 4, retries: 1}\n", "four.yaml", "");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    job_ = r->job_id;
    std::vector<model::TaskAssignment> a = Next(n);
    ASSERT_EQ(a.size(), 4u);
    auto with = [](model::TaskUpdate u, std::string out) {
      u.stdout_tail = std::move(out);
      u.stdout_bytes = static_cast<int64_t>(u.stdout_tail.size());
      return u;
    };
    Report(n, {with(Done(a[0].key, ""), std::string(100, 'a')), Running(a[1].key, std::string(100, 'b')),
               with(Failed(a[2].key, "exit code 1"), std::string(10, 'c')), with(Done(a[3].key, ""), std::string(10, 'e'))});
    std::vector<model::TaskAssignment> again = Next(n);
    ASSERT_EQ(again.size(), 1u);
    Report(n, {Running(again[0].key, std::string(10, 'd'))});
  }

  using Keys = std::vector<std::tuple<uint32_t, int32_t, bool>>;  // task, attempt, running
  // Each page's logs, from the first page to the last.
  std::vector<Keys> Pages() {
    std::vector<Keys> out;
    for (std::optional<rpc::LogCursor> from = rpc::LogCursor{}; from && out.size() < 20;) {
      StatusOr<rpc::LogPage> page = coord_->Logs(job_, "", *from);
      EXPECT_TRUE(page.ok()) << page.status().ToString();
      if (!page.ok()) break;
      Keys keys;
      for (const rpc::TaskLog& l : page->logs) keys.emplace_back(l.record.task, l.record.attempt, l.running);
      out.push_back(keys);
      from = page->next;
    }
    return out;
  }

  uint64_t job_ = 0;
};

TEST_F(LogPageTest, PagesEndAtTheirByteBound) {
  StartFourTasks(10, 100);
  EXPECT_EQ(Pages(), (std::vector<Keys>{{{0, 1, false}},
                                        {{1, 1, true}},
                                        {{2, 1, false}, {2, 2, true}, {3, 1, false}}}));
  StatusOr<std::vector<rpc::TaskLog>> all = Logs(job_, "");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 5u);
  EXPECT_EQ((*all)[1].task, "t/1");
  EXPECT_EQ((*all)[1].record.stdout_tail, std::string(100, 'b'));
  EXPECT_EQ((*all)[3].record.stdout_tail, std::string(10, 'd'));
}

TEST_F(LogPageTest, PagesEndAtTheirCount) {
  StartFourTasks(2, 1 << 20);
  EXPECT_EQ(Pages(), (std::vector<Keys>{{{0, 1, false}, {1, 1, true}},
                                        {{2, 1, false}, {2, 2, true}},
                                        {{3, 1, false}}}));
  // One log a page: the store's page bounds which running attempts come with it.
  StartFourTasks(1, 1 << 20);
  EXPECT_EQ(Pages(), (std::vector<Keys>{{{0, 1, false}},
                                        {{1, 1, true}},
                                        {{2, 1, false}},
                                        {{2, 2, true}},
                                        {{3, 1, false}},
                                        {}}));
  // One task's, from a cursor before it.
  StatusOr<rpc::LogPage> page = coord_->Logs(job_, "t/2", rpc::LogCursor{0, 5});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->logs.size(), 1u);
  EXPECT_EQ(page->logs[0].record.attempt, 1);
  ASSERT_TRUE(page->next.has_value());
  EXPECT_EQ(*page->next, (rpc::LogCursor{2, 2}));
  page = coord_->Logs(job_, "t/2", *page->next);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->logs.size(), 1u);
  EXPECT_TRUE(page->logs[0].running);
  EXPECT_TRUE(coord_->Logs(job_, "t/2", rpc::LogCursor{3, 0})->logs.empty());
}

// A store that, once, runs `after_read` as a read of logs returns: the attempt that
// ends there ends after the store was read, before the coordinator looks at what runs.
class StoreThatEndsAnAttemptAsItIsRead : public testing::ForwardingStateStore {
 public:
  explicit StoreThatEndsAnAttemptAsItIsRead(std::unique_ptr<store::StateStore> inner)
      : ForwardingStateStore(*inner), owned_(std::move(inner)) {}
  StatusOr<std::vector<model::TaskLog>> Logs(uint64_t job, std::optional<uint32_t> task, uint32_t first_task,
                                             int32_t first_attempt, uint32_t limit, int64_t max_bytes) override {
    StatusOr<std::vector<model::TaskLog>> out =
        ForwardingStateStore::Logs(job, task, first_task, first_attempt, limit, max_bytes);
    if (std::function<void()> f = std::exchange(after_read, nullptr)) f();
    return out;
  }
  std::function<void()> after_read;

 private:
  std::unique_ptr<store::StateStore> owned_;
};

// An attempt that ends while its job's logs are read is in the page, once: as its
// output so far, or as its stored log. The store used to be read first and the
// running attempts looked at after: one ending between the two was in neither (this
// page came back empty).
TEST_F(RetentionTest, AnAttemptThatEndsAsItsLogsAreReadIsInThePage) {
  auto owned = std::make_unique<StoreThatEndsAnAttemptAsItIsRead>(std::make_unique<testing::InMemoryStateStore>());
  StoreThatEndsAnAttemptAsItIsRead* store = owned.get();
  Start(std::move(owned));
  model::RegistrationReply n = Register(Node("n1"));
  auto r = coord_->Submit("name: one\ntasks:\n  - {name: t, command: [x]}\n", "one.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<model::TaskAssignment> a = Next(n);
  ASSERT_EQ(a.size(), 1u);
  Report(n, {Running(a[0].key, "half\n")});
  store->after_read = [&] {
    model::TaskUpdate done = Done(a[0].key, "");
    done.stdout_tail = "half\nall\n";
    done.stdout_bytes = 9;
    Report(n, {done});
  };
  StatusOr<rpc::LogPage> page = coord_->Logs(r->job_id, "", rpc::LogCursor{});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->logs.size(), 1u) << "the attempt that ended as the logs were read is missing";
  EXPECT_EQ(page->logs[0].task, "t");
  EXPECT_TRUE(page->logs[0].running);
  EXPECT_EQ(page->logs[0].record.stdout_tail, "half\n");
  EXPECT_FALSE(page->next.has_value());
  EXPECT_EQ(coord_->WaitJob(r->job_id, 0, 0)->job.status, model::JobStatus::kSucceeded);
  // Read again: its stored log, whole.
  page = coord_->Logs(r->job_id, "", rpc::LogCursor{});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->logs.size(), 1u);
  EXPECT_FALSE(page->logs[0].running);
  EXPECT_EQ(page->logs[0].record.stdout_tail, "half\nall\n");
}

// A task's outputs become a dataset when its job succeeds: its name is the job's from
// submission, its shards outlive the job (deleting it lets none of them go), and a job
// whose output is missing fails saying so.
TEST_F(RetentionTest, OutputsBecomeANamedDatasetThatOutlivesTheirJob) {
  Start();
  model::RegistrationReply n = Register(Node("n1"));
  const model::Caller admin{"", "", model::Role::kAdmin, "", true};
  const char* kSpec = "name: make\ntasks:\n  - {name: part, kernel: sum, count: 2, output_dataset: sums}\n"
                      "  - {name: total, kernel: sum, after: [part]}\n";
  auto r = coord_->Submit(kSpec, "make.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Taken from submission on: another job may not write it.
  auto again = coord_->Submit(kSpec, "again.yaml", "");
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(again.status().message(),
            fmt::format("again.yaml: task 'part/0': output_dataset 'sums': job {}, still running, writes it", r->job_id));
  std::vector<model::TaskAssignment> parts = Next(n);
  ASSERT_EQ(parts.size(), 2u);
  const std::string a(32, 'a'), b(32, 'b');
  Report(n, {DoneAsObject(parts[0].key, a), DoneAsObject(parts[1].key, b)},
         {model::HeldObject{a, 10'000}, model::HeldObject{b, 10'000}});
  std::vector<model::TaskAssignment> total = Next(n);
  ASSERT_EQ(total.size(), 1u);
  Report(n, {Done(total[0].key, "2")});
  ASSERT_EQ(coord_->WaitJob(r->job_id, 0, 0)->job.status, model::JobStatus::kSucceeded);
  StatusOr<model::DatasetView> sums = coord_->GetDataset(admin, "sums");
  ASSERT_TRUE(sums.ok()) << sums.status().ToString();
  ASSERT_EQ(sums->shards.size(), 2u);
  EXPECT_EQ(sums->shards[0].id, a);  // in copy order
  EXPECT_EQ(sums->shards[1].id, b);
  ASSERT_EQ(sums->shards[0].replicas.size(), 1u);
  // Read by dependents, yet not let go when the job ended, nor when it is deleted.
  ASSERT_TRUE(coord_->DeleteJob(r->job_id).ok());
  StatusOr<model::AssignmentBatch> batch = coord_->NextAssignments(n.node_id, n.session, 0);
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE(batch->release_objects.empty()) << batch->release_objects.size();
  // Now a name like any dataset's: never written again, read by jobs.
  EXPECT_EQ(coord_->Submit(kSpec, "third.yaml", "").status().message(),
            "third.yaml:3:57: tasks[0].output_dataset: dataset 'sums' exists already; a task's outputs make a new one");
  // Another tenant's job does not see the dataset, but may not take its name either.
  EXPECT_EQ(coord_->Submit(kSpec, "theirs.yaml", "other").status().message(),
            "theirs.yaml: task 'part/0': output_dataset 'sums': the name is taken (names are never reused); choose "
            "another");
  EXPECT_TRUE(coord_->Submit("name: read\ntasks:\n  - {name: r, kernel: sum, map: {over: dataset://sums}}\n", "read.yaml", "").ok());

  // A task that wrote nothing cannot be a shard: its job fails, saying so.
  auto empty = coord_->Submit("name: e\ntasks:\n  - {name: quiet, kernel: sum, output_dataset: nothing}\n", "e.yaml", "");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  std::vector<model::TaskAssignment> quiet;
  for (int i = 0; i < 3 && quiet.empty(); ++i) {
    for (const model::TaskAssignment& x : Next(n)) {
      if (x.key.job == empty->job_id) quiet.push_back(x);
    }
  }
  ASSERT_EQ(quiet.size(), 1u);
  Report(n, {Done(quiet[0].key, "")});
  StatusOr<model::JobSummary> failed = coord_->WaitJob(empty->job_id, 0, 0);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->job.status, model::JobStatus::kFailed);
  EXPECT_EQ(failed->job.reason,
            "output_dataset 'nothing': task 'quiet' wrote no output (a dataset's shard is a task's output, kept as an "
            "object on its node)");
  EXPECT_EQ(coord_->GetDataset(admin, "nothing").status().code(), StatusCode::kNotFound);
}

TEST_F(RetentionTest, DeleteRefusesAnUnfinishedJobAndLetsGoOfAFinishedOnesResults) {
  Start();
  model::RegistrationReply n = Register(Node("n1"));
  auto running = coord_->Submit("name: other\ntasks:\n  - {name: x, kernel: noop}\n", "other.yaml", "");
  ASSERT_TRUE(running.ok());
  StatusOr<model::JobSummary> refused = coord_->DeleteJob(running->job_id);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("cancel it first"), std::string::npos) << refused.status().message();
  Next(n);  // x is placed on n

  const std::string object(32, 'b');
  const uint64_t id = RunJob(n, object);
  StatusOr<model::JobSummary> gone = coord_->DeleteJob(id);
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_EQ(gone->tasks_total, 3);
  EXPECT_EQ(coord_->GetJob(id, 0, 10).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Logs(id, "").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(coord_->DeleteJob(id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(coord_->ListJobs(0, {}).size(), 1u);
  // The node is told to drop the reference the job's result held (a's output, read by
  // b, was let go when the job ended).
  auto batch = coord_->NextAssignments(n.node_id, n.session, 2'000'000);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->release_objects, std::vector<std::string>{object});
}

TEST_F(RetentionTest, ThePolicyDeletesTheOldestFinishedJobsBeyondItsCountAndAge) {
  Start(std::make_unique<testing::InMemoryStateStore>(), {}, [](CoordinatorOptions& o) {
    o.retain_jobs = 2;
    o.retain_for_us = int64_t{3600} * 1'000'000;
  });
  model::RegistrationReply n = Register(Node("n1"));
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(RunJob(n, std::string(32, static_cast<char>('a' + i))));
    env_.fake().Advance(1'000);  // finished at distinct times
  }
  auto running = coord_->Submit("name: other\ntasks:\n  - {name: x, kernel: noop}\n", "other.yaml", "");
  ASSERT_TRUE(running.ok());
  env_.fake().Advance(1'100'000);  // the loop's next look at retention
  ASSERT_TRUE(Eventually([&] { return coord_->ListJobs(0, {}).size() == 3; }));
  EXPECT_EQ(coord_->GetJob(ids[0], 0, 0).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(coord_->GetJob(ids[1], 0, 0).ok());
  EXPECT_TRUE(coord_->GetJob(ids[2], 0, 0).ok());
  // An hour on, the finished ones go; the unfinished one stays whatever its age.
  env_.fake().Advance(int64_t{3600} * 1'000'000);
  ASSERT_TRUE(Eventually([&] { return coord_->ListJobs(0, {}).size() == 1; }));
  EXPECT_EQ(coord_->ListJobs(0, {})[0].job.id, running->job_id);
}

TEST_F(RetentionTest, ARestartLoadsFinishedJobsAsCountsAndTheirTasksStayReadable) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("meridian-retention-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "state.db").string();
  Start(std::move(*store::SqliteStateStore::Open(db, {})));
  model::RegistrationReply n = Register(Node("n1"));
  const uint64_t id = RunJob(n, std::string(32, 'b'));
  coord_.reset();
  Start(std::move(*store::SqliteStateStore::Open(db, {})));
  EXPECT_EQ(coord_->TasksInMemory(), 0u);
  std::vector<model::JobSummary> jobs = coord_->ListJobs(0, {});
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job.status, model::JobStatus::kSucceeded);
  EXPECT_EQ(jobs[0].tasks_total, 3);
  EXPECT_EQ(jobs[0].succeeded, 3);
  EXPECT_EQ(jobs[0].retries, 1);
  model::JobView v = Job(id);
  ASSERT_EQ(v.tasks.size(), 3u);
  EXPECT_EQ(v.tasks[2].name, "c");
  EXPECT_EQ(v.tasks[2].history.size(), 2u);
  ASSERT_TRUE(coord_->DeleteJob(id).ok());
  // The next job gets a new id, not the deleted one's.
  Register(Node("n1"));
  auto next = coord_->Submit("name: other\ntasks:\n  - {name: x, kernel: noop}\n", "other.yaml", "");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->job_id, id + 1);
  coord_.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace meridian::coordinator
