// Gavel's throughput table (JSON with keys like "('ResNet-50 (batch size 64)', 2)").
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "spec/gavel.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  meridian::spec::ParseGavelThroughputs(text, "gavel.json").status().IgnoreError();
  return 0;
}
