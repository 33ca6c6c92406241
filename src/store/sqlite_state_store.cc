#include "store/sqlite_state_store.h"

#include <sqlite3.h>

#include <fmt/format.h>

#include "store/columns.h"


namespace meridian::store {
namespace {

// Each entry moves the schema one version up; never edit one that has shipped.
constexpr const char* kMigrations[] = {
    // 1: jobs and tasks.
    R"sql(
    CREATE TABLE jobs (
      id INTEGER PRIMARY KEY, name TEXT NOT NULL, tenant TEXT NOT NULL,
      spec_yaml TEXT NOT NULL, spec_name TEXT NOT NULL, status TEXT NOT NULL,
      reason TEXT NOT NULL, submitted_us INTEGER NOT NULL, finished_us INTEGER NOT NULL);
    CREATE TABLE tasks (
      job INTEGER NOT NULL, task INTEGER NOT NULL, status TEXT NOT NULL,
      attempt INTEGER NOT NULL, failures INTEGER NOT NULL, losses INTEGER NOT NULL,
      node TEXT NOT NULL, site TEXT NOT NULL, device_type TEXT NOT NULL, emulated INTEGER NOT NULL,
      cpu_milli INTEGER NOT NULL, memory_bytes INTEGER NOT NULL, devices TEXT NOT NULL,
      device_share_milli INTEGER NOT NULL, reason TEXT NOT NULL, output BLOB NOT NULL,
      started_us INTEGER NOT NULL, finished_us INTEGER NOT NULL,
      PRIMARY KEY (job, task)) WITHOUT ROWID;
    )sql",
    // 2: the history of attempts and their logs.
    R"sql(
    CREATE TABLE attempts (
      job INTEGER NOT NULL, task INTEGER NOT NULL, attempt INTEGER NOT NULL,
      node TEXT NOT NULL, site TEXT NOT NULL, outcome TEXT NOT NULL, reason TEXT NOT NULL,
      exit_code INTEGER NOT NULL, started_us INTEGER NOT NULL, ended_us INTEGER NOT NULL,
      PRIMARY KEY (job, task, attempt)) WITHOUT ROWID;
    CREATE TABLE task_logs (
      job INTEGER NOT NULL, task INTEGER NOT NULL, attempt INTEGER NOT NULL, node TEXT NOT NULL,
      stdout BLOB NOT NULL, stderr BLOB NOT NULL,
      PRIMARY KEY (job, task, attempt)) WITHOUT ROWID;
    )sql",
    // 3: names of objects, and datasets (a name with shards 0..n-1).
    R"sql(
    CREATE TABLE object_names (
      name TEXT NOT NULL, shard INTEGER NOT NULL, id TEXT NOT NULL, size INTEGER NOT NULL,
      PRIMARY KEY (name, shard)) WITHOUT ROWID;
    )sql",
    // 4: a task's output held as an object on its node.
    R"sql(
    ALTER TABLE tasks ADD COLUMN output_object TEXT NOT NULL DEFAULT '';
    )sql",
    // 5: tasks' names (a finished job is listed without its spec), and job ids that
    // outlive deleted jobs.
    R"sql(
    CREATE TABLE task_labels (
      job INTEGER NOT NULL, task INTEGER NOT NULL, name TEXT NOT NULL, result INTEGER NOT NULL,
      PRIMARY KEY (job, task)) WITHOUT ROWID;
    CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO counters SELECT 'next_job', COALESCE(MAX(id), 0) + 1 FROM jobs;
    )sql",
    // 6: API tokens, by a public id; the secret only as its SHA-256.
    R"sql(
    CREATE TABLE tokens (
      id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, user TEXT NOT NULL, tenant TEXT NOT NULL,
      role TEXT NOT NULL, created_us INTEGER NOT NULL, expires_us INTEGER NOT NULL,
      revoked INTEGER NOT NULL) WITHOUT ROWID;
    )sql",
    // 7: the tenant a name (and the objects it names) belongs to (names from before
    // tenants were known belong to none, which only admins read); what each tenant's
    // tasks cost per day, for daily budgets.
    R"sql(
    ALTER TABLE object_names ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
    CREATE TABLE tenant_spend (
      tenant TEXT NOT NULL, day INTEGER NOT NULL, micro_usd INTEGER NOT NULL,
      PRIMARY KEY (tenant, day)) WITHOUT ROWID;
    )sql",
    // 8: how many bytes each stream of a log had in all (its tails are the end), so a
    // reader following the output knows what it has seen (0: unknown, before 8).
    R"sql(
    ALTER TABLE task_logs ADD COLUMN stdout_bytes INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE task_logs ADD COLUMN stderr_bytes INTEGER NOT NULL DEFAULT 0;
    )sql",
};
constexpr int kLatest = static_cast<int>(std::size(kMigrations));

std::string Text(sqlite3_stmt* st, int col) {
  const unsigned char* p = sqlite3_column_text(st, col);
  return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(st, col)) : std::string();
}

std::string Blob(sqlite3_stmt* st, int col) {
  const void* p = sqlite3_column_blob(st, col);
  return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(st, col)) : std::string();
}

// A statement's current row, as the shared decoders read it (columns.h).
struct SqliteRow {
  sqlite3_stmt* st;
  int64_t Int(int col) const { return sqlite3_column_int64(st, col); }
  std::string Str(int col) const { return Blob(st, col); }
};

model::TaskRecord ReadTask(sqlite3_stmt* st, int col) { return TaskFromRow(SqliteRow{st}, col); }
model::AttemptRecord ReadAttempt(sqlite3_stmt* st) { return AttemptFromRow(SqliteRow{st}); }

// Binds values to ?1, ?2, ... in order.
class Binder {
 public:
  explicit Binder(sqlite3_stmt* st) : st_(st) { sqlite3_reset(st_); sqlite3_clear_bindings(st_); }
  Binder& Int(int64_t v) { sqlite3_bind_int64(st_, ++i_, v); return *this; }
  Binder& Str(const std::string& v) {
    sqlite3_bind_text(st_, ++i_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Binder& Bytes(const std::string& v) {
    sqlite3_bind_blob(st_, ++i_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  bool Done() { return sqlite3_step(st_) == SQLITE_DONE; }

 private:
  sqlite3_stmt* st_;
  int i_ = 0;
};

}  // namespace

// Statement that finalizes itself.
struct SqliteStateStore::Stmt {
  sqlite3_stmt* st = nullptr;
  ~Stmt() { sqlite3_finalize(st); }
};

int SqliteStateStore::LatestSchemaVersion() { return kLatest; }

StatusOr<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(const std::string& path, Options options) {
  std::unique_ptr<SqliteStateStore> s(new SqliteStateStore(path));
  if (sqlite3_open_v2(path.c_str(), &s->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    return s->Fail("open");
  }
  sqlite3_busy_timeout(s->db_, 5000);
  MERIDIAN_RETURN_IF_ERROR(s->Exec("PRAGMA journal_mode=WAL"));
  MERIDIAN_RETURN_IF_ERROR(
      s->Exec(options.sync == Sync::kFull ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
  MERIDIAN_RETURN_IF_ERROR(s->Exec("PRAGMA foreign_keys=ON"));
  MERIDIAN_RETURN_IF_ERROR(s->Migrate(options.max_schema_version > 0 ? options.max_schema_version : kLatest));
  MERIDIAN_RETURN_IF_ERROR(s->Prepare());
  return s;
}

SqliteStateStore::~SqliteStateStore() {
  for (sqlite3_stmt* st : {insert_job_, update_job_, put_task_, put_attempt_, put_log_, put_name_, put_label_, put_token_,
                           put_spend_, begin_, commit_, rollback_, next_job_, set_next_job_}) {
    sqlite3_finalize(st);
  }
  sqlite3_close(db_);
}

Status SqliteStateStore::Fail(const char* what) const {
  return UnavailableError(fmt::format("state store {}: {} failed: {}", path_, what,
                                      db_ ? sqlite3_errmsg(db_) : "out of memory"));
}

Status SqliteStateStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return UnavailableError(fmt::format("state store {}: {}", path_, msg));
  }
  return OkStatus();
}

Status SqliteStateStore::Step(sqlite3_stmt* st, const char* what) {
  const int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE ? OkStatus() : Fail(what);
}

Status SqliteStateStore::Begin() { return begin_ ? Step(begin_, "begin") : Exec("BEGIN IMMEDIATE"); }
Status SqliteStateStore::CommitTransaction() { return commit_ ? Step(commit_, "commit") : Exec("COMMIT"); }
void SqliteStateStore::Rollback() {
  if (rollback_) {
    Step(rollback_, "rollback").IgnoreError();
  } else {
    Rollback();
  }
}

Status SqliteStateStore::Migrate(int max_version) {
  Stmt v;
  if (sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &v.st, nullptr) != SQLITE_OK) return Fail("read version");
  if (sqlite3_step(v.st) != SQLITE_ROW) return Fail("read version");
  schema_version_ = sqlite3_column_int(v.st, 0);
  if (schema_version_ > kLatest) {
    return FailedPreconditionError(fmt::format(
        "state store {} has schema version {}, newer than this build's {}; use the Meridian that wrote it",
        path_, schema_version_, kLatest));
  }
  while (schema_version_ < max_version) {
    MERIDIAN_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status s = Exec(kMigrations[schema_version_]);
    if (s.ok()) s = Exec(fmt::format("PRAGMA user_version={}", schema_version_ + 1).c_str());
    if (!s.ok()) {
      Exec("ROLLBACK").IgnoreError();
      return s.WithPrefix(fmt::format("migrating to schema version {}", schema_version_ + 1));
    }
    MERIDIAN_RETURN_IF_ERROR(Exec("COMMIT"));
    ++schema_version_;
  }
  return OkStatus();
}

Status SqliteStateStore::Prepare() {
  if (schema_version_ < kLatest) return OkStatus();  // a partly migrated store in a test: read-only use
  struct {
    sqlite3_stmt** st;
    const char* sql;
  } statements[] = {
      {&insert_job_, "INSERT INTO jobs VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)"},
      {&update_job_, "UPDATE jobs SET status=?2, reason=?3, finished_us=?4 WHERE id=?1"},
      {&put_task_, "INSERT OR REPLACE INTO tasks VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19)"},
      {&put_attempt_, "INSERT OR REPLACE INTO attempts VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)"},
      {&put_log_, "INSERT OR REPLACE INTO task_logs VALUES (?1,?2,?3,?4,?5,?6,?7,?8)"},
      {&put_name_, "INSERT INTO object_names VALUES (?1,?2,?3,?4,?5)"},
      {&put_label_, "INSERT OR REPLACE INTO task_labels VALUES (?1,?2,?3,?4)"},
      {&put_token_, "INSERT OR REPLACE INTO tokens VALUES (?1,?2,?3,?4,?5,?6,?7,?8)"},
      {&put_spend_, "INSERT OR REPLACE INTO tenant_spend VALUES (?1,?2,?3)"},
      {&begin_, "BEGIN IMMEDIATE"},
      {&commit_, "COMMIT"},
      {&rollback_, "ROLLBACK"},
      {&next_job_, "SELECT value FROM counters WHERE name = 'next_job'"},
      {&set_next_job_, "UPDATE counters SET value = MAX(value, ?1) WHERE name = 'next_job'"},
  };
  for (auto& s : statements) {
    if (sqlite3_prepare_v3(db_, s.sql, -1, SQLITE_PREPARE_PERSISTENT, s.st, nullptr) != SQLITE_OK) {
      return Fail("prepare");
    }
  }
  return OkStatus();
}

Status SqliteStateStore::PutTask(const model::TaskRecord& t) {
  bool ok = Binder(put_task_)
                .Int(static_cast<int64_t>(t.job)).Int(t.task)
                .Str(std::string(model::TaskStatusName(t.status)))
                .Int(t.attempt).Int(t.failures).Int(t.losses)
                .Str(t.node).Str(t.site).Str(t.device_type).Int(t.emulated ? 1 : 0)
                .Int(t.allocation.cpu_milli).Int(t.allocation.memory_bytes)
                .Str(JoinDevices(t.allocation.devices)).Int(t.allocation.device_share_milli)
                .Str(t.reason).Bytes(t.output).Int(t.started_us).Int(t.finished_us).Str(t.output_object)
                .Done();
  return ok ? OkStatus() : Fail("write task");
}

Status SqliteStateStore::PutJobStatus(const model::JobRecord& j) {
  bool ok = Binder(update_job_)
                .Int(static_cast<int64_t>(j.id))
                .Str(std::string(model::JobStatusName(j.status)))
                .Str(j.reason).Int(j.finished_us)
                .Done();
  return ok ? OkStatus() : Fail("write job");
}

Status SqliteStateStore::PutAttempt(const model::AttemptRecord& a) {
  bool ok = Binder(put_attempt_)
                .Int(static_cast<int64_t>(a.job)).Int(a.task).Int(a.attempt)
                .Str(a.node).Str(a.site).Str(a.outcome).Str(a.reason)
                .Int(a.exit_code).Int(a.started_us).Int(a.ended_us)
                .Done();
  return ok ? OkStatus() : Fail("write attempt");
}

Status SqliteStateStore::PutName(const model::ObjectName& n) {
  bool ok = Binder(put_name_).Str(n.name).Int(n.shard).Str(n.object.id).Int(n.object.size).Str(n.tenant).Done();
  return ok ? OkStatus() : Fail("write an object name");
}

Status SqliteStateStore::PutLog(const model::TaskLogRecord& l) {
  bool ok = Binder(put_log_)
                .Int(static_cast<int64_t>(l.job)).Int(l.task).Int(l.attempt)
                .Str(l.node).Bytes(l.stdout_tail).Bytes(l.stderr_tail)
                .Int(l.stdout_bytes).Int(l.stderr_bytes)
                .Done();
  return ok ? OkStatus() : Fail("write log");
}

StatusOr<uint64_t> SqliteStateStore::CreateJob(model::JobRecord job, const std::vector<NewTask>& tasks) {
  std::lock_guard<std::mutex> lock(mu_);
  MERIDIAN_RETURN_IF_ERROR(Begin());
  Status s = OkStatus();
  if (job.id == 0) {
    StatusOr<uint64_t> next = NextJobId();
    s = next.status();
    if (s.ok()) job.id = *next;
  }
  if (s.ok()) s = InsertJob(job, tasks);
  if (!s.ok()) {
    Rollback();
    return s;
  }
  MERIDIAN_RETURN_IF_ERROR(CommitTransaction());
  return job.id;
}

StatusOr<uint64_t> SqliteStateStore::NextJobId() {
  Status s = OkStatus();
  uint64_t id = 0;
  if (sqlite3_step(next_job_) != SQLITE_ROW) {
    s = Fail("read the next job id");
  } else {
    id = static_cast<uint64_t>(sqlite3_column_int64(next_job_, 0));
  }
  sqlite3_reset(next_job_);
  if (!s.ok()) return s;
  return id;
}

Status SqliteStateStore::InsertJob(const model::JobRecord& job, const std::vector<NewTask>& tasks) {
  if (!Binder(set_next_job_).Int(static_cast<int64_t>(job.id + 1)).Done()) return Fail("allocate job id");
  if (!Binder(insert_job_)
           .Int(static_cast<int64_t>(job.id)).Str(job.name).Str(job.tenant)
           .Str(job.spec_yaml).Str(job.spec_name)
           .Str(std::string(model::JobStatusName(job.status)))
           .Str(job.reason).Int(job.submitted_us).Int(job.finished_us)
           .Done()) {
    return Fail("write job");
  }
  model::TaskRecord t;
  t.job = job.id;
  for (size_t i = 0; i < tasks.size(); ++i) {
    t.task = static_cast<uint32_t>(i);
    t.status = tasks[i].status;
    MERIDIAN_RETURN_IF_ERROR(PutTask(t));
    if (!Binder(put_label_)
             .Int(static_cast<int64_t>(job.id)).Int(t.task).Str(tasks[i].name).Int(tasks[i].result ? 1 : 0)
             .Done()) {
      return Fail("write task name");
    }
  }
  return OkStatus();
}

Status SqliteStateStore::Apply(const StoreBatch& batch) {
  if (batch.empty()) return OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  MERIDIAN_RETURN_IF_ERROR(Begin());
  Status s = OkStatus();
  for (size_t i = 0; s.ok() && i < batch.new_jobs.size(); ++i) {
    s = InsertJob(batch.new_jobs[i].record, batch.new_jobs[i].tasks);
  }
  for (size_t i = 0; s.ok() && i < batch.tasks.size(); ++i) s = PutTask(batch.tasks[i]);
  for (size_t i = 0; s.ok() && i < batch.jobs.size(); ++i) s = PutJobStatus(batch.jobs[i]);
  for (size_t i = 0; s.ok() && i < batch.attempts.size(); ++i) s = PutAttempt(batch.attempts[i]);
  for (size_t i = 0; s.ok() && i < batch.logs.size(); ++i) s = PutLog(batch.logs[i]);
  for (size_t i = 0; s.ok() && i < batch.names.size(); ++i) s = PutName(batch.names[i]);
  for (size_t i = 0; s.ok() && i < batch.tokens.size(); ++i) {
    const model::TokenRecord& t = batch.tokens[i];
    if (!Binder(put_token_)
             .Str(t.id).Str(t.secret_hash).Str(t.user).Str(t.tenant).Str(std::string(model::RoleName(t.role)))
             .Int(t.created_us).Int(t.expires_us).Int(t.revoked ? 1 : 0)
             .Done()) {
      s = Fail("write token");
    }
  }
  for (size_t i = 0; s.ok() && i < batch.spend.size(); ++i) {
    const model::TenantSpend& t = batch.spend[i];
    if (!Binder(put_spend_).Str(t.tenant).Int(t.day).Int(t.micro_usd).Done()) s = Fail("write tenant spend");
  }
  if (!s.ok()) {
    Rollback();
    return s;
  }
  return CommitTransaction();
}

Status SqliteStateStore::Query(Stmt& stmt, const std::string& sql, const char* what) {
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt.st, nullptr) != SQLITE_OK) return Fail(what);
  return OkStatus();
}

StatusOr<LoadedState> SqliteStateStore::Load() {
  std::lock_guard<std::mutex> lock(mu_);
  LoadedState out;
  Stmt jobs;
  MERIDIAN_RETURN_IF_ERROR(Query(jobs, "SELECT * FROM jobs ORDER BY id", "read jobs"));
  while (sqlite3_step(jobs.st) == SQLITE_ROW) {
    model::JobRecord j;
    j.id = static_cast<uint64_t>(sqlite3_column_int64(jobs.st, 0));
    j.name = Text(jobs.st, 1);
    j.tenant = Text(jobs.st, 2);
    j.spec_yaml = Text(jobs.st, 3);
    j.spec_name = Text(jobs.st, 4);
    j.status = model::ParseJobStatus(Text(jobs.st, 5)).value_or(model::JobStatus::kFailed);
    j.reason = Text(jobs.st, 6);
    j.submitted_us = sqlite3_column_int64(jobs.st, 7);
    j.finished_us = sqlite3_column_int64(jobs.st, 8);
    out.jobs.push_back(std::move(j));
  }
  Stmt tasks;
  MERIDIAN_RETURN_IF_ERROR(Query(tasks,
                                 fmt::format("SELECT t.* FROM tasks t JOIN jobs j ON j.id = t.job "
                                             "WHERE j.status IN {} ORDER BY t.job, t.task",
                                             kUnfinishedStatuses),
                                 "read tasks"));
  while (sqlite3_step(tasks.st) == SQLITE_ROW) out.tasks.push_back(ReadTask(tasks.st, 0));
  Stmt attempts;
  MERIDIAN_RETURN_IF_ERROR(Query(attempts,
                                 fmt::format("SELECT a.* FROM attempts a JOIN jobs j ON j.id = a.job "
                                             "WHERE j.status IN {} ORDER BY a.job, a.task, a.attempt",
                                             kUnfinishedStatuses),
                                 "read attempts"));
  while (sqlite3_step(attempts.st) == SQLITE_ROW) out.attempts.push_back(ReadAttempt(attempts.st));
  Stmt counts;
  MERIDIAN_RETURN_IF_ERROR(Query(counts,
                                 fmt::format("SELECT t.job, t.status, COUNT(*), SUM(MAX(t.attempt - 1, 0)) "
                                             "FROM tasks t JOIN jobs j ON j.id = t.job "
                                             "WHERE j.status NOT IN {} GROUP BY t.job, t.status",
                                             kUnfinishedStatuses),
                                 "count finished jobs' tasks"));
  while (sqlite3_step(counts.st) == SQLITE_ROW) {
    model::JobSummary& c = out.finished_counts[static_cast<uint64_t>(sqlite3_column_int64(counts.st, 0))];
    model::CountTasks(c, model::ParseTaskStatus(Text(counts.st, 1)).value_or(model::TaskStatus::kFailed),
                      sqlite3_column_int(counts.st, 2));
    c.retries += sqlite3_column_int(counts.st, 3);
  }
  Stmt names;
  MERIDIAN_RETURN_IF_ERROR(Query(names, "SELECT * FROM object_names ORDER BY name, shard", "read object names"));
  while (sqlite3_step(names.st) == SQLITE_ROW) {
    sqlite3_stmt* st = names.st;
    out.names.push_back(model::ObjectName{Text(st, 0), sqlite3_column_int(st, 1),
                                          model::HeldObject{Text(st, 2), sqlite3_column_int64(st, 3)}, Text(st, 4)});
  }
  Stmt tokens;
  MERIDIAN_RETURN_IF_ERROR(Query(tokens, "SELECT * FROM tokens ORDER BY id", "read tokens"));
  while (sqlite3_step(tokens.st) == SQLITE_ROW) {
    sqlite3_stmt* st = tokens.st;
    model::TokenRecord t;
    t.id = Text(st, 0);
    t.secret_hash = Text(st, 1);
    t.user = Text(st, 2);
    t.tenant = Text(st, 3);
    // A role this build does not know grants nothing more than viewing.
    t.role = model::ParseRole(Text(st, 4)).value_or(model::Role::kViewer);
    t.created_us = sqlite3_column_int64(st, 5);
    t.expires_us = sqlite3_column_int64(st, 6);
    t.revoked = sqlite3_column_int(st, 7) != 0;
    out.tokens.push_back(std::move(t));
  }
  Stmt spend;
  MERIDIAN_RETURN_IF_ERROR(Query(spend, "SELECT * FROM tenant_spend ORDER BY tenant, day", "read tenant spend"));
  while (sqlite3_step(spend.st) == SQLITE_ROW) {
    out.spend.push_back(model::TenantSpend{Text(spend.st, 0), sqlite3_column_int64(spend.st, 1),
                                           sqlite3_column_int64(spend.st, 2)});
  }
  MERIDIAN_ASSIGN_OR_RETURN(out.next_job_id, NextJobId());
  return out;
}

StatusOr<std::vector<model::TaskLog>> SqliteStateStore::Logs(uint64_t job, std::optional<uint32_t> task,
                                                             uint32_t first_task, int32_t first_attempt,
                                                             uint32_t limit, int64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<model::TaskLog> out;
  if (limit == 0) return out;
  Stmt q;
  MERIDIAN_RETURN_IF_ERROR(
      Query(q,
            fmt::format("SELECT l.job, l.task, l.attempt, l.node, l.stdout, l.stderr, COALESCE(n.name, ''), "
                        "l.stdout_bytes, l.stderr_bytes FROM task_logs l "
                        "LEFT JOIN task_labels n ON n.job = l.job AND n.task = l.task "
                        "WHERE l.job = ?1 AND (l.task > ?3 OR (l.task = ?3 AND l.attempt >= ?4)) {} "
                        "ORDER BY l.task, l.attempt",
                        task ? "AND l.task = ?2" : ""),
            "read logs"));
  sqlite3_bind_int64(q.st, 1, static_cast<int64_t>(job));
  if (task) sqlite3_bind_int64(q.st, 2, *task);
  sqlite3_bind_int64(q.st, 3, first_task);
  sqlite3_bind_int64(q.st, 4, first_attempt);
  // Rows are read one at a time: those past the page's bounds are never read.
  int64_t bytes = 0;
  while (out.size() < limit && bytes < max_bytes && sqlite3_step(q.st) == SQLITE_ROW) {
    model::TaskLog& l = out.emplace_back(model::TaskLog{
        Text(q.st, 6), model::TaskLogRecord{static_cast<uint64_t>(sqlite3_column_int64(q.st, 0)),
                                            static_cast<uint32_t>(sqlite3_column_int64(q.st, 1)),
                                            sqlite3_column_int(q.st, 2), Text(q.st, 3), Blob(q.st, 4), Blob(q.st, 5),
                                            sqlite3_column_int64(q.st, 7), sqlite3_column_int64(q.st, 8)}});
    bytes += static_cast<int64_t>(l.record.stdout_tail.size() + l.record.stderr_tail.size());
  }
  return out;
}

StatusOr<std::vector<model::TaskView>> SqliteStateStore::TaskPage(uint64_t job, uint32_t first, uint32_t limit,
                                                                  int64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<model::TaskView> out;
  if (limit == 0) return out;
  // One read transaction: the tasks and their attempts as of the same commit.
  MERIDIAN_RETURN_IF_ERROR(Exec("BEGIN"));
  Status s = OkStatus();
  {
    Stmt q;
    s = Query(q,
              "SELECT t.*, COALESCE(l.name, ''), COALESCE(l.result, 0) FROM tasks t "
              "LEFT JOIN task_labels l ON l.job = t.job AND l.task = t.task "
              "WHERE t.job = ?1 AND t.task >= ?2 ORDER BY t.task LIMIT ?3",
              "read tasks");
    if (s.ok()) {
      sqlite3_bind_int64(q.st, 1, static_cast<int64_t>(job));
      sqlite3_bind_int64(q.st, 2, first);
      sqlite3_bind_int64(q.st, 3, limit);
      int64_t bytes = 0;
      while (bytes < max_bytes && sqlite3_step(q.st) == SQLITE_ROW) {
        model::TaskView v;
        v.record = ReadTask(q.st, 0);
        v.name = Text(q.st, 19);
        v.result = sqlite3_column_int(q.st, 20) != 0;
        bytes += static_cast<int64_t>(v.record.output.size() + v.record.reason.size() + v.name.size());
        out.push_back(std::move(v));
      }
    }
  }
  if (s.ok() && !out.empty()) {
    Stmt a;
    s = Query(a, "SELECT * FROM attempts WHERE job = ?1 AND task BETWEEN ?2 AND ?3 ORDER BY task, attempt",
              "read attempts");
    if (s.ok()) {
      sqlite3_bind_int64(a.st, 1, static_cast<int64_t>(job));
      sqlite3_bind_int64(a.st, 2, out.front().record.task);
      sqlite3_bind_int64(a.st, 3, out.back().record.task);
      size_t i = 0;
      while (sqlite3_step(a.st) == SQLITE_ROW) {
        model::AttemptRecord r = ReadAttempt(a.st);
        while (i < out.size() && out[i].record.task < r.task) ++i;
        if (i < out.size() && out[i].record.task == r.task) out[i].history.push_back(std::move(r));
      }
    }
  }
  Exec("COMMIT").IgnoreError();
  if (!s.ok()) return s;
  return out;
}

StatusOr<std::optional<uint32_t>> SqliteStateStore::FindTask(uint64_t job, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q;
  MERIDIAN_RETURN_IF_ERROR(Query(q, "SELECT task FROM task_labels WHERE job = ?1 AND name = ?2", "find a task"));
  sqlite3_bind_int64(q.st, 1, static_cast<int64_t>(job));
  sqlite3_bind_text(q.st, 2, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(q.st) != SQLITE_ROW) return std::optional<uint32_t>();
  return std::optional<uint32_t>(static_cast<uint32_t>(sqlite3_column_int64(q.st, 0)));
}

StatusOr<std::pair<std::string, std::string>> SqliteStateStore::JobSpec(uint64_t job) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q;
  MERIDIAN_RETURN_IF_ERROR(Query(q, "SELECT spec_yaml, spec_name FROM jobs WHERE id = ?1", "read a job's spec"));
  sqlite3_bind_int64(q.st, 1, static_cast<int64_t>(job));
  if (sqlite3_step(q.st) != SQLITE_ROW) return NotFoundError(fmt::format("no job {}", job));
  auto text = [&](int col) {
    const unsigned char* p = sqlite3_column_text(q.st, col);
    return std::string(p ? reinterpret_cast<const char*>(p) : "", static_cast<size_t>(sqlite3_column_bytes(q.st, col)));
  };
  return std::make_pair(text(0), text(1));
}

Status SqliteStateStore::DeleteJob(uint64_t job) {
  std::lock_guard<std::mutex> lock(mu_);
  MERIDIAN_RETURN_IF_ERROR(Begin());
  Status s = OkStatus();
  for (const char* table : {"task_logs", "attempts", "task_labels", "tasks"}) {
    if (s.ok()) s = Exec(fmt::format("DELETE FROM {} WHERE job = {}", table, job).c_str());
  }
  if (s.ok()) s = Exec(fmt::format("DELETE FROM jobs WHERE id = {}", job).c_str());
  if (!s.ok()) {
    Rollback();
    return s;
  }
  return CommitTransaction();
}

}  // namespace meridian::store
