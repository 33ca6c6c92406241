// A task's `resources` map (docs/job-spec.md), read the same way in job files and in
// stream files (whose one task runs the stream).
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "common/status.h"
#include "model/work.h"
#include "spec/yaml_reader.h"

namespace meridian::spec {

// Reads parent["resources"] (absent: `req` as it is) into `req`; errors name the field
// under `path` and what was expected.
Status ParseResourceRequest(const Reader& r, const YAML::Node& parent, const std::string& path,
                            model::ResourceRequest* req);

}  // namespace meridian::spec
