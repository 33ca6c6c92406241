// What the PostgreSQL store and the leader's lease share: opening a libpq connection
// with Meridian's defaults, and libpq's messages made fit for ours.
#pragma once

#include <string>

struct pg_conn;

namespace meridian::store {

// Connects to `uri` (a libpq URI or connection string) with Meridian's defaults, which
// the URI overrides: a 10 s connect timeout, TCP keepalives that notice a dead server
// within about 25 s, and `application` as the application name. Never null; check
// PQstatus.
pg_conn* ConnectPostgres(const std::string& uri, const char* application);

// A libpq message without its trailing newline ("unknown error" for none).
std::string PostgresMessage(const char* message);

}  // namespace meridian::store
