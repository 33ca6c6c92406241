// What arrives over gRPC, decoded by protobuf and turned into model values by
// src/rpc/convert: registrations, heartbeats, assignments and job views from bytes a
// peer chose. The first byte picks the message.
#include <cstddef>
#include <cstdint>

#include "meridian/v1/meridian.pb.h"
#include "model/fleet.h"
#include "rpc/convert.h"

namespace v1 = meridian::v1;
namespace rpc = meridian::rpc;

template <typename Proto>
bool Parse(const uint8_t* data, size_t size, Proto* out) {
  return out->ParseFromArray(data, static_cast<int>(size));
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0];
  ++data;
  --size;
  switch (which % 6) {
    case 0: {
      v1::RegisterRequest p;
      if (!Parse(data, size, &p)) break;
      meridian::model::AgentRegistration r = rpc::FromProto(p);
      meridian::model::CheckNodeSpec(r.node).IgnoreError();
      v1::RegisterRequest back;
      rpc::ToProto(r, &back);
      break;
    }
    case 1: {
      v1::HeartbeatRequest p;
      if (!Parse(data, size, &p)) break;
      v1::HeartbeatRequest back;
      rpc::ToProto(rpc::FromProto(p), &back);
      break;
    }
    case 2: {
      v1::AssignmentBatch p;
      if (!Parse(data, size, &p)) break;
      v1::AssignmentBatch back;
      rpc::ToProto(rpc::FromProto(p), &back);
      break;
    }
    case 3: {
      v1::JobInfo p;
      if (!Parse(data, size, &p)) break;
      v1::JobInfo back;
      rpc::ToProto(rpc::FromProto(p), &back);
      break;
    }
    case 4: {
      v1::NodeInfo p;
      if (!Parse(data, size, &p)) break;
      v1::NodeInfo back;
      rpc::ToProto(rpc::FromProto(p), &back);
      break;
    }
    default: {
      v1::RegisterResponse p;
      if (!Parse(data, size, &p)) break;
      v1::RegisterResponse back;
      rpc::ToProto(rpc::FromProto(p), &back);
    }
  }
  return 0;
}
