#include "store/open_state_store.h"

#include <filesystem>

#include <fmt/format.h>

#include "store/postgres_state_store.h"

namespace meridian::store {

StatusOr<std::unique_ptr<StateStore>> OpenStateStore(const std::string& state, const std::string& state_dir,
                                                     SqliteStateStore::Options sqlite) {
  if (state.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<SqliteStateStore> s,
                              SqliteStateStore::Open(DescribeState(state, state_dir), sqlite));
    return std::unique_ptr<StateStore>(std::move(s));
  }
  if (!PostgresStateStore::IsUri(state)) {
    return InvalidArgumentError(fmt::format(
        "--state: expected a postgresql:// URI (or no --state, for SQLite in --state-dir), got '{}'",
        PostgresStateStore::Redact(state)));
  }
  if (sqlite.sync == SqliteStateStore::Sync::kFull) {
    return InvalidArgumentError(
        "--sync applies to the SQLite store; a PostgreSQL store is as durable as its server's synchronous_commit");
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<PostgresStateStore> s, PostgresStateStore::Open(state, {}));
  return std::unique_ptr<StateStore>(std::move(s));
}

std::string DescribeState(const std::string& state, const std::string& state_dir) {
  if (state.empty()) return (std::filesystem::path(state_dir) / "state.db").string();
  return PostgresStateStore::Redact(state);
}

}  // namespace meridian::store
