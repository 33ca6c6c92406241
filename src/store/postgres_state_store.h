// PostgresStateStore: the StateStore on a PostgreSQL server the operator runs, for
// coordinators that must outlive their machine. Chosen by `--state postgresql://...`;
// SQLite stays the embedded default for one machine.
//
// Connection: a libpq connection string or URI (user, host, TLS: sslmode=verify-full
// and sslrootcert; the password best from PGPASSFILE, not the URI, which `ps` shows).
// A connection lost between calls is re-made at the next call; a call that fails
// with the connection returns Unavailable and changes nothing it did not commit.
//
// Durability: a call returns after the server committed (as durable as the server's
// synchronous_commit). A batch is one transaction, sent as one pipeline: one round
// trip, whatever its size.
//
// Thread-safety: one connection guarded by a mutex.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/state_store.h"

struct pg_conn;
struct pg_result;

namespace meridian::store {

class PostgresStateStore final : public StateStore {
 public:
  struct Options {
    // Migrate no further than this schema version (tests of migrations); 0: latest.
    int max_schema_version = 0;
  };

  // The schema version this build writes.
  static int LatestSchemaVersion();
  // Whether `state` names a PostgreSQL server rather than a file.
  static bool IsUri(const std::string& state);
  // `uri` with its password, if it has one, shown as "***": for messages and logs.
  static std::string Redact(const std::string& uri);

  // Connects and migrates the schema (one coordinator at a time, under an advisory
  // lock). Fails, changing nothing, on a schema written by a newer build.
  static StatusOr<std::unique_ptr<PostgresStateStore>> Open(const std::string& uri, Options options);
  ~PostgresStateStore() override;

  int schema_version() const { return schema_version_; }
  // From now on every write checks, in its own transaction, that `epoch` (a
  // PostgresLease's) still leads; one from a coordinator that lost the lease fails
  // with FailedPrecondition and changes nothing. 0: no check (one coordinator).
  void SetFence(int64_t epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    fence_epoch_ = epoch;
  }

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

  // A statement's parameters, all sent in binary: integers as 8-byte big-endian
  // (every integer column is a BIGINT), text and bytes as they are, so nothing is cut
  // at a NUL and text that is not UTF-8 is refused by the server, not mangled.
  class Params {
   public:
    Params& Int(int64_t v);
    Params& Str(const std::string& v);
    int size() const { return static_cast<int>(values_.size()); }
    std::vector<const char*> values() const;
    const int* lengths() const { return lengths_.data(); }
    const int* formats() const { return formats_.data(); }

   private:
    std::vector<std::string> values_;
    std::vector<int> lengths_;
    std::vector<int> formats_;
  };
  // A statement in a pipeline: a prepared statement's index, and its parameters.
  struct Step {
    int statement;
    Params params;
  };

 private:
  class Result;
  PostgresStateStore(std::string uri, int max_version)
      : uri_(std::move(uri)), shown_(Redact(uri_)), max_version_(max_version) {}
  // Connects when there is no usable connection (the first call, or after one was
  // lost), migrating and preparing statements.
  Status EnsureConnected();
  Status Migrate();
  Status Prepare();
  Status Error(const std::string& what) const;
  // Runs one SQL text, no parameters.
  StatusOr<Result> Exec(const std::string& sql, const char* what);
  // Runs `read` in one read-only snapshot (every table as of one commit).
  Status InSnapshot(const std::function<Status()>& read);
  // Runs a prepared statement, results in binary.
  StatusOr<Result> Run(int statement, const Params& params, const char* what);
  // Sends `steps` in one pipeline ending in a sync: without an open transaction,
  // they commit or fail together. The first error wins; an open transaction that
  // failed is rolled back.
  Status RunPipeline(const std::vector<Step>& steps, const char* what);
  void AddJob(std::vector<Step>& steps, const model::JobRecord& job, const std::vector<NewTask>& tasks) const;
  void AddTask(std::vector<Step>& steps, const model::TaskRecord& t) const;

  const std::string uri_;
  const std::string shown_;
  const int max_version_;
  std::mutex mu_;
  pg_conn* conn_ = nullptr;
  bool prepared_ = false;
  int schema_version_ = 0;
  int64_t fence_epoch_ = 0;
};

}  // namespace meridian::store
