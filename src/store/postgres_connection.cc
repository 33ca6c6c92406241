#include "store/postgres_connection.h"

#include <libpq-fe.h>

#include "common/logging.h"

namespace meridian::store {
namespace {

// The server's notices (a connection ending, a warning) go to the log, not stderr.
void LogNotice(void*, const char* message) { MERIDIAN_LOG_WARN("state store: {}", PostgresMessage(message)); }

}  // namespace

pg_conn* ConnectPostgres(const std::string& uri, const char* application) {
  // Defaults first: what the URI says wins (expand_dbname).
  // Only warnings and errors come back as notices ("already exists, skipping" does not).
  const char* keys[] = {"connect_timeout", "application_name", "keepalives_idle", "keepalives_interval",
                        "keepalives_count", "options", "dbname", nullptr};
  const char* values[] = {"10", application, "10", "5", "3", "-c client_min_messages=warning", uri.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, 1);
  if (conn != nullptr) PQsetNoticeProcessor(conn, LogNotice, nullptr);
  return conn;
}

std::string PostgresMessage(const char* message) {
  std::string m = message ? message : "";
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m.empty() ? "unknown error" : m;
}

}  // namespace meridian::store
