// Service files (YAML, `kind: service`, docs/serving.md): a model served by replicas
// in one or more regions. `meridian serve FILE` runs each replica as a job of its own,
// one task that runs `meridian replica` on its node; this file reads the spec and
// writes those jobs. Any error names the file, line, column and field; on error
// nothing is returned.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace meridian::spec {

inline constexpr int32_t kMaxServiceRegions = 16;
inline constexpr int32_t kMaxReplicasPerRegion = 256;
inline constexpr int32_t kMaxServiceReplicas = 1024;  // over all its regions

struct ServiceRegion {
  std::string region;  // a region rule (docs/job-spec.md): a site, a region or a prefix
  int32_t min = 1;     // replicas started by `meridian serve`; scale never goes below
  int32_t max = 1;     // nor above
};

// How each region's gateway scales the region's replicas (gateway --autoscale;
// serving::Autoscaler has the rules).
struct ServiceAutoscale {
  double target_inflight = 2.0;          // requests in flight a replica should have
  int64_t latency_target_us = 100'000;   // a replica's mean answer time above this adds one
  int64_t scale_in_after_us = 10'000'000;  // low load this long before one replica goes
};

struct ServiceSpec {
  std::string name;   // [a-z][a-z0-9-]*, at most 63
  // The handler, one of two: a model served by `meridian replica` (dataset://NAME or
  // object://ID: a checkpoint of the trainer's), or a command that serves HTTP on
  // 127.0.0.1:$PORT, run by /bin/sh behind `meridian replica --command-env` (which
  // checks the replicas' token and forwards to it).
  std::string model;
  std::string command;
  std::string health_path = "/healthz";  // a command's: probed, healthy on 200
  int32_t port = 8500;  // replica k of the service listens on port + k on its node
  std::vector<ServiceRegion> regions;
  int32_t max_batch = 32;
  int64_t max_wait_us = 1000;
  std::string resources_yaml;  // the spec's `resources` map, checked, as flow YAML ("" none)
  std::optional<ServiceAutoscale> autoscale;
  // A region's replica that has waited this long for a node there (no room, or the
  // region cut off) may run in the service's other regions (its job's `fallback`,
  // docs/job-spec.md); 0: it waits in its region.
  int64_t fallback_after_us = 0;
};

StatusOr<ServiceSpec> ParseServiceSpec(std::string_view text, std::string_view file);
StatusOr<ServiceSpec> LoadServiceSpec(const std::string& path);

// A replica's job: "serve/NAME/REGION/K" (K the replica's number in the service).
std::string ReplicaJobName(std::string_view service, std::string_view region, int32_t ordinal);
// What the names of `service`'s replica jobs start with ("serve/NAME/"); of every
// service's when it is empty ("serve/").
std::string ReplicaJobNamePrefix(std::string_view service);
struct ReplicaJobId {
  std::string service, region;
  int32_t ordinal = 0;
};
// The parts of a replica job's name; nullopt for any other job's.
std::optional<ReplicaJobId> ParseReplicaJobName(std::string_view name);

// What a service's replicas share, and its gateways read from their jobs: the token
// callers present, and the TLS credentials (PEM) they serve with: the service's own CA
// and the certificate and key it signed (serving::MakeServiceCredentials). Without
// them (a replica job of before TLS) the replicas speak plain HTTP.
//
// `client_token` is the service's clients' token at a site's gateway (`meridian gateway
// --site`, docs/serving.md "Who may call a service"): it lets a client call this
// service there and no other. The replicas never ask for it; empty in a replica job of
// before it (the gateway's own token alone then reaches the service).
struct ReplicaSecrets {
  std::string token;
  std::string tls_ca_pem, tls_cert_pem, tls_key_pem;
  std::string client_token;
  bool tls() const { return !tls_ca_pem.empty(); }
};

// The job file of replica `ordinal` in `region` (one of the spec's): one command task,
// restricted to the region, that runs `meridian replica` on port + ordinal with the
// secrets (in its environment, never on a command line: kReplicaTokenEnv and the
// kReplicaTls*Env): with the model as its input, or in front of the spec's command (in
// its environment as kServiceCommandEnv). With the spec's fallback_after, the job has a
// fallback to the service's other regions, unless it `replaces` a replica that runs in
// its fallback (that one's job id, in its environment as kReplicaReplacesEnv): started
// to bring it home, the new one waits for room in the region. A `tenant` is written as
// the job's: a replica added to a running service is the service's tenant's, whoever
// adds it (an admin's credential, as a site gateway's, takes the spec's tenant; any
// other credential must be of that tenant).
std::string ReplicaJobYaml(const ServiceSpec& spec, const std::string& region, int32_t ordinal,
                           const ReplicaSecrets& secrets, uint64_t replaces = 0, const std::string& tenant = "");
inline constexpr char kReplicaReplacesEnv[] = "REPLICA_REPLACES";
inline constexpr char kReplicaTokenEnv[] = "REPLICA_TOKEN";
// Where a replica job keeps ReplicaSecrets::client_token (a command's front takes it
// out of its command's environment, with the replicas' other secrets).
inline constexpr char kServiceClientTokenEnv[] = "SERVICE_CLIENT_TOKEN";
// A replica job's stop_grace: `meridian replica` drains for at most kReplicaDrainUs of it.
inline constexpr int64_t kReplicaStopGraceUs = 30'000'000;
inline constexpr int64_t kReplicaDrainUs = 25'000'000;
inline constexpr char kReplicaTlsCaEnv[] = "REPLICA_TLS_CA";
inline constexpr char kReplicaTlsCertEnv[] = "REPLICA_TLS_CERT";
inline constexpr char kReplicaTlsKeyEnv[] = "REPLICA_TLS_KEY";
inline constexpr char kServiceCommandEnv[] = "SERVICE_COMMAND";
inline constexpr size_t kMaxServiceCommandBytes = 2048;

// The spec as a service file (kind: service) again: what ParseServiceSpec reads back
// as `spec`. A service's replica jobs carry it (kServiceSpecEnv), so that scaling it
// later starts replicas like the first ones.
std::string ServiceSpecYaml(const ServiceSpec& spec);
inline constexpr char kServiceSpecEnv[] = "SERVICE_SPEC";

// The service spec and the replicas' secrets that a replica job's file
// (ReplicaJobYaml's text, as the coordinator gives it back) carries.
struct ServiceOfReplica {
  ServiceSpec spec;
  ReplicaSecrets secrets;
  uint64_t replaces = 0;  // the job it was started to take the place of (0: none)
};
StatusOr<ServiceOfReplica> ServiceFromReplicaJob(std::string_view job_yaml, std::string_view job_name);

}  // namespace meridian::spec
