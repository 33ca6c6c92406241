#include "model/run_state.h"

#include <array>
#include <utility>

namespace meridian::model {
namespace {

constexpr std::array<std::pair<JobStatus, std::string_view>, 5> kJobNames{{
    {JobStatus::kQueued, "queued"},
    {JobStatus::kRunning, "running"},
    {JobStatus::kSucceeded, "succeeded"},
    {JobStatus::kFailed, "failed"},
    {JobStatus::kCancelled, "cancelled"},
}};
constexpr std::array<std::pair<TaskStatus, std::string_view>, 7> kTaskNames{{
    {TaskStatus::kBlocked, "blocked"},
    {TaskStatus::kQueued, "queued"},
    {TaskStatus::kAssigned, "assigned"},
    {TaskStatus::kRunning, "running"},
    {TaskStatus::kSucceeded, "succeeded"},
    {TaskStatus::kFailed, "failed"},
    {TaskStatus::kCancelled, "cancelled"},
}};

template <typename E, size_t N>
std::string_view NameOf(const std::array<std::pair<E, std::string_view>, N>& names, E value) {
  for (const auto& [v, name] : names) {
    if (v == value) return name;
  }
  return "unknown";
}

template <typename E, size_t N>
std::optional<E> ValueOf(const std::array<std::pair<E, std::string_view>, N>& names, std::string_view name) {
  for (const auto& [v, n] : names) {
    if (n == name) return v;
  }
  return std::nullopt;
}

}  // namespace

std::string_view JobStatusName(JobStatus s) { return NameOf(kJobNames, s); }
std::string_view TaskStatusName(TaskStatus s) { return NameOf(kTaskNames, s); }
std::optional<JobStatus> ParseJobStatus(std::string_view name) { return ValueOf(kJobNames, name); }
std::optional<TaskStatus> ParseTaskStatus(std::string_view name) { return ValueOf(kTaskNames, name); }

void CountTasks(JobSummary& summary, TaskStatus status, int32_t n) {
  summary.tasks_total += n;
  switch (status) {
    case TaskStatus::kSucceeded: summary.succeeded += n; break;
    case TaskStatus::kFailed: summary.failed += n; break;
    case TaskStatus::kCancelled: summary.cancelled += n; break;
    case TaskStatus::kBlocked:
    case TaskStatus::kQueued: summary.waiting += n; break;
    case TaskStatus::kAssigned:
    case TaskStatus::kRunning: summary.running += n; break;
  }
}

}  // namespace meridian::model
