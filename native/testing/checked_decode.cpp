#include "checked_decode.h"

#include "decoder.h"

namespace hookmagic {
namespace {

// String fields as indices into a list the caller gave: no pointer is ever made from them.
struct IndexedStrings {
    const std::vector<std::string>& names;
    StringTable& table;
    std::vector<int32_t> ids[2];  // per index, once interned (plain, demangled); -1: not yet
    int32_t lookup(uint64_t index, bool demangle, bool& ok) {
        if (index >= names.size()) {
            ok = false;
            return -1;
        }
        auto& cache = ids[demangle ? 1 : 0];
        if (cache.empty()) cache.assign(names.size(), -1);
        int32_t& id = cache[static_cast<size_t>(index)];
        if (id < 0) id = table.intern(names[static_cast<size_t>(index)], demangle);
        return id;
    }
    // 0 means "no string", as a null pointer does in CUPTI's records; n means names[n - 1].
    int32_t kernel_name(uint64_t raw, bool& ok) {
        return raw == 0 ? table.intern("", false) : lookup(raw - 1, true, ok);
    }
    int32_t text(uint64_t raw, bool& ok) { return raw == 0 ? -1 : lookup(raw - 1, false, ok); }
};

}  // namespace

std::string check_offset(uint64_t offset, size_t size) {
    // Written so that no addition can wrap: an offset near 2**64 fails here.
    if (offset > size || size - offset < sizeof(uint32_t))
        return "record offset " + std::to_string(offset) + " leaves no record header inside the " +
               std::to_string(size) + "-byte buffer";
    return "";
}

bool decode_checked(const uint8_t* data, size_t size, const std::vector<uint64_t>& offsets,
                    const std::vector<std::string>& names, ActivityTables& tables,
                    StringTable& strings, CheckedDecodeCounts& counts, std::string& error) {
    for (uint64_t off : offsets) {
        error = check_offset(off, size);
        if (!error.empty()) return false;
    }
    IndexedStrings policy{names, strings, {}};
    for (uint64_t off : offsets) {
        const size_t at = static_cast<size_t>(off);
        switch (decode_record(data + at, size - at, tables, policy)) {
            case DecodeStatus::kDecoded: ++counts.decoded; break;
            case DecodeStatus::kSkipped: ++counts.skipped; break;
            case DecodeStatus::kTooShort: ++counts.too_short; break;
            case DecodeStatus::kBadString: ++counts.bad_string; break;
        }
    }
    return true;
}

}  // namespace hookmagic
