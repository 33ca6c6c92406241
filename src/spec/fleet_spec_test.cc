#include "spec/fleet_spec.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/units.h"
#include "spec/yaml_reader.h"

namespace meridian::spec {
namespace {

using ::testing::HasSubstr;

constexpr const char* kFleet = R"(sites:
  - {name: us-east, kind: cloud, provider: aws, region: us-east-1, egress: $0.09/GB}
  - {name: eu-west, kind: cloud, region: europe-west4}
links:
  - {between: [us-east, eu-west], rtt: 80ms, bandwidth: 1Gbps, egress: {us-east: $0.02/GB}}
nodes:
  - name: a100
    site: us-east
    count: 3
    cpu: 96
    memory: 680GiB
    devices: {type: a100, count: 8}
    price: $19.42/h
  - name: cpu
    site: eu-west
    cpu: 500m
    memory: 2GiB
tenants:
  - {name: team, quota: {gpus: 4.5, gpus_by_type: {a100: 2, T4: 0.5}, budget_per_day: $120.50}}
throughput:
  kinds:
    - {kind: gemm, unit: TFLOP, per_second: {A100: 250, CPU: 1}}
)";

std::string SourceDir() {
  const char* d = std::getenv("MERIDIAN_SOURCE_DIR");
  return d ? d : ".";
}

TEST(FleetSpecTest, LoadsSitesLinksNodesTenantsAndThroughput) {
  StatusOr<FleetSpec> spec = ParseFleet(kFleet, "fleet.yaml", "");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const model::Fleet& f = spec->fleet;
  ASSERT_EQ(f.sites.size(), 2u);
  EXPECT_EQ(f.sites[1].region, "europe-west4");
  EXPECT_EQ(f.sites[0].egress_micro_usd_per_gb, 90'000);
  ASSERT_EQ(f.links.size(), 1u);
  EXPECT_EQ(f.links[0].rtt_us, 80'000);
  EXPECT_EQ(f.links[0].jitter_us, 0);  // none said
  EXPECT_EQ(f.links[0].bandwidth_bps, kGbps);
  EXPECT_EQ(f.EgressMicroUsdPerGB(SiteId(0), SiteId(1)), 20'000);
  EXPECT_EQ(f.EgressMicroUsdPerGB(SiteId(1), SiteId(0)), 0);  // eu-west's own default
  ASSERT_EQ(f.nodes.size(), 4u);
  EXPECT_EQ(f.nodes[0].name, "a100-0");
  EXPECT_EQ(f.nodes[2].name, "a100-2");
  EXPECT_EQ(f.nodes[3].name, "cpu");
  EXPECT_EQ(f.nodes[0].devices.size(), 8u);
  EXPECT_EQ(f.nodes[0].devices[7].type, "A100");
  EXPECT_EQ(f.nodes[0].devices[7].memory_bytes, 40 * kGiB);  // default for the type
  EXPECT_EQ(f.nodes[0].price_micro_usd_per_hour, 19'420'000);
  EXPECT_EQ(f.nodes[3].cpu_milli, 500);
  EXPECT_EQ(f.nodes[3].accelerator_type(), "CPU");
  ASSERT_EQ(f.tenants.size(), 1u);
  EXPECT_EQ(f.tenants[0].max_gpu_milli, 4500);
  EXPECT_EQ(f.tenants[0].max_gpu_milli_by_type,
            (std::map<std::string, int64_t, std::less<>>{{"A100", 2000}, {"T4", 500}}));  // types canonical
  EXPECT_EQ(f.tenants[0].budget_micro_usd_per_day, 120'500'000);
  EXPECT_EQ(spec->throughput.Lookup("A100", "gemm"), 250.0);
  EXPECT_EQ(spec->throughput.Unit("gemm"), "TFLOP");
}

struct BadFleet {
  const char* name;
  std::string from;  // replaced in kFleet
  std::string to;
  const char* want;  // substring of the error
};

class BadFleetTest : public ::testing::TestWithParam<BadFleet> {};

TEST_P(BadFleetTest, RejectsWithLocatedMessageAndLoadsNothing) {
  const BadFleet& c = GetParam();
  std::string text = kFleet;
  size_t at = text.find(c.from);
  ASSERT_NE(at, std::string::npos) << c.from;
  text.replace(at, c.from.size(), c.to);
  StatusOr<FleetSpec> spec = ParseFleet(text, "fleet.yaml", "");
  ASSERT_FALSE(spec.ok()) << c.name;
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr(c.want)) << c.name;
  EXPECT_THAT(spec.status().message(), HasSubstr("fleet.yaml:")) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadFleetTest,
    ::testing::Values(
        BadFleet{"syntax", "  - name: cpu\n", "  - name: [cpu\n", "fleet.yaml:15:9: invalid YAML"},
        BadFleet{"unknown field", "    price: $19.42/h", "    prce: $19.42/h",
                 "fleet.yaml:13:5: nodes[0]: unknown field 'prce' (expected one of: name, site"},
        BadFleet{"wrong unit", "rtt: 80ms", "rtt: 80 parsecs",
                 "fleet.yaml:5:40: links[0].rtt: unknown unit 'parsecs'"},
        BadFleet{"bandwidth unit", "bandwidth: 1Gbps", "bandwidth: 1GiB", "links[0].bandwidth"},
        BadFleet{"jitter too large", "rtt: 80ms", "rtt: 80ms, jitter: 2min",
                 "fleet.yaml:5:54: links[0].jitter: at most 60s"},
        BadFleet{"jitter without a unit", "rtt: 80ms", "rtt: 80ms, jitter: 5", "links[0].jitter"},
        BadFleet{"negative count", "count: 3", "count: -3",
                 "fleet.yaml:9:12: nodes[0].count: expected an integer from 1 to 1000000, got -3"},
        BadFleet{"negative price", "$19.42/h", "$-19.42/h", "must not be negative"},
        BadFleet{"unknown site in link", "between: [us-east, eu-west]", "between: [us-east, mars]",
                 "links[0].between: unknown site 'mars'"},
        BadFleet{"unknown site of nodes", "site: eu-west", "site: eu-north",
                 "nodes[1].site: unknown site 'eu-north'"},
        BadFleet{"duplicate site", "{name: eu-west,", "{name: us-east,", "duplicate site name 'us-east'"},
        BadFleet{"duplicate node group", "  - name: cpu\n", "  - name: a100\n",
                 "duplicate node group 'a100'"},
        BadFleet{"unknown accelerator", "type: a100", "type: A10O", "unknown accelerator type 'A10O'"},
        BadFleet{"bad site kind", "kind: cloud, provider", "kind: moon, provider",
                 "expected cloud, dc or edge, got 'moon'"},
        BadFleet{"missing cpu", "    cpu: 500m\n", "", "nodes[1]: missing required field 'cpu'"},
        BadFleet{"self link", "[us-east, eu-west]", "[us-east, us-east]", "two different sites"},
        BadFleet{"egress for a site not on the link", "egress: {us-east: $0.02/GB}",
                 "egress: {mars: $0.02/GB}", "unknown field 'mars'"},
        BadFleet{"throughput of unknown type", "A100: 250", "Z9: 250", "unknown accelerator type 'Z9'"},
        BadFleet{"quota of an unknown type", "a100: 2, T4", "a1000: 2, T4",
                 "tenants[0].quota.gpus_by_type: unknown accelerator type 'a1000'"},
        BadFleet{"quota for CPUs by type", "a100: 2, T4", "CPU: 2, T4", "unknown accelerator type 'CPU'"},
        BadFleet{"negative budget", "$120.50", "$-1", "must not be negative"},
        BadFleet{"zero throughput", "A100: 250", "A100: 0", "must be positive"},
        BadFleet{"list where a value goes", "memory: 2GiB", "memory: [2GiB]",
                 "nodes[1].memory: expected a single value"},
        // Refused before the million nodes are made, not at the node after them.
        BadFleet{"group past the node cap", "    cpu: 500m\n", "    count: 999998\n    cpu: 500m\n",
                 "fleet.yaml:16:12: nodes[1].count: node group 'cpu' of 999998 nodes would make the fleet larger than "
                 "1000000 nodes (it has 3)"}),
    [](const ::testing::TestParamInfo<BadFleet>& info) {
      std::string n = info.param.name;
      for (char& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

// A YAML tree takes about 90 times its text: a fleet file is bounded before it is
// parsed (a 50 MB one took 4.6 GB).
TEST(FleetSpecTest, ALinkMaySayHowMuchItsRoundTripVaries) {
  std::string text = kFleet;
  text.replace(text.find("rtt: 80ms"), 9, "rtt: 80ms, jitter: 15ms");
  StatusOr<FleetSpec> spec = ParseFleet(text, "fleet.yaml", "");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->fleet.links[0].rtt_us, 80'000);
  EXPECT_EQ(spec->fleet.links[0].jitter_us, 15'000);
}

TEST(FleetSpecTest, AnOversizedFleetFileIsRefusedBeforeParsing) {
  const std::string path = ::testing::TempDir() + "/huge-fleet.yaml";
  {
    std::ofstream out(path);
    out << "sites: [{name: a}]\nnodes:\n";
    const std::string line = "  - {name: n, site: a, cpu: 1, memory: 1GiB}  # padding padding padding padding\n";
    for (int64_t written = 0; written <= kMaxYamlFileBytes; written += static_cast<int64_t>(line.size())) out << line;
  }
  StatusOr<FleetSpec> spec = LoadFleet(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("over the 8388608-byte limit"));
  EXPECT_THAT(spec.status().message(), HasSubstr("huge-fleet.yaml"));
  std::filesystem::remove(path);
}

TEST(FleetSpecTest, MissingFileIsNotFound) {
  StatusOr<FleetSpec> spec = LoadFleet("/nonexistent/fleet.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(spec.status().message(), HasSubstr("/nonexistent/fleet.yaml"));
}

TEST(FleetSpecTest, ANodeFileMayCarryItsAgentsSettings) {
  StatusOr<NodeConfig> c = ParseNodeConfig(
      "name: n1\nsite: eu\ncpu: 4\nmemory: 8GiB\nagent:\n  coordinator: coord.example.net:7070\n"
      "  join_token_file: /etc/meridian/join.token\n  tls_dir: /var/lib/m/tls\n  work_dir: /var/lib/m/work\n"
      "  transfer_host: 10.1.0.7\n  transfer_port: 7080\n  metrics_listen: 10.1.0.7:7081\n",
      "node.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->node.name, "n1");
  EXPECT_EQ(c->agent.coordinator, "coord.example.net:7070");
  EXPECT_EQ(c->agent.join_token_file, "/etc/meridian/join.token");
  EXPECT_EQ(c->agent.tls_dir, "/var/lib/m/tls");
  EXPECT_EQ(c->agent.work_dir, "/var/lib/m/work");
  EXPECT_EQ(c->agent.transfer_host, "10.1.0.7");
  EXPECT_EQ(c->agent.transfer_port, 7080);
  EXPECT_EQ(c->agent.metrics_listen, "10.1.0.7:7081");

  // Without the map: nothing set (-1: no port given).
  StatusOr<NodeConfig> plain = ParseNodeConfig("name: n1\nsite: eu\ncpu: 4\nmemory: 8GiB\n", "node.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->agent.coordinator, "");
  EXPECT_EQ(plain->agent.transfer_port, -1);

  StatusOr<NodeConfig> typo = ParseNodeConfig("name: n1\nsite: eu\ncpu: 4\nmemory: 8GiB\nagent: {coordinatr: x:1}\n", "node.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(), HasSubstr("coordinatr"));
  StatusOr<NodeConfig> port = ParseNodeConfig("name: n1\nsite: eu\ncpu: 4\nmemory: 8GiB\nagent: {transfer_port: 70000}\n", "node.yaml");
  ASSERT_FALSE(port.ok());
  EXPECT_THAT(port.status().message(), HasSubstr("agent.transfer_port"));
}

TEST(FleetSpecTest, LoadsTheThreeSiteExampleWithGavel) {
  StatusOr<FleetSpec> spec = LoadFleet(SourceDir() + "/tests/fleets/three-sites.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->fleet.sites.size(), 3u);
  EXPECT_EQ(spec->fleet.nodes.size(), 16u);
  EXPECT_TRUE(spec->fleet.nodes.back().devices[0].emulated);
  // Gavel's measurements came in alongside the inline kinds.
  EXPECT_TRUE(spec->throughput.Lookup("V100", "resnet-50-b64").has_value());
  EXPECT_TRUE(spec->throughput.Lookup("L4", "video-transcode").has_value());
}

TEST(FleetSpecTest, LoadsTheAlibabaNodeList) {
  StatusOr<FleetSpec> spec = LoadFleet(SourceDir() + "/tests/fleets/alibaba-gpu-2023.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const model::Fleet& f = spec->fleet;
  ASSERT_EQ(f.nodes.size(), 1213u);
  EXPECT_EQ(f.nodes[0].name, "openb-node-0000");
  EXPECT_EQ(f.nodes[0].cpu_milli, 64000);
  EXPECT_EQ(f.nodes[0].memory_bytes, 262144 * kMiB);
  ASSERT_EQ(f.nodes[0].devices.size(), 2u);
  EXPECT_EQ(f.nodes[0].devices[0].type, "P100");
  EXPECT_EQ(f.nodes[1].site, SiteId(1));  // round-robin over the sites
  // 2 x P100 at $1.46 + 64 cores at $0.04.
  EXPECT_EQ(f.nodes[0].price_micro_usd_per_hour, 2 * 1'460'000 + 64 * 40'000);
}

TEST(FleetSpecTest, NodeListErrorsNameTheLine) {
  std::string text = std::string(kFleet) +
                     "node_lists:\n  - {format: alibaba-gpu-2023, path: /nonexistent.csv, sites: [us-east]}\n";
  StatusOr<FleetSpec> spec = ParseFleet(text, "fleet.yaml", "");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("node_lists[0].path: /nonexistent.csv: no such file"));
}

}  // namespace
}  // namespace meridian::spec
