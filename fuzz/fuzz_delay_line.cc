// The delay line's inputs: the packets the kernel hands it (whatever a site sends) and
// its rules file. A packet is never lost or changed unless the line is full, and
// leaves no earlier than it came and no later than its rules allow.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "common/status.h"
#include "netsim/delay_line.h"

namespace netsim = meridian::netsim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto rules = netsim::ParseDelayRules(bytes);
  if (rules.ok()) {
    MERIDIAN_CHECK_MSG(rules->size() <= netsim::kMaxRules, "too many rules accepted");
    for (const netsim::DelayRule& r : *rules) {
      MERIDIAN_CHECK_MSG(r.prefix_length >= 0 && r.prefix_length <= 32, "a bad prefix accepted");
      MERIDIAN_CHECK_MSG(r.delay_us >= 0 && r.delay_us <= netsim::kMaxRuleDelayUs, "a bad delay accepted");
      MERIDIAN_CHECK_MSG(r.jitter_us >= 0 && r.jitter_us <= netsim::kMaxRuleDelayUs, "a bad jitter accepted");
    }
  }
  // The bytes as packets: split at each 0xff, each admitted 1 ms after the one before.
  netsim::DelayLine line({.max_packets = 64, .max_bytes = 1 << 16, .seed = size});
  line.SetRules(*netsim::ParseDelayRules("10.0.0.0/8 1ms 5ms\n0.0.0.0/0 0ms 1ms\n"));
  int64_t now = 0;
  size_t admitted = 0;
  std::string_view rest = bytes;
  while (!rest.empty()) {
    const size_t cut = std::min(rest.find('\xff'), rest.size());
    std::string packet(rest.substr(0, cut));
    rest.remove_prefix(std::min(cut + 1, rest.size()));
    if (auto ends = netsim::ReadIpv4Ends(packet); ends.ok()) {
      MERIDIAN_CHECK_MSG(packet.size() >= 20, "a short packet read");
    }
    admitted += line.Admit(std::move(packet), now) ? 1 : 0;
    now += 1'000;
  }
  size_t left = 0;
  while (auto next = line.NextDueUs()) {
    // Two crossings of each rule at most: 2 * (1 + 5) + 2 * 1 ms after the last admission.
    MERIDIAN_CHECK_MSG(*next <= now + 14'000, "a packet held past its rules");
    left += line.TakeDue(*next).size();
  }
  MERIDIAN_CHECK_MSG(left == admitted, "a packet lost");
  return 0;
}
