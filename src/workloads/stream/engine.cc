#include "workloads/stream/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace meridian::workloads::stream {
namespace {

using nlohmann::json;

// 9999-12-31T23:59:59.999Z: event times past it are refused (and sums stay far from
// overflow).
constexpr int64_t kMaxEventTimeMs = 253'402'300'799'999;

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Status Malformed(std::string_view why) { return InvalidArgumentError(fmt::format("malformed record: {}", why)); }

}  // namespace

StatusOr<model::SensorRecord> ParseRecord(std::string_view payload) {
  if (payload.size() > model::kMaxSensorRecordBytes) {
    return Malformed(fmt::format("{} bytes, more than {}", payload.size(), model::kMaxSensorRecordBytes));
  }
  json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Malformed("expected a JSON object");
  model::SensorRecord r;
  int fields = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "device") {
      if (!v.is_string()) return Malformed("'device' must be a string");
      r.device = v.get<std::string>();
      if (r.device.empty() || r.device.size() > model::kMaxDeviceNameBytes) {
        return Malformed(fmt::format("'device' must be 1 to {} bytes", model::kMaxDeviceNameBytes));
      }
    } else if (key == "seq") {
      if (!v.is_number_unsigned()) return Malformed("'seq' must be an integer >= 0");
      r.seq = v.get<uint64_t>();
    } else if (key == "event_time_ms") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxEventTimeMs) {
        return Malformed("'event_time_ms' must be an integer of ms since the epoch, up to the year 9999");
      }
      r.event_time_ms = v.get<int64_t>();
    } else if (key == "value") {
      if (!v.is_number()) return Malformed("'value' must be a number");
      r.value = v.get<double>();
      if (!std::isfinite(r.value)) return Malformed("'value' must be finite");
    } else {
      return Malformed(fmt::format("unknown field '{}'", key.substr(0, 64)));
    }
    ++fields;
  }
  if (fields != 4) return Malformed("expected the fields device, seq, event_time_ms and value");
  return r;
}

StatusOr<model::SensorRecord> ParseResultAsRecord(std::string_view payload, std::string_view value) {
  if (payload.size() > model::kMaxSensorRecordBytes) {
    return Malformed(fmt::format("{} bytes, more than {}", payload.size(), model::kMaxSensorRecordBytes));
  }
  json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Malformed("expected a JSON object (a window result)");
  auto field = [&](std::string_view key) -> const json* {
    auto it = j.find(std::string(key));
    return it == j.end() ? nullptr : &*it;
  };
  model::SensorRecord r;
  const json* device = field("device");
  const std::string* name = device != nullptr && device->is_string() ? device->get_ptr<const std::string*>() : nullptr;
  if (name == nullptr || name->empty() || name->size() > model::kMaxDeviceNameBytes) {
    return Malformed(fmt::format("a window result's 'device' must be a string of 1 to {} bytes",
                                 model::kMaxDeviceNameBytes));
  }
  r.device = *name;
  const json* start = field("window_start_ms");
  const json* end = field("window_end_ms");
  if (start == nullptr || end == nullptr || !start->is_number_integer() || !end->is_number_integer() ||
      start->get<int64_t>() < 0 || end->get<int64_t>() <= start->get<int64_t>() ||
      end->get<int64_t>() > kMaxEventTimeMs + 1) {
    return Malformed("a window result's 'window_start_ms' and 'window_end_ms' must be integers, 0 <= start < end, "
                     "up to the year 9999");
  }
  r.seq = static_cast<uint64_t>(start->get<int64_t>());
  r.event_time_ms = end->get<int64_t>() - 1;
  const json* figure = field(value);
  if (figure == nullptr || !figure->is_number() || !std::isfinite(figure->get<double>())) {
    return Malformed(fmt::format("a window result's '{}' must be a finite number", value));
  }
  r.value = figure->get<double>();
  return r;
}

std::string FormatRecord(const model::SensorRecord& record) {
  json j = {{"device", record.device},
            {"seq", record.seq},
            {"event_time_ms", record.event_time_ms},
            {"value", record.value}};
  return j.dump();
}

std::string FormatResult(const model::WindowResult& r) {
  json j = {{"device", r.device}, {"window_start_ms", r.window_start_ms},
            {"window_end_ms", r.window_end_ms}, {"count", r.count},
            {"sum", r.sum}, {"min", r.min},
            {"max", r.max}, {"mean", r.mean},
            {"stddev", r.stddev}, {"first_seq", r.first_seq},
            {"last_seq", r.last_seq}, {"score", r.score},
            {"anomaly", r.anomaly}};
  return j.dump();
}

StatusOr<model::WindowResult> ParseResult(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgumentError("a window result: expected a JSON object");
  model::WindowResult r;
  try {
    r.device = j.at("device").get<std::string>();
    r.window_start_ms = j.at("window_start_ms").get<int64_t>();
    r.window_end_ms = j.at("window_end_ms").get<int64_t>();
    r.count = j.at("count").get<int64_t>();
    r.sum = j.at("sum").get<double>();
    r.min = j.at("min").get<double>();
    r.max = j.at("max").get<double>();
    r.mean = j.at("mean").get<double>();
    r.stddev = j.at("stddev").get<double>();
    r.first_seq = j.at("first_seq").get<uint64_t>();
    r.last_seq = j.at("last_seq").get<uint64_t>();
    r.score = j.at("score").get<double>();
    r.anomaly = j.at("anomaly").get<bool>();
  } catch (const json::exception& e) {
    return InvalidArgumentError(fmt::format("a window result: {}", e.what()));
  }
  return r;
}

std::string SpecFingerprint(const model::StreamSpec& spec) {
  std::string f = fmt::format("stream {} source {} window {}/{}/{}/{}", spec.name, spec.source.topic,
                              spec.window.size_ms, spec.window.slide_ms, spec.window.out_of_orderness_ms,
                              spec.window.allowed_lateness_ms);
  for (const model::StreamStep& step : spec.steps) {
    if (step.filter) {
      const model::StreamFilter& x = *step.filter;
      f += fmt::format(" filter {}/{}/{}", x.min ? fmt::format("{:.17g}", *x.min) : "-",
                       x.max ? fmt::format("{:.17g}", *x.max) : "-", x.device_prefix);
    }
    if (step.map) f += fmt::format(" map {:.17g}/{:.17g}", step.map->scale, step.map->offset);
  }
  if (spec.detect) f += fmt::format(" detect {:.17g}/{}", spec.detect->threshold, spec.detect->history);
  if (spec.input == model::StreamInput::kResults) f += " results " + spec.input_value;
  return f;
}

StreamEngine::StreamEngine(model::StreamSpec spec, const kernels::Ops* ops)
    : spec_(std::move(spec)), ops_(ops != nullptr ? ops : &kernels::CpuOps()) {}

int64_t StreamEngine::LastStart(int64_t t) const { return FloorDiv(t, spec_.window.slide_ms) * spec_.window.slide_ms; }

bool StreamEngine::Written(int64_t start) const {
  return watermark_ms_ != INT64_MIN &&
         start + spec_.window.size_ms + spec_.window.allowed_lateness_ms <= watermark_ms_;
}

Status StreamEngine::Add(std::string_view payload, std::vector<model::WindowResult>* out) {
  StatusOr<model::SensorRecord> record = spec_.input == model::StreamInput::kResults
                                             ? ParseResultAsRecord(payload, spec_.input_value)
                                             : ParseRecord(payload);
  if (!record.ok()) {
    ++counters_.payloads;
    ++counters_.malformed;
    if (counters_.first_error.empty()) counters_.first_error = record.status().message();
    return OkStatus();
  }
  return AddRecord(std::move(*record), out);
}

Status StreamEngine::AddRecord(model::SensorRecord record, std::vector<model::WindowResult>* out) {
  ++counters_.payloads;
  for (const model::StreamStep& step : spec_.steps) {
    if (step.map) record.value = record.value * step.map->scale + step.map->offset;
    if (step.filter) {
      const model::StreamFilter& f = *step.filter;
      if ((f.min && !(record.value >= *f.min)) || (f.max && !(record.value <= *f.max)) ||
          !record.device.starts_with(f.device_prefix)) {
        ++counters_.filtered;
        return OkStatus();
      }
    }
  }
  if (!std::isfinite(record.value)) {  // a map may overflow
    ++counters_.malformed;
    if (counters_.first_error.empty()) counters_.first_error = "a map made a value infinite";
    return OkStatus();
  }
  const model::StreamWindow& w = spec_.window;
  const int64_t last = LastStart(record.event_time_ms);
  // The record's windows still open, oldest first.
  std::vector<int64_t> starts;
  for (int64_t s = last - w.size_ms + w.slide_ms; s <= last; s += w.slide_ms) {
    if (!Written(s)) starts.push_back(s);
  }
  if (starts.empty()) {
    ++counters_.late;
    return OkStatus();
  }
  auto dit = devices_.find(record.device);
  if (dit != devices_.end() && dit->second.held.contains(record.seq)) {
    ++counters_.duplicates;
    return OkStatus();
  }
  if (open_records_ + static_cast<int64_t>(starts.size()) > spec_.max_open_records) {
    return ResourceExhaustedError(
        fmt::format("stream '{}': open windows would hold more than max_open_records ({}) records; raise it, or "
                    "shorten the window, its out_of_orderness or its allowed_lateness",
                    spec_.name, spec_.max_open_records));
  }
  if (dit == devices_.end()) {
    if (devices_.size() >= model::kMaxStreamDevices) {
      return ResourceExhaustedError(fmt::format("stream '{}': more than {} devices", spec_.name,
                                                model::kMaxStreamDevices));
    }
    dit = devices_.emplace(record.device, Device{}).first;
  }
  Device& device = dit->second;
  device.held.insert(record.seq);
  for (int64_t s : starts) {
    auto [wit, fresh] = device.windows.try_emplace(s);
    if (fresh) open_.emplace(s + w.size_ms, record.device, s);
    wit->second.push_back(Entry{record.seq, record.event_time_ms, record.value});
    ++open_records_;
  }
  ++counters_.accepted;
  if (record.event_time_ms > max_event_ms_) {
    max_event_ms_ = record.event_time_ms;
    watermark_ms_ = max_event_ms_ - w.out_of_orderness_ms;
    return FireReady(false, out);
  }
  return OkStatus();
}

Status StreamEngine::FireReady(bool all, std::vector<model::WindowResult>* out) {
  std::vector<Closing> closing;
  while (!open_.empty()) {
    auto [end, name, start] = *open_.begin();
    if (!all && !Written(start)) break;
    open_.erase(open_.begin());
    Device& device = devices_.at(name);
    auto wit = device.windows.find(start);
    Closing w{name, start, std::move(wit->second)};
    device.windows.erase(wit);
    open_records_ -= static_cast<int64_t>(w.entries.size());
    std::sort(w.entries.begin(), w.entries.end(), [](const Entry& a, const Entry& b) { return a.seq < b.seq; });
    for (const Entry& e : w.entries) {
      // The record's last window: it is held by none still open.
      if (LastStart(e.event_time_ms) == start) device.held.erase(e.seq);
    }
    closing.push_back(std::move(w));
  }
  if (closing.empty()) return OkStatus();
  std::vector<double> values;
  std::vector<int64_t> offsets = {0};
  values.reserve(static_cast<size_t>(std::accumulate(
      closing.begin(), closing.end(), size_t{0}, [](size_t n, const Closing& w) { return n + w.entries.size(); })));
  for (const Closing& w : closing) {
    for (const Entry& e : w.entries) values.push_back(e.value);
    offsets.push_back(static_cast<int64_t>(values.size()));
  }
  std::vector<kernels::WindowStat> stats(closing.size());
  MERIDIAN_RETURN_IF_ERROR(ops_->WindowStats(values, offsets, stats));
  for (size_t i = 0; i < closing.size(); ++i) Finish(closing[i], stats[i], out);
  if (!spec_.detect) {
    // A device with nothing open and no history to keep is forgotten.
    for (const Closing& w : closing) {
      auto it = devices_.find(w.device);
      if (it != devices_.end() && it->second.windows.empty() && it->second.held.empty()) devices_.erase(it);
    }
  }
  return OkStatus();
}

Status StreamEngine::Flush(std::vector<model::WindowResult>* out) { return FireReady(true, out); }

std::string StreamEngine::Snapshot() const {
  // By name: the same state gives the same text.
  std::vector<const std::string*> names;
  names.reserve(devices_.size());
  for (const auto& entry : devices_) names.push_back(&entry.first);
  std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  json devices = json::array();
  for (const std::string* n : names) {
    const std::string& name = *n;
    const Device& d = devices_.at(name);
    json windows = json::array();
    for (const auto& [start, entries] : d.windows) {
      json es = json::array();
      for (const Entry& e : entries) es.push_back(json::array({e.seq, e.event_time_ms, e.value}));
      windows.push_back(json::array({start, std::move(es)}));
    }
    devices.push_back({{"name", name}, {"history", d.history}, {"windows", std::move(windows)}});
  }
  const StreamCounters& c = counters_;
  json j = {{"fingerprint", SpecFingerprint(spec_)},
            {"max_event_ms", max_event_ms_},
            {"counters",
             {{"payloads", c.payloads}, {"malformed", c.malformed}, {"filtered", c.filtered},
              {"duplicates", c.duplicates}, {"late", c.late}, {"accepted", c.accepted},
              {"results", c.results}, {"anomalies", c.anomalies}, {"first_error", c.first_error}}},
            {"devices", std::move(devices)}};
  return j.dump();
}

Status StreamEngine::Restore(std::string_view snapshot) {
  auto bad = [](std::string_view why) {
    return InvalidArgumentError(fmt::format("the stream's checkpoint: {}", why));
  };
  json j = json::parse(snapshot, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  const model::StreamWindow& w = spec_.window;
  std::unordered_map<std::string, Device> devices;
  std::set<std::tuple<int64_t, std::string, int64_t>> open;
  StreamCounters c;
  int64_t max_event = INT64_MIN;
  int64_t open_records = 0;
  try {
    if (j.at("fingerprint").get<std::string>() != SpecFingerprint(spec_)) {
      return bad("it was taken by a stream of another spec (its operators or windows differ); start afresh with "
                 "another state directory");
    }
    max_event = j.at("max_event_ms").get<int64_t>();
    const int64_t watermark = max_event == INT64_MIN ? INT64_MIN : max_event - w.out_of_orderness_ms;
    const json& k = j.at("counters");
    c.payloads = k.at("payloads").get<int64_t>();
    c.malformed = k.at("malformed").get<int64_t>();
    c.filtered = k.at("filtered").get<int64_t>();
    c.duplicates = k.at("duplicates").get<int64_t>();
    c.late = k.at("late").get<int64_t>();
    c.accepted = k.at("accepted").get<int64_t>();
    c.results = k.at("results").get<int64_t>();
    c.anomalies = k.at("anomalies").get<int64_t>();
    c.first_error = k.at("first_error").get<std::string>().substr(0, 1024);
    const json& ds = j.at("devices");
    if (!ds.is_array() || ds.size() > model::kMaxStreamDevices) {
      return bad(fmt::format("expected a list of at most {} devices", model::kMaxStreamDevices));
    }
    for (const json& dj : ds) {
      std::string name = dj.at("name").get<std::string>();
      if (name.empty() || name.size() > model::kMaxDeviceNameBytes) return bad("a device name out of bounds");
      Device d;
      for (const json& m : dj.at("history")) d.history.push_back(m.get<double>());
      if (static_cast<int64_t>(d.history.size()) > (spec_.detect ? spec_.detect->history : 0)) {
        return bad(fmt::format("device '{}' keeps more history than the spec's detect", name));
      }
      for (const json& wj : dj.at("windows")) {
        const int64_t start = wj.at(0).get<int64_t>();
        if (start % w.slide_ms != 0 || (watermark != INT64_MIN && start + w.size_ms + w.allowed_lateness_ms <= watermark)) {
          return bad(fmt::format("device '{}' has a window at {} that cannot be open", name, start));
        }
        std::vector<Entry>& entries = d.windows[start];
        if (!entries.empty()) return bad(fmt::format("device '{}' has the window at {} twice", name, start));
        for (const json& e : wj.at(1)) {
          Entry x{e.at(0).get<uint64_t>(), e.at(1).get<int64_t>(), e.at(2).get<double>()};
          if (x.event_time_ms < start || x.event_time_ms >= start + w.size_ms || !std::isfinite(x.value)) {
            return bad(fmt::format("device '{}' has a record outside its window at {}", name, start));
          }
          if (++open_records > spec_.max_open_records) {
            return bad(fmt::format("it holds more than max_open_records ({}) records", spec_.max_open_records));
          }
          d.held.insert(x.seq);
          entries.push_back(x);
        }
        if (entries.empty()) return bad(fmt::format("device '{}' has an empty window at {}", name, start));
        open.emplace(start + w.size_ms, name, start);
      }
      if (!devices.emplace(std::move(name), std::move(d)).second) return bad("a device is listed twice");
    }
  } catch (const json::exception& e) {
    return bad(e.what());
  }
  devices_ = std::move(devices);
  open_ = std::move(open);
  counters_ = std::move(c);
  max_event_ms_ = max_event;
  watermark_ms_ = max_event == INT64_MIN ? INT64_MIN : max_event - w.out_of_orderness_ms;
  open_records_ = open_records;
  return OkStatus();
}

void StreamEngine::Finish(Closing& w, const kernels::WindowStat& stat, std::vector<model::WindowResult>* out) {
  model::WindowResult r;
  r.device = std::move(w.device);
  r.window_start_ms = w.start;
  r.window_end_ms = w.start + spec_.window.size_ms;
  r.count = static_cast<int64_t>(w.entries.size());
  r.sum = stat.sum;
  r.min = stat.min;
  r.max = stat.max;
  r.mean = stat.mean;
  r.stddev = stat.stddev;
  r.first_seq = w.entries.front().seq;
  r.last_seq = w.entries.back().seq;
  if (spec_.detect) {
    std::deque<double>& h = devices_.at(r.device).history;
    if (h.size() >= 2) {
      double hsum = 0;
      for (double m : h) hsum += m;
      const double hmean = hsum / static_cast<double>(h.size());
      double hsq = 0;
      for (double m : h) hsq += (m - hmean) * (m - hmean);
      const double hstd = std::sqrt(hsq / static_cast<double>(h.size()));
      if (hstd > 0) r.score = std::fabs(r.mean - hmean) / hstd;
    }
    r.anomaly = r.score >= spec_.detect->threshold;
    h.push_back(r.mean);
    if (static_cast<int32_t>(h.size()) > spec_.detect->history) h.pop_front();
  }
  ++counters_.results;
  if (r.anomaly) ++counters_.anomalies;
  out->push_back(std::move(r));
}

}  // namespace meridian::workloads::stream
