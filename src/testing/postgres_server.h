// PostgresServer: a throw-away PostgreSQL server for tests, from Debian's postgresql
// (scripts/install-deps.sh installs it): initdb into a temporary directory, then the
// server as a child of the test, listening on a Unix socket in that directory (no
// password: only this machine's root and the server's user can reach it) and on
// 127.0.0.1 at a free port, where its superuser `meridian` must give its password
// (SCRAM). As root, it runs as the `postgres` user, as PostgreSQL requires. The server
// dies with the test (a parent-death signal), and its directory goes with the object.
//
// Thread-safety: Start and the destructor on one thread; the accessors anywhere.
#pragma once

#include <libpq-fe.h>
#include <pwd.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "common/net.h"
#include "common/status.h"
#include "common/subprocess.h"

namespace meridian::testing {

class PostgresServer {
 public:
  static StatusOr<std::unique_ptr<PostgresServer>> Start() {
    namespace fs = std::filesystem;
    const std::string bindir = MERIDIAN_PG_BINDIR;
    if (!fs::exists(fs::path(bindir) / "initdb")) {
      return FailedPreconditionError(fmt::format(
          "no PostgreSQL server in {}: install Debian's postgresql (scripts/install-deps.sh)", bindir));
    }
    char pattern[] = "/tmp/meridian-pg-XXXXXX";
    if (mkdtemp(pattern) == nullptr) return UnavailableError("cannot make a directory for PostgreSQL");
    std::unique_ptr<PostgresServer> s(new PostgresServer(pattern));
    if (geteuid() == 0) {
      const passwd* pw = getpwnam("postgres");
      if (pw == nullptr) return FailedPreconditionError("running as root, but there is no postgres user to run as");
      s->uid_ = static_cast<int>(pw->pw_uid);
      s->gid_ = static_cast<int>(pw->pw_gid);
      if (chown(s->dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) return UnavailableError("chown " + s->dir_);
    }
    s->password_ = "pw-" + std::to_string(getpid());
    { std::ofstream(s->dir_ + "/pwfile") << s->password_ << "\n"; }
    if (s->uid_ >= 0 && chown((s->dir_ + "/pwfile").c_str(), s->uid_, s->gid_) != 0) {
      return UnavailableError("chown pwfile");
    }
    MERIDIAN_RETURN_IF_ERROR(s->Run({bindir + "/initdb", "-D", s->dir_ + "/data", "-U", "meridian",
                                     "--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile=" + s->dir_ + "/pwfile",
                                     "-N", "-E", "UTF8", "--locale=C"}));
    s->port_ = FreePort();
    s->server_ = std::thread([srv = s.get(), bindir] {
      ProcessOptions o = srv->Options({bindir + "/postgres", "-D", srv->dir_ + "/data", "-k", srv->dir_, "-p",
                                       std::to_string(srv->port_), "-c", "listen_addresses=127.0.0.1", "-c",
                                       "fsync=off", "-c", "max_connections=50"});
      StatusOr<ProcessResult> r = RunProcess(o, srv->stop_);
      srv->exit_message_ = r.ok() ? r->stderr_tail : r.status().ToString();
      srv->exited_ = true;
    });
    for (int i = 0; i < 300 && !s->exited_; ++i) {
      if (PQping(s->Uri("postgres").c_str()) == PQPING_OK) return s;
      usleep(100'000);
    }
    return UnavailableError(s->exited_ ? "PostgreSQL did not start: " + s->exit_message_
                                       : "PostgreSQL did not answer within 30 s");
  }

  ~PostgresServer() {
    stop_ = true;
    if (server_.joinable()) server_.join();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A database's URI over the Unix socket.
  std::string Uri(const std::string& db) const {
    return fmt::format("postgresql:///{}?host={}&port={}&user=meridian", db, dir_, port_);
  }
  // Over TCP, with a password (empty: none given).
  std::string TcpUri(const std::string& db, const std::string& password) const {
    return fmt::format("postgresql://meridian{}@127.0.0.1:{}/{}", password.empty() ? "" : ":" + password, port_, db);
  }
  const std::string& password() const { return password_; }

  // Makes a new, empty database.
  Status CreateDatabase(const std::string& name) const {
    PGconn* c = PQconnectdb(Uri("postgres").c_str());
    Status s = OkStatus();
    if (PQstatus(c) != CONNECTION_OK) {
      s = UnavailableError(PQerrorMessage(c));
    } else {
      PGresult* r = PQexec(c, ("CREATE DATABASE " + name).c_str());
      if (PQresultStatus(r) != PGRES_COMMAND_OK) s = UnavailableError(PQresultErrorMessage(r));
      PQclear(r);
    }
    PQfinish(c);
    return s;
  }

  // Runs one SQL statement in a database (a test's own reads and writes): the first
  // row's first value, or "" when it returns none.
  StatusOr<std::string> Execute(const std::string& db, const std::string& sql) const {
    PGconn* c = PQconnectdb(Uri(db).c_str());
    PGresult* r = PQexec(c, sql.c_str());
    const ExecStatusType st = PQresultStatus(r);
    StatusOr<std::string> out = std::string();
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      out = UnavailableError(PQerrorMessage(c));
    } else if (PQntuples(r) > 0 && PQnfields(r) > 0) {
      out = std::string(PQgetvalue(r, 0, 0));
    }
    PQclear(r);
    PQfinish(c);
    return out;
  }

 private:
  explicit PostgresServer(std::string dir) : dir_(std::move(dir)) {}

  ProcessOptions Options(std::vector<std::string> argv) const {
    ProcessOptions o;
    o.argv = std::move(argv);
    o.env = CurrentEnvironment();
    o.cwd = dir_;
    o.uid = uid_;
    o.gid = gid_;
    return o;
  }

  Status Run(std::vector<std::string> argv) const {
    std::atomic<bool> never{false};
    ProcessOptions o = Options(std::move(argv));
    o.timeout_us = 120'000'000;
    const std::string program = o.argv[0];
    MERIDIAN_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(o, never));
    if (r.exit_code != 0 || r.signal != 0 || r.timed_out) {
      return UnavailableError(fmt::format("{} failed ({}): {}", program, r.exit_code, r.stderr_tail));
    }
    return OkStatus();
  }

  // A port free now (the server takes it a moment later).
  static int FreePort() {
    StatusOr<std::unique_ptr<TcpListener>> l = TcpListener::Listen("127.0.0.1", 0);
    return l.ok() ? (*l)->port() : 0;
  }

  const std::string dir_;
  int uid_ = -1;
  int gid_ = -1;
  int port_ = 0;
  std::string password_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> exited_{false};
  std::string exit_message_;  // written before exited_ is set
  std::thread server_;
};

}  // namespace meridian::testing
