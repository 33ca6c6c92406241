// Opening the state store a coordinator is told to use: a PostgreSQL server named by
// a postgresql:// URI, or, by default, the SQLite file state.db in its state directory.
#pragma once

#include <memory>
#include <string>

#include "store/sqlite_state_store.h"

namespace meridian::store {

// `state`: empty (SQLite in `state_dir`) or a postgresql:// (postgres://) URI.
// `sqlite` applies to the SQLite store only; asking for kFull sync of a PostgreSQL
// store is refused (its durability is the server's synchronous_commit).
StatusOr<std::unique_ptr<StateStore>> OpenStateStore(const std::string& state, const std::string& state_dir,
                                                     SqliteStateStore::Options sqlite);

// What to call the store in messages: the file, or the URI without its password.
std::string DescribeState(const std::string& state, const std::string& state_dir);

}  // namespace meridian::store
