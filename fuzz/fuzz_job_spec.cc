// Job specs as a user (or anyone who reaches the API) writes them, against a small
// fixed fleet: a spec either parses into a consistent job or gets a located error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "spec/fleet_spec.h"
#include "spec/job_spec.h"

namespace {

const meridian::spec::FleetSpec& Fleet() {
  static const meridian::spec::FleetSpec fleet = *meridian::spec::ParseFleet(
      "sites:\n"
      "  - {name: us-east, kind: cloud, provider: aws, region: us-east-1, egress: $0.09/GB}\n"
      "  - {name: factory, kind: edge, provider: onprem, region: eu-factory-1}\n"
      "links:\n  - {between: [us-east, factory], rtt: 95ms, bandwidth: 100Mbps}\n"
      "nodes:\n"
      "  - {name: cpu, site: us-east, count: 2, cpu: 4, memory: 8GiB, price: $0.20/h}\n"
      "  - {name: t4, site: factory, cpu: 4, memory: 8GiB, devices: {type: T4, count: 1}, price: $0.05/h}\n",
      "fleet.yaml", "/nonexistent");
  return fleet;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  meridian::StatusOr<meridian::model::Job> job =
      meridian::spec::ParseJob(text, "fuzz.yaml", Fleet().fleet, Fleet().throughput);
  if (!job.ok()) {
    MERIDIAN_CHECK_MSG(!job.status().message().empty(), "an error without a message");
    return 0;
  }
  for (const meridian::model::Task& t : job->tasks) {
    for (meridian::TaskId d : t.after) MERIDIAN_CHECK_MSG(d.value() < job->tasks.size(), "a dependency out of range");
  }
  return 0;
}
