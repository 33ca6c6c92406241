// The coordinator's credentials: API tokens (kept as SHA-256 hashes, in the store and
// in memory) and the certificates it signs for joining nodes (docs/security.md).
#include <fmt/format.h>

#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "model/auth.h"

namespace meridian::coordinator {

StatusOr<model::Caller> Coordinator::Authenticate(const std::string& token) {
  std::optional<std::pair<std::string, std::string>> parts = model::SplitApiToken(token);
  if (!parts) return UnauthenticatedError("the token is not a Meridian token (mrd_...)");
  const std::string hash = security::Sha256Hex(parts->second);
  std::lock_guard<std::mutex> lock(auth_mu_);
  auto it = tokens_.find(parts->first);
  // One message for an unknown id and a wrong secret: neither says which ids exist.
  if (it == tokens_.end() || !security::ConstantTimeEquals(it->second.secret_hash, hash)) {
    return UnauthenticatedError(fmt::format("token {} is not known to this coordinator", parts->first));
  }
  const model::TokenRecord& t = it->second;
  if (t.revoked) return UnauthenticatedError(fmt::format("token {} was revoked", t.id));
  if (t.expires_us > 0 && WallUs() >= t.expires_us) return UnauthenticatedError(fmt::format("token {} has expired", t.id));
  return model::Caller{t.user, t.tenant, t.role, "", false};
}

StatusOr<rpc::NewToken> Coordinator::CreateToken(const std::string& user, const std::string& tenant, model::Role role,
                                                 int64_t ttl_us) {
  MERIDIAN_RETURN_IF_ERROR(model::CheckPrincipalName(user, "user"));
  MERIDIAN_RETURN_IF_ERROR(model::CheckPrincipalName(tenant, "tenant"));
  if (ttl_us < 0) return InvalidArgumentError("a token's lifetime cannot be negative");
  if (role == model::Role::kAgent && (ttl_us == 0 || ttl_us > int64_t{24} * 3600 * 1'000'000)) {
    return InvalidArgumentError("a join token (role agent) must expire within 24 h (give --ttl, such as 1h)");
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::string id, security::RandomHex(model::kApiTokenIdHex / 2));
  MERIDIAN_ASSIGN_OR_RETURN(std::string secret, security::RandomHex(model::kApiTokenSecretHex / 2));
  rpc::NewToken out;
  model::TokenRecord& t = out.record;
  t.id = id;
  t.secret_hash = security::Sha256Hex(secret);
  t.user = user;
  t.tenant = tenant;
  t.role = role;
  t.created_us = WallUs();
  t.expires_us = ttl_us > 0 ? t.created_us + ttl_us : 0;
  out.secret = fmt::format("{}{}_{}", model::kApiTokenPrefix, id, secret);
  std::lock_guard<std::mutex> lock(auth_mu_);
  store::StoreBatch batch;
  batch.tokens.push_back(t);
  MERIDIAN_RETURN_IF_ERROR(store_->Apply(batch));
  tokens_[id] = t;
  MERIDIAN_LOG_INFO("token {} created for user {} ({}, tenant {})", id, user, model::RoleName(role), tenant);
  return out;
}

std::vector<model::TokenRecord> Coordinator::ListTokens() {
  std::lock_guard<std::mutex> lock(auth_mu_);
  std::vector<model::TokenRecord> out;
  for (const auto& [id, t] : tokens_) {
    out.push_back(t);
    out.back().secret_hash.clear();
  }
  return out;
}

StatusOr<model::TokenRecord> Coordinator::RevokeToken(const std::string& id) {
  std::lock_guard<std::mutex> lock(auth_mu_);
  auto it = tokens_.find(id);
  if (it == tokens_.end()) return NotFoundError(fmt::format("no token {}", id));
  model::TokenRecord t = it->second;
  if (!t.revoked) {
    t.revoked = true;
    store::StoreBatch batch;
    batch.tokens.push_back(t);
    MERIDIAN_RETURN_IF_ERROR(store_->Apply(batch));
    it->second = t;
    MERIDIAN_LOG_INFO("token {} of user {} revoked", id, t.user);
  }
  t.secret_hash.clear();
  return t;
}

StatusOr<std::pair<std::string, std::string>> Coordinator::Join(const std::string& token, const std::string& node,
                                                                const std::string& csr_pem) {
  if (options_.ca.key_pem.empty()) {
    return FailedPreconditionError("this coordinator has no CA key: it signs no node certificates");
  }
  MERIDIAN_ASSIGN_OR_RETURN(model::Caller caller, Authenticate(token));
  if (caller.role != model::Role::kAgent) {
    return PermissionDeniedError(fmt::format("a join needs a join token (role agent), not {}'s {} token", caller.user,
                                             model::RoleName(caller.role)));
  }
  MERIDIAN_RETURN_IF_ERROR(model::CheckName(node, "node"));
  if (!options_.declared_nodes.empty() && !options_.declared_nodes.count(node)) {
    return PermissionDeniedError(fmt::format("node '{}' is not in the fleet; only its nodes may join", node));
  }
  {
    std::lock_guard lock(mu_);
    auto it = node_by_name_.find(node);
    if (it != node_by_name_.end() && nodes_[it->second].alive) {
      return FailedPreconditionError(fmt::format(
          "node '{}' is live: a second machine cannot join under its name (stop the other, or wait until it is "
          "declared dead)",
          node));
    }
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::string cert,
                            security::SignRequest(options_.ca, csr_pem,
                                                  {"node:" + node, {}, options_.node_cert_valid_for_us, true}));
  MERIDIAN_LOG_INFO("node {} joined with token {} of {}", node, model::SplitApiToken(token)->first, caller.user);
  return std::make_pair(std::move(cert), options_.ca_bundle.empty() ? options_.ca.cert_pem : options_.ca_bundle);
}

}  // namespace meridian::coordinator
