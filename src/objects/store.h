// An agent's object store: immutable objects under their content ids, held in memory
// up to a capacity and spilled to files beyond it, least recently used first. An
// object larger than the whole capacity never enters memory: it arrives into a file
// (Allocate) and is read back by mapping its spill file, so the process holds none of
// it (the kernel's page cache holds what it can, and gives it up under pressure). A spill
// directory whose files cannot have their blocks claimed ahead keeps them in memory.
//
// Lifetime: each Put adds a reference; Release drops one. An object with no
// references and no pins is deleted, from memory and disk. A pin (Pin, Pinned) keeps
// an object in memory while a task or a transfer reads it; pinned objects are never
// spilled, so memory may exceed the capacity while they are.
//
// Thread-safety: every method may be called from any thread; Pinned handles may
// outlive neither the store nor be shared between threads without care (they are
// read-only views).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "objects/bytes.h"
#include "objects/object_id.h"

namespace meridian::objects {

struct StoreOptions {
  int64_t memory_bytes = int64_t{1} << 30;
  std::string spill_dir;  // created if missing; required
};

struct StoreStats {
  int64_t objects = 0;
  int64_t memory_bytes = 0;   // held in memory now
  int64_t spilled_bytes = 0;  // held only on disk now (or in a file mapped, for one over the capacity)
  int64_t spills = 0;         // objects written out, ever
  int64_t restores = 0;       // objects read back, ever
};

class ObjectStore;

// A read-only view of a pinned object; unpins when destroyed.
class Pinned {
 public:
  Pinned(Pinned&& other) noexcept;
  Pinned& operator=(Pinned&&) = delete;
  Pinned(const Pinned&) = delete;
  ~Pinned();
  const ObjectId& id() const { return id_; }
  std::string_view data() const { return data_->view(); }
  const std::vector<uint64_t>& chunk_checksums() const { return *checksums_; }

 private:
  friend class ObjectStore;
  Pinned(ObjectStore* store, ObjectId id, std::shared_ptr<const Bytes> data,
         std::shared_ptr<const std::vector<uint64_t>> checksums)
      : store_(store), id_(id), data_(std::move(data)), checksums_(std::move(checksums)) {}
  ObjectStore* store_;  // null once moved from
  ObjectId id_;
  std::shared_ptr<const Bytes> data_;
  std::shared_ptr<const std::vector<uint64_t>> checksums_;
};

class ObjectStore {
 public:
  static StatusOr<std::unique_ptr<ObjectStore>> Open(StoreOptions options);
  ~ObjectStore();

  // A buffer for an object of `size` bytes that is arriving (a fetch, a put), to fill
  // and hand to PutVerified: in memory when it fits the capacity, else in a file of
  // the spill directory (mapped) where that directory allows. kResourceExhausted, storing nothing, when neither the
  // memory nor the disk has room.
  StatusOr<std::shared_ptr<Bytes>> Allocate(size_t size) const;
  // Stores `data` (once, however often it is put) and adds a reference.
  StatusOr<ObjectId> Put(std::string_view data);
  // The same for bytes that arrived under `id`: refused, with nothing stored, unless
  // they hash to it. `checksums`, when given, are those of the chunks as received
  // (each already checked against its bytes): the id is then derived from them.
  Status PutVerified(const ObjectId& id, std::shared_ptr<const Bytes> data, std::vector<uint64_t> checksums = {});
  // Drops one reference; the last one deletes the object once it is unpinned.
  void Release(const ObjectId& id);
  // Adds a reference to an object the store holds.
  Status AddRef(const ObjectId& id);

  bool Contains(const ObjectId& id) const;
  StatusOr<int64_t> Size(const ObjectId& id) const;
  // Loads a spilled object back into memory if need be, and pins it.
  StatusOr<Pinned> Pin(const ObjectId& id);
  std::vector<std::pair<ObjectId, int64_t>> List() const;
  StoreStats stats() const;
  // Called (under no lock of the store's) when an object arrives or is deleted; set
  // once, before the store is shared.
  using Listener = std::function<void(const ObjectId& id, int64_t size, bool added)>;
  void SetListener(Listener listener) { listener_ = std::move(listener); }

 private:
  struct Entry {
    int64_t size = 0;
    int64_t refs = 0;
    int64_t pins = 0;
    std::shared_ptr<const Bytes> data;  // null when only on disk
    std::shared_ptr<const std::vector<uint64_t>> checksums;
    bool on_disk = false;
    std::list<ObjectId>::iterator lru;  // valid while in memory and unpinned
    bool in_lru = false;
  };

  explicit ObjectStore(StoreOptions options) : options_(std::move(options)) {}
  Status Insert(const ObjectId& id, std::shared_ptr<const Bytes> data, std::vector<uint64_t> checksums);
  friend class Pinned;
  void Unpin(const ObjectId& id);
  std::string PathOf(const ObjectId& id) const;
  // Spills unpinned objects, least recently used first, until memory fits.
  void SpillLocked();
  // Deletes the object; returns its size for the listener.
  int64_t DeleteLocked(std::map<ObjectId, Entry>::iterator it);
  void Notify(const ObjectId& id, int64_t size, bool added) const {
    if (listener_) listener_(id, size, added);
  }
  void TouchLocked(const ObjectId& id, Entry& e);
  // Whether the entry's bytes count against the memory capacity: in the heap, not in a
  // mapped file.
  static bool InMemory(const Entry& e) { return e.data && !e.data->in_file(); }
  // Reads a spilled object's file back (mapped, when it is over the capacity) and
  // checks every chunk against its checksum; outside the lock.
  StatusOr<std::shared_ptr<const Bytes>> ReadBack(const ObjectId& id, int64_t size,
                                                  const std::vector<uint64_t>& sums) const;

  const StoreOptions options_;
  // Whether the spill directory's files can have their blocks claimed ahead: a mapped
  // file that cannot would fault, not fail, on a full disk, so without it objects over
  // the capacity are held in memory. Set by Open.
  bool files_claimed_ahead_ = false;
  Listener listener_;
  mutable std::mutex mu_;
  std::map<ObjectId, Entry> objects_;  // guarded by mu_
  std::list<ObjectId> lru_;            // front: least recently used; guarded by mu_
  StoreStats stats_;                   // guarded by mu_
};

}  // namespace meridian::objects
