// meridian certs (the cluster's CA and certificates, as files) and meridian token /
// whoami (API tokens, through the coordinator). docs/security.md describes both.
#include <sys/stat.h>

#include <ctime>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "client/client.h"
#include "common/env.h"
#include "common/files.h"
#include "common/units.h"
#include "model/auth.h"
#include "model/fleet.h"
#include "security/pki.h"
#include "spec/yaml_reader.h"

namespace meridian::cli {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kDayUs = int64_t{86'400} * 1'000'000;

}  // namespace

Status WritePrivateFile(const fs::path& path, const std::string& text, bool secret) {
  return WriteFileAtomically(path, text, secret ? 0600 : 0644);
}

namespace {

StatusOr<int64_t> Ttl(const std::string& ttl, int64_t fallback_us) {
  if (ttl.empty()) return fallback_us;
  StatusOr<int64_t> us = ParseDurationUs(ttl);
  if (!us.ok()) return us.status().WithPrefix("--ttl");
  if (*us <= 0) return InvalidArgumentError("--ttl: a certificate must be valid for some time");
  return us;
}

StatusOr<security::KeyPair> ReadPair(const fs::path& dir, const std::string& name) {
  security::KeyPair kp;
  MERIDIAN_ASSIGN_OR_RETURN(kp.cert_pem, spec::ReadFileToString((dir / (name + ".crt")).string()));
  MERIDIAN_ASSIGN_OR_RETURN(kp.key_pem, spec::ReadFileToString((dir / (name + ".key")).string()));
  return kp;
}

// A key and its certificate, as files NAME.key (its owner's alone) and NAME.crt.
void AddPair(std::vector<FileToWrite>& files, const fs::path& dir, const std::string& name,
             const security::KeyPair& kp) {
  files.push_back({dir / (name + ".key"), kp.key_pem, 0600});
  files.push_back({dir / (name + ".crt"), kp.cert_pem, 0644});
}

// Both or neither: never a new key beside an old certificate.
Status WritePair(const fs::path& dir, const std::string& name, const security::KeyPair& kp) {
  std::vector<FileToWrite> files;
  AddPair(files, dir, name, kp);
  return WriteFilesTogether(files);
}

// The CA's certificate alone (ca.crt may be a bundle: the current CA first).
StatusOr<security::KeyPair> ReadCa(const fs::path& dir) {
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair ca, ReadPair(dir, "ca"));
  ca.cert_pem = security::FirstCertificate(ca.cert_pem);
  return ca;
}

std::string When(int64_t unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

std::string CommaList(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

Status MakeClusterCerts(const std::string& dir_path, const std::vector<std::string>& coordinator_hosts) {
  const fs::path dir(dir_path);
  if (fs::exists(dir / "ca.crt")) {
    // A cluster made before monitoring certificates existed gets one now.
    if (fs::exists(dir / "monitor.crt") || !fs::exists(dir / "ca.key")) return OkStatus();
    MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair ca, ReadCa(dir));
    MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair monitor, security::Issue(ca, {"monitor:local", {}, 365 * kDayUs, false}));
    return WritePair(dir, "monitor", monitor);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return UnavailableError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  chmod(dir.c_str(), 0700);
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair ca, security::MakeCa("meridian-cluster-ca", 3650 * kDayUs));
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair coord,
                            security::Issue(ca, {"coordinator", coordinator_hosts, 365 * kDayUs, true}));
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair client, security::Issue(ca, {"client:admin", {}, 365 * kDayUs, false}));
  MERIDIAN_RETURN_IF_ERROR(WritePair(dir, "coordinator", coord));
  MERIDIAN_RETURN_IF_ERROR(WritePair(dir, "client", client));
  // For Prometheus (or curl) to read /metrics of the coordinator and the agents.
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair monitor, security::Issue(ca, {"monitor:local", {}, 365 * kDayUs, false}));
  MERIDIAN_RETURN_IF_ERROR(WritePair(dir, "monitor", monitor));
  // The CA last: its presence says the directory is complete.
  MERIDIAN_RETURN_IF_ERROR(WritePrivateFile(dir / "ca.key", ca.key_pem, true));
  return WritePrivateFile(dir / "ca.crt", ca.cert_pem, false);
}

Status RunCertsInit(const CertsOptions& o, std::ostream& out) {
  if (o.dir.empty()) return InvalidArgumentError("--dir is required");
  const fs::path dir(o.dir);
  if (fs::exists(dir / "ca.crt") || fs::exists(dir / "ca.key")) {
    return FailedPreconditionError(fmt::format(
        "{} already holds a CA; 'meridian certs rotate --ca' replaces it (init would orphan every certificate it "
        "signed)",
        dir.string()));
  }
  MERIDIAN_ASSIGN_OR_RETURN(int64_t ttl, Ttl(o.ttl, 3650 * kDayUs));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return UnavailableError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  chmod(dir.c_str(), 0700);
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair ca,
                            security::MakeCa(o.name.empty() ? "meridian-cluster-ca" : o.name, ttl));
  MERIDIAN_RETURN_IF_ERROR(WritePrivateFile(dir / "ca.key", ca.key_pem, true));
  MERIDIAN_RETURN_IF_ERROR(WritePrivateFile(dir / "ca.crt", ca.cert_pem, false));
  MERIDIAN_ASSIGN_OR_RETURN(security::CertInfo info, security::Inspect(ca.cert_pem));
  out << fmt::format("made a cluster CA in {} (ca.crt, and ca.key readable by you alone), valid until {}\n",
                     dir.string(), When(info.not_after_unix));
  out << "next: meridian certs issue coordinator --dir " << dir.string()
      << " --host HOST   and   meridian certs issue client --name USER --dir " << dir.string() << "\n";
  return OkStatus();
}

Status RunCertsIssue(const CertsOptions& o, std::ostream& out) {
  if (o.dir.empty()) return InvalidArgumentError("--dir is required");
  if (o.kind != "coordinator" && o.kind != "client" && o.kind != "monitor") {
    return InvalidArgumentError(fmt::format(
        "'{}': expected coordinator, client or monitor (nodes get theirs by joining with a token)", o.kind));
  }
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair ca, ReadCa(o.dir));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t ttl, Ttl(o.ttl, 365 * kDayUs));
  const bool coordinator = o.kind == "coordinator";
  const bool monitor = o.kind == "monitor";
  if (!coordinator && o.name.empty()) {
    return InvalidArgumentError(monitor ? "a monitoring certificate needs --name NAME (say, prometheus)"
                                        : "a client certificate needs --name USER");
  }
  // A monitor's name is a node-like name, a client's a user's (as its tokens have):
  // never a path out of --dir.
  if (monitor) MERIDIAN_RETURN_IF_ERROR(model::CheckName(o.name, "--name"));
  if (!coordinator && !monitor) MERIDIAN_RETURN_IF_ERROR(model::CheckPrincipalName(o.name, "--name"));
  std::vector<std::string> hosts = o.hosts;
  if (coordinator) {
    for (const char* h : {"127.0.0.1", "localhost"}) {
      if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
    }
  }
  const std::string cn = coordinator ? "coordinator" : (monitor ? "monitor:" : "client:") + o.name;
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair kp, security::Issue(ca, {cn, hosts, ttl, coordinator}));
  const std::string file = coordinator ? "coordinator"
                           : monitor   ? (o.name == "local" ? "monitor" : "monitor-" + o.name)
                           : (o.name == "admin" ? "client" : o.name);
  MERIDIAN_RETURN_IF_ERROR(WritePair(o.dir, file, kp));
  out << fmt::format("issued {}.crt and {}.key in {} for '{}'{}\n", file, file, o.dir, cn,
                     hosts.empty() ? "" : " (hosts " + CommaList(hosts) + ")");
  return OkStatus();
}

Status RunCertsRotate(const CertsOptions& o, std::ostream& out) {
  if (o.dir.empty()) return InvalidArgumentError("--dir is required");
  const fs::path dir(o.dir);
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair ca, ReadCa(dir));
  MERIDIAN_ASSIGN_OR_RETURN(std::string bundle, spec::ReadFileToString((dir / "ca.crt").string()));
  if (o.ca) {
    MERIDIAN_ASSIGN_OR_RETURN(security::CertInfo old, security::Inspect(ca.cert_pem));
    MERIDIAN_ASSIGN_OR_RETURN(int64_t ttl, Ttl(o.ttl, 3650 * kDayUs));
    MERIDIAN_ASSIGN_OR_RETURN(ca, security::MakeCa(old.issuer.empty() ? "meridian-cluster-ca" : old.issuer, ttl));
    // The old CA stays trusted beside the new one until every node has rejoined.
    bundle = ca.cert_pem + ReadCa(dir)->cert_pem;
  }
  // Everything new is made first and written together, the CA last: a failure (a full
  // disk) leaves the directory as it was, never certificates of a CA whose key was not
  // kept, nor a new key beside the old certificate.
  std::vector<std::pair<std::string, security::KeyPair>> pairs;  // by file stem
  std::vector<std::string> lines;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const fs::path p = entry.path();
    if (p.extension() != ".crt" || p.stem() == "ca") continue;
    MERIDIAN_ASSIGN_OR_RETURN(std::string pem, spec::ReadFileToString(p.string()));
    StatusOr<security::CertInfo> info = security::Inspect(pem);
    if (!info.ok()) continue;
    const bool coordinator = info->common_name == "coordinator";
    if (!coordinator && info->common_name.rfind("client:", 0) != 0) continue;
    MERIDIAN_ASSIGN_OR_RETURN(int64_t ttl, Ttl("", 365 * kDayUs));
    MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair kp,
                              security::Issue(ca, {info->common_name, info->hosts, ttl, coordinator}));
    pairs.emplace_back(p.stem().string(), std::move(kp));
    lines.push_back(fmt::format("  {}: new key and certificate for '{}'\n", p.filename().string(), info->common_name));
  }
  std::vector<FileToWrite> files;
  for (const auto& [stem, kp] : pairs) AddPair(files, dir, stem, kp);
  if (o.ca) {
    files.push_back({dir / "ca.key", ca.key_pem, 0600});
    files.push_back({dir / "ca.crt", bundle, 0644});
    lines.push_back("  ca.crt: a new CA, with the previous one still trusted beside it\n");
  }
  MERIDIAN_RETURN_IF_ERROR(WriteFilesTogether(files));
  for (const std::string& line : lines) out << line;
  const size_t reissued = pairs.size();
  out << fmt::format("rotated {} certificate{} in {}; restart the coordinator to serve the new ones{}\n", reissued,
                     reissued == 1 ? "" : "s", dir.string(),
                     o.ca ? "; nodes rejoin (with a join token) to get certificates of the new CA" : "");
  return OkStatus();
}

Status RunCertsShow(const CertsOptions& o, std::ostream& out) {
  if (o.dir.empty()) return InvalidArgumentError("--dir is required");
  Table t({"file", "name", "issuer", "hosts", "valid until"});
  for (const auto& entry : fs::directory_iterator(o.dir)) {
    if (entry.path().extension() != ".crt") continue;
    MERIDIAN_ASSIGN_OR_RETURN(std::string pem, spec::ReadFileToString(entry.path().string()));
    StatusOr<security::CertInfo> info = security::Inspect(pem);
    if (!info.ok()) continue;
    t.Add({entry.path().filename().string(), info->common_name, info->issuer, CommaList(info->hosts),
           When(info->not_after_unix)});
  }
  t.Print(out);
  return OkStatus();
}

// ------------------------------------------------------------------ tokens

Status RunTokenCreate(const TokenOptions& o, std::ostream& out) {
  if (o.user.empty()) return InvalidArgumentError("--user is required");
  std::optional<model::Role> role = model::ParseRole(o.role);
  if (!role) return InvalidArgumentError(fmt::format("--role '{}': expected admin, submitter, viewer or agent", o.role));
  StatusOr<int64_t> ttl = ParseDurationUs(o.ttl);
  if (!ttl.ok()) return ttl.status().WithPrefix("--ttl");
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> c, ConnectClient(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(rpc::NewToken t, c->CreateToken(o.user, o.tenant, *role, *ttl));
  if (o.json) {
    out << nlohmann::json{{"id", t.record.id},         {"user", t.record.user},
                          {"tenant", t.record.tenant}, {"role", model::RoleName(t.record.role)},
                          {"expires_us", t.record.expires_us}, {"token", t.secret}}
               .dump(2)
        << '\n';
    return OkStatus();
  }
  out << t.secret << '\n';
  out << fmt::format("(token {} for user {}, {} in tenant {}{}; shown once: the coordinator keeps only its hash)\n",
                     t.record.id, t.record.user, model::RoleName(t.record.role), t.record.tenant,
                     t.record.expires_us ? ", expires in " + FormatDurationUs(*ttl) : "");
  return OkStatus();
}

Status RunTokenList(const TokenOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> c, ConnectClient(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::TokenRecord> tokens, c->Tokens());
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const model::TokenRecord& t : tokens) {
      j.push_back({{"id", t.id}, {"user", t.user}, {"tenant", t.tenant}, {"role", model::RoleName(t.role)},
                   {"created_us", t.created_us}, {"expires_us", t.expires_us}, {"revoked", t.revoked}});
    }
    out << JsonText(j) << '\n';
    return OkStatus();
  }
  Table table({"id", "user", "tenant", "role", "created", "expires", "state"});
  const int64_t now = Env::Default().clock().WallNow().us;
  for (const model::TokenRecord& t : tokens) {
    std::string state = t.revoked ? "revoked" : (t.expires_us && now >= t.expires_us) ? "expired" : "valid";
    table.Add({t.id, t.user, t.tenant, std::string(model::RoleName(t.role)), When(t.created_us / 1'000'000),
               t.expires_us ? When(t.expires_us / 1'000'000) : "never", state});
  }
  table.Print(out);
  return OkStatus();
}

Status RunTokenRevoke(const TokenOptions& o, std::ostream& out) {
  if (o.id.empty()) return InvalidArgumentError("give the token's id (meridian token list shows them)");
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> c, ConnectClient(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(model::TokenRecord t, c->RevokeToken(o.id));
  out << fmt::format("token {} of user {} is revoked: calls with it are refused from now on\n", t.id, t.user);
  return OkStatus();
}

Status RunWhoAmI(const TokenOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> c, ConnectClient(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(model::Caller me, c->WhoAmI());
  if (o.json) {
    out << nlohmann::json{{"user", me.user}, {"tenant", me.tenant}, {"role", model::RoleName(me.role)}}.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("user {} ({}, tenant {}) at {}\n", me.user, model::RoleName(me.role), me.tenant, c->address());
  return OkStatus();
}

Status RunTenantList(const TokenOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> c, ConnectClient(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::TenantView> tenants, c->Tenants());
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const model::TenantView& t : tenants) {
      j.push_back({{"name", t.name},
                   {"weight", t.weight},
                   {"listed", t.listed},
                   {"quota", {{"gpu_milli", t.max_gpu_milli}, {"cpu_milli", t.max_cpu_milli},
                              {"memory_bytes", t.max_memory_bytes}, {"gpu_milli_by_type", t.max_gpu_milli_by_type},
                              {"budget_micro_usd_per_day", t.budget_micro_usd_per_day}}},
                   {"used", {{"gpu_milli", t.gpu_milli}, {"cpu_milli", t.cpu_milli}, {"memory_bytes", t.memory_bytes},
                             {"gpu_milli_by_type", t.gpu_milli_by_type}}},
                   {"spent_today_micro_usd", t.spent_today_micro_usd},
                   {"jobs_active", t.jobs_active},
                   {"tasks_running", t.tasks_running},
                   {"tasks_waiting", t.tasks_waiting}});
    }
    out << JsonText(j) << '\n';
    return OkStatus();
  }
  auto of = [](int64_t used, int64_t quota, bool bytes) {
    std::string u = bytes ? FormatBytes(used) : FormatMilli(used);
    return quota > 0 ? u + " of " + (bytes ? FormatBytes(quota) : FormatMilli(quota)) : u + " (no quota)";
  };
  Table table({"tenant", "weight", "GPUs", "CPU cores", "memory", "spent today", "jobs", "running", "waiting"});
  for (const model::TenantView& t : tenants) {
    std::string gpus = of(t.gpu_milli, t.max_gpu_milli, false);
    for (const auto& [type, quota] : t.max_gpu_milli_by_type) {
      auto held = t.gpu_milli_by_type.find(type);
      gpus += fmt::format("; {} {}", type, of(held == t.gpu_milli_by_type.end() ? 0 : held->second, quota, false));
    }
    std::string spent = FormatMicroUsd(t.spent_today_micro_usd);
    if (t.budget_micro_usd_per_day > 0) spent += " of " + FormatMicroUsd(t.budget_micro_usd_per_day);
    table.Add({t.name + (t.listed ? "" : " (not in the fleet)"), std::to_string(t.weight), gpus,
               of(t.cpu_milli, t.max_cpu_milli, false), of(t.memory_bytes, t.max_memory_bytes, true), spent,
               std::to_string(t.jobs_active), std::to_string(t.tasks_running), std::to_string(t.tasks_waiting)});
  }
  table.Print(out);
  return OkStatus();
}

}  // namespace meridian::cli
