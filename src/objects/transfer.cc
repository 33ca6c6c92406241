#include "objects/transfer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "common/env.h"
#include "common/logging.h"
#include "common/units.h"
#include "objects/link_clock.h"
#include "objects/wire.h"
#include "security/ticket.h"

namespace meridian::objects {

static_assert(wire::kMaxTicketLength == security::kMaxTicketBytes);
namespace {

using namespace wire;  // the protocol's frames and constants

constexpr int64_t kMultiStreamBytes = int64_t{64} << 20;

int64_t NowUs() { return Env::Default().clock().Now().us; }

void SleepUs(int64_t us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

StatusOr<std::pair<std::string, int>> SplitAddress(const std::string& address) {
  return SplitHostPort(address, "transfer address");
}

Status SendRequest(ByteStream& s, uint16_t op, const ObjectId& id, uint64_t offset, uint64_t length,
                   const std::string& site) {
  Request r;
  r.op = op;
  r.id_high = id.high;
  r.id_low = id.low;
  r.offset = offset;
  r.length = length;
  r.site_length = static_cast<uint16_t>(std::min(site.size(), kMaxSite));
  iovec iov[2] = {{&r, sizeof(r)}, {const_cast<char*>(site.data()), r.site_length}};
  return s.WriteAll(std::span<const iovec>(iov, 2));
}

StatusOr<uint64_t> ReadResponse(ByteStream& s, const ObjectId& id) {
  char bytes[sizeof(Response)];
  MERIDIAN_RETURN_IF_ERROR(s.ReadExact(bytes, sizeof(bytes)));
  StatusOr<Response> decoded = DecodeResponse(std::string_view(bytes, sizeof(bytes)));
  if (!decoded.ok()) return decoded.status().WithPrefix(s.peer());
  const Response& r = *decoded;
  if (r.status == kNoObject) return NotFoundError(fmt::format("{} has no object {}", s.peer(), id.Hex()));
  if (r.status == kDenied) {
    return PermissionDeniedError(fmt::format(
        "{} refused the request for object {}: this connection holds no ticket for it", s.peer(), id.Hex()));
  }
  if (r.status == kDamaged) {
    return DataLossError(fmt::format("{} refused object {}: its bytes did not match the id", s.peer(), id.Hex()));
  }
  if (r.status != kOk) return InvalidArgumentError(fmt::format("{} refused the request (status {})", s.peer(), r.status));
  return r.size;
}

// A connection to a transfer server, TLS when `tls` is set, with reads and writes
// failing after timeout_us without progress.
// With a `ticket`, shows it first: a server that refuses it is kPermissionDenied.
StatusOr<std::unique_ptr<ByteStream>> Dial(const std::string& host, int port, int64_t timeout_us,
                                           const std::shared_ptr<const security::TlsContext>& tls,
                                           const std::string& ticket = "") {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpStream> tcp, TcpStream::Connect(host, port, timeout_us));
  MERIDIAN_RETURN_IF_ERROR(tcp->SetTimeout(timeout_us));
  std::unique_ptr<ByteStream> s;
  if (!tls) {
    s = std::move(tcp);
  } else {
    MERIDIAN_ASSIGN_OR_RETURN(s, tls->Connect(std::move(tcp)));
  }
  // Tickets matter only with TLS: without it every peer may do anything.
  if (ticket.empty() || !tls) return s;
  Request r;
  r.op = kOpTicket;
  r.length = ticket.size();
  iovec iov[2] = {{&r, sizeof(r)}, {const_cast<char*>(ticket.data()), ticket.size()}};
  MERIDIAN_RETURN_IF_ERROR(s->WriteAll(std::span<const iovec>(iov, 2)));
  char bytes[sizeof(Response)];
  MERIDIAN_RETURN_IF_ERROR(s->ReadExact(bytes, sizeof(bytes)));
  StatusOr<Response> decoded = DecodeResponse(std::string_view(bytes, sizeof(bytes)));
  if (!decoded.ok()) return decoded.status().WithPrefix(s->peer());
  if (decoded->status != kOk) {
    return PermissionDeniedError(fmt::format(
        "{} refused this client's ticket (expired, or signed by another coordinator): ask the coordinator again",
        s->peer()));
  }
  return s;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

StatusOr<std::unique_ptr<TransferServer>> TransferServer::Start(ObjectStore& store, TransferServerOptions options) {
  std::shared_ptr<LinkClocks> clocks = options.clocks;
  if (!clocks) {
    MERIDIAN_ASSIGN_OR_RETURN(clocks, LinkClocks::Open(options.link_clocks_file));
  }
  if (!options.tls && !options.insecure && !IsLoopback(options.host)) {
    return FailedPreconditionError(fmt::format(
        "the transfer server would listen on {} without TLS; give it the cluster's certificates, or allow plain "
        "TCP explicitly (--insecure) on a network you trust",
        options.host));
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> listener, TcpListener::Listen(options.host, options.port));
  std::unique_ptr<TransferServer> s(new TransferServer(store, std::move(options), std::move(listener)));
  s->clocks_ = std::move(clocks);
  s->accept_thread_ = std::thread([raw = s.get()] { raw->AcceptLoop(); });
  return s;
}

TransferServer::TransferServer(ObjectStore& store, TransferServerOptions options, std::unique_ptr<TcpListener> listener)
    : store_(store),
      options_(std::move(options)),
      listener_(std::move(listener)),
      jitter_random_(options_.jitter_seed != 0 ? options_.jitter_seed
                                               : static_cast<uint64_t>(Env::Default().clock().WallNow().us)) {}

TransferServer::~TransferServer() {
  std::map<TcpStream*, std::thread> open;
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& [stream, t] : connections_) stream->Shutdown();
  }
  listener_->Shutdown();
  accept_thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    open.swap(connections_);
    done.swap(finished_);
  }
  for (auto& [stream, t] : open) t.join();
  for (std::thread& t : done) t.join();
}

std::string TransferServer::address() const {
  const std::string& h = options_.host;
  return fmt::format("{}:{}", h.find(':') != std::string::npos ? "[" + h + "]" : h, listener_->port());
}

std::map<std::string, LinkCounters> TransferServer::sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_;
}

void TransferServer::SetLinks(std::map<std::string, LinkShape> links) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.links = std::move(links);
}

void TransferServer::InjectFaults(const TransferFaults& faults) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_ = faults;
  if (faults_.corrupt_times == 0) faults_.corrupt_chunk = -1;
  bytes_sent_ = 0;
}

void TransferServer::AcceptLoop() {
  while (true) {
    StatusOr<std::unique_ptr<TcpStream>> accepted = listener_->Accept();
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || !accepted.ok()) return;
    for (std::thread& t : finished_) t.join();
    finished_.clear();
    if (connections_.size() >= static_cast<size_t>(std::max(1, options_.max_connections))) {
      MERIDIAN_LOG_WARN("transfer server: {} connections open, closing the one from {}", connections_.size(),
                        (*accepted)->peer());
      continue;  // the stream closes as it goes out of scope
    }
    std::string host;
    if (options_.tls) {
      host = HostOfAddress((*accepted)->peer());
      int& handshaking = handshaking_[host];
      if (handshaking >= std::max(1, options_.max_handshakes_per_peer)) {
        ++refused_;
        MERIDIAN_LOG_WARN("transfer server: {} connections from {} in their TLS handshake; closing one more", handshaking,
                          host);
        continue;
      }
      ++handshaking;
    }
    (*accepted)->SetTimeout(options_.idle_timeout_us).IgnoreError();
    TcpStream* raw = accepted->release();
    connections_.emplace(raw, std::thread([this, raw, host] {
                           std::unique_ptr<TcpStream> owned(raw);
                           Serve(*owned, host);
                           std::lock_guard<std::mutex> lock(mu_);
                           auto it = connections_.find(raw);
                           if (it != connections_.end()) {
                             finished_.push_back(std::move(it->second));
                             connections_.erase(it);
                           }
                         }));
  }
}

void TransferServer::SetTicketKey(std::string key) {
  std::lock_guard<std::mutex> lock(mu_);
  ticket_key_ = std::move(key);
}

int64_t TransferServer::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

void TransferServer::Serve(TcpStream& tcp, const std::string& host) {
  std::unique_ptr<ByteStream> secured;
  if (options_.tls) {
    StatusOr<std::unique_ptr<ByteStream>> s = options_.tls->Accept(tcp, options_.handshake_timeout_us);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = handshaking_.find(host); it != handshaking_.end() && --it->second <= 0) handshaking_.erase(it);
      if (!s.ok()) ++refused_;
    }
    if (!s.ok()) {
      MERIDIAN_LOG_WARN("transfer server: refused {}: {}", tcp.peer(), s.status().message());
      return;
    }
    secured = std::move(*s);
  }
  ByteStream& stream = secured ? *secured : static_cast<ByteStream&>(tcp);
  Grants grants;
  grants.all = !secured;  // with TLS, every peer (nodes too) reads what tickets allow
  while (true) {
    char header[sizeof(Request)];
    if (!stream.ReadExact(header, sizeof(header)).ok()) return;  // closed, or shut down
    StatusOr<Request> decoded = DecodeRequest(std::string_view(header, sizeof(header)));
    std::string site(decoded.ok() ? decoded->site_length : 0, '\0');
    Status valid = decoded.ok() ? stream.ReadExact(site.data(), site.size()) : decoded.status();
    if (valid.ok()) valid = CheckSite(site);
    if (!valid.ok()) {
      MERIDIAN_LOG_DEBUG("transfer request from {} refused: {}", stream.peer(), valid.message());
      Response bad;
      bad.status = kBadRequest;
      stream.WriteAll(&bad, sizeof(bad)).IgnoreError();
      return;
    }
    const Request& r = *decoded;
    const ObjectId id{r.id_high, r.id_low};
    if (r.op == kOpTicket) {
      if (!ServeTicket(stream, r.length, grants).ok()) return;
      continue;
    }
    if ((r.op == kOpStat || r.op == kOpFetch) && !grants.all && !grants.readable.count(id)) {
      Deny(stream, fmt::format("a read of object {} without a ticket for it", id.Hex())).IgnoreError();
      return;
    }
    int64_t wait_us = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto link = options_.links.find(site);
      if (link != options_.links.end()) {
        wait_us = link->second.rtt_us +
                  (link->second.jitter_us > 0 ? jitter_random_.UniformRange(0, link->second.jitter_us) : 0);
      }
    }
    SleepUs(wait_us);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (r.op != kOpPut) {
        sent_[site].requests++;
        sent_[site].waited_us += wait_us;
      }
    }
    Status s;
    if (r.op == kOpStat) {
      Response resp;
      StatusOr<int64_t> size = store_.Size(id);
      resp.status = size.ok() ? kOk : kNoObject;
      resp.size = size.ok() ? static_cast<uint64_t>(*size) : 0;
      s = stream.WriteAll(&resp, sizeof(resp));
    } else if (r.op == kOpFetch) {
      s = ServeFetch(stream, id, r.offset, r.length, site);
    } else if (r.op == kOpFetchBatch) {
      s = ServeBatch(stream, r.length, site, grants);
    } else {  // kOpPut: DecodeRequest knows no other
      s = ServePut(stream, id, r.length, site, grants);
    }
    if (!s.ok()) {
      MERIDIAN_LOG_DEBUG("transfer to {}: {}", stream.peer(), s.message());
      return;
    }
  }
}

Status TransferServer::Deny(ByteStream& stream, const std::string& why) {
  MERIDIAN_LOG_WARN("audit: transfer server refused {} ({}): {}", stream.peer(),
                    stream.identity().empty() ? "no certificate" : "certificate " + stream.identity(), why);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++refused_;
  }
  Response resp;
  resp.status = kDenied;
  stream.WriteAll(&resp, sizeof(resp)).IgnoreError();
  return PermissionDeniedError(why);
}

Status TransferServer::ServeTicket(ByteStream& stream, uint64_t length, Grants& grants) {
  std::string bytes(length, '\0');  // DecodeRequest bounded it
  MERIDIAN_RETURN_IF_ERROR(stream.ReadExact(bytes.data(), bytes.size()));
  std::string key;
  {
    std::lock_guard<std::mutex> lock(mu_);
    key = ticket_key_;
  }
  StatusOr<security::Ticket> t = security::VerifyTicket(bytes, key, security::UnixNowUs());
  if (!t.ok()) return Deny(stream, t.status().message());
  if (t->kind == security::TicketKind::kRead) {
    for (const std::string& hex : t->ids) {
      StatusOr<ObjectId> id = ObjectId::Parse(hex);
      if (id.ok()) grants.readable.insert(*id);
    }
  } else {
    grants.put_tenant = t->tenant;
    grants.put_max_bytes = t->max_bytes;
  }
  Response ok;
  return stream.WriteAll(&ok, sizeof(ok));
}

Status TransferServer::ServeFetch(ByteStream& stream, const ObjectId& id, uint64_t offset, uint64_t length,
                                  const std::string& site) {
  StatusOr<Pinned> pinned = store_.Pin(id);
  Response resp;
  if (!pinned.ok()) {
    resp.status = kNoObject;
    return stream.WriteAll(&resp, sizeof(resp));
  }
  const std::string_view data = pinned->data();
  const uint64_t size = data.size();
  if (offset % kChunkBytes != 0 || offset > size) {
    resp.status = kBadRequest;
    return stream.WriteAll(&resp, sizeof(resp));
  }
  const uint64_t end = std::min(size, offset + std::min(length, size - offset));
  resp.size = size;
  MERIDIAN_RETURN_IF_ERROR(stream.WriteAll(&resp, sizeof(resp)));
  LinkShape shape;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto link = options_.links.find(site);
    if (link != options_.links.end()) shape = link->second;
  }
  const std::vector<uint64_t>& sums = pinned->chunk_checksums();
  std::string corrupted;
  for (uint64_t at = offset; at < end; at += kChunkBytes) {
    const uint64_t n = std::min<uint64_t>(kChunkBytes, end - at);
    ChunkHeader h{at, static_cast<uint32_t>(n), 0, sums[at / kChunkBytes]};
    const char* payload = data.data() + at;
    bool cut = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (faults_.corrupt_chunk >= 0 && static_cast<uint64_t>(faults_.corrupt_chunk) == at / kChunkBytes) {
        corrupted.assign(payload, n);
        corrupted[n / 2] ^= 0x5A;
        payload = corrupted.data();
        if (faults_.corrupt_times > 0 && --faults_.corrupt_times == 0) faults_.corrupt_chunk = -1;
      }
      bytes_sent_ += static_cast<int64_t>(n);
      if (faults_.cut_after_bytes >= 0 && bytes_sent_ >= faults_.cut_after_bytes) {
        faults_.cut_after_bytes = -1;
        cut = true;
      }
      LinkCounters& c = sent_[site];
      c.bytes += static_cast<int64_t>(n);
      if (at == offset) c.transfers++;
      c.egress_micro_usd = c.bytes / 1000 * shape.egress_micro_usd_per_gb / 1'000'000;
    }
    if (shape.bandwidth_bps > 0) {
      // Sent when its time on the link is over: the bytes arrive no faster than the
      // link, which every sender from this site to that one shares.
      const int64_t done = clocks_->Book(options_.site, site, static_cast<int64_t>(n), shape.bandwidth_bps, NowUs());
      SleepUs(done - NowUs());
    }
    if (cut) {
      // Half the chunk, then the connection breaks.
      iovec half[2] = {{&h, sizeof(h)}, {const_cast<char*>(payload), n / 2}};
      stream.WriteAll(std::span<const iovec>(half, 2)).IgnoreError();
      stream.Shutdown();
      return UnavailableError("connection cut (injected fault)");
    }
    iovec iov[2] = {{&h, sizeof(h)}, {const_cast<char*>(payload), n}};
    MERIDIAN_RETURN_IF_ERROR(stream.WriteAll(std::span<const iovec>(iov, 2)));
  }
  return OkStatus();
}

Status TransferServer::ServeBatch(ByteStream& stream, uint64_t count, const std::string& site,
                                  const Grants& grants) {
  std::vector<ObjectId> ids(count);
  for (ObjectId& id : ids) {
    uint64_t halves[2];
    MERIDIAN_RETURN_IF_ERROR(stream.ReadExact(halves, sizeof(halves)));
    id = ObjectId{halves[0], halves[1]};
    if (!grants.all && !grants.readable.count(id)) {
      return Deny(stream, fmt::format("a read of object {} without a ticket for it", id.Hex()));
    }
  }
  for (const ObjectId& id : ids) MERIDIAN_RETURN_IF_ERROR(ServeFetch(stream, id, 0, kMaxObjectBytes, site));
  return OkStatus();
}

Status TransferServer::ServePut(ByteStream& stream, const ObjectId& id, uint64_t size, const std::string& site,
                                Grants& grants) {
  const bool ticketed = !grants.all;
  if (ticketed && (grants.put_max_bytes < 0 || size > static_cast<uint64_t>(grants.put_max_bytes))) {
    return Deny(stream, grants.put_max_bytes < 0
                            ? fmt::format("a put of object {} without a put ticket", id.Hex())
                            : fmt::format("a put of {} bytes where its ticket allows {}", size, grants.put_max_bytes));
  }
  const std::string tenant = std::move(grants.put_tenant);
  grants.put_max_bytes = -1;  // a put ticket allows one put
  Response resp;
  resp.status = kBadRequest;
  // Nothing is allocated on a peer's word alone: the size must fit one put's limit and
  // what is left of the budget for puts under way.
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t left = static_cast<uint64_t>(std::max<int64_t>(0, options_.max_put_in_flight_bytes - put_bytes_in_flight_));
    if (size > static_cast<uint64_t>(options_.max_put_bytes) || size > left) {
      stream.WriteAll(&resp, sizeof(resp)).IgnoreError();
      return ResourceExhaustedError(fmt::format("a put of {} bytes from {} is over the limit ({} a put, {} free now)", size,
                                                stream.peer(), options_.max_put_bytes, left));
    }
    put_bytes_in_flight_ += static_cast<int64_t>(size);
  }
  struct Release {
    TransferServer* s;
    int64_t n;
    ~Release() {
      std::lock_guard<std::mutex> lock(s->mu_);
      s->put_bytes_in_flight_ -= n;
    }
  } release{this, static_cast<int64_t>(size)};
  StatusOr<std::shared_ptr<Bytes>> buffer = store_.Allocate(size);
  if (!buffer.ok()) {
    stream.WriteAll(&resp, sizeof(resp)).IgnoreError();
    return buffer.status().WithPrefix(fmt::format("a put of {} bytes", size));
  }
  std::vector<uint64_t> sums(static_cast<size_t>(ChunkCount(static_cast<int64_t>(size))));
  bool damaged = false;
  int64_t bandwidth_bps = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto link = options_.links.find(site);
    if (link != options_.links.end()) bandwidth_bps = link->second.bandwidth_bps;
  }
  for (uint64_t at = 0; at < size; at += kChunkBytes) {
    if (bandwidth_bps > 0) {
      // Taken when its time on the link from the sender's site is over: the sender,
      // held back by TCP, gets no more than the link, which it shares.
      const int64_t n = static_cast<int64_t>(std::min<uint64_t>(kChunkBytes, size - at));
      SleepUs(clocks_->Book(site, options_.site, n, bandwidth_bps, NowUs()) - NowUs());
    }
    char header[sizeof(ChunkHeader)];
    MERIDIAN_RETURN_IF_ERROR(stream.ReadExact(header, sizeof(header)));
    const uint64_t want = std::min<uint64_t>(kChunkBytes, size - at);
    StatusOr<ChunkHeader> chunk = DecodeChunk(std::string_view(header, sizeof(header)), at, want);
    if (!chunk.ok()) {
      stream.WriteAll(&resp, sizeof(resp)).IgnoreError();
      return chunk.status().WithPrefix("a put");
    }
    const ChunkHeader& h = *chunk;
    MERIDIAN_RETURN_IF_ERROR(stream.ReadExact((*buffer)->data() + at, want));
    sums[at / kChunkBytes] = ChunkChecksum(std::string_view((*buffer)->data() + at, want));
    damaged = damaged || sums[at / kChunkBytes] != h.checksum;
  }
  Status stored = damaged ? DataLossError("a chunk failed its checksum")
                          : store_.PutVerified(id, std::move(*buffer), std::move(sums));
  resp.status = stored.ok() ? kOk : kDamaged;
  resp.size = size;
  MERIDIAN_RETURN_IF_ERROR(stream.WriteAll(&resp, sizeof(resp)));
  if (stored.ok() && ticketed) {
    std::string key;
    {
      std::lock_guard<std::mutex> lock(mu_);
      key = ticket_key_;
    }
    const std::string receipt = security::PutReceipt(key, tenant, id.Hex());
    MERIDIAN_RETURN_IF_ERROR(stream.WriteAll(receipt.data(), receipt.size()));
  }
  return stored;
}

namespace {

struct RangeResult {
  Status status;
  int64_t chunks = 0;
  int64_t corrupt = 0;
  int64_t reconnects = 0;
};

// Fills buffer[begin, end) from the server, resuming after broken connections and
// refetching chunks that fail their checksum. `sums` receives each verified chunk's
// checksum.
RangeResult FetchRange(const std::string& host, int port, const ObjectId& id, const FetchOptions& o, char* buffer,
                       uint64_t size, uint64_t begin, uint64_t end, std::vector<uint64_t>& sums,
                       std::unique_ptr<ByteStream> stream) {
  RangeResult r;
  uint64_t next = begin;
  int attempts = 0;        // connections since the last verified chunk
  int corrupt_here = 0;    // checksum failures of the chunk at `next`
  bool connected_before = stream != nullptr;
  Status last;
  auto cancelled = [&] { return o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed); };
  while (next < end) {
    if (cancelled()) {
      r.status = CancelledError(fmt::format("object {}: the fetch was stopped", id.Hex()));
      return r;
    }
    if (!stream) {
      if (attempts >= o.max_attempts) {
        r.status = UnavailableError(fmt::format("object {}: {} connections to {}:{} failed; the last: {}", id.Hex(),
                                                attempts, host, port, last.message()));
        return r;
      }
      if (attempts > 0) SleepUs(std::min<int64_t>(50'000 << std::min(attempts - 1, 4), 1'000'000));
      attempts++;
      StatusOr<std::unique_ptr<ByteStream>> s = Dial(host, port, o.timeout_us, o.tls, o.ticket);
      if (!s.ok()) {
        if (s.status().code() == StatusCode::kUnauthenticated || s.status().code() == StatusCode::kPermissionDenied) {
          r.status = s.status();
          return r;
        }
        last = s.status();
        continue;
      }
      if (connected_before) r.reconnects++;
      connected_before = true;
      stream = std::move(*s);
    }
    Status s = SendRequest(*stream, kOpFetch, id, next, end - next, o.site);
    StatusOr<uint64_t> got_size = s.ok() ? ReadResponse(*stream, id) : StatusOr<uint64_t>(s);
    if (!got_size.ok()) {
      if (got_size.status().code() == StatusCode::kNotFound || got_size.status().code() == StatusCode::kInvalidArgument ||
          got_size.status().code() == StatusCode::kPermissionDenied) {
        r.status = got_size.status();
        return r;
      }
      last = got_size.status();
      stream.reset();
      continue;
    }
    if (*got_size != size) {
      r.status = DataLossError(fmt::format("object {} changed size on {}:{} ({} then {})", id.Hex(), host, port, size, *got_size));
      return r;
    }
    bool broken = false;
    while (next < end) {
      char header[sizeof(ChunkHeader)];
      Status read = stream->ReadExact(header, sizeof(header));
      const uint64_t want = std::min<uint64_t>(kChunkBytes, end - next);
      ChunkHeader h;
      if (read.ok()) {
        StatusOr<ChunkHeader> chunk = DecodeChunk(std::string_view(header, sizeof(header)), next, want);
        read = chunk.ok() ? OkStatus() : chunk.status().WithPrefix(stream->peer());
        if (chunk.ok()) h = *chunk;
      }
      if (read.ok()) read = stream->ReadExact(buffer + next, want);
      if (!read.ok()) {
        last = read;
        broken = true;
        break;
      }
      if (ChunkChecksum(std::string_view(buffer + next, want)) != h.checksum) {
        // Damaged on the way: drop the connection and ask again from this chunk, a few
        // times; the same failure again and again means the replica itself is bad.
        r.corrupt++;
        if (++corrupt_here > o.max_corrupt_refetches) {
          r.status = DataLossError(fmt::format("object {}: the chunk at offset {} from {} failed its checksum {} times; "
                                               "that replica is damaged",
                                               id.Hex(), next, stream->peer(), corrupt_here));
          return r;
        }
        MERIDIAN_LOG_WARN("object {}: chunk at offset {} from {} failed its checksum; fetching it again", id.Hex(),
                          next, stream->peer());
        last = DataLossError(fmt::format("chunk at {} failed its checksum", next));
        broken = true;
        attempts = 0;  // the peer answers: a bad chunk is not a dead peer (bounded above)
        break;
      }
      sums[next / kChunkBytes] = h.checksum;
      r.chunks++;
      next += want;
      attempts = 0;
      corrupt_here = 0;
      if (cancelled()) break;
    }
    if (broken) stream.reset();
  }
  return r;
}

// A buffer in `store` for object `id` of `size` bytes as announced; why not, naming it.
StatusOr<std::shared_ptr<Bytes>> AllocateFor(ObjectStore& store, const ObjectId& id, uint64_t size) {
  StatusOr<std::shared_ptr<Bytes>> buffer = store.Allocate(size);
  if (!buffer.ok()) return buffer.status().WithPrefix(fmt::format("object {}", id.Hex()));
  return buffer;
}

}  // namespace

StatusOr<FetchStats> Fetch(const std::string& address, const ObjectId& id, ObjectStore& store, const FetchOptions& o) {
  FetchStats stats;
  const int64_t t0 = NowUs();
  if (store.Contains(id)) {
    MERIDIAN_RETURN_IF_ERROR(store.AddRef(id));
    return stats;
  }
  MERIDIAN_ASSIGN_OR_RETURN(auto hp, SplitAddress(address));
  const std::string& host = hp.first;  // not a structured binding: lambdas below capture it
  const int port = hp.second;
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<ByteStream> first, Dial(host, port, o.timeout_us, o.tls, o.ticket));
  MERIDIAN_RETURN_IF_ERROR(SendRequest(*first, kOpStat, id, 0, 0, o.site));
  MERIDIAN_ASSIGN_OR_RETURN(uint64_t size, ReadResponse(*first, id));
  if (size > kMaxObjectBytes) {
    return DataLossError(fmt::format("{} announces object {} as {} bytes, over the 64 GiB limit", address, id.Hex(), size));
  }
  if (o.expected_size > 0 && size != static_cast<uint64_t>(o.expected_size)) {
    return DataLossError(fmt::format("{} announces object {} as {} bytes; the cluster's directory holds it as {}", address,
                                     id.Hex(), size, o.expected_size));
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::shared_ptr<Bytes> buffer, AllocateFor(store, id, size));
  const int64_t chunks = ChunkCount(static_cast<int64_t>(size));
  std::vector<uint64_t> sums(static_cast<size_t>(chunks));
  int streams = o.streams > 0 ? o.streams : (static_cast<int64_t>(size) >= kMultiStreamBytes ? 4 : 1);
  streams = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(streams, chunks)));
  std::vector<RangeResult> results(streams);
  std::vector<std::thread> threads;
  auto range = [&](int k) {
    uint64_t b = static_cast<uint64_t>(chunks * k / streams) * kChunkBytes;
    uint64_t e = std::min<uint64_t>(size, static_cast<uint64_t>(chunks * (k + 1) / streams) * kChunkBytes);
    return std::make_pair(b, e);
  };
  for (int k = 1; k < streams; ++k) {
    threads.emplace_back([&, k] {
      auto [b, e] = range(k);
      results[k] = FetchRange(host, port, id, o, buffer->data(), size, b, e, sums, nullptr);
    });
  }
  {
    auto [b, e] = range(0);
    results[0] = FetchRange(host, port, id, o, buffer->data(), size, b, e, sums, std::move(first));
  }
  for (std::thread& t : threads) t.join();
  for (const RangeResult& r : results) {
    MERIDIAN_RETURN_IF_ERROR(r.status);
    stats.chunks += r.chunks;
    stats.corrupt_chunks += r.corrupt;
    stats.reconnects += r.reconnects;
  }
  MERIDIAN_RETURN_IF_ERROR(store.PutVerified(id, std::move(buffer), std::move(sums)));
  stats.bytes = static_cast<int64_t>(size);
  stats.streams = streams;
  stats.seconds = static_cast<double>(NowUs() - t0) / 1e6;
  return stats;
}

namespace {

// Reads one whole object of a batch (its response was read: `size` bytes) into the
// store. kUnavailable when a chunk fails its checksum (the stream stays in step);
// any other error means the stream is out of step and the batch ends.
Status ReadBatchObject(ByteStream& stream, const ObjectId& id, uint64_t size, ObjectStore& store, bool* in_step) {
  *in_step = false;
  MERIDIAN_ASSIGN_OR_RETURN(std::shared_ptr<Bytes> buffer, AllocateFor(store, id, size));
  std::vector<uint64_t> sums(static_cast<size_t>(ChunkCount(static_cast<int64_t>(size))));
  bool damaged = false;
  for (uint64_t at = 0; at < size; at += kChunkBytes) {
    char header[sizeof(ChunkHeader)];
    MERIDIAN_RETURN_IF_ERROR(stream.ReadExact(header, sizeof(header)));
    const uint64_t want = std::min<uint64_t>(kChunkBytes, size - at);
    MERIDIAN_ASSIGN_OR_RETURN(ChunkHeader h, DecodeChunk(std::string_view(header, sizeof(header)), at, want));
    MERIDIAN_RETURN_IF_ERROR(stream.ReadExact(buffer->data() + at, want));
    sums[at / kChunkBytes] = h.checksum;
    damaged = damaged || ChunkChecksum(std::string_view(buffer->data() + at, want)) != h.checksum;
  }
  *in_step = true;
  if (damaged) return UnavailableError(fmt::format("object {}: a chunk from {} failed its checksum", id.Hex(), stream.peer()));
  return store.PutVerified(id, std::move(buffer), std::move(sums));
}

}  // namespace

std::vector<StatusOr<FetchStats>> FetchBatch(const std::string& address, const std::vector<ObjectId>& ids,
                                             ObjectStore& store, const FetchOptions& o) {
  std::vector<StatusOr<FetchStats>> out(ids.size(), UnavailableError("not fetched"));
  const int64_t t0 = NowUs();
  std::vector<size_t> wanted;  // indices of ids to ask for
  for (size_t i = 0; i < ids.size(); ++i) {
    if (store.Contains(ids[i]) && store.AddRef(ids[i]).ok()) {
      out[i] = FetchStats{};
    } else {
      wanted.push_back(i);
    }
  }
  auto fail_rest = [&](size_t from, const Status& why) {
    for (size_t k = from; k < wanted.size(); ++k) out[wanted[k]] = why;
  };
  for (size_t begin = 0; begin < wanted.size(); begin += kMaxBatchObjects) {
    const size_t end = std::min(wanted.size(), begin + static_cast<size_t>(kMaxBatchObjects));
    StatusOr<std::pair<std::string, int>> hp = SplitAddress(address);
    StatusOr<std::unique_ptr<ByteStream>> s =
        hp.ok() ? Dial(hp->first, hp->second, o.timeout_us, o.tls, o.ticket) : StatusOr<std::unique_ptr<ByteStream>>(hp.status());
    if (!s.ok()) {
      fail_rest(begin, s.status());
      return out;
    }
    ByteStream& stream = **s;
    Request r;
    r.op = kOpFetchBatch;
    r.length = end - begin;
    r.site_length = static_cast<uint16_t>(std::min(o.site.size(), kMaxSite));
    std::vector<uint64_t> halves;
    for (size_t k = begin; k < end; ++k) {
      halves.push_back(ids[wanted[k]].high);
      halves.push_back(ids[wanted[k]].low);
    }
    iovec iov[3] = {{&r, sizeof(r)},
                    {const_cast<char*>(o.site.data()), r.site_length},
                    {halves.data(), halves.size() * sizeof(uint64_t)}};
    if (Status sent = stream.WriteAll(std::span<const iovec>(iov, 3)); !sent.ok()) {
      fail_rest(begin, sent);
      return out;
    }
    for (size_t k = begin; k < end; ++k) {
      const size_t i = wanted[k];
      if (o.cancel != nullptr && o.cancel->load()) {
        fail_rest(k, CancelledError("the fetch was stopped"));
        return out;
      }
      StatusOr<uint64_t> size = ReadResponse(stream, ids[i]);
      if (!size.ok() && size.status().code() == StatusCode::kNotFound) {
        out[i] = size.status();
        continue;
      }
      if (size.ok() && static_cast<int64_t>(*size) > kMaxBatchObjectBytes) {
        size = OutOfRangeError(fmt::format("object {} is {} bytes, too large for a batch", ids[i].Hex(), *size));
      }
      bool in_step = false;
      Status got = size.ok() ? ReadBatchObject(stream, ids[i], *size, store, &in_step) : size.status();
      if (got.ok()) {
        FetchStats st;
        st.bytes = static_cast<int64_t>(*size);
        st.chunks = ChunkCount(st.bytes);
        st.streams = 1;
        st.seconds = static_cast<double>(NowUs() - t0) / 1e6;
        out[i] = st;
        continue;
      }
      out[i] = got;
      if (!in_step) {
        fail_rest(k + 1, UnavailableError(fmt::format("the batch from {} ended early: {}", address, got.message())));
        return out;
      }
    }
  }
  return out;
}

StatusOr<ObjectId> Push(const std::string& address, std::string_view data, int64_t timeout_us,
                        const std::string& site, std::shared_ptr<const security::TlsContext> tls,
                        const std::string& ticket, std::string* receipt) {
  const std::vector<uint64_t> sums = ChunkChecksums(data);
  const ObjectId id = ObjectId::FromChunks(static_cast<int64_t>(data.size()), sums);
  MERIDIAN_ASSIGN_OR_RETURN(auto hp, SplitAddress(address));
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<ByteStream> s, Dial(hp.first, hp.second, timeout_us, tls, ticket));
  MERIDIAN_RETURN_IF_ERROR(SendRequest(*s, kOpPut, id, 0, data.size(), site));
  for (uint64_t at = 0; at < data.size(); at += kChunkBytes) {
    const uint64_t n = std::min<uint64_t>(kChunkBytes, data.size() - at);
    ChunkHeader h{at, static_cast<uint32_t>(n), 0, sums[at / kChunkBytes]};
    iovec iov[2] = {{&h, sizeof(h)}, {const_cast<char*>(data.data() + at), n}};
    Status sent = s->WriteAll(std::span<const iovec>(iov, 2));
    if (!sent.ok()) {
      // A server that refuses a put answers at once and closes: its answer says why.
      StatusOr<uint64_t> answer = ReadResponse(*s, id);
      return answer.ok() || answer.status().code() == StatusCode::kUnavailable ? sent : answer.status();
    }
  }
  MERIDIAN_RETURN_IF_ERROR(ReadResponse(*s, id).status());
  if (!ticket.empty() && tls) {
    std::string got(security::kReceiptBytes, '\0');
    MERIDIAN_RETURN_IF_ERROR(s->ReadExact(got.data(), got.size()));
    if (receipt != nullptr) *receipt = std::move(got);
  }
  return id;
}

}  // namespace meridian::objects
