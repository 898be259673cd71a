// Run-time binding to libcupti and libcuda.
//
// The extension links neither library: `import hookmagic` must work on machines with no GPU,
// no driver and no CUPTI, and the CUPTI that matches the process (the one PyTorch already
// loaded, say) is only known at run time. Every entry point is resolved with dlsym.
#pragma once

#include <cupti.h>
#include <string>

namespace hookmagic {

struct CuptiApi {
    void* handle = nullptr;
    std::string path;

#define HM_CUPTI_FUNCTIONS(X)                                                      \
    X(cuptiGetVersion) X(cuptiGetResultString) X(cuptiSubscribe) X(cuptiUnsubscribe)   \
    X(cuptiEnableCallback) X(cuptiEnableDomain) X(cuptiGetCallbackName)                \
    X(cuptiActivityEnable) X(cuptiActivityDisable) X(cuptiActivityRegisterCallbacks)   \
    X(cuptiActivityFlushAll) X(cuptiActivityGetNextRecord)                             \
    X(cuptiActivityGetNumDroppedRecords) X(cuptiGetTimestamp) X(cuptiFinalize)             \
    X(cuptiActivitySetAttribute) X(cuptiGetGraphNodeId)

#define HM_DECLARE(name) decltype(&::name) name = nullptr;
    HM_CUPTI_FUNCTIONS(HM_DECLARE)
    // Optional: only CUPTI 12.8+ has it, and only Blackwell GPUs accept it.
    decltype(&::cuptiActivityEnableHWTrace) cuptiActivityEnableHWTrace = nullptr;
    // Optional: stream ids for synchronisation rows recorded from callbacks.
    decltype(&::cuptiGetStreamIdEx) cuptiGetStreamIdEx = nullptr;
#undef HM_DECLARE

    // Opens `library_path` and resolves every function; on failure returns a message and
    // leaves the object unloaded.
    std::string load(const std::string& library_path);
    bool loaded() const { return handle != nullptr; }
    std::string error_string(CUptiResult result) const;
};

// The few driver functions used outside CUPTI: device properties, and one harmless call that
// gives CUPTI the API-exit callsite it wants for a safe detach.
struct DriverApi {
    void* handle = nullptr;
    CUresult (*cuInit)(unsigned int) = nullptr;
    CUresult (*cuDriverGetVersion)(int*) = nullptr;
    CUresult (*cuDeviceGetCount)(int*) = nullptr;
    CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
    CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
    CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
    CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;
    // Optional (may be null): the GPU's UUID, which tells ranks' GPUs apart across processes.
    CUresult (*cuDeviceGetUuid)(CUuuid*, CUdevice) = nullptr;

    // Binds to libcuda only if the process already loaded it (we never initialise CUDA for
    // the user); returns false otherwise.
    bool bind_if_loaded();
};

}  // namespace hookmagic
