// Files written whole or not at all: every write and the close checked, so a full
// disk or a file size limit is an error naming the file, never a file cut short.
//
// Thread-safety: pure functions (files are the caller's to share).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace meridian {

// Creates `path` (replacing a file there) with `mode` and writes `data` to it.
Status WriteFileWhole(const std::filesystem::path& path, std::string_view data, mode_t mode = 0644);

// The same through PATH.tmp renamed over `path`: a reader sees the old file or the new
// one, never half of one, and a failed write leaves the old one. The new file has
// `mode` from its creation: 0600 for a secret is never readable by others, not even
// for a moment.
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view data, mode_t mode = 0644);

// Where a user names a file to write (`meridian objects get ID -o PATH`): what PATH
// names is written, as cp would write it. A device, a FIFO or a terminal (/dev/null,
// /dev/stdout, a pipe) is written where it is, never replaced by a file; a link is
// followed, and the file it names replaced whole, keeping that file's mode. A
// directory is refused (kInvalidArgument), and so is a link to nothing, as cp refuses
// to write through one: whoever can make links where outputs go would choose the file.
Status WriteOutputFile(const std::filesystem::path& path, std::string_view data);

struct FileToWrite {
  std::filesystem::path path;
  std::string_view data;
  mode_t mode = 0644;
};

// Files that belong together (a key and its certificate; a new CA and every
// certificate it signed): each is written whole to PATH.tmp first, and only once all
// are are they renamed over their paths, in order. A write that fails removes every
// temporary file and leaves every old file as it was: never some files new and some
// old.
Status WriteFilesTogether(const std::vector<FileToWrite>& files);

}  // namespace meridian
