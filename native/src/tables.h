// Columnar tables that CUPTI records are decoded into.
//
// One struct of vectors per record kind, declared with X-macros so that the decoder, the
// size accounting and the hand-over to NumPy cannot disagree about the columns.
#pragma once

#include <cstdint>
#include <vector>

namespace hookmagic {

#define HM_KERNEL_COLUMNS(X)                                                              \
    X(int64_t, start_ns) X(int64_t, end_ns) X(int32_t, device) X(uint32_t, context)       \
    X(uint32_t, stream) X(uint32_t, correlation) X(int32_t, name)                        \
    X(int32_t, grid_x) X(int32_t, grid_y) X(int32_t, grid_z)                             \
    X(int32_t, block_x) X(int32_t, block_y) X(int32_t, block_z)                          \
    X(int32_t, registers) X(int32_t, static_smem) X(int32_t, dynamic_smem)               \
    X(int32_t, local_mem) X(uint32_t, graph_id) X(uint64_t, graph_node)

#define HM_MEMCPY_COLUMNS(X)                                                              \
    X(int64_t, start_ns) X(int64_t, end_ns) X(int32_t, device) X(uint32_t, context)       \
    X(uint32_t, stream) X(uint32_t, correlation) X(int64_t, bytes) X(uint8_t, kind)      \
    X(uint8_t, src_kind) X(uint8_t, dst_kind) X(uint32_t, graph_id)

#define HM_MEMSET_COLUMNS(X)                                                              \
    X(int64_t, start_ns) X(int64_t, end_ns) X(int32_t, device) X(uint32_t, context)       \
    X(uint32_t, stream) X(uint32_t, correlation) X(int64_t, bytes) X(int64_t, value)     \
    X(uint16_t, memory_kind) X(uint32_t, graph_id)

#define HM_MEMORY_COLUMNS(X)                                                              \
    X(int64_t, time_ns) X(uint8_t, op) X(uint64_t, address) X(int64_t, bytes)             \
    X(uint8_t, memory_kind) X(int32_t, device) X(uint32_t, context) X(uint32_t, stream)   \
    X(uint32_t, correlation) X(uint8_t, is_async)

#define HM_SYNC_COLUMNS(X)                                                                \
    X(int64_t, start_ns) X(int64_t, end_ns) X(uint8_t, type) X(uint32_t, context)         \
    X(uint32_t, stream) X(uint32_t, event) X(uint32_t, correlation)

#define HM_API_COLUMNS(X)                                                                 \
    X(int64_t, start_ns) X(int64_t, end_ns) X(uint8_t, domain) X(uint32_t, cbid)          \
    X(uint32_t, process) X(uint32_t, thread) X(uint32_t, correlation) X(uint32_t, return_code)

#define HM_MARKER_COLUMNS(X)                                                              \
    X(int64_t, time_ns) X(uint32_t, flags) X(uint32_t, id) X(uint32_t, thread)            \
    X(int32_t, name) X(int32_t, domain)

// Written by our own API callbacks rather than by CUPTI's activity buffers.
#define HM_LAUNCH_COLUMNS(X)                                                              \
    X(uint32_t, correlation) X(int64_t, thread) X(int32_t, stack_id) X(int64_t, range_id)

#define HM_VMM_COLUMNS(X)                                                                 \
    X(int64_t, time_ns) X(uint8_t, op) X(uint64_t, address) X(int64_t, bytes)             \
    X(uint32_t, context) X(uint32_t, correlation) X(int64_t, thread) X(int32_t, stack_id)

#define HM_DECLARE_COLUMN(type, name) std::vector<type> name;
#define HM_COLUMN_BYTES(type, name) +sizeof(type)
#define HM_CLEAR_COLUMN(type, name) name.clear(); name.shrink_to_fit();

#define HM_TABLE(Name, COLUMNS)                                                         \
    struct Name {                                                                       \
        COLUMNS(HM_DECLARE_COLUMN)                                                      \
        static constexpr size_t row_bytes = 0 COLUMNS(HM_COLUMN_BYTES);                 \
        void clear() { COLUMNS(HM_CLEAR_COLUMN) }                                       \
    };

HM_TABLE(KernelTable, HM_KERNEL_COLUMNS)
HM_TABLE(MemcpyTable, HM_MEMCPY_COLUMNS)
HM_TABLE(MemsetTable, HM_MEMSET_COLUMNS)
HM_TABLE(MemoryTable, HM_MEMORY_COLUMNS)
HM_TABLE(SyncTable, HM_SYNC_COLUMNS)
HM_TABLE(ApiTable, HM_API_COLUMNS)
HM_TABLE(MarkerTable, HM_MARKER_COLUMNS)
HM_TABLE(LaunchTable, HM_LAUNCH_COLUMNS)
HM_TABLE(VmmTable, HM_VMM_COLUMNS)

}  // namespace hookmagic
