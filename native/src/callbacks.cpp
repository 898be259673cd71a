#include "callbacks.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace hookmagic {
namespace {

thread_local int t_runtime_depth = 0;  // > 0 inside a runtime call we already recorded
thread_local int t_sync_depth = 0;     // > 0 inside a runtime synchronising call
thread_local uint64_t t_sync_start = 0;
// The thread's open hookmagic.range ids: a launch belongs to the innermost one. Kept here,
// not in CUPTI's external-correlation stack, whose records need API tracing switched on.
thread_local std::vector<int64_t> t_ranges;
thread_local int64_t t_tid = 0;
thread_local int64_t t_backward_range = -1;  // see CallbackHooks::set_backward_range
thread_local uint64_t t_backward_generation = 0;

inline int64_t os_thread_id() {
    if (!t_tid) t_tid = static_cast<int64_t>(syscall(SYS_gettid));
    return t_tid;
}

bool starts_with(const char* s, const char* prefix) {
    return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

const CUpti_CallbackDomain kDomains[2] = {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API};
// Resource callbacks for CUDA graphs: a node created (under stream capture, inside the
// launch, copy or memset call that adds it; or by cudaGraphAdd*Node) and a node cloned
// (instantiation and cudaGraphClone copy every node under a new id, which the activity
// records of a graph launch then carry).
const CUpti_CallbackId kGraphNodeCallbacks[2] = {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
                                                 CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED};

// The synchronising calls, by name prefix, with the type CUPTI's SYNCHRONIZATION records give
// them and whether their first parameter is the stream (true of every stream call's params).
struct SyncCall {
    const char* prefix;
    CUpti_ActivitySynchronizationType type;
    bool stream_first;
};
const SyncCall kRuntimeSyncs[] = {
    {"cudaDeviceSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, false},
    {"cudaThreadSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, false},
    {"cudaStreamSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, true},
    {"cudaEventSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, false},
    {"cudaStreamWaitEvent", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, true},
};
const SyncCall kDriverSyncs[] = {
    {"cuCtxSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, false},
    {"cuStreamSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, true},
    {"cuEventSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, false},
    {"cuStreamWaitEvent", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, true},
};

}  // namespace

void CallbackHooks::push_range(int64_t id) { t_ranges.push_back(id); }

void CallbackHooks::pop_range() {
    if (!t_ranges.empty()) t_ranges.pop_back();
}

void CallbackHooks::set_fallback(int skip_innermost) {
    fallback_generation_.fetch_add(1);
    fallback_stack_.store(stacks_ ? stacks_->sample(skip_innermost) : -1);
    fallback_range_.store(t_ranges.empty() ? -1 : t_ranges.back());
    fallback_on_.store(true);
}

void CallbackHooks::clear_fallback() { fallback_on_.store(false); }

void CallbackHooks::set_backward_range(int64_t range_id) {
    t_backward_range = range_id;
    t_backward_generation = fallback_generation_.load();
}

void CallbackHooks::build_roles(const CuptiApi& cupti) {
    if (!roles_[0].empty()) return;
    static const char* runtime_work[] = {"cudaLaunch", "cudaGraphLaunch", "cudaMemcpy",
                                         "cudaMemset", "cudaMalloc",      "cudaFree",
                                         "cudaHostAlloc"};
    static const char* driver_work[] = {"cuLaunch",    "cuGraphLaunch", "cuMemcpy",
                                        "cuMemset",    "cuMemAlloc",    "cuMemFree",
                                        "cuMemHostAlloc", "cuMemCreate", "cuMemRelease"};
    for (int d = 0; d < 2; ++d) {
        roles_[d].assign(4096, kNone);
        sync_type_[d].assign(4096, 0);
        sync_stream_[d].assign(4096, 0);
        for (uint32_t cbid = 1; cbid < roles_[d].size(); ++cbid) {
            const char* name = nullptr;
            if (cupti.cuptiGetCallbackName(kDomains[d], cbid, &name) != CUPTI_SUCCESS || !name)
                continue;
            uint8_t role = kNone;
            const SyncCall* syncs = d == 0 ? kRuntimeSyncs : kDriverSyncs;
            const size_t n_syncs = d == 0 ? sizeof(kRuntimeSyncs) / sizeof(*kRuntimeSyncs)
                                          : sizeof(kDriverSyncs) / sizeof(*kDriverSyncs);
            for (size_t i = 0; i < n_syncs && role == kNone; ++i)
                if (starts_with(name, syncs[i].prefix)) {
                    role = kSync;
                    sync_type_[d][cbid] = static_cast<uint8_t>(syncs[i].type);
                    sync_stream_[d][cbid] = syncs[i].stream_first ? 1 : 0;
                }
            if (role == kNone) {
                if (d == 1 && (!std::strcmp(name, "cuMemMap") || starts_with(name, "cuMemMap_")))
                    role = kMap;
                else if (d == 1 &&
                         (!std::strcmp(name, "cuMemUnmap") || starts_with(name, "cuMemUnmap_")))
                    role = kUnmap;
            }
            if (role == kNone) {
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

void CallbackHooks::enable(const CuptiApi& cupti, CUpti_SubscriberHandle subscriber,
                           const CaptureOptions& options, const ProbeOptions& probe) {
    for (int d = 0; d < 2; ++d) {
        if (!(probe.callback_domains & (1 << d))) continue;
        for (auto cbid : hooked_[d]) {
            const uint8_t role = roles_[d][cbid];
            if (!role_wanted(role, options)) continue;
            cupti.cuptiEnableCallback(1, subscriber, kDomains[d], cbid);
        }
    }
    // Graph nodes are attributed like launches: the same option turns both on.
    graph_callbacks_ = false;
    if ((probe.callback_domains & 3) && role_wanted(kWork, options))
        for (auto cbid : kGraphNodeCallbacks)
            if (cupti.cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, cbid) ==
                CUPTI_SUCCESS)
                graph_callbacks_ = true;
}

void CallbackHooks::disable(const CuptiApi& cupti, CUpti_SubscriberHandle subscriber) {
    for (int d = 0; d < 2; ++d)
        for (auto cbid : hooked_[d]) cupti.cuptiEnableCallback(0, subscriber, kDomains[d], cbid);
    if (graph_callbacks_)
        for (auto cbid : kGraphNodeCallbacks)
            cupti.cuptiEnableCallback(0, subscriber, CUPTI_CB_DOMAIN_RESOURCE, cbid);
    graph_callbacks_ = false;
}

void CallbackHooks::begin(const CuptiApi* cupti, const CaptureOptions& options,
                          const ProbeOptions& probe, StackInterner* stacks) {
    cupti_ = cupti;
    stacks_ = options.stacks ? stacks : nullptr;
    noop_ = probe.noop_callbacks;
    sync_ = options.sync && options.sync_from_callbacks;
}

void CallbackHooks::clear() {
    std::lock_guard<std::mutex> lock(mu_);
    launches.clear();
    vmm.clear();
    graph_nodes.clear();
    sync.clear();
    fallback_used_ = 0;
    fallback_on_.store(false);
    callbacks = 0;
    stacks_sampled = 0;
}

bool CallbackHooks::attribute(int32_t& stack, int64_t& range) {
    stack = stacks_ ? stacks_->sample() : -1;
    range = t_ranges.empty() ? -1 : t_ranges.back();
    if (!(stacks_ && stack < 0 && fallback_on_.load(std::memory_order_relaxed))) return false;
    // No Python frames here (autograd's engine thread): the caller of backward().
    stack = fallback_stack_.load(std::memory_order_relaxed);
    if (range < 0)
        range = (t_backward_range >= 0 &&
                 t_backward_generation == fallback_generation_.load(std::memory_order_relaxed))
                    ? t_backward_range
                    : fallback_range_.load(std::memory_order_relaxed);
    return true;
}

void CallbackHooks::on_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const CUpti_CallbackData* cb) {
    if (noop_) return;
    const int d = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? 0 : 1;
    if (cbid >= roles_[d].size()) return;
    const uint8_t role = roles_[d][cbid];
    if (role == kWork) {
        if (cb->callbackSite == CUPTI_API_ENTER) {
            // The runtime implements its calls on the driver: one stack per user call.
            if (d == 1 && t_runtime_depth > 0) return;
            if (d == 0) ++t_runtime_depth;
            int32_t stack = -1;
            int64_t range = -1;
            const bool borrowed = attribute(stack, range);
            std::lock_guard<std::mutex> lock(mu_);
            ++callbacks;
            if (stack >= 0) ++stacks_sampled;
            if (borrowed) ++fallback_used_;
            launches.correlation.push_back(cb->correlationId);
            launches.thread.push_back(os_thread_id());
            launches.stack_id.push_back(stack);
            launches.range_id.push_back(range);
        } else if (d == 0 && t_runtime_depth > 0) {
            --t_runtime_depth;
        }
        return;
    }
    if (role == kSync) {
        if (sync_) on_sync(d, cbid, cb);
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
        const int32_t stack = stacks_ ? stacks_->sample() : -1;
        uint64_t now = 0;
        if (cupti_) cupti_->cuptiGetTimestamp(&now);
        std::lock_guard<std::mutex> lock(mu_);
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

// A created node gets the creating thread's stack: under stream capture that is the line
// whose launch, copy or memset became the node. A clone gets no stack of its own (it is made
// inside cudaGraphInstantiate, whose line says nothing about the node): it names the node it
// copies, and the kernels replayed from it take that node's stack (hookmagic.cupti.columns).
void CallbackHooks::on_resource(CUpti_CallbackId cbid, const CUpti_ResourceData* data) {
    const bool cloned = cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED;
    if (noop_ || !data || !cupti_ || (!cloned && cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED))
        return;
    const auto* graph = static_cast<const CUpti_GraphData*>(data->resourceDescriptor);
    if (!graph || !graph->node || !cupti_->cuptiGetGraphNodeId) return;
    uint64_t node = 0, original = 0;
    if (cupti_->cuptiGetGraphNodeId(graph->node, &node) != CUPTI_SUCCESS || !node) return;
    if (cloned && (!graph->originalNode ||
                   cupti_->cuptiGetGraphNodeId(graph->originalNode, &original) != CUPTI_SUCCESS ||
                   !original))
        return;
    int32_t stack = -1;
    int64_t range = -1;
    if (!cloned) attribute(stack, range);
    uint64_t now = 0;
    cupti_->cuptiGetTimestamp(&now);
    std::lock_guard<std::mutex> lock(mu_);
    graph_nodes.node.push_back(node);
    graph_nodes.original.push_back(original);
    graph_nodes.time_ns.push_back(static_cast<int64_t>(now));
    graph_nodes.thread.push_back(os_thread_id());
    graph_nodes.stack_id.push_back(stack);
}

// One row per user-level synchronising call: a runtime call, or a driver call made outside
// any runtime call (the runtime implements its calls on the driver's). Times are CUPTI's
// clock at API entry and exit, as the SYNCHRONIZATION records' are; the event id is not
// available to callbacks (CUPTI_SYNCHRONIZATION_INVALID_VALUE). The calling thread, its stack
// and range go into `launches` under the call's correlation id, as for a launch.
void CallbackHooks::on_sync(int d, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
    if (d == 1 && t_sync_depth > 0) return;
    if (cb->callbackSite == CUPTI_API_ENTER) {
        if (d == 0) ++t_sync_depth;
        uint64_t now = 0;
        if (cupti_) cupti_->cuptiGetTimestamp(&now);
        t_sync_start = now;
        return;
    }
    if (d == 0 && t_sync_depth > 0) --t_sync_depth;
    uint64_t end = 0;
    if (cupti_) cupti_->cuptiGetTimestamp(&end);
    uint32_t stream = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
    if (sync_stream_[d][cbid] && cb->functionParams && cupti_ && cupti_->cuptiGetStreamIdEx) {
        CUstream handle = *static_cast<const CUstream*>(cb->functionParams);
        const char* fn = cb->functionName ? cb->functionName : "";
        // cudaStreamPerThread (0x2), or a per-thread-default-stream entry point (_ptsz).
        const uint8_t per_thread =
            (reinterpret_cast<uintptr_t>(handle) == 0x2 || std::strstr(fn, "_ptsz") != nullptr) ? 1 : 0;
        if (reinterpret_cast<uintptr_t>(handle) <= 0x2) handle = nullptr;  // legacy/per-thread
        uint32_t id = 0;
        if (cupti_->cuptiGetStreamIdEx(nullptr, handle, per_thread, &id) == CUPTI_SUCCESS ||
            cupti_->cuptiGetStreamIdEx(cb->context, handle, per_thread, &id) == CUPTI_SUCCESS)
            stream = id;
    }
    const int32_t stack = stacks_ ? stacks_->sample() : -1;
    std::lock_guard<std::mutex> lock(mu_);
    sync.start_ns.push_back(static_cast<int64_t>(t_sync_start));
    sync.end_ns.push_back(static_cast<int64_t>(end));
    sync.type.push_back(sync_type_[d][cbid]);
    sync.context.push_back(cb->contextUid);
    sync.stream.push_back(stream);
    sync.event.push_back(CUPTI_SYNCHRONIZATION_INVALID_VALUE);
    sync.correlation.push_back(cb->correlationId);
    ++callbacks;
    if (stack >= 0) ++stacks_sampled;
    launches.correlation.push_back(cb->correlationId);
    launches.thread.push_back(os_thread_id());
    launches.stack_id.push_back(stack);
    launches.range_id.push_back(t_ranges.empty() ? -1 : t_ranges.back());
}

}  // namespace hookmagic
