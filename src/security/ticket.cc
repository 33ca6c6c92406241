#include "security/ticket.h"

#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "security/pki.h"

namespace meridian::security {
namespace {

constexpr uint8_t kTicketVersion = 1;
constexpr size_t kMacBytes = 32;
constexpr std::string_view kHex = "0123456789abcdef";

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
bool Take(std::string_view* in, T* v) {
  if (in->size() < sizeof(T)) return false;
  std::memcpy(v, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return true;
}

int HexValue(char c) {
  size_t at = kHex.find(c);
  return at == std::string_view::npos ? -1 : static_cast<int>(at);
}

}  // namespace

StatusOr<std::string> SignTicket(const Ticket& t, std::string_view key) {
  if (t.ids.size() > kMaxTicketIds) {
    return InvalidArgumentError(fmt::format("a ticket for {} objects; at most {}", t.ids.size(), kMaxTicketIds));
  }
  if (t.tenant.size() > 255) return InvalidArgumentError("a tenant name over 255 bytes");
  std::string out;
  out.reserve(32 + t.tenant.size() + t.ids.size() * 16 + kMacBytes);
  Append(&out, kTicketVersion);
  Append(&out, static_cast<uint8_t>(t.kind));
  Append(&out, t.expires_unix_us);
  Append(&out, t.max_bytes);
  Append(&out, static_cast<uint16_t>(t.tenant.size()));
  out += t.tenant;
  Append(&out, static_cast<uint32_t>(t.ids.size()));
  for (const std::string& id : t.ids) {
    if (id.size() != 32) return InvalidArgumentError(fmt::format("'{}' is not an object id", id));
    for (size_t i = 0; i < 32; i += 2) {
      const int hi = HexValue(id[i]), lo = HexValue(id[i + 1]);
      if (hi < 0 || lo < 0) return InvalidArgumentError(fmt::format("'{}' is not an object id", id));
      out += static_cast<char>(hi << 4 | lo);
    }
  }
  out += HmacSha256(key, out);
  return out;
}

StatusOr<Ticket> VerifyTicket(std::string_view bytes, std::string_view key, int64_t now_unix_us) {
  if (bytes.size() > kMaxTicketBytes || bytes.size() < kMacBytes) {
    return PermissionDeniedError(fmt::format("a ticket of {} bytes is no ticket", bytes.size()));
  }
  if (key.empty()) return PermissionDeniedError("this server holds no ticket key yet (not registered)");
  std::string_view body = bytes.substr(0, bytes.size() - kMacBytes);
  if (!ConstantTimeEquals(HmacSha256(key, body), bytes.substr(body.size()))) {
    return PermissionDeniedError("the ticket is not signed by this cluster's coordinator");
  }
  // Signed by the coordinator: well formed unless the versions differ.
  Ticket t;
  uint8_t version = 0, kind = 0;
  uint16_t tenant_length = 0;
  uint32_t count = 0;
  std::string_view in = body;
  if (!Take(&in, &version) || version != kTicketVersion || !Take(&in, &kind) || !Take(&in, &t.expires_unix_us) ||
      !Take(&in, &t.max_bytes) || !Take(&in, &tenant_length) || in.size() < tenant_length) {
    return PermissionDeniedError("a ticket of another version");
  }
  t.tenant.assign(in.substr(0, tenant_length));
  in.remove_prefix(tenant_length);
  if (!Take(&in, &count) || count > kMaxTicketIds || in.size() != size_t{count} * 16 ||
      (kind != static_cast<uint8_t>(TicketKind::kRead) && kind != static_cast<uint8_t>(TicketKind::kPut))) {
    return PermissionDeniedError("a ticket of another version");
  }
  t.kind = static_cast<TicketKind>(kind);
  t.ids.reserve(count);
  for (uint32_t k = 0; k < count; ++k) {
    t.ids.push_back(Hex(in.substr(size_t{k} * 16, 16)));
  }
  if (now_unix_us >= t.expires_unix_us) {
    return PermissionDeniedError(fmt::format("the ticket expired {} s ago; ask the coordinator again",
                                             (now_unix_us - t.expires_unix_us) / 1'000'000));
  }
  return t;
}

std::string PutReceipt(std::string_view key, std::string_view tenant, std::string_view id) {
  return HmacSha256(key, fmt::format("put\n{}\n{}", tenant, id));
}

bool CheckPutReceipt(std::string_view key, std::string_view tenant, std::string_view id, std::string_view receipt) {
  return !key.empty() && ConstantTimeEquals(PutReceipt(key, tenant, id), receipt);
}

StatusOr<std::string> NewTicketKey() { return RandomHex(kTicketKeyBytes); }

std::string TicketKeyFrom(std::string_view ca_key_pem) {
  return Hex(HmacSha256(ca_key_pem, "meridian transfer tickets v1"));
}

std::string GangSecret(std::string_view key, uint64_t job, int32_t gang, int32_t attempt) {
  return Hex(HmacSha256(key, fmt::format("meridian gang secret v1\n{}\n{}\n{}", job, gang, attempt)));
}

std::string GangLaunchProof(std::string_view secret, std::string_view nonce, std::string_view command) {
  std::string data = "meridian gang launch v1\n";
  data += nonce;
  data += command;
  return HmacSha256(secret, data);
}

int64_t UnixNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace meridian::security
