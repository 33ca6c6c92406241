#include "objects/store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "common/logging.h"
#include "common/units.h"

namespace meridian::objects {
namespace fs = std::filesystem;

Pinned::Pinned(Pinned&& other) noexcept
    : store_(other.store_), id_(other.id_), data_(std::move(other.data_)), checksums_(std::move(other.checksums_)) {
  other.store_ = nullptr;
}

Pinned::~Pinned() {
  if (store_ != nullptr) store_->Unpin(id_);
}

StatusOr<std::unique_ptr<ObjectStore>> ObjectStore::Open(StoreOptions options) {
  if (options.spill_dir.empty()) return InvalidArgumentError("the object store needs a spill directory");
  if (options.memory_bytes < 0) return InvalidArgumentError("the object store's memory capacity is negative");
  std::error_code ec;
  fs::create_directories(options.spill_dir, ec);
  if (ec) return UnavailableError(fmt::format("cannot create {}: {}", options.spill_dir, ec.message()));
  // Spill files of an earlier run belong to objects nobody references any more.
  for (const auto& f : fs::directory_iterator(options.spill_dir, ec)) fs::remove(f.path(), ec);
  std::unique_ptr<ObjectStore> store(new ObjectStore(std::move(options)));
  store->files_claimed_ahead_ = Bytes::FilesCanBeClaimedIn(store->options_.spill_dir);
  if (!store->files_claimed_ahead_) {
    MERIDIAN_LOG_WARN("{} cannot claim a file's blocks ahead: objects over the store's memory are held in memory",
                      store->options_.spill_dir);
  }
  return store;
}

ObjectStore::~ObjectStore() {
  std::lock_guard<std::mutex> lock(mu_);
  std::error_code ec;
  for (const auto& [id, e] : objects_) {
    if (e.on_disk) fs::remove(PathOf(id), ec);
  }
}

std::string ObjectStore::PathOf(const ObjectId& id) const { return (fs::path(options_.spill_dir) / id.Hex()).string(); }

StatusOr<std::shared_ptr<Bytes>> ObjectStore::Allocate(size_t size) const {
  if (static_cast<int64_t>(size) > options_.memory_bytes && files_claimed_ahead_) {
    return Bytes::AllocateInFile(size, options_.spill_dir);
  }
  std::shared_ptr<Bytes> buffer = Bytes::TryAllocate(size);
  if (!buffer) return ResourceExhaustedError(fmt::format("no memory here for {}", FormatBytes(static_cast<int64_t>(size))));
  return buffer;
}

StatusOr<ObjectId> ObjectStore::Put(std::string_view data) {
  std::vector<uint64_t> checksums = ChunkChecksums(data);
  ObjectId id = ObjectId::FromChunks(static_cast<int64_t>(data.size()), checksums);
  if (Contains(id)) {
    MERIDIAN_RETURN_IF_ERROR(AddRef(id));
    return id;
  }
  MERIDIAN_RETURN_IF_ERROR(Insert(id, Bytes::Copy(data), std::move(checksums)));
  return id;
}

Status ObjectStore::PutVerified(const ObjectId& id, std::shared_ptr<const Bytes> data, std::vector<uint64_t> checksums) {
  const int64_t size = static_cast<int64_t>(data->size());
  if (checksums.size() != static_cast<size_t>(ChunkCount(size))) checksums = ChunkChecksums(data->view());
  ObjectId got = ObjectId::FromChunks(size, checksums);
  if (got != id) {
    return DataLossError(fmt::format("object {}: the {} received hash to {}", id.Hex(),
                                     FormatBytes(static_cast<int64_t>(data->size())), got.Hex()));
  }
  return Insert(id, std::move(data), std::move(checksums));
}

Status ObjectStore::Insert(const ObjectId& id, std::shared_ptr<const Bytes> data, std::vector<uint64_t> checksums) {
  const int64_t size = static_cast<int64_t>(data->size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, added] = objects_.try_emplace(id);
    Entry& e = it->second;
    ++e.refs;
    if (!added) return OkStatus();
    e.size = size;
    e.data = std::move(data);
    e.checksums = std::make_shared<const std::vector<uint64_t>>(std::move(checksums));
    stats_.objects++;
    (InMemory(e) ? stats_.memory_bytes : stats_.spilled_bytes) += e.size;
    TouchLocked(id, e);
    SpillLocked();
  }
  Notify(id, size, true);
  return OkStatus();
}

void ObjectStore::TouchLocked(const ObjectId& id, Entry& e) {
  if (e.in_lru) lru_.erase(e.lru);
  e.in_lru = false;
  if (InMemory(e) && e.pins == 0) {
    e.lru = lru_.insert(lru_.end(), id);
    e.in_lru = true;
  }
}

void ObjectStore::SpillLocked() {
  while (stats_.memory_bytes > options_.memory_bytes && !lru_.empty()) {
    ObjectId id = lru_.front();
    Entry& e = objects_.at(id);
    if (!e.on_disk) {
      const std::string path = PathOf(id);
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f.write(e.data->data(), static_cast<std::streamsize>(e.data->size()));
      f.close();
      if (!f) {
        // The disk is full or gone: keep it in memory, and stop trying for now.
        std::error_code ec;
        fs::remove(path, ec);
        return;
      }
      e.on_disk = true;
      stats_.spills++;
    }
    lru_.pop_front();
    e.in_lru = false;
    e.data.reset();
    stats_.memory_bytes -= e.size;
    stats_.spilled_bytes += e.size;
  }
}

int64_t ObjectStore::DeleteLocked(std::map<ObjectId, Entry>::iterator it) {
  Entry& e = it->second;
  const int64_t size = e.size;
  if (e.in_lru) lru_.erase(e.lru);
  (InMemory(e) ? stats_.memory_bytes : stats_.spilled_bytes) -= e.size;
  if (e.on_disk) {
    std::error_code ec;
    fs::remove(PathOf(it->first), ec);
  }
  stats_.objects--;
  objects_.erase(it);
  return size;
}

void ObjectStore::Release(const ObjectId& id) {
  int64_t deleted = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(id);
    if (it == objects_.end() || it->second.refs == 0) return;
    if (--it->second.refs == 0 && it->second.pins == 0) deleted = DeleteLocked(it);
  }
  if (deleted >= 0) Notify(id, deleted, false);
}

Status ObjectStore::AddRef(const ObjectId& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return NotFoundError(fmt::format("no object {} here", id.Hex()));
  ++it->second.refs;
  return OkStatus();
}

bool ObjectStore::Contains(const ObjectId& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return objects_.count(id) > 0;
}

StatusOr<int64_t> ObjectStore::Size(const ObjectId& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return NotFoundError(fmt::format("no object {} here", id.Hex()));
  return it->second.size;
}

StatusOr<std::shared_ptr<const Bytes>> ObjectStore::ReadBack(const ObjectId& id, int64_t size,
                                                             const std::vector<uint64_t>& sums) const {
  const std::string path = PathOf(id);
  std::shared_ptr<const Bytes> data;
  if (size > options_.memory_bytes) {
    StatusOr<std::shared_ptr<Bytes>> mapped = Bytes::MapFile(path, static_cast<size_t>(size));
    if (!mapped.ok()) {
      return DataLossError(fmt::format("object {}: its spill file {} cannot be read: {}", id.Hex(), path,
                                       mapped.status().message()));
    }
    data = std::move(*mapped);
  } else {
    std::shared_ptr<Bytes> buffer = Bytes::TryAllocate(static_cast<size_t>(size));
    if (!buffer) {
      return ResourceExhaustedError(
          fmt::format("object {}: no memory here to read back its {}", id.Hex(), FormatBytes(size)));
    }
    std::ifstream f(path, std::ios::binary);
    f.read(buffer->data(), size);
    if (!f) return DataLossError(fmt::format("object {}: its spill file {} cannot be read", id.Hex(), path));
    data = std::move(buffer);
  }
  // A disk can flip bits: every chunk read back is checked against the checksum it had
  // when it arrived, so a damaged file never reaches a task.
  for (int64_t c = 0; c < static_cast<int64_t>(sums.size()); ++c) {
    const int64_t at = c * kChunkBytes;
    const std::string_view chunk(data->data() + at, static_cast<size_t>(std::min(kChunkBytes, size - at)));
    if (ChunkChecksum(chunk) != sums[static_cast<size_t>(c)]) {
      return DataLossError(fmt::format(
          "object {}: its spill file {} is damaged (chunk {} fails its checksum); the copy here is dropped", id.Hex(),
          path, c));
    }
  }
  return data;
}

StatusOr<Pinned> ObjectStore::Pin(const ObjectId& id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return NotFoundError(fmt::format("no object {} here", id.Hex()));
  Entry& e = it->second;
  if (!e.data) {
    // Read back from disk outside the lock; pin first so it is not deleted meanwhile.
    ++e.pins;
    const int64_t size = e.size;
    std::shared_ptr<const std::vector<uint64_t>> sums = e.checksums;
    lock.unlock();
    StatusOr<std::shared_ptr<const Bytes>> data = ReadBack(id, size, *sums);
    lock.lock();
    it = objects_.find(id);
    Entry& again = it->second;
    if (!data.ok()) {
      int64_t deleted = -1;
      // A copy that cannot be read is gone: drop it, so that the cluster hears it is
      // lost and reads another replica or makes it again. One that found no memory
      // stays on disk for a later try.
      const bool lost = data.status().code() == StatusCode::kDataLoss && !again.data;
      if (--again.pins == 0 && (lost || again.refs == 0)) deleted = DeleteLocked(it);
      lock.unlock();
      if (deleted >= 0) Notify(id, deleted, false);
      return data.status();
    }
    if (!again.data) {
      again.data = std::move(*data);
      if (InMemory(again)) {
        stats_.memory_bytes += again.size;
        stats_.spilled_bytes -= again.size;
      }
      stats_.restores++;
    }
    TouchLocked(id, again);
    return Pinned(this, id, again.data, again.checksums);
  }
  ++e.pins;
  TouchLocked(id, e);
  return Pinned(this, id, e.data, e.checksums);
}

void ObjectStore::Unpin(const ObjectId& id) {
  int64_t deleted = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) return;
    Entry& e = it->second;
    if (--e.pins > 0) return;
    if (e.refs == 0) {
      deleted = DeleteLocked(it);
    } else {
      TouchLocked(id, e);
      SpillLocked();
    }
  }
  if (deleted >= 0) Notify(id, deleted, false);
}

std::vector<std::pair<ObjectId, int64_t>> ObjectStore::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<ObjectId, int64_t>> out;
  for (const auto& [id, e] : objects_) out.emplace_back(id, e.size);
  return out;
}

StoreStats ObjectStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace meridian::objects
