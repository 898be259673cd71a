#include "callbacks.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace hookmagic {
namespace {

thread_local int t_runtime_depth = 0;  // > 0 inside a runtime call we already recorded
// The thread's open hookmagic.range ids: a launch belongs to the innermost one. Kept here,
// not in CUPTI's external-correlation stack, whose records need API tracing switched on.
thread_local std::vector<int64_t> t_ranges;
thread_local int64_t t_tid = 0;

inline int64_t os_thread_id() {
    if (!t_tid) t_tid = static_cast<int64_t>(syscall(SYS_gettid));
    return t_tid;
}

bool starts_with(const char* s, const char* prefix) {
    return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

const CUpti_CallbackDomain kDomains[2] = {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API};

}  // namespace

void CallbackHooks::push_range(int64_t id) { t_ranges.push_back(id); }

void CallbackHooks::pop_range() {
    if (!t_ranges.empty()) t_ranges.pop_back();
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
        for (uint32_t cbid = 1; cbid < roles_[d].size(); ++cbid) {
            const char* name = nullptr;
            if (cupti.cuptiGetCallbackName(kDomains[d], cbid, &name) != CUPTI_SUCCESS || !name)
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

void CallbackHooks::enable(const CuptiApi& cupti, CUpti_SubscriberHandle subscriber,
                           const CaptureOptions& options, const ProbeOptions& probe) {
    for (int d = 0; d < 2; ++d) {
        if (!(probe.callback_domains & (1 << d))) continue;
        for (auto cbid : hooked_[d]) {
            const uint8_t role = roles_[d][cbid];
            if ((role == kMap || role == kUnmap) && !options.memory) continue;
            cupti.cuptiEnableCallback(1, subscriber, kDomains[d], cbid);
        }
    }
}

void CallbackHooks::disable(const CuptiApi& cupti, CUpti_SubscriberHandle subscriber) {
    for (int d = 0; d < 2; ++d)
        for (auto cbid : hooked_[d]) cupti.cuptiEnableCallback(0, subscriber, kDomains[d], cbid);
}

void CallbackHooks::begin(const CuptiApi* cupti, const CaptureOptions& options,
                          const ProbeOptions& probe, StackInterner* stacks) {
    cupti_ = cupti;
    stacks_ = options.stacks ? stacks : nullptr;
    noop_ = probe.noop_callbacks;
}

void CallbackHooks::clear() {
    std::lock_guard<std::mutex> lock(mu_);
    launches.clear();
    vmm.clear();
    callbacks = 0;
    stacks_sampled = 0;
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
            const int32_t stack = stacks_ ? stacks_->sample() : -1;
            std::lock_guard<std::mutex> lock(mu_);
            ++callbacks;
            if (stack >= 0) ++stacks_sampled;
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

}  // namespace hookmagic
