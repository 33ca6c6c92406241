// SqliteStateStore: the embedded StateStore, one SQLite file in WAL mode under the
// coordinator's state directory, with versioned schema migrations applied on open.
//
// Durability: with Sync::kNormal (the default) a commit survives the process being
// killed, not a power cut; Sync::kFull survives both at an fsync per commit.
//
// Thread-safety: one connection guarded by a mutex.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "store/state_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace meridian::store {

class SqliteStateStore final : public StateStore {
 public:
  enum class Sync { kNormal, kFull };
  struct Options {
    Sync sync = Sync::kNormal;
    // Migrate no further than this schema version (tests of migrations); 0: latest.
    int max_schema_version = 0;
  };

  // The schema version this build writes.
  static int LatestSchemaVersion();

  // Opens (creating if missing) the database at `path` and migrates it. Fails,
  // changing nothing, on a database written by a newer schema.
  static StatusOr<std::unique_ptr<SqliteStateStore>> Open(const std::string& path, Options options);
  ~SqliteStateStore() override;

  int schema_version() const { return schema_version_; }

  StatusOr<uint64_t> CreateJob(model::JobRecord job, const std::vector<NewTask>& tasks) override;
  Status Apply(const StoreBatch& batch) override;
  StatusOr<LoadedState> Load() override;
  StatusOr<std::vector<model::TaskLog>> Logs(uint64_t job, std::optional<uint32_t> task, uint32_t first_task,
                                             int32_t first_attempt, uint32_t limit, int64_t max_bytes) override;
  StatusOr<std::vector<model::TaskView>> TaskPage(uint64_t job, uint32_t first, uint32_t limit,
                                                  int64_t max_bytes) override;
  StatusOr<std::optional<uint32_t>> FindTask(uint64_t job, const std::string& name) override;
  StatusOr<std::pair<std::string, std::string>> JobSpec(uint64_t job) override;
  Status DeleteJob(uint64_t job) override;

 private:
  explicit SqliteStateStore(std::string path) : path_(std::move(path)) {}
  struct Stmt;
  Status Exec(const char* sql);
  // BEGIN IMMEDIATE, COMMIT and ROLLBACK, prepared once (Exec's before Prepare).
  Status Begin();
  Status CommitTransaction();
  void Rollback();
  // Steps a prepared statement that returns no rows, and resets it.
  Status Step(sqlite3_stmt* st, const char* what);
  // Prepares `sql` into `stmt`; `what` names the read in the error.
  Status Query(Stmt& stmt, const std::string& sql, const char* what);
  Status Migrate(int max_version);
  Status Prepare();
  Status Fail(const char* what) const;
  Status PutTask(const model::TaskRecord& t);
  // Within a transaction: the counter's value; the job and its tasks, moving the
  // counter past the job's id.
  StatusOr<uint64_t> NextJobId();
  Status InsertJob(const model::JobRecord& job, const std::vector<NewTask>& tasks);
  Status PutJobStatus(const model::JobRecord& j);
  Status PutAttempt(const model::AttemptRecord& a);
  Status PutLog(const model::TaskLogRecord& l);
  Status PutName(const model::ObjectName& n);

  std::string path_;
  std::mutex mu_;
  sqlite3* db_ = nullptr;
  int schema_version_ = 0;
  sqlite3_stmt* insert_job_ = nullptr;
  sqlite3_stmt* update_job_ = nullptr;
  sqlite3_stmt* put_task_ = nullptr;
  sqlite3_stmt* put_attempt_ = nullptr;
  sqlite3_stmt* put_log_ = nullptr;
  sqlite3_stmt* put_name_ = nullptr;
  sqlite3_stmt* put_token_ = nullptr;
  sqlite3_stmt* put_spend_ = nullptr;
  sqlite3_stmt* put_label_ = nullptr;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
  sqlite3_stmt* rollback_ = nullptr;
  sqlite3_stmt* next_job_ = nullptr;
  sqlite3_stmt* set_next_job_ = nullptr;
};

}  // namespace meridian::store
