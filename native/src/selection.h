// What a capture turns on in CUPTI, decided from its options alone: the activity kinds, the
// callback roles, and whether to subscribe to CUPTI's callback API at all. Pure functions, so
// the choice (a lite capture's in particular) is visible to tests without a GPU
// (hookmagic._native.activity_selection / callback_selection) and the session does exactly that.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <vector>

#include "options.h"

namespace hookmagic {

// The role of a hooked callback id (CallbackHooks gives each id CUPTI names one).
enum CallbackRole : uint8_t {
    kRoleNone = 0,
    kRoleWork = 1,   // launch, copy, memset, allocation: thread, stack and range of the call
    kRoleMap = 2,    // cuMemMap: virtual-memory mapping, no activity record exists for it
    kRoleUnmap = 3,  // cuMemUnmap
    kRoleSync = 4,   // synchronising calls, timed entry to exit (sync_from_callbacks)
};

inline bool role_wanted(uint8_t role, const CaptureOptions& o) {
    switch (role) {
        case kRoleWork: return o.launch_callbacks;
        case kRoleMap:
        case kRoleUnmap: return o.memory;
        case kRoleSync: return o.sync && o.sync_from_callbacks;
        default: return false;
    }
}

// Subscribe to CUPTI's callback API only when some wanted role needs it.
inline bool wants_subscription(const CaptureOptions& o) {
    if (!o.callbacks) return false;
    for (uint8_t role : {kRoleWork, kRoleMap, kRoleSync})
        if (role_wanted(role, o)) return true;
    return false;
}

// The activity kinds to enable; `subscribed`: the session holds CUPTI's callback API, so with
// sync_from_callbacks the synchronising callbacks replace CUPTI's SYNCHRONIZATION records
// (~0.28x on launch-bound code).
inline std::vector<CUpti_ActivityKind> activity_kinds_for(const CaptureOptions& o,
                                                          bool subscribed) {
    std::vector<CUpti_ActivityKind> kinds = {CUPTI_ACTIVITY_KIND_MEMCPY,
                                             CUPTI_ACTIVITY_KIND_MEMSET};
    if (o.sync && !(o.sync_from_callbacks && subscribed))
        kinds.push_back(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
    if (o.kernels) kinds.push_back(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (o.memory) kinds.push_back(CUPTI_ACTIVITY_KIND_MEMORY2);
    if (o.api) {
        kinds.push_back(CUPTI_ACTIVITY_KIND_RUNTIME);
        kinds.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
    }
    if (o.nvtx) kinds.push_back(CUPTI_ACTIVITY_KIND_MARKER);
    return kinds;
}

}  // namespace hookmagic
