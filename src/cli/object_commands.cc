// meridian objects put|get|ls: objects in a cluster's agents. The coordinator's
// directory says where an object is (or where to put one); the bytes move between
// this process and an agent over the transfer protocol (objects/transfer.h).
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "client/client.h"
#include "client/objects.h"
#include "common/mapped_file.h"
#include "common/temp_dir.h"
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

}  // namespace

namespace {

using client::FetchedObject;
using client::FetchObject;
using client::PutObject;

// One put carries at most objects::kMaxPutBytes: a larger file is refused before any
// of it is read, with the way to put it.
Status CheckPutSize(std::string_view what, int64_t size, std::string_view instead) {
  if (size <= objects::kMaxPutBytes) return OkStatus();
  return InvalidArgumentError(fmt::format("{} is {}; one put carries at most {}: {}", what, FormatBytes(size),
                                          FormatBytes(objects::kMaxPutBytes), instead));
}

// A stretch of a file that goes into a shard.
struct Piece {
  std::string path;
  int64_t offset = 0;
  int64_t length = 0;
};

// A shard to be: where its bytes are and the site it goes to (empty: the next in
// turn). Its bytes are read only when it is put, one shard at a time.
struct ShardPlan {
  std::vector<Piece> pieces;
  std::string site;
  std::string from;  // what it was made of, for the summary
  int64_t size() const {
    int64_t n = 0;
    for (const Piece& p : pieces) n += p.length;
    return n;
  }
};

// Cuts `data` into n pieces of about equal size, each ending at a line end when
// there is one (records stay whole): each piece's offset and length.
std::vector<std::pair<int64_t, int64_t>> SplitAtLines(std::string_view data, int n) {
  std::vector<std::pair<int64_t, int64_t>> out;
  size_t start = 0;
  for (int i = 1; i <= n; ++i) {
    size_t end = i == n ? data.size() : std::max(start, data.size() * static_cast<size_t>(i) / static_cast<size_t>(n));
    if (i < n && end < data.size()) {
      size_t nl = data.find('\n', end);
      end = nl == std::string_view::npos ? data.size() : nl + 1;
    }
    out.emplace_back(static_cast<int64_t>(start), static_cast<int64_t>(end - start));
    start = end;
  }
  return out;
}

StatusOr<std::vector<std::string>> FilesIn(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) files.push_back(e.path().string());
  }
  if (ec) return UnavailableError(fmt::format("{}: {}", dir.string(), ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

// The shards of a directory's files: one per file, or `n` groups of whole files.
StatusOr<std::vector<ShardPlan>> ShardFiles(const std::vector<std::string>& files, int n, const std::string& site) {
  std::vector<ShardPlan> out;
  if (files.empty()) return out;
  const size_t groups = n > 0 ? static_cast<size_t>(n) : files.size();
  out.resize(std::min(groups, files.size()));
  for (size_t i = 0; i < files.size(); ++i) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(files[i], ec);
    if (ec) return UnavailableError(fmt::format("{}: {}", files[i], ec.message()));
    ShardPlan& p = out[i % out.size()];
    p.pieces.push_back(Piece{files[i], 0, static_cast<int64_t>(size)});
    p.site = site;
    p.from += (p.from.empty() ? "" : " ") + fs::path(files[i]).filename().string();
  }
  return out;
}

StatusOr<std::vector<ShardPlan>> PlanShards(const DataPutOptions& o) {
  std::error_code ec;
  if (o.by_site) {
    if (!fs::is_directory(o.path, ec)) return InvalidArgumentError(fmt::format("--by-site: {} is not a directory", o.path));
    std::vector<ShardPlan> out;
    std::vector<std::string> sites;
    for (const auto& e : fs::directory_iterator(o.path, ec)) {
      if (e.is_directory()) sites.push_back(e.path().filename().string());
    }
    std::sort(sites.begin(), sites.end());
    for (const std::string& site : sites) {
      MERIDIAN_ASSIGN_OR_RETURN(std::vector<std::string> files, FilesIn(fs::path(o.path) / site));
      MERIDIAN_ASSIGN_OR_RETURN(std::vector<ShardPlan> part, ShardFiles(files, 0, site));
      for (ShardPlan& p : part) out.push_back(std::move(p));
    }
    return out;
  }
  if (fs::is_directory(o.path, ec)) {
    MERIDIAN_ASSIGN_OR_RETURN(std::vector<std::string> files, FilesIn(o.path));
    return ShardFiles(files, o.shards, o.site);
  }
  // One file: cut where lines end, found in the mapped file (read, not held).
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(o.path));
  std::vector<ShardPlan> out;
  for (const auto& [offset, length] : SplitAtLines(file->data(), o.shards > 0 ? o.shards : 1)) {
    out.push_back(ShardPlan{{Piece{o.path, offset, length}}, o.site, fs::path(o.path).filename().string()});
  }
  return out;
}

// A shard's bytes: a view of its file where it is one stretch of one, else its
// files read one after another into `buffer`.
StatusOr<std::string_view> ShardBytes(const ShardPlan& p, std::unique_ptr<MappedFile>& mapped, std::string& buffer) {
  buffer.clear();
  for (const Piece& piece : p.pieces) {
    MERIDIAN_ASSIGN_OR_RETURN(mapped, MappedFile::Open(piece.path));
    if (piece.offset + piece.length > mapped->size()) {
      return UnavailableError(fmt::format("{}: it shrank to {} while it was put", piece.path, FormatBytes(mapped->size())));
    }
    const std::string_view bytes = mapped->data().substr(static_cast<size_t>(piece.offset), static_cast<size_t>(piece.length));
    if (p.pieces.size() == 1) return bytes;
    buffer.append(bytes);
  }
  mapped.reset();
  return std::string_view(buffer);
}

}  // namespace

Status RunDataPut(const DataPutOptions& o, std::ostream& out) {
  if (o.name.empty()) return InvalidArgumentError("--name is required: jobs read the dataset as dataset://NAME");
  if (o.shards < 0 || o.shards > 100'000) return InvalidArgumentError("--shards: expected 1 to 100000");
  if (o.by_site && (!o.site.empty() || o.shards > 0)) {
    return InvalidArgumentError("--by-site places each subdirectory's files at its site: give no --site or --shards");
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<ShardPlan> plan, PlanShards(o));
  if (plan.empty()) return InvalidArgumentError(fmt::format("{}: nothing to put (no files)", o.path));
  for (size_t i = 0; i < plan.size(); ++i) {
    MERIDIAN_RETURN_IF_ERROR(CheckPutSize(fmt::format("shard {} ({})", i, plan[i].from), plan[i].size(),
                                          "cut the data into smaller shards (--shards N cuts a file at line ends, "
                                          "or groups a directory's files)"));
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> connected, ConnectClient(o.target));
  client::Client& c = *connected;
  // Refuse a taken name before moving any bytes.
  if (c.GetDataset(o.name).ok()) {
    return AlreadyExistsError(fmt::format("a dataset named '{}' exists; dataset names are never reused", o.name));
  }
  // Spread: the sites that have live nodes, in turn.
  std::vector<std::string> sites;
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::NodeView> nodes, c.Nodes());
  for (const model::NodeView& n : nodes) {
    if (n.alive && std::find(sites.begin(), sites.end(), n.site) == sites.end()) sites.push_back(n.site);
  }
  std::sort(sites.begin(), sites.end());
  if (sites.empty()) return UnavailableError("the cluster has no live nodes to hold the shards");
  std::vector<model::HeldObject> shards;
  std::vector<model::ObjectLocation> placed;
  std::unique_ptr<MappedFile> mapped;
  std::string buffer;
  for (size_t i = 0; i < plan.size(); ++i) {
    const std::string site = !plan[i].site.empty() ? plan[i].site : sites[i % sites.size()];
    StatusOr<std::string_view> bytes = ShardBytes(plan[i], mapped, buffer);
    if (!bytes.ok()) return bytes.status().WithPrefix(fmt::format("shard {} ({})", i, plan[i].from));
    StatusOr<model::ObjectLocation> l = PutObject(c, *bytes, site, "", o.from);
    if (!l.ok()) return l.status().WithPrefix(fmt::format("shard {} ({})", i, plan[i].from));
    shards.push_back(model::HeldObject{l->id, l->size});
    placed.push_back(*l);
  }
  MERIDIAN_ASSIGN_OR_RETURN(model::DatasetView d, c.DefineDataset(o.name, shards));
  if (o.json) {
    nlohmann::json j = {{"name", d.name}, {"shards", nlohmann::json::array()}};
    for (const model::ObjectLocation& l : d.shards) j["shards"].push_back(LocationJson(l));
    out << JsonText(j) << '\n';
    return OkStatus();
  }
  int64_t total = 0;
  std::map<std::string, int64_t> by_site;
  for (const model::ObjectLocation& l : placed) {
    total += l.size;
    if (!l.replicas.empty()) by_site[l.replicas.front().site] += l.size;
  }
  out << fmt::format("dataset://{}: {} shards, {}", d.name, d.shards.size(), FormatBytes(total));
  for (const auto& [site, bytes] : by_site) out << fmt::format("; {} at {}", FormatBytes(bytes), site);
  out << '\n';
  return OkStatus();
}

Status RunDataList(const DataListOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> connected, ConnectClient(o.target));
  client::Client& c = *connected;
  std::vector<model::DatasetView> all;
  if (o.name.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(all, c.Datasets());
  } else {
    MERIDIAN_ASSIGN_OR_RETURN(model::DatasetView d, c.GetDataset(o.name));
    all.push_back(std::move(d));
  }
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const model::DatasetView& d : all) {
      nlohmann::json shards = nlohmann::json::array();
      for (const model::ObjectLocation& l : d.shards) shards.push_back(LocationJson(l));
      j.push_back({{"name", d.name}, {"shards", shards}});
    }
    out << JsonText(j) << '\n';
    return OkStatus();
  }
  Table t({"DATASET", "SHARD", "OBJECT", "SIZE", "REPLICAS"});
  for (const model::DatasetView& d : all) {
    for (size_t i = 0; i < d.shards.size(); ++i) {
      t.Add({d.name, std::to_string(i), d.shards[i].id, FormatBytes(d.shards[i].size), Where(d.shards[i])});
    }
  }
  t.Print(out);
  return OkStatus();
}

Status RunObjectsPut(const ObjectsPutOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(o.file));
  MERIDIAN_RETURN_IF_ERROR(CheckPutSize(o.file, file->size(),
                                        fmt::format("put it as a dataset of smaller shards (meridian data put {} --name "
                                                    "NAME --shards {})",
                                                    o.file, (file->size() + objects::kMaxPutBytes - 1) / objects::kMaxPutBytes)));
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> connected, ConnectClient(o.target));
  client::Client& c = *connected;
  MERIDIAN_ASSIGN_OR_RETURN(model::ObjectLocation l, PutObject(c, file->data(), o.site, o.name, o.from));
  if (o.json) {
    out << JsonText(LocationJson(l)) << '\n';
    return OkStatus();
  }
  out << fmt::format("{} ({}) -> object {}{} on {}\n", o.file, FormatBytes(l.size), l.id,
                     l.name.empty() ? "" : fmt::format(" named {}", l.name), Where(l));
  return OkStatus();
}

Status RunObjectsGet(const ObjectsGetOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> connected, ConnectClient(o.target));
  client::Client& c = *connected;
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<FetchedObject> fetched, FetchObject(c, o.ref, o.site));
  const model::ObjectLocation& l = fetched->location;
  const model::ObjectReplica* from = &fetched->from;
  const objects::FetchStats* f = &fetched->stats;
  const objects::Pinned& pinned = *fetched->pinned;
  if (o.output.empty() || o.output == "-") {
    std::cout.write(pinned.data().data(), static_cast<std::streamsize>(pinned.data().size()));
    std::cout.flush();
    if (!std::cout) {
      return UnavailableError(fmt::format("cannot write {} to standard output",
                                          FormatBytes(static_cast<int64_t>(pinned.data().size()))));
    }
  } else {
    MERIDIAN_RETURN_IF_ERROR(WriteOutputFile(o.output, pinned.data()));
  }
  const double gbps = f->seconds > 0 ? static_cast<double>(f->bytes) * 8 / f->seconds / 1e9 : 0;
  std::ostream& note = (o.output.empty() || o.output == "-") ? std::cerr : out;
  if (o.json) {
    nlohmann::json j = LocationJson(l);
    j["from"] = {{"node", from->node}, {"site", from->site}};
    j["seconds"] = f->seconds;
    j["streams"] = f->streams;
    note << JsonText(j) << '\n';
  } else {
    note << fmt::format("object {} ({}) from {}@{} in {:.3f} s ({:.2f} Gbit/s, {} stream{}){}\n", l.id,
                        FormatBytes(l.size), from->node, from->site, f->seconds, gbps, f->streams,
                        f->streams == 1 ? "" : "s",
                        o.output.empty() || o.output == "-" ? "" : fmt::format(" -> {}", o.output));
  }
  return OkStatus();
}

Status RunObjectsList(const ObjectsListOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> connected, ConnectClient(o.target));
  client::Client& c = *connected;
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::ObjectLocation> all, c.Objects());
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const model::ObjectLocation& l : all) j.push_back(LocationJson(l));
    out << JsonText(j) << '\n';
    return OkStatus();
  }
  Table t({"OBJECT", "NAME", "SIZE", "REPLICAS"});
  for (const model::ObjectLocation& l : all) t.Add({l.id, l.name.empty() ? "-" : l.name, FormatBytes(l.size), Where(l)});
  t.Print(out);
  return OkStatus();
}

Status RunObjectsRemove(const ObjectsRemoveOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> connected, ConnectClient(o.target));
  for (const std::string& id : o.ids) {
    StatusOr<model::ObjectLocation> l = connected->DeleteObject(id);
    if (!l.ok()) return l.status().WithPrefix(fmt::format("objects rm {}", id));
    out << fmt::format("object {} ({}): one put undone; the node lets go of it once nothing else holds it\n", l->id,
                       FormatBytes(l->size));
  }
  return OkStatus();
}

}  // namespace meridian::cli
