// meridian coordinator | agent | up | down: the processes of a cluster, and a local
// cluster on one machine started from a fleet file.
#include <pthread.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/agent.h"
#include "cli/commands.h"
#include "cli/leadership.h"
#include "cli/table.h"
#include "client/client.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "coordinator/coordinator.h"
#include "coordinator/http_api.h"
#include "rpc/node_client.h"
#include "rpc/server.h"
#include "security/pki.h"
#include "spec/fleet_spec.h"
#include "spec/stream_spec.h"
#include "spec/yaml_reader.h"
#include "store/open_state_store.h"
#include "store/postgres_state_store.h"

namespace meridian::cli {
namespace fs = std::filesystem;
namespace {
using client::kAddrFile;
constexpr const char* kStateStoreFile = "state-store";  // where the state is: kSqliteStore or a URI (no password)
constexpr const char* kSqliteStore = "SQLite (state/state.db)";
constexpr const char* kHttpAddrFile = "http.addr";  // the coordinator's HTTPS listener: "https://host:port"
}  // namespace

int ExitCode(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kAborted:
      return kExitJobFailed;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kOutOfRange:
    case StatusCode::kResourceExhausted:
      return kExitBadRequest;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case StatusCode::kUnauthenticated:
    case StatusCode::kPermissionDenied:
      return kExitRefused;
    default:
      return kExitInternal;
  }
}

std::string LogTail(const fs::path& log, size_t lines) {
  std::ifstream in(log);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "\n  " + all[i];
  return out;
}

namespace {

int ReadPid(const fs::path& pid_file) {
  StatusOr<std::string> s = ReadSmallFile(pid_file);
  if (!s.ok()) return 0;
  return std::atoi(s->c_str());
}

}  // namespace

Status RunCoordinator(const CoordinatorCommandOptions& o) {
  if (o.state_dir.empty()) return InvalidArgumentError("--state-dir is required");
  coordinator::CoordinatorOptions options;
  if (!o.fleet.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(spec::FleetSpec fleet, spec::LoadFleet(o.fleet));
    // Nodes register themselves; the fleet's say what each may claim to be.
    for (const model::Node& n : fleet.fleet.nodes) {
      options.declared_nodes[n.name] = {n, fleet.fleet.site(n.site).name};
    }
    options.accept_node_devices = o.accept_node_devices;
    options.fleet = std::move(fleet.fleet);
    options.fleet.nodes.clear();
    options.throughput = std::move(fleet.throughput);
  }
  MERIDIAN_ASSIGN_OR_RETURN(options.heartbeat_timeout_us, ParseDurationUs(o.heartbeat_timeout));
  options.heartbeat_interval_us = std::max<int64_t>(options.heartbeat_timeout_us / 10, 10'000);
  StatusOr<int64_t> grace = ParseDurationUs(o.reconcile_grace);
  if (!grace.ok()) return grace.status().WithPrefix("--reconcile-grace");
  options.reconcile_grace_us = *grace;
  if (o.retain_jobs < 0) return InvalidArgumentError("--retain-jobs: expected 0 (no limit) or more");
  options.retain_jobs = o.retain_jobs;
  StatusOr<int64_t> retain_for = ParseDurationUs(o.retain_for);
  if (!retain_for.ok()) return retain_for.status().WithPrefix("--retain-for");
  options.retain_for_us = *retain_for;
  std::optional<sched::QueueOrder> order = sched::ParseQueueOrder(o.order);
  if (!order) return InvalidArgumentError(fmt::format("--order: expected fifo, priority or fair, got '{}'", o.order));
  options.order = *order;
  if (o.emulate_wan && o.emulate_wan_latency) {
    return InvalidArgumentError(
        "--emulate-wan and --emulate-wan-latency: give one (the second leaves bandwidth to the network)");
  }
  options.emulate_wan = o.emulate_wan || o.emulate_wan_latency;
  options.emulate_wan_bandwidth = !o.emulate_wan_latency;
  store::SqliteStateStore::Options store_options;
  if (o.sync == "full") {
    store_options.sync = store::SqliteStateStore::Sync::kFull;
  } else if (o.sync != "normal") {
    return InvalidArgumentError(fmt::format("--sync: expected normal or full, got '{}'", o.sync));
  }
  rpc::ServerSecurity security;
  security.insecure = o.insecure;
  if (!o.insecure) {
    if (o.tls_dir.empty()) {
      return InvalidArgumentError(
          "--tls-dir is required: the cluster's certificates (meridian certs init, then certs issue coordinator); "
          "or --insecure, on a machine whose every user you trust");
    }
    MERIDIAN_ASSIGN_OR_RETURN(security.tls, security::LoadCredentials(o.tls_dir, "coordinator"));
    options.ca_bundle = security.tls.ca_pem;
    if (fs::exists(fs::path(o.tls_dir) / "ca.key")) {
      MERIDIAN_ASSIGN_OR_RETURN(options.ca.key_pem, spec::ReadFileToString((fs::path(o.tls_dir) / "ca.key").string()));
      options.ca.cert_pem = security::FirstCertificate(security.tls.ca_pem);  // the signing CA
      if (!security::KeyMatches(options.ca.cert_pem, options.ca.key_pem)) {
        return InvalidArgumentError(fmt::format("{}/ca.key is not the key of the first certificate in ca.crt", o.tls_dir));
      }
    }
    StatusOr<int64_t> ttl = ParseDurationUs(o.node_cert_ttl);
    if (!ttl.ok() || *ttl <= 0) return InvalidArgumentError("--node-cert-ttl: expected a duration such as 30d");
    options.node_cert_valid_for_us = *ttl;
  }
  std::error_code ec;
  fs::create_directories(o.state_dir, ec);
  if (ec) return UnavailableError(fmt::format("cannot create {}: {}", o.state_dir, ec.message()));
  BlockTerminationSignals();  // before any thread starts, so all inherit it
  RaiseOpenFileLimit();  // a descriptor per connection
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<store::StateStore> store,
                            store::OpenStateStore(o.state, o.state_dir, store_options));
  // On PostgreSQL, several coordinators may share the store: this one leads only while
  // it holds the lease (a standby until then), and its writes are fenced by its epoch.
  std::unique_ptr<Leadership> leadership;
  if (auto* pg = dynamic_cast<store::PostgresStateStore*>(store.get())) {
    StatusOr<int64_t> lease_ttl = ParseDurationUs(o.lease_ttl);
    if (!lease_ttl.ok() || *lease_ttl < 500'000) {
      return InvalidArgumentError("--lease-ttl: expected a duration of at least 500ms, such as 3s");
    }
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    MERIDIAN_ASSIGN_OR_RETURN(
        leadership, Leadership::Await(o.state, fmt::format("{} ({}, pid {})", o.listen, host, getpid()), *lease_ttl));
    if (leadership == nullptr) return OkStatus();  // stopped while a standby
    pg->SetFence(leadership->epoch());
    leadership->StartRenewing();
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<coordinator::Coordinator> coord,
                            coordinator::Coordinator::Create(std::move(options), std::move(store), Env::Default()));
  if (!o.insecure && !o.admin_token_file.empty() && !fs::exists(o.admin_token_file)) {
    // The first admin's token: whoever can read this file administers the cluster.
    MERIDIAN_ASSIGN_OR_RETURN(rpc::NewToken admin, coord->CreateToken("admin", "default", model::Role::kAdmin, 0));
    MERIDIAN_RETURN_IF_ERROR(WritePrivateFile(o.admin_token_file, admin.secret + "\n", true));
    MERIDIAN_LOG_INFO("an admin token is in {} (readable by this user only)", o.admin_token_file);
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Server> server,
                            rpc::Server::Start(o.listen, *coord, *coord, *coord, *coord, *coord, security));
  std::string host = o.listen.substr(0, o.listen.rfind(':'));
  std::string address = fmt::format("{}:{}", host, server->port());
  std::unique_ptr<http::Server> http_server;
  if (o.http_listen != "none") {
    coordinator::HttpOptions ho;
    ho.listen = o.http_listen;
    if (ho.listen.empty()) {
      const bool fixed = o.listen.substr(o.listen.rfind(':') + 1) != "0";
      ho.listen = fmt::format("{}:{}", host, fixed ? server->port() + 1 : 0);
    }
    ho.tls = security.tls;
    ho.insecure = o.insecure;
    if (o.web_dir.empty()) {
      if (fs::exists(fs::path(MERIDIAN_WEB_DIR) / "index.html")) ho.web_dir = MERIDIAN_WEB_DIR;
    } else if (o.web_dir != "none") {
      if (!fs::exists(fs::path(o.web_dir) / "index.html")) {
        server->Shutdown();
        return InvalidArgumentError(fmt::format("--web-dir {}: no index.html there (scripts/build-web.sh builds web/dist)",
                                                o.web_dir));
      }
      ho.web_dir = o.web_dir;
    }
    StatusOr<std::unique_ptr<http::Server>> started = coordinator::StartHttp(*coord, ho);
    if (!started.ok()) {
      server->Shutdown();
      return started.status().WithPrefix("--http-listen");
    }
    http_server = std::move(*started);
    coord->SetEndpoints(rpc::HttpEndpoints{http_server->url(), !ho.web_dir.empty()});
    if (!o.http_addr_file.empty()) {
      MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(o.http_addr_file, http_server->url() + "\n"));
    }
  }
  if (!o.addr_file.empty()) MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(o.addr_file, address + "\n"));
  MERIDIAN_LOG_INFO("coordinator listening on {} ({}; state in {}){}", address,
                    o.insecure ? "INSECURE: no TLS, no authentication" : "TLS, client certificates and tokens",
                    store::DescribeState(o.state, o.state_dir),
                    http_server ? "; metrics at " + http_server->url() + "/metrics" : "");
  int sig = WaitForTerminationSignal();
  std::optional<std::string> lost = leadership ? leadership->lost() : std::nullopt;
  if (!lost) MERIDIAN_LOG_INFO("signal {}: shutting down", sig);
  if (http_server) http_server->Shutdown();
  server->Shutdown();
  if (lost) return AbortedError("no longer the leader: " + *lost);
  return OkStatus();
}

namespace {

// The node's TLS credentials in o.tls_dir: its certificate if it has a valid one of
// the cluster's CA naming it, else one got now by joining with the join token.
StatusOr<security::TlsCredentials> NodeCredentials(const AgentCommandOptions& o, const std::string& node) {
  const fs::path dir(o.tls_dir);
  StatusOr<security::TlsCredentials> have = security::LoadCredentials(dir.string(), "node");
  if (have.ok()) {
    StatusOr<security::CertInfo> info = security::Inspect(have->cert_pem);
    if (info.ok() && info->common_name == "node:" + node) return have;
  }
  if (o.join_token_file.empty()) {
    return FailedPreconditionError(fmt::format(
        "node {} has no certificate in {} (node.crt): give --join-token-file FILE with a join token (meridian token "
        "create --role agent --user NAME --ttl 1h)",
        node, dir.string()));
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::string ca_pem, spec::ReadFileToString((dir / "ca.crt").string()));
  MERIDIAN_ASSIGN_OR_RETURN(std::string token, ReadSmallFile(o.join_token_file));
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair request, security::MakeRequest("node:" + node));
  MERIDIAN_ASSIGN_OR_RETURN(auto joined,
                            rpc::JoinCluster(o.coordinator, ca_pem, token, node, request.cert_pem, 10'000'000));
  // All or none: never a new key beside an old certificate, or a CA that did not sign it.
  MERIDIAN_RETURN_IF_ERROR(WriteFilesTogether({{dir / "node.key", request.key_pem, 0600},
                                               {dir / "node.crt", joined.first, 0644},
                                               {dir / "ca.crt", joined.second, 0644}}));
  MERIDIAN_LOG_INFO("joined the cluster at {}: certificate of node:{} in {}", o.coordinator, node, dir.string());
  return security::LoadCredentials(dir.string(), "node");
}

// A password file's one line, without its newline.
}  // namespace

StatusOr<std::string> ReadPasswordFile(const fs::path& path) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string password, ReadSmallFile(path));
  while (!password.empty() && password.back() == '\n') password.pop_back();
  return password;
}

Status RunAgent(const AgentCommandOptions& given) {
  // Before any thread starts (joining with a token starts gRPC's), so that every thread
  // inherits it and a SIGTERM or Ctrl-C is only ever taken by the signal thread below:
  // one delivered to a thread that left it unblocked ended the agent at once (exit 143)
  // instead of stopping it.
  BlockTerminationSignals();
  RaiseOpenFileLimit();  // a descriptor per connection
  spec::NodeConfig config;
  AgentCommandOptions o = given;
  if (given.slurm) {
    if (!given.config.empty()) {
      return InvalidArgumentError("--slurm and --config (or MERIDIAN_NODE_CONFIG): the node is either the Slurm job's "
                                  "share of this machine or the node file's; give one");
    }
    MERIDIAN_ASSIGN_OR_RETURN(config, SlurmNodeConfig(o));
  } else if (!given.gpu_types.empty() || !given.gpu_type.empty()) {
    return InvalidArgumentError("--gpu-types and --gpu-type map a Slurm job's GRES: they go with --slurm");
  } else {
    if (given.config.empty()) {
      return InvalidArgumentError("--config is required (or MERIDIAN_NODE_CONFIG): the node file; or --slurm inside a "
                                  "Slurm job");
    }
    MERIDIAN_ASSIGN_OR_RETURN(config, spec::LoadNodeConfig(given.config));
  }
  // Flags and MERIDIAN_* variables first, then the node file's `agent:` map.
  const spec::AgentSettings& file = config.agent;
  for (auto [value, from] : {std::pair{&o.coordinator, &file.coordinator}, {&o.join_token_file, &file.join_token_file},
                             {&o.tls_dir, &file.tls_dir}, {&o.work_dir, &file.work_dir},
                             {&o.transfer_host, &file.transfer_host}, {&o.metrics_listen, &file.metrics_listen}}) {
    if (value->empty()) *value = *from;
  }
  if (o.transfer_host.empty()) o.transfer_host = "127.0.0.1";
  if (o.transfer_port < 0) o.transfer_port = static_cast<int>(std::max<int64_t>(file.transfer_port, 0));
  if (o.transfer_port > 65535) return InvalidArgumentError("--transfer-port: expected 0 to 65535");
  if (o.coordinator.empty()) {
    return InvalidArgumentError(fmt::format(
        "no coordinator: give --coordinator HOST:PORT, MERIDIAN_COORDINATOR, or 'agent: {{coordinator: HOST:PORT}}' "
        "in {}",
        o.config));
  }
  agent::AgentOptions options;
  options.coordinator = o.coordinator;
  options.node = std::move(config.node);
  options.site = o.site.empty() ? config.site : o.site;
  options.work_dir = o.work_dir.empty() ? (fs::temp_directory_path() / ("meridian-agent-" + options.node.name)).string()
                                        : o.work_dir;
  options.discover_gpus = !o.no_gpu_discovery;
  options.kernel_threads = o.kernel_threads;
  MERIDIAN_ASSIGN_OR_RETURN(options.object_memory_bytes, ParseBytes(o.object_memory));
  options.transfer_host = o.transfer_host;
  options.transfer_port = o.transfer_port;
  if (o.metrics_listen != "none") {
    options.metrics_listen = o.metrics_listen.empty() ? o.transfer_host + ":0" : o.metrics_listen;
  }
  options.link_clocks_file = o.link_clocks;
  options.insecure_transfers = o.insecure;
  if (!o.idle_exit.empty()) {
    StatusOr<int64_t> idle = ParseDurationUs(o.idle_exit);
    if (!idle.ok() || *idle < 0) {
      return InvalidArgumentError(fmt::format("--idle-exit: expected a duration such as 5m, or 0 for never; got '{}'",
                                              o.idle_exit));
    }
    options.idle_exit_us = *idle;
  }
  options.warm_python = !o.cold_python;
  if (!o.site_broker.broker.empty()) {
    MERIDIAN_RETURN_IF_ERROR(
        spec::CheckMqttEndpoint({o.site_broker.broker, "x"}, true).WithPrefix("--site-broker"));
    options.site_broker.url = o.site_broker.broker;
    options.site_broker.user = o.site_broker.user;
    if (!o.site_broker.password_file.empty()) {
      MERIDIAN_ASSIGN_OR_RETURN(options.site_broker.password, ReadPasswordFile(o.site_broker.password_file));
    }
    if (!o.site_broker.ca.empty()) {
      MERIDIAN_ASSIGN_OR_RETURN(options.site_broker.ca_pem, ReadSmallFile(o.site_broker.ca));
    }
  }
  for (const std::string& peer : o.peer_brokers) {
    // The password file is the rest: its path may hold commas.
    std::vector<std::string> f;
    size_t from = 0;
    for (size_t comma; f.size() < 3 && (comma = peer.find(',', from)) != std::string::npos; from = comma + 1) {
      f.push_back(peer.substr(from, comma - from));
    }
    f.push_back(peer.substr(from));
    if (f.size() != 4 || f[0].empty() || f[2].empty() || f[3].empty()) {
      return InvalidArgumentError(
          fmt::format("--peer-broker '{}': expected SITE,URL,USER,PASSWORD_FILE", peer.substr(0, 256)));
    }
    MERIDIAN_RETURN_IF_ERROR(spec::CheckMqttEndpoint({f[1], "x"}, true).WithPrefix("--peer-broker " + f[0]));
    agent::SiteBroker& b = options.peer_brokers[f[0]];
    b.url = f[1];
    b.user = f[2];
    MERIDIAN_ASSIGN_OR_RETURN(b.password, ReadPasswordFile(f[3]));
    b.ca_pem = options.site_broker.ca_pem;
  }
  options.task_uid_base = o.task_uid_base >= 0 ? o.task_uid_base : geteuid() == 0 ? 200'000 : 0;
  if (options.task_uid_base > 0 && geteuid() != 0) {
    return InvalidArgumentError("--task-uid-base: running commands as other users needs the agent to run as root");
  }
  if (options.task_uid_base == 0) {
    MERIDIAN_LOG_WARN("commands run as this agent's user: a task can read what the agent can (run the agent as root "
                      "for per-tenant users)");
  }
  if (!o.insecure) {
    if (o.tls_dir.empty()) {
      return InvalidArgumentError(
          "--tls-dir is required: a directory with the cluster's ca.crt, where the node keeps its certificate; or "
          "--insecure for a coordinator started with --insecure");
    }
    MERIDIAN_ASSIGN_OR_RETURN(options.tls, NodeCredentials(o, options.node.name));
  }
  agent::Agent agent(std::move(options), Env::Default());
  std::thread signals([&agent] {
    WaitForTerminationSignal();
    agent.Stop();
  });
  Status s = agent.Run();
  if (!s.ok() || agent.left()) {
    // Wake the signal thread (that one only) so the process can exit.
    pthread_kill(signals.native_handle(), SIGTERM);
  }
  signals.join();
  return s;
}

namespace {

struct Component {
  std::string name;             // "coordinator" or "agent-<node>"
  std::vector<std::string> argv;
  fs::path log;
};

// Starts `c` unless its pid file names a live process of this cluster. Returns the
// pid, and whether it was started now.
StatusOr<std::pair<int, bool>> Ensure(const fs::path& dir, const Component& c) {
  fs::path pid_file = dir / "pids" / (c.name + ".pid");
  int pid = ReadPid(pid_file);
  if (ProcessRunning(pid, fs::absolute(dir).string())) return std::make_pair(pid, false);
  MERIDIAN_ASSIGN_OR_RETURN(int started, SpawnDetached(c.argv, c.log.string()));
  MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(pid_file, std::to_string(started) + "\n"));
  return std::make_pair(started, true);
}

}  // namespace

namespace {

// The namespaces of a network scripts/netsim.sh built (`up --prefix P`), from its
// state files: where the coordinator and each site's agents run.
struct NetnsLayout {
  std::string prefix;
  std::string ip;  // the ip(8) program
  std::string core_ns;
  std::string core_address;  // the coordinator listens there
  bool latency_in_process = true;  // no netem: the coordinator emulates round trips
  std::map<std::string, std::pair<std::string, std::string>> sites;  // name -> (namespace, address)

  // The argv that runs `argv` in namespace `ns`.
  std::vector<std::string> In(const std::string& ns, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {ip, "netns", "exec", ns});
    return argv;
  }
};

StatusOr<NetnsLayout> LoadNetns(const std::string& prefix, const model::Fleet& fleet) {
  // As scripts/netsim.sh takes it: it names namespaces and a directory.
  const bool valid = !prefix.empty() && prefix.size() <= 10 && prefix[0] >= 'a' && prefix[0] <= 'z' &&
                     std::all_of(prefix.begin(), prefix.end(), [](char c) {
                       return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                     });
  if (!valid) return InvalidArgumentError("--netns: 1 to 10 lowercase letters and digits, a letter first");
  const fs::path state = fs::path("/run/meridian-netsim") / prefix;
  const std::string build = fmt::format("build it with scripts/netsim.sh up FLEET --prefix {}", prefix);
  NetnsLayout layout;
  layout.prefix = prefix;
  for (const char* ip : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(ip, X_OK) == 0) {
      layout.ip = ip;
      break;
    }
  }
  if (layout.ip.empty()) return FailedPreconditionError("--netns: no ip(8) program (Debian's iproute2)");
  if (geteuid() != 0) return FailedPreconditionError("--netns: starting processes in network namespaces needs root");
  StatusOr<std::string> core = ReadSmallFile(state / "core");
  StatusOr<std::string> sites = ReadSmallFile(state / "sites");
  StatusOr<std::string> latency = ReadSmallFile(state / "latency");
  if (!core.ok() || !sites.ok() || !latency.ok()) {
    return FailedPreconditionError(fmt::format("--netns {}: no such network in {} ({})", prefix, state.string(), build));
  }
  auto fields = [](std::string_view line) {
    std::vector<std::string> out;
    for (size_t from = 0; from <= line.size();) {
      const size_t tab = std::min(line.find('\t', from), line.size());
      out.emplace_back(line.substr(from, tab - from));
      from = tab + 1;
    }
    return out;
  };
  const std::vector<std::string> core_fields = fields(*core);
  if (core_fields.size() != 2) {
    return DataLossError(fmt::format("--netns: {} is not 'namespace, address'", (state / "core").string()));
  }
  layout.core_ns = core_fields[0];
  layout.core_address = core_fields[1];
  layout.latency_in_process = *latency != "netem";
  std::istringstream lines(*sites);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const std::vector<std::string> f = fields(line);
    if (f.size() != 3) {
      return DataLossError(
          fmt::format("--netns: a line of {} is not 'site, namespace, address'", (state / "sites").string()));
    }
    layout.sites[f[0]] = {f[1], f[2]};
  }
  for (const model::Site& site : fleet.sites) {
    if (!layout.sites.count(site.name)) {
      return FailedPreconditionError(fmt::format("--netns {}: the network has no namespace for site {} (it was built "
                                                 "from another fleet; scripts/netsim.sh down --prefix {}, then up)",
                                                 prefix, site.name, prefix));
    }
  }
  return layout;
}

// The coordinator called `name`, listening on `listen` and writing it to `addr_file`
// once it does (a standby does not listen until it leads).
Component CoordinatorComponent(const fs::path& dir, const std::string& fleet, const UpOptions& o,
                               const std::string& self, const std::string& name, const std::string& listen,
                               const std::string& http_listen, const fs::path& addr_file,
                               const NetnsLayout* netns) {
  Component coord{name,
                  {self, "--log-level", "info", "coordinator", "--state-dir", (dir / "state").string(), "--listen",
                   listen, "--fleet", fleet, "--addr-file", addr_file.string(), "--http-listen", http_listen,
                   "--http-addr-file", (dir / kHttpAddrFile).string(), "--heartbeat-timeout",
                   o.heartbeat_timeout, "--reconcile-grace", o.reconcile_grace, "--retain-jobs",
                   std::to_string(o.retain_jobs), "--retain-for", o.retain_for},
                  dir / "logs" / (name + ".log")};
  // In namespaces the kernel shapes the links' bandwidth (and their latency, with netem).
  if (netns == nullptr) {
    coord.argv.push_back("--emulate-wan");
  } else if (netns->latency_in_process) {
    coord.argv.push_back("--emulate-wan-latency");
  }
  if (o.insecure) {
    coord.argv.push_back("--insecure");
  } else {
    for (const std::string& a : {std::string("--tls-dir"), (dir / "tls").string(), std::string("--admin-token-file"),
                                 (dir / "admin.token").string()}) {
      coord.argv.push_back(a);
    }
  }
  if (o.real_gpus) coord.argv.push_back("--accept-node-devices");
  if (netns != nullptr) coord.argv = netns->In(netns->core_ns, std::move(coord.argv));
  return coord;
}

// Waits (10 s, and a lease's life when several share the store) until one of
// `addr_files` is written; its content.
StatusOr<std::string> WaitForListening(const std::vector<fs::path>& addr_files, const std::vector<int>& pids,
                                       const std::vector<Component>& coords) {
  for (int i = 0; i < 650; ++i) {
    for (const fs::path& f : addr_files) {
      StatusOr<std::string> a = ReadSmallFile(f);
      if (a.ok() && !a->empty()) return *a;
    }
    if (std::all_of(pids.begin(), pids.end(), [](int pid) { return ChildExited(pid); })) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string tails;
  for (const Component& c : coords) tails += fmt::format("\n{} ({}) ends:{}", c.name, c.log.string(), LogTail(c.log, 5));
  return UnavailableError("no coordinator started to lead; their logs:" + tails);
}

// Starts the coordinators that do not run; returns the address clients and agents
// use (with several, all of them, comma-separated) and how many started.
StatusOr<std::pair<std::string, int>> StartCoordinators(const fs::path& dir, const std::string& fleet,
                                                         const UpOptions& o, const std::string& self,
                                                         const NetnsLayout* netns) {
  const std::string host = netns != nullptr ? netns->core_address : "127.0.0.1";
  std::error_code ec;
  // A cluster made with several keeps them: a plain `up` starts what of them died.
  std::vector<std::string> addresses;
  if (StatusOr<std::string> kept = ReadSmallFile(dir / kAddrFile); kept.ok() && kept->find(',') != std::string::npos) {
    for (size_t from = 0; from <= kept->size();) {
      const size_t comma = std::min(kept->find(',', from), kept->size());
      addresses.push_back(kept->substr(from, comma - from));
      from = comma + 1;
    }
  }
  const int coordinators = o.coordinators == 1 && !addresses.empty() ? static_cast<int>(addresses.size())
                                                                     : o.coordinators;
  if (coordinators <= 1) {
    // It keeps the address it first got, so agents find a restarted one.
    StatusOr<std::string> previous = ReadSmallFile(dir / kAddrFile);
    std::string listen = previous.ok() && !previous->empty() ? *previous : host + ":0";
    // And its HTTPS listener's, so a Prometheus pointed at it finds it again.
    StatusOr<std::string> previous_http = ReadSmallFile(dir / kHttpAddrFile);
    std::string http_listen = host + ":0";
    if (previous_http.ok() && previous_http->find("://") != std::string::npos) {
      http_listen = previous_http->substr(previous_http->find("://") + 3);
    }
    Component coord =
        CoordinatorComponent(dir, fleet, o, self, "coordinator", listen, http_listen, dir / kAddrFile, netns);
    if (!ProcessRunning(ReadPid(dir / "pids" / "coordinator.pid"), dir.string())) fs::remove(dir / kAddrFile, ec);
    MERIDIAN_ASSIGN_OR_RETURN(auto pid, Ensure(dir, coord));
    MERIDIAN_ASSIGN_OR_RETURN(std::string address, WaitForListening({dir / kAddrFile}, {pid.first}, {coord}));
    return std::make_pair(address, pid.second ? 1 : 0);
  }
  // Several share a PostgreSQL store, one leading: each has a fixed address, chosen
  // once, that agents and clients know all of.
  if (addresses.size() != static_cast<size_t>(coordinators)) {
    if (!addresses.empty() && ProcessRunning(ReadPid(dir / "pids" / "coordinator.pid"), dir.string())) {
      return FailedPreconditionError(fmt::format(
          "the local cluster in {} runs {} coordinator(s); 'meridian down' first to change how many",
          dir.string(), addresses.size()));
    }
    addresses.clear();
    for (int i = 0; i < coordinators; ++i) {
      MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> free, TcpListener::Listen("127.0.0.1", 0));
      addresses.push_back(fmt::format("127.0.0.1:{}", free->port()));
    }
  }
  const std::string joined = fmt::format("{}", fmt::join(addresses, ","));
  MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(dir / kAddrFile, joined + "\n"));
  fs::create_directories(dir / "listening", ec);
  std::vector<fs::path> files;
  std::vector<int> pids;
  std::vector<Component> coords;
  int started = 0;
  for (int i = 0; i < coordinators; ++i) {
    const std::string name = i == 0 ? "coordinator" : fmt::format("coordinator-{}", i + 1);
    files.push_back(dir / "listening" / (name + ".addr"));
    coords.push_back(
        CoordinatorComponent(dir, fleet, o, self, name, addresses[static_cast<size_t>(i)], "127.0.0.1:0", files.back(),
                             nullptr));
    if (!ProcessRunning(ReadPid(dir / "pids" / (name + ".pid")), dir.string())) fs::remove(files.back(), ec);
    MERIDIAN_ASSIGN_OR_RETURN(auto pid, Ensure(dir, coords.back()));
    pids.push_back(pid.first);
    started += pid.second ? 1 : 0;
  }
  MERIDIAN_RETURN_IF_ERROR(WaitForListening(files, pids, coords).status());
  return std::make_pair(joined, started);
}

// Starts the agents of the fleet's nodes that do not run; returns how many started.
// An edge site's MQTT broker (docs/streams.md): where it listens and what its
// agents give the tasks that ask for it.
struct SiteBrokerFiles {
  std::string url;
  fs::path password;  // the meridian user's
  fs::path ca;        // mqtts: the cluster's CA; empty: plain mqtt
};

}  // namespace

Status AddMqttUser(const fs::path& passwd, const std::string& user, const std::string& password, bool create) {
  const std::string program = FindProgram("mosquitto_passwd");
  if (program.empty()) return FailedPreconditionError("no mosquitto_passwd (Debian's mosquitto; scripts/install-deps.sh)");
  ProcessOptions p;
  p.argv = {program, "-b", passwd.string(), user, password};
  if (create) p.argv.insert(p.argv.begin() + 1, "-c");
  p.env = CurrentEnvironment();
  p.timeout_us = 30'000'000;
  std::atomic<bool> stop{false};
  MERIDIAN_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(p, stop));
  if (r.exit_code != 0 || r.signal != 0) {
    return InternalError(fmt::format("mosquitto_passwd failed: {}", r.stderr_tail));
  }
  chmod(passwd.c_str(), 0600);
  return OkStatus();
}

namespace {

// The port a broker's config names ("listener PORT HOST"), or 0.
int ConfiguredPort(const fs::path& conf) {
  StatusOr<std::string> text = ReadSmallFile(conf);
  if (!text.ok()) return 0;
  std::istringstream in(*text);
  std::string word;
  int port = 0;
  while (in >> word) {
    if (word == "listener" && in >> port) return port;
  }
  return 0;
}

// A site's listener's port: the one it kept (`kept`, 0 for none), else `fixed` in the
// site's own network namespace, else a free one of `host`.
StatusOr<int> SitePort(int kept, const std::string& host, bool in_netns, int fixed) {
  if (kept != 0) return kept;
  if (in_netns) return fixed;  // the site's namespace is its own
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> probe, TcpListener::Listen(host, 0));
  return probe->port();
}

// A server certificate of the cluster's CA (dir/tls) for `hosts`, made once: `key` and
// `cert` are kept, the key 0600.
Status EnsureSiteCertificate(const fs::path& dir, const std::string& common_name, const std::vector<std::string>& hosts,
                             const fs::path& key, const fs::path& cert) {
  if (fs::exists(cert)) return OkStatus();
  MERIDIAN_ASSIGN_OR_RETURN(std::string ca_cert, ReadSmallFile(dir / "tls" / "ca.crt"));
  MERIDIAN_ASSIGN_OR_RETURN(std::string ca_key, ReadSmallFile(dir / "tls" / "ca.key"));
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair issued, security::Issue(security::KeyPair{ca_cert, ca_key},
                                                                      {common_name, hosts, 365 * kDayUs, true}));
  MERIDIAN_RETURN_IF_ERROR(WritePrivateFile(key, issued.key_pem, true));
  return WritePrivateFile(cert, issued.cert_pem, false);
}

// The user an edge site's streams have at another edge site's broker.
std::string PeerBrokerUser(const std::string& site) { return "site-" + site; }

// Starts a mosquitto for each edge site of the fleet (once; `meridian up` again starts
// one that died). It allows no anonymous client: user `meridian` (the site's agents
// give it to tasks that ask) may read and write every topic, user `sensors` may only
// publish under sensors/, and user `site-OTHER` of each other edge site only under
// sites/OTHER/. Passwords are made once, kept 0600 under dir/mqtt/SITE/. With
// TLS (not --insecure) it listens for mqtts with a certificate of the cluster's CA.
StatusOr<std::map<std::string, SiteBrokerFiles>> StartBrokers(const fs::path& dir, const spec::FleetSpec& fleet,
                                                              bool insecure, const NetnsLayout* netns, int* started) {
  std::map<std::string, SiteBrokerFiles> out;
  for (const model::Site& site : fleet.fleet.sites) {
    if (site.kind != model::SiteKind::kEdge) continue;
    const std::string mosquitto = FindProgram("mosquitto");
    if (mosquitto.empty() || FindProgram("mosquitto_passwd").empty()) {
      return FailedPreconditionError(fmt::format(
          "site '{}' is an edge site, which gets an MQTT broker, but mosquitto is not installed (scripts/install-deps.sh "
          "installs it)",
          site.name));
    }
    const fs::path d = dir / "mqtt" / site.name;
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec) return UnavailableError(fmt::format("cannot create {}: {}", d.string(), ec.message()));
    chmod(d.c_str(), 0700);
    const std::string host = netns != nullptr ? netns->sites.at(site.name).second : "127.0.0.1";
    MERIDIAN_ASSIGN_OR_RETURN(const int port,
                              SitePort(ConfiguredPort(d / "mosquitto.conf"), host, netns != nullptr, 1883));
    // Each other edge site has a user here that may only publish under sites/ITS_NAME/:
    // its streams' summaries (a stream's `sink: {site: ...}`).
    std::vector<std::string> users = {"meridian", "sensors"};
    std::string acl = "user meridian\ntopic readwrite #\n\nuser sensors\ntopic write sensors/#\n";
    for (const model::Site& peer : fleet.fleet.sites) {
      if (peer.kind != model::SiteKind::kEdge || peer.name == site.name) continue;
      users.push_back(PeerBrokerUser(peer.name));
      acl += fmt::format("\nuser {}\ntopic write sites/{}/#\n", users.back(), peer.name);
    }
    // The password file is made again, whole, when a user has no password yet.
    if (!fs::exists(d / "passwd") || std::any_of(users.begin(), users.end(), [&](const std::string& user) {
          return !fs::exists(d / (user + ".password"));
        })) {
      for (const std::string& user : users) {
        const fs::path file = d / (user + ".password");
        std::string password;
        if (fs::exists(file)) {
          MERIDIAN_ASSIGN_OR_RETURN(password, ReadPasswordFile(file));
        } else {
          MERIDIAN_ASSIGN_OR_RETURN(password, security::RandomHex(24));
          MERIDIAN_RETURN_IF_ERROR(WritePrivateFile(file, password + "\n", true));
        }
        MERIDIAN_RETURN_IF_ERROR(AddMqttUser(d / "passwd.new", user, password, user == users.front())
                                     .WithPrefix(fmt::format("site '{}'", site.name)));
      }
      chmod((d / "passwd.new").c_str(), 0600);
      fs::rename(d / "passwd.new", d / "passwd", ec);
      if (ec) return UnavailableError(fmt::format("cannot write {}: {}", (d / "passwd").string(), ec.message()));
    }
    MERIDIAN_RETURN_IF_ERROR(WritePrivateFile(d / "acl", acl, true));
    std::string conf = fmt::format(
        "# Written by meridian up for edge site {}: authenticated clients only (docs/streams.md).\n"
        "listener {} {}\n"
        "allow_anonymous false\n"
        "password_file {}\n"
        "acl_file {}\n"
        "max_packet_size 65536\n"
        "max_queued_messages 100000\n"
        "set_tcp_nodelay true\n"
        "persistence false\n"
        // As the user `meridian up` runs as, who owns these files (not mosquitto's own).
        "user {}\n",
        site.name, port, host, (d / "passwd").string(), (d / "acl").string(),
        getpwuid(geteuid()) != nullptr ? getpwuid(geteuid())->pw_name : "root");
    SiteBrokerFiles files;
    files.password = d / "meridian.password";
    if (!insecure) {
      MERIDIAN_RETURN_IF_ERROR(
          EnsureSiteCertificate(dir, "mqtt:" + site.name, {host, "localhost"}, d / "broker.key", d / "broker.crt"));
      conf += fmt::format("cafile {}\ncertfile {}\nkeyfile {}\ntls_version tlsv1.2\n", (dir / "tls" / "ca.crt").string(),
                          (d / "broker.crt").string(), (d / "broker.key").string());
      files.ca = dir / "tls" / "ca.crt";
    }
    MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(d / "mosquitto.conf", conf));
    files.url = fmt::format("{}://{}:{}", insecure ? "mqtt" : "mqtts", host, port);
    Component broker{"mqtt-" + site.name, {mosquitto, "-c", (d / "mosquitto.conf").string()},
                     dir / "logs" / ("mqtt-" + site.name + ".log")};
    if (netns != nullptr) broker.argv = netns->In(netns->sites.at(site.name).first, std::move(broker.argv));
    MERIDIAN_ASSIGN_OR_RETURN(auto pid, Ensure(dir, broker));
    *started += pid.second ? 1 : 0;
    MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(d / "url", files.url + "\n"));
    out[site.name] = std::move(files);
  }
  return out;
}

StatusOr<int> StartAgents(const fs::path& dir, const spec::FleetSpec& fleet, const std::string& address,
                          const std::string& self, bool real_gpus, bool insecure, const NetnsLayout* netns,
                          const std::map<std::string, SiteBrokerFiles>& brokers) {
  int started = 0;
  for (const model::Node& node : fleet.fleet.nodes) {
    model::Node local = node;
    // One machine runs every node: their devices are emulated on its CPU.
    for (model::Device& d : local.devices) d.emulated = true;
    fs::path config = dir / "nodes" / (node.name + ".yaml");
    MERIDIAN_RETURN_IF_ERROR(
        WriteFileAtomically(config, spec::NodeConfigYaml(local, fleet.fleet.site(node.site).name)));
    Component agent{"agent-" + node.name,
                    {self, "--log-level", "info", "agent", "--coordinator", address, "--config", config.string(),
                     "--work-dir", (dir / "work" / node.name).string(), "--link-clocks",
                     (dir / "work" / "link-clocks").string()},
                    dir / "logs" / ("agent-" + node.name + ".log")};
    if (!real_gpus) agent.argv.push_back("--no-gpu-discovery");
    const std::string& site = fleet.fleet.site(node.site).name;
    if (netns != nullptr) {
      // Its transfers leave from the site's own address, across the shaped links.
      agent.argv.insert(agent.argv.end(), {"--transfer-host", netns->sites.at(site).second});
    }
    if (insecure) {
      agent.argv.push_back("--insecure");
    } else {
      // Each node keeps its own certificate; it starts with the CA's and a join token.
      const fs::path tls = dir / "work" / node.name / "tls";
      std::error_code ec;
      fs::create_directories(tls, ec);
      if (!fs::exists(tls / "ca.crt")) fs::copy_file(dir / "tls" / "ca.crt", tls / "ca.crt", ec);
      if (ec) return UnavailableError(fmt::format("cannot prepare {}: {}", tls.string(), ec.message()));
      for (const std::string& a : {std::string("--tls-dir"), tls.string(), std::string("--join-token-file"),
                                   (dir / "join.token").string()}) {
        agent.argv.push_back(a);
      }
    }
    if (auto b = brokers.find(site); b != brokers.end()) {
      agent.argv.insert(agent.argv.end(), {"--site-broker", b->second.url, "--site-broker-user", "meridian",
                                           "--site-broker-password-file", b->second.password.string()});
      if (!b->second.ca.empty()) agent.argv.insert(agent.argv.end(), {"--site-broker-ca", b->second.ca.string()});
      // The other edge sites' brokers, as this site's user there (streams' sinks).
      for (const auto& [peer, files] : brokers) {
        if (peer == site) continue;
        const fs::path password = dir / "mqtt" / peer / (PeerBrokerUser(site) + ".password");
        agent.argv.insert(agent.argv.end(), {"--peer-broker", fmt::format("{},{},{},{}", peer, files.url,
                                                                          PeerBrokerUser(site), password.string())});
      }
    }
    if (netns != nullptr) agent.argv = netns->In(netns->sites.at(site).first, std::move(agent.argv));
    MERIDIAN_ASSIGN_OR_RETURN(auto pid, Ensure(dir, agent));
    started += pid.second ? 1 : 0;
  }
  return started;
}

// The port in a gateway's url file ("https://HOST:PORT"), or 0.
int UrlPort(const fs::path& url_file) {
  StatusOr<std::string> text = ReadSmallFile(url_file);
  if (!text.ok()) return 0;
  const size_t colon = text->rfind(':');
  if (colon == std::string::npos) return 0;
  const int port = std::atoi(text->c_str() + colon + 1);
  return port > 0 && port < 65536 ? port : 0;
}

// Starts a gateway for each site of the fleet (once; `meridian up` again starts one
// that died): `meridian gateway --site SITE`, which routes every service at
// /v1/services/NAME/ to its replicas, that site's region first. Clients present the
// token in dir/gateways/client.token (made once, 0600); with TLS (not --insecure) the
// gateway serves HTTPS with a certificate of the cluster's CA. Each keeps its port
// from one `up` to the next (dir/gateways/SITE.url). Each reads the fleet from
// `fleet_path` (absolute), as the coordinator does: the cluster's copy of it
// (dir/fleet.yaml) sits elsewhere, so the files the fleet names by relative paths
// (throughput tables, node lists) are not found from it. Returns the sites' URLs.
StatusOr<std::map<std::string, std::string>> StartGateways(const fs::path& dir, const spec::FleetSpec& fleet,
                                                           const std::string& fleet_path, const std::string& address,
                                                           const std::string& self, const UpOptions& o,
                                                           const NetnsLayout* netns, int* started) {
  std::map<std::string, std::string> urls;
  if (o.gateways == "none") return urls;
  const fs::path d = dir / "gateways";
  std::error_code ec;
  fs::create_directories(d, ec);
  if (ec) return UnavailableError(fmt::format("cannot create {}: {}", d.string(), ec.message()));
  chmod(d.c_str(), 0700);
  const fs::path token = d / "client.token";
  if (!fs::exists(token)) {
    MERIDIAN_ASSIGN_OR_RETURN(std::string secret, security::RandomHex(32));
    MERIDIAN_RETURN_IF_ERROR(WritePrivateFile(token, secret + "\n", true));
  }
  struct Started {
    std::string site, host;
    int port = 0, pid = 0;
    fs::path log;
  };
  std::vector<Started> all;
  for (const model::Site& site : fleet.fleet.sites) {
    const std::string host = netns != nullptr ? netns->sites.at(site.name).second : "127.0.0.1";
    const fs::path url_file = d / (site.name + ".url");
    MERIDIAN_ASSIGN_OR_RETURN(const int port, SitePort(UrlPort(url_file), host, netns != nullptr, 8443));
    Component gateway{"gateway-" + site.name,
                      {self, "--log-level", "info", "gateway", "--site", site.name, "--fleet", fleet_path, "--listen",
                       fmt::format("{}:{}", host, port), "--token-file", token.string(), "--coordinator", address,
                       "--dir", dir.string()},
                      dir / "logs" / ("gateway-" + site.name + ".log")};
    if (o.gateways == "autoscale") gateway.argv.push_back("--autoscale");
    if (!o.insecure) {
      const fs::path cert = d / (site.name + ".crt"), key = d / (site.name + ".key");
      std::vector<std::string> hosts = {host, "localhost"};
      if (host != "127.0.0.1") hosts.push_back("127.0.0.1");
      MERIDIAN_RETURN_IF_ERROR(EnsureSiteCertificate(dir, "gateway:" + site.name, hosts, key, cert));
      gateway.argv.insert(gateway.argv.end(), {"--tls-cert", cert.string(), "--tls-key", key.string()});
    }
    if (netns != nullptr) gateway.argv = netns->In(netns->sites.at(site.name).first, std::move(gateway.argv));
    MERIDIAN_ASSIGN_OR_RETURN(auto pid, Ensure(dir, gateway));
    *started += pid.second ? 1 : 0;
    const std::string url = fmt::format("{}://{}:{}", o.insecure ? "http" : "https", host, port);
    MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(url_file, url + "\n"));
    urls[site.name] = url;
    all.push_back(Started{site.name, host, port, pid.first, gateway.log});
  }
  // Each listening, or it says why not (its port taken since it was chosen, say): 20 s
  // for all.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (const Started& g : all) {
    bool listening = false;
    while (!listening) {
      listening = TcpStream::Connect(g.host, g.port, 200'000).ok();
      // Exited (not ProcessRunning: just spawned, it may not have exec'd into its
      // command line yet).
      const bool exited = kill(g.pid, 0) != 0 || waitpid(g.pid, nullptr, WNOHANG) == g.pid;
      if (listening || exited || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!listening) {
      return UnavailableError(fmt::format("the gateway of site {} does not listen on {}:{}; its log {}:\n{}", g.site,
                                          g.host, g.port, g.log.string(), LogTail(g.log, 5)));
    }
  }
  return urls;
}

// Waits until `want` nodes are registered and alive: 30 s at most, by the clock (a count
// of tries is no bound: each may wait out its 2 s deadline on a coordinator that is
// slow to answer). A coordinator that did not answer is said to be the cause, not
// agents that did not register.
StatusOr<std::vector<model::NodeView>> WaitForNodes(const std::string& address, const rpc::ChannelSecurity& security,
                                                    size_t want, const fs::path& dir) {
  client::Client client(address, security, 2'000'000);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t alive = 0;
  Status last = OkStatus();
  while (true) {
    StatusOr<std::vector<model::NodeView>> nodes = client.Nodes();
    last = nodes.status();
    if (nodes.ok()) {
      alive = std::count_if(nodes->begin(), nodes->end(), [](const model::NodeView& v) { return v.alive; });
      if (alive >= want) return std::move(*nodes);
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!last.ok()) {
    return UnavailableError(fmt::format("could not read within 30 s whether the {} agents registered: {}; see the logs "
                                        "in {}",
                                        want, last.message(), (dir / "logs").string()));
  }
  return UnavailableError(fmt::format("only {} of {} agents registered within 30 s; see the logs in {}", alive, want,
                                      (dir / "logs").string()));
}

void PrintCluster(const std::vector<model::NodeView>& nodes, std::ostream& out) {
  std::map<std::string, std::pair<int, std::map<std::string, int>>> by_site;
  for (const model::NodeView& n : nodes) {
    auto& [count, devices] = by_site[n.site];
    ++count;
    std::string type = n.node.devices.empty() ? "CPU" : n.node.devices.front().type;
    devices[type] += n.node.devices.empty() ? static_cast<int>(n.node.cpu_milli / 1000)
                                            : static_cast<int>(n.node.devices.size());
  }
  Table t({"site", "nodes", "devices"});
  for (const auto& [site, entry] : by_site) {
    std::string devices;
    for (const auto& [type, n] : entry.second) {
      devices += (devices.empty() ? "" : ", ") +
                 fmt::format("{} x{}{}", type, n, type == "CPU" ? " cores" : " (emulated)");
    }
    t.Add({site, std::to_string(entry.first), devices});
  }
  t.Print(out);
}

}  // namespace

Status RunUp(const UpOptions& o, std::ostream& out) {
  if (o.coordinators > 1) {
    const char* state = std::getenv("MERIDIAN_STATE");
    if (state == nullptr || !store::PostgresStateStore::IsUri(state)) {
      return InvalidArgumentError(
          "--coordinators: several coordinators share a PostgreSQL store; name it in MERIDIAN_STATE "
          "(postgresql://...)");
    }
  }
  std::string fleet_path = o.fleet.empty() ? "examples/fleets/three-sites.yaml" : o.fleet;
  if (o.fleet.empty() && !fs::exists(fleet_path)) {
    return InvalidArgumentError("give a fleet file: meridian up --fleet FLEET.yaml");
  }
  MERIDIAN_ASSIGN_OR_RETURN(spec::FleetSpec fleet, spec::LoadFleet(fleet_path));
  if (fleet.fleet.nodes.empty()) return InvalidArgumentError(fmt::format("{} declares no nodes", fleet_path));
  std::optional<NetnsLayout> netns;
  if (!o.netns.empty()) {
    if (o.coordinators > 1) return InvalidArgumentError("--netns runs one coordinator (not --coordinators)");
    MERIDIAN_ASSIGN_OR_RETURN(netns, LoadNetns(o.netns, fleet.fleet));
  }
  if (fleet.fleet.nodes.size() > static_cast<size_t>(o.max_nodes)) {
    return InvalidArgumentError(fmt::format(
        "{} has {} nodes; a local cluster runs one agent process per node, at most {} (use 'meridian sim' for "
        "large fleets)",
        fleet_path, fleet.fleet.nodes.size(), o.max_nodes));
  }
  const fs::path dir = fs::absolute(o.dir.empty() ? DefaultClusterDir() : o.dir);
  MERIDIAN_RETURN_IF_ERROR(ParseDurationUs(o.heartbeat_timeout).status().WithPrefix("--heartbeat-timeout"));
  MERIDIAN_RETURN_IF_ERROR(ParseDurationUs(o.reconcile_grace).status().WithPrefix("--reconcile-grace"));
  MERIDIAN_RETURN_IF_ERROR(ParseDurationUs(o.retain_for).status().WithPrefix("--retain-for"));
  if (o.retain_jobs < 0) return InvalidArgumentError("--retain-jobs: expected 0 (no limit) or more");
  MERIDIAN_ASSIGN_OR_RETURN(std::string fleet_text, spec::ReadFileToString(fleet_path, spec::kMaxYamlFileBytes));
  // A cluster remembers the fleet it was made from: starting it again from another
  // would keep the old nodes and state under the new name.
  const fs::path made_from = dir / "fleet.yaml";
  // And the store its coordinators keep the state in (a password never written): one
  // started on another would find no jobs, or two would lead on one SQLite file.
  const char* state_env = std::getenv("MERIDIAN_STATE");
  const std::string store_now =
      state_env != nullptr && *state_env != '\0' ? store::PostgresStateStore::Redact(state_env) : kSqliteStore;
  if (o.recreate && fs::exists(dir / "pids")) {
    std::ostringstream ignored;
    MERIDIAN_RETURN_IF_ERROR(RunDown(DownOptions{dir.string()}, ignored));
    std::error_code rm;
    for (const char* sub : {"state", "logs", "nodes", "work", "pids", "listening", "fleet.yaml", kStateStoreFile, "mqtt",
                            kAddrFile, kHttpAddrFile, "tls", "gateways",
                            "admin.token",
                            "join.token", "insecure", "netns"}) {
      fs::remove_all(dir / sub, rm);
    }
    if (rm) return UnavailableError(fmt::format("cannot delete the cluster in {}: {}", dir.string(), rm.message()));
  } else if (StatusOr<std::string> before = spec::ReadFileToString(made_from.string());
             before.ok() && *before != fleet_text) {
    return FailedPreconditionError(fmt::format(
        "the local cluster in {} was made from another fleet; 'meridian up --recreate' deletes it (jobs and "
        "objects too) and starts one from {}, or give another --dir",
        dir.string(), fleet_path));
  } else if (StatusOr<std::string> kept_store = ReadSmallFile(dir / kStateStoreFile);
             before.ok() && kept_store.ok() && *kept_store != store_now) {
    return FailedPreconditionError(fmt::format(
        "the local cluster in {} keeps its state in {}, not {}: set MERIDIAN_STATE to that store again{}, or "
        "'meridian up --recreate' deletes the cluster's files and starts it on the store given",
        dir.string(), *kept_store, store_now, *kept_store == kSqliteStore ? " (unset it, for SQLite)" : ""));
  } else if (StatusOr<std::string> kept_netns = ReadSmallFile(dir / "netns");
             before.ok() && (kept_netns.ok() ? *kept_netns : std::string()) != o.netns) {
    return FailedPreconditionError(fmt::format(
        "the local cluster in {} was made {}; 'meridian up --recreate' deletes it (jobs and objects too) and starts "
        "one {}, or give another --dir",
        dir.string(), kept_netns.ok() ? fmt::format("in the namespaces of --netns {}", *kept_netns) : "without --netns",
        o.netns.empty() ? "on this host's loopback" : fmt::format("in --netns {}", o.netns)));
  } else if (before.ok() && fs::exists(dir / "insecure") != o.insecure) {
    return FailedPreconditionError(fmt::format(
        "the local cluster in {} was made {} --insecure; 'meridian up --recreate{}' deletes it (jobs and objects "
        "too) and starts one {}, or give another --dir",
        dir.string(), o.insecure ? "without" : "with", o.insecure ? " --insecure" : "",
        o.insecure ? "without TLS" : "with TLS"));
  }
  std::error_code ec;
  for (const char* sub : {"state", "logs", "nodes", "work", "pids"}) fs::create_directories(dir / sub, ec);
  if (ec) return UnavailableError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(made_from, fleet_text));
  MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(dir / kStateStoreFile, store_now));
  if (o.insecure) {
    MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(dir / "insecure", "made with 'meridian up --insecure': no TLS, no tokens\n"));
  } else {
    std::vector<std::string> hosts = {"127.0.0.1", "localhost", "::1"};
    if (netns) hosts.push_back(netns->core_address);
    MERIDIAN_RETURN_IF_ERROR(MakeClusterCerts((dir / "tls").string(), hosts));
  }
  if (netns) MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(dir / "netns", o.netns + "\n"));
  const std::string self = SelfExecutable();
  const NetnsLayout* layout = netns ? &*netns : nullptr;
  // The coordinators and gateways read the fleet from where it is (its relative paths
  // lead from there), not from the cluster's copy.
  const std::string fleet_abs = fs::absolute(fleet_path).string();
  MERIDIAN_ASSIGN_OR_RETURN(auto coord, StartCoordinators(dir, fleet_abs, o, self, layout));
  rpc::ChannelSecurity security;
  if (!o.insecure) {
    MERIDIAN_ASSIGN_OR_RETURN(security, client::LoadClusterCredentials(dir.string()));
    // A join token for agents that have no certificate yet; short-lived, like any.
    client::Client admin(coord.first, security, 5'000'000);
    MERIDIAN_ASSIGN_OR_RETURN(rpc::NewToken join, admin.CreateToken("meridian-up", "default", model::Role::kAgent,
                                                                     int64_t{10} * 60 * 1'000'000));
    MERIDIAN_RETURN_IF_ERROR(WritePrivateFile(dir / "join.token", join.secret + "\n", true));
  }
  int brokers_started = 0;
  MERIDIAN_ASSIGN_OR_RETURN(auto brokers, StartBrokers(dir, fleet, o.insecure, layout, &brokers_started));
  MERIDIAN_ASSIGN_OR_RETURN(int agents,
                            StartAgents(dir, fleet, coord.first, self, o.real_gpus, o.insecure, layout, brokers));
  agents += brokers_started;
  int gateways_started = 0;
  MERIDIAN_ASSIGN_OR_RETURN(auto gateways,
                            StartGateways(dir, fleet, fleet_abs, coord.first, self, o, layout, &gateways_started));
  agents += gateways_started;
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::NodeView> nodes,
                            WaitForNodes(coord.first, security, fleet.fleet.nodes.size(), dir));
  if (o.quiet) return OkStatus();
  out << fmt::format("local cluster in {}\ncoordinator at {}; {} nodes at {} sites ({} processes started now)\n",
                     dir.string(), coord.first, nodes.size(), fleet.fleet.sites.size(),
                     agents + coord.second);
  if (netns) {
    out << fmt::format("in the network namespaces of --netns {}: the coordinator in {}, each site's agents in its own; "
                       "links shaped by the kernel{}\n",
                       o.netns, netns->core_ns, netns->latency_in_process ? " (latency emulated in-process: no netem)" : "");
  }
  out << (o.insecure ? "INSECURE: no TLS and no tokens; anyone on this machine can run commands through it\n"
                     : fmt::format("TLS with the cluster's own CA ({}/tls); your admin token is {}/admin.token\n",
                                   dir.string(), dir.string()));
  if (StatusOr<std::string> http = ReadSmallFile(dir / kHttpAddrFile); http.ok() && !http->empty()) {
    out << fmt::format("metrics at {}/metrics{}\n", *http,
                       o.insecure ? "" : fmt::format(" (certificate {}/tls/monitor.crt, or the admin token)", dir.string()));
    // The coordinator serves the dashboard when it was built (RunCoordinator's default).
    if (fs::exists(fs::path(MERIDIAN_WEB_DIR) / "index.html")) {
      out << fmt::format("dashboard at {}/{}\n", *http, o.insecure ? "" : " (sign in with a token: meridian token create)");
    }
  }
  for (const auto& [site, b] : brokers) {
    out << fmt::format("MQTT broker of edge site {} at {} (users and passwords in {})\n", site, b.url,
                       (dir / "mqtt" / site).string());
  }
  for (const auto& [site, url] : gateways) {
    out << fmt::format("gateway of site {} at {}/v1/services/NAME/{}\n", site, url,
                       o.gateways == "autoscale" ? "" : " (not autoscaling)");
  }
  if (!gateways.empty()) {
    out << fmt::format("(a service's clients present its token, `meridian service token NAME`; {}/gateways/client.token "
                       "calls every service{})\n",
                       dir.string(),
                       o.insecure ? "" : fmt::format("; the gateways' certificates are of {}/tls/ca.crt", dir.string()));
  }
  out << "\n";
  PrintCluster(nodes, out);
  out << "\nnext: meridian run examples/jobs/sensor-histograms.yaml   (meridian down stops it)\n";
  return OkStatus();
}

Status RunDown(const DownOptions& o, std::ostream& out) {
  const fs::path dir = fs::absolute(o.dir.empty() ? DefaultClusterDir() : o.dir);
  if (!fs::exists(dir / "pids")) return FailedPreconditionError(fmt::format("no local cluster in {}", dir.string()));
  // Agents first, so none reports to a coordinator that is gone; then the coordinator.
  std::vector<std::pair<fs::path, int>> targets;
  for (const auto& entry : fs::directory_iterator(dir / "pids")) {
    if (entry.path().extension() != ".pid") continue;
    targets.emplace_back(entry.path(), ReadPid(entry.path()));
  }
  std::sort(targets.begin(), targets.end(), [](const auto& a, const auto& b) {
    bool ac = a.first.filename() == "coordinator.pid", bc = b.first.filename() == "coordinator.pid";
    return ac != bc ? bc : a.first < b.first;
  });
  int stopped = 0;
  for (auto& [file, pid] : targets) {
    if (ProcessRunning(pid, dir.string())) {
      kill(pid, SIGTERM);
      ++stopped;
    }
  }
  for (int i = 0; i < 100; ++i) {
    bool any = std::any_of(targets.begin(), targets.end(),
                           [&](const auto& t) { return ProcessRunning(t.second, dir.string()); });
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& [file, pid] : targets) {
    if (ProcessRunning(pid, dir.string())) kill(pid, SIGKILL);
    std::error_code ec;
    fs::remove(file, ec);
  }
  out << fmt::format("stopped {} processes of the local cluster in {} (state kept in {})\n", stopped, dir.string(),
                     (dir / "state").string());
  return OkStatus();
}

}  // namespace meridian::cli
