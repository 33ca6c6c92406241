// Moving objects between agents: a TransferServer serves the objects of one store over
// plain TCP; Fetch pulls one object from a server into another store.
//
// The bulk path is TCP with our own framing, not gRPC: on a 2-core machine gRPC's
// per-message copies would cap it well below the network. Objects move in chunks of
// kChunkBytes, each with its XXH3-64 checksum, sent back to back (pipelined, no
// per-chunk acknowledgement). Large objects are split into contiguous ranges fetched
// over several connections at once. A broken connection is reopened and the range
// resumed at the first chunk not yet verified; a chunk whose checksum does not match
// is fetched again. The whole object is finally checked against its id.
//
// WAN emulation: a server shapes what it sends to each requesting site by the link
// between the sites (round-trip time before the first byte, bandwidth shared by all
// transfers on the link, from every agent at the site when they share a LinkClocks
// file), and counts bytes and egress cost per destination site. A put from a site is
// taken no faster than the link from that site (its clock in the other direction).
//
// Wire format (little-endian, one request at a time per connection):
//   request  = magic u32, version u16, op u16 (1 stat, 2 fetch, 3 put), id 16 bytes,
//              offset u64, length u64, site length u16, 6 pad bytes, site bytes
//   response = magic u32, status u32 (0 ok, 1 no such object, 2 bad request,
//              3 damaged: a put's bytes did not match its id, 4 denied), size u64
//   fetch    = response, then chunks: offset u64, length u32, pad u32, checksum u64, bytes
//   put      = request (length = the object's size), then its chunks as a fetch sends
//              them; the server answers with a response once it stored the object
//   batch    = request (op 4, length = n), site, then n ids of 16 bytes; the server
//              answers each whole object in turn as a fetch does: one round trip on
//              the link for all of them (small objects, read together by one task)
//   ticket   = request (op 5, length = n), site, then a ticket of n bytes
//              (security/ticket.h); the server answers with a response, status 0 or
//              4 (denied). After a put allowed by a put ticket the server sends the
//              32-byte receipt right after the put's response.
//
// Security: with a TlsContext (security/tls.h) on both ends, every connection is TLS 1.3
// and both ends prove a certificate of the cluster's CA before a byte of the protocol
// is read; a peer that cannot is refused and logged. Then a peer reads and puts only
// what its tickets allow (status 4, denied, otherwise). Without one the protocol is plain
// TCP, which a server allows only on a loopback address unless told `insecure`.
//
// Thread-safety: a TransferServer serves any number of connections at once; its
// accessors may be called from any thread. Fetch may run on many threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/env.h"
#include "common/net.h"
#include "common/status.h"
#include "objects/link_clock.h"
#include "objects/store.h"
#include "security/tls.h"

namespace meridian::objects {

// What one put carries at most, by default (TransferServerOptions::max_put_bytes):
// clients refuse a larger file before reading it.
inline constexpr int64_t kMaxPutBytes = int64_t{16} << 30;

struct LinkShape {
  int64_t rtt_us = 0;
  int64_t bandwidth_bps = 0;  // 0: unshaped
  int64_t egress_micro_usd_per_gb = 0;
  int64_t jitter_us = 0;  // each request waits rtt plus a uniform 0 to this
};

struct LinkCounters {
  int64_t bytes = 0;
  int64_t transfers = 0;  // objects (or ranges of one) sent
  int64_t requests = 0;   // requests that paid the link's round trip (a batch is one)
  int64_t egress_micro_usd = 0;
  int64_t waited_us = 0;  // round trips and jitter those requests waited, in all
};

// Faults a test injects into a server; each fires once unless said otherwise.
struct TransferFaults {
  int64_t cut_after_bytes = -1;  // break the connection once this many bytes were sent
  int64_t corrupt_chunk = -1;    // flip a byte of this chunk (index) on the wire
  int corrupt_times = 1;         // how often corrupt_chunk fires; -1: every time (a bad replica)
};

struct TransferServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  std::string site = {};
  std::map<std::string, LinkShape> links = {};  // by requesting site; a site absent is unshaped
  // Bounds on what a peer can make the server hold. Connections past max_connections
  // are closed at once; one silent for idle_timeout_us (between requests or inside
  // one) is closed. A put announcing more than max_put_bytes, or more than what is
  // left of max_put_in_flight_bytes across all puts under way, is refused before any
  // memory is taken for it.
  int max_connections = 256;
  int64_t idle_timeout_us = 60'000'000;
  // With TLS: a handshake not ended within handshake_timeout_us is given up (a peer
  // that sends a byte now and then would never meet the idle timeout), and at most
  // max_handshakes_per_peer connections from one address are in their handshake at
  // once; one past that is closed as it is accepted. So a peer without the cluster's
  // certificates cannot take the server's connections from its nodes.
  int64_t handshake_timeout_us = 10'000'000;
  int max_handshakes_per_peer = 32;
  int64_t max_put_bytes = kMaxPutBytes;
  int64_t max_put_in_flight_bytes = int64_t{16} << 30;
  // The file of link clocks shared by every agent of the cluster (LinkClocks), so
  // that all senders from one site to another share that link's bandwidth. Empty:
  // shared by this server's transfers only.
  std::string link_clocks_file = {};
  // Link clocks to pace by, shared with the rest of this node's traffic; when set,
  // link_clocks_file is not opened.
  std::shared_ptr<LinkClocks> clocks = {};
  // TLS for every connection; null: plain TCP, refused on an address other than
  // loopback unless `insecure`.
  std::shared_ptr<const security::TlsContext> tls = {};
  bool insecure = false;
  // The seed of the links' jitter draws; 0: from the clock.
  uint64_t jitter_seed = 0;
};

class TransferServer {
 public:
  static StatusOr<std::unique_ptr<TransferServer>> Start(ObjectStore& store, TransferServerOptions options);
  ~TransferServer();

  // host:port
  std::string address() const;
  // Bytes sent, by destination site.
  std::map<std::string, LinkCounters> sent() const;
  void InjectFaults(const TransferFaults& faults);
  // Replaces the links it shapes by (known once the agent has registered).
  void SetLinks(std::map<std::string, LinkShape> links);
  // Sets the key tickets are signed with (the coordinator's, given at registration).
  // With TLS, a peer (a node's agent or a client) reads and puts nothing without a
  // ticket signed with it (security/ticket.h).
  void SetTicketKey(std::string key);
  // Connections refused: the peer did not prove a certificate of the CA, or showed
  // a bad ticket, or asked for what no ticket of its allowed.
  int64_t refused() const;

 private:
  TransferServer(ObjectStore& store, TransferServerOptions options, std::unique_ptr<TcpListener> listener);
  void AcceptLoop();
  // What a connection may do: everything without TLS, else what its tickets allow.
  struct Grants {
    bool all = false;
    std::set<ObjectId> readable;
    std::string put_tenant;  // a put ticket's, until the put it allows
    int64_t put_max_bytes = -1;  // -1: no put allowed
  };
  // `host`: the peer's address, by which its handshakes are counted.
  void Serve(TcpStream& tcp, const std::string& host);
  Status ServeTicket(ByteStream& stream, uint64_t length, Grants& grants);
  // Answers kDenied, counts and logs the refusal; the connection then closes.
  Status Deny(ByteStream& stream, const std::string& why);
  Status ServeFetch(ByteStream& stream, const ObjectId& id, uint64_t offset, uint64_t length, const std::string& site);
  Status ServePut(ByteStream& stream, const ObjectId& id, uint64_t size, const std::string& site, Grants& grants);
  Status ServeBatch(ByteStream& stream, uint64_t count, const std::string& site, const Grants& grants);

  ObjectStore& store_;
  TransferServerOptions options_;  // links guarded by mu_
  std::unique_ptr<TcpListener> listener_;
  std::thread accept_thread_;

  mutable std::mutex mu_;
  bool stopping_ = false;                                     // guarded by mu_
  std::map<TcpStream*, std::thread> connections_;             // guarded by mu_
  std::vector<std::thread> finished_;                         // guarded by mu_
  std::map<std::string, LinkCounters> sent_;                  // guarded by mu_
  std::shared_ptr<LinkClocks> clocks_;                        // set by Start
  TransferFaults faults_;                                     // guarded by mu_
  int64_t bytes_sent_ = 0;                                    // guarded by mu_
  int64_t put_bytes_in_flight_ = 0;                           // guarded by mu_
  int64_t refused_ = 0;                                       // guarded by mu_
  std::map<std::string, int> handshaking_;                    // by peer address, guarded by mu_
  std::string ticket_key_;                                    // guarded by mu_
  Random jitter_random_;                                      // guarded by mu_
};

struct FetchOptions {
  std::string site;         // the fetching node's site, by which the server shapes
  int streams = 0;          // connections at once; 0: 1 below 64 MiB, else 4
  int max_attempts = 5;     // connections per range before giving up
  int64_t timeout_us = 30'000'000;  // a connection without progress this long is broken
  // Times one chunk may fail its checksum before the replica is taken for damaged
  // (kDataLoss): a peer that sends the same bad bytes again is not asked forever.
  int max_corrupt_refetches = 3;
  // Set by another thread to give up (a task stopped or cancelled): the fetch ends
  // with kCancelled between chunks, storing nothing. May be null.
  const std::atomic<bool>* cancel = nullptr;
  // TLS to the server (it must then be a node of the cluster); null: plain TCP.
  std::shared_ptr<const security::TlsContext> tls = {};
  // A read ticket from the coordinator naming the object(s), shown first on every
  // connection: what a server with TLS requires (security/ticket.h).
  std::string ticket = {};
  // The object's size as the cluster's directory holds it (model::ObjectLocation);
  // 0: not known. A server announcing another size is kDataLoss before anything is
  // allocated: a lying or damaged replica cannot make this node claim memory or
  // disk (up to kMaxObjectBytes) for bytes it will never send. Fetch only (a batch's
  // objects are bounded by kMaxBatchObjectBytes).
  int64_t expected_size = 0;
};

struct FetchStats {
  int64_t bytes = 0;
  int64_t chunks = 0;
  int64_t corrupt_chunks = 0;  // failed their checksum and were fetched again
  int64_t reconnects = 0;
  int streams = 0;
  double seconds = 0;
};

// Fetches object `id` from the server at `address` ("host:port") into `store`, with a
// reference the caller owns. An object the store holds already is not fetched.
// Errors: kNotFound (the server has no such object), kDataLoss (the server's copy is
// damaged: fetch another replica), kUnavailable (the server cannot be reached),
// kCancelled (options.cancel was set), kResourceExhausted (no memory for it here).
StatusOr<FetchStats> Fetch(const std::string& address, const ObjectId& id, ObjectStore& store,
                           const FetchOptions& options = {});

// Fetches several objects from the server at `address` in one request over one
// connection: one round trip on the link for all of them, where fetching each alone
// pays one (for the many small inputs of a merge). Result i is for ids[i]: its stats
// with a reference the caller owns, or why not (kNotFound: the server has none;
// kUnavailable: the connection broke or a chunk failed its checksum, so fetch it
// alone, which retries). Meant for small objects: one over max_bytes_each is
// refused (kOutOfRange) and the rest of the batch with it.
inline constexpr int64_t kMaxBatchObjectBytes = int64_t{4} << 20;
std::vector<StatusOr<FetchStats>> FetchBatch(const std::string& address, const std::vector<ObjectId>& ids,
                                             ObjectStore& store, const FetchOptions& options = {});

// Sends `data` to the server at `address`, which stores it (one reference, held for
// the cluster) once every chunk and the id check out. Returns its id. `site` is where
// the sender is: the server takes the bytes no faster than the link from there to it
// (shared with everything else on that link), as a fetch is sent. Empty: unshaped.
// With a put `ticket` (what a server with TLS requires), the server's receipt for the
// put goes to `receipt`, for the coordinator's Commit.
StatusOr<ObjectId> Push(const std::string& address, std::string_view data, int64_t timeout_us = 30'000'000,
                        const std::string& site = "", std::shared_ptr<const security::TlsContext> tls = nullptr,
                        const std::string& ticket = "", std::string* receipt = nullptr);

}  // namespace meridian::objects
