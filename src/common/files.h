// Files written whole or not at all: every write and the close checked, so a full
// disk or a file size limit is an error naming the file, never a file cut short.
//
// Thread-safety: pure functions (files are the caller's to share).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string_view>

#include "common/status.h"

namespace meridian {

// Creates `path` (replacing a file there) with `mode` and writes `data` to it.
Status WriteFileWhole(const std::filesystem::path& path, std::string_view data, mode_t mode = 0644);

// The same through PATH.tmp renamed over `path`: a reader sees the old file or the new
// one, never half of one, and a failed write leaves the old one. The new file has
// `mode` from its creation: 0600 for a secret is never readable by others, not even
// for a moment.
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view data, mode_t mode = 0644);

}  // namespace meridian
