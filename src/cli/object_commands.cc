// meridian objects put|get|ls: objects in a cluster's agents. The coordinator's
// directory says where an object is (or where to put one); the bytes move between
// this process and an agent over the transfer protocol (objects/transfer.h).
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "client/client.h"
#include "common/units.h"
#include "objects/transfer.h"

namespace meridian::cli {
namespace fs = std::filesystem;
namespace {

nlohmann::json LocationJson(const model::ObjectLocation& l) {
  nlohmann::json replicas = nlohmann::json::array();
  for (const model::ObjectReplica& r : l.replicas) replicas.push_back({{"node", r.node}, {"site", r.site}});
  return {{"id", l.id}, {"name", l.name}, {"size", l.size}, {"replicas", replicas}};
}

std::string Where(const model::ObjectLocation& l) {
  std::string out;
  for (const model::ObjectReplica& r : l.replicas) out += (out.empty() ? "" : ", ") + r.node + "@" + r.site;
  return out.empty() ? "(lost)" : out;
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return NotFoundError(fmt::format("{}: no such file", path));
  std::ifstream f(path, std::ios::binary);
  if (!f) return UnavailableError(fmt::format("{}: cannot open it", path));
  std::string data(static_cast<size_t>(fs::file_size(path, ec)), '\0');
  f.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) return UnavailableError(fmt::format("{}: cannot read it", path));
  return data;
}

}  // namespace

static StatusOr<model::ObjectLocation> PutObject(client::Client& c, std::string_view data, const std::string& site,
                                          const std::string& name) {
  MERIDIAN_ASSIGN_OR_RETURN(model::ObjectReplica target, c.PlacePut(static_cast<int64_t>(data.size()), site));
  StatusOr<objects::ObjectId> id = objects::Push(target.transfer_address, data);
  if (!id.ok()) return id.status().WithPrefix(fmt::format("putting the object on node {}", target.node));
  return c.CommitObject(id->Hex(), static_cast<int64_t>(data.size()), target.node_id, name);
}

Status RunObjectsPut(const ObjectsPutOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string data, ReadWholeFile(o.file));
  MERIDIAN_ASSIGN_OR_RETURN(std::string address, ResolveCoordinator(o.target));
  client::Client c(address);
  MERIDIAN_ASSIGN_OR_RETURN(model::ObjectLocation l, PutObject(c, data, o.site, o.name));
  if (o.json) {
    out << LocationJson(l).dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("{} ({}) -> object {}{} on {}\n", o.file, FormatBytes(l.size), l.id,
                     l.name.empty() ? "" : fmt::format(" named {}", l.name), Where(l));
  return OkStatus();
}

Status RunObjectsGet(const ObjectsGetOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string address, ResolveCoordinator(o.target));
  client::Client c(address);
  MERIDIAN_ASSIGN_OR_RETURN(model::ObjectLocation l, c.Locate(o.ref));
  MERIDIAN_ASSIGN_OR_RETURN(objects::ObjectId id, objects::ObjectId::Parse(l.id));
  // The replica at our site if there is one, else the first.
  const model::ObjectReplica* from = &l.replicas.front();
  for (const model::ObjectReplica& r : l.replicas) {
    if (!o.site.empty() && r.site == o.site) from = &r;
  }
  char tmpl[] = "/tmp/meridian-get-XXXXXX";  // mkdtemp replaces the Xs with a unique name
  if (mkdtemp(tmpl) == nullptr) return UnavailableError("cannot create a temporary directory");
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{tmpl};
  MERIDIAN_ASSIGN_OR_RETURN(auto store, objects::ObjectStore::Open(objects::StoreOptions{l.size + 1, cleanup.dir}));
  StatusOr<objects::FetchStats> f = objects::Fetch(from->transfer_address, id, *store, objects::FetchOptions{o.site});
  if (!f.ok()) return f.status().WithPrefix(fmt::format("fetching {} from node {}", l.id, from->node));
  MERIDIAN_ASSIGN_OR_RETURN(objects::Pinned pinned, store->Pin(id));
  if (o.output.empty() || o.output == "-") {
    std::cout.write(pinned.data().data(), static_cast<std::streamsize>(pinned.data().size()));
    std::cout.flush();
  } else {
    const std::string tmp = o.output + ".part";
    {
      std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
      file.write(pinned.data().data(), static_cast<std::streamsize>(pinned.data().size()));
      if (!file) return UnavailableError(fmt::format("{}: cannot write it", tmp));
    }
    std::error_code ec;
    fs::rename(tmp, o.output, ec);
    if (ec) return UnavailableError(fmt::format("{}: {}", o.output, ec.message()));
  }
  const double gbps = f->seconds > 0 ? static_cast<double>(f->bytes) * 8 / f->seconds / 1e9 : 0;
  std::ostream& note = (o.output.empty() || o.output == "-") ? std::cerr : out;
  if (o.json) {
    nlohmann::json j = LocationJson(l);
    j["from"] = {{"node", from->node}, {"site", from->site}};
    j["seconds"] = f->seconds;
    j["streams"] = f->streams;
    note << j.dump(2) << '\n';
  } else {
    note << fmt::format("object {} ({}) from {}@{} in {:.3f} s ({:.2f} Gbit/s, {} stream{}){}\n", l.id,
                        FormatBytes(l.size), from->node, from->site, f->seconds, gbps, f->streams,
                        f->streams == 1 ? "" : "s",
                        o.output.empty() || o.output == "-" ? "" : fmt::format(" -> {}", o.output));
  }
  return OkStatus();
}

Status RunObjectsList(const ObjectsListOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string address, ResolveCoordinator(o.target));
  client::Client c(address);
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::ObjectLocation> all, c.Objects());
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const model::ObjectLocation& l : all) j.push_back(LocationJson(l));
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  Table t({"OBJECT", "NAME", "SIZE", "REPLICAS"});
  for (const model::ObjectLocation& l : all) t.Add({l.id, l.name.empty() ? "-" : l.name, FormatBytes(l.size), Where(l)});
  t.Print(out);
  return OkStatus();
}

}  // namespace meridian::cli
