// What the SQL stores (SQLite, PostgreSQL) write the same way: a task's devices as one
// column, and which jobs a restarted coordinator takes back with their tasks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meridian::store {

// Jobs whose tasks a restarted coordinator loads: an SQL list of statuses.
inline constexpr const char* kUnfinishedStatuses = "('queued', 'running')";

// Device indices as "0,3" and back.
std::string JoinDevices(const std::vector<int32_t>& devices);
std::vector<int32_t> SplitDevices(std::string_view text);

}  // namespace meridian::store
