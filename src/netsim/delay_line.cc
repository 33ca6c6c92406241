#include "netsim/delay_line.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "common/units.h"

namespace meridian::netsim {

namespace {

uint32_t Mask(int prefix_length) {
  return prefix_length == 0 ? 0 : ~uint32_t{0} << (32 - prefix_length);
}

StatusOr<DelayRule> ParseRule(const std::string& subnet, const std::string& delay, const std::string& jitter) {
  DelayRule rule;
  const size_t slash = subnet.find('/');
  const std::string address = subnet.substr(0, slash);
  in_addr parsed{};
  if (inet_pton(AF_INET, address.c_str(), &parsed) != 1) {
    return InvalidArgumentError(fmt::format("'{}' is not an IPv4 address", address));
  }
  rule.prefix_length = 32;
  if (slash != std::string::npos) {
    const std::string bits = subnet.substr(slash + 1);
    if (bits.empty() || bits.size() > 2 || !std::all_of(bits.begin(), bits.end(), ::isdigit) || std::stoi(bits) > 32) {
      return InvalidArgumentError(fmt::format("'/{}' is not a prefix length (0 to 32)", bits));
    }
    rule.prefix_length = std::stoi(bits);
  }
  rule.network = ntohl(parsed.s_addr) & Mask(rule.prefix_length);
  MERIDIAN_ASSIGN_OR_RETURN(rule.delay_us, ParseDurationUs(delay));
  MERIDIAN_ASSIGN_OR_RETURN(rule.jitter_us, ParseDurationUs(jitter));
  for (int64_t v : {rule.delay_us, rule.jitter_us}) {
    if (v < 0 || v > kMaxRuleDelayUs) return InvalidArgumentError("a delay or jitter is 0 to 10s");
  }
  return rule;
}

}  // namespace

bool DelayRule::Matches(uint32_t address) const { return (address & Mask(prefix_length)) == network; }

StatusOr<std::vector<DelayRule>> ParseDelayRules(std::string_view text) {
  std::vector<DelayRule> rules;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    if (w.size() != 3) {
      return InvalidArgumentError(
          fmt::format("line {}: want 'SUBNET DELAY JITTER' (e.g. 10.200.3.0/24 0ms 20ms), got {} words", number,
                      w.size()));
    }
    StatusOr<DelayRule> rule = ParseRule(w[0], w[1], w[2]);
    if (!rule.ok()) return InvalidArgumentError(fmt::format("line {}: {}", number, rule.status().message()));
    if (rules.size() == kMaxRules) return InvalidArgumentError(fmt::format("line {}: more than {} rules", number, kMaxRules));
    rules.push_back(*rule);
  }
  return rules;
}

StatusOr<Ipv4Ends> ReadIpv4Ends(std::string_view packet) {
  if (packet.size() < 20) return InvalidArgumentError(fmt::format("{} bytes: shorter than an IPv4 header", packet.size()));
  const auto* b = reinterpret_cast<const unsigned char*>(packet.data());
  if (b[0] >> 4 != 4) return InvalidArgumentError(fmt::format("IP version {}, not 4", b[0] >> 4));
  const size_t header = size_t{b[0] & 0x0fu} * 4;
  const size_t total = size_t{b[2]} << 8 | b[3];
  if (header < 20 || header > total || total > packet.size()) {
    return InvalidArgumentError(
        fmt::format("header of {} bytes and length {} in a {}-byte packet", header, total, packet.size()));
  }
  Ipv4Ends ends;
  uint32_t v;
  std::memcpy(&v, b + 12, 4);
  ends.source = ntohl(v);
  std::memcpy(&v, b + 16, 4);
  ends.destination = ntohl(v);
  return ends;
}

DelayLine::DelayLine(Options options) : options_(options), random_(options.seed) {}

int64_t DelayLine::WaitUs(const Ipv4Ends& ends) {
  int64_t wait = 0;
  for (const DelayRule& r : rules_) {
    // A rule is one site's link: a packet crosses it once if one end is there.
    const int crossings = int{r.Matches(ends.source)} + int{r.Matches(ends.destination)};
    for (int i = 0; i < crossings; ++i) {
      wait += r.delay_us + (r.jitter_us > 0 ? random_.UniformRange(0, r.jitter_us) : 0);
    }
  }
  return wait;
}

bool DelayLine::Admit(std::string packet, int64_t now_us) {
  if (queue_.size() >= options_.max_packets ||
      held_bytes_ + static_cast<int64_t>(packet.size()) > options_.max_bytes) {
    ++stats_.dropped;
    return false;
  }
  ++stats_.packets;
  stats_.bytes += static_cast<int64_t>(packet.size());
  int64_t due = now_us;
  StatusOr<Ipv4Ends> ends = ReadIpv4Ends(packet);
  if (!ends.ok()) {
    ++stats_.not_ipv4;
  } else {
    const int64_t wait = WaitUs(*ends);
    // After the flow's previous packet: a queue that varies does not reorder.
    const uint64_t flow = uint64_t{ends->source} << 32 | ends->destination;
    if (flow_due_.size() > 65'536) {
      std::erase_if(flow_due_, [&](const auto& f) { return f.second <= now_us; });
    }
    int64_t& last = flow_due_[flow];
    due = std::max(now_us + wait, last);
    last = due;
    if (due > now_us) {
      ++stats_.delayed;
      stats_.added_us_total += due - now_us;
      stats_.added_us_max = std::max(stats_.added_us_max, due - now_us);
    }
  }
  held_bytes_ += static_cast<int64_t>(packet.size());
  queue_.push(Held{due, next_order_++, std::move(packet)});
  return true;
}

std::vector<std::string> DelayLine::TakeDue(int64_t now_us) {
  std::vector<std::string> due;
  while (!queue_.empty() && queue_.top().due_us <= now_us) {
    // priority_queue's top is const; the packet is moved out just before the pop.
    Held& top = const_cast<Held&>(queue_.top());
    held_bytes_ -= static_cast<int64_t>(top.packet.size());
    due.push_back(std::move(top.packet));
    queue_.pop();
  }
  return due;
}

std::optional<int64_t> DelayLine::NextDueUs() const {
  if (queue_.empty()) return std::nullopt;
  return queue_.top().due_us;
}

}  // namespace meridian::netsim
