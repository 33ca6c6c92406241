#include "model/auth.h"

#include <cctype>

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

Status CheckPrincipalName(std::string_view name, std::string_view what) {
  if (name.empty() || name.size() > 64) return InvalidArgumentError(fmt::format("{}: expected 1 to 64 characters", what));
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' && c != '@') {
      return InvalidArgumentError(fmt::format("{} '{}': only letters, digits and - _ . @ are allowed", what, name));
    }
  }
  return OkStatus();
}

}  // namespace meridian::model
