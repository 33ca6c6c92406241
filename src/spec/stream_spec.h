// Stream files (YAML, `kind: stream`) -> model::StreamSpec. The format is in
// docs/streams.md. Any error names the file, line, column and field; on error
// nothing is returned.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "model/fleet.h"
#include "model/stream.h"
#include "model/work.h"

namespace meridian::spec {

// True when a YAML document's top-level `kind` is `stream` (false for anything else,
// a job file among them, and for text that is not YAML).
bool IsStreamSpec(std::string_view text);

StatusOr<model::StreamSpec> ParseStreamSpec(std::string_view text, std::string_view file);
StatusOr<model::StreamSpec> LoadStreamSpec(const std::string& path);

// A stream submitted as a job: one task at the stream's site that runs
// `meridian stream run` on `text` (given to it as MERIDIAN_STREAM_SPEC) with the
// site's broker (MERIDIAN_MQTT=site: the agent gives it the broker's address and
// credentials). The site must be in the fleet, and of kind edge unless the spec
// names its brokers.
StatusOr<model::Job> ParseStreamJob(std::string_view text, std::string_view file, const model::Fleet& fleet);

// The environment variable a stream job's task reads its spec from.
inline constexpr char kStreamSpecEnv[] = "MERIDIAN_STREAM_SPEC";

// The checks every MQTT endpoint gets: a topic of at most 1,024 bytes without NUL,
// a broker URL (when given) of the form mqtt[s]://HOST:PORT. A sink topic (`publish`)
// may not hold the wildcards + and #.
Status CheckMqttEndpoint(const model::MqttEndpoint& endpoint, bool publish);

// A broker URL, mqtt://HOST:PORT or mqtts://HOST:PORT (an IPv6 host in brackets).
struct MqttUrl {
  bool tls = false;
  std::string host;
  int port = 0;
};
StatusOr<MqttUrl> ParseMqttUrl(std::string_view url);

}  // namespace meridian::spec
