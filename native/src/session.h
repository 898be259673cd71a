// The process-wide CUPTI capture session.
//
// CUPTI is global to a process (one activity registration, one callback subscriber), so
// there is exactly one Session. Python drives it: load() once, then start()/stop() per
// capture, take() to receive the decoded columns.
#pragma once

#include <Python.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "cupti_loader.h"
#include "python_stacks.h"
#include "tables.h"

namespace hookmagic {

struct Options {
    bool kernels = true;
    bool memory = true;       // MEMORY2 records plus virtual-memory map/unmap callbacks
    bool stacks = true;       // Python stack at every launch, copy and allocation
    bool api = false;         // runtime and driver API activity records
    bool nvtx = false;        // NVTX markers (only if NVTX was routed to CUPTI)
    bool detach = true;       // cuptiFinalize after the capture (see hookmagic.capture)
    bool activities_without_callbacks = false;  // if another subscriber holds the callbacks
    bool callbacks = true;    // API callbacks at all (threads, ranges, stacks, map/unmap)
    int max_stack_depth = 64;
    size_t buffer_bytes = 8u << 20;
    size_t max_buffers = 32;            // CUPTI buffers in flight at once
    size_t max_table_bytes = 2ull << 30;  // decoded columns kept; beyond, records are dropped
    PyObject* boundary_frame = nullptr;   // borrowed; frames at/above it are not recorded
    // Diagnostics (benchmarks/overhead_probe.py): when not empty, exactly these activity
    // kinds are enabled instead of the ones the switches above choose.
    std::vector<int> activity_kinds;
    int callback_domains = 3;     // bit 0: runtime API callbacks, bit 1: driver API callbacks
    bool noop_callbacks = false;  // callbacks that return at once: CUPTI's own cost per call
};

// Raised when CUPTI refuses to start; `code` is the CUptiResult.
struct CaptureError : std::runtime_error {
    int code;
    CaptureError(int c, const std::string& m) : std::runtime_error(m), code(c) {}
};

struct Counters {
    uint64_t records = 0;
    uint64_t dropped_cupti = 0;       // reported by cuptiActivityGetNumDroppedRecords
    uint64_t dropped_limit = 0;       // over max_table_bytes
    uint64_t buffers_refused = 0;     // over max_buffers
    uint64_t buffers = 0;
    uint64_t callbacks = 0;
    uint64_t stacks_sampled = 0;
    uint64_t decode_ns = 0;
    // Where the capture's own fixed time went (steady clock).
    uint64_t subscribe_ns = 0;         // cuptiSubscribe
    uint64_t callbacks_ns = 0;         // enabling the callbacks
    uint64_t enable_ns = 0;            // enabling the activity kinds
    uint64_t flush_ns = 0;             // disabling and draining at stop
    uint64_t detach_ns = 0;            // cuptiFinalize
};

class Session {
public:
    static Session& instance();

    std::string load(const std::string& cupti_path);
    bool loaded() const { return cupti_.loaded(); }
    const CuptiApi& cupti() const { return cupti_; }
    DriverApi& driver() { return driver_; }
    uint32_t cupti_version();

    void start(const Options& options);  // throws CaptureError
    // Disables everything, drains the buffers, finalizes CUPTI if asked to. Call without the GIL.
    void stop();
    bool running() const { return running_.load(); }
    bool detached_last() const { return detached_last_; }
    bool callbacks_active() const { return subscriber_ != nullptr; }
    bool hw_trace() const { return hw_trace_; }
    int subscribe_error() const { return static_cast<int>(subscribe_error_); }

    uint64_t timestamp();
    // hookmagic.range on the calling thread; any time, capture or not.
    void push_range(int64_t id);
    void pop_range();

    // Hand-over: moves the tables out (the session keeps nothing). Needs the GIL.
    KernelTable kernels;
    MemcpyTable memcpy;
    MemsetTable memset;
    MemoryTable memory;
    SyncTable sync;
    ApiTable api;
    MarkerTable markers;
    LaunchTable launches;
    VmmTable vmm;
    std::vector<std::string> strings;
    StackInterner stacks;
    Counters counters;
    void reset_tables();
    // Decodes records laid out as CUPTI lays them out, at the given offsets: lets tests and the
    // decoding benchmark run the decoder on machines without a GPU.
    void decode_synthetic(const uint8_t* buffer, const std::vector<size_t>& offsets);

    // Called from CUPTI's threads.
    void on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
    void on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                             size_t valid);
    void on_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);

private:
    Session() = default;
    void decode(uint8_t* buffer, size_t valid);
    void decode_record(const CUpti_Activity* record);  // caller holds tables_mu_
    int32_t intern_string(const char* s, bool demangle);
    void build_roles();
    void enable_activities(std::vector<CUpti_ActivityKind>& enabled);
    void rollback(std::vector<CUpti_ActivityKind>& enabled);
    void detach();
    size_t stored_bytes() const;

    CuptiApi cupti_;
    DriverApi driver_;
    Options options_;
    std::atomic<bool> running_{false};
    std::atomic<bool> finalize_pending_{false};
    std::atomic<bool> finalized_{false};
    bool detached_last_ = false;
    bool hw_trace_ = false;
    CUpti_SubscriberHandle subscriber_ = nullptr;
    CUptiResult subscribe_error_ = CUPTI_SUCCESS;
    std::vector<CUpti_ActivityKind> enabled_;

    // Role of each callback id, per domain (index 0 runtime, 1 driver).
    enum Role : uint8_t { kNone = 0, kWork = 1, kMap = 2, kUnmap = 3 };
    std::vector<uint8_t> roles_[2];
    std::vector<CUpti_CallbackId> hooked_[2];

    std::mutex tables_mu_;     // decoded tables; never held across a CUPTI call
    std::mutex launch_mu_;     // launches and vmm rows written by callbacks
    std::mutex buffers_mu_;    // recycled buffers
    std::vector<uint8_t*> free_buffers_;
    size_t buffers_out_ = 0;
    std::unordered_map<const char*, int32_t> string_by_ptr_;
    std::unordered_map<std::string, int32_t> string_by_text_;
};

}  // namespace hookmagic
