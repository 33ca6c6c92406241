// For a test: a file size limit (RLIMIT_FSIZE) with SIGXFSZ ignored, so that a write or a
// claim of blocks past it fails with EFBIG, as one on a full disk fails; the limit and
// the signal's disposition are put back when it goes.
//
// Thread-safety: the limit is the whole process's; a test sets it from one thread.
#pragma once

#include <sys/resource.h>

#include <csignal>

namespace meridian::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) : ok_(getrlimit(RLIMIT_FSIZE, &before_) == 0) {
    was_ = std::signal(SIGXFSZ, SIG_IGN);
    Set(bytes);
  }
  ~FileSizeLimit() {
    if (ok_) setrlimit(RLIMIT_FSIZE, &before_);
    std::signal(SIGXFSZ, was_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

  // Moves the limit to `bytes`.
  void Set(rlim_t bytes) {
    struct rlimit limit = before_;
    limit.rlim_cur = bytes;
    ok_ = ok_ && setrlimit(RLIMIT_FSIZE, &limit) == 0;
  }
  // Whether the limit holds (the test should stop if not).
  bool ok() const { return ok_; }

 private:
  struct rlimit before_ = {};
  bool ok_;
  void (*was_)(int) = SIG_DFL;
};

}  // namespace meridian::testing
