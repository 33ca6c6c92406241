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

std::optional<std::pair<std::string, std::string>> SplitApiToken(std::string_view token) {
  const size_t id_at = kApiTokenPrefix.size();
  const size_t secret_at = id_at + kApiTokenIdHex + 1;
  if (token.size() != secret_at + kApiTokenSecretHex || !token.starts_with(kApiTokenPrefix) ||
      token[secret_at - 1] != '_') {
    return std::nullopt;
  }
  for (size_t i = id_at; i < token.size(); ++i) {
    if (i != secret_at - 1 && !std::isxdigit(static_cast<unsigned char>(token[i]))) return std::nullopt;
  }
  return std::make_pair(std::string(token.substr(id_at, kApiTokenIdHex)), std::string(token.substr(secret_at)));
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
