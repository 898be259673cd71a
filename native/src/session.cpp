#include "session.h"

#include <cxxabi.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>


namespace hookmagic {
namespace {

// Record layouts: the fields read below sit at the same offsets in every CUPTI from 12.0 to
// 13.5 (checked against the 12.9, 13.0 and 13.5 headers), while the structs themselves grow
// at the end. CUPTI emits its newest layout, so only the common prefix is ever read, through
// the oldest struct name that all supported headers still declare.
using KernelRecord = CUpti_ActivityKernel9;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using MemsetRecord = CUpti_ActivityMemset4;
using MemoryRecord = CUpti_ActivityMemory4;
using SyncRecord = CUpti_ActivitySynchronization2;
using ApiRecord = CUpti_ActivityAPI;
using MarkerRecord = CUpti_ActivityMarker2;

static_assert(offsetof(KernelRecord, start) == 16 && offsetof(KernelRecord, correlationId) == 92 &&
                  offsetof(KernelRecord, name) == 104 && offsetof(KernelRecord, graphId) == 156,
              "kernel record layout changed: re-check the versioned struct offsets");
static_assert(offsetof(MemcpyRecord, bytes) == 8 && offsetof(MemcpyRecord, graphId) == 72,
              "memcpy record layout changed");
static_assert(offsetof(MemsetRecord, memoryKind) == 50 && offsetof(MemsetRecord, graphId) == 72,
              "memset record layout changed");
static_assert(offsetof(MemoryRecord, timestamp) == 32 && offsetof(MemoryRecord, isAsync) == 72,
              "memory record layout changed");

inline uint64_t steady_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

thread_local int t_runtime_depth = 0;  // > 0 inside a runtime call we already recorded
// The thread's open hookmagic.range ids: a launch belongs to the innermost one. Kept here,
// not in CUPTI's external-correlation stack, whose records need API tracing switched on.
thread_local std::vector<int64_t> t_ranges;
thread_local int64_t t_tid = 0;

inline int64_t os_thread_id() {
    if (!t_tid) t_tid = static_cast<int64_t>(syscall(SYS_gettid));
    return t_tid;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    Session::instance().on_buffer_requested(buffer, size, max_records);
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                               size_t valid) {
    Session::instance().on_buffer_completed(ctx, stream, buffer, size, valid);
}

void CUPTIAPI api_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                           const void* data) {
    Session::instance().on_callback(domain, cbid, data);
}

// The fields every GPU-side record shares: when, where, and which API call caused it.
template <class Table, class Record>
inline void push_placed(Table& t, const Record* r) {
    t.start_ns.push_back(static_cast<int64_t>(r->start));
    t.end_ns.push_back(static_cast<int64_t>(r->end));
    t.device.push_back(static_cast<int32_t>(r->deviceId));
    t.context.push_back(r->contextId);
    t.stream.push_back(r->streamId);
    t.correlation.push_back(r->correlationId);
}

bool starts_with(const char* s, const char* prefix) {
    return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

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

void Session::push_range(int64_t id) { t_ranges.push_back(id); }

void Session::pop_range() {
    if (!t_ranges.empty()) t_ranges.pop_back();
}

// Chooses the callbacks by name rather than by number, so the same build hooks the right
// functions in every CUPTI version (callback ids are appended to between releases).
void Session::build_roles() {
    if (!roles_[0].empty()) return;
    static const char* runtime_work[] = {"cudaLaunch", "cudaGraphLaunch", "cudaMemcpy",
                                         "cudaMemset", "cudaMalloc",      "cudaFree",
                                         "cudaHostAlloc"};
    static const char* driver_work[] = {"cuLaunch",    "cuGraphLaunch", "cuMemcpy",
                                        "cuMemset",    "cuMemAlloc",    "cuMemFree",
                                        "cuMemHostAlloc", "cuMemCreate", "cuMemRelease"};
    const CUpti_CallbackDomain domains[2] = {CUPTI_CB_DOMAIN_RUNTIME_API,
                                             CUPTI_CB_DOMAIN_DRIVER_API};
    for (int d = 0; d < 2; ++d) {
        roles_[d].assign(4096, kNone);
        for (uint32_t cbid = 1; cbid < roles_[d].size(); ++cbid) {
            const char* name = nullptr;
            if (cupti_.cuptiGetCallbackName(domains[d], cbid, &name) != CUPTI_SUCCESS || !name)
                continue;
            uint8_t role = kNone;
            if (d == 1 && (!std::strcmp(name, "cuMemMap") || starts_with(name, "cuMemMap_")))
                role = kMap;
            else if (d == 1 && (!std::strcmp(name, "cuMemUnmap") || starts_with(name, "cuMemUnmap_")))
                role = kUnmap;
            else {
                const char** list = d == 0 ? runtime_work : driver_work;
                size_t n = d == 0 ? sizeof(runtime_work) / sizeof(*runtime_work)
                                  : sizeof(driver_work) / sizeof(*driver_work);
                for (size_t i = 0; i < n; ++i)
                    if (starts_with(name, list[i])) role = kWork;
            }
            if (role != kNone) {
                roles_[d][cbid] = role;
                hooked_[d].push_back(cbid);
            }
        }
    }
}

void Session::reset_tables() {
    kernels.clear(); memcpy.clear(); memset.clear(); memory.clear(); sync.clear();
    api.clear(); markers.clear(); launches.clear(); vmm.clear();
    strings.clear();
    string_by_ptr_.clear();
    string_by_text_.clear();
    counters = Counters{};
}

size_t Session::stored_bytes() const {
    return kernels.start_ns.size() * KernelTable::row_bytes +
           memcpy.start_ns.size() * MemcpyTable::row_bytes +
           memset.start_ns.size() * MemsetTable::row_bytes +
           memory.time_ns.size() * MemoryTable::row_bytes +
           sync.start_ns.size() * SyncTable::row_bytes + api.start_ns.size() * ApiTable::row_bytes +
           markers.time_ns.size() * MarkerTable::row_bytes;
}

void Session::enable_activities(std::vector<CUpti_ActivityKind>& enabled) {
    std::vector<CUpti_ActivityKind> kinds = {CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                                             CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};
    if (options_.kernels) kinds.push_back(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (options_.memory) kinds.push_back(CUPTI_ACTIVITY_KIND_MEMORY2);
    if (options_.api) {
        kinds.push_back(CUPTI_ACTIVITY_KIND_RUNTIME);
        kinds.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
    }
    if (options_.nvtx) kinds.push_back(CUPTI_ACTIVITY_KIND_MARKER);
    if (!options_.activity_kinds.empty()) {
        kinds.clear();
        for (int k : options_.activity_kinds) kinds.push_back(static_cast<CUpti_ActivityKind>(k));
    }
    for (auto kind : kinds) {
        CUptiResult r = cupti_.cuptiActivityEnable(kind);
        if (r != CUPTI_SUCCESS) {
            rollback(enabled);
            throw CaptureError(r, "CUPTI refused to enable activity kind " +
                                      std::to_string(static_cast<int>(kind)) + ": " +
                                      cupti_.error_string(r));
        }
        enabled.push_back(kind);
    }
}

void Session::rollback(std::vector<CUpti_ActivityKind>& enabled) {
    for (auto kind : enabled) cupti_.cuptiActivityDisable(kind);
    enabled.clear();
    if (subscriber_) {
        cupti_.cuptiUnsubscribe(subscriber_);
        subscriber_ = nullptr;
    }
    running_.store(false);
}

void Session::start(const Options& options) {
    if (!cupti_.loaded()) throw CaptureError(-1, "CUPTI is not loaded");
    if (running_.load()) throw CaptureError(-2, "a hookmagic capture is already running");
    options_ = options;
    {
        std::lock_guard<std::mutex> lock(tables_mu_);
        reset_tables();
    }
    finalized_.store(false);
    finalize_pending_.store(false);
    subscribe_error_ = CUPTI_SUCCESS;
    driver_.bind_if_loaded();

    // Launch callbacks give every record its thread and hookmagic.range, so they are on unless
    // switched off outright; `stacks` only decides whether the Python stack is walked in them.
    const uint64_t t0 = steady_ns();
    if (options_.callbacks) {
        build_roles();
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
        const CUpti_CallbackDomain domains[2] = {CUPTI_CB_DOMAIN_RUNTIME_API,
                                                 CUPTI_CB_DOMAIN_DRIVER_API};
        for (int d = 0; d < 2 && subscriber_; ++d) {
            if (!(options_.callback_domains & (1 << d))) continue;
            for (auto cbid : hooked_[d]) {
                uint8_t role = roles_[d][cbid];
                if ((role == kMap || role == kUnmap) && !options_.memory) continue;
                cupti_.cuptiEnableCallback(1, subscriber_, domains[d], cbid);
            }
        }
    }
    if (options_.stacks && subscriber_) stacks.begin(options_.boundary_frame, options_.max_stack_depth);
    const uint64_t t1 = steady_ns();

    CUptiResult r = cupti_.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
        std::vector<CUpti_ActivityKind> none;
        rollback(none);
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
    enable_activities(enabled_);
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
    if (subscriber_) {
        const CUpti_CallbackDomain domains[2] = {CUPTI_CB_DOMAIN_RUNTIME_API,
                                                 CUPTI_CB_DOMAIN_DRIVER_API};
        for (int d = 0; d < 2; ++d)
            for (auto cbid : hooked_[d]) cupti_.cuptiEnableCallback(0, subscriber_, domains[d], cbid);
    }
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

void Session::on_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    if (finalize_pending_.load(std::memory_order_relaxed)) {
        if (cb->callbackSite == CUPTI_API_EXIT && !finalized_.exchange(true)) cupti_.cuptiFinalize();
        return;
    }
    if (options_.noop_callbacks) return;
    const int d = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? 0 : 1;
    if (cbid >= roles_[d].size()) return;
    const uint8_t role = roles_[d][cbid];
    if (role == kWork) {
        if (cb->callbackSite == CUPTI_API_ENTER) {
            // The runtime implements its calls on the driver: one stack per user call.
            if (d == 1 && t_runtime_depth > 0) return;
            if (d == 0) ++t_runtime_depth;
            int32_t stack = options_.stacks ? stacks.sample() : -1;
            std::lock_guard<std::mutex> lock(launch_mu_);
            ++counters.callbacks;
            if (stack >= 0) ++counters.stacks_sampled;
            launches.correlation.push_back(cb->correlationId);
            launches.thread.push_back(os_thread_id());
            launches.stack_id.push_back(stack);
            launches.range_id.push_back(t_ranges.empty() ? -1 : t_ranges.back());
        } else if (d == 0 && t_runtime_depth > 0) {
            --t_runtime_depth;
        }
        return;
    }
    if ((role == kMap || role == kUnmap) && cb->callbackSite == CUPTI_API_EXIT) {
        if (cb->functionReturnValue && *static_cast<CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS)
            return;
        uint64_t address = 0;
        int64_t bytes = 0;
        if (role == kMap) {
            const auto* p = static_cast<const cuMemMap_params*>(cb->functionParams);
            address = p->ptr;
            bytes = static_cast<int64_t>(p->size);
        } else {
            const auto* p = static_cast<const cuMemUnmap_params*>(cb->functionParams);
            address = p->ptr;
            bytes = static_cast<int64_t>(p->size);
        }
        int32_t stack = options_.stacks ? stacks.sample() : -1;
        uint64_t now = timestamp();
        std::lock_guard<std::mutex> lock(launch_mu_);
        vmm.time_ns.push_back(static_cast<int64_t>(now));
        vmm.op.push_back(role == kMap ? 1 : 2);
        vmm.address.push_back(address);
        vmm.bytes.push_back(bytes);
        vmm.context.push_back(cb->contextUid);
        vmm.correlation.push_back(cb->correlationId);
        vmm.thread.push_back(os_thread_id());
        vmm.stack_id.push_back(stack);
    }
}

void Session::on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *max_records = 0;
    std::lock_guard<std::mutex> lock(buffers_mu_);
    if (buffers_out_ >= options_.max_buffers) {
        // Returning no buffer makes CUPTI drop records, and count them, instead of letting a
        // runaway capture take the host's memory.
        ++counters.buffers_refused;
        *buffer = nullptr;
        *size = 0;
        return;
    }
    uint8_t* b = nullptr;
    if (!free_buffers_.empty()) {
        b = free_buffers_.back();
        free_buffers_.pop_back();
    } else {
        b = static_cast<uint8_t*>(std::calloc(1, options_.buffer_bytes));  // 16-byte aligned
    }
    if (b) ++buffers_out_;
    *buffer = b;
    *size = b ? options_.buffer_bytes : 0;
}

void Session::on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t,
                                  size_t valid) {
    if (buffer) {
        if (valid > 0) decode(buffer, valid);
        std::memset(buffer, 0, valid);  // CUPTI wrote only the first `valid` bytes
        std::lock_guard<std::mutex> lock(buffers_mu_);
        --buffers_out_;
        if (free_buffers_.size() < 4)
            free_buffers_.push_back(buffer);
        else
            std::free(buffer);
    }
    size_t dropped = 0;
    if (cupti_.cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped) {
        std::lock_guard<std::mutex> lock(tables_mu_);
        counters.dropped_cupti += dropped;
    }
}

int32_t Session::intern_string(const char* s, bool demangle) {
    if (!s) s = "";
    // Kernel names are owned by CUPTI for the module's life, so their address identifies
    // them; marker names are not (demangle == false), so those are always read.
    if (demangle) {
        auto hit = string_by_ptr_.find(s);
        if (hit != string_by_ptr_.end()) return hit->second;
    }
    std::string text;
    if (demangle) {
        int status = 0;
        char* d = abi::__cxa_demangle(s, nullptr, nullptr, &status);
        text = (status == 0 && d) ? d : s;
        std::free(d);
    } else {
        text = s;
    }
    auto it = string_by_text_.find(text);
    int32_t id;
    if (it != string_by_text_.end()) {
        id = it->second;
    } else {
        id = static_cast<int32_t>(strings.size());
        strings.push_back(text);
        string_by_text_.emplace(std::move(text), id);
    }
    if (demangle) string_by_ptr_.emplace(s, id);
    return id;
}

void Session::decode(uint8_t* buffer, size_t valid) {
    const uint64_t t0 = steady_ns();
    std::lock_guard<std::mutex> lock(tables_mu_);
    const bool full = stored_bytes() >= options_.max_table_bytes;
    CUpti_Activity* record = nullptr;
    uint64_t n = 0, skipped = 0;
    while (cupti_.cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        ++n;
        if (full)
            ++skipped;
        else
            decode_record(record);
    }
    counters.records += n;
    counters.dropped_limit += skipped;
    ++counters.buffers;
    counters.decode_ns += steady_ns() - t0;
}

void Session::decode_synthetic(const uint8_t* buffer, const std::vector<size_t>& offsets) {
    const uint64_t t0 = steady_ns();
    std::lock_guard<std::mutex> lock(tables_mu_);
    for (size_t off : offsets) decode_record(reinterpret_cast<const CUpti_Activity*>(buffer + off));
    counters.records += offsets.size();
    counters.decode_ns += steady_ns() - t0;
}

void Session::decode_record(const CUpti_Activity* record) {
        switch (record->kind) {
            case CUPTI_ACTIVITY_KIND_KERNEL:
            case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
                const auto* k = reinterpret_cast<const KernelRecord*>(record);
                auto& t = kernels;
                push_placed(t, k);
                t.name.push_back(intern_string(k->name, true));
                t.grid_x.push_back(k->gridX); t.grid_y.push_back(k->gridY); t.grid_z.push_back(k->gridZ);
                t.block_x.push_back(k->blockX); t.block_y.push_back(k->blockY); t.block_z.push_back(k->blockZ);
                t.registers.push_back(k->registersPerThread);
                t.static_smem.push_back(k->staticSharedMemory);
                t.dynamic_smem.push_back(k->dynamicSharedMemory);
                t.local_mem.push_back(k->localMemoryPerThread);
                t.graph_id.push_back(k->graphId);
                t.graph_node.push_back(k->graphNodeId);
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMCPY: {
                const auto* m = reinterpret_cast<const MemcpyRecord*>(record);
                auto& t = memcpy;
                push_placed(t, m);
                t.bytes.push_back(static_cast<int64_t>(m->bytes));
                t.kind.push_back(m->copyKind);
                t.src_kind.push_back(m->srcKind);
                t.dst_kind.push_back(m->dstKind);
                t.graph_id.push_back(m->graphId);
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMSET: {
                const auto* m = reinterpret_cast<const MemsetRecord*>(record);
                auto& t = memset;
                push_placed(t, m);
                t.bytes.push_back(static_cast<int64_t>(m->bytes));
                t.value.push_back(m->value);
                t.memory_kind.push_back(m->memoryKind);
                t.graph_id.push_back(m->graphId);
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMORY2: {
                const auto* m = reinterpret_cast<const MemoryRecord*>(record);
                auto& t = memory;
                t.time_ns.push_back(static_cast<int64_t>(m->timestamp));
                t.op.push_back(static_cast<uint8_t>(m->memoryOperationType));
                t.address.push_back(m->address);
                t.bytes.push_back(static_cast<int64_t>(m->bytes));
                t.memory_kind.push_back(static_cast<uint8_t>(m->memoryKind));
                t.device.push_back(static_cast<int32_t>(m->deviceId));
                t.context.push_back(m->contextId);
                t.stream.push_back(m->streamId);
                t.correlation.push_back(m->correlationId);
                t.is_async.push_back(m->isAsync ? 1 : 0);
                break;
            }
            case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
                const auto* s = reinterpret_cast<const SyncRecord*>(record);
                auto& t = sync;
                t.start_ns.push_back(static_cast<int64_t>(s->start));
                t.end_ns.push_back(static_cast<int64_t>(s->end));
                t.type.push_back(static_cast<uint8_t>(s->type));
                t.context.push_back(s->contextId);
                t.stream.push_back(s->streamId);
                t.event.push_back(s->cudaEventId);
                t.correlation.push_back(s->correlationId);
                break;
            }
            case CUPTI_ACTIVITY_KIND_RUNTIME:
            case CUPTI_ACTIVITY_KIND_DRIVER: {
                const auto* a = reinterpret_cast<const ApiRecord*>(record);
                auto& t = api;
                t.start_ns.push_back(static_cast<int64_t>(a->start));
                t.end_ns.push_back(static_cast<int64_t>(a->end));
                t.domain.push_back(record->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? 0 : 1);
                t.cbid.push_back(a->cbid);
                t.process.push_back(a->processId);
                t.thread.push_back(a->threadId);
                t.correlation.push_back(a->correlationId);
                t.return_code.push_back(a->returnValue);
                break;
            }
            case CUPTI_ACTIVITY_KIND_MARKER: {
                const auto* m = reinterpret_cast<const MarkerRecord*>(record);
                auto& t = markers;
                t.time_ns.push_back(static_cast<int64_t>(m->timestamp));
                t.flags.push_back(m->flags);
                t.id.push_back(m->id);
                t.thread.push_back(m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ||
                                           m->objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS
                                       ? m->objectId.pt.threadId
                                       : 0);
                t.name.push_back(m->name ? intern_string(m->name, false) : -1);
                t.domain.push_back(m->domain ? intern_string(m->domain, false) : -1);
                break;
            }
            default:
                break;
        }
}

}  // namespace hookmagic
