// Fleet files (YAML) -> model::Fleet and its throughput table, validated whole.
// The format is documented in docs/fleet-spec.md. Any error names the file, line,
// column and field; on error nothing is returned (no half-loaded fleet).
//
// Thread-safety: pure functions (they read the files they are given).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "model/fleet.h"
#include "model/throughput.h"

namespace meridian::spec {

struct FleetSpec {
  model::Fleet fleet;
  model::ThroughputTable throughput;
};

// `file` names the text in errors; relative paths inside the spec (Gavel table,
// node lists) resolve against `base_dir`.
StatusOr<FleetSpec> ParseFleet(std::string_view text, std::string_view file,
                               const std::string& base_dir);
StatusOr<FleetSpec> LoadFleet(const std::string& path);

// One node as an agent describes itself (`meridian agent --config NODE.yaml`): the
// fields of a fleet file's node group without `count`, and `site` by name. Devices
// found on the machine are added by the agent, not here.
// Its optional `agent:` map says how the agent runs, so that one file configures a
// node's agent (a systemd unit's); command-line flags and MERIDIAN_* variables win.
struct AgentSettings {
  std::string coordinator;      // HOST:PORT[,HOST:PORT...]
  std::string join_token_file;
  std::string tls_dir;
  std::string work_dir;
  std::string transfer_host;    // the address its transfer server listens on
  int64_t transfer_port = -1;   // -1: not given; 0: any free port
  std::string metrics_listen;   // HOST:PORT, or "none"
};
struct NodeConfig {
  model::Node node;
  std::string site;
  AgentSettings agent;
};
StatusOr<NodeConfig> ParseNodeConfig(std::string_view text, std::string_view file);
StatusOr<NodeConfig> LoadNodeConfig(const std::string& path);
// The YAML ParseNodeConfig reads back as `node` at `site`.
std::string NodeConfigYaml(const model::Node& node, std::string_view site);

}  // namespace meridian::spec
