#include "client/objects.h"

#include <algorithm>

#include <fmt/format.h>

namespace meridian::client {

StatusOr<model::ObjectLocation> PutObject(Client& c, std::string_view data, const std::string& site,
                                          const std::string& name, const std::string& from) {
  MERIDIAN_ASSIGN_OR_RETURN(model::ObjectReplica target, c.PlacePut(static_cast<int64_t>(data.size()), site));
  MERIDIAN_ASSIGN_OR_RETURN(std::shared_ptr<const security::TlsContext> tls, c.TransferTls());
  std::string receipt;
  StatusOr<objects::ObjectId> id =
      objects::Push(target.transfer_address, data, 30'000'000, from, tls, target.ticket, &receipt);
  if (!id.ok()) return id.status().WithPrefix(fmt::format("putting the object on node {}", target.node));
  return c.CommitObject(id->Hex(), static_cast<int64_t>(data.size()), target.node_id, name, receipt);
}

StatusOr<std::unique_ptr<FetchedObject>> FetchObject(Client& c, const std::string& ref, const std::string& site,
                                                     const JobOutput& output) {
  auto out = std::make_unique<FetchedObject>();
  MERIDIAN_ASSIGN_OR_RETURN(out->location, c.Locate(ref, output.job, output.task));
  MERIDIAN_ASSIGN_OR_RETURN(objects::ObjectId id, objects::ObjectId::Parse(out->location.id));
  if (out->location.replicas.empty()) {
    return UnavailableError(fmt::format("object {}: no live node holds it", out->location.id));
  }
  out->from = out->location.replicas.front();
  for (const model::ObjectReplica& r : out->location.replicas) {
    if (!site.empty() && r.site == site) out->from = r;
  }
  MERIDIAN_ASSIGN_OR_RETURN(out->dir, TempDir::Make("meridian-get"));
  // Up to 256 MiB in this process's memory; a larger object arrives into a file of the
  // temporary directory (mapped), so that one larger than the machine's memory can be got.
  constexpr int64_t kInMemoryBytes = int64_t{256} << 20;
  MERIDIAN_ASSIGN_OR_RETURN(out->store, objects::ObjectStore::Open(objects::StoreOptions{
                                            std::min(out->location.size + 1, kInMemoryBytes), out->dir->path()}));
  objects::FetchOptions fo{site};
  MERIDIAN_ASSIGN_OR_RETURN(fo.tls, c.TransferTls());
  fo.ticket = out->location.ticket;
  fo.expected_size = out->location.size;
  StatusOr<objects::FetchStats> f = objects::Fetch(out->from.transfer_address, id, *out->store, fo);
  if (!f.ok()) return f.status().WithPrefix(fmt::format("fetching {} from node {}", out->location.id, out->from.node));
  out->stats = *f;
  MERIDIAN_ASSIGN_OR_RETURN(objects::Pinned pinned, out->store->Pin(id));
  out->pinned.emplace(std::move(pinned));
  return out;
}

StatusOr<std::string> FetchObjectBytes(Client& c, const std::string& ref, const std::string& site, std::string* from,
                                       const JobOutput& output) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<FetchedObject> f, FetchObject(c, ref, site, output));
  if (from != nullptr) *from = fmt::format("{}@{}", f->from.node, f->from.site);
  return std::string(f->data());
}

}  // namespace meridian::client
