// Decoding CUPTI activity records into the columnar tables of tables.h.
//
// The decoder is generated from the tables' X-macro lines: each column's `source` is read
// from the record at its header offset. It reads only within the `available` bytes it is
// given (a record shorter than the fields it needs is rejected) and reads every field as raw
// bytes (no misaligned loads, no out-of-range enum values), so it is safe on any bytes.
//
// Strings are the one thing a record refers to outside itself (kernel, marker and domain
// names are pointers in CUPTI's records). The decoder never turns those fields into pointers
// itself: it hands their raw value to a `Strings` policy. The capture's policy (session.cpp)
// follows them, because they come from CUPTI; the checked policy used by the tests' extension
// and the fuzzer (native/testing/) treats them as indices into a caller-given list.
#pragma once

#include <cupti.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "tables.h"

namespace hookmagic {

// Record layouts: the fields read sit at the same offsets in every CUPTI from 12.4 to 13.5
// (checked against the 12.4, 12.9, 13.0 and 13.5 headers; CUPTI 12.4 emits Memcpy5, Memory3
// and Synchronization, whose fields read here lie where Memcpy6's, Memory4's and
// Synchronization2's do), while the structs themselves grow at the end. CUPTI emits its
// newest layout, so only the common prefix is ever read, through one struct name each.
using KernelRecord = CUpti_ActivityKernel9;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using MemsetRecord = CUpti_ActivityMemset4;
using MemoryRecord = CUpti_ActivityMemory4;
using SyncRecord = CUpti_ActivitySynchronization2;
using ApiRecord = CUpti_ActivityAPI;
using MarkerRecord = CUpti_ActivityMarker2;

static_assert(offsetof(KernelRecord, start) == 16 && offsetof(KernelRecord, correlationId) == 92 &&
                  offsetof(KernelRecord, name) == 104 && offsetof(KernelRecord, graphNodeId) == 144 &&
                  offsetof(KernelRecord, graphId) == 156,
              "kernel record layout changed: re-check the versioned struct offsets");
static_assert(offsetof(MemcpyRecord, bytes) == 8 && offsetof(MemcpyRecord, graphNodeId) == 64 &&
                  offsetof(MemcpyRecord, graphId) == 72,
              "memcpy record layout changed");
static_assert(offsetof(MemsetRecord, memoryKind) == 50 && offsetof(MemsetRecord, graphNodeId) == 64 &&
                  offsetof(MemsetRecord, graphId) == 72,
              "memset record layout changed");
static_assert(offsetof(MemoryRecord, timestamp) == 32 && offsetof(MemoryRecord, isAsync) == 72,
              "memory record layout changed");
static_assert(offsetof(SyncRecord, cudaEventId) == 36, "synchronization record layout changed");

// Decoded kinds: X(activity kind, record layout, table, columns, last field read). A record
// must hold at least the bytes up to the end of its last field read.
#define HM_DECODED_KINDS(X)                                                                  \
    X(CUPTI_ACTIVITY_KIND_KERNEL, KernelRecord, kernels, HM_KERNEL_COLUMNS, graphId)          \
    X(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, KernelRecord, kernels, HM_KERNEL_COLUMNS, graphId) \
    X(CUPTI_ACTIVITY_KIND_MEMCPY, MemcpyRecord, memcpy, HM_MEMCPY_COLUMNS, graphId)           \
    X(CUPTI_ACTIVITY_KIND_MEMSET, MemsetRecord, memset, HM_MEMSET_COLUMNS, graphId)           \
    X(CUPTI_ACTIVITY_KIND_MEMORY2, MemoryRecord, memory, HM_MEMORY_COLUMNS, isAsync)          \
    X(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, SyncRecord, sync, HM_SYNC_COLUMNS, cudaEventId)    \
    X(CUPTI_ACTIVITY_KIND_RUNTIME, ApiRecord, api, HM_API_COLUMNS, returnValue)               \
    X(CUPTI_ACTIVITY_KIND_DRIVER, ApiRecord, api, HM_API_COLUMNS, returnValue)                \
    X(CUPTI_ACTIVITY_KIND_MARKER, MarkerRecord, markers, HM_MARKER_COLUMNS, domain)

template <size_t N> struct RawInt;
template <> struct RawInt<1> { using type = uint8_t; };
template <> struct RawInt<2> { using type = uint16_t; };
template <> struct RawInt<4> { using type = uint32_t; };
template <> struct RawInt<8> { using type = uint64_t; };

// The bytes of a field of type T at `p`, as an unsigned integer of T's size.
template <class T>
inline typename RawInt<sizeof(T)>::type load_raw(const uint8_t* p) {
    typename RawInt<sizeof(T)>::type v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Bytes a record of layout R needs for the decoder to read up to and including `field`.
#define HM_END_OF(R, field) (offsetof(R, field) + sizeof(std::declval<R>().field))

enum class DecodeStatus : uint8_t {
    kDecoded,    // one row added
    kSkipped,    // a kind the capture does not keep
    kTooShort,   // fewer bytes than its kind's fields need: nothing added
    kBadString,  // a name reference the Strings policy refused: nothing added
};

// Decodes one record of `available` bytes at `record` (any alignment) into `tables`.
// `Strings` provides int32_t kernel_name(uint64_t raw, bool& ok) and
// int32_t text(uint64_t raw, bool& ok) (-1 for "no string").
template <class Strings>
DecodeStatus decode_record(const uint8_t* record, size_t available, ActivityTables& tables,
                           Strings& strings) {
    if (available < sizeof(uint32_t)) return DecodeStatus::kTooShort;
    const uint32_t kind = load_raw<uint32_t>(record);
#define HM_FIELD(f) ::hookmagic::load_raw<decltype(std::declval<Record>().f)>(record + offsetof(Record, f))
#define HM_KERNEL_NAME(f) strings.kernel_name(HM_FIELD(f), strings_ok)
#define HM_TEXT(f) strings.text(HM_FIELD(f), strings_ok)
#define HM_READ_COLUMN(type, name, source) const type v_##name = static_cast<type>(source);
#define HM_PUSH_COLUMN(type, name, source) t.name.push_back(v_##name);
#define HM_DECODE_CASE(KIND, R, table, COLUMNS, last)                            \
    case KIND: {                                                                  \
        using Record = R;                                                         \
        if (available < HM_END_OF(R, last)) return DecodeStatus::kTooShort;       \
        bool strings_ok = true;                                                   \
        COLUMNS(HM_READ_COLUMN)                                                   \
        if (!strings_ok) return DecodeStatus::kBadString;                         \
        auto& t = tables.table;                                                   \
        COLUMNS(HM_PUSH_COLUMN)                                                   \
        return DecodeStatus::kDecoded;                                            \
    }
    switch (kind) {
        HM_DECODED_KINDS(HM_DECODE_CASE)
        default:
            return DecodeStatus::kSkipped;
    }
#undef HM_DECODE_CASE
#undef HM_PUSH_COLUMN
#undef HM_READ_COLUMN
#undef HM_TEXT
#undef HM_KERNEL_NAME
#undef HM_FIELD
}

}  // namespace hookmagic
