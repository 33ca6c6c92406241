// meridian-delayline: holds the IPv4 packets the kernel routes into a TUN device for
// the delay and jitter of the rules in a file, then writes them back (delay_line.h).
// scripts/netsim.sh starts it in its router namespace on kernels without netem and
// rewrites the rules file; the line reads it again when it changes. It stops on
// SIGINT or SIGTERM. Exit 0: stopped; 1: the device failed; 2: a bad option.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/env.h"
#include "common/logging.h"
#include "common/subprocess.h"
#include "netsim/delay_line.h"
#include "netsim/tun.h"

namespace {

using meridian::netsim::DelayLine;

constexpr int64_t kMaxRulesFileBytes = 64 << 10;

// What identifies a version of the rules file (rewritten by rename: a new inode).
std::string FileVersion(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "absent";
  return fmt::format("{}:{}:{}:{}", st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

// The rules in `path`; none when it is absent. A file that does not parse keeps the
// rules in force, and the log says why.
void LoadRules(const std::string& path, DelayLine& line) {
  std::ifstream in(path);
  if (!in) {
    line.SetRules({});
    return;
  }
  std::string text(kMaxRulesFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > static_cast<size_t>(kMaxRulesFileBytes)) {
    MERIDIAN_LOG_ERROR("{}: longer than {} bytes; the rules in force stay", path, kMaxRulesFileBytes);
    return;
  }
  auto rules = meridian::netsim::ParseDelayRules(text);
  if (!rules.ok()) {
    MERIDIAN_LOG_ERROR("{}: {}; the rules in force stay", path, rules.status().message());
    return;
  }
  MERIDIAN_LOG_INFO("{} rules from {}", rules->size(), path);
  line.SetRules(*std::move(rules));
}

void WriteStats(const std::string& path, const DelayLine& line, int64_t write_errors) {
  if (path.empty()) return;
  const meridian::netsim::DelayLineStats& s = line.stats();
  const std::string text = fmt::format(
      "{{\"packets\": {}, \"bytes\": {}, \"delayed\": {}, \"dropped\": {}, \"not_ipv4\": {}, \"held\": {}, "
      "\"added_ms_mean\": {:.3f}, \"added_ms_max\": {:.3f}, \"rules\": {}, \"write_errors\": {}}}\n",
      s.packets, s.bytes, s.delayed, s.dropped, s.not_ipv4, line.held(),
      s.delayed > 0 ? static_cast<double>(s.added_us_total) / static_cast<double>(s.delayed) / 1e3 : 0.0,
      static_cast<double>(s.added_us_max) / 1e3, line.rules().size(), write_errors);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) return;
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Holds the IPv4 packets routed into a TUN device for the delay and jitter its rules give, "
               "then writes them back (scripts/netsim.sh uses it where the kernel has no netem)."};
  std::string tun;
  std::string rules_path;
  std::string stats_path;
  uint64_t seed = 0;
  DelayLine::Options options;
  app.add_option("--tun", tun, "the TUN device to attach to (ip tuntap add NAME mode tun)")->required();
  app.add_option("--rules", rules_path,
                 "the rules file, one 'SUBNET DELAY JITTER' a line (10.200.3.0/24 0ms 20ms); read again when it changes; "
                 "absent: no rules")
      ->required();
  app.add_option("--stats", stats_path, "where to write the counters as JSON, every second and at the end");
  app.add_option("--seed", seed, "the seed of the jitter's draws (0: from the clock)");
  app.add_option("--max-packets", options.max_packets, "packets held at once; more are dropped")
      ->check(CLI::Range(size_t{1}, size_t{1'000'000}));
  CLI11_PARSE(app, argc, argv);
  if (meridian::Status s = meridian::InitLogging("info"); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  const meridian::Clock& clock = meridian::Env::Default().clock();
  options.seed = seed != 0 ? seed : static_cast<uint64_t>(clock.WallNow().us);
  meridian::BlockTerminationSignals();
  auto device = meridian::netsim::TunDevice::Open(tun);
  if (!device.ok()) {
    std::cerr << "meridian-delayline: " << device.status().message() << "\n";
    return 1;
  }
  DelayLine line(options);
  std::string version = FileVersion(rules_path);
  LoadRules(rules_path, line);
  int64_t write_errors = 0;
  int64_t checked_at = clock.Now().us;
  int64_t stats_at = 0;
  MERIDIAN_LOG_INFO("delay line on {} (seed {})", tun, options.seed);
  while (true) {
    int64_t now = clock.Now().us;
    for (const std::string& packet : line.TakeDue(now)) {
      if (!device->Write(packet).ok()) ++write_errors;
    }
    // Signals and the rules file are looked at every 0.1 s, not on every packet.
    if (now - checked_at >= 100'000) {
      checked_at = now;
      if (meridian::WaitForTerminationSignalFor(0) != 0) break;
      if (std::string v = FileVersion(rules_path); v != version) {
        version = v;
        LoadRules(rules_path, line);
      }
    }
    if (now - stats_at >= 1'000'000) {
      stats_at = now;
      WriteStats(stats_path, line, write_errors);
    }
    // Sleep until the next packet is due, a packet comes, or the next file check.
    int64_t wait = 100'000;
    if (auto next = line.NextDueUs()) wait = std::clamp<int64_t>(*next - now, 0, wait);
    auto readable = device->WaitReadable(wait);
    if (!readable.ok()) {
      std::cerr << "meridian-delayline: " << readable.status().message() << "\n";
      return 1;
    }
    if (!*readable) continue;
    now = clock.Now().us;
    for (int i = 0; i < 256; ++i) {
      auto packet = device->Read();
      if (!packet.ok()) {
        std::cerr << "meridian-delayline: " << packet.status().message() << "\n";
        return 1;
      }
      if (!packet->has_value()) break;
      line.Admit(std::move(**packet), now);
    }
  }
  WriteStats(stats_path, line, write_errors);
  MERIDIAN_LOG_INFO("delay line on {} stopped: {} packets, {} delayed, {} dropped", tun, line.stats().packets,
                    line.stats().delayed, line.stats().dropped);
  return 0;
}
