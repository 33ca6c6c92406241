// What the SQL stores (SQLite, PostgreSQL) write and read the same way: a task's
// devices as one column, rows of `tasks` and `attempts` in their column order, and
// which jobs a restarted coordinator takes back with their tasks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/run_state.h"

namespace meridian::store {

// Jobs whose tasks a restarted coordinator loads: an SQL list of statuses.
inline constexpr const char* kUnfinishedStatuses = "('queued', 'running')";

// Device indices as "0,3" and back.
std::string JoinDevices(const std::vector<int32_t>& devices);
std::vector<int32_t> SplitDevices(std::string_view text);

// A row of `tasks` from column `col` on, read through `row.Int(c)` and `row.Str(c)`
// (each store's own way of reading a column).
template <class Row>
model::TaskRecord TaskFromRow(const Row& row, int col) {
  model::TaskRecord t;
  t.job = static_cast<uint64_t>(row.Int(col + 0));
  t.task = static_cast<uint32_t>(row.Int(col + 1));
  t.status = model::ParseTaskStatus(row.Str(col + 2)).value_or(model::TaskStatus::kQueued);
  t.attempt = static_cast<int>(row.Int(col + 3));
  t.failures = static_cast<int>(row.Int(col + 4));
  t.losses = static_cast<int>(row.Int(col + 5));
  t.node = row.Str(col + 6);
  t.site = row.Str(col + 7);
  t.device_type = row.Str(col + 8);
  t.emulated = row.Int(col + 9) != 0;
  t.allocation.cpu_milli = row.Int(col + 10);
  t.allocation.memory_bytes = row.Int(col + 11);
  t.allocation.devices = SplitDevices(row.Str(col + 12));
  t.allocation.device_share_milli = static_cast<int>(row.Int(col + 13));
  t.reason = row.Str(col + 14);
  t.output = row.Str(col + 15);
  t.started_us = row.Int(col + 16);
  t.finished_us = row.Int(col + 17);
  t.output_object = row.Str(col + 18);
  return t;
}

// A row of `attempts`.
template <class Row>
model::AttemptRecord AttemptFromRow(const Row& row) {
  return model::AttemptRecord{static_cast<uint64_t>(row.Int(0)), static_cast<uint32_t>(row.Int(1)),
                              static_cast<int>(row.Int(2)),      row.Str(3),
                              row.Str(4),                        row.Str(5),
                              row.Str(6),                        static_cast<int>(row.Int(7)),
                              row.Int(8),                        row.Int(9)};
}

}  // namespace meridian::store
