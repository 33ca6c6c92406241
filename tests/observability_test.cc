// Metrics as an operator reads them: a real cluster, a job whose inputs cross a WAN
// link, and the coordinator's and agents' /metrics read over HTTPS with the cluster's
// certificates, checked figure by figure and by Prometheus's own `promtool check
// metrics`; and who is refused.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "local_cluster.h"

namespace meridian::testing {
namespace {

struct Got {
  int status = 0;  // 0: no answer (the connection or handshake failed)
  std::string body;
};

// GET `url` ("https://host:port/path") with the cluster's CA, the certificate pair
// `cert` of its tls directory (empty: none) and a bearer token (empty: none).
// `verify_host`: check the server's name against the URL (an agent's certificate
// names its node, not a host).
Got Fetch(const LocalCluster& cluster, const std::string& url, const std::string& cert, const std::string& token,
          bool verify_host = true) {
  const std::string tls = cluster.dir() + "/tls/";
  const size_t host_start = url.find("://") + 3;
  const size_t path_start = url.find('/', host_start);
  const std::string hostport = url.substr(host_start, path_start - host_start);
  const size_t colon = hostport.rfind(':');
  std::unique_ptr<httplib::SSLClient> c =
      cert.empty() ? std::make_unique<httplib::SSLClient>(hostport.substr(0, colon), std::stoi(hostport.substr(colon + 1)))
                   : std::make_unique<httplib::SSLClient>(hostport.substr(0, colon), std::stoi(hostport.substr(colon + 1)),
                                                          tls + cert + ".crt", tls + cert + ".key");
  c->set_ca_cert_path((tls + "ca.crt").c_str());
  c->enable_server_certificate_verification(verify_host);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  httplib::Result r = c->Get(url.substr(path_start).c_str(), headers);
  if (!r) return {};
  return {r->status, r->body};
}

// The value of the series written exactly as `series` (name and labels), or NaN.
double Value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 && line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return std::nan("");
}

// `promtool check metrics` on `text`: its exit code and what it printed.
std::pair<int, std::string> Promtool(const LocalCluster& cluster, const std::string& text, const std::string& name) {
  const std::string in = cluster.WriteFile(name + ".prom", text);
  const std::string out = cluster.dir() + "/" + name + ".promtool";
  const int rc = std::system(("promtool check metrics < " + in + " > " + out + " 2>&1").c_str());
  std::ifstream f(out);
  std::stringstream s;
  s << f.rdbuf();
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, s.str()};
}

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

TEST(ObservabilityTest, MetricsOfTheCoordinatorAndEveryAgentCountWhatAJobDid) {
  ASSERT_EQ(std::system("command -v promtool > /dev/null"), 0)
      << "promtool is missing: ./scripts/install-deps.sh installs Debian's prometheus package";
  LocalCluster cluster(SourceDir() + "/tests/fleets/local-three-sites.yaml");
  ASSERT_TRUE(cluster.Up());
  const std::string http = ReadLine(cluster.dir() + "/http.addr");
  ASSERT_EQ(http.rfind("https://127.0.0.1:", 0), 0u) << http;

  // Six 16 KiB shards at the factory, read by one task that needs an A100 (eu-west),
  // and eight no-op tasks.
  ASSERT_TRUE(cluster.PutLetterShards("parts", "factory", 6, 16 << 10));
  StatusOr<model::JobView> v = cluster.RunJob(
      "name: gather\ntasks:\n  - {name: gather, kernel: wordcount, inputs: [dataset://parts], "
      "resources: {accelerator: A100}}\n  - {name: noop, kernel: noop, count: 8}\n");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->summary.job.status, model::JobStatus::kSucceeded) << v->summary.job.reason;

  // The coordinator's, with the monitoring certificate `meridian up` made. The link's
  // bytes come with the factory agent's heartbeats: wait for them.
  Got coord;
  for (int i = 0; i < 200; ++i) {
    coord = Fetch(cluster, http + "/metrics", "monitor", "");
    ASSERT_EQ(coord.status, 200) << coord.body;
    if (Value(coord.body, R"(meridian_link_sent_bytes_total{from_site="factory",to_site="eu-west"})") > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string& m = coord.body;
  EXPECT_EQ(Value(m, "meridian_jobs_submitted_total"), 1) << m;
  EXPECT_EQ(Value(m, R"(meridian_jobs{status="succeeded"})"), 1);
  EXPECT_EQ(Value(m, R"(meridian_jobs{status="running"})"), 0);
  EXPECT_EQ(Value(m, R"(meridian_tasks{state="succeeded"})"), 9);
  EXPECT_EQ(Value(m, R"(meridian_tasks{state="waiting"})"), 0);
  EXPECT_EQ(Value(m, "meridian_placements_total"), 9);
  EXPECT_EQ(Value(m, R"(meridian_task_attempts_total{outcome="succeeded"})"), 9);
  EXPECT_EQ(Value(m, "meridian_placement_latency_seconds_count"), 9);
  EXPECT_EQ(Value(m, R"(meridian_placement_latency_seconds_bucket{le="+Inf"})"), 9);
  EXPECT_EQ(Value(m, "meridian_queue_depth"), 0);
  EXPECT_EQ(Value(m, R"(meridian_nodes{state="alive"})"), 4);
  EXPECT_EQ(Value(m, R"(meridian_nodes{state="dead"})"), 0);
  EXPECT_EQ(Value(m, R"(meridian_devices{type="A100"})"), 2);
  EXPECT_EQ(Value(m, R"(meridian_devices{type="T4"})"), 1);
  EXPECT_EQ(Value(m, R"(meridian_devices_busy{type="A100"})"), 0);
  EXPECT_EQ(Value(m, "meridian_cpu_cores"), 16);
  EXPECT_EQ(Value(m, R"(meridian_link_sent_bytes_total{from_site="factory",to_site="eu-west"})"), 6 * (16 << 10));
  EXPECT_EQ(Value(m, R"(meridian_link_transfers_total{from_site="factory",to_site="eu-west"})"), 6);
  EXPECT_GT(Value(m, "meridian_store_commit_seconds_count"), 0);
  auto [rc, lint] = Promtool(cluster, m, "coordinator");
  EXPECT_EQ(rc, 0) << lint;

  // Every agent's, through the coordinator (which checks the agent's certificate
  // names the node); the nodes come from the service-discovery list.
  Got sd = Fetch(cluster, http + "/sd/nodes", "monitor", "");
  ASSERT_EQ(sd.status, 200) << sd.body;
  nlohmann::json targets = nlohmann::json::parse(sd.body);
  ASSERT_EQ(targets.size(), 4u) << sd.body;
  const std::string gather_node = v->tasks.front().record.node;
  double attempts = 0;
  for (const nlohmann::json& t : targets) {
    const std::string node = t["labels"]["node"];
    EXPECT_EQ(t["targets"], nlohmann::json::array({http.substr(8)}));
    EXPECT_EQ(t["labels"]["__metrics_path__"], "/nodes/" + node + "/metrics");
    Got a = Fetch(cluster, http + "/nodes/" + node + "/metrics", "monitor", "");
    ASSERT_EQ(a.status, 200) << node << ": " << a.body;
    EXPECT_EQ(Value(a.body, "meridian_agent_connected"), 1) << node;
    EXPECT_EQ(Value(a.body, "meridian_agent_tasks_running"), 0) << node;
    const double ended = Value(a.body, R"(meridian_agent_task_attempts_total{outcome="succeeded"})");
    if (!std::isnan(ended)) attempts += ended;
    // The reports of what ran here went on the node's session, acknowledged there.
    if (!std::isnan(ended) && ended > 0) {
      EXPECT_GE(Value(a.body, R"(meridian_agent_heartbeats_total{over="session"})"), 1) << node << ": " << a.body;
    }
    if (node == gather_node) {
      EXPECT_EQ(Value(a.body, R"(meridian_agent_fetched_bytes_total{from_site="factory"})"), 6 * (16 << 10)) << a.body;
    }
    if (node == "edge-t4") {
      EXPECT_EQ(Value(a.body, R"(meridian_agent_sent_bytes_total{to_site="eu-west"})"), 6 * (16 << 10)) << a.body;
      EXPECT_EQ(Value(a.body, R"(meridian_agent_devices{type="T4",emulated="true"})"), 1) << a.body;
      auto [arc, alint] = Promtool(cluster, a.body, "agent");
      EXPECT_EQ(arc, 0) << alint;
    }
  }
  EXPECT_EQ(attempts, 9);
  EXPECT_EQ(gather_node, "eu-a100");

  // Straight from an agent: the monitoring certificate only (its certificate names
  // the node, not a host: the name is not checked here).
  CommandResult nodes = Meridian({"nodes", "--json", "--dir", cluster.dir()});
  ASSERT_EQ(nodes.exit_code, 0) << nodes.err;
  std::string agent_url;
  for (const nlohmann::json& n : nlohmann::json::parse(nodes.out)) {
    if (n["name"] == "edge-t4") agent_url = n["metrics_url"];
  }
  ASSERT_EQ(agent_url.rfind("https://127.0.0.1:", 0), 0u) << nodes.out;
  Got direct = Fetch(cluster, agent_url + "/metrics", "monitor", "", false);
  EXPECT_EQ(direct.status, 200) << direct.body;
  EXPECT_EQ(Value(direct.body, R"(meridian_agent_sent_bytes_total{to_site="eu-west"})"), 6 * (16 << 10));
  Got as_client = Fetch(cluster, agent_url + "/metrics", "client", "", false);
  EXPECT_EQ(as_client.status, 403) << as_client.body;
  Got anonymous = Fetch(cluster, agent_url + "/metrics", "", "", false);
  EXPECT_EQ(anonymous.status, 401) << anonymous.body;
  EXPECT_EQ(anonymous.body,
            "an agent's metrics need a monitoring certificate of the cluster's CA (meridian certs issue monitor "
            "--name NAME)\n");
}

TEST(ObservabilityTest, TheCoordinatorsMetricsAnswerMonitorsAndAdminsOnly) {
  LocalCluster cluster(SourceDir() + "/tests/fleets/local-three-sites.yaml");
  ASSERT_TRUE(cluster.Up());
  const std::string http = ReadLine(cluster.dir() + "/http.addr");
  const std::string admin = ReadLine(cluster.dir() + "/admin.token");
  StatusOr<rpc::NewToken> viewer = cluster.client().CreateToken("vera", "default", model::Role::kViewer, 0);
  ASSERT_TRUE(viewer.ok()) << viewer.status().ToString();

  Got a = Fetch(cluster, http + "/metrics", "", admin);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(Value(a.body, R"(meridian_nodes{state="alive"})"), 4);
  Got v = Fetch(cluster, http + "/metrics", "", viewer->secret);
  EXPECT_EQ(v.status, 403);
  EXPECT_EQ(v.body,
            "user vera (viewer, tenant default) may not read metrics: they are every tenant's (an admin's token, or "
            "a monitoring certificate)\n");
  Got none = Fetch(cluster, http + "/metrics", "", "");
  EXPECT_EQ(none.status, 401);
  // A user's certificate without a token is no one.
  Got cert_only = Fetch(cluster, http + "/metrics", "client", "");
  EXPECT_EQ(cert_only.status, 401);
  // `meridian status` names both URLs (the dashboard's once web/ is built).
  CommandResult status = Meridian({"status", "--json", "--dir", cluster.dir()});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  nlohmann::json st = nlohmann::json::parse(status.out);
  EXPECT_EQ(st["metrics_url"], http + "/metrics");
  if (std::filesystem::exists(SourceDir() + "/web/dist/index.html")) {
    EXPECT_EQ(st["dashboard_url"], http + "/");
  } else {
    EXPECT_TRUE(st["dashboard_url"].is_null()) << status.out;
  }
  EXPECT_EQ(st["nodes_alive"], 4);
  EXPECT_EQ(st["sites"], 3);
  EXPECT_EQ(st["role"], "admin");
  Got forged = Fetch(cluster, http + "/metrics", "", "mrd_0123456789abcdef_forged");
  EXPECT_EQ(forged.status, 401);
  Got sd = Fetch(cluster, http + "/sd/nodes", "", viewer->secret);
  EXPECT_EQ(sd.status, 403);
  Got proxied = Fetch(cluster, http + "/nodes/edge-t4/metrics", "client", "");
  EXPECT_EQ(proxied.status, 401);
  Got missing = Fetch(cluster, http + "/nodes/nosuch/metrics", "monitor", "");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body, "no node 'nosuch'\n");
  Got unknown = Fetch(cluster, http + "/nope", "monitor", "");
  EXPECT_EQ(unknown.status, 404);
  // Each refusal is in the coordinator's log, with why.
  std::ifstream log(cluster.dir() + "/logs/coordinator.log");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_NE(text.str().find("audit: refused GET /metrics from 127.0.0.1:"), std::string::npos);
  EXPECT_NE(text.str().find("user vera (viewer, tenant default) may not read metrics"), std::string::npos);
}

}  // namespace
}  // namespace meridian::testing
