#include "session.h"

#include <time.h>

#include <chrono>
#include <cstdlib>

#include "counters.h"
#include "decoder.h"
#include "selection.h"

namespace hookmagic {
namespace {

inline uint64_t steady_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

// CUPTI's entry points into the session. A C++ exception must never unwind through CUPTI's
// C frames (that would terminate the process, and with it the user's Jupyter kernel), so each
// catches everything and counts what it lost; the capture reports the count as dropped.
void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) noexcept {
    try {
        Session::instance().on_buffer_requested(buffer, size, max_records);
    } catch (...) {
        *buffer = nullptr;  // CUPTI drops the records it has no buffer for, and counts them
        *size = 0;
        Session::instance().count_entry_fault(EntryPoint::buffer_requested);
    }
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                               size_t valid) noexcept {
    try {
        Session::instance().on_buffer_completed(ctx, stream, buffer, size, valid);
    } catch (...) {
        Session::instance().count_entry_fault(EntryPoint::buffer_completed);
    }
}

void CUPTIAPI api_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                           const void* data) noexcept {
    try {
        Session::instance().on_callback(domain, cbid, data);
    } catch (...) {
        Session::instance().count_entry_fault(EntryPoint::api_callback);
    }
}

// Strings in records that CUPTI wrote: its fields are pointers into CUPTI's own memory.
// Kernel names live as long as their module, so their address identifies them; marker
// names do not, so those are always read. Only ever used on CUPTI's buffers.
struct CuptiOwnedStrings {
    StringTable& table;
    int32_t kernel_name(uint64_t raw, bool&) {
        return table.intern_owned(reinterpret_cast<const char*>(static_cast<uintptr_t>(raw)), true);
    }
    int32_t text(uint64_t raw, bool&) {
        if (!raw) return -1;
        return table.intern(reinterpret_cast<const char*>(static_cast<uintptr_t>(raw)), false);
    }
};

}  // namespace

Session& Session::instance() {
    static Session* session = new Session();  // never destroyed: CUPTI may call in at exit
    return *session;
}

std::string Session::load(const std::string& cupti_path) { return cupti_.load(cupti_path); }

uint32_t Session::cupti_version() {
    uint32_t v = 0;
    if (cupti_.loaded()) cupti_.cuptiGetVersion(&v);
    return v;
}

uint64_t Session::timestamp() {
    uint64_t t = 0;
    if (cupti_.loaded() && cupti_.cuptiGetTimestamp(&t) == CUPTI_SUCCESS) return t;
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

void Session::count_entry_fault(EntryPoint where) noexcept {
    entry_faults_[static_cast<int>(where)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t Session::entry_faults(EntryPoint where) const noexcept {
    return entry_faults_[static_cast<int>(where)].load(std::memory_order_relaxed);
}

void Session::use_api(const CuptiApi& api) {
    if (running_.load()) throw CaptureError(-2, "cannot replace CUPTI while a capture runs");
    cupti_ = api;
}

void Session::reset_tables() {
    for (auto& f : entry_faults_) f.store(0, std::memory_order_relaxed);
    tables.clear();
    strings.clear();
    hooks.clear();
    buffers_.reset_counters();
    counters = Counters{};
}

void Session::enable_activities() {
    std::vector<CUpti_ActivityKind> kinds = activity_kinds_for(options_, subscriber_ != nullptr);
    if (!probe_.activity_kinds.empty()) {
        kinds.clear();
        for (int k : probe_.activity_kinds) kinds.push_back(static_cast<CUpti_ActivityKind>(k));
    }
    for (auto kind : kinds) {
        CUptiResult r = cupti_.cuptiActivityEnable(kind);
        if (r != CUPTI_SUCCESS) {
            rollback();
            throw CaptureError(r, "CUPTI refused to enable activity kind " +
                                      std::to_string(static_cast<int>(kind)) + ": " +
                                      cupti_.error_string(r));
        }
        enabled_.push_back(kind);
    }
}

void Session::rollback() {
    for (auto kind : enabled_) cupti_.cuptiActivityDisable(kind);
    enabled_.clear();
    if (subscriber_) {
        hooks.disable(cupti_, subscriber_);
        cupti_.cuptiUnsubscribe(subscriber_);
        subscriber_ = nullptr;
    }
    running_.store(false);
}

void Session::start(const CaptureOptions& options, PyObject* boundary_frame,
                    const ProbeOptions& probe) {
    if (!cupti_.loaded()) throw CaptureError(-1, "CUPTI is not loaded");
    if (running_.load()) throw CaptureError(-2, "a hookmagic capture is already running");
    options_ = options;
    probe_ = probe;
    {
        std::lock_guard<std::mutex> lock(tables_mu_);
        reset_tables();
    }
    buffers_.configure(options_.buffer_bytes, options_.max_buffers);
    finalized_.store(false);
    finalize_pending_.store(false);
    subscribe_error_ = CUPTI_SUCCESS;
    driver_.bind_if_loaded();

    // Launch callbacks give every record its thread and hookmagic.range, so they are on unless
    // switched off outright (or by a lite capture); `stacks` only decides whether the Python
    // stack is walked in them. No subscription at all when no wanted callback needs one.
    const uint64_t t0 = steady_ns();
    if (wants_subscription(options_)) {
        hooks.build_roles(cupti_);
        CUptiResult r = cupti_.cuptiSubscribe(&subscriber_, api_callback, nullptr);
        counters.subscribe_ns = steady_ns() - t0;
        if (r != CUPTI_SUCCESS) {
            subscriber_ = nullptr;
            // A dormant subscriber (PyTorch's Kineto keeps one after its first profile) leaves
            // the activity API free: record activities, without stacks or map/unmap.
            if (!(options.activities_without_callbacks &&
                  r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED))
                throw CaptureError(r, cupti_.error_string(r));
            subscribe_error_ = r;
        }
        if (subscriber_) {
            hooks.begin(&cupti_, options_, probe_, &stacks);
            hooks.enable(cupti_, subscriber_, options_, probe_);
        }
    }
    if (options_.stacks && subscriber_)
        stacks.begin(boundary_frame, options_.max_stack_depth);
    const uint64_t t1 = steady_ns();

    CUptiResult r = cupti_.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
        rollback();
        throw CaptureError(r, "CUPTI refused the activity buffers: " + cupti_.error_string(r));
    }
    // Our buffers arrive zeroed (calloc, and re-zeroed before reuse off the launching
    // thread), so CUPTI need not clear 8 MiB on the application's thread at every request.
    uint8_t zeroed = 1;
    size_t zeroed_size = sizeof(zeroed);
    cupti_.cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &zeroed_size,
                                     &zeroed);
    enabled_.clear();
    running_.store(true);
    enable_activities();
    // Kernel timestamps from the hardware event system instead of per-launch software
    // instrumentation, where the GPU has one (Blackwell); elsewhere CUPTI says no.
    hw_trace_ = options_.kernels && cupti_.cuptiActivityEnableHWTrace &&
                cupti_.cuptiActivityEnableHWTrace(1) == CUPTI_SUCCESS;
    counters.callbacks_ns = t1 - t0 - counters.subscribe_ns;
    counters.enable_ns = steady_ns() - t1;
}

void Session::stop() {
    if (!running_.load()) return;
    const uint64_t t0 = steady_ns();
    for (auto kind : enabled_) cupti_.cuptiActivityDisable(kind);
    enabled_.clear();
    if (hw_trace_) cupti_.cuptiActivityEnableHWTrace(0);
    // Forced: also hands over buffers that are not yet full, so the trace is complete.
    cupti_.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    running_.store(false);
    if (subscriber_) hooks.disable(cupti_, subscriber_);
    detached_last_ = false;
    const uint64_t t1 = steady_ns();
    if (options_.detach) detach();
    if (!finalized_.load() && subscriber_) cupti_.cuptiUnsubscribe(subscriber_);
    subscriber_ = nullptr;
    counters.flush_ns = t1 - t0;
    counters.detach_ns = steady_ns() - t1;
}

// Without cuptiFinalize a process stays slower after profiling ends, even with every activity
// and callback disabled and the subscriber gone (pytorch#146604; on the GPU machine a launch-bound
// loop ran 1.48x afterwards, 1.03x after finalizing: benchmarks/results/overhead_probe_*.md).
// CUPTI asks for cuptiFinalize at an API-exit callsite, so we hook one harmless driver call,
// make it ourselves, and finalize inside its exit callback. Anything running later (the next
// capture included) re-initialises CUPTI lazily.
// Without callbacks of our own we subscribe just for this, unless another tool holds CUPTI:
// finalizing would pull it out from under that tool.
void Session::detach() {
    if (!driver_.bind_if_loaded()) return;
    if (!subscriber_ && (subscribe_error_ != CUPTI_SUCCESS ||
                         cupti_.cuptiSubscribe(&subscriber_, api_callback, nullptr) != CUPTI_SUCCESS)) {
        subscriber_ = nullptr;
        return;
    }
    finalize_pending_.store(true);
    cupti_.cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API,
                               CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion);
    int version = 0;
    driver_.cuDriverGetVersion(&version);
    finalize_pending_.store(false);
    detached_last_ = finalized_.load();
}

void* Session::ensure_subscriber() {
    if (!running_.load()) return nullptr;
    if (!subscriber_ && (subscribe_error_ != CUPTI_SUCCESS ||
                         cupti_.cuptiSubscribe(&subscriber_, api_callback, nullptr) != CUPTI_SUCCESS))
        subscriber_ = nullptr;
    return subscriber_;
}

void Session::on_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
    if (domain == CUPTI_CB_DOMAIN_RESOURCE) {  // graph nodes; their data is not CUpti_CallbackData
        if (!finalize_pending_.load(std::memory_order_relaxed))
            hooks.on_resource(cbid, static_cast<const CUpti_ResourceData*>(data));
        return;
    }
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    if (finalize_pending_.load(std::memory_order_relaxed)) {
        if (cb->callbackSite == CUPTI_API_EXIT && !finalized_.exchange(true)) cupti_.cuptiFinalize();
        return;
    }
    // Hardware counters with user replay count each launch here; their own launches and
    // synchronisations are not the program's.
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API && RangeCounters::instance().on_driver_callback(cbid, cb))
        return;
    hooks.on_callback(domain, cbid, cb);
}

void Session::on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *max_records = 0;
    buffers_.request(buffer, size);
}

void Session::on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t,
                                  size_t valid) {
    if (buffer) {
        // The buffer goes back to the pool however decoding ends, exactly once.
        struct Release {
            BufferPool& pool;
            uint8_t* buffer;
            size_t valid;
            ~Release() {
                try {
                    pool.release(buffer, valid);
                } catch (...) {
                    std::free(buffer);  // not kept for reuse: the pool could not take it back
                }
            }
        } release{buffers_, buffer, valid};
        if (valid > 0) decode(buffer, valid);
    }
    size_t dropped = 0;
    if (cupti_.cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped) {
        std::lock_guard<std::mutex> lock(tables_mu_);
        counters.dropped_cupti += dropped;
    }
}

void Session::decode(const uint8_t* buffer, size_t valid) {
    const uint64_t t0 = steady_ns();
    std::lock_guard<std::mutex> lock(tables_mu_);
    const bool full = tables.stored_bytes() >= options_.max_table_bytes;
    CuptiOwnedStrings names{strings};
    CUpti_Activity* record = nullptr;
    uint64_t n = 0, skipped = 0;
    uint8_t* base = const_cast<uint8_t*>(buffer);
    while (cupti_.cuptiActivityGetNextRecord(base, valid, &record) == CUPTI_SUCCESS) {
        ++n;
        const auto* at = reinterpret_cast<const uint8_t*>(record);
        if (at < buffer || at >= buffer + valid) break;  // never past what CUPTI wrote
        if (full)
            ++skipped;
        else
            decode_record(at, static_cast<size_t>(buffer + valid - at), tables, names);
    }
    counters.records += n;
    counters.dropped_limit += skipped;
    ++counters.buffers;
    counters.decode_ns += steady_ns() - t0;
}

}  // namespace hookmagic
