#include "fake_cupti.h"

#include <stdexcept>

namespace hookmagic::fake {
namespace {

Script g_script;
Calls g_calls;
CUpti_CallbackFunc g_callback = nullptr;
CUpti_BuffersCallbackRequestFunc g_request = nullptr;
CUpti_BuffersCallbackCompleteFunc g_complete = nullptr;
int g_subscriber_token = 0;

CUptiResult CUPTIAPI get_version(uint32_t* v) { *v = 0; return CUPTI_SUCCESS; }

CUptiResult CUPTIAPI get_result_string(CUptiResult, const char** s) {
    *s = "fake CUPTI error";
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI subscribe(CUpti_SubscriberHandle* h, CUpti_CallbackFunc cb, void*) {
    ++g_calls.subscribe;
    if (g_script.subscribe_result != CUPTI_SUCCESS)
        return static_cast<CUptiResult>(g_script.subscribe_result);
    *h = reinterpret_cast<CUpti_SubscriberHandle>(&g_subscriber_token);
    g_callback = cb;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI unsubscribe(CUpti_SubscriberHandle) { ++g_calls.unsubscribe; return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI enable_callback(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                     CUpti_CallbackId) { return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI enable_domain(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain) {
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI callback_name(CUpti_CallbackDomain d, uint32_t cbid, const char** name) {
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == kStreamSyncCbid) {
        *name = "cudaStreamSynchronize";
        return CUPTI_SUCCESS;
    }
    return CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult CUPTIAPI activity_enable(CUpti_ActivityKind kind) {
    ++g_calls.enable;
    return static_cast<int>(kind) == g_script.enable_fails_kind ? CUPTI_ERROR_NOT_COMPATIBLE
                                                                : CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI activity_disable(CUpti_ActivityKind) { ++g_calls.disable; return CUPTI_SUCCESS; }

CUptiResult CUPTIAPI register_callbacks(CUpti_BuffersCallbackRequestFunc req,
                                        CUpti_BuffersCallbackCompleteFunc done) {
    g_request = req;
    g_complete = done;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI flush_all(uint32_t) { ++g_calls.flush; return CUPTI_SUCCESS; }

CUptiResult CUPTIAPI next_record(uint8_t*, size_t, CUpti_Activity**) {
    if (g_script.throw_in_next_record) throw std::runtime_error("fake CUPTI: decoding failed");
    return CUPTI_ERROR_MAX_LIMIT_REACHED;
}

CUptiResult CUPTIAPI dropped_records(CUcontext, uint32_t, size_t* n) { *n = 0; return CUPTI_SUCCESS; }

CUptiResult CUPTIAPI timestamp(uint64_t* t) {
    if (g_script.throw_in_timestamp) throw std::bad_alloc();
    *t = 1;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI finalize() { ++g_calls.finalize; return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI set_attribute(CUpti_ActivityAttribute, size_t*, void*) { return CUPTI_SUCCESS; }

}  // namespace

CuptiApi api(const Script& script) {
    g_script = script;
    g_calls = Calls{};
    g_callback = nullptr;
    g_request = nullptr;
    g_complete = nullptr;
    CuptiApi a;
    a.handle = &g_subscriber_token;  // "loaded"; never passed to dlclose
    a.path = "fake CUPTI (tests)";
    a.cuptiGetVersion = get_version;
    a.cuptiGetResultString = get_result_string;
    a.cuptiSubscribe = subscribe;
    a.cuptiUnsubscribe = unsubscribe;
    a.cuptiEnableCallback = enable_callback;
    a.cuptiEnableDomain = enable_domain;
    a.cuptiGetCallbackName = callback_name;
    a.cuptiActivityEnable = activity_enable;
    a.cuptiActivityDisable = activity_disable;
    a.cuptiActivityRegisterCallbacks = register_callbacks;
    a.cuptiActivityFlushAll = flush_all;
    a.cuptiActivityGetNextRecord = next_record;
    a.cuptiActivityGetNumDroppedRecords = dropped_records;
    a.cuptiGetTimestamp = timestamp;
    a.cuptiFinalize = finalize;
    a.cuptiActivitySetAttribute = set_attribute;
    return a;
}

const Calls& calls() { return g_calls; }
CUpti_CallbackFunc registered_callback() { return g_callback; }
CUpti_BuffersCallbackRequestFunc registered_request() { return g_request; }
CUpti_BuffersCallbackCompleteFunc registered_complete() { return g_complete; }

}  // namespace hookmagic::fake
