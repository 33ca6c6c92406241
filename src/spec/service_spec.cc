#include "spec/service_spec.h"

#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "common/strings.h"
#include "common/units.h"
#include "model/fleet.h"
#include "model/work.h"
#include "spec/resource_spec.h"
#include "spec/yaml_reader.h"

namespace meridian::spec {
namespace {

constexpr std::string_view kJobPrefix = "serve/";
// A replica that cannot start (a model that is not a checkpoint, a port taken) fails
// for good after this many attempts; a lost node costs one.
constexpr int kReplicaRetries = 20;

bool IsNameChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }
bool IsRegionChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.';
}
bool AllOf(std::string_view s, bool (*ok)(char)) {
  for (char c : s) {
    if (!ok(c)) return false;
  }
  return true;
}

class ServiceParser {
 public:
  explicit ServiceParser(const Reader& r) : r_(r) {}

  StatusOr<ServiceSpec> Parse(const YAML::Node& root) {
    if (!root.IsMap()) return r_.Error(root, "", "expected a map (a service spec)");
    MERIDIAN_RETURN_IF_ERROR(
        r_.CheckMap(root, "", {"kind", "name", "model", "command", "health", "port", "regions", "batching", "autoscale",
                               "fallback_after", "resources"}));
    std::string kind;
    MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(root, "kind", "", &kind));
    if (kind != "service") return r_.Error(root["kind"], "kind", fmt::format("expected 'service', got '{}'", kind));
    MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(root, "name", "", &spec_.name));
    if (spec_.name.empty() || spec_.name.size() > 63 || !(spec_.name[0] >= 'a' && spec_.name[0] <= 'z') ||
        !AllOf(spec_.name, IsNameChar)) {
      return r_.Error(root["name"], "name",
                      fmt::format("expected 1 to 63 of a-z, 0-9 and '-', starting with a letter, got '{}'", spec_.name));
    }
    MERIDIAN_RETURN_IF_ERROR(Handler(root));
    int64_t port = spec_.port;
    MERIDIAN_RETURN_IF_ERROR(r_.Int(root, "port", "", 1024, 65535, &port));
    spec_.port = static_cast<int32_t>(port);
    MERIDIAN_RETURN_IF_ERROR(Regions(root));
    if (!spec_.command.empty() && root["batching"]) {
      return r_.Error(root["batching"], "batching", "batching is for a model's replicas; a command batches as it will");
    }
    MERIDIAN_RETURN_IF_ERROR(Batching(root));
    MERIDIAN_RETURN_IF_ERROR(Autoscale(root));
    MERIDIAN_RETURN_IF_ERROR(FallbackAfter(root));
    model::ResourceRequest resources;
    MERIDIAN_RETURN_IF_ERROR(ParseResourceRequest(r_, root, "", &resources));
    if (YAML::Node res = root["resources"]) {
      YAML::Emitter e;
      e << YAML::Flow << res;
      spec_.resources_yaml = e.c_str();
    }
    // Its replica jobs carry the spec in one variable, of at most 4 KiB.
    if (const size_t size = ServiceSpecYaml(spec_).size(); size > 4096) {
      return r_.Error(root, "", fmt::format("the spec takes {} bytes written compactly; at most 4096", size));
    }
    return std::move(spec_);
  }

 private:
  // model: or command: (with health:), exactly one.
  Status Handler(const YAML::Node& root) {
    if (root["model"] && root["command"]) {
      return r_.Error(root["command"], "command", "a service has a model or a command, not both");
    }
    if (root["command"]) {
      MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(root, "command", "", &spec_.command));
      // UTF-8: it goes into each replica job and back out of it when the service is
      // scaled; other bytes came back changed.
      const bool printable = std::all_of(spec_.command.begin(), spec_.command.end(), [](unsigned char c) {
        return c == '\t' || c == '\n' || (c >= 0x20 && c != 0x7f);
      });
      if (spec_.command.empty() || spec_.command.size() > kMaxServiceCommandBytes || !printable ||
          !IsUtf8(spec_.command)) {
        return r_.Error(root["command"], "command",
                        fmt::format("expected 1 to {} bytes of UTF-8 text without control characters (run by /bin/sh "
                                    "with $PORT set)",
                                    kMaxServiceCommandBytes));
      }
      if (root["health"]) {
        MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(root, "health", "", &spec_.health_path));
        // It goes on the replica's command line, in single quotes.
        const bool ok = std::all_of(spec_.health_path.begin(), spec_.health_path.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 std::string_view("/-._~%?=&").find(c) != std::string_view::npos;
        });
        if (spec_.health_path.empty() || spec_.health_path[0] != '/' || spec_.health_path.size() > 256 || !ok) {
          return r_.Error(root["health"], "health",
                          fmt::format("expected a path from '/' of at most 256 letters, digits and /-._~%?=&, got "
                                      "'{}'",
                                      spec_.health_path));
        }
      }
      return OkStatus();
    }
    if (root["health"]) return r_.Error(root["health"], "health", "health is a command's (the model's replica has its own)");
    if (!root["model"]) return r_.Error(root, "", "missing required field 'model' (or 'command')");
    MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(root, "model", "", &spec_.model));
    // What follows the scheme is a dataset's name or an object's id, as a job's inputs
    // take them: it goes into every replica job, and back out of it when the service is
    // scaled, so it must be what a YAML file keeps byte for byte.
    const std::string_view ref = spec_.model;
    const bool dataset = ref.starts_with("dataset://") && ref.size() > 10 &&
                         model::CheckName(ref.substr(10), "model").ok() && !model::LooksLikeObjectId(ref.substr(10));
    const bool object = ref.starts_with("object://") && model::LooksLikeObjectId(ref.substr(9));
    if (!dataset && !object) {
      return r_.Error(root["model"], "model",
                      fmt::format("expected dataset://NAME (letters, digits, '.', '_', '-', ':') or object://ID (32 "
                                  "lowercase hex digits): a checkpoint put with `meridian data put`; got '{}'",
                                  ref.substr(0, 300)));
    }
    return OkStatus();
  }

  Status Regions(const YAML::Node& root) {
    YAML::Node regions = root["regions"];
    if (!regions) return r_.Error(root, "", "missing required field 'regions'");
    MERIDIAN_RETURN_IF_ERROR(r_.CheckSeq(regions, "regions"));
    if (regions.size() == 0 || regions.size() > kMaxServiceRegions) {
      return r_.Error(regions, "regions", fmt::format("expected 1 to {} regions", kMaxServiceRegions));
    }
    std::set<std::string> seen;
    int64_t total = 0, total_min = 0;
    for (size_t i = 0; i < regions.size(); ++i) {
      const YAML::Node g = regions[i];
      const std::string path = Index("regions", i);
      if (!g.IsMap()) return r_.Error(g, path, "expected a map: {region: R, min: N, max: M}");
      MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(g, path, {"region", "min", "max"}));
      ServiceRegion region;
      MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(g, "region", path, &region.region));
      if (region.region.empty() || region.region.size() > 128 || !AllOf(region.region, IsRegionChar)) {
        return r_.Error(g["region"], Field(path, "region"),
                        fmt::format("expected 1 to 128 of letters, digits, '-', '_' and '.', got '{}'", region.region));
      }
      if (!seen.insert(region.region).second) {
        return r_.Error(g["region"], Field(path, "region"), fmt::format("region '{}' is listed twice", region.region));
      }
      int64_t min = 1;
      MERIDIAN_RETURN_IF_ERROR(r_.Int(g, "min", path, 0, kMaxReplicasPerRegion, &min));
      int64_t max = std::max<int64_t>(min, 1);
      MERIDIAN_RETURN_IF_ERROR(r_.Int(g, "max", path, 1, kMaxReplicasPerRegion, &max));
      if (max < min) {
        return r_.Error(g["max"], Field(path, "max"), fmt::format("max {} is below min {}", max, min));
      }
      region.min = static_cast<int32_t>(min);
      region.max = static_cast<int32_t>(max);
      total += max;
      total_min += min;
      spec_.regions.push_back(std::move(region));
    }
    if (total_min == 0) {
      return r_.Error(regions, "regions", "every region's min is 0: the service would start with no replica");
    }
    if (total > kMaxServiceReplicas) {
      return r_.Error(regions, "regions",
                      fmt::format("the regions' max add up to {} replicas; at most {}", total, kMaxServiceReplicas));
    }
    if (spec_.port + total - 1 > 65535) {
      return r_.Error(root["port"] ? root["port"] : regions, "port",
                      fmt::format("port {} leaves no room for {} replicas (replica k listens on port + k, at most "
                                  "65535)",
                                  spec_.port, total));
    }
    return OkStatus();
  }

  Status FallbackAfter(const YAML::Node& root) {
    if (!root["fallback_after"]) return OkStatus();
    if (spec_.regions.size() < 2) {
      return r_.Error(root["fallback_after"], "fallback_after",
                      "a replica falls back to the service's other regions, and it has one");
    }
    MERIDIAN_RETURN_IF_ERROR(r_.Unit(root, "fallback_after", "", ParseDurationUs, &spec_.fallback_after_us));
    if (spec_.fallback_after_us < model::Job::kMinFallbackAfterUs ||
        spec_.fallback_after_us > model::Job::kMaxFallbackAfterUs) {
      return r_.Error(root["fallback_after"], "fallback_after", "must be from 1s to 7d");
    }
    return OkStatus();
  }

  Status Batching(const YAML::Node& root) {
    YAML::Node b = root["batching"];
    if (!b) return OkStatus();
    if (!b.IsMap()) return r_.Error(b, "batching", "expected a map: {max_batch: N, max_wait: DURATION}");
    MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(b, "batching", {"max_batch", "max_wait"}));
    int64_t max_batch = spec_.max_batch;
    MERIDIAN_RETURN_IF_ERROR(r_.Int(b, "max_batch", "batching", 1, 4096, &max_batch));
    spec_.max_batch = static_cast<int32_t>(max_batch);
    if (b["max_wait"]) {
      MERIDIAN_RETURN_IF_ERROR(r_.Unit(b, "max_wait", "batching", ParseDurationUs, &spec_.max_wait_us));
      if (spec_.max_wait_us < 0 || spec_.max_wait_us > 1'000'000) {
        return r_.Error(b["max_wait"], "batching.max_wait", "expected 0 to 1s");
      }
    }
    return OkStatus();
  }

  Status Autoscale(const YAML::Node& root) {
    YAML::Node a = root["autoscale"];
    if (!a) return OkStatus();
    if (!a.IsMap()) {
      return r_.Error(a, "autoscale", "expected a map: {target_inflight: N, latency_target: DURATION, scale_in_after: DURATION}");
    }
    MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(a, "autoscale", {"target_inflight", "latency_target", "scale_in_after"}));
    ServiceAutoscale s;
    MERIDIAN_RETURN_IF_ERROR(r_.Double(a, "target_inflight", "autoscale", 0.1, &s.target_inflight));
    if (s.target_inflight > 10'000) {
      return r_.Error(a["target_inflight"], "autoscale.target_inflight", "expected 0.1 to 10000 requests");
    }
    if (a["latency_target"]) {
      MERIDIAN_RETURN_IF_ERROR(r_.Unit(a, "latency_target", "autoscale", ParseDurationUs, &s.latency_target_us));
      if (s.latency_target_us < 100 || s.latency_target_us > 600'000'000) {
        return r_.Error(a["latency_target"], "autoscale.latency_target", "expected 100us to 10m");
      }
    }
    if (a["scale_in_after"]) {
      MERIDIAN_RETURN_IF_ERROR(r_.Unit(a, "scale_in_after", "autoscale", ParseDurationUs, &s.scale_in_after_us));
      if (s.scale_in_after_us < 1'000'000 || s.scale_in_after_us > 86'400'000'000) {
        return r_.Error(a["scale_in_after"], "autoscale.scale_in_after", "expected 1s to 24h");
      }
    }
    spec_.autoscale = s;
    return OkStatus();
  }

  const Reader& r_;
  ServiceSpec spec_;
};

}  // namespace

StatusOr<ServiceSpec> ParseServiceSpec(std::string_view text, std::string_view file) {
  MERIDIAN_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(text, file));
  Reader r{std::string(file)};
  return ServiceParser(r).Parse(root);
}

StatusOr<ServiceSpec> LoadServiceSpec(const std::string& path) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxYamlFileBytes));
  return ParseServiceSpec(text, path);
}

std::string ReplicaJobName(std::string_view service, std::string_view region, int32_t ordinal) {
  return fmt::format("{}{}/{}/{}", kJobPrefix, service, region, ordinal);
}

std::string ReplicaJobNamePrefix(std::string_view service) {
  return service.empty() ? std::string(kJobPrefix) : fmt::format("{}{}/", kJobPrefix, service);
}

std::optional<ReplicaJobId> ParseReplicaJobName(std::string_view name) {
  if (name.substr(0, kJobPrefix.size()) != kJobPrefix) return std::nullopt;
  name.remove_prefix(kJobPrefix.size());
  const size_t a = name.find('/');
  if (a == std::string_view::npos) return std::nullopt;
  const size_t b = name.find('/', a + 1);
  if (b == std::string_view::npos || name.find('/', b + 1) != std::string_view::npos) return std::nullopt;
  ReplicaJobId id{std::string(name.substr(0, a)), std::string(name.substr(a + 1, b - a - 1)), 0};
  const std::string_view k = name.substr(b + 1);
  if (id.service.empty() || id.region.empty() || k.empty() || k.size() > 4) return std::nullopt;
  for (char c : k) {
    if (c < '0' || c > '9') return std::nullopt;
    id.ordinal = id.ordinal * 10 + (c - '0');
  }
  return id;
}

std::string ReplicaJobYaml(const ServiceSpec& spec, const std::string& region, int32_t ordinal,
                           const ReplicaSecrets& secrets, uint64_t replaces, const std::string& tenant) {
  const std::string tls = secrets.tls() ? fmt::format(" --tls-cert-env {} --tls-key-env {}", kReplicaTlsCertEnv,
                                                      kReplicaTlsKeyEnv)
                                        : "";
  // Every value the spec gave was checked to hold only [A-Za-z0-9._/:-], but the
  // emitter quotes what needs it all the same.
  const std::string command =
      spec.command.empty()
          ? fmt::format("exec \"$MERIDIAN_BIN\" replica --model \"$MERIDIAN_INPUTS/0\" --token-env {}{} --listen "
                        "0.0.0.0:{} --max-batch {} --max-wait-us {}",
                        kReplicaTokenEnv, tls, spec.port + ordinal, spec.max_batch, spec.max_wait_us)
          : fmt::format("exec \"$MERIDIAN_BIN\" replica --command-env {} --health '{}' --token-env {}{} --listen "
                        "0.0.0.0:{}",
                        kServiceCommandEnv, spec.health_path, kReplicaTokenEnv, tls, spec.port + ordinal);
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << ReplicaJobName(spec.name, region, ordinal);
  if (!tenant.empty()) e << YAML::Key << "tenant" << YAML::Value << tenant;
  e << YAML::Key << "regions" << YAML::Value << YAML::Flow << std::vector<std::string>{region};
  if (spec.fallback_after_us > 0 && replaces == 0) {
    // The service's other regions, in its order.
    std::vector<std::string> others;
    for (const ServiceRegion& r : spec.regions) {
      if (r.region != region) others.push_back(r.region);
    }
    e << YAML::Key << "fallback" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "regions"
      << YAML::Value << YAML::Flow << others << YAML::Key << "after" << YAML::Value
      << fmt::format("{}us", spec.fallback_after_us) << YAML::EndMap;
  }
  e << YAML::Key << "tasks" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << "replica";
  e << YAML::Key << "command" << YAML::Value << YAML::Flow << std::vector<std::string>{"sh", "-c", command};
  if (!spec.model.empty()) e << YAML::Key << "inputs" << YAML::Value << YAML::Flow << std::vector<std::string>{spec.model};
  e << YAML::Key << "env" << YAML::Value << YAML::BeginMap << YAML::Key << kReplicaTokenEnv << YAML::Value
    << secrets.token << YAML::Key << kServiceSpecEnv << YAML::Value << ServiceSpecYaml(spec);
  if (secrets.tls()) {
    e << YAML::Key << kReplicaTlsCaEnv << YAML::Value << YAML::Literal << secrets.tls_ca_pem;
    e << YAML::Key << kReplicaTlsCertEnv << YAML::Value << YAML::Literal << secrets.tls_cert_pem;
    e << YAML::Key << kReplicaTlsKeyEnv << YAML::Value << YAML::Literal << secrets.tls_key_pem;
  }
  if (!secrets.client_token.empty()) e << YAML::Key << kServiceClientTokenEnv << YAML::Value << secrets.client_token;
  if (!spec.command.empty()) e << YAML::Key << kServiceCommandEnv << YAML::Value << spec.command;
  if (replaces != 0) e << YAML::Key << kReplicaReplacesEnv << YAML::Value << std::to_string(replaces);
  e << YAML::EndMap;
  if (!spec.resources_yaml.empty()) {
    e << YAML::Key << "resources" << YAML::Value << YAML::Flow << YAML::Load(spec.resources_yaml);
  }
  e << YAML::Key << "retries" << YAML::Value << kReplicaRetries;
  // Stopped (scaled in, deleted), a replica drains: SIGTERM, then SIGKILL this long after.
  e << YAML::Key << "stop_grace" << YAML::Value << fmt::format("{}s", kReplicaStopGraceUs / 1'000'000);
  e << YAML::EndMap << YAML::EndSeq << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

std::string ServiceSpecYaml(const ServiceSpec& spec) {
  YAML::Emitter e;
  e << YAML::Flow << YAML::BeginMap;
  e << YAML::Key << "kind" << YAML::Value << "service";
  e << YAML::Key << "name" << YAML::Value << spec.name;
  if (spec.command.empty()) {
    e << YAML::Key << "model" << YAML::Value << spec.model;
  } else {
    e << YAML::Key << "command" << YAML::Value << spec.command;
    e << YAML::Key << "health" << YAML::Value << spec.health_path;
  }
  e << YAML::Key << "port" << YAML::Value << spec.port;
  e << YAML::Key << "regions" << YAML::Value << YAML::BeginSeq;
  for (const ServiceRegion& r : spec.regions) {
    e << YAML::BeginMap << YAML::Key << "region" << YAML::Value << r.region << YAML::Key << "min" << YAML::Value
      << r.min << YAML::Key << "max" << YAML::Value << r.max << YAML::EndMap;
  }
  e << YAML::EndSeq;
  if (spec.command.empty()) {
    e << YAML::Key << "batching" << YAML::Value << YAML::BeginMap << YAML::Key << "max_batch" << YAML::Value
      << spec.max_batch << YAML::Key << "max_wait" << YAML::Value << fmt::format("{}us", spec.max_wait_us)
      << YAML::EndMap;
  }
  if (spec.autoscale) {
    e << YAML::Key << "autoscale" << YAML::Value << YAML::BeginMap << YAML::Key << "target_inflight" << YAML::Value
      << spec.autoscale->target_inflight << YAML::Key << "latency_target" << YAML::Value
      << fmt::format("{}us", spec.autoscale->latency_target_us) << YAML::Key << "scale_in_after" << YAML::Value
      << fmt::format("{}us", spec.autoscale->scale_in_after_us) << YAML::EndMap;
  }
  if (spec.fallback_after_us > 0) {
    e << YAML::Key << "fallback_after" << YAML::Value << fmt::format("{}us", spec.fallback_after_us);
  }
  if (!spec.resources_yaml.empty()) e << YAML::Key << "resources" << YAML::Value << YAML::Load(spec.resources_yaml);
  e << YAML::EndMap;
  return e.c_str();
}

StatusOr<ServiceOfReplica> ServiceFromReplicaJob(std::string_view job_yaml, std::string_view job_name) {
  MERIDIAN_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(job_yaml, job_name));
  const auto missing = [&](std::string_view what) {
    return InvalidArgumentError(fmt::format("job '{}' is not a replica job of `meridian serve`: no {}", job_name, what));
  };
  if (!root.IsMap() || !root["tasks"] || !root["tasks"].IsSequence() || root["tasks"].size() != 1 ||
      !root["tasks"][0].IsMap()) {  // (yaml-cpp throws on a key of a scalar)
    return missing("single task");
  }
  const YAML::Node env = root["tasks"][0]["env"];
  if (!env || !env.IsMap()) return missing("env");
  const YAML::Node spec = env[kServiceSpecEnv];
  const YAML::Node token = env[kReplicaTokenEnv];
  if (!spec || !spec.IsScalar()) return missing(kServiceSpecEnv);
  if (!token || !token.IsScalar()) return missing(kReplicaTokenEnv);
  ServiceOfReplica out;
  MERIDIAN_ASSIGN_OR_RETURN(out.spec, ParseServiceSpec(spec.Scalar(), fmt::format("{} ({})", job_name, kServiceSpecEnv)));
  // Tokens go into requests as a header: hex, as `meridian serve` makes them.
  const auto hex_token = [&](const char* name, const std::string& value) {
    const bool hex = std::all_of(value.begin(), value.end(), [](char ch) {
      return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
    });
    return value.size() < 16 || value.size() > 256 || !hex
               ? InvalidArgumentError(fmt::format("job '{}': {} is not 16 to 256 lowercase hex digits", job_name, name))
               : OkStatus();
  };
  out.secrets.token = token.Scalar();
  MERIDIAN_RETURN_IF_ERROR(hex_token(kReplicaTokenEnv, out.secrets.token));
  if (const YAML::Node replaces = env[kReplicaReplacesEnv]) {
    const std::string text = replaces.IsScalar() ? replaces.Scalar() : "";
    const bool digits = !text.empty() && text.size() <= 19 &&
                        std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (!digits) return InvalidArgumentError(fmt::format("job '{}': {} is not a job id", job_name, kReplicaReplacesEnv));
    out.replaces = std::stoull(text);
  }
  // The clients' token: absent in a replica job of before it.
  if (const YAML::Node client = env[kServiceClientTokenEnv]) {
    if (!client.IsScalar()) return InvalidArgumentError(fmt::format("job '{}': {} is not a string", job_name, kServiceClientTokenEnv));
    out.secrets.client_token = client.Scalar();
    MERIDIAN_RETURN_IF_ERROR(hex_token(kServiceClientTokenEnv, out.secrets.client_token));
  }
  // TLS: all three PEM texts or none (a replica job of before TLS). Whether they parse
  // is for OpenSSL, where they are used.
  const std::pair<const char*, std::string*> pems[] = {{kReplicaTlsCaEnv, &out.secrets.tls_ca_pem},
                                                       {kReplicaTlsCertEnv, &out.secrets.tls_cert_pem},
                                                       {kReplicaTlsKeyEnv, &out.secrets.tls_key_pem}};
  int present = 0;
  for (const auto& [name, value] : pems) {
    const YAML::Node v = env[name];
    if (!v) continue;
    ++present;
    if (!v.IsScalar() || !v.Scalar().starts_with("-----BEGIN ")) {
      return InvalidArgumentError(fmt::format("job '{}': {} is not PEM text", job_name, name));
    }
    *value = v.Scalar();
  }
  if (present != 0 && present != 3) {
    return InvalidArgumentError(fmt::format("job '{}': {}, {} and {} come together", job_name, kReplicaTlsCaEnv,
                                            kReplicaTlsCertEnv, kReplicaTlsKeyEnv));
  }
  return out;
}

}  // namespace meridian::spec
