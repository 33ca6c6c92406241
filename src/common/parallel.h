// Running a loop's iterations on a few threads at once, for work that waits on
// something else (fetches over links): each iteration runs once, on the calling
// thread or one of up to max_threads - 1 helpers, and the call returns when all
// have finished.
//
// Thread-safety: `fn` is called from several threads at once, each with its own index.
#pragma once

#include <cstddef>
#include <functional>

namespace meridian {

void ParallelFor(size_t count, size_t max_threads, const std::function<void(size_t)>& fn);

}  // namespace meridian
