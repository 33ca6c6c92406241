#include "workloads/stream/state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/net.h"
#include "model/run_state.h"
#include "model/stream.h"
#include "spec/yaml_reader.h"

namespace meridian::workloads::stream {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kHeader = model::kStreamCheckpointHeader;
constexpr size_t kMaxLoggedBytes = model::kMaxSensorRecordBytes + 1;

Status Errno(std::string_view what, const std::string& path) {
  return UnavailableError(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

// Writes `bytes` to dir/name whole: a temporary file renamed over it.
Status WriteWhole(const std::string& dir, const std::string& name, std::string_view bytes) {
  const std::string tmp = dir + "/." + name + ".tmp";
  const std::string path = dir + "/" + name;
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot write", tmp);
  const bool ok = WriteAll(fd, bytes);
  close(fd);
  if (!ok) return Errno("cannot write", tmp);
  if (rename(tmp.c_str(), path.c_str()) != 0) return Errno("cannot rename into place", path);
  return OkStatus();
}

// A count in decimal digits only (no sign, no spaces), at most max_digits of them.
bool ParseCount(std::string_view text, size_t max_digits, int64_t* out) {
  if (text.empty() || text.size() > max_digits) return false;
  int64_t n = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return false;
    n = n * 10 + (ch - '0');
  }
  *out = n;
  return true;
}

bool ValidClientId(std::string_view id) {
  return !id.empty() && id.size() <= 23 &&
         std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; });
}

}  // namespace

std::string FormatStreamCheckpoint(const StreamCheckpoint& c) {
  std::string out = fmt::format("{} replay_from={} client_id={} results={}{}{}\n{}", kHeader, c.replay_from,
                                c.client_id, c.results.size(),
                                c.sink_bytes > 0 ? fmt::format(" sink_bytes={}", c.sink_bytes) : "",
                                c.ended ? " ended" : "", c.engine);
  for (const std::string& r : c.results) {
    out += '\n';
    out += r;
  }
  return out;
}

StatusOr<StreamCheckpoint> ParseStreamCheckpoint(std::string_view text) {
  const size_t nl = text.find('\n');
  auto bad = [] { return InvalidArgumentError("not a stream checkpoint (its first line is not Meridian's header)"); };
  if (nl == std::string_view::npos) return bad();
  std::string_view header = text.substr(0, nl);
  if (!header.starts_with(kHeader)) return bad();
  header.remove_prefix(kHeader.size());
  StreamCheckpoint c;
  constexpr std::string_view kReplay = " replay_from=";
  constexpr std::string_view kClient = " client_id=";
  if (!header.starts_with(kReplay)) return bad();
  header.remove_prefix(kReplay.size());
  const size_t sp = header.find(' ');
  if (sp == std::string_view::npos || !ParseCount(header.substr(0, sp), 18, &c.replay_from)) return bad();
  header.remove_prefix(sp);
  if (!header.starts_with(kClient)) return bad();
  header.remove_prefix(kClient.size());
  constexpr std::string_view kResults = " results=";
  const size_t at = header.find(kResults);
  if (at == std::string_view::npos || !ValidClientId(header.substr(0, at))) return bad();
  c.client_id = std::string(header.substr(0, at));
  std::string_view count = header.substr(at + kResults.size());
  if (count.ends_with(" ended")) {
    c.ended = true;
    count.remove_suffix(6);
  }
  constexpr std::string_view kSinkBytes = " sink_bytes=";
  if (const size_t b = count.find(kSinkBytes); b != std::string_view::npos) {
    if (!ParseCount(count.substr(b + kSinkBytes.size()), 18, &c.sink_bytes)) return bad();
    count = count.substr(0, b);
  }
  int64_t counted = 0;
  if (!ParseCount(count, 9, &counted)) return bad();
  const size_t results = static_cast<size_t>(counted);
  std::string_view rest = text.substr(nl + 1);
  size_t end = rest.find('\n');
  c.engine = std::string(rest.substr(0, end));
  while (end != std::string_view::npos) {
    rest.remove_prefix(end + 1);
    end = rest.find('\n');
    if (c.results.size() == results) return bad();
    c.results.emplace_back(rest.substr(0, end));
  }
  if (c.results.size() != results) {
    return InvalidArgumentError(fmt::format("a stream checkpoint: its header counts {} results, it holds {}", results,
                                            c.results.size()));
  }
  return c;
}

StatusOr<StreamCheckpoint> ReadStreamCheckpoint(const std::string& path) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string text, spec::ReadFileToString(path, model::kMaxCheckpointBytes));
  StatusOr<StreamCheckpoint> c = ParseStreamCheckpoint(text);
  if (!c.ok()) return c.status().WithPrefix(path);
  return c;
}

StatusOr<std::unique_ptr<StreamState>> StreamState::Open(const std::string& dir, int64_t lock_wait_ms) {
  std::unique_ptr<StreamState> s(new StreamState());
  s->dir_ = dir;
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Errno("cannot make the stream's state directory", dir);
  const std::string lock = dir + "/lock";
  s->lock_fd_ = open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (s->lock_fd_ < 0) return Errno("cannot open", lock);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(lock_wait_ms);
  while (flock(s->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return Errno("cannot lock", lock);
    if (std::chrono::steady_clock::now() >= deadline) {
      return UnavailableError(fmt::format("the stream's state directory {} is held by another run (for more than "
                                          "{} ms); one run at a time uses it",
                                          dir, lock_wait_ms));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string id_path = dir + "/client-id";
  StatusOr<std::string> id = spec::ReadFileToString(id_path, 64);
  if (id.ok()) {
    while (!id->empty() && id->back() == '\n') id->pop_back();
    if (!ValidClientId(*id)) {
      return InvalidArgumentError(fmt::format("{}: expected a client id of 1 to 23 letters, digits or '-'", id_path));
    }
    s->client_id_ = *id;
  } else {
    unsigned char random[8];
    if (getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
      return Errno("no random bytes for a client id in", dir);
    }
    s->client_id_ = "mrd-";
    for (unsigned char b : random) s->client_id_ += fmt::format("{:02x}", b);
    MERIDIAN_RETURN_IF_ERROR(WriteWhole(dir, "client-id", s->client_id_ + "\n"));
  }
  for (int64_t n : s->Segments()) {
    struct stat st {};
    if (stat(s->SegmentPath(n).c_str(), &st) == 0) s->log_bytes_ += st.st_size;
  }
  return s;
}

Status StreamState::SetClientId(const std::string& id) {
  if (!ValidClientId(id)) return InvalidArgumentError(fmt::format("'{}' is not a client id", id.substr(0, 64)));
  MERIDIAN_RETURN_IF_ERROR(WriteWhole(dir_, "client-id", id + "\n"));
  client_id_ = id;
  return OkStatus();
}

StreamState::~StreamState() {
  if (segment_fd_ >= 0) close(segment_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);  // and the lock with it
}

std::string StreamState::SegmentPath(int64_t n) const { return fmt::format("{}/log-{:012d}", dir_, n); }

std::vector<int64_t> StreamState::Segments() const {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    int64_t n = 0;
    if (name.size() == 16 && name.starts_with("log-") && ParseCount(std::string_view(name).substr(4), 12, &n)) {
      out.push_back(n);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<StreamCheckpoint> StreamState::LoadCheckpoint() const {
  const std::string path = dir_ + "/checkpoint";
  if (access(path.c_str(), F_OK) != 0) return NotFoundError(fmt::format("no checkpoint in {}", dir_));
  return ReadStreamCheckpoint(path);
}

bool StreamState::HasSegmentsFrom(int64_t n) const {
  const std::vector<int64_t> segments = Segments();
  return !segments.empty() && segments.back() >= n;
}

Status StreamState::Replay(int64_t from, const std::function<Status(std::string_view)>& fn) {
  std::string payload;
  for (int64_t n : Segments()) {
    if (n < from) continue;
    const std::string path = SegmentPath(n);
    std::ifstream in(path, std::ios::binary);
    if (!in) return Errno("cannot read", path);
    while (true) {
      unsigned char len[4];
      in.read(reinterpret_cast<char*>(len), 4);
      if (in.gcount() == 0) break;
      const uint32_t size = uint32_t{len[0]} | uint32_t{len[1]} << 8 | uint32_t{len[2]} << 16 | uint32_t{len[3]} << 24;
      if (in.gcount() != 4 || size > kMaxLoggedBytes) {
        ++torn_;
        break;
      }
      payload.resize(size);
      in.read(payload.data(), size);
      if (static_cast<uint32_t>(in.gcount()) != size) {
        ++torn_;
        break;
      }
      MERIDIAN_RETURN_IF_ERROR(fn(payload));
    }
  }
  return OkStatus();
}

Status StreamState::StartSegment() {
  const std::vector<int64_t> segments = Segments();
  const int64_t n = std::max(segment_, segments.empty() ? int64_t{-1} : segments.back()) + 1;
  const std::string path = SegmentPath(n);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot start the ingest log's segment", path);
  if (segment_fd_ >= 0) close(segment_fd_);
  segment_fd_ = fd;
  segment_ = n;
  return OkStatus();
}

Status StreamState::Append(std::string_view payload) {
  const size_t size = std::min(payload.size(), kMaxLoggedBytes);
  if (log_bytes_ + 4 + static_cast<int64_t>(size) > kMaxStreamLogBytes) {
    return ResourceExhaustedError(fmt::format(
        "the stream's ingest log in {} would hold more than {} GiB since its last checkpoint; checkpoints are not "
        "keeping up (a shorter checkpoint_interval, or a slower source)",
        dir_, kMaxStreamLogBytes >> 30));
  }
  // One write: a record is in the log whole or (the process killed within the call) cut
  // short at the end of its segment, which Replay stops at.
  char buf[4 + kMaxLoggedBytes];
  const uint32_t n = static_cast<uint32_t>(size);
  buf[0] = static_cast<char>(n & 0xff);
  buf[1] = static_cast<char>((n >> 8) & 0xff);
  buf[2] = static_cast<char>((n >> 16) & 0xff);
  buf[3] = static_cast<char>((n >> 24) & 0xff);
  std::memcpy(buf + 4, payload.data(), size);
  if (!WriteAll(segment_fd_, std::string_view(buf, 4 + size))) return Errno("cannot append to", SegmentPath(segment_));
  log_bytes_ += 4 + static_cast<int64_t>(size);
  return OkStatus();
}

Status StreamState::Checkpoint(std::string engine_snapshot, std::vector<std::string> results, int64_t sink_bytes,
                               const std::string& copy_dir) {
  MERIDIAN_RETURN_IF_ERROR(StartSegment());
  StreamCheckpoint c;
  c.replay_from = segment_;
  c.client_id = client_id_;
  c.engine = std::move(engine_snapshot);
  c.results = std::move(results);
  c.sink_bytes = sink_bytes;
  const std::string text = FormatStreamCheckpoint(c);
  MERIDIAN_RETURN_IF_ERROR(WriteWhole(dir_, "checkpoint", text));
  ++checkpoints_;
  for (int64_t n : Segments()) {
    if (n >= segment_) break;
    struct stat st {};
    const std::string path = SegmentPath(n);
    if (stat(path.c_str(), &st) == 0) log_bytes_ -= st.st_size;
    unlink(path.c_str());
  }
  // The copy the agent keeps as an object (for a run on another node), after the
  // local one: a failure here costs that copy only.
  if (!copy_dir.empty()) return WriteWhole(copy_dir, "checkpoint", text);
  return OkStatus();
}

Status StreamState::End(std::string engine_snapshot, int64_t sink_bytes) {
  StreamCheckpoint c;
  c.replay_from = segment_ + 1;
  c.client_id = client_id_;
  c.engine = std::move(engine_snapshot);
  c.sink_bytes = sink_bytes;
  c.ended = true;
  MERIDIAN_RETURN_IF_ERROR(WriteWhole(dir_, "checkpoint", FormatStreamCheckpoint(c)));
  if (segment_fd_ >= 0) close(segment_fd_);
  segment_fd_ = -1;
  for (int64_t n : Segments()) unlink(SegmentPath(n).c_str());
  log_bytes_ = 0;
  return OkStatus();
}

}  // namespace meridian::workloads::stream
