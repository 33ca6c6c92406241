// chain-verify's inputs as a hostile dataset holds them: bytes that claim to be blocks
// (read by Verify) and text that claims to be a report of an earlier task (read by
// ParseReport). Whatever is accepted must be consistent with the bytes it came from,
// and a report must read back as itself.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "kernels/chain.h"

namespace chain = meridian::kernels::chain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static std::atomic<bool> no_stop{false};
  if (chain::IsReport(bytes)) {
    auto r = chain::ParseReport(bytes);
    if (!r.ok()) return 0;
    MERIDIAN_CHECK_MSG(r->first <= r->last, "a report with last below first accepted");
    const std::string text = chain::FormatReport(*r);
    auto again = chain::ParseReport(text);
    MERIDIAN_CHECK_MSG(again.ok() && chain::FormatReport(*again) == text, "a report does not read back as itself");
    auto merged = chain::Merge({*r, *again});
    MERIDIAN_CHECK_MSG(merged.ok() && merged->blocks == 2 * r->blocks, "a report does not merge with itself");
    return 0;
  }
  auto r = chain::Verify(bytes, meridian::kernels::CpuOps(), no_stop);
  if (!r.ok()) return 0;
  MERIDIAN_CHECK_MSG(r->blocks >= 1, "no blocks accepted");
  MERIDIAN_CHECK_MSG(r->blocks * chain::kHeaderBytes + r->transactions * chain::kTxBytes == size,
                     "the blocks accepted do not account for every byte");
  MERIDIAN_CHECK_MSG(r->Count(chain::Finding::Kind::kSignature) <= r->transactions, "more bad signatures than transactions");
  MERIDIAN_CHECK_MSG(r->Count(chain::Finding::Kind::kMerkle) <= r->blocks, "more bad roots than blocks");
  auto back = chain::ParseReport(chain::FormatReport(*r));
  MERIDIAN_CHECK_MSG(back.ok() && chain::FormatReport(*back) == chain::FormatReport(*r),
                     "a verification's report does not read back as itself");
  return 0;
}
