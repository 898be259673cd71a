// Columnar tables that CUPTI records are decoded into.
//
// One struct of vectors per record kind, declared with X-macros so that the decoder, the
// size accounting and the hand-over to NumPy cannot disagree about the columns.
//
// Tables filled from CUPTI's activity records list, for each column, where its value comes
// from: X(type, column, source). The decoder (decoder.h) is generated from exactly these
// lines; `source` is written with the decoder's field readers:
//   HM_FIELD(f)       the record's field f, read as raw bytes at offsetof(Record, f)
//   HM_KERNEL_NAME(f) the kernel-name string that field f refers to, interned (demangled)
//   HM_TEXT(f)        a marker/domain string that field f refers to, interned; -1 if none
// Tables filled by our own callbacks have no source: X(type, column).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hookmagic {

#define HM_KERNEL_COLUMNS(X)                                                              \
    X(int64_t, start_ns, HM_FIELD(start)) X(int64_t, end_ns, HM_FIELD(end))               \
    X(int32_t, device, HM_FIELD(deviceId)) X(uint32_t, context, HM_FIELD(contextId))      \
    X(uint32_t, stream, HM_FIELD(streamId)) X(uint32_t, correlation, HM_FIELD(correlationId)) \
    X(int32_t, name, HM_KERNEL_NAME(name))                                                 \
    X(int32_t, grid_x, HM_FIELD(gridX)) X(int32_t, grid_y, HM_FIELD(gridY))                \
    X(int32_t, grid_z, HM_FIELD(gridZ))                                                    \
    X(int32_t, block_x, HM_FIELD(blockX)) X(int32_t, block_y, HM_FIELD(blockY))            \
    X(int32_t, block_z, HM_FIELD(blockZ))                                                  \
    X(int32_t, registers, HM_FIELD(registersPerThread))                                   \
    X(int32_t, static_smem, HM_FIELD(staticSharedMemory))                                 \
    X(int32_t, dynamic_smem, HM_FIELD(dynamicSharedMemory))                               \
    X(int32_t, local_mem, HM_FIELD(localMemoryPerThread))                                 \
    X(uint32_t, graph_id, HM_FIELD(graphId)) X(uint64_t, graph_node, HM_FIELD(graphNodeId))

#define HM_MEMCPY_COLUMNS(X)                                                              \
    X(int64_t, start_ns, HM_FIELD(start)) X(int64_t, end_ns, HM_FIELD(end))               \
    X(int32_t, device, HM_FIELD(deviceId)) X(uint32_t, context, HM_FIELD(contextId))      \
    X(uint32_t, stream, HM_FIELD(streamId)) X(uint32_t, correlation, HM_FIELD(correlationId)) \
    X(int64_t, bytes, HM_FIELD(bytes)) X(uint8_t, kind, HM_FIELD(copyKind))                \
    X(uint8_t, src_kind, HM_FIELD(srcKind)) X(uint8_t, dst_kind, HM_FIELD(dstKind))        \
    X(uint32_t, graph_id, HM_FIELD(graphId)) X(uint64_t, graph_node, HM_FIELD(graphNodeId))

#define HM_MEMSET_COLUMNS(X)                                                              \
    X(int64_t, start_ns, HM_FIELD(start)) X(int64_t, end_ns, HM_FIELD(end))               \
    X(int32_t, device, HM_FIELD(deviceId)) X(uint32_t, context, HM_FIELD(contextId))      \
    X(uint32_t, stream, HM_FIELD(streamId)) X(uint32_t, correlation, HM_FIELD(correlationId)) \
    X(int64_t, bytes, HM_FIELD(bytes)) X(int64_t, value, HM_FIELD(value))                  \
    X(uint16_t, memory_kind, HM_FIELD(memoryKind)) X(uint32_t, graph_id, HM_FIELD(graphId)) \
    X(uint64_t, graph_node, HM_FIELD(graphNodeId))

#define HM_MEMORY_COLUMNS(X)                                                              \
    X(int64_t, time_ns, HM_FIELD(timestamp)) X(uint8_t, op, HM_FIELD(memoryOperationType)) \
    X(uint64_t, address, HM_FIELD(address)) X(int64_t, bytes, HM_FIELD(bytes))             \
    X(uint8_t, memory_kind, HM_FIELD(memoryKind)) X(int32_t, device, HM_FIELD(deviceId))   \
    X(uint32_t, context, HM_FIELD(contextId)) X(uint32_t, stream, HM_FIELD(streamId))      \
    X(uint32_t, correlation, HM_FIELD(correlationId))                                      \
    X(uint8_t, is_async, HM_FIELD(isAsync) != 0)

// Also written by the synchronising API callbacks (callbacks.cpp) when the SYNCHRONIZATION
// activity kind is off: same columns, same meaning.
#define HM_SYNC_COLUMNS(X)                                                                \
    X(int64_t, start_ns, HM_FIELD(start)) X(int64_t, end_ns, HM_FIELD(end))               \
    X(uint8_t, type, HM_FIELD(type)) X(uint32_t, context, HM_FIELD(contextId))            \
    X(uint32_t, stream, HM_FIELD(streamId)) X(uint32_t, event, HM_FIELD(cudaEventId))     \
    X(uint32_t, correlation, HM_FIELD(correlationId))

#define HM_API_COLUMNS(X)                                                                 \
    X(int64_t, start_ns, HM_FIELD(start)) X(int64_t, end_ns, HM_FIELD(end))               \
    X(uint8_t, domain, HM_FIELD(kind) == CUPTI_ACTIVITY_KIND_RUNTIME ? 0 : 1)               \
    X(uint32_t, cbid, HM_FIELD(cbid)) X(uint32_t, process, HM_FIELD(processId))            \
    X(uint32_t, thread, HM_FIELD(threadId)) X(uint32_t, correlation, HM_FIELD(correlationId)) \
    X(uint32_t, return_code, HM_FIELD(returnValue))

#define HM_MARKER_COLUMNS(X)                                                              \
    X(int64_t, time_ns, HM_FIELD(timestamp)) X(uint32_t, flags, HM_FIELD(flags))          \
    X(uint32_t, id, HM_FIELD(id))                                                          \
    X(uint32_t, thread,                                                                    \
      (HM_FIELD(objectKind) == CUPTI_ACTIVITY_OBJECT_THREAD ||                             \
       HM_FIELD(objectKind) == CUPTI_ACTIVITY_OBJECT_PROCESS) ? HM_FIELD(objectId.pt.threadId) : 0) \
    X(int32_t, name, HM_TEXT(name)) X(int32_t, domain, HM_TEXT(domain))

// Written by our own API callbacks rather than by CUPTI's activity buffers.
#define HM_LAUNCH_COLUMNS(X)                                                              \
    X(uint32_t, correlation) X(int64_t, thread) X(int32_t, stack_id) X(int64_t, range_id)

#define HM_VMM_COLUMNS(X)                                                                 \
    X(int64_t, time_ns) X(uint8_t, op) X(uint64_t, address) X(int64_t, bytes)             \
    X(uint32_t, context) X(uint32_t, correlation) X(int64_t, thread) X(int32_t, stack_id)

// Written by the CUDA-graph resource callbacks. One row per graph node created (by a launch,
// copy or memset under stream capture, or by cudaGraphAdd*Node) with the creating thread's
// stack: the line that captured the node (`original` 0). One row per node cloned (graph
// instantiation, cudaGraphClone) naming the node it copies (`original`; no stack). The kernel,
// copy and memset records of a graph launch carry the instantiated (cloned) node's id.
#define HM_GRAPH_NODE_COLUMNS(X)                                                          \
    X(uint64_t, node) X(uint64_t, original) X(int64_t, time_ns) X(int64_t, thread)        \
    X(int32_t, stack_id)

#define HM_DECLARE_COLUMN(type, name, ...) std::vector<type> name;
#define HM_COLUMN_BYTES(type, name, ...) +sizeof(type)
#define HM_CLEAR_COLUMN(type, name, ...) name.clear(); name.shrink_to_fit();
#define HM_FIRST_COLUMN_SIZE(type, name, ...) if (!rows_known) { rows_known = true; n = name.size(); }

#define HM_TABLE(Name, COLUMNS)                                                         \
    struct Name {                                                                       \
        COLUMNS(HM_DECLARE_COLUMN)                                                      \
        static constexpr size_t row_bytes = 0 COLUMNS(HM_COLUMN_BYTES);                 \
        void clear() { COLUMNS(HM_CLEAR_COLUMN) }                                       \
        size_t rows() const {                                                           \
            bool rows_known = false; size_t n = 0;                                      \
            COLUMNS(HM_FIRST_COLUMN_SIZE)                                               \
            return n;                                                                   \
        }                                                                               \
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
HM_TABLE(GraphNodeTable, HM_GRAPH_NODE_COLUMNS)

// Everything the decoder writes: one table per decoded record kind.
struct ActivityTables {
    KernelTable kernels;
    MemcpyTable memcpy;
    MemsetTable memset;
    MemoryTable memory;
    SyncTable sync;
    ApiTable api;
    MarkerTable markers;

    size_t stored_bytes() const {
        return kernels.rows() * KernelTable::row_bytes + memcpy.rows() * MemcpyTable::row_bytes +
               memset.rows() * MemsetTable::row_bytes + memory.rows() * MemoryTable::row_bytes +
               sync.rows() * SyncTable::row_bytes + api.rows() * ApiTable::row_bytes +
               markers.rows() * MarkerTable::row_bytes;
    }
    void clear() {
        kernels.clear(); memcpy.clear(); memset.clear(); memory.clear(); sync.clear();
        api.clear(); markers.clear();
    }
};

}  // namespace hookmagic
