// The process-wide CUPTI capture session: CUPTI's lifecycle (subscribe, enable, flush,
// finalize) and the wiring of its parts.
//
// CUPTI is global to a process (one activity registration, one callback subscriber), so
// there is exactly one Session. Python drives it: load() once, then start()/stop() per
// capture, take() to receive the decoded columns. The parts, each with a narrow interface:
//   buffers.h    host buffers for activity records
//   decoder.h    records -> columns, generated from tables.h
//   string_table.h  string interning (kernel and marker names)
//   callbacks.h  API callbacks: threads, stacks, ranges, map/unmap
#pragma once

#include <Python.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "buffers.h"
#include "callbacks.h"
#include "cupti_loader.h"
#include "options.h"
#include "python_stacks.h"
#include "string_table.h"
#include "tables.h"

namespace hookmagic {

// Raised when CUPTI refuses to start; `code` is the CUptiResult.
struct CaptureError : std::runtime_error {
    int code;
    CaptureError(int c, const std::string& m) : std::runtime_error(m), code(c) {}
};

struct Counters {
    uint64_t records = 0;
    uint64_t dropped_cupti = 0;       // reported by cuptiActivityGetNumDroppedRecords
    uint64_t dropped_limit = 0;       // over max_table_bytes
    uint64_t buffers = 0;
    uint64_t decode_ns = 0;
    // Where the capture's own fixed time went (steady clock).
    uint64_t subscribe_ns = 0;         // cuptiSubscribe
    uint64_t callbacks_ns = 0;         // enabling the callbacks
    uint64_t enable_ns = 0;            // enabling the activity kinds
    uint64_t flush_ns = 0;             // disabling and draining at stop
    uint64_t detach_ns = 0;            // cuptiFinalize
};

// CUPTI's three ways into the session; an exception caught at one is counted per entry point.
enum class EntryPoint : int { buffer_requested = 0, buffer_completed = 1, api_callback = 2 };

class Session {
public:
    static Session& instance();

    // Binds the session to a CUPTI that the caller resolved: the loaded library (load()), or
    // a CPU stand-in whose functions fail or throw on purpose, so that the session's error
    // paths run without a GPU (native/testing/fake_cupti.cpp). Not while a capture runs.
    void use_api(const CuptiApi& api);

    // Exceptions caught at CUPTI's entry points since the last reset_tables(): each is work
    // lost (a buffer's records, one callback's row), reported as dropped.
    void count_entry_fault(EntryPoint where) noexcept;
    uint64_t entry_faults(EntryPoint where) const noexcept;
    uint64_t buffers_out() const { return buffers_.outstanding(); }

    std::string load(const std::string& cupti_path);
    bool loaded() const { return cupti_.loaded(); }
    const CuptiApi& cupti() const { return cupti_; }
    DriverApi& driver() { return driver_; }
    uint32_t cupti_version();

    // Starts a capture; frames at and above `boundary_frame` (borrowed, may be null) are left
    // out of stacks. `probe` (benchmarks only) overrides what is enabled. Throws CaptureError.
    void start(const CaptureOptions& options, PyObject* boundary_frame,
               const ProbeOptions& probe = ProbeOptions{});
    // Disables everything, drains the buffers, finalizes CUPTI if asked to. Call without the GIL.
    void stop();
    bool running() const { return running_.load(); }
    bool detached_last() const { return detached_last_; }
    bool callbacks_active() const { return subscriber_ != nullptr; }
    // The capture's CUPTI subscriber, subscribing now (callbacks enabled later by the caller)
    // when the capture has none; null when another tool holds CUPTI's callback API.
    void* ensure_subscriber();
    bool hw_trace() const { return hw_trace_; }
    int subscribe_error() const { return static_cast<int>(subscribe_error_); }

    uint64_t timestamp();

    // Hand-over: read these after stop(), then reset_tables(). Needs the GIL.
    ActivityTables tables;
    StringTable strings;
    CallbackHooks hooks;
    StackInterner stacks;
    Counters counters;
    uint64_t buffers_refused() const { return buffers_.refused(); }
    void reset_tables();

    // Called from CUPTI's threads.
    void on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
    void on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                             size_t valid);
    void on_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);

private:
    Session() = default;
    void decode(const uint8_t* buffer, size_t valid);
    void enable_activities();
    void rollback();
    void detach();

    CuptiApi cupti_;
    DriverApi driver_;
    BufferPool buffers_;
    CaptureOptions options_;
    ProbeOptions probe_;
    std::atomic<bool> running_{false};
    std::atomic<bool> finalize_pending_{false};
    std::atomic<bool> finalized_{false};
    bool detached_last_ = false;
    bool hw_trace_ = false;
    CUpti_SubscriberHandle subscriber_ = nullptr;
    CUptiResult subscribe_error_ = CUPTI_SUCCESS;
    std::vector<CUpti_ActivityKind> enabled_;
    std::atomic<uint64_t> entry_faults_[3] = {};
    std::mutex tables_mu_;     // decoded tables; never held across a CUPTI call
};

}  // namespace hookmagic
