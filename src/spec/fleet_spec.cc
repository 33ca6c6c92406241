#include "spec/fleet_spec.h"

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "common/units.h"
#include "model/accelerators.h"
#include "spec/gavel.h"
#include "spec/node_list.h"
#include "spec/yaml_reader.h"

namespace meridian::spec {
namespace {

using model::Fleet;

constexpr int64_t kMaxNodes = 1'000'000;

std::string ResolvePath(const std::string& base_dir, const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_absolute() || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

Status ParseSites(const Reader& r, const YAML::Node& root, Fleet* fleet) {
  YAML::Node sites = root["sites"];
  if (!sites) return r.Error(root, "", "missing required field 'sites'");
  MERIDIAN_RETURN_IF_ERROR(r.CheckSeq(sites, "sites"));
  if (sites.size() == 0) return r.Error(sites, "sites", "a fleet needs at least one site");
  for (size_t i = 0; i < sites.size(); ++i) {
    const YAML::Node& s = sites[i];
    std::string path = Index("sites", i);
    MERIDIAN_RETURN_IF_ERROR(r.CheckMap(s, path, {"name", "kind", "provider", "region", "egress"}));
    model::Site site;
    site.id = SiteId(static_cast<uint32_t>(i));
    MERIDIAN_RETURN_IF_ERROR(r.RequiredString(s, "name", path, &site.name));
    if (fleet->FindSite(site.name)) {
      return r.Error(s["name"], Field(path, "name"), fmt::format("duplicate site name '{}'", site.name));
    }
    MERIDIAN_RETURN_IF_ERROR(r.Enum(s, "kind", path,
                                    {{"cloud", model::SiteKind::kCloud},
                                     {"dc", model::SiteKind::kDc},
                                     {"edge", model::SiteKind::kEdge}},
                                    &site.kind));
    MERIDIAN_RETURN_IF_ERROR(r.String(s, "provider", path, &site.provider));
    site.region = site.name;
    MERIDIAN_RETURN_IF_ERROR(r.String(s, "region", path, &site.region));
    MERIDIAN_RETURN_IF_ERROR(
        r.Unit(s, "egress", path, ParsePriceMicroUsdPerGB, &site.egress_micro_usd_per_gb));
    fleet->sites.push_back(std::move(site));
  }
  return OkStatus();
}

Status ParseLinkEgress(const Reader& r, const YAML::Node& l, const std::string& path,
                       const Fleet& fleet, model::Link* link) {
  link->egress_a_to_b_micro_usd_per_gb = fleet.site(link->a).egress_micro_usd_per_gb;
  link->egress_b_to_a_micro_usd_per_gb = fleet.site(link->b).egress_micro_usd_per_gb;
  YAML::Node e = l["egress"];
  if (!e) return OkStatus();
  std::string field = Field(path, "egress");
  if (e.IsScalar()) {
    MERIDIAN_RETURN_IF_ERROR(
        r.Unit(l, "egress", path, ParsePriceMicroUsdPerGB, &link->egress_a_to_b_micro_usd_per_gb));
    link->egress_b_to_a_micro_usd_per_gb = link->egress_a_to_b_micro_usd_per_gb;
    return OkStatus();
  }
  const std::string& a = fleet.site(link->a).name;
  const std::string& b = fleet.site(link->b).name;
  MERIDIAN_RETURN_IF_ERROR(r.CheckMap(e, field, {a, b}));
  MERIDIAN_RETURN_IF_ERROR(
      r.Unit(e, a, field, ParsePriceMicroUsdPerGB, &link->egress_a_to_b_micro_usd_per_gb));
  return r.Unit(e, b, field, ParsePriceMicroUsdPerGB, &link->egress_b_to_a_micro_usd_per_gb);
}

Status ParseLinks(const Reader& r, const YAML::Node& root, Fleet* fleet) {
  YAML::Node links = root["links"];
  if (!links) return OkStatus();
  MERIDIAN_RETURN_IF_ERROR(r.CheckSeq(links, "links"));
  for (size_t i = 0; i < links.size(); ++i) {
    const YAML::Node& l = links[i];
    std::string path = Index("links", i);
    MERIDIAN_RETURN_IF_ERROR(r.CheckMap(l, path, {"between", "rtt", "jitter", "bandwidth", "egress"}));
    std::vector<std::string> between;
    MERIDIAN_RETURN_IF_ERROR(r.StringList(l, "between", path, &between));
    std::string field = Field(path, "between");
    if (between.size() != 2) {
      return r.Error(l["between"] ? l["between"] : l, field, "expected two site names");
    }
    model::Link link;
    for (int k = 0; k < 2; ++k) {
      auto id = fleet->FindSite(between[k]);
      if (!id) {
        return r.Error(l["between"], field, fmt::format("unknown site '{}'", between[k]));
      }
      (k == 0 ? link.a : link.b) = *id;
    }
    if (link.a == link.b) return r.Error(l["between"], field, "a link joins two different sites");
    if (fleet->FindLink(link.a, link.b)) {
      return r.Error(l["between"], field,
                     fmt::format("duplicate link between '{}' and '{}'", between[0], between[1]));
    }
    if (!l["rtt"]) return r.Error(l, path, "missing required field 'rtt'");
    if (!l["bandwidth"]) return r.Error(l, path, "missing required field 'bandwidth'");
    MERIDIAN_RETURN_IF_ERROR(r.Unit(l, "rtt", path, ParseDurationUs, &link.rtt_us));
    MERIDIAN_RETURN_IF_ERROR(r.Unit(l, "bandwidth", path, ParseBandwidthBps, &link.bandwidth_bps));
    if (link.bandwidth_bps <= 0) return r.Error(l["bandwidth"], Field(path, "bandwidth"), "must be positive");
    if (l["jitter"]) {
      MERIDIAN_RETURN_IF_ERROR(r.Unit(l, "jitter", path, ParseDurationUs, &link.jitter_us));
      if (link.jitter_us > model::kMaxLinkJitterUs) {
        return r.Error(l["jitter"], Field(path, "jitter"), "at most 60s");
      }
    }
    MERIDIAN_RETURN_IF_ERROR(ParseLinkEgress(r, l, path, *fleet, &link));
    fleet->links.push_back(link);
  }
  return OkStatus();
}

struct DeviceShape {
  std::string type;
  int64_t count = 0;
  int64_t memory_bytes = 0;
  bool emulated = false;
  double speed_factor = 1.0;
};

Status ParseDevices(const Reader& r, const YAML::Node& group, const std::string& path,
                    DeviceShape* d) {
  YAML::Node dev = group["devices"];
  if (!dev) return OkStatus();
  std::string field = Field(path, "devices");
  MERIDIAN_RETURN_IF_ERROR(r.CheckMap(dev, field, {"type", "count", "memory", "emulated", "speed"}));
  std::string type;
  MERIDIAN_RETURN_IF_ERROR(r.RequiredString(dev, "type", field, &type));
  auto known = model::FindAcceleratorType(type);
  if (!known) {
    return r.Error(dev["type"], Field(field, "type"),
                   fmt::format("unknown accelerator type '{}' (known: {})", type,
                               model::KnownAcceleratorTypeNames()));
  }
  if (known->klass == model::AcceleratorClass::kCpu) {
    return r.Error(dev["type"], Field(field, "type"),
                   "CPU is not a device; a node's CPU cores are given by 'cpu'");
  }
  d->type = std::string(known->name);
  d->count = 1;
  MERIDIAN_RETURN_IF_ERROR(r.Int(dev, "count", field, 1, 64, &d->count));
  d->memory_bytes = known->default_memory_bytes;
  MERIDIAN_RETURN_IF_ERROR(r.Unit(dev, "memory", field, ParseBytes, &d->memory_bytes));
  MERIDIAN_RETURN_IF_ERROR(r.Bool(dev, "emulated", field, &d->emulated));
  MERIDIAN_RETURN_IF_ERROR(r.Double(dev, "speed", field, 0.0, &d->speed_factor));
  if (d->speed_factor <= 0) return r.Error(dev["speed"], Field(field, "speed"), "must be positive");
  return OkStatus();
}

std::vector<model::Device> MakeDevices(const DeviceShape& d) {
  std::vector<model::Device> out;
  for (int64_t k = 0; k < d.count; ++k) {
    out.push_back(model::Device{d.type, static_cast<int32_t>(k), d.memory_bytes, d.emulated,
                                d.speed_factor});
  }
  return out;
}

Status AddNode(const Reader& r, const YAML::Node& at, const std::string& path, model::Node node,
               std::set<std::string>* names, Fleet* fleet) {
  if (fleet->nodes.size() >= static_cast<size_t>(kMaxNodes)) {
    return r.Error(at, path, fmt::format("a fleet file holds at most {} nodes", kMaxNodes));
  }
  if (!names->insert(node.name).second) {
    return r.Error(at, path, fmt::format("duplicate node name '{}'", node.name));
  }
  node.id = NodeId(static_cast<uint32_t>(fleet->nodes.size()));
  fleet->nodes.push_back(std::move(node));
  return OkStatus();
}

Status ParseSiteRef(const Reader& r, const YAML::Node& map, const std::string& path,
                    const Fleet& fleet, SiteId* out) {
  std::string site;
  MERIDIAN_RETURN_IF_ERROR(r.RequiredString(map, "site", path, &site));
  auto id = fleet.FindSite(site);
  if (!id) return r.Error(map["site"], Field(path, "site"), fmt::format("unknown site '{}'", site));
  *out = *id;
  return OkStatus();
}

Status ParseNodeFields(const Reader& r, const YAML::Node& g, const std::string& path, model::Node* node);

Status ParseNodeGroup(const Reader& r, const YAML::Node& g, const std::string& path,
                      std::set<std::string>* names, std::set<std::string>* groups, Fleet* fleet) {
  MERIDIAN_RETURN_IF_ERROR(r.CheckMap(g, path, {"name", "site", "count", "cpu", "memory", "disk",
                                                "devices", "price", "spot", "labels", "health"}));
  model::Node proto;
  MERIDIAN_RETURN_IF_ERROR(r.RequiredString(g, "name", path, &proto.group));
  if (!groups->insert(proto.group).second) {
    return r.Error(g["name"], Field(path, "name"), fmt::format("duplicate node group '{}'", proto.group));
  }
  MERIDIAN_RETURN_IF_ERROR(ParseSiteRef(r, g, path, *fleet, &proto.site));
  int64_t count = 1;
  MERIDIAN_RETURN_IF_ERROR(r.Int(g, "count", path, 1, kMaxNodes, &count));
  // The cap is checked before the group is expanded, not at the node after it.
  if (static_cast<int64_t>(fleet->nodes.size()) + count > kMaxNodes) {
    return r.Error(g["count"], Field(path, "count"),
                   fmt::format("node group '{}' of {} nodes would make the fleet larger than {} nodes (it has {})",
                               proto.group, count, kMaxNodes, fleet->nodes.size()));
  }
  MERIDIAN_RETURN_IF_ERROR(ParseNodeFields(r, g, path, &proto));
  MERIDIAN_RETURN_IF_ERROR(r.Enum(g, "health", path,
                                  {{"healthy", model::NodeHealth::kHealthy},
                                   {"draining", model::NodeHealth::kDraining},
                                   {"unhealthy", model::NodeHealth::kUnhealthy}},
                                  &proto.health));
  for (int64_t k = 0; k < count; ++k) {
    model::Node node = proto;
    node.name = count == 1 ? proto.group : fmt::format("{}-{}", proto.group, k);
    MERIDIAN_RETURN_IF_ERROR(AddNode(r, g, path, std::move(node), names, fleet));
  }
  return OkStatus();
}

Status ParseNodeFields(const Reader& r, const YAML::Node& g, const std::string& path, model::Node* node) {
  if (!g["cpu"]) return r.Error(g, path, "missing required field 'cpu'");
  if (!g["memory"]) return r.Error(g, path, "missing required field 'memory'");
  MERIDIAN_RETURN_IF_ERROR(r.Unit(g, "cpu", path, ParseMilli, &node->cpu_milli));
  if (node->cpu_milli <= 0) return r.Error(g["cpu"], Field(path, "cpu"), "must be positive");
  MERIDIAN_RETURN_IF_ERROR(r.Unit(g, "memory", path, ParseBytes, &node->memory_bytes));
  if (node->memory_bytes <= 0) return r.Error(g["memory"], Field(path, "memory"), "must be positive");
  MERIDIAN_RETURN_IF_ERROR(r.Unit(g, "disk", path, ParseBytes, &node->disk_bytes));
  DeviceShape shape;
  MERIDIAN_RETURN_IF_ERROR(ParseDevices(r, g, path, &shape));
  node->devices = MakeDevices(shape);
  MERIDIAN_RETURN_IF_ERROR(
      r.Unit(g, "price", path, ParsePriceMicroUsdPerHour, &node->price_micro_usd_per_hour));
  MERIDIAN_RETURN_IF_ERROR(r.Bool(g, "spot", path, &node->spot));
  return r.StringMap(g, "labels", path, "label: value", "label", &node->labels);
}

Status ParseNodeList(const Reader& r, const YAML::Node& l, const std::string& path,
                     const std::string& base_dir, std::set<std::string>* names, Fleet* fleet) {
  MERIDIAN_RETURN_IF_ERROR(r.CheckMap(l, path, {"format", "path", "sites", "gpu_prices", "cpu_price", "limit"}));
  std::string format, file;
  MERIDIAN_RETURN_IF_ERROR(r.RequiredString(l, "format", path, &format));
  if (format != "alibaba-gpu-2023") {
    return r.Error(l["format"], Field(path, "format"),
                   fmt::format("unknown node list format '{}' (known: alibaba-gpu-2023)", format));
  }
  MERIDIAN_RETURN_IF_ERROR(r.RequiredString(l, "path", path, &file));
  std::vector<std::string> site_names;
  MERIDIAN_RETURN_IF_ERROR(r.StringList(l, "sites", path, &site_names));
  if (site_names.empty()) return r.Error(l, path, "missing required field 'sites'");
  std::vector<SiteId> sites;
  for (const std::string& s : site_names) {
    auto id = fleet->FindSite(s);
    if (!id) return r.Error(l["sites"], Field(path, "sites"), fmt::format("unknown site '{}'", s));
    sites.push_back(*id);
  }
  int64_t limit = kMaxNodes;
  MERIDIAN_RETURN_IF_ERROR(r.Int(l, "limit", path, 1, kMaxNodes, &limit));
  int64_t cpu_price = 0;  // per core-hour
  MERIDIAN_RETURN_IF_ERROR(r.Unit(l, "cpu_price", path, ParsePriceMicroUsdPerHour, &cpu_price));
  std::map<std::string, int64_t> gpu_prices;  // per GPU-hour
  if (YAML::Node p = l["gpu_prices"]) {
    if (!p.IsMap()) return r.Error(p, Field(path, "gpu_prices"), "expected a map of GPU model: price");
    for (auto it = p.begin(); it != p.end(); ++it) {
      std::string model = it->first.Scalar();
      auto known = model::FindAcceleratorType(model);
      if (!known) return r.Error(it->first, Field(path, "gpu_prices"), fmt::format("unknown accelerator type '{}'", model));
      MERIDIAN_RETURN_IF_ERROR(r.Unit(p, model, Field(path, "gpu_prices"), ParsePriceMicroUsdPerHour,
                                      &gpu_prices[std::string(known->name)]));
    }
  }
  std::string resolved = ResolvePath(base_dir, file);
  StatusOr<std::string> csv = ReadFileToString(resolved);
  if (!csv.ok()) return r.Error(l["path"], Field(path, "path"), csv.status().message());
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<ListedNode> listed, ParseAlibabaNodeList(*csv, resolved));
  for (size_t i = 0; i < listed.size() && static_cast<int64_t>(i) < limit; ++i) {
    const ListedNode& ln = listed[i];
    model::Node node;
    node.name = ln.name;
    node.group = ln.gpu_model.empty() ? "cpu" : ln.gpu_model;
    node.site = sites[i % sites.size()];
    node.cpu_milli = ln.cpu_milli;
    node.memory_bytes = ln.memory_bytes;
    DeviceShape shape{ln.gpu_model, ln.gpus, 0, false, 1.0};
    if (ln.gpus > 0) shape.memory_bytes = model::FindAcceleratorType(ln.gpu_model)->default_memory_bytes;
    node.devices = MakeDevices(shape);
    node.price_micro_usd_per_hour = cpu_price * ln.cpu_milli / kMilliPerUnit;
    if (ln.gpus > 0) {
      auto price = gpu_prices.find(ln.gpu_model);
      if (price == gpu_prices.end()) {
        return r.Error(l, Field(path, "gpu_prices"), fmt::format("no price for GPU model '{}' (line {} of {})", ln.gpu_model, i + 2, file));
      }
      node.price_micro_usd_per_hour += price->second * ln.gpus;
    }
    MERIDIAN_RETURN_IF_ERROR(AddNode(r, l, path, std::move(node), names, fleet));
  }
  return OkStatus();
}

Status ParseNodes(const Reader& r, const YAML::Node& root, const std::string& base_dir, Fleet* fleet) {
  std::set<std::string> names, groups;
  if (YAML::Node groups_node = root["nodes"]) {
    MERIDIAN_RETURN_IF_ERROR(r.CheckSeq(groups_node, "nodes"));
    for (size_t i = 0; i < groups_node.size(); ++i) {
      MERIDIAN_RETURN_IF_ERROR(
          ParseNodeGroup(r, groups_node[i], Index("nodes", i), &names, &groups, fleet));
    }
  }
  if (YAML::Node lists = root["node_lists"]) {
    MERIDIAN_RETURN_IF_ERROR(r.CheckSeq(lists, "node_lists"));
    for (size_t i = 0; i < lists.size(); ++i) {
      MERIDIAN_RETURN_IF_ERROR(
          ParseNodeList(r, lists[i], Index("node_lists", i), base_dir, &names, fleet));
    }
  }
  if (fleet->nodes.empty()) return r.Error(root, "", "a fleet needs at least one node ('nodes' or 'node_lists')");
  return OkStatus();
}

Status ParseTenants(const Reader& r, const YAML::Node& root, Fleet* fleet) {
  YAML::Node tenants = root["tenants"];
  if (!tenants) return OkStatus();
  MERIDIAN_RETURN_IF_ERROR(r.CheckSeq(tenants, "tenants"));
  for (size_t i = 0; i < tenants.size(); ++i) {
    const YAML::Node& t = tenants[i];
    std::string path = Index("tenants", i);
    MERIDIAN_RETURN_IF_ERROR(r.CheckMap(t, path, {"name", "weight", "quota"}));
    model::Tenant tenant;
    tenant.id = TenantId(static_cast<uint32_t>(i));
    MERIDIAN_RETURN_IF_ERROR(r.RequiredString(t, "name", path, &tenant.name));
    if (fleet->FindTenant(tenant.name)) {
      return r.Error(t["name"], Field(path, "name"), fmt::format("duplicate tenant '{}'", tenant.name));
    }
    MERIDIAN_RETURN_IF_ERROR(r.Int(t, "weight", path, 1, 1'000'000, &tenant.weight));
    if (YAML::Node q = t["quota"]) {
      std::string qpath = Field(path, "quota");
      MERIDIAN_RETURN_IF_ERROR(
          r.CheckMap(q, qpath, {"gpus", "gpus_by_type", "cpu", "memory", "budget_per_day"}));
      MERIDIAN_RETURN_IF_ERROR(r.Unit(q, "gpus", qpath, ParseMilli, &tenant.max_gpu_milli));
      MERIDIAN_RETURN_IF_ERROR(r.Unit(q, "cpu", qpath, ParseMilli, &tenant.max_cpu_milli));
      MERIDIAN_RETURN_IF_ERROR(r.Unit(q, "memory", qpath, ParseBytes, &tenant.max_memory_bytes));
      MERIDIAN_RETURN_IF_ERROR(r.Unit(q, "budget_per_day", qpath, ParseMicroUsd, &tenant.budget_micro_usd_per_day));
      if (YAML::Node by = q["gpus_by_type"]) {
        const std::string bpath = Field(qpath, "gpus_by_type");
        if (!by.IsMap() || by.size() == 0) return r.Error(by, bpath, "expected a map of accelerator type: GPUs");
        for (auto it = by.begin(); it != by.end(); ++it) {
          const std::string type = it->first.Scalar();
          auto known = model::FindAcceleratorType(type);
          if (!known || known->name == model::kCpuType) {
            return r.Error(it->first, bpath,
                           fmt::format("unknown accelerator type '{}' (known: {})", type,
                                       model::KnownAcceleratorTypeNames()));
          }
          int64_t milli = 0;
          MERIDIAN_RETURN_IF_ERROR(r.Unit(by, type, bpath, ParseMilli, &milli));
          tenant.max_gpu_milli_by_type[std::string(known->name)] = milli;
        }
      }
    }
    fleet->tenants.push_back(std::move(tenant));
  }
  return OkStatus();
}

Status ParseThroughputKind(const Reader& r, const YAML::Node& k, const std::string& path,
                           model::ThroughputTable* table) {
  MERIDIAN_RETURN_IF_ERROR(r.CheckMap(k, path, {"kind", "unit", "per_second"}));
  std::string kind, unit = "unit";
  MERIDIAN_RETURN_IF_ERROR(r.RequiredString(k, "kind", path, &kind));
  MERIDIAN_RETURN_IF_ERROR(r.String(k, "unit", path, &unit));
  YAML::Node per = k["per_second"];
  std::string field = Field(path, "per_second");
  if (!per) return r.Error(k, path, "missing required field 'per_second'");
  if (!per.IsMap() || per.size() == 0) {
    return r.Error(per, field, "expected a map of accelerator type: units per second");
  }
  for (auto it = per.begin(); it != per.end(); ++it) {
    std::string type = it->first.Scalar();
    auto known = model::FindAcceleratorType(type);
    if (!known) {
      return r.Error(it->first, field, fmt::format("unknown accelerator type '{}' (known: {})", type,
                                                   model::KnownAcceleratorTypeNames()));
    }
    double rate = 0;
    MERIDIAN_RETURN_IF_ERROR(r.Double(per, type, field, 0.0, &rate));
    if (rate <= 0) return r.Error(it->second, Field(field, type), "must be positive");
    table->Set(known->name, kind, rate);
  }
  table->SetUnit(kind, unit);
  return OkStatus();
}

Status ParseThroughput(const Reader& r, const YAML::Node& root, const std::string& base_dir,
                       model::ThroughputTable* table) {
  YAML::Node t = root["throughput"];
  if (!t) return OkStatus();
  MERIDIAN_RETURN_IF_ERROR(r.CheckMap(t, "throughput", {"gavel", "kinds"}));
  std::string gavel;
  MERIDIAN_RETURN_IF_ERROR(r.String(t, "gavel", "throughput", &gavel));
  if (!gavel.empty()) {
    StatusOr<model::ThroughputTable> g = LoadGavelThroughputs(ResolvePath(base_dir, gavel));
    if (!g.ok()) return r.Error(t["gavel"], "throughput.gavel", g.status().message());
    table->Merge(*g);
  }
  if (YAML::Node kinds = t["kinds"]) {
    MERIDIAN_RETURN_IF_ERROR(r.CheckSeq(kinds, "throughput.kinds"));
    for (size_t i = 0; i < kinds.size(); ++i) {
      MERIDIAN_RETURN_IF_ERROR(ParseThroughputKind(r, kinds[i], Index("throughput.kinds", i), table));
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<FleetSpec> ParseFleet(std::string_view text, std::string_view file,
                               const std::string& base_dir) {
  MERIDIAN_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(text, file));
  Reader r{std::string(file)};
  MERIDIAN_RETURN_IF_ERROR(
      r.CheckMap(root, "", {"sites", "links", "nodes", "node_lists", "tenants", "throughput"}));
  FleetSpec spec;
  MERIDIAN_RETURN_IF_ERROR(ParseSites(r, root, &spec.fleet));
  MERIDIAN_RETURN_IF_ERROR(ParseLinks(r, root, &spec.fleet));
  MERIDIAN_RETURN_IF_ERROR(ParseNodes(r, root, base_dir, &spec.fleet));
  MERIDIAN_RETURN_IF_ERROR(ParseTenants(r, root, &spec.fleet));
  MERIDIAN_RETURN_IF_ERROR(ParseThroughput(r, root, base_dir, &spec.throughput));
  return spec;
}

StatusOr<FleetSpec> LoadFleet(const std::string& path) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxYamlFileBytes));
  std::string dir = std::filesystem::path(path).parent_path().string();
  return ParseFleet(text, path, dir);
}

}  // namespace meridian::spec

namespace meridian::spec {

StatusOr<NodeConfig> ParseNodeConfig(std::string_view text, std::string_view file) {
  MERIDIAN_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(text, file));
  Reader r{std::string(file)};
  MERIDIAN_RETURN_IF_ERROR(r.CheckMap(root, "", {"name", "site", "group", "cpu", "memory", "disk", "devices",
                                                 "price", "spot", "labels", "agent"}));
  NodeConfig config;
  MERIDIAN_RETURN_IF_ERROR(r.RequiredString(root, "name", "", &config.node.name));
  MERIDIAN_RETURN_IF_ERROR(r.RequiredString(root, "site", "", &config.site));
  config.node.group = config.node.name;
  MERIDIAN_RETURN_IF_ERROR(r.String(root, "group", "", &config.node.group));
  MERIDIAN_RETURN_IF_ERROR(ParseNodeFields(r, root, "", &config.node));
  if (const YAML::Node agent = root["agent"]) {
    MERIDIAN_RETURN_IF_ERROR(r.CheckMap(agent, "agent", {"coordinator", "join_token_file", "tls_dir", "work_dir",
                                                         "transfer_host", "transfer_port", "metrics_listen"}));
    AgentSettings& a = config.agent;
    MERIDIAN_RETURN_IF_ERROR(r.String(agent, "coordinator", "agent", &a.coordinator));
    MERIDIAN_RETURN_IF_ERROR(r.String(agent, "join_token_file", "agent", &a.join_token_file));
    MERIDIAN_RETURN_IF_ERROR(r.String(agent, "tls_dir", "agent", &a.tls_dir));
    MERIDIAN_RETURN_IF_ERROR(r.String(agent, "work_dir", "agent", &a.work_dir));
    MERIDIAN_RETURN_IF_ERROR(r.String(agent, "transfer_host", "agent", &a.transfer_host));
    MERIDIAN_RETURN_IF_ERROR(r.Int(agent, "transfer_port", "agent", 0, 65535, &a.transfer_port));
    MERIDIAN_RETURN_IF_ERROR(r.String(agent, "metrics_listen", "agent", &a.metrics_listen));
  }
  return config;
}

StatusOr<NodeConfig> LoadNodeConfig(const std::string& path) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxYamlFileBytes));
  return ParseNodeConfig(text, path);
}

std::string NodeConfigYaml(const model::Node& node, std::string_view site) {
  // Exact units (bytes, milli-cores, micro-dollars) so the file reads back unchanged.
  std::string out = fmt::format("name: {}\nsite: {}\ngroup: {}\ncpu: {}m\nmemory: {}B\n", node.name, site,
                                node.group, node.cpu_milli, node.memory_bytes);
  if (node.disk_bytes > 0) out += fmt::format("disk: {}B\n", node.disk_bytes);
  if (!node.devices.empty()) {
    const model::Device& d = node.devices.front();
    out += fmt::format("devices: {{type: {}, count: {}, memory: {}B, emulated: {}, speed: {}}}\n", d.type,
                       node.devices.size(), d.memory_bytes, d.emulated ? "true" : "false", d.speed_factor);
  }
  out += fmt::format("price: ${}.{:06d}/h\n", node.price_micro_usd_per_hour / 1'000'000,
                     node.price_micro_usd_per_hour % 1'000'000);
  if (node.spot) out += "spot: true\n";
  if (!node.labels.empty()) {
    out += "labels:\n";
    for (const auto& [k, v] : node.labels) out += fmt::format("  \"{}\": \"{}\"\n", k, v);
  }
  return out;
}

}  // namespace meridian::spec
