#include "counters.h"

#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cupti_loader.h"
#include "session.h"

namespace hookmagic {

// What a host object points into: CUPTI keeps the chip name and the counter availability
// image by pointer, so both must outlive the object.
struct HostInputs {
    std::string chip;
    std::vector<uint8_t> availability;
};

namespace {

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
};

ProfilerApi& api(const CuptiApi& cupti) {
    static ProfilerApi p;
    if (!cupti.loaded()) throw CaptureError(-1, "CUPTI is not loaded");
    if (p.handle == cupti.handle) return p;
    ProfilerApi fresh;
#define HM_RESOLVE(name)                                                                    \
    fresh.name = reinterpret_cast<decltype(fresh.name)>(dlsym(cupti.handle, #name));        \
    if (!fresh.name)                                                                        \
        throw CaptureError(-1, "CUPTI at " + cupti.path + " lacks " #name                   \
                               " (hardware counters need CUPTI 12.6 or newer)");
    HM_PROFILER_FUNCTIONS(HM_RESOLVE)
#undef HM_RESOLVE
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!cuda) cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) throw CaptureError(-3, "no CUDA driver (libcuda.so.1) in this process");
#define HM_DRIVER(field, symbol)                                                            \
    fresh.field = reinterpret_cast<decltype(fresh.field)>(dlsym(cuda, symbol));             \
    if (!fresh.field) throw CaptureError(-3, "the CUDA driver lacks " symbol);
    HM_DRIVER(cuInit, "cuInit")
    HM_DRIVER(cuCtxGetCurrent, "cuCtxGetCurrent")
    HM_DRIVER(cuCtxSetCurrent, "cuCtxSetCurrent")
    HM_DRIVER(cuCtxGetDevice, "cuCtxGetDevice")
    HM_DRIVER(cuCtxSynchronize, "cuCtxSynchronize")
    HM_DRIVER(cuDeviceGet, "cuDeviceGet")
    HM_DRIVER(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
#undef HM_DRIVER
    fresh.handle = cupti.handle;
    p = fresh;
    return p;
}

void check(const CuptiApi& cupti, CUptiResult r, const char* what) {
    if (r != CUPTI_SUCCESS)
        throw CaptureError(static_cast<int>(r), std::string(what) + ": " + cupti.error_string(r));
}

// HOOKMAGIC_COUNTERS_TRACE=1: each profiler call of start/stop named on stderr before it is
// made (a crash inside CUPTI then shows where).
void trace(const char* what) {
    static const bool on = [] {
        const char* v = std::getenv("HOOKMAGIC_COUNTERS_TRACE");
        return v && *v && *v != '0';
    }();
    if (on) std::fprintf(stderr, "hookmagic counters: %s\n", what);
}

// The current context, else the primary context of device 0 made current (what the CUDA
// runtime would use).
CUcontext current_context(ProfilerApi& p) {
    CUcontext ctx = nullptr;
    if (p.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx) return ctx;
    CUdevice dev = 0;
    if (p.cuInit(0) != CUDA_SUCCESS || p.cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        p.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || !ctx ||
        p.cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        throw CaptureError(-3, "no CUDA device could be opened for counting");
    return ctx;
}

std::vector<uint8_t> counter_availability(const CuptiApi& cupti, ProfilerApi& p, CUcontext ctx) {
    CUpti_Profiler_GetCounterAvailability_Params a{CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
    a.ctx = ctx;
    check(cupti, p.cuptiProfilerGetCounterAvailability(&a), "cuptiProfilerGetCounterAvailability");
    std::vector<uint8_t> image(a.counterAvailabilityImageSize);
    a.pCounterAvailabilityImage = image.data();
    check(cupti, p.cuptiProfilerGetCounterAvailability(&a), "cuptiProfilerGetCounterAvailability");
    return image;
}

// A host object for the chip of `ctx`'s device; the caller deinitialises it, and keeps
// `inputs` alive until then.
CUpti_Profiler_Host_Object* host_object(const CuptiApi& cupti, ProfilerApi& p, CUcontext ctx,
                                        HostInputs& inputs) {
    CUdevice dev = 0;
    if (p.cuCtxGetDevice(&dev) != CUDA_SUCCESS) dev = 0;
    CUpti_Device_GetChipName_Params c{CUpti_Device_GetChipName_Params_STRUCT_SIZE};
    c.deviceIndex = static_cast<size_t>(dev);
    check(cupti, p.cuptiDeviceGetChipName(&c), "cuptiDeviceGetChipName");
    inputs.chip = c.pChipName ? c.pChipName : "";
    inputs.availability = counter_availability(cupti, p, ctx);
    CUpti_Profiler_Host_Initialize_Params h{CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
    h.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    h.pChipName = inputs.chip.c_str();
    h.pCounterAvailabilityImage = inputs.availability.data();
    check(cupti, p.cuptiProfilerHostInitialize(&h), "cuptiProfilerHostInitialize");
    return h.pHostObject;
}

void host_free(ProfilerApi& p, CUpti_Profiler_Host_Object* host) noexcept {
    if (!host) return;
    CUpti_Profiler_Host_Deinitialize_Params d{CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
    d.pHostObject = host;
    p.cuptiProfilerHostDeinitialize(&d);
}

// Once per process and per loaded CUPTI, never undone, so every capture with counters (and
// every metric query) uses the same profiler interface rather than tearing it down and
// building it again between captures.
void profiler_init(const CuptiApi& cupti, ProfilerApi& p) {
    static void* initialized_for = nullptr;
    if (initialized_for == p.handle) return;
    CUpti_Profiler_Initialize_Params i{CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
    check(cupti, p.cuptiProfilerInitialize(&i), "cuptiProfilerInitialize");
    initialized_for = p.handle;
}

// A host object made and freed around one query.
template <class F>
auto with_host(const CuptiApi& cupti, F&& body) {
    ProfilerApi& p = api(cupti);
    CUcontext ctx = current_context(p);
    profiler_init(cupti, p);
    CUpti_Profiler_Host_Object* host = nullptr;
    HostInputs inputs;
    try {
        host = host_object(cupti, p, ctx, inputs);
        auto out = body(p, host, inputs.chip);
        host_free(p, host);
        return out;
    } catch (...) {
        host_free(p, host);
        throw;
    }
}

}  // namespace

RangeCounters& RangeCounters::instance() {
    static RangeCounters c;
    return c;
}

std::string RangeCounters::chip_name(const CuptiApi& cupti) {
    return with_host(cupti, [](ProfilerApi&, CUpti_Profiler_Host_Object*, const std::string& chip) {
        return chip;
    });
}

std::vector<std::string> RangeCounters::supported_metrics(const CuptiApi& cupti) {
    return with_host(cupti, [&](ProfilerApi& p, CUpti_Profiler_Host_Object* host, const std::string&) {
        std::vector<std::string> names;
        for (int type = 0; type < CUPTI_METRIC_TYPE__COUNT; ++type) {
            CUpti_Profiler_Host_GetBaseMetrics_Params b{CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE};
            b.pHostObject = host;
            b.metricType = static_cast<CUpti_MetricType>(type);
            check(cupti, p.cuptiProfilerHostGetBaseMetrics(&b), "cuptiProfilerHostGetBaseMetrics");
            for (size_t i = 0; i < b.numMetrics; ++i) {
                CUpti_Profiler_Host_GetSubMetrics_Params s{CUpti_Profiler_Host_GetSubMetrics_Params_STRUCT_SIZE};
                s.pHostObject = host;
                s.metricType = b.metricType;
                s.pMetricName = b.ppMetricNames[i];
                if (p.cuptiProfilerHostGetSubMetrics(&s) != CUPTI_SUCCESS || !s.numOfSubmetrics) {
                    names.emplace_back(b.ppMetricNames[i]);
                    continue;
                }
                for (size_t j = 0; j < s.numOfSubmetrics; ++j)
                    names.push_back(std::string(b.ppMetricNames[i]) + s.ppSubMetrics[j]);
            }
        }
        return names;
    });
}

std::vector<std::string> RangeCounters::unknown_metrics(const CuptiApi& cupti,
                                                        const std::vector<std::string>& metrics) {
    return with_host(cupti, [&](ProfilerApi& p, CUpti_Profiler_Host_Object* host, const std::string&) {
        std::vector<std::string> unknown;
        for (const auto& name : metrics) {
            CUpti_Profiler_Host_GetMetricProperties_Params m{CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE};
            m.pHostObject = host;
            m.pMetricName = name.c_str();
            if (p.cuptiProfilerHostGetMetricProperties(&m) != CUPTI_SUCCESS) unknown.push_back(name);
        }
        return unknown;
    });
}

void RangeCounters::start(const CuptiApi& cupti, const std::vector<std::string>& metrics,
                          size_t max_ranges) {
    if (running()) throw CaptureError(-2, "hardware counters are already being collected");
    if (metrics.empty()) throw CaptureError(-2, "no metrics to count");
    ProfilerApi& p = api(cupti);
    CUcontext ctx = current_context(p);
    cupti_ = &cupti;
    context_ = ctx;
    metrics_ = metrics;
    std::vector<const char*> names;
    for (const auto& m : metrics_) names.push_back(m.c_str());
    try {
        profiler_init(cupti, p);
        host_inputs_ = std::make_shared<HostInputs>();
        trace("host object");
        auto* host = host_object(cupti, p, ctx, *host_inputs_);
        host_ = host;
        CUpti_Profiler_Host_ConfigAddMetrics_Params add{CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
        add.pHostObject = host;
        add.ppMetricNames = names.data();
        add.numMetrics = names.size();
        trace("cuptiProfilerHostConfigAddMetrics");
        check(cupti, p.cuptiProfilerHostConfigAddMetrics(&add), "cuptiProfilerHostConfigAddMetrics");
        CUpti_Profiler_Host_GetConfigImageSize_Params size{CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
        size.pHostObject = host;
        trace("cuptiProfilerHostGetConfigImageSize");
        check(cupti, p.cuptiProfilerHostGetConfigImageSize(&size), "cuptiProfilerHostGetConfigImageSize");
        config_image_.assign(size.configImageSize, 0);
        CUpti_Profiler_Host_GetConfigImage_Params image{CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
        image.pHostObject = host;
        image.configImageSize = config_image_.size();
        image.pConfigImage = config_image_.data();
        trace("cuptiProfilerHostGetConfigImage");
        check(cupti, p.cuptiProfilerHostGetConfigImage(&image), "cuptiProfilerHostGetConfigImage");
        CUpti_Profiler_Host_GetNumOfPasses_Params passes{CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
        passes.configImageSize = config_image_.size();
        passes.pConfigImage = config_image_.data();
        trace("cuptiProfilerHostGetNumOfPasses");
        check(cupti, p.cuptiProfilerHostGetNumOfPasses(&passes), "cuptiProfilerHostGetNumOfPasses");
        passes_ = passes.numOfPasses;

        CUpti_RangeProfiler_Enable_Params enable{CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
        enable.ctx = ctx;
        trace("cuptiRangeProfilerEnable");
        check(cupti, p.cuptiRangeProfilerEnable(&enable), "cuptiRangeProfilerEnable");
        range_profiler_ = enable.pRangeProfilerObject;

        CUpti_RangeProfiler_GetCounterDataSize_Params data_size{CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
        data_size.pRangeProfilerObject = enable.pRangeProfilerObject;
        data_size.pMetricNames = names.data();
        data_size.numMetrics = names.size();
        data_size.maxNumOfRanges = max_ranges;
        data_size.maxNumRangeTreeNodes = static_cast<uint32_t>(max_ranges);
        trace("cuptiRangeProfilerGetCounterDataSize");
        check(cupti, p.cuptiRangeProfilerGetCounterDataSize(&data_size), "cuptiRangeProfilerGetCounterDataSize");
        counter_data_.assign(data_size.counterDataSize, 0);
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
        init.pRangeProfilerObject = enable.pRangeProfilerObject;
        init.counterDataSize = counter_data_.size();
        init.pCounterData = counter_data_.data();
        trace("cuptiRangeProfilerCounterDataImageInitialize");
        check(cupti, p.cuptiRangeProfilerCounterDataImageInitialize(&init),
              "cuptiRangeProfilerCounterDataImageInitialize");

        CUpti_RangeProfiler_SetConfig_Params config{CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
        config.pRangeProfilerObject = enable.pRangeProfilerObject;
        config.configSize = config_image_.size();
        config.pConfig = config_image_.data();
        config.counterDataImageSize = counter_data_.size();
        config.pCounterDataImage = counter_data_.data();
        config.range = CUPTI_AutoRange;
        config.replayMode = CUPTI_KernelReplay;
        config.maxRangesPerPass = max_ranges;
        config.numNestingLevels = 1;
        config.minNestingLevel = 1;
        config.passIndex = 0;
        config.targetNestingLevel = 1;
        trace("cuptiRangeProfilerSetConfig");
        check(cupti, p.cuptiRangeProfilerSetConfig(&config), "cuptiRangeProfilerSetConfig");
        CUpti_RangeProfiler_Start_Params go{CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
        go.pRangeProfilerObject = enable.pRangeProfilerObject;
        trace("cuptiRangeProfilerStart");
        check(cupti, p.cuptiRangeProfilerStart(&go), "cuptiRangeProfilerStart");
    } catch (...) {
        release();
        throw;
    }
}

CounterRows RangeCounters::stop() {
    CounterRows rows;
    if (!running()) return rows;
    auto t0 = std::chrono::steady_clock::now();
    const CuptiApi& cupti = *cupti_;
    ProfilerApi& p = api(cupti);
    auto* object = static_cast<CUpti_RangeProfiler_Object*>(range_profiler_);
    auto* host = static_cast<CUpti_Profiler_Host_Object*>(host_);
    try {
        p.cuCtxSynchronize();
        CUpti_RangeProfiler_Stop_Params halt{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
        halt.pRangeProfilerObject = object;
        trace("cuptiRangeProfilerStop");
        check(cupti, p.cuptiRangeProfilerStop(&halt), "cuptiRangeProfilerStop");
        CUpti_RangeProfiler_DecodeData_Params decode{CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
        decode.pRangeProfilerObject = object;
        trace("cuptiRangeProfilerDecodeData");
        check(cupti, p.cuptiRangeProfilerDecodeData(&decode), "cuptiRangeProfilerDecodeData");
        rows.dropped = decode.numOfRangeDropped;
        CUpti_RangeProfiler_GetCounterDataInfo_Params info{CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
        info.pCounterDataImage = counter_data_.data();
        info.counterDataImageSize = counter_data_.size();
        trace("cuptiRangeProfilerGetCounterDataInfo");
        check(cupti, p.cuptiRangeProfilerGetCounterDataInfo(&info), "cuptiRangeProfilerGetCounterDataInfo");
        rows.ranges = info.numTotalRanges;
        std::vector<const char*> names;
        for (const auto& m : metrics_) names.push_back(m.c_str());
        std::vector<double> values(names.size());
        for (size_t r = 0; r < info.numTotalRanges; ++r) {
            CUpti_RangeProfiler_CounterData_GetRangeInfo_Params range{CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE};
            range.pCounterDataImage = counter_data_.data();
            range.counterDataImageSize = counter_data_.size();
            range.rangeIndex = r;
            range.rangeDelimiter = "/";
            std::string name;
            if (p.cuptiRangeProfilerCounterDataGetRangeInfo(&range) == CUPTI_SUCCESS && range.rangeName)
                name = range.rangeName;
            CUpti_Profiler_Host_EvaluateToGpuValues_Params eval{CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
            eval.pHostObject = host;
            eval.pCounterDataImage = counter_data_.data();
            eval.counterDataImageSize = counter_data_.size();
            eval.rangeIndex = r;
            eval.ppMetricNames = names.data();
            eval.numMetrics = names.size();
            eval.pMetricValues = values.data();
            trace("cuptiProfilerHostEvaluateToGpuValues");
            check(cupti, p.cuptiProfilerHostEvaluateToGpuValues(&eval), "cuptiProfilerHostEvaluateToGpuValues");
            for (size_t m = 0; m < names.size(); ++m) {
                rows.range_index.push_back(static_cast<int64_t>(r));
                rows.range_name.push_back(name);
                rows.metric.push_back(metrics_[m]);
                rows.value.push_back(values[m]);
            }
        }
    } catch (...) {
        release();
        throw;
    }
    release();
    rows.decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rows;
}

void RangeCounters::release() noexcept {
    if (!cupti_) return;
    ProfilerApi* p = nullptr;
    try {
        p = &api(*cupti_);
    } catch (...) {
        return;
    }
    if (range_profiler_) {
        CUpti_RangeProfiler_Disable_Params d{CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
        d.pRangeProfilerObject = static_cast<CUpti_RangeProfiler_Object*>(range_profiler_);
        p->cuptiRangeProfilerDisable(&d);
        range_profiler_ = nullptr;
    }
    host_free(*p, static_cast<CUpti_Profiler_Host_Object*>(host_));
    host_ = nullptr;
    host_inputs_.reset();
    counter_data_.clear();
    config_image_.clear();
}

}  // namespace hookmagic
