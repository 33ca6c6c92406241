// Objects between this process and a cluster's agents: the coordinator's directory
// says where an object is (or where to put one); the bytes move over the transfer
// protocol (objects/transfer.h), checked against the object's id, with the ticket or
// TLS the coordinator hands out. What `meridian objects put|get` and the Python
// package use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "client/client.h"
#include "common/status.h"
#include "common/temp_dir.h"
#include "model/run_state.h"
#include "objects/store.h"
#include "objects/transfer.h"

namespace meridian::client {

// The task whose output an object is, when it is read as one (the coordinator lets
// whoever may see the job read it).
struct JobOutput {
  uint64_t job = 0;
  std::string task;
};

// Puts `data` on a node at `site` (any, if empty), uploaded from site `from` (none, if
// empty; the emulated link from there shapes it), named `name` (none, if empty). The
// bytes are read in place, not copied. Returns where it is, once the coordinator has
// it in its directory.
StatusOr<model::ObjectLocation> PutObject(Client& c, std::string_view data, const std::string& site,
                                          const std::string& name, const std::string& from);

// An object fetched into a store of this process's own, in a temporary directory, for
// as long as this lives. Members go in reverse order: pin, store, directory.
struct FetchedObject {
  std::unique_ptr<TempDir> dir;
  std::unique_ptr<objects::ObjectStore> store;
  std::optional<objects::Pinned> pinned;
  model::ObjectLocation location;
  model::ObjectReplica from;
  objects::FetchStats stats;

  std::string_view data() const { return pinned->data(); }
};

// Fetches `ref` (an id or a name) from the replica at `site` if there is one, else the
// first, shaped by the link between them when the cluster emulates the WAN.
StatusOr<std::unique_ptr<FetchedObject>> FetchObject(Client& c, const std::string& ref, const std::string& site,
                                                     const JobOutput& output = {});
// The bytes of an object, copied out of FetchObject's store. `from` says where they
// came from ("node@site").
StatusOr<std::string> FetchObjectBytes(Client& c, const std::string& ref, const std::string& site,
                                       std::string* from = nullptr, const JobOutput& output = {});

}  // namespace meridian::client
