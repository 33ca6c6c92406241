// A delay line for IPv4 packets: what netem does for latency and jitter, in user space,
// for kernels without netem (scripts/netsim.sh routes a site's packets through a TUN
// device that `meridian-delayline` reads and writes back). Each rule names a subnet
// (a site's); a packet from or to it waits the rule's delay plus a uniform draw in
// [0, jitter]. A packet whose two ends both match waits both. Packets of one flow
// (source and destination address) leave in the order they came, as on a real link
// whose queue varies: a packet never overtakes the one before it, so jitter does not
// reorder a TCP stream (netem's does).
//
// Thread-safety: not thread-safe; one thread owns a DelayLine.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/env.h"
#include "common/status.h"

namespace meridian::netsim {

struct DelayRule {
  uint32_t network = 0;  // host byte order, already masked
  int prefix_length = 0;
  int64_t delay_us = 0;
  int64_t jitter_us = 0;

  bool Matches(uint32_t address) const;
};

inline constexpr int64_t kMaxRuleDelayUs = 10'000'000;  // a rule's delay, and its jitter
inline constexpr size_t kMaxRules = 256;

// Parses rules, one a line: "SUBNET DELAY JITTER" ("10.200.3.0/24 0ms 20ms"); '#'
// starts a comment. Errors name the line.
StatusOr<std::vector<DelayRule>> ParseDelayRules(std::string_view text);

// The source and destination of an IPv4 packet (host byte order), or an error saying
// what is wrong with its header.
struct Ipv4Ends {
  uint32_t source = 0;
  uint32_t destination = 0;
};
StatusOr<Ipv4Ends> ReadIpv4Ends(std::string_view packet);

struct DelayLineStats {
  int64_t packets = 0;        // admitted
  int64_t bytes = 0;          // admitted
  int64_t delayed = 0;        // of them, held by a rule
  int64_t dropped = 0;        // refused: the line was full
  int64_t not_ipv4 = 0;       // passed at once
  int64_t added_us_total = 0;  // wait added to the delayed packets, in all
  int64_t added_us_max = 0;
};

class DelayLine {
 public:
  struct Options {
    size_t max_packets = 10'000;           // held at once; more are dropped, as a full queue would
    int64_t max_bytes = int64_t{64} << 20;
    uint64_t seed = 1;
  };
  explicit DelayLine(Options options);

  void SetRules(std::vector<DelayRule> rules) { rules_ = std::move(rules); }
  const std::vector<DelayRule>& rules() const { return rules_; }

  // Takes a packet read at `now_us`; false when it was dropped (the line is full).
  bool Admit(std::string packet, int64_t now_us);
  // The packets due at `now_us`, in the order they leave.
  std::vector<std::string> TakeDue(int64_t now_us);
  // When the next packet is due; none when the line is empty.
  std::optional<int64_t> NextDueUs() const;
  size_t held() const { return queue_.size(); }
  const DelayLineStats& stats() const { return stats_; }

 private:
  struct Held {
    int64_t due_us;
    uint64_t order;  // ties leave in arrival order
    std::string packet;
    bool operator>(const Held& o) const { return due_us != o.due_us ? due_us > o.due_us : order > o.order; }
  };
  // The wait the rules give a packet between these ends: each matching rule's delay
  // and a draw of its jitter.
  int64_t WaitUs(const Ipv4Ends& ends);

  Options options_;
  Random random_;
  std::vector<DelayRule> rules_;
  std::priority_queue<Held, std::vector<Held>, std::greater<>> queue_;
  std::unordered_map<uint64_t, int64_t> flow_due_;  // (source, destination) -> last packet's due time
  int64_t held_bytes_ = 0;
  uint64_t next_order_ = 0;
  DelayLineStats stats_;
};

}  // namespace meridian::netsim
