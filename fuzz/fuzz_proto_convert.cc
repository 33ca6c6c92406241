// What arrives over gRPC, decoded by protobuf and turned into model values by
// src/rpc/convert: registrations, heartbeats, assignments and job views from bytes a
// peer chose. The first byte picks the message. Every input is also a failure reason,
// which must reach its receiver whatever its bytes.
#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "common/strings.h"
#include "meridian/v1/meridian.pb.h"
#include "model/fleet.h"
#include "rpc/convert.h"

namespace v1 = meridian::v1;
namespace rpc = meridian::rpc;

template <typename Proto>
bool Parse(const uint8_t* data, size_t size, Proto* out) {
  return out->ParseFromArray(data, static_cast<int>(size));
}

// A reason made of any bytes (a kernel quoting its input) goes into a message its
// receiver can parse: a proto3 string that is not UTF-8 makes it refuse the message.
void CheckAnyReasonTravels(const uint8_t* data, size_t size) {
  meridian::model::TaskUpdate u;
  u.reason.assign(reinterpret_cast<const char*>(data), size);
  v1::TaskUpdate p;
  rpc::ToProto(u, &p);
  v1::TaskUpdate back;
  MERIDIAN_CHECK_MSG(back.ParseFromString(p.SerializeAsString()), "a reason made a TaskUpdate its receiver refuses");
  if (meridian::IsUtf8(u.reason)) MERIDIAN_CHECK_MSG(back.reason() == u.reason, "a UTF-8 reason changed on its way");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CheckAnyReasonTravels(data, size);
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
