#include "store/postgres_state_store.h"

#include <endian.h>
#include <libpq-fe.h>
#include <poll.h>

#include <cstring>

#include <fmt/format.h>

#include "store/columns.h"

#include "store/postgres_connection.h"

namespace meridian::store {
namespace {

// Each entry moves the schema one version up; never edit one that has shipped.
// Every integer is a BIGINT (one binary decoding); what a user wrote (specs, names,
// reasons, output, logs) is BYTEA, kept byte for byte as SQLite keeps it; TEXT holds
// only identifiers that Meridian checked.
constexpr const char* kMigrations[] = {
    // 1: the SQLite store's schema 8, in one step.
    R"sql(
    CREATE TABLE jobs (
      id BIGINT PRIMARY KEY, name BYTEA NOT NULL, tenant TEXT NOT NULL,
      spec_yaml BYTEA NOT NULL, spec_name BYTEA NOT NULL, status TEXT NOT NULL,
      reason BYTEA NOT NULL, submitted_us BIGINT NOT NULL, finished_us BIGINT NOT NULL);
    CREATE TABLE tasks (
      job BIGINT NOT NULL, task BIGINT NOT NULL, status TEXT NOT NULL,
      attempt BIGINT NOT NULL, failures BIGINT NOT NULL, losses BIGINT NOT NULL,
      node TEXT NOT NULL, site TEXT NOT NULL, device_type TEXT NOT NULL, emulated BIGINT NOT NULL,
      cpu_milli BIGINT NOT NULL, memory_bytes BIGINT NOT NULL, devices TEXT NOT NULL,
      device_share_milli BIGINT NOT NULL, reason BYTEA NOT NULL, output BYTEA NOT NULL,
      started_us BIGINT NOT NULL, finished_us BIGINT NOT NULL, output_object TEXT NOT NULL,
      PRIMARY KEY (job, task));
    CREATE TABLE attempts (
      job BIGINT NOT NULL, task BIGINT NOT NULL, attempt BIGINT NOT NULL,
      node TEXT NOT NULL, site TEXT NOT NULL, outcome TEXT NOT NULL, reason BYTEA NOT NULL,
      exit_code BIGINT NOT NULL, started_us BIGINT NOT NULL, ended_us BIGINT NOT NULL,
      PRIMARY KEY (job, task, attempt));
    CREATE TABLE task_logs (
      job BIGINT NOT NULL, task BIGINT NOT NULL, attempt BIGINT NOT NULL, node TEXT NOT NULL,
      stdout BYTEA NOT NULL, stderr BYTEA NOT NULL, stdout_bytes BIGINT NOT NULL, stderr_bytes BIGINT NOT NULL,
      PRIMARY KEY (job, task, attempt));
    CREATE TABLE object_names (
      name TEXT NOT NULL, shard BIGINT NOT NULL, id TEXT NOT NULL, size BIGINT NOT NULL, tenant TEXT NOT NULL,
      PRIMARY KEY (name, shard));
    CREATE TABLE task_labels (
      job BIGINT NOT NULL, task BIGINT NOT NULL, name BYTEA NOT NULL, result BIGINT NOT NULL,
      PRIMARY KEY (job, task));
    CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
    INSERT INTO counters VALUES ('next_job', 1);
    CREATE TABLE tokens (
      id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, username TEXT NOT NULL, tenant TEXT NOT NULL,
      role TEXT NOT NULL, created_us BIGINT NOT NULL, expires_us BIGINT NOT NULL, revoked BIGINT NOT NULL);
    CREATE TABLE tenant_spend (
      tenant TEXT NOT NULL, day BIGINT NOT NULL, micro_usd BIGINT NOT NULL,
      PRIMARY KEY (tenant, day));
    )sql",
    // 2: who leads (PostgresLease): one row, whose epoch is the fencing token that
    // every write of a leader checks in its own transaction (meridian_fence). The
    // check holds the row for the transaction, so a standby's takeover waits for a
    // write in flight, and every write after the takeover fails.
    R"sql(
    CREATE TABLE leader_lease (
      id BIGINT PRIMARY KEY, holder TEXT NOT NULL, epoch BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL);
    INSERT INTO leader_lease VALUES (1, '', 0, '-infinity');
    CREATE FUNCTION meridian_fence(mine BIGINT) RETURNS BIGINT LANGUAGE plpgsql AS $fn$
    DECLARE current BIGINT;
    BEGIN
      SELECT epoch INTO current FROM leader_lease WHERE id = 1 FOR SHARE;
      IF current IS DISTINCT FROM mine THEN
        RAISE EXCEPTION 'fenced off: this coordinator led epoch %, and epoch % leads now', mine, current
          USING ERRCODE = 'MF001';
      END IF;
      RETURN current;
    END $fn$;
    )sql",
};
// The SQLSTATE of meridian_fence's refusal.
constexpr const char* kFencedOff = "MF001";
constexpr int kLatest = static_cast<int>(std::size(kMigrations));
// Taken while migrating, so that coordinators starting together migrate once.
constexpr int64_t kMigrationLock = 0x4d6572696469616e;  // "Meridian"
// A pipeline syncs every this many statements, so that neither side's buffers fill
// with what the other has not read yet.
constexpr size_t kPipelineChunk = 512;

// "INSERT ... ON CONFLICT (the first `keys` columns) DO UPDATE SET the rest".
std::string Upsert(const char* table, std::initializer_list<const char*> columns, size_t keys) {
  std::string cols, values, key_cols, sets;
  size_t i = 0;
  for (const char* c : columns) {
    ++i;
    cols += fmt::format("{}{}", i > 1 ? "," : "", c);
    values += fmt::format("{}${}", i > 1 ? "," : "", i);
    if (i <= keys) {
      key_cols += fmt::format("{}{}", i > 1 ? "," : "", c);
    } else {
      sets += fmt::format("{}{}=EXCLUDED.{}", sets.empty() ? "" : ",", c, c);
    }
  }
  return fmt::format("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}", table, cols, values,
                     key_cols, sets);
}

constexpr const char* kTaskColumns[] = {"job", "task", "status", "attempt", "failures", "losses", "node", "site",
                                        "device_type", "emulated", "cpu_milli", "memory_bytes", "devices",
                                        "device_share_milli", "reason", "output", "started_us", "finished_us",
                                        "output_object"};

enum Statement {
  kInsertJob, kUpdateJob, kPutTask, kPutAttempt, kPutLog, kPutName, kPutLabel, kPutToken, kPutSpend,
  kNextJob, kTakeNextJob, kSetNextJob,
  kDeleteLogs, kDeleteAttempts, kDeleteLabels, kDeleteTasks, kDeleteJob,
  kJobs, kUnfinishedTasks, kUnfinishedAttempts, kFinishedCounts, kNames, kTokens, kSpend,
  kLogsOfJob, kLogsOfTask, kTaskPage, kPageAttempts, kFindTask, kJobSpec, kFence,
  kStatementCount
};

std::string TaskUpsert() {
  std::string cols, values, sets;
  for (size_t i = 0; i < std::size(kTaskColumns); ++i) {
    cols += fmt::format("{}{}", i ? "," : "", kTaskColumns[i]);
    values += fmt::format("{}${}", i ? "," : "", i + 1);
    if (i >= 2) sets += fmt::format("{}{}=EXCLUDED.{}", i > 2 ? "," : "", kTaskColumns[i], kTaskColumns[i]);
  }
  return fmt::format("INSERT INTO tasks ({}) VALUES ({}) ON CONFLICT (job, task) DO UPDATE SET {}", cols, values,
                     sets);
}

std::vector<std::string> StatementTexts() {
  std::vector<std::string> s(kStatementCount);
  s[kInsertJob] = "INSERT INTO jobs VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)";
  s[kUpdateJob] = "UPDATE jobs SET status=$2, reason=$3, finished_us=$4 WHERE id=$1";
  s[kPutTask] = TaskUpsert();
  s[kPutAttempt] = Upsert("attempts", {"job", "task", "attempt", "node", "site", "outcome", "reason", "exit_code",
                                       "started_us", "ended_us"}, 3);
  s[kPutLog] = Upsert("task_logs", {"job", "task", "attempt", "node", "stdout", "stderr", "stdout_bytes",
                                    "stderr_bytes"}, 3);
  s[kPutName] = "INSERT INTO object_names VALUES ($1,$2,$3,$4,$5)";
  s[kPutLabel] = Upsert("task_labels", {"job", "task", "name", "result"}, 2);
  s[kPutToken] = Upsert("tokens", {"id", "secret_hash", "username", "tenant", "role", "created_us", "expires_us",
                                   "revoked"}, 1);
  s[kPutSpend] = Upsert("tenant_spend", {"tenant", "day", "micro_usd"}, 2);
  s[kNextJob] = "SELECT value FROM counters WHERE name = 'next_job'";
  // The row stays locked to the transaction: job ids are given out one at a time.
  s[kTakeNextJob] = "UPDATE counters SET value = value WHERE name = 'next_job' RETURNING value";
  s[kSetNextJob] = "UPDATE counters SET value = GREATEST(value, $1) WHERE name = 'next_job'";
  s[kDeleteLogs] = "DELETE FROM task_logs WHERE job = $1";
  s[kDeleteAttempts] = "DELETE FROM attempts WHERE job = $1";
  s[kDeleteLabels] = "DELETE FROM task_labels WHERE job = $1";
  s[kDeleteTasks] = "DELETE FROM tasks WHERE job = $1";
  s[kDeleteJob] = "DELETE FROM jobs WHERE id = $1";
  s[kJobs] = "SELECT * FROM jobs ORDER BY id";
  s[kUnfinishedTasks] = fmt::format(
      "SELECT t.* FROM tasks t JOIN jobs j ON j.id = t.job WHERE j.status IN {} ORDER BY t.job, t.task",
      kUnfinishedStatuses);
  s[kUnfinishedAttempts] = fmt::format(
      "SELECT a.* FROM attempts a JOIN jobs j ON j.id = a.job WHERE j.status IN {} "
      "ORDER BY a.job, a.task, a.attempt",
      kUnfinishedStatuses);
  s[kFinishedCounts] = fmt::format(
      "SELECT t.job, t.status, COUNT(*), SUM(GREATEST(t.attempt - 1, 0))::BIGINT "
      "FROM tasks t JOIN jobs j ON j.id = t.job WHERE j.status NOT IN {} GROUP BY t.job, t.status",
      kUnfinishedStatuses);
  // Byte order, as SQLite sorts, whatever the database's collation.
  s[kNames] = "SELECT * FROM object_names ORDER BY name COLLATE \"C\", shard";
  s[kTokens] = "SELECT * FROM tokens ORDER BY id COLLATE \"C\"";
  s[kSpend] = "SELECT * FROM tenant_spend ORDER BY tenant COLLATE \"C\", day";
  // Up to $4 logs from ($2, $3) on, stopping once the tails of those before reach $5:
  // as a task page, bounded by the server, and rows past it are never detoasted.
  const char* logs =
      "SELECT * FROM (SELECT p.*, COALESCE(SUM(octet_length(p.stdout) + octet_length(p.stderr)) OVER (ORDER BY "
      "p.task, p.attempt ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS bytes_before FROM (SELECT l.job, "
      "l.task, l.attempt, l.node, l.stdout, l.stderr, COALESCE(n.name, ''::BYTEA) AS label, l.stdout_bytes, "
      "l.stderr_bytes FROM task_logs l LEFT JOIN task_labels n ON n.job = l.job AND n.task = l.task "
      "WHERE l.job = $1 AND (l.task > $2 OR (l.task = $2 AND l.attempt >= $3)) {} ORDER BY l.task, l.attempt "
      "LIMIT $4) p) q WHERE q.bytes_before < $5 ORDER BY q.task, q.attempt";
  s[kLogsOfJob] = fmt::format(fmt::runtime(logs), "");
  s[kLogsOfTask] = fmt::format(fmt::runtime(logs), "AND l.task = $6");
  // Up to $3 tasks from $2 on, stopping (after at least one) once the bytes of
  // those before pass $4: bounded by the server, not after the rows arrived.
  s[kTaskPage] =
      "SELECT * FROM (SELECT p.*, COALESCE(SUM(octet_length(p.output) + octet_length(p.reason) + "
      "octet_length(p.label)) OVER (ORDER BY p.task ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) "
      "AS bytes_before FROM (SELECT t.*, COALESCE(l.name, ''::BYTEA) AS label, COALESCE(l.result, 0) AS is_result "
      "FROM tasks t LEFT JOIN task_labels l ON l.job = t.job AND l.task = t.task "
      "WHERE t.job = $1 AND t.task >= $2 ORDER BY t.task LIMIT $3) p) q WHERE q.bytes_before < $4 ORDER BY q.task";
  s[kPageAttempts] = "SELECT * FROM attempts WHERE job = $1 AND task BETWEEN $2 AND $3 ORDER BY task, attempt";
  s[kFindTask] = "SELECT task FROM task_labels WHERE job = $1 AND name = $2";
  s[kJobSpec] = "SELECT spec_yaml, spec_name FROM jobs WHERE id = $1";
  s[kFence] = "SELECT meridian_fence($1)";
  return s;
}

// Whether a connection with nothing in flight has something to read: the server's
// notice that it ends the session, or the end itself. Either way it is not to be used.
bool IdleConnectionEnded(PGconn* conn) {
  pollfd p{PQsocket(conn), POLLIN, 0};
  return poll(&p, 1, 0) != 0;
}

}  // namespace

// A result that clears itself, read in binary.
class PostgresStateStore::Result {
 public:
  explicit Result(PGresult* r) : r_(r) {}
  Result(Result&& o) noexcept : r_(o.r_) { o.r_ = nullptr; }
  Result& operator=(Result&&) = delete;
  ~Result() { PQclear(r_); }
  PGresult* get() const { return r_; }
  int rows() const { return PQntuples(r_); }
  int64_t Int(int row, int col) const {
    const char* p = PQgetvalue(r_, row, col);
    switch (PQgetlength(r_, row, col)) {
      case 8: { uint64_t v; std::memcpy(&v, p, 8); return static_cast<int64_t>(be64toh(v)); }
      case 4: { uint32_t v; std::memcpy(&v, p, 4); return static_cast<int32_t>(be32toh(v)); }
      case 2: { uint16_t v; std::memcpy(&v, p, 2); return static_cast<int16_t>(be16toh(v)); }
      default: return 0;  // NULL
    }
  }
  std::string Str(int row, int col) const {
    return std::string(PQgetvalue(r_, row, col), static_cast<size_t>(PQgetlength(r_, row, col)));
  }
  // Row `row`, as the shared decoders read it (columns.h).
  struct Row {
    const Result& r;
    int row;
    int64_t Int(int col) const { return r.Int(row, col); }
    std::string Str(int col) const { return r.Str(row, col); }
  };
  model::TaskRecord Task(int row, int col) const { return TaskFromRow(Row{*this, row}, col); }
  model::AttemptRecord Attempt(int row) const { return AttemptFromRow(Row{*this, row}); }

 private:
  PGresult* r_;
};

PostgresStateStore::Params& PostgresStateStore::Params::Int(int64_t v) {
  const uint64_t be = htobe64(static_cast<uint64_t>(v));
  values_.emplace_back(reinterpret_cast<const char*>(&be), 8);
  lengths_.push_back(8);
  formats_.push_back(1);
  return *this;
}

PostgresStateStore::Params& PostgresStateStore::Params::Str(const std::string& v) {
  values_.push_back(v);
  lengths_.push_back(static_cast<int>(v.size()));
  formats_.push_back(1);
  return *this;
}

std::vector<const char*> PostgresStateStore::Params::values() const {
  std::vector<const char*> out;
  out.reserve(values_.size());
  for (const std::string& v : values_) out.push_back(v.data());
  return out;
}

int PostgresStateStore::LatestSchemaVersion() { return kLatest; }

bool PostgresStateStore::IsUri(const std::string& state) {
  return state.rfind("postgresql://", 0) == 0 || state.rfind("postgres://", 0) == 0;
}

std::string PostgresStateStore::Redact(const std::string& uri) {
  const size_t scheme = uri.find("://");
  if (scheme == std::string::npos) return uri;
  const size_t start = scheme + 3;
  const size_t at = uri.find('@', start);
  const size_t slash = uri.find('/', start);
  if (at == std::string::npos || (slash != std::string::npos && slash < at)) return uri;
  const size_t colon = uri.find(':', start);
  if (colon == std::string::npos || colon > at) return uri;
  return uri.substr(0, colon + 1) + "***" + uri.substr(at);
}

StatusOr<std::unique_ptr<PostgresStateStore>> PostgresStateStore::Open(const std::string& uri, Options options) {
  std::unique_ptr<PostgresStateStore> s(
      new PostgresStateStore(uri, options.max_schema_version > 0 ? options.max_schema_version : kLatest));
  std::lock_guard<std::mutex> lock(s->mu_);
  MERIDIAN_RETURN_IF_ERROR(s->EnsureConnected());
  return s;
}

PostgresStateStore::~PostgresStateStore() { PQfinish(conn_); }

Status PostgresStateStore::Error(const std::string& what) const {
  return UnavailableError(
      fmt::format("state store {}: {}: {}", shown_, what, PostgresMessage(conn_ ? PQerrorMessage(conn_) : "out of memory")));
}

Status PostgresStateStore::EnsureConnected() {
  // A connection the server ended since the last call (a restart, a failover, an idle
  // timeout) is made anew before anything is sent on it. One lost during a call fails
  // that call.
  if (conn_ != nullptr && prepared_ && PQstatus(conn_) == CONNECTION_OK && !IdleConnectionEnded(conn_)) {
    return OkStatus();
  }
  prepared_ = false;
  if (conn_ == nullptr) {
    conn_ = ConnectPostgres(uri_, "meridian-coordinator");
  } else {
    PQreset(conn_);
  }
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) return Error("connect");
  MERIDIAN_RETURN_IF_ERROR(Migrate());
  MERIDIAN_RETURN_IF_ERROR(Prepare());
  prepared_ = true;
  return OkStatus();
}

StatusOr<PostgresStateStore::Result> PostgresStateStore::Exec(const std::string& sql, const char* what) {
  Result r(PQexecParams(conn_, sql.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 1));
  const ExecStatusType st = PQresultStatus(r.get());
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return Error(what);
  return r;
}

StatusOr<PostgresStateStore::Result> PostgresStateStore::Run(int statement, const Params& params, const char* what) {
  std::vector<const char*> values = params.values();
  Result r(PQexecPrepared(conn_, fmt::format("m{}", statement).c_str(), params.size(), values.data(),
                          params.lengths(), params.formats(), 1));
  const ExecStatusType st = PQresultStatus(r.get());
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return Error(what);
  return r;
}

Status PostgresStateStore::Migrate() {
  // One transaction under an advisory lock: coordinators starting together migrate once.
  MERIDIAN_RETURN_IF_ERROR(Exec("BEGIN", "migrate").status());
  auto fail = [&](Status s) {
    Exec("ROLLBACK", "roll back").status().IgnoreError();
    return s;
  };
  auto step = [&](const std::string& sql) { return Exec(sql, "migrate").status(); };
  if (Status s = step(fmt::format("SELECT pg_advisory_xact_lock({})", kMigrationLock)); !s.ok()) return fail(s);
  if (Status s = step("CREATE TABLE IF NOT EXISTS meridian_schema (version BIGINT NOT NULL)"); !s.ok()) return fail(s);
  StatusOr<Result> v = Exec("SELECT version FROM meridian_schema", "read the schema version");
  if (!v.ok()) return fail(v.status());
  if (v->rows() == 0) {
    if (Status s = step("INSERT INTO meridian_schema VALUES (0)"); !s.ok()) return fail(s);
    schema_version_ = 0;
  } else {
    schema_version_ = static_cast<int>(v->Int(0, 0));
  }
  if (schema_version_ > kLatest) {
    return fail(FailedPreconditionError(fmt::format(
        "state store {} has schema version {}, newer than this build's {}; use the Meridian that wrote it", shown_,
        schema_version_, kLatest)));
  }
  int version = schema_version_;
  while (version < max_version_) {
    // Several statements in one text: the simple protocol.
    Result applied(PQexec(conn_, kMigrations[version]));
    if (PQresultStatus(applied.get()) != PGRES_COMMAND_OK) {
      Status s = Error("migrate");
      return fail(s.WithPrefix(fmt::format("migrating to schema version {}", version + 1)));
    }
    ++version;
    if (Status s = step(fmt::format("UPDATE meridian_schema SET version = {}", version)); !s.ok()) return fail(s);
  }
  MERIDIAN_RETURN_IF_ERROR(Exec("COMMIT", "migrate").status());
  schema_version_ = version;
  return OkStatus();
}

Status PostgresStateStore::Prepare() {
  if (schema_version_ < kLatest) return OkStatus();  // a partly migrated store in a test: no statements
  const std::vector<std::string> texts = StatementTexts();
  for (size_t i = 0; i < texts.size(); ++i) {
    Result r(PQprepare(conn_, fmt::format("m{}", i).c_str(), texts[i].c_str(), 0, nullptr));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) return Error(fmt::format("prepare statement {}", i));
  }
  return OkStatus();
}

Status PostgresStateStore::RunPipeline(const std::vector<Step>& steps, const char* what) {
  const bool own_transaction = PQtransactionStatus(conn_) == PQTRANS_IDLE;
  if (PQenterPipelineMode(conn_) != 1) return Error(what);
  Status first_error = OkStatus();
  // A failure of the connection, not of a statement: it is made anew next call.
  auto note = [&](const std::string& where) {
    if (first_error.ok()) first_error = Error(where);
    prepared_ = false;
  };
  // Queue one statement: SQL text without parameters, or a prepared one.
  auto send_text = [&](const char* sql) {
    return PQsendQueryParams(conn_, sql, 0, nullptr, nullptr, nullptr, nullptr, 1) == 1;
  };
  auto send = [&](int statement, const Params& p) {
    std::vector<const char*> values = p.values();
    return PQsendQueryPrepared(conn_, fmt::format("m{}", statement).c_str(), p.size(), values.data(), p.lengths(),
                               p.formats(), 1) == 1;
  };
  // One chunk: statements sent, a sync, every result read back.
  auto run_chunk = [&](size_t from, size_t to, bool begin, bool commit) {
    size_t sent = 0;
    if (begin) {
      if (!send_text("BEGIN")) return note(what);
      ++sent;
    }
    if (from == 0 && fence_epoch_ > 0) {
      if (!send(kFence, Params().Int(fence_epoch_))) return note(what);
      ++sent;
    }
    for (size_t i = from; i < to; ++i) {
      if (!send(steps[i].statement, steps[i].params)) return note(what);
      ++sent;
    }
    if (commit) {
      if (!send_text("COMMIT")) return note(what);
      ++sent;
    }
    if (PQpipelineSync(conn_) != 1) return note(what);
    for (size_t i = 0; i < sent; ++i) {
      while (PGresult* r = PQgetResult(conn_)) {
        Result owned(r);
        const ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_FATAL_ERROR) {
          if (first_error.ok()) {
            const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            std::string m = fmt::format("state store {}: {}: {}", shown_, what, PostgresMessage(PQresultErrorMessage(r)));
            first_error = state != nullptr && std::string(state) == kFencedOff ? FailedPreconditionError(m)
                                                                               : UnavailableError(m);
          }
        } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_PIPELINE_ABORTED) {
          note(what);
        }
      }
    }
    Result sync(PQgetResult(conn_));
    if (PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) note(what);
  };
  for (size_t from = 0; first_error.ok() && from <= steps.size(); from += kPipelineChunk) {
    const size_t to = std::min(steps.size(), from + kPipelineChunk);
    run_chunk(from, to, own_transaction && from == 0, own_transaction && to == steps.size());
    if (to == steps.size()) break;
  }
  if (PQexitPipelineMode(conn_) != 1) note(what);
  if (PQtransactionStatus(conn_) != PQTRANS_IDLE && (own_transaction || !first_error.ok())) {
    Exec("ROLLBACK", "roll back").status().IgnoreError();
  }
  return first_error;
}

void PostgresStateStore::AddTask(std::vector<Step>& steps, const model::TaskRecord& t) const {
  Params p;
  p.Int(static_cast<int64_t>(t.job)).Int(t.task).Str(std::string(model::TaskStatusName(t.status)))
      .Int(t.attempt).Int(t.failures).Int(t.losses)
      .Str(t.node).Str(t.site).Str(t.device_type).Int(t.emulated ? 1 : 0)
      .Int(t.allocation.cpu_milli).Int(t.allocation.memory_bytes)
      .Str(JoinDevices(t.allocation.devices)).Int(t.allocation.device_share_milli)
      .Str(t.reason).Str(t.output).Int(t.started_us).Int(t.finished_us).Str(t.output_object);
  steps.push_back({kPutTask, std::move(p)});
}

void PostgresStateStore::AddJob(std::vector<Step>& steps, const model::JobRecord& job,
                                const std::vector<NewTask>& tasks) const {
  steps.push_back({kSetNextJob, Params().Int(static_cast<int64_t>(job.id + 1))});
  Params j;
  j.Int(static_cast<int64_t>(job.id)).Str(job.name).Str(job.tenant).Str(job.spec_yaml).Str(job.spec_name)
      .Str(std::string(model::JobStatusName(job.status))).Str(job.reason).Int(job.submitted_us).Int(job.finished_us);
  steps.push_back({kInsertJob, std::move(j)});
  model::TaskRecord t;
  t.job = job.id;
  for (size_t i = 0; i < tasks.size(); ++i) {
    t.task = static_cast<uint32_t>(i);
    t.status = tasks[i].status;
    AddTask(steps, t);
    steps.push_back({kPutLabel, Params().Int(static_cast<int64_t>(job.id)).Int(t.task).Str(tasks[i].name)
                                    .Int(tasks[i].result ? 1 : 0)});
  }
}

StatusOr<uint64_t> PostgresStateStore::CreateJob(model::JobRecord job, const std::vector<NewTask>& tasks) {
  std::lock_guard<std::mutex> lock(mu_);
  MERIDIAN_RETURN_IF_ERROR(EnsureConnected());
  if (job.id == 0) {
    // The next id, held until the job is stored with it.
    MERIDIAN_RETURN_IF_ERROR(Exec("BEGIN", "begin").status());
    StatusOr<Result> next = Run(kTakeNextJob, Params(), "read the next job id");
    if (!next.ok() || next->rows() != 1) {
      Exec("ROLLBACK", "roll back").status().IgnoreError();
      return next.ok() ? Error("read the next job id") : next.status();
    }
    job.id = static_cast<uint64_t>(next->Int(0, 0));
  }
  std::vector<Step> steps;
  AddJob(steps, job, tasks);
  const bool in_transaction = PQtransactionStatus(conn_) != PQTRANS_IDLE;
  Status s = RunPipeline(steps, "write a job");
  if (s.ok() && in_transaction) s = Exec("COMMIT", "commit").status();
  if (!s.ok()) {
    if (PQtransactionStatus(conn_) != PQTRANS_IDLE) Exec("ROLLBACK", "roll back").status().IgnoreError();
    return s;
  }
  return job.id;
}

Status PostgresStateStore::Apply(const StoreBatch& batch) {
  if (batch.empty()) return OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  MERIDIAN_RETURN_IF_ERROR(EnsureConnected());
  std::vector<Step> steps;
  for (const NewJob& j : batch.new_jobs) AddJob(steps, j.record, j.tasks);
  for (const model::TaskRecord& t : batch.tasks) AddTask(steps, t);
  for (const model::JobRecord& j : batch.jobs) {
    steps.push_back({kUpdateJob, Params().Int(static_cast<int64_t>(j.id)).Str(std::string(model::JobStatusName(j.status)))
                                     .Str(j.reason).Int(j.finished_us)});
  }
  for (const model::AttemptRecord& a : batch.attempts) {
    steps.push_back({kPutAttempt, Params().Int(static_cast<int64_t>(a.job)).Int(a.task).Int(a.attempt).Str(a.node)
                                      .Str(a.site).Str(a.outcome).Str(a.reason).Int(a.exit_code).Int(a.started_us)
                                      .Int(a.ended_us)});
  }
  for (const model::TaskLogRecord& l : batch.logs) {
    steps.push_back({kPutLog, Params().Int(static_cast<int64_t>(l.job)).Int(l.task).Int(l.attempt).Str(l.node)
                                  .Str(l.stdout_tail).Str(l.stderr_tail).Int(l.stdout_bytes).Int(l.stderr_bytes)});
  }
  for (const model::ObjectName& n : batch.names) {
    steps.push_back({kPutName, Params().Str(n.name).Int(n.shard).Str(n.object.id).Int(n.object.size).Str(n.tenant)});
  }
  for (const model::TokenRecord& t : batch.tokens) {
    steps.push_back({kPutToken, Params().Str(t.id).Str(t.secret_hash).Str(t.user).Str(t.tenant)
                                    .Str(std::string(model::RoleName(t.role))).Int(t.created_us).Int(t.expires_us)
                                    .Int(t.revoked ? 1 : 0)});
  }
  for (const model::TenantSpend& t : batch.spend) {
    steps.push_back({kPutSpend, Params().Str(t.tenant).Int(t.day).Int(t.micro_usd)});
  }
  return RunPipeline(steps, "apply a batch");
}

Status PostgresStateStore::InSnapshot(const std::function<Status()>& read) {
  MERIDIAN_RETURN_IF_ERROR(Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "begin").status());
  Status s = read();
  Exec(s.ok() ? "COMMIT" : "ROLLBACK", "end a read").status().IgnoreError();
  return s;
}

StatusOr<LoadedState> PostgresStateStore::Load() {
  std::lock_guard<std::mutex> lock(mu_);
  MERIDIAN_RETURN_IF_ERROR(EnsureConnected());
  LoadedState out;
  // One snapshot: every table as of the same commit.
  MERIDIAN_RETURN_IF_ERROR(InSnapshot([&]() -> Status {
    MERIDIAN_ASSIGN_OR_RETURN(Result jobs, Run(kJobs, Params(), "read jobs"));
    for (int i = 0; i < jobs.rows(); ++i) {
      model::JobRecord j;
      j.id = static_cast<uint64_t>(jobs.Int(i, 0));
      j.name = jobs.Str(i, 1);
      j.tenant = jobs.Str(i, 2);
      j.spec_yaml = jobs.Str(i, 3);
      j.spec_name = jobs.Str(i, 4);
      j.status = model::ParseJobStatus(jobs.Str(i, 5)).value_or(model::JobStatus::kFailed);
      j.reason = jobs.Str(i, 6);
      j.submitted_us = jobs.Int(i, 7);
      j.finished_us = jobs.Int(i, 8);
      out.jobs.push_back(std::move(j));
    }
    MERIDIAN_ASSIGN_OR_RETURN(Result tasks, Run(kUnfinishedTasks, Params(), "read tasks"));
    for (int i = 0; i < tasks.rows(); ++i) out.tasks.push_back(tasks.Task(i, 0));
    MERIDIAN_ASSIGN_OR_RETURN(Result attempts, Run(kUnfinishedAttempts, Params(), "read attempts"));
    for (int i = 0; i < attempts.rows(); ++i) out.attempts.push_back(attempts.Attempt(i));
    MERIDIAN_ASSIGN_OR_RETURN(Result counts, Run(kFinishedCounts, Params(), "count finished jobs' tasks"));
    for (int i = 0; i < counts.rows(); ++i) {
      model::JobSummary& c = out.finished_counts[static_cast<uint64_t>(counts.Int(i, 0))];
      model::CountTasks(c, model::ParseTaskStatus(counts.Str(i, 1)).value_or(model::TaskStatus::kFailed),
                        static_cast<int>(counts.Int(i, 2)));
      c.retries += static_cast<int>(counts.Int(i, 3));
    }
    MERIDIAN_ASSIGN_OR_RETURN(Result names, Run(kNames, Params(), "read object names"));
    for (int i = 0; i < names.rows(); ++i) {
      out.names.push_back(model::ObjectName{names.Str(i, 0), static_cast<int>(names.Int(i, 1)),
                                            model::HeldObject{names.Str(i, 2), names.Int(i, 3)}, names.Str(i, 4)});
    }
    MERIDIAN_ASSIGN_OR_RETURN(Result tokens, Run(kTokens, Params(), "read tokens"));
    for (int i = 0; i < tokens.rows(); ++i) {
      model::TokenRecord t;
      t.id = tokens.Str(i, 0);
      t.secret_hash = tokens.Str(i, 1);
      t.user = tokens.Str(i, 2);
      t.tenant = tokens.Str(i, 3);
      // A role this build does not know grants nothing more than viewing.
      t.role = model::ParseRole(tokens.Str(i, 4)).value_or(model::Role::kViewer);
      t.created_us = tokens.Int(i, 5);
      t.expires_us = tokens.Int(i, 6);
      t.revoked = tokens.Int(i, 7) != 0;
      out.tokens.push_back(std::move(t));
    }
    MERIDIAN_ASSIGN_OR_RETURN(Result spend, Run(kSpend, Params(), "read tenant spend"));
    for (int i = 0; i < spend.rows(); ++i) {
      out.spend.push_back(model::TenantSpend{spend.Str(i, 0), spend.Int(i, 1), spend.Int(i, 2)});
    }
    MERIDIAN_ASSIGN_OR_RETURN(Result next, Run(kNextJob, Params(), "read the next job id"));
    if (next.rows() != 1) return Error("read the next job id");
    out.next_job_id = static_cast<uint64_t>(next.Int(0, 0));
    return OkStatus();
  }));
  return out;
}

StatusOr<std::vector<model::TaskLog>> PostgresStateStore::Logs(uint64_t job, std::optional<uint32_t> task,
                                                               uint32_t first_task, int32_t first_attempt,
                                                               uint32_t limit, int64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<model::TaskLog> out;
  if (limit == 0) return out;
  MERIDIAN_RETURN_IF_ERROR(EnsureConnected());
  Params p;
  p.Int(static_cast<int64_t>(job)).Int(first_task).Int(first_attempt).Int(limit).Int(max_bytes);
  if (task) p.Int(*task);
  MERIDIAN_ASSIGN_OR_RETURN(Result r, Run(task ? kLogsOfTask : kLogsOfJob, p, "read logs"));
  for (int i = 0; i < r.rows(); ++i) {
    out.push_back(model::TaskLog{
        r.Str(i, 6), model::TaskLogRecord{static_cast<uint64_t>(r.Int(i, 0)), static_cast<uint32_t>(r.Int(i, 1)),
                                          static_cast<int>(r.Int(i, 2)), r.Str(i, 3), r.Str(i, 4), r.Str(i, 5),
                                          r.Int(i, 7), r.Int(i, 8)}});
  }
  return out;
}

StatusOr<std::vector<model::TaskView>> PostgresStateStore::TaskPage(uint64_t job, uint32_t first, uint32_t limit,
                                                                    int64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<model::TaskView> out;
  if (limit == 0) return out;
  MERIDIAN_RETURN_IF_ERROR(EnsureConnected());
  // One snapshot: the tasks and their attempts as of the same commit.
  MERIDIAN_RETURN_IF_ERROR(InSnapshot([&]() -> Status {
    MERIDIAN_ASSIGN_OR_RETURN(
        Result r, Run(kTaskPage, Params().Int(static_cast<int64_t>(job)).Int(first).Int(limit).Int(max_bytes),
                      "read tasks"));
    for (int i = 0; i < r.rows(); ++i) {
      model::TaskView v;
      v.record = r.Task(i, 0);
      v.name = r.Str(i, 19);
      v.result = r.Int(i, 20) != 0;
      out.push_back(std::move(v));
    }
    if (out.empty()) return OkStatus();
    MERIDIAN_ASSIGN_OR_RETURN(Result a, Run(kPageAttempts,
                                            Params().Int(static_cast<int64_t>(job)).Int(out.front().record.task)
                                                .Int(out.back().record.task),
                                            "read attempts"));
    size_t k = 0;
    for (int i = 0; i < a.rows(); ++i) {
      model::AttemptRecord rec = a.Attempt(i);
      while (k < out.size() && out[k].record.task < rec.task) ++k;
      if (k < out.size() && out[k].record.task == rec.task) out[k].history.push_back(std::move(rec));
    }
    return OkStatus();
  }));
  return out;
}

StatusOr<std::optional<uint32_t>> PostgresStateStore::FindTask(uint64_t job, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  MERIDIAN_RETURN_IF_ERROR(EnsureConnected());
  MERIDIAN_ASSIGN_OR_RETURN(Result r, Run(kFindTask, Params().Int(static_cast<int64_t>(job)).Str(name), "find a task"));
  if (r.rows() == 0) return std::optional<uint32_t>();
  return std::optional<uint32_t>(static_cast<uint32_t>(r.Int(0, 0)));
}

StatusOr<std::pair<std::string, std::string>> PostgresStateStore::JobSpec(uint64_t job) {
  std::lock_guard<std::mutex> lock(mu_);
  MERIDIAN_RETURN_IF_ERROR(EnsureConnected());
  MERIDIAN_ASSIGN_OR_RETURN(Result r, Run(kJobSpec, Params().Int(static_cast<int64_t>(job)), "read a job's spec"));
  if (r.rows() == 0) return NotFoundError(fmt::format("no job {}", job));
  return std::make_pair(r.Str(0, 0), r.Str(0, 1));
}

Status PostgresStateStore::DeleteJob(uint64_t job) {
  std::lock_guard<std::mutex> lock(mu_);
  MERIDIAN_RETURN_IF_ERROR(EnsureConnected());
  std::vector<Step> steps;
  for (int statement : {kDeleteLogs, kDeleteAttempts, kDeleteLabels, kDeleteTasks, kDeleteJob}) {
    steps.push_back({statement, Params().Int(static_cast<int64_t>(job))});
  }
  return RunPipeline(steps, "delete a job");
}

}  // namespace meridian::store
