// Strongly typed ids. An Id<Tag> is a dense index into the table that owns the
// entity (the fleet's sites, a job's tasks, ...), so a SiteId cannot be passed where
// a NodeId is expected. Names are kept beside the entity, not in the id.
//
// Thread-safety: value type.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>

namespace meridian {

template <typename Tag>
class Id {
 public:
  using Rep = uint32_t;
  static constexpr Rep kInvalidValue = std::numeric_limits<Rep>::max();

  constexpr Id() = default;
  constexpr explicit Id(Rep value) : value_(value) {}

  constexpr Rep value() const { return value_; }
  constexpr bool valid() const { return value_ != kInvalidValue; }

  friend constexpr auto operator<=>(Id, Id) = default;

 private:
  Rep value_ = kInvalidValue;
};

struct SiteTag {};
struct NodeTag {};
struct JobTag {};
struct TaskTag {};
struct ObjectTag {};
struct TenantTag {};

using SiteId = Id<SiteTag>;
using NodeId = Id<NodeTag>;
using JobId = Id<JobTag>;
using TaskId = Id<TaskTag>;
using ObjectId = Id<ObjectTag>;
using TenantId = Id<TenantTag>;

}  // namespace meridian

template <typename Tag>
struct std::hash<meridian::Id<Tag>> {
  size_t operator()(meridian::Id<Tag> id) const noexcept { return std::hash<uint32_t>()(id.value()); }
};
