// A fresh, uniquely named directory under /tmp, removed with all it holds when the
// TempDir goes: scratch space for benchmarks and for fetches into a store of the CLI's.
//
// Thread-safety: immutable after Make.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace meridian {

class TempDir {
 public:
  // Creates /tmp/<prefix>-<six random characters>.
  static StatusOr<std::unique_ptr<TempDir>> Make(std::string_view prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace meridian
