// Stream files (YAML, `kind: stream`) -> model::StreamSpec. The format is in
// docs/streams.md. Any error names the file, line, column and field; on error
// nothing is returned.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "model/stream.h"

namespace meridian::spec {

// True when a YAML document's top-level `kind` is `stream` (false for anything else,
// a job file among them, and for text that is not YAML).
bool IsStreamSpec(std::string_view text);

StatusOr<model::StreamSpec> ParseStreamSpec(std::string_view text, std::string_view file);
StatusOr<model::StreamSpec> LoadStreamSpec(const std::string& path);

// The checks every MQTT endpoint gets: a topic of at most 1,024 bytes without NUL,
// a broker URL (when given) of the form mqtt[s]://HOST:PORT. A sink topic (`publish`)
// may not hold the wildcards + and #.
Status CheckMqttEndpoint(const model::MqttEndpoint& endpoint, bool publish);

}  // namespace meridian::spec
