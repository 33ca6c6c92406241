#include "spec/stream_spec.h"

#include <algorithm>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/units.h"
#include "spec/resource_spec.h"
#include "spec/yaml_reader.h"

namespace meridian::spec {
namespace {

constexpr double kLowest = -std::numeric_limits<double>::max();
constexpr size_t kMaxTopicBytes = 1024;
constexpr int64_t kMaxWindowMs = int64_t{366} * 24 * 3600 * 1000;  // a year
// Windows a record may fall in (size / slide): each holds it once.
constexpr int64_t kMaxWindowsPerRecord = 1000;

int64_t Ms(int64_t us) { return us / 1000; }

class StreamParser {
 public:
  explicit StreamParser(const Reader& r) : r_(r) {}

  StatusOr<model::StreamSpec> Parse(const YAML::Node& root) {
    if (!root.IsMap()) return r_.Error(root, "", "expected a map (a stream spec)");
    MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(root, "", {"kind", "name", "site", "source", "operators", "sink",
                                                   "max_open_records", "end_after_idle",
                                                   "checkpoint_interval", "max_pending_results", "resources"}));
    std::string kind;
    MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(root, "kind", "", &kind));
    if (kind != "stream") return r_.Error(root["kind"], "kind", fmt::format("expected 'stream', got '{}'", kind));
    MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(root, "name", "", &spec_.name));
    if (spec_.name.empty() || spec_.name.size() > 128) {
      return r_.Error(root["name"], "name", "expected a name of 1 to 128 characters");
    }
    MERIDIAN_RETURN_IF_ERROR(r_.String(root, "site", "", &spec_.site));
    MERIDIAN_RETURN_IF_ERROR(Endpoint(root, "source", false, &spec_.source));
    MERIDIAN_RETURN_IF_ERROR(Sink(root));
    MERIDIAN_RETURN_IF_ERROR(
        r_.Int(root, "max_open_records", "", 1, int64_t{1} << 32, &spec_.max_open_records));
    MERIDIAN_RETURN_IF_ERROR(r_.Int(root, "max_pending_results", "", 1, 10'000'000, &spec_.max_pending_results));
    MERIDIAN_RETURN_IF_ERROR(Operators(root));
    MERIDIAN_RETURN_IF_ERROR(ParseResourceRequest(r_, root, "", &spec_.resources));
    if (spec_.resources.device_count > 1) {
      return r_.Error(root["resources"], "resources.count", "a stream uses one accelerator at most");
    }
    if (root["end_after_idle"]) {
      int64_t us = 0;
      MERIDIAN_RETURN_IF_ERROR(r_.Unit(root, "end_after_idle", "", ParseDurationUs, &us));
      spec_.end_after_idle_ms = Ms(us);
      if (spec_.end_after_idle_ms < 1 || spec_.end_after_idle_ms > kMaxWindowMs) {
        return r_.Error(root["end_after_idle"], "end_after_idle", "expected 1ms to 366 days");
      }
    }
    if (root["checkpoint_interval"]) {
      int64_t us = 0;
      MERIDIAN_RETURN_IF_ERROR(r_.Unit(root, "checkpoint_interval", "", ParseDurationUs, &us));
      spec_.checkpoint_interval_ms = Ms(us);
      if (spec_.checkpoint_interval_ms < 100 || spec_.checkpoint_interval_ms > 3'600'000) {
        return r_.Error(root["checkpoint_interval"], "checkpoint_interval", "expected 100ms to 1h");
      }
    }
    return std::move(spec_);
  }

 private:
  Status Endpoint(const YAML::Node& root, std::string_view key, bool publish, model::MqttEndpoint* out) {
    YAML::Node e = root[std::string(key)];
    if (!e) return r_.Error(root, "", fmt::format("missing required field '{}'", key));
    const std::string path(key);
    if (!e.IsMap()) {
      return r_.Error(e, path, publish ? "expected a map with 'topic' (and 'broker'), or 'dataset'"
                                       : "expected a map with 'topic' (and 'broker')");
    }
    if (publish) {
      MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(e, path, {"topic", "broker", "site"}));
    } else {
      MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(e, path, {"topic", "broker", "format", "value"}));
      MERIDIAN_RETURN_IF_ERROR(r_.Enum(e, "format", path,
                                       {{"records", model::StreamInput::kRecords},
                                        {"results", model::StreamInput::kResults}},
                                       &spec_.input));
      if (e["value"]) {
        if (spec_.input != model::StreamInput::kResults) {
          return r_.Error(e["value"], Field(path, "value"),
                          "'value' picks a figure of a result: it needs 'format: results'");
        }
        MERIDIAN_RETURN_IF_ERROR(r_.String(e, "value", path, &spec_.input_value));
        if (std::find(std::begin(model::kResultFigures), std::end(model::kResultFigures), spec_.input_value) ==
            std::end(model::kResultFigures)) {
          return r_.Error(e["value"], Field(path, "value"),
                          fmt::format("unknown figure '{}'; expected one of {}", spec_.input_value.substr(0, 64),
                                      fmt::join(model::kResultFigures, ", ")));
        }
      }
    }
    MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(e, "topic", path, &out->topic));
    MERIDIAN_RETURN_IF_ERROR(r_.String(e, "broker", path, &out->broker));
    MERIDIAN_RETURN_IF_ERROR(r_.String(e, "site", path, &out->site));
    if (e["site"] && e["broker"]) return r_.Error(e, path, "give 'site' or 'broker', not both");
    if (e["site"]) {
      if (Status named = model::CheckName(out->site, "a site name"); !named.ok()) {
        return r_.Error(e["site"], Field(path, "site"), named.message());
      }
    }
    Status s = CheckMqttEndpoint(*out, publish);
    if (!s.ok()) return r_.Error(e, path, s.message());
    return OkStatus();
  }

  // An MQTT topic (Endpoint), or a dataset.
  Status Sink(const YAML::Node& root) {
    YAML::Node e = root["sink"];
    if (e && e.IsMap() && e["dataset"]) {
      MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(e, "sink", {"dataset"}));
      MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(e, "dataset", "sink", &spec_.sink_dataset));
      Status named = model::CheckName(spec_.sink_dataset, "a dataset name");
      if (named.ok() && model::LooksLikeObjectId(spec_.sink_dataset)) {
        named = InvalidArgumentError("a dataset name must not read as an object id (32 hex digits)");
      }
      if (!named.ok()) return r_.Error(e["dataset"], "sink.dataset", named.message());
      // The dataset is made when the stream's job succeeds: a stream that never ends
      // would make none.
      if (!root["end_after_idle"]) {
        return r_.Error(e, "sink", "a dataset sink needs 'end_after_idle' (the dataset is made when the stream ends)");
      }
      return OkStatus();
    }
    return Endpoint(root, "sink", true, &spec_.sink);
  }

  Status Operators(const YAML::Node& root) {
    YAML::Node ops = root["operators"];
    if (!ops) return r_.Error(root, "", "missing required field 'operators'");
    MERIDIAN_RETURN_IF_ERROR(r_.CheckSeq(ops, "operators"));
    bool have_window = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      const YAML::Node op = ops[i];
      const std::string path = Index("operators", i);
      if (!op.IsMap() || op.size() != 1) {
        return r_.Error(op, path, "expected one of filter, map, window or detect, as a map of one key");
      }
      if (!op.begin()->first.IsScalar()) {
        return r_.Error(op.begin()->first, path, "expected an operator name (filter, map, window or detect)");
      }
      const std::string name = op.begin()->first.Scalar();
      const YAML::Node body = op.begin()->second;
      const std::string bpath = Field(path, name);
      if (!body.IsMap()) return r_.Error(body, bpath, "expected a map");
      if (name == "filter" || name == "map") {
        if (have_window) {
          return r_.Error(op, path, fmt::format("'{}' must come before the window (results are windows)", name));
        }
        model::StreamStep step;
        if (name == "filter") {
          MERIDIAN_RETURN_IF_ERROR(Filter(body, bpath, &step.filter.emplace()));
        } else {
          model::StreamMap& m = step.map.emplace();
          MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(body, bpath, {"scale", "offset"}));
          MERIDIAN_RETURN_IF_ERROR(r_.Double(body, "scale", bpath, kLowest, &m.scale));
          MERIDIAN_RETURN_IF_ERROR(r_.Double(body, "offset", bpath, kLowest, &m.offset));
        }
        spec_.steps.push_back(std::move(step));
      } else if (name == "window") {
        if (have_window) return r_.Error(op, path, "a stream has one window");
        have_window = true;
        MERIDIAN_RETURN_IF_ERROR(Window(body, bpath));
      } else if (name == "detect") {
        if (!have_window) return r_.Error(op, path, "'detect' scores windows: it comes after the window");
        if (spec_.detect) return r_.Error(op, path, "a stream has one detect");
        model::StreamDetect& d = spec_.detect.emplace();
        MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(body, bpath, {"threshold", "history"}));
        MERIDIAN_RETURN_IF_ERROR(r_.Double(body, "threshold", bpath, 0, &d.threshold));
        int64_t history = d.history;
        MERIDIAN_RETURN_IF_ERROR(r_.Int(body, "history", bpath, 2, 10'000, &history));
        d.history = static_cast<int32_t>(history);
      } else {
        return r_.Error(op, path, fmt::format("unknown operator '{}'; expected filter, map, window or detect", name));
      }
    }
    if (!have_window) return r_.Error(ops, "operators", "a stream needs a 'window' operator");
    return OkStatus();
  }

  Status Filter(const YAML::Node& body, const std::string& path, model::StreamFilter* f) {
    MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(body, path, {"min", "max", "device_prefix"}));
    double v = 0;
    if (body["min"]) {
      MERIDIAN_RETURN_IF_ERROR(r_.Double(body, "min", path, kLowest, &v));
      f->min = v;
    }
    if (body["max"]) {
      MERIDIAN_RETURN_IF_ERROR(r_.Double(body, "max", path, kLowest, &v));
      f->max = v;
    }
    if (f->min && f->max && *f->min > *f->max) {
      return r_.Error(body, path, fmt::format("min {} is above max {}", *f->min, *f->max));
    }
    MERIDIAN_RETURN_IF_ERROR(r_.String(body, "device_prefix", path, &f->device_prefix));
    if (f->device_prefix.size() > model::kMaxDeviceNameBytes) {
      return r_.Error(body["device_prefix"], Field(path, "device_prefix"),
                      fmt::format("longer than a device name ({} bytes at most)", model::kMaxDeviceNameBytes));
    }
    return OkStatus();
  }

  Status Window(const YAML::Node& body, const std::string& path) {
    MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(body, path, {"size", "slide", "out_of_orderness", "allowed_lateness"}));
    model::StreamWindow& w = spec_.window;
    int64_t us = 0;
    if (!body["size"]) return r_.Error(body, path, "missing required field 'size'");
    MERIDIAN_RETURN_IF_ERROR(r_.Unit(body, "size", path, ParseDurationUs, &us));
    w.size_ms = Ms(us);
    if (w.size_ms < 1 || w.size_ms > kMaxWindowMs || us % 1000 != 0) {
      return r_.Error(body["size"], Field(path, "size"), "expected whole milliseconds, from 1ms to 366 days");
    }
    w.slide_ms = w.size_ms;
    if (body["slide"]) {
      MERIDIAN_RETURN_IF_ERROR(r_.Unit(body, "slide", path, ParseDurationUs, &us));
      w.slide_ms = Ms(us);
      if (w.slide_ms < 1 || us % 1000 != 0 || w.size_ms % w.slide_ms != 0 ||
          w.size_ms / w.slide_ms > kMaxWindowsPerRecord) {
        return r_.Error(body["slide"], Field(path, "slide"),
                        fmt::format("expected whole milliseconds that divide the size, at least size/{}",
                                    kMaxWindowsPerRecord));
      }
    }
    for (auto [key, out] : {std::pair{"out_of_orderness", &w.out_of_orderness_ms},
                            std::pair{"allowed_lateness", &w.allowed_lateness_ms}}) {
      if (!body[key]) continue;
      MERIDIAN_RETURN_IF_ERROR(r_.Unit(body, key, path, ParseDurationUs, &us));
      *out = Ms(us);
      if (us % 1000 != 0 || *out > kMaxWindowMs) {
        return r_.Error(body[key], Field(path, key), "expected whole milliseconds, at most 366 days");
      }
    }
    return OkStatus();
  }

  const Reader& r_;
  model::StreamSpec spec_;
};

}  // namespace

bool IsStreamSpec(std::string_view text) {
  StatusOr<YAML::Node> root = ParseYaml(text, "");
  if (!root.ok() || !root->IsMap()) return false;
  YAML::Node kind = (*root)["kind"];
  return kind && kind.IsScalar() && kind.Scalar() == "stream";
}

Status CheckMqttEndpoint(const model::MqttEndpoint& endpoint, bool publish) {
  const std::string& t = endpoint.topic;
  if (t.empty() || t.size() > kMaxTopicBytes || t.find('\0') != std::string::npos) {
    return InvalidArgumentError(fmt::format("topic: expected 1 to {} bytes", kMaxTopicBytes));
  }
  if (publish && t.find_first_of("+#") != std::string::npos) {
    return InvalidArgumentError(fmt::format("topic '{}': a topic written to may not hold + or #", t));
  }
  if (endpoint.broker.empty()) return OkStatus();
  return ParseMqttUrl(endpoint.broker).status();
}

StatusOr<MqttUrl> ParseMqttUrl(std::string_view url) {
  MqttUrl u;
  std::string_view rest = url;
  if (rest.starts_with("mqtt://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("mqtts://")) {
    rest.remove_prefix(8);
    u.tls = true;
  } else {
    return InvalidArgumentError(fmt::format("broker '{}': expected mqtt://HOST:PORT or mqtts://HOST:PORT", url));
  }
  const size_t colon = rest.rfind(':');
  const std::string_view port = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
  if (colon == 0 || colon == std::string_view::npos || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos || std::stoi(std::string(port)) < 1 ||
      std::stoi(std::string(port)) > 65535) {
    return InvalidArgumentError(fmt::format("broker '{}': expected mqtt://HOST:PORT with a port from 1 to 65535", url));
  }
  u.host = std::string(rest.substr(0, colon));
  if (u.host.size() > 2 && u.host.front() == '[' && u.host.back() == ']') u.host = u.host.substr(1, u.host.size() - 2);
  u.port = std::stoi(std::string(port));
  return u;
}

StatusOr<model::StreamSpec> ParseStreamSpec(std::string_view text, std::string_view file) {
  MERIDIAN_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(text, file));
  Reader r{std::string(file)};
  return StreamParser(r).Parse(root);
}

StatusOr<model::Job> ParseStreamJob(std::string_view text, std::string_view file, const model::Fleet& fleet) {
  MERIDIAN_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(text, file));
  Reader r{std::string(file)};
  MERIDIAN_ASSIGN_OR_RETURN(model::StreamSpec spec, StreamParser(r).Parse(root));
  // Errors about the site point at it (a const lookup adds no key).
  const YAML::Node at = std::as_const(root)["site"] ? std::as_const(root)["site"] : root;
  if (spec.site.empty()) return r.Error(root, "", "a stream job names its 'site' (where its broker and sensors are)");
  std::optional<SiteId> site = fleet.FindSite(spec.site);
  if (!site) return r.Error(at, "site", fmt::format("no site '{}' in the fleet", spec.site));
  const bool own_brokers = !spec.source.broker.empty() && (!spec.sink.broker.empty() || !spec.sink_dataset.empty());
  if (fleet.site(*site).kind != model::SiteKind::kEdge && !own_brokers) {
    return r.Error(at, "site",
                   fmt::format("site '{}' is not an edge site, so it has no broker; name one in source.broker and "
                               "sink.broker, or run the stream at an edge site",
                               spec.site));
  }
  // A sink at another site: that site's broker, written under sites/OWN_SITE/ (all its
  // ACL lets this site write there).
  if (!spec.sink.site.empty() && spec.sink.site != spec.site) {
    const YAML::Node sink = std::as_const(root)["sink"];
    const YAML::Node sink_site = sink["site"];
    std::optional<SiteId> to = fleet.FindSite(spec.sink.site);
    if (!to) return r.Error(sink_site, "sink.site", fmt::format("no site '{}' in the fleet", spec.sink.site));
    if (fleet.site(*to).kind != model::SiteKind::kEdge) {
      return r.Error(sink_site, "sink.site",
                     fmt::format("site '{}' is not an edge site, so it has no broker (name one in sink.broker)",
                                 spec.sink.site));
    }
    const std::string prefix = fmt::format("sites/{}/", spec.site);
    if (!spec.sink.topic.starts_with(prefix) || spec.sink.topic.size() == prefix.size()) {
      return r.Error(sink["topic"], "sink.topic",
                     fmt::format("a stream of site '{}' writes at another site's broker under '{}' (its ACL allows "
                                 "that site nothing else); got '{}'",
                                 spec.site, prefix, spec.sink.topic));
    }
  }
  model::Job job;
  job.name = spec.name;
  job.allowed_regions = {spec.site};
  model::Task task;
  task.id = TaskId{0};
  task.name = "stream";
  task.command = {"sh", "-c", "exec \"$MERIDIAN_BIN\" stream run --json"};
  task.resources = spec.resources;
  task.retries = 3;
  task.env[kStreamSpecEnv] = std::string(text);
  task.env["MERIDIAN_MQTT"] = "site";
  if (!spec.sink.site.empty() && spec.sink.site != spec.site) task.env["MERIDIAN_MQTT_SINK"] = spec.sink.site;
  // Its output (stdout) is then the results: they become the dataset.
  task.output_dataset = spec.sink_dataset;
  job.tasks.push_back(std::move(task));
  return job;
}

StatusOr<model::StreamSpec> LoadStreamSpec(const std::string& path) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxYamlFileBytes));
  return ParseStreamSpec(text, path);
}

}  // namespace meridian::spec
