// One suite for every StateStore, plus what only the SQLite store promises
// (durability across reopening, WAL mode, schema migrations) and what only the
// PostgreSQL store does (a real server started by the test: passwords, a lost
// connection, big batches in one transaction).
#include <signal.h>
#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "store/open_state_store.h"
#include "store/postgres_lease.h"
#include "store/postgres_state_store.h"
#include "store/sqlite_state_store.h"
#include "testing/in_memory_state_store.h"
#include "testing/postgres_server.h"

namespace meridian::store {
namespace {

namespace fs = std::filesystem;

fs::path TempDir() {
  fs::path dir = fs::temp_directory_path() / ("meridian-store-test-" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  return dir;
}

model::JobRecord Job(const std::string& name) {
  model::JobRecord j;
  j.name = name;
  j.tenant = "t";
  j.spec_yaml = "name: " + name + "\n";
  j.spec_name = name + ".yaml";
  j.submitted_us = 1000;
  return j;
}

model::TaskRecord Task(uint32_t index) {
  model::TaskRecord t;
  t.task = index;
  t.status = model::TaskStatus::kQueued;
  return t;
}

// `n` tasks named t0, t1, ..., queued.
std::vector<NewTask> NewTasks(uint32_t n) {
  std::vector<NewTask> out;
  for (uint32_t i = 0; i < n; ++i) out.push_back({"t" + std::to_string(i), false, model::TaskStatus::kQueued});
  return out;
}

// One server for the whole test process (each test is a process of its own under
// CTest), a new database for each store made from it.
testing::PostgresServer* Postgres() {
  static std::unique_ptr<testing::PostgresServer> server = [] {
    StatusOr<std::unique_ptr<testing::PostgresServer>> s = testing::PostgresServer::Start();
    if (!s.ok()) {
      ADD_FAILURE() << s.status().ToString();
      return std::unique_ptr<testing::PostgresServer>();
    }
    return std::move(*s);
  }();
  return server.get();
}

// A new database on the test's server: its name.
std::string NewDatabase() {
  static int n = 0;
  const std::string name = "meridian_" + std::to_string(++n);
  Status s = Postgres() ? Postgres()->CreateDatabase(name) : UnavailableError("no server");
  EXPECT_TRUE(s.ok()) << s.ToString();
  return name;
}

struct StoreFactory {
  std::string name;
  std::function<std::unique_ptr<StateStore>(const fs::path& dir)> make;
};

class StateStoreSuite : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    store_ = GetParam().make(dir_);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  // Every log of the job (of `task` when set), in one read.
  StatusOr<std::vector<model::TaskLog>> AllLogs(uint64_t job, std::optional<uint32_t> task) {
    return store_->Logs(job, task, 0, 0, UINT32_MAX, INT64_MAX);
  }
  fs::path dir_;
  std::unique_ptr<StateStore> store_;
};

TEST_P(StateStoreSuite, CreateJobGivesIncreasingIdsAndKeepsTasks) {
  StatusOr<uint64_t> a = store_->CreateJob(Job("a"), NewTasks(2));
  StatusOr<uint64_t> b = store_->CreateJob(Job("b"), NewTasks(1));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(*a, *b);
  StatusOr<LoadedState> s = store_->Load();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->jobs.size(), 2u);
  EXPECT_EQ(s->jobs[0].name, "a");
  EXPECT_EQ(s->jobs[0].spec_yaml, "name: a\n");
  EXPECT_EQ(s->jobs[1].id, *b);
  ASSERT_EQ(s->tasks.size(), 3u);
  EXPECT_EQ(s->tasks[2].job, *b);
  EXPECT_EQ(s->tasks[0].status, model::TaskStatus::kQueued);
}

TEST_P(StateStoreSuite, ApplyUpdatesEveryKindOfRecord) {
  uint64_t id = *store_->CreateJob(Job("a"), NewTasks(2));
  StoreBatch batch;
  model::TaskRecord t = Task(1);
  t.job = id;
  t.status = model::TaskStatus::kSucceeded;
  t.attempt = 2;
  t.failures = 1;
  t.losses = 0;
  t.node = "n1";
  t.site = "s1";
  t.device_type = "T4";
  t.emulated = true;
  t.allocation = {500, 1024, {0, 3}, 250};
  t.output = std::string("4\0 2", 4);
  t.started_us = 5;
  t.finished_us = 9;
  batch.tasks.push_back(t);
  model::JobRecord j = Job("a");
  j.id = id;
  j.status = model::JobStatus::kFailed;
  j.reason = "task x failed";
  j.finished_us = 10;
  batch.jobs.push_back(j);
  batch.attempts.push_back({id, 1, 1, "n0", "s0", "failed", "exit code 3", 3, 1, 2});
  batch.attempts.push_back({id, 1, 2, "n1", "s1", "succeeded", "", 0, 5, 9});
  batch.logs.push_back({id, 1, 1, "n0", "out", "err", 70'000, 3});
  batch.names.push_back({"q3", -1, {std::string(32, 'a'), 22}, "team-a"});
  batch.names.push_back({"frames", 0, {std::string(32, 'b'), 7}, "team-b"});
  batch.spend.push_back({"team-a", 20'000, 4'000'000});
  batch.spend.push_back({"team-a", 20'001, 1'000'000});
  ASSERT_TRUE(store_->Apply(batch).ok());
  StoreBatch later;  // a day's spend is replaced, not added to
  later.spend.push_back({"team-a", 20'001, 9'000'000});
  ASSERT_TRUE(store_->Apply(later).ok());

  // A finished job comes back as its record and counts; its tasks are read by page.
  LoadedState s = *store_->Load();
  EXPECT_TRUE(s.tasks.empty());
  EXPECT_TRUE(s.attempts.empty());
  const model::JobSummary& counts = s.finished_counts[id];
  EXPECT_EQ(counts.tasks_total, 2);
  EXPECT_EQ(counts.succeeded, 1);
  EXPECT_EQ(counts.waiting, 1);
  EXPECT_EQ(counts.retries, 1);
  std::vector<model::TaskView> page = *store_->TaskPage(id, 0, 10, 1 << 20);
  ASSERT_EQ(page.size(), 2u);
  const model::TaskRecord& got = page[1].record;
  EXPECT_EQ(got.status, model::TaskStatus::kSucceeded);
  EXPECT_EQ(got.attempt, 2);
  EXPECT_EQ(got.failures, 1);
  EXPECT_EQ(got.node, "n1");
  EXPECT_TRUE(got.emulated);
  EXPECT_EQ(got.allocation.devices, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(got.allocation.device_share_milli, 250);
  EXPECT_EQ(got.output, std::string("4\0 2", 4));
  EXPECT_EQ(s.jobs[0].status, model::JobStatus::kFailed);
  EXPECT_EQ(s.jobs[0].reason, "task x failed");
  EXPECT_EQ(s.jobs[0].spec_yaml, "name: a\n");  // not rewritten by a status update
  ASSERT_EQ(page[1].history.size(), 2u);
  EXPECT_EQ(page[1].history[0].reason, "exit code 3");
  EXPECT_EQ(page[1].history[1].outcome, "succeeded");
  EXPECT_TRUE(page[0].history.empty());
  auto logs = AllLogs(id, 1);
  ASSERT_TRUE(logs.ok());
  ASSERT_EQ(logs->size(), 1u);
  EXPECT_EQ((*logs)[0].record.stderr_tail, "err");
  EXPECT_EQ((*logs)[0].record.stdout_bytes, 70'000);  // more than its tail: the rest is counted
  EXPECT_EQ((*logs)[0].record.stderr_bytes, 3);
  EXPECT_TRUE(AllLogs(id, 0)->empty());
  // Names keep their tenant: who may read what they name.
  ASSERT_EQ(s.names.size(), 2u);
  EXPECT_EQ(s.names[0].name, "frames");
  EXPECT_EQ(s.names[0].shard, 0);
  EXPECT_EQ(s.names[0].tenant, "team-b");
  EXPECT_EQ(s.names[1].object.id, std::string(32, 'a'));
  EXPECT_EQ(s.names[1].object.size, 22);
  EXPECT_EQ(s.names[1].tenant, "team-a");
  ASSERT_EQ(s.spend.size(), 2u);
  EXPECT_EQ(s.spend[0].day, 20'000);
  EXPECT_EQ(s.spend[0].micro_usd, 4'000'000);
  EXPECT_EQ(s.spend[1].tenant, "team-a");
  EXPECT_EQ(s.spend[1].day, 20'001);
  EXPECT_EQ(s.spend[1].micro_usd, 9'000'000);
}

TEST_P(StateStoreSuite, TasksArePagedWithTheirNamesAndAttempts) {
  std::vector<NewTask> tasks = NewTasks(5);
  tasks[4].result = true;
  const uint64_t id = *store_->CreateJob(Job("paged"), tasks);
  StoreBatch batch;
  for (uint32_t i = 0; i < 5; ++i) {
    model::TaskRecord t = Task(i);
    t.job = id;
    t.output = std::string(100, 'x');
    batch.tasks.push_back(t);
    batch.attempts.push_back({id, i, 1, "n", "s", "succeeded", "", 0, 1, 2});
  }
  batch.attempts.push_back({id, 2, 2, "n", "s", "failed", "boom", 1, 3, 4});
  batch.logs.push_back({id, 3, 1, "n", "out", ""});
  ASSERT_TRUE(store_->Apply(batch).ok());

  std::vector<model::TaskView> page = *store_->TaskPage(id, 1, 3, 1 << 20);
  ASSERT_EQ(page.size(), 3u);
  EXPECT_EQ(page[0].name, "t1");
  EXPECT_EQ(page[2].record.task, 3u);
  EXPECT_EQ(page[1].history.size(), 2u);
  EXPECT_EQ(page[1].history[1].reason, "boom");
  EXPECT_FALSE(page[2].result);
  EXPECT_TRUE(store_->TaskPage(id, 4, 3, 1 << 20)->at(0).result);
  EXPECT_TRUE(store_->TaskPage(id, 5, 3, 1 << 20)->empty());
  // Output bytes end a page early, after at least one task.
  EXPECT_EQ(store_->TaskPage(id, 0, 5, 250)->size(), 3u);
  EXPECT_EQ(store_->TaskPage(id, 0, 5, 1)->size(), 1u);
  EXPECT_EQ(*store_->FindTask(id, "t3"), std::optional<uint32_t>(3));
  EXPECT_EQ(*store_->FindTask(id, "nope"), std::nullopt);
  std::vector<model::TaskLog> logs = *AllLogs(id, std::nullopt);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs[0].task, "t3");
}

TEST_P(StateStoreSuite, LogsArePagedFromACursorWithinTheirBounds) {
  const uint64_t id = *store_->CreateJob(Job("chatty"), NewTasks(3));
  StoreBatch batch;
  // t0's attempts 1 and 2, none of t1, t2's 1 and 3: tails of 100, 200, 300 and 400 bytes.
  batch.logs.push_back({id, 2, 3, "n", std::string(400, 'd'), ""});
  batch.logs.push_back({id, 0, 1, "n", std::string(60, 'a'), std::string(40, 'A')});
  batch.logs.push_back({id, 2, 1, "n", "", std::string(300, 'c')});
  batch.logs.push_back({id, 0, 2, "n", std::string(200, 'b'), ""});
  ASSERT_TRUE(store_->Apply(batch).ok());
  using Keys = std::vector<std::pair<uint32_t, int32_t>>;
  auto keys = [&](std::optional<uint32_t> task, uint32_t first_task, int32_t first_attempt, uint32_t limit,
                  int64_t max_bytes) {
    StatusOr<std::vector<model::TaskLog>> logs = store_->Logs(id, task, first_task, first_attempt, limit, max_bytes);
    EXPECT_TRUE(logs.ok()) << logs.status().ToString();
    Keys out;
    for (const model::TaskLog& l : logs.ok() ? *logs : std::vector<model::TaskLog>{}) {
      out.emplace_back(l.record.task, l.record.attempt);
    }
    return out;
  };
  EXPECT_EQ(keys(std::nullopt, 0, 0, 10, 1 << 20), (Keys{{0, 1}, {0, 2}, {2, 1}, {2, 3}}));
  // From a cursor on.
  EXPECT_EQ(keys(std::nullopt, 0, 2, 10, 1 << 20), (Keys{{0, 2}, {2, 1}, {2, 3}}));
  EXPECT_EQ(keys(std::nullopt, 1, 0, 10, 1 << 20), (Keys{{2, 1}, {2, 3}}));
  EXPECT_EQ(keys(std::nullopt, 2, 2, 10, 1 << 20), (Keys{{2, 3}}));
  EXPECT_EQ(keys(std::nullopt, 2, 4, 10, 1 << 20), Keys{});
  // At most `limit`; none after the one whose tails reach max_bytes (at least one).
  EXPECT_EQ(keys(std::nullopt, 0, 0, 2, 1 << 20), (Keys{{0, 1}, {0, 2}}));
  EXPECT_EQ(keys(std::nullopt, 0, 0, 10, 300), (Keys{{0, 1}, {0, 2}}));
  EXPECT_EQ(keys(std::nullopt, 0, 0, 10, 301), (Keys{{0, 1}, {0, 2}, {2, 1}}));
  EXPECT_EQ(keys(std::nullopt, 0, 0, 10, 1), (Keys{{0, 1}}));
  EXPECT_EQ(keys(std::nullopt, 2, 1, 1, 1), (Keys{{2, 1}}));
  // One task's.
  EXPECT_EQ(keys(2, 0, 0, 10, 1 << 20), (Keys{{2, 1}, {2, 3}}));
  EXPECT_EQ(keys(2, 2, 2, 10, 1 << 20), (Keys{{2, 3}}));
  EXPECT_EQ(keys(1, 0, 0, 10, 1 << 20), Keys{});
  std::vector<model::TaskLog> one = *store_->Logs(id, 0, 0, 0, 1, 1 << 20);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].task, "t0");
  EXPECT_EQ(one[0].record.node, "n");
  EXPECT_EQ(one[0].record.stdout_tail, std::string(60, 'a'));
  EXPECT_EQ(one[0].record.stderr_tail, std::string(40, 'A'));
}

TEST_P(StateStoreSuite, ADeletedJobLeavesNothingAndItsIdIsNotGivenAgain) {
  const uint64_t a = *store_->CreateJob(Job("a"), NewTasks(1));
  const uint64_t b = *store_->CreateJob(Job("b"), NewTasks(2));
  StoreBatch batch;
  batch.attempts.push_back({b, 0, 1, "n", "s", "succeeded", "", 0, 1, 2});
  batch.logs.push_back({b, 0, 1, "n", "out", "err"});
  ASSERT_TRUE(store_->Apply(batch).ok());
  ASSERT_TRUE(store_->DeleteJob(b).ok());
  LoadedState s = *store_->Load();
  ASSERT_EQ(s.jobs.size(), 1u);
  EXPECT_EQ(s.jobs[0].id, a);
  ASSERT_EQ(s.tasks.size(), 1u);
  EXPECT_TRUE(store_->TaskPage(b, 0, 10, 1 << 20)->empty());
  EXPECT_TRUE(AllLogs(b, std::nullopt)->empty());
  EXPECT_EQ(*store_->FindTask(b, "t1"), std::nullopt);
  EXPECT_EQ(store_->JobSpec(b).status().message(), "no job " + std::to_string(b));
  // The one left keeps its spec, as submitted.
  EXPECT_EQ(*store_->JobSpec(a), std::make_pair(std::string("name: a\n"), std::string("a.yaml")));
  // The newest job was deleted: its id is still not given out again.
  EXPECT_EQ(*store_->CreateJob(Job("c"), {}), b + 1);
}

// A coordinator gives job ids itself (from Load's next_job_id on) and stores a small
// job in the same batch as its first placements: the job's rows go first, then the
// batch's task updates; the next id given out is past every id stored, whichever way.
TEST_P(StateStoreSuite, AJobCreatedInABatchIsStoredWithItsPlacementsUnderItsOwnId) {
  EXPECT_EQ(store_->Load()->next_job_id, 1u);
  StoreBatch batch;
  model::JobRecord j = Job("placed");
  j.id = 7;
  batch.new_jobs.push_back(NewJob{j, NewTasks(2)});
  model::TaskRecord placed = Task(1);
  placed.job = 7;
  placed.status = model::TaskStatus::kAssigned;
  placed.node = "n1";
  placed.attempt = 1;
  batch.tasks.push_back(placed);
  batch.attempts.push_back({7, 1, 1, "n1", "s", "running", "", 0, 10, 0});
  ASSERT_TRUE(store_->Apply(batch).ok());
  LoadedState s = *store_->Load();
  EXPECT_EQ(s.next_job_id, 8u);
  ASSERT_EQ(s.jobs.size(), 1u);
  EXPECT_EQ(s.jobs[0].id, 7u);
  EXPECT_EQ(s.jobs[0].name, "placed");
  ASSERT_EQ(s.tasks.size(), 2u);
  EXPECT_EQ(s.tasks[0].status, model::TaskStatus::kQueued);
  EXPECT_EQ(s.tasks[1].status, model::TaskStatus::kAssigned);
  EXPECT_EQ(s.tasks[1].node, "n1");
  ASSERT_EQ(s.attempts.size(), 1u);
  EXPECT_EQ(*store_->FindTask(7, "t1"), std::optional<uint32_t>(1));
  // CreateJob with an id keeps it and moves the counter past it; an id below the
  // counter does not move it back; without an id, the counter's.
  model::JobRecord big = Job("big");
  big.id = 12;
  EXPECT_EQ(*store_->CreateJob(big, NewTasks(1)), 12u);
  big.id = 9;
  EXPECT_EQ(*store_->CreateJob(big, NewTasks(1)), 9u);
  EXPECT_EQ(store_->Load()->next_job_id, 13u);
  EXPECT_EQ(*store_->CreateJob(Job("next"), {}), 13u);
}

// What users wrote comes back byte for byte: NULs and bytes that are not UTF-8 in a
// spec, a job's and a task's name, a reason, an output and a log are neither cut
// nor changed.
TEST_P(StateStoreSuite, WhatUsersWroteComesBackByteForByte) {
  const std::string odd("a\0b\xff\xfe c\n", 9);
  model::JobRecord j = Job("j" + odd);
  j.spec_yaml = "name: x\n# " + odd;
  j.spec_name = odd + ".yaml";
  std::vector<NewTask> tasks = NewTasks(1);
  tasks[0].name = "t" + odd;
  const uint64_t id = *store_->CreateJob(j, tasks);
  StoreBatch batch;
  model::TaskRecord t = Task(0);
  t.job = id;
  t.status = model::TaskStatus::kFailed;
  t.reason = "r" + odd;
  t.output = odd + odd;
  batch.tasks.push_back(t);
  batch.attempts.push_back({id, 0, 1, "n", "s", "failed", "why" + odd, 2, 1, 2});
  batch.logs.push_back({id, 0, 1, "n", "out" + odd, "err" + odd, 12, 12});
  j.id = id;
  j.status = model::JobStatus::kFailed;
  j.reason = "because" + odd;
  batch.jobs.push_back(j);
  ASSERT_TRUE(store_->Apply(batch).ok());
  LoadedState s = *store_->Load();
  ASSERT_EQ(s.jobs.size(), 1u);
  EXPECT_EQ(s.jobs[0].name, "j" + odd);
  EXPECT_EQ(s.jobs[0].reason, "because" + odd);
  EXPECT_EQ(*store_->JobSpec(id), std::make_pair("name: x\n# " + odd, odd + ".yaml"));
  std::vector<model::TaskView> page = *store_->TaskPage(id, 0, 1, 1 << 20);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].name, "t" + odd);
  EXPECT_EQ(page[0].record.reason, "r" + odd);
  EXPECT_EQ(page[0].record.output, odd + odd);
  ASSERT_EQ(page[0].history.size(), 1u);
  EXPECT_EQ(page[0].history[0].reason, "why" + odd);
  std::vector<model::TaskLog> logs = *AllLogs(id, 0);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs[0].task, "t" + odd);
  EXPECT_EQ(logs[0].record.stdout_tail, "out" + odd);
  EXPECT_EQ(logs[0].record.stderr_tail, "err" + odd);
  EXPECT_EQ(*store_->FindTask(id, "t" + odd), std::optional<uint32_t>(0));
}

// A batch far bigger than any one round trip carries (a coordinator's commit after a
// burst of reports) is stored whole.
TEST_P(StateStoreSuite, ABigBatchIsStoredWhole) {
  const uint64_t id = *store_->CreateJob(Job("big"), NewTasks(3000));
  StoreBatch batch;
  for (uint32_t i = 0; i < 3000; ++i) {
    model::TaskRecord t = Task(i);
    t.job = id;
    t.status = model::TaskStatus::kRunning;
    t.node = "n" + std::to_string(i % 7);
    t.attempt = 1;
    batch.tasks.push_back(t);
    batch.attempts.push_back({id, i, 1, t.node, "s", "running", "", 0, i, 0});
  }
  ASSERT_TRUE(store_->Apply(batch).ok());
  LoadedState s = *store_->Load();
  ASSERT_EQ(s.tasks.size(), 3000u);
  ASSERT_EQ(s.attempts.size(), 3000u);
  EXPECT_EQ(s.tasks[2999].node, "n" + std::to_string(2999 % 7));
  EXPECT_EQ(s.tasks[2999].status, model::TaskStatus::kRunning);
  EXPECT_EQ(s.attempts[1234].started_us, 1234);
}

INSTANTIATE_TEST_SUITE_P(
    AllStores, StateStoreSuite,
    ::testing::Values(
        StoreFactory{"sqlite",
                     [](const fs::path& dir) -> std::unique_ptr<StateStore> {
                       auto s = SqliteStateStore::Open((dir / "state.db").string(), {});
                       return s.ok() ? std::move(*s) : nullptr;
                     }},
        StoreFactory{"in_memory",
                     [](const fs::path&) -> std::unique_ptr<StateStore> {
                       return std::make_unique<testing::InMemoryStateStore>();
                     }},
        StoreFactory{"postgresql",
                     [](const fs::path&) -> std::unique_ptr<StateStore> {
                       if (Postgres() == nullptr) return nullptr;
                       auto s = PostgresStateStore::Open(Postgres()->Uri(NewDatabase()), {});
                       EXPECT_TRUE(s.ok()) << s.status().ToString();
                       return s.ok() ? std::move(*s) : nullptr;
                     }}),
    [](const ::testing::TestParamInfo<StoreFactory>& info) { return info.param.name; });

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir(); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path() const { return (dir_ / "state.db").string(); }
  fs::path dir_;
};

TEST_F(SqliteStoreTest, ACommittedJobSurvivesReopening) {
  {
    auto s = *SqliteStateStore::Open(Path(), {});
    ASSERT_TRUE(s->CreateJob(Job("kept"), NewTasks(1)).ok());
  }
  auto s = *SqliteStateStore::Open(Path(), {});
  LoadedState l = *s->Load();
  ASSERT_EQ(l.jobs.size(), 1u);
  EXPECT_EQ(l.jobs[0].name, "kept");
  EXPECT_EQ(l.tasks.size(), 1u);
}

TEST_F(SqliteStoreTest, UsesWriteAheadLogging) {
  auto s = *SqliteStateStore::Open(Path(), {});
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(Path().c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST_F(SqliteStoreTest, MigratesAnOlderSchemaKeepingItsData) {
  {
    auto v1 = *SqliteStateStore::Open(Path(), {.max_schema_version = 1});
    EXPECT_EQ(v1->schema_version(), 1);
  }
  // Write a job the way version 1 would have, then let the current build migrate.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(Path().c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "INSERT INTO jobs VALUES (7,'old','t','name: old','old.yaml','succeeded','',1,2)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = *SqliteStateStore::Open(Path(), {});
  EXPECT_EQ(s->schema_version(), SqliteStateStore::LatestSchemaVersion());
  LoadedState l = *s->Load();
  ASSERT_EQ(l.jobs.size(), 1u);
  EXPECT_EQ(l.jobs[0].id, 7u);
  EXPECT_EQ(*s->CreateJob(Job("new"), {}), 8u);
}

TEST_F(SqliteStoreTest, RefusesASchemaNewerThanItKnows) {
  { auto s = *SqliteStateStore::Open(Path(), {}); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(Path().c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto s = SqliteStateStore::Open(Path(), {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("schema version 99"), std::string::npos);
}

TEST_F(SqliteStoreTest, AnUnwritableDirectoryIsAClearError) {
  auto s = SqliteStateStore::Open((dir_ / "missing" / "state.db").string(), {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("missing/state.db"), std::string::npos) << s.status().ToString();
}

class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Postgres(), nullptr);
    db_ = NewDatabase();
  }
  std::string Uri() const { return Postgres()->Uri(db_); }
  std::string db_;
};

TEST_F(PostgresStoreTest, ACommittedJobSurvivesReconnecting) {
  {
    auto s = *PostgresStateStore::Open(Uri(), {});
    EXPECT_EQ(s->schema_version(), PostgresStateStore::LatestSchemaVersion());
    ASSERT_TRUE(s->CreateJob(Job("kept"), NewTasks(2)).ok());
  }
  auto s = *PostgresStateStore::Open(Uri(), {});
  LoadedState l = *s->Load();
  ASSERT_EQ(l.jobs.size(), 1u);
  EXPECT_EQ(l.jobs[0].name, "kept");
  EXPECT_EQ(l.tasks.size(), 2u);
  EXPECT_EQ(l.next_job_id, 2u);
}

// Over TCP the server asks for a password: the right one opens the store; a wrong one
// is one clear error that names the server but not the password.
TEST_F(PostgresStoreTest, APasswordIsCheckedAndNeverShown) {
  auto good = PostgresStateStore::Open(Postgres()->TcpUri(db_, Postgres()->password()), {});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_TRUE((*good)->CreateJob(Job("over-tcp"), {}).ok());
  auto bad = PostgresStateStore::Open(Postgres()->TcpUri(db_, "not-the-password"), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnavailable);
  const std::string m = bad.status().message();
  EXPECT_NE(m.find("password authentication failed for user \"meridian\""), std::string::npos) << m;
  EXPECT_NE(m.find("postgresql://meridian:***@127.0.0.1:"), std::string::npos) << m;
  EXPECT_EQ(m.find("not-the-password"), std::string::npos) << m;
  EXPECT_EQ(PostgresStateStore::Redact("postgresql://u:secret@h:5432/db?sslmode=verify-full"),
            "postgresql://u:***@h:5432/db?sslmode=verify-full");
  EXPECT_EQ(PostgresStateStore::Redact("postgresql://u@h/db"), "postgresql://u@h/db");
  EXPECT_EQ(PostgresStateStore::Redact("postgresql:///db?host=/run/x"), "postgresql:///db?host=/run/x");
}

// The server ends the store's connection (a restart, a failover, an idle timeout):
// the next call connects again and works.
TEST_F(PostgresStoreTest, ALostConnectionIsMadeAgainAtTheNextCall) {
  auto s = *PostgresStateStore::Open(Uri(), {});
  const uint64_t a = *s->CreateJob(Job("before"), NewTasks(1));
  ASSERT_EQ(*Postgres()->Execute(db_, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                       "WHERE application_name = 'meridian-coordinator'"),
            "1");
  // Its server process is gone, and has said so to the store's socket.
  for (int i = 0; i < 100 && *Postgres()->Execute(db_, "SELECT count(*) FROM pg_stat_activity "
                                                       "WHERE application_name = 'meridian-coordinator'") != "0";
       ++i) {
    usleep(50'000);
  }
  const uint64_t b = *s->CreateJob(Job("after"), NewTasks(1));
  EXPECT_EQ(b, a + 1);
  EXPECT_EQ(s->Load()->jobs.size(), 2u);
}

// A batch is one transaction, however many round trips it takes: a row the server
// refuses at its end (text that is not UTF-8 where only identifiers go) leaves
// every row before it unwritten, and the error names what was refused.
TEST_F(PostgresStoreTest, ABatchThatFailsAtItsEndChangesNothing) {
  auto s = *PostgresStateStore::Open(Uri(), {});
  const uint64_t id = *s->CreateJob(Job("atomic"), NewTasks(2000));
  StoreBatch batch;
  for (uint32_t i = 0; i < 2000; ++i) {
    model::TaskRecord t = Task(i);
    t.job = id;
    t.status = model::TaskStatus::kRunning;
    t.node = i == 1999 ? std::string("n\xff") : "n";
    batch.tasks.push_back(t);
  }
  Status applied = s->Apply(batch);
  ASSERT_FALSE(applied.ok());
  EXPECT_NE(applied.message().find("invalid byte sequence for encoding \"UTF8\": 0xff"), std::string::npos)
      << applied.ToString();
  LoadedState l = *s->Load();
  ASSERT_EQ(l.tasks.size(), 2000u);
  for (const model::TaskRecord& t : l.tasks) ASSERT_EQ(t.status, model::TaskStatus::kQueued) << t.task;
  // The connection is still good for the next batch.
  batch.tasks.back().node = "n";
  ASSERT_TRUE(s->Apply(batch).ok());
  EXPECT_EQ(s->Load()->tasks[1999].status, model::TaskStatus::kRunning);
}

TEST_F(PostgresStoreTest, RefusesASchemaNewerThanItKnows) {
  { auto s = *PostgresStateStore::Open(Uri(), {}); }
  ASSERT_TRUE(Postgres()->Execute(db_, "UPDATE meridian_schema SET version = 99").ok());
  auto s = PostgresStateStore::Open(Uri(), {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find(fmt::format("has schema version 99, newer than this build's {}",
                                                 PostgresStateStore::LatestSchemaVersion())),
            std::string::npos)
      << s.status().ToString();
}

TEST_F(PostgresStoreTest, OpenStateStoreChoosesByTheStateItIsGiven) {
  auto pg = OpenStateStore(Uri(), "/nonexistent", {});
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  EXPECT_NE(dynamic_cast<PostgresStateStore*>(pg->get()), nullptr);
  auto full = OpenStateStore(Uri(), "/nonexistent", {.sync = SqliteStateStore::Sync::kFull});
  EXPECT_EQ(full.status().code(), StatusCode::kInvalidArgument);
  auto wrong = OpenStateStore("mysql://u:pw@h/db", "/nonexistent", {});
  EXPECT_EQ(wrong.status().message(),
            "--state: expected a postgresql:// URI (or no --state, for SQLite in --state-dir), got 'mysql://u:***@h/db'");
  const fs::path dir = TempDir();
  auto sqlite = OpenStateStore("", dir.string(), {});
  ASSERT_TRUE(sqlite.ok());
  EXPECT_NE(dynamic_cast<SqliteStateStore*>(sqlite->get()), nullptr);
  EXPECT_TRUE(fs::exists(dir / "state.db"));
  fs::remove_all(dir);
}

// Several coordinators on one store: one holds the lease at a time, a new holder
// gets a new epoch, and the one that lost it learns so at its next renewal.
TEST_F(PostgresStoreTest, OneCoordinatorAtATimeHoldsTheLease) {
  auto store = *PostgresStateStore::Open(Uri(), {});
  auto a = *PostgresLease::Open(Uri(), {.holder = "a", .ttl_us = 60'000'000});
  auto b = *PostgresLease::Open(Uri(), {.holder = "b", .ttl_us = 60'000'000});
  EXPECT_EQ(*a->TryAcquire(), 1);
  EXPECT_EQ(*b->TryAcquire(), 0);
  EXPECT_TRUE(a->Renew(5'000'000).ok());
  EXPECT_EQ(b->Describe()->substr(0, 29), "a (epoch 1, expires in 60.0 s");
  ASSERT_TRUE(a->Release().ok());
  EXPECT_EQ(*b->TryAcquire(), 2);
  Status renewed = a->Renew(5'000'000);
  EXPECT_EQ(renewed.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(renewed.message().substr(0, 52), "lost the lease of epoch 1: held by b (epoch 2, expir");
  EXPECT_EQ(*a->TryAcquire(), 0);
}

// A leader that lost its lease without knowing it (stalled past its time to live)
// writes nothing: its next batch is refused in its own transaction, whole.
TEST_F(PostgresStoreTest, WritesOfADeposedLeaderAreFencedOff) {
  auto old_store = *PostgresStateStore::Open(Uri(), {});
  auto old_lease = *PostgresLease::Open(Uri(), {.holder = "old", .ttl_us = 200'000});
  ASSERT_EQ(*old_lease->TryAcquire(), 1);
  old_store->SetFence(1);
  const uint64_t id = *old_store->CreateJob(Job("before"), NewTasks(2));
  usleep(400'000);  // the old leader stalls; its lease expires
  auto new_store = *PostgresStateStore::Open(Uri(), {});
  auto new_lease = *PostgresLease::Open(Uri(), {.holder = "new", .ttl_us = 60'000'000});
  ASSERT_EQ(*new_lease->TryAcquire(), 2);
  new_store->SetFence(2);

  StoreBatch late;
  model::TaskRecord t = Task(0);
  t.job = id;
  t.status = model::TaskStatus::kSucceeded;
  late.tasks.push_back(t);
  Status fenced = old_store->Apply(late);
  EXPECT_EQ(fenced.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(fenced.message().find("fenced off: this coordinator led epoch 1, and epoch 2 leads now"),
            std::string::npos)
      << fenced.ToString();
  EXPECT_EQ(old_store->CreateJob(Job("late"), {}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(old_store->DeleteJob(id).code(), StatusCode::kFailedPrecondition);
  LoadedState l = *new_store->Load();
  ASSERT_EQ(l.jobs.size(), 1u);
  EXPECT_EQ(l.tasks[0].status, model::TaskStatus::kQueued);
  // The new leader writes.
  EXPECT_TRUE(new_store->Apply(late).ok());
  EXPECT_EQ(*new_store->CreateJob(Job("next"), {}), id + 1);
}

// A server that stops answering (a partition, a hung host) cannot keep a leader
// waiting past the time it has left: the renewal gives up on time, and the next one,
// once the server answers again, goes through on a new connection.
TEST_F(PostgresStoreTest, ARenewalTheServerDoesNotAnswerGivesUpOnTime) {
  auto store = *PostgresStateStore::Open(Uri(), {});
  auto lease = *PostgresLease::Open(Uri(), {.holder = "a", .ttl_us = 60'000'000});
  ASSERT_EQ(*lease->TryAcquire(), 1);
  const std::string backend = *Postgres()->Execute(
      db_, "SELECT pid FROM pg_stat_activity WHERE application_name = 'meridian-lease'");
  ASSERT_FALSE(backend.empty());
  ASSERT_EQ(kill(std::stoi(backend), SIGSTOP), 0);
  Status hung = lease->Renew(300'000);
  kill(std::stoi(backend), SIGCONT);
  EXPECT_EQ(hung.code(), StatusCode::kUnavailable);
  EXPECT_NE(hung.message().find("renew the lease: no answer within 0.30 s"), std::string::npos) << hung.ToString();
  EXPECT_TRUE(lease->Renew(5'000'000).ok());
}

// Coordinators started together on a new database migrate it once, under the lock.
TEST_F(PostgresStoreTest, CoordinatorsStartingTogetherMigrateOnce) {
  std::vector<std::thread> threads;
  std::atomic<int> opened{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      auto s = PostgresStateStore::Open(Uri(), {});
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (s.ok() && (*s)->schema_version() == PostgresStateStore::LatestSchemaVersion()) ++opened;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(opened.load(), 4);
  EXPECT_EQ(*Postgres()->Execute(db_, "SELECT count(*) FROM meridian_schema"), "1");
  EXPECT_EQ(*Postgres()->Execute(db_, "SELECT count(*) FROM leader_lease"), "1");
}

}  // namespace
}  // namespace meridian::store
