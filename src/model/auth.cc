#include "model/auth.h"

#include <fmt/format.h>

namespace meridian::model {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kSubmitter:
      return "submitter";
    case Role::kAdmin:
      return "admin";
    case Role::kAgent:
      return "agent";
  }
  return "?";
}

std::optional<Role> ParseRole(std::string_view name) {
  for (Role r : {Role::kViewer, Role::kSubmitter, Role::kAdmin, Role::kAgent}) {
    if (RoleName(r) == name) return r;
  }
  return std::nullopt;
}

std::string Caller::Describe() const {
  if (insecure) return "an unauthenticated caller (insecure coordinator)";
  if (!node.empty()) return fmt::format("node {}", node);
  return fmt::format("user {} ({}, tenant {})", user, RoleName(role), tenant);
}

}  // namespace meridian::model
