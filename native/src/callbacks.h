// CUPTI API callbacks: the launching thread, its Python stack and hookmagic.range for every
// launch, copy and allocation call (joined to the activity records by correlation id),
// virtual-memory map/unmap, which CUPTI has no activity record for, CUDA-graph nodes as they
// are created (the Python line that captured each node) and cloned (instantiation), and (with
// sync_from_callbacks) the synchronising calls: stream/device/event/context synchronize and
// stream wait event, timed from API entry to exit, instead of CUPTI's SYNCHRONIZATION kind.
//
// Callbacks are chosen by name rather than by number, so one build hooks the right functions
// in every CUPTI version (callback ids are appended to between releases).
#pragma once

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "cupti_loader.h"
#include "options.h"
#include "python_stacks.h"
#include "selection.h"
#include "tables.h"

namespace hookmagic {

class CallbackHooks {
public:
    // Once per process: the role of every callback id CUPTI names.
    void build_roles(const CuptiApi& cupti);
    // Enables the callbacks this capture needs on `subscriber` (domains as ProbeOptions says).
    void enable(const CuptiApi& cupti, CUpti_SubscriberHandle subscriber,
                const CaptureOptions& options, const ProbeOptions& probe);
    void disable(const CuptiApi& cupti, CUpti_SubscriberHandle subscriber);
    // Before a capture: what to record. `stacks` may be null (no stack walks).
    void begin(const CuptiApi* cupti, const CaptureOptions& options, const ProbeOptions& probe,
               StackInterner* stacks);
    // Called on the application's threads, inside the CUDA call.
    void on_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                     const CUpti_CallbackData* data);
    // CUPTI_CB_DOMAIN_RESOURCE: graph node created or cloned (others are ignored). Called on
    // the thread that creates the node, inside its CUDA call.
    void on_resource(CUpti_CallbackId cbid, const CUpti_ResourceData* data);

    // hookmagic.range on the calling thread (any time, capture or not).
    static void push_range(int64_t id);
    static void pop_range();

    // Attribution for work launched from threads with no Python frames (autograd's engine
    // threads): while set, such launches take the stack (less `skip_innermost` frames) and
    // innermost range of the thread that called set_fallback, i.e. the code that called
    // backward(). Process-wide: the latest caller wins. Needs the GIL.
    void set_fallback(int skip_innermost);
    void clear_fallback();
    // On an engine thread, inside backward(): the range of the module whose backward is
    // running (set from a hook on that module's output node). Used instead of the caller's
    // range for this thread's launches until the next set_fallback().
    void set_backward_range(int64_t range_id);
    uint64_t fallback_launches() const { return fallback_used_; }  // launches attributed so

    // Rows written by the callbacks; read them after the capture stopped.
    LaunchTable launches;
    VmmTable vmm;
    GraphNodeTable graph_nodes;  // with the launch callbacks: graph nodes created and cloned
    SyncTable sync;  // only with sync_from_callbacks; same columns as the activity records
    uint64_t callbacks = 0;
    uint64_t stacks_sampled = 0;
    void clear();

private:
    enum Role : uint8_t {
        kNone = kRoleNone, kWork = kRoleWork, kMap = kRoleMap, kUnmap = kRoleUnmap, kSync = kRoleSync
    };
    void on_sync(int domain, CUpti_CallbackId cbid, const CUpti_CallbackData* cb);
    // The calling thread's stack and innermost range, or, on a thread without Python frames
    // while a fallback is set, the fallback's (then returns true).
    bool attribute(int32_t& stack, int64_t& range);
    std::vector<uint8_t> roles_[2];  // per domain: 0 runtime, 1 driver
    std::vector<uint8_t> sync_type_[2];  // CUpti_ActivitySynchronizationType of kSync ids
    std::vector<uint8_t> sync_stream_[2];  // 1: the call's first parameter is its stream
    std::vector<CUpti_CallbackId> hooked_[2];
    const CuptiApi* cupti_ = nullptr;
    StackInterner* stacks_ = nullptr;
    bool noop_ = false;
    bool sync_ = false;
    bool graph_callbacks_ = false;  // the graph-node resource callbacks are enabled
    std::atomic<bool> fallback_on_{false};
    std::atomic<int32_t> fallback_stack_{-1};
    std::atomic<int64_t> fallback_range_{-1};
    std::atomic<uint64_t> fallback_generation_{0};
    uint64_t fallback_used_ = 0;
    std::mutex mu_;  // launches, vmm and graph_nodes rows
};

}  // namespace hookmagic
