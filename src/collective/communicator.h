// Meridian's own collectives: all-reduce, reduce-scatter, all-gather and broadcast
// among the ranks of a gang, over the data plane's transport (common/net.h, and TLS
// with security/tls.h when the cluster has certificates).
//
// Algorithms (docs/training.md has the figures):
// - Ring, within a group of ranks: reduce-scatter then all-gather, each rank sending
//   one block to the next and receiving one from the previous at every step, so each
//   link carries 2(n-1)/n of the data and no rank sends more than any other.
// - Hierarchical, across sites: an all-reduce within each site (ring), then one
//   leader per site all-reduces with the other sites' leaders over the WAN (ring of
//   leaders), then each leader broadcasts the result to its site (pipelined chain).
//   The WAN carries what a two-rank exchange carries, per site, instead of the flat
//   ring's 2(n-1)/n, and pays its round trip 2(s-1) times instead of 2(n-1).
// - Broadcast: a chain from the root, pipelined by chunks.
//
// Connections: every rank listens (its TcpListener); rank i opens one connection to
// rank j the first time it sends to j, and uses it only to send, so a rank sends and
// receives at once on separate connections. A connection proves it comes from a rank
// of this gang: the listener sends a 32-byte nonce and the peer answers its rank and
// HMAC-SHA256(gang secret, nonce ‖ "collective rank N") before anything else is read.
// With TLS both ends also prove a certificate of the cluster's CA first.
//
// Shared memory: every rank also listens on a local socket (abstract Unix, named by
// an HMAC of the gang's secret, its rank and its address). A rank sending to a rank
// whose address names the same host connects there first: the same handshake, plus
// the listener's proof of the secret over the connecting rank's nonce (a local name
// can be taken by anyone on the host), then the frames go through a ring in shared
// memory (collective/shm.h) instead of TCP, unencrypted, as they never leave the
// host. Where that fails (another network namespace, another host behind one
// address), TCP.
//
// Bounds: a frame's header is checked before its body is read: our magic, and the
// very length the algorithm expects (never more than chunk_bytes), so a peer cannot
// make a rank allocate or read what it did not ask for. A rank blocked longer than
// timeout_us on a peer fails the collective with kUnavailable naming that peer.
//
// WAN emulation: with `links`, bytes sent between two sites are paced by a link clock
// per direction (bandwidth) and delivered half a round trip later, as on the link,
// for benchmarks and tests of the hierarchical path on one machine.
//
// Generations: a gang that lost a rank goes on with its replacement (elastic
// training). Every rank starts in generation 0; Rejoin moves to the next; a
// connection proves its generation and its rank's address and site, so the
// survivors learn where a replacement listens, and frames of the failed generation
// are never read in the next (docs/training.md, "Elastic recovery").
//
// Thread-safety: one collective at a time per Communicator (the caller's thread),
// and Rejoin and Announce from that thread between them; it runs one sender thread
// and one accepting thread of its own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/net.h"
#include "common/status.h"
#include "objects/link_clock.h"
#include "objects/transfer.h"
#include "security/tls.h"

namespace meridian::collective {

enum class ReduceOp { kSum, kMax, kMin };
enum class Algorithm {
  kAuto,          // hierarchical when the ranks are at more than one site, else ring
  kRing,          // one ring over every rank, wherever they are
  kHierarchical,  // within sites, then between site leaders
};

struct RankAddress {
  std::string address;  // host:port of the rank's listener
  std::string site;
};

inline constexpr int kMaxRanks = 4096;  // a gang's bound (model::kMaxGangMembers)

struct CommunicatorOptions {
  int rank = 0;
  std::vector<RankAddress> ranks;  // by rank
  std::string secret;              // the gang's (MERIDIAN_GANG_SECRET); required
  std::shared_ptr<const security::TlsContext> tls = {};  // null: plain TCP
  // Emulated WAN links between sites, keyed by the two sites in either order; sites
  // without an entry are not shaped. rtt_us and bandwidth_bps are used.
  std::map<std::pair<std::string, std::string>, objects::LinkShape> links = {};
  int64_t timeout_us = 60'000'000;
  size_t chunk_bytes = size_t{1} << 20;  // frames carry at most this much
  // Ranks whose addresses name one host exchange through shared memory (collective/
  // shm.h) when they reach each other's local socket; TCP otherwise.
  bool shared_memory = true;
};

// The elements of `count` that block `b` of `blocks` holds: [first, second).
std::pair<size_t, size_t> BlockRange(size_t count, int blocks, int b);

class Communicator {
 public:
  // Listens on `listener` for the other ranks (it must be the address ranks[rank]
  // names). Connections are made on first use, so ranks may start at different
  // moments within timeout_us.
  static StatusOr<std::unique_ptr<Communicator>> Create(std::unique_ptr<TcpListener> listener,
                                                        CommunicatorOptions options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return static_cast<int>(options_.ranks.size()); }

  // A collective that fails shuts this rank's connections, so the others fail too
  // rather than wait; the communicator is then of use only after Rejoin.
  //
  // Every rank's `data` becomes the element-wise reduction of all ranks' data (every
  // rank passes the same length).
  Status AllReduce(std::span<float> data, ReduceOp op, Algorithm algorithm = Algorithm::kAuto);
  Status AllReduce(std::span<double> data, ReduceOp op, Algorithm algorithm = Algorithm::kAuto);
  // Block rank() of `data` (BlockRange(data.size(), size(), rank())) becomes the
  // reduction of that block over all ranks; the rest of `data` is scratch.
  Status ReduceScatter(std::span<float> data, ReduceOp op);
  Status ReduceScatter(std::span<double> data, ReduceOp op);
  // Block r of `data` (by bytes) is rank r's on entry; every rank has every block on
  // return.
  Status AllGather(std::span<std::byte> data);
  // Every rank's `data` becomes `root`'s.
  Status Broadcast(std::span<std::byte> data, int root);

  // After a collective failed because a rank was lost (or another rank rejoined):
  // drops this generation's connections and what it queued, and moves to the next
  // generation, from which the gang's ranks reconnect. Connections of an earlier
  // generation are answered "stale" (their rank catches up and comes again); one of a
  // later generation makes the collective it would serve fail (this rank catches up).
  // Frames of one generation never reach another.
  void Rejoin();
  // Connects to every rank it has no connection to, at once, each given up after
  // `timeout_us`: a rank that was replaced (elsewhere, perhaps) so tells the others
  // where it listens now, before they need to send to it. Failures are only logged.
  void Announce(int64_t timeout_us);
  uint32_t generation() const;

  // Bytes this rank sent, by destination site.
  std::map<std::string, int64_t> bytes_sent() const;
  // Connections refused: not a rank of this gang, or a second connection from one.
  int64_t refused() const;
  // Connections this rank made that send through shared memory.
  int64_t shared_memory_connections() const;

 private:
  struct Peer {
    std::unique_ptr<ByteStream> out;    // we send on it
    std::unique_ptr<ByteStream> in;     // it sends on it: TCP, TLS or shared memory;
    std::unique_ptr<TcpStream> in_tcp;  // the socket under `in` when that is TLS
    bool claimed = false;               // a connection proved it is this rank
    uint32_t in_generation = 0;         // the generation `in` proved
    bool stale_out = false;             // `out` goes to where the rank no longer listens
  };
  struct Handshake {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  struct SendJob {
    int to = 0;
    const std::byte* data = nullptr;
    size_t size = 0;
  };

  Communicator(std::unique_ptr<TcpListener> listener, std::unique_ptr<TcpListener> local_listener,
               CommunicatorOptions options, std::unique_ptr<objects::LinkClocks> clocks);
  // Accepts on `listener` (the TCP one, or the local one for shared memory).
  void AcceptLoop(TcpListener* listener, bool local);
  void Admit(std::unique_ptr<TcpStream> tcp, bool local);
  void SendLoop();
  // A connection to rank `to`: shared memory when `shared_memory`, it is on this host
  // and it answers on its local socket; else TCP (and TLS).
  Status Connect(int to, int64_t timeout_us, bool shared_memory = true);
  // The handshake on `stream` (local: the listener proves itself first, else
  // kUnauthenticated); the generation this rank proved.
  StatusOr<uint32_t> Greet(int to, ByteStream& stream, bool local);
  // Shuts every connection when `failed` is an error (which it returns): a failed
  // collective ends its generation for every rank at once.
  Status Abandon(Status failed);
  RankAddress Rank(int rank) const;     // under address_mu_: handshakes update it
  std::vector<RankAddress> Ranks() const;
  Status SendNow(const SendJob& job);
  // Queues `size` bytes at `data` for rank `to`, in frames of at most chunk_bytes;
  // the memory must stay as it is until WaitSent.
  void Send(int to, const void* data, size_t size);
  // Waits until everything queued is sent; the first send error since the last wait.
  Status WaitSent();
  // Reads `size` bytes sent by rank `from` (frames of at most chunk_bytes), handing
  // each frame to `take(offset, bytes)` as it arrives.
  template <typename Take>
  Status Receive(int from, size_t size, Take&& take);
  Status ReceiveInto(int from, void* data, size_t size);
  StatusOr<ByteStream*> Inbound(int from);
  const objects::LinkShape* Link(int from, int to) const;

  template <typename T>
  Status AllReduceT(std::span<T> data, ReduceOp op, Algorithm algorithm);
  template <typename T>
  Status RingReduceScatter(const std::vector<int>& group, std::span<T> data, ReduceOp op);
  Status RingAllGather(const std::vector<int>& group, std::span<std::byte> data, size_t element);
  Status ChainBroadcast(const std::vector<int>& group, std::span<std::byte> data, int root_index);
  template <typename T>
  Status RingAllReduce(const std::vector<int>& group, std::span<T> data, ReduceOp op);
  std::string Name(int rank) const;

  CommunicatorOptions options_;
  std::unique_ptr<TcpListener> listener_;
  std::unique_ptr<TcpListener> local_listener_;  // null: no shared memory
  std::unique_ptr<objects::LinkClocks> clocks_;
  std::vector<std::byte> scratch_;  // one frame, for reductions

  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool stopping_ = false;                  // guarded by mu_
  std::vector<Peer> peers_;                // guarded by mu_ (the streams are used outside it)
  std::deque<SendJob> queue_;              // guarded by mu_
  bool sending_ = false;                   // guarded by mu_: a job is being sent
  Status send_error_;                      // guarded by mu_
  std::map<std::string, int64_t> sent_;    // guarded by mu_
  int64_t refused_ = 0;                    // guarded by mu_
  int64_t shared_memory_connections_ = 0;  // guarded by mu_
  uint32_t generation_ = 0;                // guarded by mu_
  uint32_t highest_seen_ = 0;              // guarded by mu_: the newest generation a peer is in
  // Streams replaced while a thread may still use them (shut down), freed by Rejoin.
  std::vector<std::unique_ptr<ByteStream>> retired_;  // guarded by mu_
  std::vector<std::unique_ptr<TcpStream>> retired_tcp_;  // guarded by mu_
  mutable std::mutex address_mu_;          // guards options_.ranks (after mu_, when both)
  std::list<Handshake> handshakes_;        // guarded by mu_
  std::thread accept_thread_;
  std::thread local_accept_thread_;
  std::thread send_thread_;
};

}  // namespace meridian::collective
