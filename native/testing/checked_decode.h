// The decoder on caller-given bytes (tests and the fuzzer; never part of the capture).
//
// Records are hand-built in CUPTI's layout and pushed through the real decoder
// (src/decoder.h). Everything about the input is checked: each offset must leave at least a
// record header inside the buffer (no overflow in the check), each record only gets the bytes
// that remain after it, and string fields are 1-based indices into `names` (0: no string), never pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "string_table.h"
#include "tables.h"

namespace hookmagic {

struct CheckedDecodeCounts {
    uint64_t decoded = 0;
    uint64_t skipped = 0;      // kinds the capture does not keep
    uint64_t too_short = 0;    // fewer bytes than the kind's fields need
    uint64_t bad_string = 0;   // a string index outside `names`
};

// Empty string, or why `offset` cannot hold a record in a buffer of `size` bytes.
std::string check_offset(uint64_t offset, size_t size);

// Decodes the records at `offsets` (each checked with check_offset first; returns false with
// `error` set, having decoded nothing, if one fails). String fields hold indices into `names`.
bool decode_checked(const uint8_t* data, size_t size, const std::vector<uint64_t>& offsets,
                    const std::vector<std::string>& names, ActivityTables& tables,
                    StringTable& strings, CheckedDecodeCounts& counts, std::string& error);

}  // namespace hookmagic
