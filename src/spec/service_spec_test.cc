#include "spec/service_spec.h"

#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "spec/fleet_spec.h"
#include "spec/job_spec.h"

namespace meridian::spec {
namespace {

constexpr const char* kFleet = R"(sites:
  - {name: us-east, region: us-east-1}
  - {name: eu-west, region: eu-west-1}
links:
  - {between: [us-east, eu-west], rtt: 80ms, bandwidth: 1Gbps}
nodes:
  - {name: a, site: us-east, cpu: 8, memory: 32GiB}
  - {name: b, site: eu-west, cpu: 8, memory: 32GiB}
)";

constexpr const char* kService = R"(kind: service
name: digits
model: dataset://digits-model
port: 9000
regions:
  - {region: eu, min: 2, max: 4}
  - {region: us-east, min: 0, max: 3}
batching: {max_batch: 16, max_wait: 2ms}
autoscale: {target_inflight: 1.5, latency_target: 50ms, scale_in_after: 30s}
resources: {cpu: 0.5, memory: 256MiB}
)";

TEST(ServiceSpecTest, ReadsEveryField) {
  StatusOr<ServiceSpec> s = ParseServiceSpec(kService, "svc.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->name, "digits");
  EXPECT_EQ(s->model, "dataset://digits-model");
  EXPECT_EQ(s->port, 9000);
  ASSERT_EQ(s->regions.size(), 2u);
  EXPECT_EQ(s->regions[0].region, "eu");
  EXPECT_EQ(s->regions[0].min, 2);
  EXPECT_EQ(s->regions[0].max, 4);
  EXPECT_EQ(s->regions[1].region, "us-east");
  EXPECT_EQ(s->regions[1].min, 0);
  EXPECT_EQ(s->regions[1].max, 3);
  EXPECT_EQ(s->max_batch, 16);
  EXPECT_EQ(s->max_wait_us, 2000);
  EXPECT_EQ(s->resources_yaml, "{cpu: 0.5, memory: 256MiB}");
  ASSERT_TRUE(s->autoscale.has_value());
  EXPECT_DOUBLE_EQ(s->autoscale->target_inflight, 1.5);
  EXPECT_EQ(s->autoscale->latency_target_us, 50'000);
  EXPECT_EQ(s->autoscale->scale_in_after_us, 30'000'000);
}

TEST(ServiceSpecTest, DefaultsAreOneReplicaAndMaxFollowsMin) {
  StatusOr<ServiceSpec> s =
      ParseServiceSpec("kind: service\nname: m\nmodel: object://00ff00ff00ff00ff00ff00ff00ff00ff\nregions: [{region: eu}, {region: us, min: 3}]\n",
                       "svc.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->port, 8500);
  EXPECT_EQ(s->regions[0].min, 1);
  EXPECT_EQ(s->regions[0].max, 1);
  EXPECT_EQ(s->regions[1].min, 3);
  EXPECT_EQ(s->regions[1].max, 3);
  EXPECT_EQ(s->max_batch, 32);
  EXPECT_EQ(s->max_wait_us, 1000);
  EXPECT_EQ(s->resources_yaml, "");
  EXPECT_FALSE(s->autoscale.has_value());
}

TEST(ServiceSpecTest, ErrorsNameTheFileLineAndField) {
  const std::string head = "kind: service\nname: m\nmodel: dataset://x\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"kind: job\nname: m\nmodel: dataset://x\nregions: [{region: eu}]\n", "svc.yaml:1:7: kind: expected 'service', got 'job'"},
      {"kind: service\nname: Big\nmodel: dataset://x\nregions: [{region: eu}]\n",
       "svc.yaml:2:7: name: expected 1 to 63 of a-z, 0-9 and '-', starting with a letter, got 'Big'"},
      {"kind: service\nname: m\nmodel: /tmp/model\nregions: [{region: eu}]\n",
       "svc.yaml:3:8: model: expected dataset://NAME (letters, digits, '.', '_', '-', ':') or object://ID (32 "
       "lowercase hex digits): a checkpoint put with `meridian data put`; got '/tmp/model'"},
      // What follows the scheme goes into each replica job and is read back from it
      // (the fuzzer's find: a byte that is no UTF-8 came back changed).
      {"kind: service\nname: m\nmodel: dataset://digit\xC1" "-model\nregions: [{region: eu}]\n", "model: expected"},
      {"kind: service\nname: m\nmodel: dataset://\nregions: [{region: eu}]\n", "model: expected"},
      {"kind: service\nname: m\nmodel: dataset://a/b\nregions: [{region: eu}]\n", "model: expected"},
      {"kind: service\nname: m\nmodel: object://00ff\nregions: [{region: eu}]\n", "model: expected"},
      {head, "svc.yaml:1:1: missing required field 'regions'"},
      {head + "regions: []\n", "svc.yaml:4:10: regions: expected 1 to 16 regions"},
      {head + "regions: [{region: eu}, {region: eu}]\n", "svc.yaml:4:34: regions[1].region: region 'eu' is listed twice"},
      {head + "regions: [{region: 'e u'}]\n",
       "svc.yaml:4:20: regions[0].region: expected 1 to 128 of letters, digits, '-', '_' and '.', got 'e u'"},
      {head + "regions: [{region: eu, min: 3, max: 2}]\n", "svc.yaml:4:37: regions[0].max: max 2 is below min 3"},
      {head + "regions: [{region: eu, min: 257}]\n", "regions[0].min"},
      {head + "regions: [{region: eu, max: 256}, {region: us, max: 256}, {region: ap, max: 256}, {region: sa, max: "
              "256}, {region: af, max: 1}]\n",
       "svc.yaml:4:10: regions: the regions' max add up to 1025 replicas; at most 1024"},
      {head + "port: 65535\nregions: [{region: eu, max: 2}]\n",
       "svc.yaml:4:7: port: port 65535 leaves no room for 2 replicas (replica k listens on port + k, at most 65535)"},
      {head + "regions: [{region: eu, min: 0, max: 2}]\n",
       "svc.yaml:4:10: regions: every region's min is 0: the service would start with no replica"},
      {head + "port: 80\nregions: [{region: eu}]\n", "port"},
      {head + "regions: [{region: eu}]\nbatching: {max_batch: 0}\n", "batching.max_batch"},
      {head + "regions: [{region: eu}]\nbatching: {max_wait: 2s}\n", "svc.yaml:5:22: batching.max_wait: expected 0 to 1s"},
      {head + "regions: [{region: eu}]\nresources: {gpus: 1}\n", "unknown field 'gpus'"},
      {head + "regions: [{region: eu}]\nautoscale: {target_inflight: 0}\n",
       "svc.yaml:5:30: autoscale.target_inflight: expected a number >= 0.1, got 0"},
      {head + "regions: [{region: eu}]\nautoscale: {scale_in_after: 10ms}\n",
       "svc.yaml:5:29: autoscale.scale_in_after: expected 1s to 24h"},
      {head + "regions: [{region: eu}]\nautoscale: {target: 2}\n",
       "unknown field 'target' (expected one of: target_inflight, latency_target, scale_in_after)"},
      {head + "regions: [{region: eu}]\nreplicas: 3\n",
       "svc.yaml:5:1: unknown field 'replicas' (expected one of: kind, name, model, command, health, port, regions, "
       "batching, autoscale, fallback_after, resources)"},
      {head + "regions: [{region: eu}]\nfallback_after: 20s\n",
       "svc.yaml:5:17: fallback_after: a replica falls back to the service's other regions, and it has one"},
      {head + "regions: [{region: eu}, {region: us}]\nfallback_after: 10ms\n",
       "svc.yaml:5:17: fallback_after: must be from 1s to 7d"},
      {head + "regions: [{region: eu}, {region: us}]\nfallback_after: soon\n", "svc.yaml:5:17: fallback_after: "},
      {head + "command: 'python3 -m http.server'\nregions: [{region: eu}]\n",
       "svc.yaml:4:10: command: a service has a model or a command, not both"},
      {"kind: service\nname: m\nregions: [{region: eu}]\n", "svc.yaml:1:1: missing required field 'model' (or 'command')"},
      {"kind: service\nname: m\nhealth: /ok\nmodel: dataset://x\nregions: [{region: eu}]\n",
       "svc.yaml:3:9: health: health is a command's (the model's replica has its own)"},
      {"kind: service\nname: m\ncommand: x\nbatching: {max_batch: 4}\nregions: [{region: eu}]\n",
       "svc.yaml:4:11: batching: batching is for a model's replicas; a command batches as it will"},
      {"kind: service\nname: m\ncommand: x\nhealth: \"/a'b\"\nregions: [{region: eu}]\n",
       "svc.yaml:4:9: health: expected a path from '/' of at most 256 letters, digits and /-._~%?=&, got '/a'b'"},
      {"kind: service\nname: m\ncommand: \"a\\x01b\"\nregions: [{region: eu}]\n",
       "svc.yaml:3:10: command: expected 1 to 2048 bytes of UTF-8 text without control characters (run by /bin/sh "
       "with $PORT set)"},
      // A byte that is no UTF-8 came back from the replica job as U+FFFD: a scaled
      // service's new replicas ran another command (the fuzzer's find).
      {"kind: service\nname: m\ncommand: \"echo \xCF" "ok\"\nregions: [{region: eu}]\n",
       "svc.yaml:3:10: command: expected 1 to 2048 bytes of UTF-8 text"},
  };
  for (const auto& [text, want] : cases) {
    StatusOr<ServiceSpec> s = ParseServiceSpec(text, "svc.yaml");
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_THAT(s.status().message(), ::testing::HasSubstr(want)) << text;
  }
}

TEST(ServiceSpecTest, ReplicaJobNamesRoundTrip) {
  EXPECT_EQ(ReplicaJobName("digits", "eu-west", 12), "serve/digits/eu-west/12");
  std::optional<ReplicaJobId> id = ParseReplicaJobName("serve/digits/eu-west/12");
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->service, "digits");
  EXPECT_EQ(id->region, "eu-west");
  EXPECT_EQ(id->ordinal, 12);
  for (const char* other : {"etl", "serve/digits/eu", "serve/digits/eu/x", "serve//eu/1", "serve/d/eu/1/2",
                            "serve/d/eu/", "serve/d/eu/12345", "serving/d/eu/1"}) {
    EXPECT_FALSE(ParseReplicaJobName(other).has_value()) << other;
  }
}

// Every dataset the spec names exists, as one shard of 19,000 bytes.
DatasetResolver AnyDataset() {
  return [](const std::string& name) -> std::optional<model::Dataset> {
    model::ObjectRef shard;
    shard.name = name + "/0";
    shard.size_bytes = 19000;
    return model::Dataset{name, {shard}};
  };
}

// A replica job's file as the cluster of kFleet parses it, any dataset resolving.
StatusOr<model::Job> ParseReplicaJob(const std::string& yaml) {
  StatusOr<FleetSpec> fleet = ParseFleet(kFleet, "fleet.yaml", "");
  if (!fleet.ok()) return fleet.status();
  return ParseJob(yaml, "replica.yaml", fleet->fleet, fleet->throughput, AnyDataset());
}

ReplicaSecrets TokenOnly(std::string token) {
  ReplicaSecrets s;
  s.token = std::move(token);
  return s;
}

// The job `meridian serve` submits for a replica is an ordinary job file: the cluster
// parses it with the region, the model as input, the token in the environment (not on
// the command line), and the spec, which reads back as it was.
TEST(ServiceSpecTest, AReplicaJobIsAJobFileThatCarriesItsService) {
  StatusOr<ServiceSpec> s = ParseServiceSpec(kService, "svc.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string token = "0123456789abcdef0123456789abcdef";
  const std::string yaml = ReplicaJobYaml(*s, "eu", 3, TokenOnly(token));
  StatusOr<FleetSpec> fleet = ParseFleet(kFleet, "fleet.yaml", "");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  DatasetResolver datasets = [](const std::string& name) -> std::optional<model::Dataset> {
    if (name != "digits-model") return std::nullopt;
    model::ObjectRef shard;
    shard.name = "digits-model/0";
    shard.size_bytes = 19000;
    return model::Dataset{name, {shard}};
  };
  StatusOr<model::Job> job = ParseJob(yaml, "replica.yaml", fleet->fleet, fleet->throughput, datasets);
  ASSERT_TRUE(job.ok()) << job.status().ToString() << "\n" << yaml;
  EXPECT_EQ(job->name, "serve/digits/eu/3");
  EXPECT_EQ(job->allowed_regions, std::vector<std::string>{"eu"});
  ASSERT_EQ(job->tasks.size(), 1u);
  const model::Task& t = job->tasks[0];
  EXPECT_EQ(t.command, (std::vector<std::string>{
                           "sh", "-c",
                           "exec \"$MERIDIAN_BIN\" replica --model \"$MERIDIAN_INPUTS/0\" --token-env REPLICA_TOKEN "
                           "--listen 0.0.0.0:9003 --max-batch 16 --max-wait-us 2000"}));
  ASSERT_EQ(t.inputs.size(), 1u);
  EXPECT_EQ(t.inputs[0].name, "digits-model/0");
  EXPECT_EQ(t.env.at("REPLICA_TOKEN"), token);
  EXPECT_EQ(t.resources.cpu_milli, 500);
  EXPECT_EQ(t.resources.memory_bytes, int64_t{256} << 20);
  EXPECT_EQ(t.retries, 20);
  EXPECT_EQ(t.stop_grace_us, 30'000'000);  // stopped, it drains (SIGTERM first)
  StatusOr<ServiceOfReplica> back = ServiceFromReplicaJob(yaml, "serve/digits/eu/3");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->secrets.token, token);
  EXPECT_EQ(ServiceSpecYaml(back->spec), ServiceSpecYaml(*s));
  EXPECT_EQ(back->spec.regions[0].max, 4);
  EXPECT_EQ(back->spec.max_wait_us, 2000);
  ASSERT_TRUE(back->spec.autoscale.has_value());
  EXPECT_DOUBLE_EQ(back->spec.autoscale->target_inflight, 1.5);
  EXPECT_EQ(back->spec.autoscale->latency_target_us, 50'000);
  EXPECT_EQ(back->spec.autoscale->scale_in_after_us, 30'000'000);

  StatusOr<ServiceOfReplica> other = ServiceFromReplicaJob("name: etl\ntasks: [{name: a, kernel: sum}]\n", "job 4 (etl)");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().message(), "job 'job 4 (etl)' is not a replica job of `meridian serve`: no env");
  // A task that is no map (the fuzzer's find: yaml-cpp threw, and the gateway that read
  // it ended) is told as any job that is no replica's.
  StatusOr<ServiceOfReplica> scalar = ServiceFromReplicaJob("name: x\ntasks:\n  - just-a-word\n", "job 5 (x)");
  EXPECT_EQ(scalar.status().ToString(),
            "INVALID_ARGUMENT: job 'job 5 (x)' is not a replica job of `meridian serve`: no single task");
  // The token becomes a header of the gateway's requests: a line break in it (a job
  // written by hand) is refused, as is a short one.
  for (const std::string bad : {"0123456789abcdef\r\nX-Admin: 1", "0123456789abcde", "0123456789ABCDEF"}) {
    std::string forged = ReplicaJobYaml(*s, "eu", 3, TokenOnly("0123456789abcdef"));
    const size_t at = forged.find("0123456789abcdef");
    ASSERT_NE(at, std::string::npos);
    forged.replace(at, 16, YAML::Dump(YAML::Node(bad)));
    StatusOr<ServiceOfReplica> refused_token = ServiceFromReplicaJob(forged, "serve/digits/eu/3");
    ASSERT_FALSE(refused_token.ok()) << bad;
    EXPECT_EQ(refused_token.status().message(),
              "job 'serve/digits/eu/3': REPLICA_TOKEN is not 16 to 256 lowercase hex digits");
  }
  // A job file of kind service is refused, naming the command that runs it.
  StatusOr<model::Job> refused = ParseJob(kService, "svc.yaml", fleet->fleet, fleet->throughput);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "svc.yaml: a service spec (kind: service): start it with `meridian serve svc.yaml`");
}

// `fallback_after`: each region's replica jobs may run in the service's other regions,
// in the service's order, once they have waited; the spec keeps it in the replicas'
// jobs.
TEST(ServiceSpecTest, AReplicaFallsBackToTheServicesOtherRegionsAfterItsWait) {
  StatusOr<ServiceSpec> s = ParseServiceSpec(std::string(kService) + "fallback_after: 20s\n", "svc.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->fallback_after_us, 20'000'000);
  StatusOr<FleetSpec> fleet = ParseFleet(kFleet, "fleet.yaml", "");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  for (const auto& [region, others] : {std::pair<std::string, std::vector<std::string>>{"eu", {"us-east"}},
                                       std::pair<std::string, std::vector<std::string>>{"us-east", {"eu"}}}) {
    const std::string yaml = ReplicaJobYaml(*s, region, 3, TokenOnly("0123456789abcdef"));
    StatusOr<model::Job> job = ParseJob(yaml, "replica.yaml", fleet->fleet, fleet->throughput,
                                        [](const std::string&) -> std::optional<model::Dataset> {
                                          return model::Dataset{"digits-model", {model::ObjectRef{}}};
                                        });
    ASSERT_TRUE(job.ok()) << job.status().ToString() << "\n" << yaml;
    EXPECT_EQ(job->allowed_regions, std::vector<std::string>{region});
    EXPECT_EQ(job->fallback_regions, others);
    EXPECT_EQ(job->fallback_after_us, 20'000'000);
    StatusOr<ServiceOfReplica> back = ServiceFromReplicaJob(yaml, "serve/digits/eu/3");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->spec.fallback_after_us, 20'000'000);
  }
  // A replica started to bring one home (job 17) has no fallback, says which it
  // replaces, and carries the service's spec whole (fallback_after included), as
  // scaling reads it back from any replica.
  const std::string home = ReplicaJobYaml(*s, "eu", 4, TokenOnly("0123456789abcdef"), /*replaces=*/17);
  EXPECT_EQ(home.find("fallback:"), std::string::npos) << home;
  StatusOr<ServiceOfReplica> home_back = ServiceFromReplicaJob(home, "serve/digits/eu/4");
  ASSERT_TRUE(home_back.ok()) << home_back.status().ToString();
  EXPECT_EQ(home_back->spec.fallback_after_us, 20'000'000);
  EXPECT_EQ(home_back->replaces, 17u);
  EXPECT_EQ(ServiceFromReplicaJob(ReplicaJobYaml(*s, "eu", 3, TokenOnly("0123456789abcdef")), "r")->replaces, 0u);
  std::string bad = home;
  bad.replace(bad.find("REPLICA_REPLACES: 17"), 20, "REPLICA_REPLACES: x7");
  EXPECT_EQ(ServiceFromReplicaJob(bad, "serve/digits/eu/4").status().ToString(),
            "INVALID_ARGUMENT: job 'serve/digits/eu/4': REPLICA_REPLACES is not a job id");
  // Without it, a replica waits in its region.
  StatusOr<ServiceSpec> plain = ParseServiceSpec(kService, "svc.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->fallback_after_us, 0);
  EXPECT_EQ(ReplicaJobYaml(*plain, "eu", 3, TokenOnly("0123456789abcdef")).find("fallback"), std::string::npos);
}

// A replica added to a running service names the service's tenant, so that a site
// gateway's admin credential starts it as that tenant's (not the default tenant's);
// one started by `meridian serve` names none: the credential's.
TEST(ServiceSpecTest, AReplicaJobNamesTheTenantItIsAddedFor) {
  StatusOr<ServiceSpec> s = ParseServiceSpec(kService, "svc.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  StatusOr<FleetSpec> fleet = ParseFleet(kFleet, "fleet.yaml", "");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  auto tenant_of = [&](const std::string& yaml) -> std::string {
    StatusOr<model::Job> job = ParseJob(yaml, "replica.yaml", fleet->fleet, fleet->throughput,
                                        [](const std::string&) -> std::optional<model::Dataset> {
                                          return model::Dataset{"digits-model", {model::ObjectRef{}}};
                                        });
    return job.ok() ? job->tenant : job.status().ToString();
  };
  EXPECT_EQ(tenant_of(ReplicaJobYaml(*s, "eu", 3, TokenOnly("0123456789abcdef"), 0, "team-b")), "team-b");
  EXPECT_EQ(tenant_of(ReplicaJobYaml(*s, "eu", 3, TokenOnly("0123456789abcdef"), 17, "team-b")), "team-b");
  EXPECT_EQ(tenant_of(ReplicaJobYaml(*s, "eu", 3, TokenOnly("0123456789abcdef"))), model::Job{}.tenant);
}

// With TLS credentials, the replica serves HTTPS with the certificate and key from its
// environment; the gateway reads the CA from the job. All three, or none.
TEST(ServiceSpecTest, AReplicaJobCarriesTheServicesTlsCredentialsInItsEnvironment) {
  StatusOr<ServiceSpec> s = ParseServiceSpec(kService, "svc.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const ReplicaSecrets secrets{"0123456789abcdef", "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n",
                               "-----BEGIN CERTIFICATE-----\nLEAF\n-----END CERTIFICATE-----\n",
                               "-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n", ""};
  const std::string yaml = ReplicaJobYaml(*s, "eu", 3, secrets);
  StatusOr<model::Job> job = ParseReplicaJob(yaml);
  ASSERT_TRUE(job.ok()) << job.status().ToString() << "\n" << yaml;
  const model::Task& t = job->tasks[0];
  EXPECT_EQ(t.command[2],
            "exec \"$MERIDIAN_BIN\" replica --model \"$MERIDIAN_INPUTS/0\" --token-env REPLICA_TOKEN --tls-cert-env "
            "REPLICA_TLS_CERT --tls-key-env REPLICA_TLS_KEY --listen 0.0.0.0:9003 --max-batch 16 --max-wait-us 2000");
  EXPECT_EQ(t.env.at("REPLICA_TLS_CA"), secrets.tls_ca_pem);
  EXPECT_EQ(t.env.at("REPLICA_TLS_CERT"), secrets.tls_cert_pem);
  EXPECT_EQ(t.env.at("REPLICA_TLS_KEY"), secrets.tls_key_pem);
  StatusOr<ServiceOfReplica> back = ServiceFromReplicaJob(yaml, "serve/digits/eu/3");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->secrets.tls_ca_pem, secrets.tls_ca_pem);
  EXPECT_EQ(back->secrets.tls_cert_pem, secrets.tls_cert_pem);
  EXPECT_EQ(back->secrets.tls_key_pem, secrets.tls_key_pem);
  // A job written by hand with the CA alone, or a value that is not PEM.
  YAML::Node forged = YAML::Load(yaml);
  forged["tasks"][0]["env"].remove("REPLICA_TLS_KEY");
  EXPECT_EQ(ServiceFromReplicaJob(YAML::Dump(forged), "serve/digits/eu/3").status().message(),
            "job 'serve/digits/eu/3': REPLICA_TLS_CA, REPLICA_TLS_CERT and REPLICA_TLS_KEY come together");
  forged["tasks"][0]["env"]["REPLICA_TLS_KEY"] = "KEY";
  EXPECT_EQ(ServiceFromReplicaJob(YAML::Dump(forged), "serve/digits/eu/3").status().message(),
            "job 'serve/digits/eu/3': REPLICA_TLS_KEY is not PEM text");
}

// The clients' token (for site gateways) is kept in the job's environment, not on its
// command line, and reads back; a job of before it has none; a forged one is refused.
TEST(ServiceSpecTest, AReplicaJobKeepsTheServicesClientTokenInItsEnvironment) {
  StatusOr<ServiceSpec> s = ParseServiceSpec(kService, "svc.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ReplicaSecrets secrets;
  secrets.token = "0123456789abcdef";
  secrets.client_token = "fedcba98765432100123456789abcdef";
  const std::string yaml = ReplicaJobYaml(*s, "eu", 3, secrets);
  StatusOr<model::Job> job = ParseReplicaJob(yaml);
  ASSERT_TRUE(job.ok()) << job.status().ToString() << "\n" << yaml;
  const model::Task& t = job->tasks[0];
  EXPECT_EQ(t.env.at("SERVICE_CLIENT_TOKEN"), "fedcba98765432100123456789abcdef");
  EXPECT_EQ(t.command[2].find("fedcba98765432100123456789abcdef"), std::string::npos) << t.command[2];
  StatusOr<ServiceOfReplica> back = ServiceFromReplicaJob(yaml, "serve/digits/eu/3");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->secrets.client_token, "fedcba98765432100123456789abcdef");
  EXPECT_EQ(back->secrets.token, "0123456789abcdef");
  YAML::Node forged = YAML::Load(yaml);
  forged["tasks"][0]["env"].remove("SERVICE_CLIENT_TOKEN");
  back = ServiceFromReplicaJob(YAML::Dump(forged), "serve/digits/eu/3");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->secrets.client_token, "");
  forged["tasks"][0]["env"]["SERVICE_CLIENT_TOKEN"] = "Bearer x\r\nHost: evil";
  EXPECT_EQ(ServiceFromReplicaJob(YAML::Dump(forged), "serve/digits/eu/3").status().message(),
            "job 'serve/digits/eu/3': SERVICE_CLIENT_TOKEN is not 16 to 256 lowercase hex digits");
}

// A service of a command: its replica job runs `meridian replica` in front of the
// command (in the environment, as the token is), with no input; the spec reads back.
TEST(ServiceSpecTest, ACommandServiceRunsTheReplicaInFrontOfItsCommand) {
  constexpr const char* kCommand = R"(kind: service
name: files
command: exec python3 -m http.server "$PORT" --bind 127.0.0.1
health: /
port: 9100
regions: [{region: us-east, min: 1, max: 2}]
)";
  StatusOr<ServiceSpec> s = ParseServiceSpec(kCommand, "files.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->command, "exec python3 -m http.server \"$PORT\" --bind 127.0.0.1");
  EXPECT_EQ(s->health_path, "/");
  EXPECT_EQ(s->model, "");
  StatusOr<FleetSpec> fleet = ParseFleet(kFleet, "fleet.yaml", "");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  const std::string yaml = ReplicaJobYaml(*s, "us-east", 1, TokenOnly("0123456789abcdef"));
  StatusOr<model::Job> job = ParseJob(yaml, "replica.yaml", fleet->fleet, fleet->throughput);
  ASSERT_TRUE(job.ok()) << job.status().ToString() << "\n" << yaml;
  ASSERT_EQ(job->tasks.size(), 1u);
  const model::Task& t = job->tasks[0];
  EXPECT_EQ(t.command, (std::vector<std::string>{
                           "sh", "-c",
                           "exec \"$MERIDIAN_BIN\" replica --command-env SERVICE_COMMAND --health '/' --token-env "
                           "REPLICA_TOKEN --listen 0.0.0.0:9101"}));
  EXPECT_TRUE(t.inputs.empty());
  EXPECT_EQ(t.env.at("SERVICE_COMMAND"), s->command);
  EXPECT_EQ(t.env.at("REPLICA_TOKEN"), "0123456789abcdef");
  StatusOr<ServiceOfReplica> back = ServiceFromReplicaJob(yaml, "serve/files/us-east/1");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ServiceSpecYaml(back->spec), ServiceSpecYaml(*s));
  EXPECT_EQ(back->spec.command, s->command);
  EXPECT_EQ(back->spec.health_path, "/");
}

// The example of the README and docs/serving.md: each of its regions' replica jobs is a
// job the default local cluster (examples/fleets/three-sites.yaml, whose committed
// test copy is tests/fleets/three-sites.yaml) takes.
TEST(ServiceSpecTest, TheExampleServiceFitsTheDefaultLocalCluster) {
  const char* dir = std::getenv("MERIDIAN_SOURCE_DIR");
  const std::string root = dir != nullptr ? dir : ".";
  StatusOr<ServiceSpec> s = LoadServiceSpec(root + "/examples/serving/digits.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->autoscale.has_value());
  StatusOr<FleetSpec> fleet = LoadFleet(root + "/tests/fleets/three-sites.yaml");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  const DatasetResolver datasets = AnyDataset();
  int32_t ordinal = 0;
  for (const ServiceRegion& region : s->regions) {
    const std::string yaml = ReplicaJobYaml(*s, region.region, ordinal++, TokenOnly("0123456789abcdef"));
    StatusOr<model::Job> job = ParseJob(yaml, "replica.yaml", fleet->fleet, fleet->throughput, datasets);
    EXPECT_TRUE(job.ok()) << region.region << ": " << job.status().ToString();
  }
  EXPECT_EQ(ordinal, 2);
}

}  // namespace
}  // namespace meridian::spec
