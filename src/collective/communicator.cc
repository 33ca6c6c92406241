#include "collective/communicator.h"

#include "collective/shm.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "common/env.h"
#include "common/logging.h"
#include "security/pki.h"
#include "security/ticket.h"

namespace meridian::collective {
namespace {

constexpr uint32_t kFrameMagic = 0x4C43524D;  // "MRCL"
constexpr size_t kNonceHex = 32;
constexpr size_t kProofBytes = 32;
constexpr int64_t kHandshakeTimeoutUs = 10'000'000;
constexpr size_t kMaxHandshakes = 64;  // at once; more are closed unread

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint32_t length = 0;
  int64_t deliver_at_us = 0;  // emulated links: when the frame has crossed the link
};
static_assert(sizeof(FrameHeader) == 16);

int64_t NowUs() { return Env::Default().clock().Now().us; }

// What a connecting rank proves: who it is, the generation it is in and where it
// listens (a rank that was replaced may listen elsewhere).
std::string ProofText(int rank, uint32_t generation, std::string_view address) {
  return fmt::format("collective rank {} generation {} at {}", rank, generation, address);
}

// What a local listener proves to the rank connecting: that it holds the secret too
// (anyone on the host may listen on a local name).
std::string ListenerProofText(int rank, std::string_view address) {
  return fmt::format("collective listener rank {} at {}", rank, address);
}

// Where rank `rank` listening at `address` listens for ranks of its host: a name only
// holders of the gang's secret can compute.
std::string LocalName(const std::string& secret, int rank, const std::string& address) {
  return "meridian-collective-" +
         security::Hex(security::GangLaunchProof(secret, "local", fmt::format("rank {} at {}", rank, address)))
             .substr(0, 40);
}

// Both addresses name the same host (the local socket is tried only then).
bool SameHost(const std::string& a, const std::string& b) {
  StatusOr<std::pair<std::string, int>> x = SplitHostPort(a, "address"), y = SplitHostPort(b, "address");
  return x.ok() && y.ok() && x->first == y->first;
}

constexpr size_t kMaxAddressBytes = 255;
enum Answer : uint8_t { kRefused = 0, kAccepted = 1, kStale = 2 };

template <typename T>
void Reduce(T* into, const T* from, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      for (size_t i = 0; i < n; ++i) into[i] += from[i];
      break;
    case ReduceOp::kMax:
      for (size_t i = 0; i < n; ++i) into[i] = std::max(into[i], from[i]);
      break;
    case ReduceOp::kMin:
      for (size_t i = 0; i < n; ++i) into[i] = std::min(into[i], from[i]);
      break;
  }
}

// The first error of two.
Status Either(Status a, Status b) { return a.ok() ? b : a; }

}  // namespace

std::pair<size_t, size_t> BlockRange(size_t count, int blocks, int b) {
  const size_t n = static_cast<size_t>(blocks), i = static_cast<size_t>(b);
  const size_t base = count / n, extra = count % n;
  const size_t first = i * base + std::min(i, extra);
  return {first, first + base + (i < extra ? 1 : 0)};
}

StatusOr<std::unique_ptr<Communicator>> Communicator::Create(std::unique_ptr<TcpListener> listener,
                                                              CommunicatorOptions options) {
  const int n = static_cast<int>(options.ranks.size());
  if (n < 1 || n > kMaxRanks) {
    return InvalidArgumentError(fmt::format("a communicator has 1 to {} ranks, not {}", kMaxRanks, n));
  }
  if (options.rank < 0 || options.rank >= n) {
    return InvalidArgumentError(fmt::format("rank {} is not one of the {} ranks", options.rank, n));
  }
  if (options.secret.empty()) return InvalidArgumentError("a communicator needs the gang's secret");
  if (options.chunk_bytes < 64 || options.chunk_bytes > (size_t{64} << 20) || options.chunk_bytes % 8 != 0) {
    return InvalidArgumentError("chunk_bytes is a multiple of 8 from 64 B to 64 MiB");
  }
  for (int r = 0; r < n; ++r) {
    MERIDIAN_RETURN_IF_ERROR(SplitHostPort(options.ranks[r].address, fmt::format("rank {}'s address", r)).status());
  }
  if (listener == nullptr) return InvalidArgumentError("a communicator needs its listener");
  std::unique_ptr<objects::LinkClocks> clocks;
  if (!options.links.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(clocks, objects::LinkClocks::Open(""));
  }
  std::unique_ptr<TcpListener> local;
  if (options.shared_memory) {
    StatusOr<std::unique_ptr<TcpListener>> l =
        TcpListener::ListenLocal(LocalName(options.secret, options.rank, options.ranks[options.rank].address));
    if (l.ok()) {
      local = std::move(*l);
    } else {
      MERIDIAN_LOG_WARN("collective: rank {} takes no shared-memory connections: {}", options.rank,
                        l.status().message());
    }
  }
  std::unique_ptr<Communicator> c(
      new Communicator(std::move(listener), std::move(local), std::move(options), std::move(clocks)));
  return c;
}

Communicator::Communicator(std::unique_ptr<TcpListener> listener, std::unique_ptr<TcpListener> local_listener,
                           CommunicatorOptions options, std::unique_ptr<objects::LinkClocks> clocks)
    : options_(std::move(options)),
      listener_(std::move(listener)),
      local_listener_(std::move(local_listener)),
      clocks_(std::move(clocks)),
      scratch_(options_.chunk_bytes),
      peers_(options_.ranks.size()) {
  accept_thread_ = std::thread([this] { AcceptLoop(listener_.get(), false); });
  if (local_listener_) local_accept_thread_ = std::thread([this] { AcceptLoop(local_listener_.get(), true); });
  send_thread_ = std::thread([this] { SendLoop(); });
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (Peer& p : peers_) {
      if (p.out) p.out->Shutdown();
      if (p.in) p.in->Shutdown();
    }
  }
  changed_.notify_all();
  listener_->Shutdown();
  accept_thread_.join();
  if (local_listener_) {
    local_listener_->Shutdown();
    local_accept_thread_.join();
  }
  send_thread_.join();
  std::list<Handshake> handshakes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handshakes.swap(handshakes_);
  }
  for (Handshake& h : handshakes) h.thread.join();
}

RankAddress Communicator::Rank(int rank) const {
  std::lock_guard<std::mutex> lock(address_mu_);
  return options_.ranks[rank];
}

std::vector<RankAddress> Communicator::Ranks() const {
  std::lock_guard<std::mutex> lock(address_mu_);
  return options_.ranks;
}

std::string Communicator::Name(int rank) const {
  const RankAddress r = Rank(rank);
  return fmt::format("rank {} ({} at {})", rank, r.address, r.site);
}

uint32_t Communicator::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

std::map<std::string, int64_t> Communicator::bytes_sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_;
}

int64_t Communicator::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

int64_t Communicator::shared_memory_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shared_memory_connections_;
}

const objects::LinkShape* Communicator::Link(int from, int to) const {
  if (!clocks_) return nullptr;
  const std::string a = Rank(from).site;
  const std::string b = Rank(to).site;
  auto it = options_.links.find({a, b});
  if (it == options_.links.end()) it = options_.links.find({b, a});
  return it == options_.links.end() ? nullptr : &it->second;
}

// ---- connections ----

void Communicator::AcceptLoop(TcpListener* listener, bool local) {
  for (;;) {
    StatusOr<std::unique_ptr<TcpStream>> tcp = listener->Accept();
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    if (!tcp.ok()) continue;
    // Handshakes run beside the accepting, so a peer that stalls one delays no other;
    // finished ones are reaped here, and at most kMaxHandshakes run at once.
    for (auto it = handshakes_.begin(); it != handshakes_.end();) {
      if (!it->done->load()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = handshakes_.erase(it);
    }
    if (handshakes_.size() >= kMaxHandshakes) {
      ++refused_;
      continue;  // closed unread
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    handshakes_.push_back({std::thread([this, done, local, t = std::move(*tcp)]() mutable {
                             Admit(std::move(t), local);
                             done->store(true);
                           }),
                           done});
  }
}

// Proves the peer is a rank of this gang; its connection then carries that rank's
// frames to us (through shared memory when it came to the local socket).
void Communicator::Admit(std::unique_ptr<TcpStream> tcp, bool local) {
  const std::string from = tcp->peer();
  auto refuse = [&](const std::string& why) {
    MERIDIAN_LOG_WARN("collective: refused a connection from {}: {}", from, why);
    std::lock_guard<std::mutex> lock(mu_);
    ++refused_;
  };
  if (!tcp->SetTimeout(kHandshakeTimeoutUs).ok()) return refuse("cannot set its timeout");
  std::unique_ptr<ByteStream> tls;
  ByteStream* stream = tcp.get();
  if (options_.tls && !local) {
    StatusOr<std::unique_ptr<ByteStream>> s = options_.tls->Accept(*tcp);
    if (!s.ok()) return refuse(std::string(s.status().message()));
    tls = std::move(*s);
    stream = tls.get();
  }
  StatusOr<std::string> nonce = security::RandomHex(kNonceHex / 2);
  if (!nonce.ok()) return refuse("no random nonce");
  uint32_t ours = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ours = generation_;
  }
  // Locally, its nonce first, which we answer with our own proof.
  std::string theirs(kNonceHex, '\0'), listener_proof;
  if (local) {
    if (!stream->ReadExact(theirs.data(), theirs.size()).ok()) return refuse("the handshake broke off");
    const RankAddress self = Rank(options_.rank);
    listener_proof = security::GangLaunchProof(options_.secret, theirs, ListenerProofText(options_.rank, self.address));
  }
  // Our nonce and generation (and proof); its rank, generation, address (bounded)
  // and proof.
  struct {
    uint32_t rank = 0;
    uint32_t generation = 0;
    uint16_t address_bytes = 0;
  } __attribute__((packed)) hello;
  std::string address, proof(kProofBytes, '\0');
  const iovec greeting[] = {
      {nonce->data(), nonce->size()}, {&ours, sizeof(ours)}, {listener_proof.data(), listener_proof.size()}};
  if (!stream->WriteAll(greeting).ok()) return refuse("the handshake broke off");
  // A rank that hangs up before its hello claimed nothing: it found our local socket.
  if (!stream->ReadExact(&hello, 1).ok()) {
    MERIDIAN_LOG_DEBUG("collective: {} hung up before its hello", from);
    return;
  }
  if (!stream->ReadExact(reinterpret_cast<char*>(&hello) + 1, sizeof(hello) - 1).ok() ||
      hello.address_bytes > kMaxAddressBytes) {
    return refuse("the handshake broke off");
  }
  address.resize(hello.address_bytes);
  if (!stream->ReadExact(address.data(), address.size()).ok() || !stream->ReadExact(proof.data(), proof.size()).ok()) {
    return refuse("the handshake broke off");
  }
  const uint32_t rank = hello.rank;
  // "HOST:PORT SITE": where it listens and its site.
  const size_t space = address.rfind(' ');
  const std::string site = space == std::string::npos ? "" : address.substr(space + 1);
  const bool proven = rank < options_.ranks.size() && static_cast<int>(rank) != options_.rank &&
                      security::ConstantTimeEquals(
                          proof, security::GangLaunchProof(options_.secret, *nonce,
                                                           ProofText(static_cast<int>(rank), hello.generation, address))) &&
                      space != std::string::npos && !site.empty() && SplitHostPort(address.substr(0, space), "address").ok();
  if (proven) address.resize(space);
  Answer answer = kRefused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (proven) {
      // Where it listens now, proven (a replaced rank may have moved): our connection
      // to its old place goes. Even a stale hello says so, before its rank catches up.
      std::lock_guard<std::mutex> addresses(address_mu_);
      if (options_.ranks[rank].address != address || options_.ranks[rank].site != site) {
        options_.ranks[rank].address = address;
        options_.ranks[rank].site = site;
        if (peers_[rank].out) peers_[rank].out->Shutdown();
        peers_[rank].stale_out = true;
      }
    }
    if (!proven) {
      ++refused_;
    } else if (hello.generation < generation_) {
      answer = kStale;  // a rank of a generation we left: it catches up and comes again
    } else if (peers_[rank].claimed && peers_[rank].in_generation >= hello.generation) {
      ++refused_;  // one connection per rank and generation: a second one is refused
    } else {
      answer = kAccepted;
      // A newer generation's connection replaces the one it had (closed under any
      // reader, which then fails and catches up).
      if (peers_[rank].claimed) {
        if (peers_[rank].in) peers_[rank].in->Shutdown();
        if (peers_[rank].in_tcp) peers_[rank].in_tcp->Shutdown();
        // Kept until Rejoin: the collective thread may be inside a read on it.
        retired_.push_back(std::move(peers_[rank].in));
        retired_tcp_.push_back(std::move(peers_[rank].in_tcp));
        peers_[rank].in = nullptr;
        peers_[rank].in_tcp = nullptr;
      }
      peers_[rank].claimed = true;
      peers_[rank].in_generation = hello.generation;
      highest_seen_ = std::max(highest_seen_, hello.generation);
    }
  }
  const Status answered = stream->WriteAll(&answer, 1);
  if (answer == kStale) return;
  if (answer == kRefused) {
    MERIDIAN_LOG_WARN("collective: refused a connection from {}: {}", from,
                      !proven ? "no proof of the gang's secret" : fmt::format("a second connection from rank {}", rank));
    return;
  }
  if (!answered.ok()) return refuse("the handshake broke off");  // its rank connects again in its next generation
  std::unique_ptr<ByteStream> in;
  if (local) {
    StatusOr<std::unique_ptr<ShmStream>> shm = ShmStream::Take(std::move(tcp), kShmRingBytes);
    if (!shm.ok()) return refuse(std::string(shm.status().message()));
    in = std::move(*shm);
  } else if (tls) {
    in = std::move(tls);
  } else {
    in = std::move(tcp);
  }
  if (!in->SetTimeout(options_.timeout_us).ok()) return refuse("cannot set its timeout");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    // The rank may have connected again meanwhile (a newer generation): it wins.
    if (peers_[rank].in_generation != hello.generation) return;
    peers_[rank].in = std::move(in);
    peers_[rank].in_tcp = std::move(tcp);  // under TLS; else null (moved)
  }
  changed_.notify_all();
}

Status Communicator::Connect(int to, int64_t timeout_us, bool shared_memory) {
  const int64_t deadline = NowUs() + timeout_us;
  std::unique_ptr<TcpStream> tcp;
  bool local = false;
  // The peer may not listen yet: ranks start together, not at the same instant. Its
  // address is read afresh each try: a replaced rank tells where it listens now. On
  // this host its local socket comes first, for shared memory.
  for (int64_t backoff_us = 20'000;; backoff_us = std::min<int64_t>(backoff_us * 2, 500'000)) {
    const RankAddress peer = Rank(to);
    const bool here = shared_memory && options_.shared_memory && SameHost(peer.address, Rank(options_.rank).address);
    const std::string name = here ? LocalName(options_.secret, to, peer.address) : "";
    if (here) {
      StatusOr<std::unique_ptr<TcpStream>> l = TcpStream::ConnectLocal(name);
      if (l.ok()) {
        tcp = std::move(*l);
        local = true;
        break;
      }
    }
    MERIDIAN_ASSIGN_OR_RETURN(auto hp, SplitHostPort(peer.address, "rank's address"));
    StatusOr<std::unique_ptr<TcpStream>> c =
        TcpStream::Connect(hp.first, hp.second, std::min(kHandshakeTimeoutUs, std::max<int64_t>(deadline - NowUs(), 1000)));
    if (c.ok()) {
      tcp = std::move(*c);
      // A rank's TCP socket listens before its communicator (and local socket) exist:
      // once it greets us, its local socket is there too, if it has one. This TCP
      // connection is then dropped before our hello (not counted as refused).
      pollfd greeted{tcp->fd(), POLLIN, 0};
      if (here && !options_.tls &&
          poll(&greeted, 1, static_cast<int>(std::min(kHandshakeTimeoutUs, timeout_us) / 1000)) == 1) {
        StatusOr<std::unique_ptr<TcpStream>> l = TcpStream::ConnectLocal(name);
        if (l.ok()) {
          tcp = std::move(*l);
          local = true;
        }
      }
      break;
    }
    if (NowUs() + backoff_us >= deadline) {
      return UnavailableError(fmt::format("cannot reach {}: {}", Name(to), c.status().message()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
  }
  MERIDIAN_RETURN_IF_ERROR(tcp->SetTimeout(local ? kHandshakeTimeoutUs : options_.timeout_us));
  std::unique_ptr<ByteStream> stream;
  StatusOr<uint32_t> proved = 0u;
  if (local) {
    proved = Greet(to, *tcp, true);
    if (proved.ok()) {
      StatusOr<std::unique_ptr<ShmStream>> shm = ShmStream::Offer(std::move(tcp), kShmRingBytes);
      if (!shm.ok()) return UnavailableError(fmt::format("shared memory with {}: {}", Name(to), shm.status().message()));
      MERIDIAN_RETURN_IF_ERROR((*shm)->SetTimeout(options_.timeout_us));
      stream = std::move(*shm);
    } else if (proved.status().code() == StatusCode::kUnauthenticated) {
      // Someone else holds the local name: TCP, where the peer is who it says.
      MERIDIAN_LOG_WARN("collective: {}; reaching it over TCP", proved.status().message());
      const int64_t left = deadline - NowUs();
      return left > 0 ? Connect(to, left, false) : proved.status();
    } else {
      return proved.status();
    }
  } else {
    if (options_.tls) {
      StatusOr<std::unique_ptr<ByteStream>> s = options_.tls->Connect(std::move(tcp));
      if (!s.ok()) return UnauthenticatedError(fmt::format("{}: {}", Name(to), s.status().message()));
      stream = std::move(*s);
    } else {
      stream = std::move(tcp);
    }
    MERIDIAN_ASSIGN_OR_RETURN(proved, Greet(to, *stream, false));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (generation_ != *proved) return AbortedError(fmt::format("this rank moved on to generation {}", generation_));
  if (peers_[to].out) retired_.push_back(std::move(peers_[to].out));  // shut already
  peers_[to].out = std::move(stream);
  peers_[to].stale_out = false;
  if (local) ++shared_memory_connections_;
  return OkStatus();
}

StatusOr<uint32_t> Communicator::Greet(int to, ByteStream& stream, bool local) {
  std::string nonce(kNonceHex, '\0'), ours_nonce, listener_proof;
  uint32_t theirs = 0, ours = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ours = generation_;
  }
  const RankAddress self = Rank(options_.rank);
  const std::string address = self.address + " " + self.site;
  uint8_t answer = 0;
  Status s;
  if (local) {
    // The listener proves itself first: anyone on the host may hold a local name.
    MERIDIAN_ASSIGN_OR_RETURN(ours_nonce, security::RandomHex(kNonceHex / 2));
    s = stream.WriteAll(ours_nonce.data(), ours_nonce.size());
  }
  if (s.ok()) s = stream.ReadExact(nonce.data(), nonce.size());
  if (s.ok()) s = stream.ReadExact(&theirs, sizeof(theirs));
  if (s.ok() && local) {
    listener_proof.resize(kProofBytes);
    s = stream.ReadExact(listener_proof.data(), listener_proof.size());
    if (s.ok() && !security::ConstantTimeEquals(listener_proof,
                                                security::GangLaunchProof(options_.secret, ours_nonce,
                                                                          ListenerProofText(to, Rank(to).address)))) {
      return UnauthenticatedError(fmt::format("the local socket of {} did not prove the gang's secret", Name(to)));
    }
  }
  if (s.ok()) {
    const std::string proof =
        security::GangLaunchProof(options_.secret, nonce, ProofText(options_.rank, ours, address));
    struct {
      uint32_t rank;
      uint32_t generation;
      uint16_t address_bytes;
    } __attribute__((packed)) hello{static_cast<uint32_t>(options_.rank), ours, static_cast<uint16_t>(address.size())};
    const iovec parts[] = {{&hello, sizeof(hello)},
                           {const_cast<char*>(address.data()), address.size()},
                           {const_cast<char*>(proof.data()), proof.size()}};
    s = stream.WriteAll(parts);
  }
  if (s.ok()) s = stream.ReadExact(&answer, 1);
  if (!s.ok()) return UnavailableError(fmt::format("the handshake with {} broke off: {}", Name(to), s.message()));
  if (answer == kStale) {
    std::lock_guard<std::mutex> lock(mu_);
    highest_seen_ = std::max(highest_seen_, theirs);
    return AbortedError(fmt::format("{} has moved on to generation {} (we are in {})", Name(to), theirs, ours));
  }
  if (answer != kAccepted) {
    return PermissionDeniedError(fmt::format("{} refused our connection (another gang's secret, or a rank connected twice)", Name(to)));
  }
  return ours;
}

void Communicator::Rejoin() {
  std::unique_lock<std::mutex> lock(mu_);
  generation_ = std::max(generation_ + 1, highest_seen_);
  highest_seen_ = generation_;
  // What the last generation queued is dropped, what it is sending fails at once, and
  // its connections go: none of its frames can reach the next generation.
  queue_.clear();
  for (Peer& p : peers_) {
    if (p.out) p.out->Shutdown();
    if (p.claimed && p.in_generation < generation_) {
      if (p.in) p.in->Shutdown();
      if (p.in_tcp) p.in_tcp->Shutdown();
    }
  }
  changed_.wait(lock, [&] { return stopping_ || !sending_; });
  for (Peer& p : peers_) {
    p.out.reset();
    p.stale_out = false;
    if (p.claimed && p.in_generation < generation_) {
      p.in.reset();
      p.in_tcp.reset();
      p.claimed = false;
    }
  }
  retired_.clear();  // no thread uses them now
  retired_tcp_.clear();
  send_error_ = OkStatus();
  MERIDIAN_LOG_INFO("collective: rank {} rejoins its gang in generation {}", options_.rank, generation_);
}

void Communicator::Announce(int64_t timeout_us) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) {
    if (r == options_.rank) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (peers_[r].out && !peers_[r].stale_out) continue;
    }
    threads.emplace_back([this, r, timeout_us] {
      Status s = Connect(r, timeout_us);
      if (!s.ok()) MERIDIAN_LOG_INFO("collective: rank {} could not announce itself to {}: {}", options_.rank, Name(r), s.message());
    });
  }
  for (std::thread& t : threads) t.join();
}

StatusOr<ByteStream*> Communicator::Inbound(int from) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(options_.timeout_us);
  while (!stopping_ && (peers_[from].in == nullptr || peers_[from].in_generation != generation_)) {
    if (peers_[from].in != nullptr && peers_[from].in_generation > generation_) {
      return AbortedError(fmt::format("{} has moved on to generation {} (we are in {})", Name(from),
                                      peers_[from].in_generation, generation_));
    }
    // A send of this collective that failed says more than a wait that times out.
    if (!send_error_.ok()) return send_error_;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return UnavailableError(fmt::format("{} did not connect within {} s", Name(from), options_.timeout_us / 1'000'000));
    }
  }
  if (stopping_) return CancelledError("the communicator is closing");
  return peers_[from].in.get();
}

// ---- sending ----

void Communicator::SendLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const SendJob job = queue_.front();
    queue_.pop_front();
    sending_ = true;
    const bool failed = !send_error_.ok();
    lock.unlock();
    // After a failed send the rest of the collective's sends are dropped: it failed.
    Status s = failed ? OkStatus() : SendNow(job);
    lock.lock();
    if (!s.ok() && send_error_.ok()) send_error_ = s;
    sending_ = false;
    changed_.notify_all();
  }
}

Status Communicator::SendNow(const SendJob& job) {
  ByteStream* out = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = peers_[job.to].out.get();
  }
  if (out == nullptr) {
    MERIDIAN_RETURN_IF_ERROR(Connect(job.to, options_.timeout_us));
    std::lock_guard<std::mutex> lock(mu_);
    out = peers_[job.to].out.get();
  }
  const objects::LinkShape* link = Link(options_.rank, job.to);
  const std::string from_site = Rank(options_.rank).site;
  const std::string to_site = Rank(job.to).site;
  for (size_t off = 0; off < job.size; off += options_.chunk_bytes) {
    FrameHeader h;
    h.length = static_cast<uint32_t>(std::min(options_.chunk_bytes, job.size - off));
    if (link != nullptr) {
      h.deliver_at_us = clocks_->Book(from_site, to_site, h.length, link->bandwidth_bps, NowUs()) + link->rtt_us / 2;
    }
    const iovec parts[] = {{&h, sizeof(h)}, {const_cast<std::byte*>(job.data + off), h.length}};
    Status s = out->WriteAll(parts);
    if (!s.ok()) return UnavailableError(fmt::format("sending to {}: {}", Name(job.to), s.message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  sent_[to_site] += static_cast<int64_t>(job.size);
  return OkStatus();
}

void Communicator::Send(int to, const void* data, size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({to, static_cast<const std::byte*>(data), size});
  }
  changed_.notify_all();
}

Status Communicator::WaitSent() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return stopping_ || (queue_.empty() && !sending_); });
  if (stopping_) return CancelledError("the communicator is closing");
  return std::exchange(send_error_, OkStatus());
}

// ---- receiving ----

template <typename Take>
Status Communicator::Receive(int from, size_t size, Take&& take) {
  MERIDIAN_ASSIGN_OR_RETURN(ByteStream * in, Inbound(from));
  const bool shaped = Link(from, options_.rank) != nullptr;
  for (size_t off = 0; off < size;) {
    FrameHeader h;
    const size_t want = std::min(options_.chunk_bytes, size - off);
    Status s = in->ReadExact(&h, sizeof(h));
    if (!s.ok()) return UnavailableError(fmt::format("receiving from {}: {}", Name(from), s.message()));
    // Checked before the body is read: a peer sends exactly what the algorithm asks.
    if (h.magic != kFrameMagic || h.length != want) {
      return DataLossError(fmt::format("{} sent a frame of {} bytes where {} were due (or not ours)", Name(from),
                                       h.length, want));
    }
    if (Status got = take(off, want, *in); !got.ok()) {
      return UnavailableError(fmt::format("receiving from {}: {}", Name(from), got.message()));
    }
    if (shaped) {
      const int64_t wait = std::min(h.deliver_at_us - NowUs(), options_.timeout_us);
      if (wait > 0) std::this_thread::sleep_for(std::chrono::microseconds(wait));
    }
    off += want;
  }
  return OkStatus();
}

Status Communicator::ReceiveInto(int from, void* data, size_t size) {
  auto* bytes = static_cast<std::byte*>(data);
  return Receive(from, size, [&](size_t off, size_t n, ByteStream& in) { return in.ReadExact(bytes + off, n); });
}

// ---- algorithms ----

template <typename T>
Status Communicator::RingReduceScatter(const std::vector<int>& group, std::span<T> data, ReduceOp op) {
  const int n = static_cast<int>(group.size());
  const int i = static_cast<int>(std::find(group.begin(), group.end(), options_.rank) - group.begin());
  const int next = group[(i + 1) % n], prev = group[(i + n - 1) % n];
  // At step s rank i sends block i-s-1 and reduces block i-s-2 into its own; after
  // n-1 steps block i holds the reduction over the group.
  for (int s = 0; s + 1 < n; ++s) {
    const auto [sf, sl] = BlockRange(data.size(), n, (i - s - 1 + 2 * n) % n);
    const auto [rf, rl] = BlockRange(data.size(), n, (i - s - 2 + 2 * n) % n);
    Send(next, data.data() + sf, (sl - sf) * sizeof(T));
    T* into = data.data() + rf;
    Status r = Receive(prev, (rl - rf) * sizeof(T), [&](size_t off, size_t len, ByteStream& in) -> Status {
      MERIDIAN_RETURN_IF_ERROR(in.ReadExact(scratch_.data(), len));
      Reduce(into + off / sizeof(T), reinterpret_cast<const T*>(scratch_.data()), len / sizeof(T), op);
      return OkStatus();
    });
    MERIDIAN_RETURN_IF_ERROR(Either(std::move(r), WaitSent()));
  }
  return OkStatus();
}

Status Communicator::RingAllGather(const std::vector<int>& group, std::span<std::byte> data, size_t element) {
  const int n = static_cast<int>(group.size());
  const int i = static_cast<int>(std::find(group.begin(), group.end(), options_.rank) - group.begin());
  const int next = group[(i + 1) % n], prev = group[(i + n - 1) % n];
  const size_t count = data.size() / element;
  for (int s = 0; s + 1 < n; ++s) {
    const auto [sf, sl] = BlockRange(count, n, (i - s + n) % n);
    const auto [rf, rl] = BlockRange(count, n, (i - s - 1 + n) % n);
    Send(next, data.data() + sf * element, (sl - sf) * element);
    Status r = ReceiveInto(prev, data.data() + rf * element, (rl - rf) * element);
    MERIDIAN_RETURN_IF_ERROR(Either(std::move(r), WaitSent()));
  }
  return OkStatus();
}

Status Communicator::ChainBroadcast(const std::vector<int>& group, std::span<std::byte> data, int root_index) {
  const int n = static_cast<int>(group.size());
  if (n == 1) return OkStatus();
  const int i = static_cast<int>(std::find(group.begin(), group.end(), options_.rank) - group.begin());
  const int position = (i - root_index + n) % n;  // along the chain from the root
  const int next = group[(i + 1) % n], prev = group[(i + n - 1) % n];
  if (position == 0) {
    Send(next, data.data(), data.size());
    return WaitSent();
  }
  // Each frame is passed on as it arrives: the chain is pipelined by frames.
  Status r = Receive(prev, data.size(), [&](size_t off, size_t len, ByteStream& in) -> Status {
    MERIDIAN_RETURN_IF_ERROR(in.ReadExact(data.data() + off, len));
    if (position + 1 < n) Send(next, data.data() + off, len);
    return OkStatus();
  });
  return Either(std::move(r), WaitSent());
}

template <typename T>
Status Communicator::RingAllReduce(const std::vector<int>& group, std::span<T> data, ReduceOp op) {
  if (group.size() < 2) return OkStatus();
  MERIDIAN_RETURN_IF_ERROR(RingReduceScatter(group, data, op));
  return RingAllGather(group, std::as_writable_bytes(data), sizeof(T));
}

namespace {
std::vector<int> Everyone(int n) {
  std::vector<int> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)] = r;
  return all;
}
}  // namespace

template <typename T>
Status Communicator::AllReduceT(std::span<T> data, ReduceOp op, Algorithm algorithm) {
  const std::vector<RankAddress> ranks = Ranks();
  std::vector<std::string> sites;  // in the order of their first rank
  for (const RankAddress& r : ranks) {
    if (std::find(sites.begin(), sites.end(), r.site) == sites.end()) sites.push_back(r.site);
  }
  if (algorithm == Algorithm::kAuto) algorithm = sites.size() > 1 ? Algorithm::kHierarchical : Algorithm::kRing;
  const std::vector<int> all = Everyone(size());
  if (algorithm == Algorithm::kRing || sites.size() == 1) return RingAllReduce(all, data, op);
  // Hierarchical: within the site, between the sites' leaders (each site's first
  // rank), then from the leader back to its site.
  const std::string& mine = ranks[options_.rank].site;
  std::vector<int> local, leaders;
  for (const std::string& site : sites) {
    for (int r : all) {
      if (ranks[r].site != site) continue;
      leaders.push_back(r);
      break;
    }
  }
  for (int r : all) {
    if (ranks[r].site == mine) local.push_back(r);
  }
  MERIDIAN_RETURN_IF_ERROR(RingAllReduce(local, data, op));
  if (local.front() == options_.rank) MERIDIAN_RETURN_IF_ERROR(RingAllReduce(leaders, data, op));
  return ChainBroadcast(local, std::as_writable_bytes(data), 0);
}

Status Communicator::Abandon(Status failed) {
  if (failed.ok()) return failed;
  // This generation is over: every connection is shut, so the ranks waiting on this
  // one fail now (and rejoin) instead of when their wait times out.
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Peer& p : peers_) {
      if (p.out) p.out->Shutdown();
      if (p.in) p.in->Shutdown();
      if (p.in_tcp) p.in_tcp->Shutdown();
    }
  }
  return failed;
}

Status Communicator::AllReduce(std::span<float> data, ReduceOp op, Algorithm algorithm) {
  return Abandon(AllReduceT(data, op, algorithm));
}
Status Communicator::AllReduce(std::span<double> data, ReduceOp op, Algorithm algorithm) {
  return Abandon(AllReduceT(data, op, algorithm));
}

Status Communicator::ReduceScatter(std::span<float> data, ReduceOp op) {
  return size() < 2 ? OkStatus() : Abandon(RingReduceScatter(Everyone(size()), data, op));
}
Status Communicator::ReduceScatter(std::span<double> data, ReduceOp op) {
  return size() < 2 ? OkStatus() : Abandon(RingReduceScatter(Everyone(size()), data, op));
}

Status Communicator::AllGather(std::span<std::byte> data) {
  return size() < 2 ? OkStatus() : Abandon(RingAllGather(Everyone(size()), data, 1));
}

Status Communicator::Broadcast(std::span<std::byte> data, int root) {
  if (root < 0 || root >= size()) return InvalidArgumentError(fmt::format("no rank {} to broadcast from", root));
  return Abandon(ChainBroadcast(Everyone(size()), data, root));
}

}  // namespace meridian::collective
