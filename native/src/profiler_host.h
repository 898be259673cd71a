// The pieces of CUPTI's profiler shared by the range profiler (counters.cpp) and PM sampling
// (pm_sampling.cpp): the profiler functions resolved from the CUPTI the session loaded, the
// host API objects that turn metric names into config images and evaluate counter data.
// Defined in counters.cpp.
#pragma once

#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <cupti_checkpoint.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cupti_loader.h"

namespace hookmagic {

// What a host object points into: CUPTI keeps the chip name and the counter availability
// image by pointer, so both must outlive the object.
struct HostInputs {
    std::string chip;
    std::vector<uint8_t> availability;
};

namespace prof {

#define HM_PROFILER_FUNCTIONS(X)                                                             \
    X(cuptiProfilerInitialize) X(cuptiDeviceGetChipName)                                    \
    X(cuptiProfilerGetCounterAvailability) X(cuptiProfilerHostInitialize)                   \
    X(cuptiProfilerHostDeinitialize) X(cuptiProfilerHostGetBaseMetrics)                     \
    X(cuptiProfilerHostGetSubMetrics) X(cuptiProfilerHostGetMetricProperties)               \
    X(cuptiProfilerHostConfigAddMetrics) X(cuptiProfilerHostGetConfigImageSize)             \
    X(cuptiProfilerHostGetConfigImage) X(cuptiProfilerHostGetNumOfPasses)                   \
    X(cuptiProfilerHostEvaluateToGpuValues) X(cuptiRangeProfilerEnable)                     \
    X(cuptiRangeProfilerDisable) X(cuptiRangeProfilerSetConfig) X(cuptiRangeProfilerStart)  \
    X(cuptiRangeProfilerStop) X(cuptiRangeProfilerDecodeData)                               \
    X(cuptiRangeProfilerGetCounterDataSize) X(cuptiRangeProfilerCounterDataImageInitialize) \
    X(cuptiRangeProfilerGetCounterDataInfo) X(cuptiRangeProfilerCounterDataGetRangeInfo)

// The profiler half of CUPTI, resolved once from the library the session loaded.
struct ProfilerApi {
    void* handle = nullptr;
#define HM_DECLARE(name) decltype(&::name) name = nullptr;
    HM_PROFILER_FUNCTIONS(HM_DECLARE)
#undef HM_DECLARE
    // Driver functions for the context to profile.
    CUresult (*cuInit)(unsigned int) = nullptr;
    CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
    CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
    CUresult (*cuCtxGetDevice)(CUdevice*) = nullptr;
    CUresult (*cuCtxSynchronize)() = nullptr;
    CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
    // What Replay::user needs besides (resolved by user_api()).
    using Checkpoint = NV::Cupti::Checkpoint::CUpti_Checkpoint;
    CUptiResult (*cuptiCheckpointSave)(Checkpoint*) = nullptr;
    CUptiResult (*cuptiCheckpointRestore)(Checkpoint*) = nullptr;
    CUptiResult (*cuptiCheckpointFree)(Checkpoint*) = nullptr;
    CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
    CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
    CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
    CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t) = nullptr;
    CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
    CUresult (*cuModuleUnload)(CUmodule) = nullptr;
    CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void**, void**) = nullptr;
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
    CUresult (*cuLaunchCooperativeKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                          unsigned, unsigned, unsigned, CUstream, void**) = nullptr;
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
    bool user_resolved = false;
};

// The profiler functions of `cupti` (resolved on first use). Throws CaptureError (-1: a
// function is missing; -3: no CUDA driver).
ProfilerApi& api(const CuptiApi& cupti);
// Throws CaptureError(r, what + CUPTI's message) unless r is CUPTI_SUCCESS.
void check(const CuptiApi& cupti, CUptiResult r, const char* what);
// HOOKMAGIC_COUNTERS_TRACE=1: each profiler call named on stderr before it is made.
void trace(const char* what);
// The current context, else device 0's primary context made current.
CUcontext current_context(ProfilerApi& p);
// cuptiProfilerInitialize, once per process and loaded CUPTI.
void profiler_init(const CuptiApi& cupti, ProfilerApi& p);
// The chip name of CUDA device `device` ("GH100").
std::string device_chip(const CuptiApi& cupti, ProfilerApi& p, size_t device);
// A host object of `type` for inputs.chip with inputs.availability; the caller keeps `inputs`
// alive until host_free.
CUpti_Profiler_Host_Object* host_initialize(const CuptiApi& cupti, ProfilerApi& p,
                                            CUpti_ProfilerType type, const HostInputs& inputs);
void host_free(ProfilerApi& p, CUpti_Profiler_Host_Object* host) noexcept;
// The config image of `metrics` on `host` (metrics added to it), and its replay passes.
std::vector<uint8_t> config_image(const CuptiApi& cupti, ProfilerApi& p,
                                  CUpti_Profiler_Host_Object* host,
                                  const std::vector<std::string>& metrics, size_t* passes);
// Every metric name `host` knows: each base metric with each of its submetrics (or alone).
std::vector<std::string> host_metric_names(const CuptiApi& cupti, ProfilerApi& p,
                                           CUpti_Profiler_Host_Object* host);
// Those of `metrics` that `host` does not know.
std::vector<std::string> host_unknown_metrics(ProfilerApi& p, CUpti_Profiler_Host_Object* host,
                                              const std::vector<std::string>& metrics);

}  // namespace prof
}  // namespace hookmagic
