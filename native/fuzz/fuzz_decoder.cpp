// libFuzzer target: the CUPTI record decoder (src/decoder.h, through testing/checked_decode)
// on arbitrary bytes, built with AddressSanitizer and UndefinedBehaviorSanitizer (run.sh).
//
// Input: byte 0 = number of offsets n (mod 32); then n little-endian uint64 offsets; the rest
// is the record buffer. Offsets with the top bit set are used as they are (near 2**64: the
// bounds check must refuse them); others are taken modulo the buffer size + 8, so some land
// past the end. Each in-range record gets its kind from a byte of the input, chosen among the
// decoded kinds and a few that are not, so every decoder branch sees random bytes. The buffer
// is copied into a heap block of exactly its size: any read past it is an ASan report.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cupti.h>

#include "checked_decode.h"

namespace {
const uint32_t kKinds[] = {
    CUPTI_ACTIVITY_KIND_KERNEL,  CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,  CUPTI_ACTIVITY_KIND_MEMORY2, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,  CUPTI_ACTIVITY_KIND_MARKER,
    0u, 999u, 0xFFFFFFFFu};
const std::vector<std::string> kNames = {"k", "_Z1fv", "_ZN3foo3barIiEEvT_", ""};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const size_t n = data[0] % 32;
    if (size < 1 + 8 * n) return 0;
    const uint8_t* rest = data + 1 + 8 * n;
    const size_t buffer_size = size - 1 - 8 * n;
    std::unique_ptr<uint8_t[]> buffer(new uint8_t[buffer_size ? buffer_size : 1]);
    if (buffer_size) std::memcpy(buffer.get(), rest, buffer_size);

    std::vector<uint64_t> offsets;
    for (size_t i = 0; i < n; ++i) {
        uint64_t v;
        std::memcpy(&v, data + 1 + 8 * i, 8);
        if (!(v >> 63)) v %= (buffer_size + 8);
        offsets.push_back(v);
        if (v <= buffer_size && buffer_size - v >= 4) {
            const uint32_t kind = kKinds[static_cast<uint8_t>(v ^ (v >> 8)) %
                                         (sizeof(kKinds) / sizeof(*kKinds))];
            std::memcpy(buffer.get() + v, &kind, 4);
        }
    }
    hookmagic::ActivityTables tables;
    hookmagic::StringTable strings;
    hookmagic::CheckedDecodeCounts counts;
    std::string error;
    const bool ok = hookmagic::decode_checked(buffer.get(), buffer_size, offsets, kNames, tables,
                                              strings, counts, error);
    if (ok && counts.decoded + counts.skipped + counts.too_short + counts.bad_string != n)
        __builtin_trap();  // every record must be accounted for exactly once
    if (!ok && error.empty()) __builtin_trap();
    return 0;
}
