// Service files as a user writes them (`meridian serve`), and replica jobs as a gateway
// reads them back from the coordinator (any tenant may submit a job named like a
// replica, so its text is an attacker's as much as a spec is). A spec either parses
// into one that round-trips through its replica jobs unchanged, or gets an error with
// a message; a replica job's text either gives a spec and secrets or an error.
//   first byte even: the input (after it) is a service file; odd: a replica job's text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "spec/service_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  namespace spec = meridian::spec;
  if (data[0] % 2 == 1) {
    meridian::StatusOr<spec::ServiceOfReplica> r = spec::ServiceFromReplicaJob(text, "serve/fuzz/r/0");
    MERIDIAN_CHECK_MSG(r.ok() || !r.status().message().empty(), "an error without a message");
    return 0;
  }
  meridian::StatusOr<spec::ServiceSpec> s = spec::ParseServiceSpec(text, "fuzz.yaml");
  if (!s.ok()) {
    MERIDIAN_CHECK_MSG(!s.status().message().empty(), "an error without a message");
    return 0;
  }
  MERIDIAN_CHECK_MSG(!s->regions.empty() && static_cast<int32_t>(s->regions.size()) <= spec::kMaxServiceRegions,
                     "regions out of bounds");
  int32_t replicas = 0;
  for (const spec::ServiceRegion& r : s->regions) {
    MERIDIAN_CHECK_MSG(r.min >= 0 && r.min <= r.max && r.max <= spec::kMaxReplicasPerRegion, "min/max out of bounds");
    replicas += r.max;
  }
  MERIDIAN_CHECK_MSG(replicas <= spec::kMaxServiceReplicas, "more replicas than a service may have");
  MERIDIAN_CHECK_MSG(s->model.empty() != s->command.empty(), "not exactly one handler");
  // Every replica job carries the spec whole: read back, it is the same spec.
  spec::ReplicaSecrets secrets;
  secrets.token = "0123456789abcdef";
  secrets.client_token = std::string(64, 'c');
  const std::string job = spec::ReplicaJobYaml(*s, s->regions.back().region, replicas, secrets, 7, "team-b");
  meridian::StatusOr<spec::ServiceOfReplica> back = spec::ServiceFromReplicaJob(job, "serve/fuzz/r/0");
  MERIDIAN_CHECK_MSG(back.ok(), "a replica job the spec made does not read back");
  MERIDIAN_CHECK_MSG(spec::ServiceSpecYaml(back->spec) == spec::ServiceSpecYaml(*s), "the spec changed on the way");
  MERIDIAN_CHECK_MSG(back->secrets.token == secrets.token && back->secrets.client_token == secrets.client_token &&
                         back->replaces == 7,
                     "the secrets changed on the way");
  return 0;
}
