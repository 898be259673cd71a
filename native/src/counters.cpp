#include "counters.h"

#include <cupti.h>
#include <cupti_checkpoint.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "cupti_loader.h"
#include "profiler_host.h"
#include "session.h"

namespace hookmagic {

// The profiler pieces shared with PM sampling (declared in profiler_host.h).
namespace prof {

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

// The checkpoint and driver functions of Replay::user, resolved on first use.
ProfilerApi& user_api(const CuptiApi& cupti) {
    ProfilerApi& p = api(cupti);
    if (p.user_resolved) return p;
    // CUPTI's checkpoint API is its own library, shipped beside libcupti.
    const auto slash = cupti.path.rfind('/');
    const std::string beside =
        (slash == std::string::npos ? std::string() : cupti.path.substr(0, slash + 1)) + "libcheckpoint.so";
    void* checkpoint = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!checkpoint) checkpoint = dlopen("libcheckpoint.so", RTLD_NOW | RTLD_LOCAL);
    if (!checkpoint)
        throw CaptureError(-1, "user replay needs CUPTI's checkpoint library (" + beside + ")");
#define HM_CHECKPOINT(name)                                                                 \
    p.name = reinterpret_cast<decltype(p.name)>(dlsym(checkpoint, #name));                  \
    if (!p.name) throw CaptureError(-1, beside + " lacks " #name);
    HM_CHECKPOINT(cuptiCheckpointSave)
    HM_CHECKPOINT(cuptiCheckpointRestore)
    HM_CHECKPOINT(cuptiCheckpointFree)
#undef HM_CHECKPOINT
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) throw CaptureError(-3, "no CUDA driver (libcuda.so.1) in this process");
#define HM_DRIVER(field, symbol)                                                            \
    p.field = reinterpret_cast<decltype(p.field)>(dlsym(cuda, symbol));                     \
    if (!p.field) throw CaptureError(-3, "the CUDA driver lacks " symbol);
    HM_DRIVER(cuDeviceGetAttribute, "cuDeviceGetAttribute")
    HM_DRIVER(cuMemAlloc, "cuMemAlloc_v2")
    HM_DRIVER(cuMemFree, "cuMemFree_v2")
    HM_DRIVER(cuMemsetD8, "cuMemsetD8_v2")
    HM_DRIVER(cuModuleLoadData, "cuModuleLoadData")
    HM_DRIVER(cuModuleUnload, "cuModuleUnload")
    HM_DRIVER(cuModuleGetFunction, "cuModuleGetFunction")
    HM_DRIVER(cuLaunchKernel, "cuLaunchKernel")
    HM_DRIVER(cuLaunchKernelEx, "cuLaunchKernelEx")
    HM_DRIVER(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel")
    HM_DRIVER(cuStreamIsCapturing, "cuStreamIsCapturing")
#undef HM_DRIVER
    p.user_resolved = true;
    return p;
}

void check(const CuptiApi& cupti, CUptiResult r, const char* what) {
    if (r != CUPTI_SUCCESS)
        throw CaptureError(static_cast<int>(r), std::string(what) + ": " + cupti.error_string(r));
}

// HOOKMAGIC_COUNTERS_TRACE=1: each profiler call of start/stop named on stderr before it is
// made (a crash inside CUPTI then shows where).
bool tracing() {
    static const bool on = [] {
        const char* v = std::getenv("HOOKMAGIC_COUNTERS_TRACE");
        return v && *v && *v != '0';
    }();
    return on;
}

void trace(const char* what) {
    if (tracing()) std::fprintf(stderr, "hookmagic counters: %s\n", what);
}

void trace(const char* what, size_t n) {
    if (tracing()) std::fprintf(stderr, "hookmagic counters: %s %zu\n", what, n);
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

std::string device_chip(const CuptiApi& cupti, ProfilerApi& p, size_t device) {
    CUpti_Device_GetChipName_Params c{CUpti_Device_GetChipName_Params_STRUCT_SIZE};
    c.deviceIndex = device;
    check(cupti, p.cuptiDeviceGetChipName(&c), "cuptiDeviceGetChipName");
    return c.pChipName ? c.pChipName : "";
}

CUpti_Profiler_Host_Object* host_initialize(const CuptiApi& cupti, ProfilerApi& p,
                                            CUpti_ProfilerType type, const HostInputs& inputs) {
    CUpti_Profiler_Host_Initialize_Params h{CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
    h.profilerType = type;
    h.pChipName = inputs.chip.c_str();
    h.pCounterAvailabilityImage = inputs.availability.data();
    check(cupti, p.cuptiProfilerHostInitialize(&h), "cuptiProfilerHostInitialize");
    return h.pHostObject;
}

// A range-profiler host object for the chip of `ctx`'s device; the caller deinitialises it,
// and keeps `inputs` alive until then.
CUpti_Profiler_Host_Object* host_object(const CuptiApi& cupti, ProfilerApi& p, CUcontext ctx,
                                        HostInputs& inputs) {
    CUdevice dev = 0;
    if (p.cuCtxGetDevice(&dev) != CUDA_SUCCESS) dev = 0;
    inputs.chip = device_chip(cupti, p, static_cast<size_t>(dev));
    inputs.availability = counter_availability(cupti, p, ctx);
    return host_initialize(cupti, p, CUPTI_PROFILER_TYPE_RANGE_PROFILER, inputs);
}

std::vector<uint8_t> config_image(const CuptiApi& cupti, ProfilerApi& p,
                                  CUpti_Profiler_Host_Object* host,
                                  const std::vector<std::string>& metrics, size_t* passes) {
    std::vector<const char*> names;
    for (const auto& m : metrics) names.push_back(m.c_str());
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
    std::vector<uint8_t> out(size.configImageSize, 0);
    CUpti_Profiler_Host_GetConfigImage_Params image{CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
    image.pHostObject = host;
    image.configImageSize = out.size();
    image.pConfigImage = out.data();
    trace("cuptiProfilerHostGetConfigImage");
    check(cupti, p.cuptiProfilerHostGetConfigImage(&image), "cuptiProfilerHostGetConfigImage");
    CUpti_Profiler_Host_GetNumOfPasses_Params n{CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
    n.configImageSize = out.size();
    n.pConfigImage = out.data();
    trace("cuptiProfilerHostGetNumOfPasses");
    check(cupti, p.cuptiProfilerHostGetNumOfPasses(&n), "cuptiProfilerHostGetNumOfPasses");
    if (passes) *passes = n.numOfPasses;
    return out;
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

std::vector<std::string> host_metric_names(const CuptiApi& cupti, ProfilerApi& p,
                                           CUpti_Profiler_Host_Object* host) {
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
}

std::vector<std::string> host_unknown_metrics(ProfilerApi& p, CUpti_Profiler_Host_Object* host,
                                              const std::vector<std::string>& metrics) {
    std::vector<std::string> unknown;
    for (const auto& name : metrics) {
        CUpti_Profiler_Host_GetMetricProperties_Params m{CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE};
        m.pHostObject = host;
        m.pMetricName = name.c_str();
        if (p.cuptiProfilerHostGetMetricProperties(&m) != CUPTI_SUCCESS) unknown.push_back(name);
    }
    return unknown;
}

}  // namespace prof

using namespace prof;

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
        return host_metric_names(cupti, p, host);
    });
}

std::vector<std::string> RangeCounters::unknown_metrics(const CuptiApi& cupti,
                                                        const std::vector<std::string>& metrics) {
    return with_host(cupti, [&](ProfilerApi& p, CUpti_Profiler_Host_Object* host, const std::string&) {
        return host_unknown_metrics(p, host, metrics);
    });
}

// The host object, the config image and the passes of metrics_ on `ctx`.
void RangeCounters::setup_host(const CuptiApi& cupti, void* context) {
    ProfilerApi& p = api(cupti);
    auto ctx = static_cast<CUcontext>(context);
    profiler_init(cupti, p);
    host_inputs_ = std::make_shared<HostInputs>();
    trace("host object");
    auto* host = host_object(cupti, p, ctx, *host_inputs_);
    host_ = host;
    config_image_ = config_image(cupti, p, host, metrics_, &passes_);
}

void RangeCounters::start(const CuptiApi& cupti, const std::vector<std::string>& metrics,
                          size_t max_ranges, Replay replay, void* subscriber) {
    if (running()) throw CaptureError(-2, "hardware counters are already being collected");
    if (metrics.empty()) throw CaptureError(-2, "no metrics to count");
    ProfilerApi& p = api(cupti);
    CUcontext ctx = current_context(p);
    cupti_ = &cupti;
    context_ = ctx;
    metrics_ = metrics;
    replay_ = replay;
    std::vector<const char*> names;
    for (const auto& m : metrics_) names.push_back(m.c_str());
    try {
        setup_host(cupti, ctx);
        if (replay == Replay::user) {
            start_user(subscriber, max_ranges);
            return;
        }
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

// Every range of counter_data_ as rows, numbered from `first_index` (`name_override`, when
// not empty, names them).
void RangeCounters::evaluate_into(CounterRows& rows, int64_t first_index,
                                  const std::string& name_override) {
    const CuptiApi& cupti = *cupti_;
    ProfilerApi& p = api(cupti);
    auto* host = static_cast<CUpti_Profiler_Host_Object*>(host_);
    CUpti_RangeProfiler_GetCounterDataInfo_Params info{CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
    info.pCounterDataImage = counter_data_.data();
    info.counterDataImageSize = counter_data_.size();
    check(cupti, p.cuptiRangeProfilerGetCounterDataInfo(&info), "cuptiRangeProfilerGetCounterDataInfo");
    std::vector<const char*> names;
    for (const auto& m : metrics_) names.push_back(m.c_str());
    std::vector<double> values(names.size());
    for (size_t r = 0; r < info.numTotalRanges; ++r) {
        std::string name = name_override;
        if (name.empty()) {
            CUpti_RangeProfiler_CounterData_GetRangeInfo_Params range{CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE};
            range.pCounterDataImage = counter_data_.data();
            range.counterDataImageSize = counter_data_.size();
            range.rangeIndex = r;
            range.rangeDelimiter = "/";
            if (p.cuptiRangeProfilerCounterDataGetRangeInfo(&range) == CUPTI_SUCCESS && range.rangeName)
                name = range.rangeName;
        }
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
            rows.range_index.push_back(first_index + static_cast<int64_t>(r));
            rows.range_name.push_back(name);
            rows.metric.push_back(metrics_[m]);
            rows.value.push_back(values[m]);
        }
    }
}

CounterRows RangeCounters::stop() {
    CounterRows rows;
    if (!running()) return rows;
    if (user_) return stop_user();
    auto t0 = std::chrono::steady_clock::now();
    const CuptiApi& cupti = *cupti_;
    ProfilerApi& p = api(cupti);
    auto* object = static_cast<CUpti_RangeProfiler_Object*>(range_profiler_);
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
        evaluate_into(rows, 0, "");
        rows.ranges = info.numTotalRanges;
    } catch (...) {
        release();
        throw;
    }
    release();
    rows.decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rows;
}

// ---- Replay::user -----------------------------------------------------------------------

namespace {

// Two kernels for the L2 flush before each pass, as PTX for the driver to compile (any GPU
// CUPTI's range profiler supports): hm_l2_write stores zeros over one scratch buffer, which
// evicts every line of the program's data (writing back the dirty ones); hm_l2_read then reads
// another (kFlushReads times), whose clean lines evict the first buffer's dirty ones. Both
// buffers are twice the L2 size. The read's sum is stored only if non-zero, which the zeroed
// buffer never is (the store keeps the loads from being optimised away).
const char kFlushPtx[] = R"(
.version 6.0
.target sm_50
.address_size 64

.visible .entry hm_l2_write(.param .u64 buf, .param .u64 n, .param .u64 sink)
{
    .reg .pred p;
    .reg .b32 r<6>;
    .reg .b64 rd<9>;
    ld.param.u64 rd1, [buf];
    ld.param.u64 rd2, [n];
    cvta.to.global.u64 rd1, rd1;
    mov.u32 r1, %ctaid.x;
    mov.u32 r2, %ntid.x;
    mov.u32 r3, %tid.x;
    mov.u32 r4, %nctaid.x;
    mul.wide.u32 rd3, r1, r2;
    cvt.u64.u32 rd4, r3;
    add.u64 rd3, rd3, rd4;
    mul.wide.u32 rd5, r4, r2;
    mov.u32 r5, 0;
WLOOP:
    setp.ge.u64 p, rd3, rd2;
    @p bra WDONE;
    shl.b64 rd6, rd3, 4;
    add.u64 rd7, rd1, rd6;
    st.global.v4.u32 [rd7], {r5, r5, r5, r5};
    add.u64 rd3, rd3, rd5;
    bra WLOOP;
WDONE:
    ret;
}

.visible .entry hm_l2_read(.param .u64 buf, .param .u64 n, .param .u64 sink)
{
    .reg .pred p;
    .reg .b32 r<10>;
    .reg .b64 rd<9>;
    ld.param.u64 rd1, [buf];
    ld.param.u64 rd2, [n];
    ld.param.u64 rd8, [sink];
    cvta.to.global.u64 rd1, rd1;
    cvta.to.global.u64 rd8, rd8;
    mov.u32 r1, %ctaid.x;
    mov.u32 r2, %ntid.x;
    mov.u32 r3, %tid.x;
    mov.u32 r4, %nctaid.x;
    mul.wide.u32 rd3, r1, r2;
    cvt.u64.u32 rd4, r3;
    add.u64 rd3, rd3, rd4;
    mul.wide.u32 rd5, r4, r2;
    mov.u32 r5, 0;
RLOOP:
    setp.ge.u64 p, rd3, rd2;
    @p bra RDONE;
    shl.b64 rd6, rd3, 4;
    add.u64 rd7, rd1, rd6;
    ld.global.cg.v4.u32 {r6, r7, r8, r9}, [rd7];
    xor.b32 r5, r5, r6;
    xor.b32 r5, r5, r7;
    xor.b32 r5, r5, r8;
    xor.b32 r5, r5, r9;
    add.u64 rd3, rd3, rd5;
    bra RLOOP;
RDONE:
    setp.eq.u32 p, r5, 0;
    @p bra REND;
    st.global.u32 [rd8], r5;
REND:
    ret;
}
)";

// How often the flush reads its second buffer. After one read, the replayed kernels still wrote
// back ~0.1 MB of the flush's dirty lines (H200: 0.107 MB for a cuDNN layout transform that
// Nsight Compute, caches flushed, counts 0.002 MB for); after two, 0.000 MB.
constexpr int kFlushReads = 2;

// The most passes one launch is replayed for (a metric set needing more is refused at start).
constexpr size_t kMaxUserPasses = 256;

// Set while this thread runs counting's own work: its callbacks are not the program's.
thread_local bool tl_counting_work = false;

bool is_launch(uint32_t cbid) {
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
        return true;
    default:
        return false;
    }
}

const uint32_t kLaunchCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz};

void drv(CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) throw CaptureError(-4, std::string(what) + " failed (CUresult " +
                                                      std::to_string(static_cast<int>(r)) + ")");
}

}  // namespace

struct UserReplayState {
    CUdeviceptr scratch = 0;      // [write buffer | read buffer], each flush_bytes
    size_t flush_bytes = 0;
    CUdeviceptr sink = 0;
    CUmodule module = nullptr;
    CUfunction write_fn = nullptr;
    CUfunction read_fn = nullptr;
    unsigned blocks = 0;
    CUpti_RangeProfiler_Object* object = nullptr;  // enabled once: CUPTI 13.0 crashed
                                                   // enabling it again after a disable
    ProfilerApi::Checkpoint checkpoint{};
    bool checkpoint_used = false;
    size_t max_ranges = 0;
    int64_t launches = 0;         // launches counted (ranges)
    uint64_t dropped = 0;         // launches over max_ranges
    CounterRows rows;
};

void RangeCounters::start_user(void* subscriber, size_t max_ranges) {
    const CuptiApi& cupti = *cupti_;
    ProfilerApi& p = user_api(cupti);
    if (!subscriber)
        throw CaptureError(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
                           "user replay needs CUPTI's callback API, which another tool holds");
    if (passes_ > kMaxUserPasses) throw CaptureError(-2, "the metric set needs too many passes");
    auto u = std::make_shared<UserReplayState>();
    u->max_ranges = max_ranges;
    CUdevice dev = 0;
    drv(p.cuCtxGetDevice(&dev), "cuCtxGetDevice");
    int l2 = 0, sms = 0;
    drv(p.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev), "cuDeviceGetAttribute");
    drv(p.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
        "cuDeviceGetAttribute");
    u->flush_bytes = (2 * static_cast<size_t>(l2 > 0 ? l2 : (64 << 20)) + 4095) & ~size_t(4095);
    u->blocks = static_cast<unsigned>((sms > 0 ? sms : 80) * 4);
    try {
        drv(p.cuMemAlloc(&u->scratch, 2 * u->flush_bytes), "cuMemAlloc");
        drv(p.cuMemsetD8(u->scratch, 0, 2 * u->flush_bytes), "cuMemsetD8");
        drv(p.cuMemAlloc(&u->sink, 16), "cuMemAlloc");
        drv(p.cuModuleLoadData(&u->module, kFlushPtx), "cuModuleLoadData (L2 flush kernels)");
        drv(p.cuModuleGetFunction(&u->write_fn, u->module, "hm_l2_write"), "cuModuleGetFunction");
        drv(p.cuModuleGetFunction(&u->read_fn, u->module, "hm_l2_read"), "cuModuleGetFunction");
        drv(p.cuCtxSynchronize(), "cuCtxSynchronize");
    } catch (...) {
        if (u->module) p.cuModuleUnload(u->module);
        if (u->scratch) p.cuMemFree(u->scratch);
        if (u->sink) p.cuMemFree(u->sink);
        throw;
    }
    {
        using NV::Cupti::Checkpoint::CUpti_Checkpoint;
        u->checkpoint.structSize = CUpti_Checkpoint_STRUCT_SIZE;
    }
    trace("user replay: armed");
    u->checkpoint.ctx = static_cast<CUcontext>(context_);
    u->checkpoint.allowOverwrite = 1;
    CUpti_RangeProfiler_Enable_Params enable{CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
    enable.ctx = static_cast<CUcontext>(context_);
    trace("cuptiRangeProfilerEnable");
    CUptiResult enabled = p.cuptiRangeProfilerEnable(&enable);
    if (enabled != CUPTI_SUCCESS) {
        p.cuModuleUnload(u->module);
        p.cuMemFree(u->scratch);
        p.cuMemFree(u->sink);
        check(cupti, enabled, "cuptiRangeProfilerEnable");
    }
    u->object = enable.pRangeProfilerObject;
    for (uint32_t cbid : kLaunchCallbacks)
        cupti.cuptiEnableCallback(1, static_cast<CUpti_SubscriberHandle>(subscriber),
                                  CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    {
        std::lock_guard<std::mutex> lock(user_mu_);
        user_ = u;
    }
    user_armed_.store(true);
}

bool RangeCounters::on_driver_callback(uint32_t cbid, const void* callback_data) {
    if (tl_counting_work) return true;
    if (!user_armed_.load(std::memory_order_relaxed) || !is_launch(cbid)) return false;
    const auto* cb = static_cast<const CUpti_CallbackData*>(callback_data);
    if (!cb || cb->callbackSite != CUPTI_API_ENTER) return false;
    std::lock_guard<std::mutex> lock(user_mu_);
    if (!user_) return false;
    tl_counting_work = true;
    replay_launch(cbid, callback_data);
    tl_counting_work = false;
    return false;
}

// One launch counted: see counters.h. Never throws: a launch that cannot be counted is
// skipped (and the program's memory restored if the replay had begun).
void RangeCounters::replay_launch(uint32_t cbid, const void* callback_data) {
    UserReplayState& u = *user_;
    const auto* cb = static_cast<const CUpti_CallbackData*>(callback_data);
    const CuptiApi& cupti = *cupti_;
    ProfilerApi& p = api(cupti);
    auto skip = [&](const std::string& why) {
        if (!u.rows.skipped++) u.rows.first_error = why;
    };
    if (cb->context && cb->context != static_cast<CUcontext>(context_))
        return skip("a launch on another CUDA context");
    if (u.launches >= static_cast<int64_t>(u.max_ranges)) {
        ++u.dropped;
        return;
    }
    // The launch, to be made again with the same arguments.
    const bool ptsz = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
                      cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz ||
                      cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz;
    CUstream stream = nullptr;
    CUlaunchConfig ex_config{};
    std::function<CUresult()> launch;
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz) {
        const auto* a = static_cast<const cuLaunchKernel_params*>(cb->functionParams);
        stream = a->hStream ? a->hStream : (ptsz ? CU_STREAM_PER_THREAD : nullptr);
        launch = [&p, a, stream] {
            return p.cuLaunchKernel(a->f, a->gridDimX, a->gridDimY, a->gridDimZ, a->blockDimX,
                                    a->blockDimY, a->blockDimZ, a->sharedMemBytes, stream,
                                    a->kernelParams, a->extra);
        };
    } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz) {
        const auto* a = static_cast<const cuLaunchKernelEx_params*>(cb->functionParams);
        if (!a->config) return skip("cuLaunchKernelEx without a config");
        ex_config = *a->config;
        if (!ex_config.hStream && ptsz) ex_config.hStream = CU_STREAM_PER_THREAD;
        stream = ex_config.hStream;
        launch = [&p, a, &ex_config] {
            return p.cuLaunchKernelEx(&ex_config, a->f, a->kernelParams, a->extra);
        };
    } else {
        const auto* a = static_cast<const cuLaunchCooperativeKernel_params*>(cb->functionParams);
        stream = a->hStream ? a->hStream : (ptsz ? CU_STREAM_PER_THREAD : nullptr);
        launch = [&p, a, stream] {
            return p.cuLaunchCooperativeKernel(a->f, a->gridDimX, a->gridDimY, a->gridDimZ,
                                               a->blockDimX, a->blockDimY, a->blockDimZ,
                                               a->sharedMemBytes, stream, a->kernelParams);
        };
    }
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    if (p.cuStreamIsCapturing(stream, &capturing) != CUDA_SUCCESS ||
        capturing != CU_STREAM_CAPTURE_STATUS_NONE)
        return skip("a launch into a CUDA graph being captured");
    trace("user replay: launch, driver callback", cbid);
    uint64_t t0 = 0;
    cupti.cuptiGetTimestamp(&t0);
    if (p.cuCtxSynchronize() != CUDA_SUCCESS) return skip("cuCtxSynchronize failed before a launch");
    const std::string name = cb->symbolName ? cb->symbolName : "";
    CUpti_RangeProfiler_Object* object = u.object;
    bool saved = false;
    try {
        trace("cuptiCheckpointSave");
        check(cupti, p.cuptiCheckpointSave(&u.checkpoint), "cuptiCheckpointSave");
        saved = u.checkpoint_used = true;
        trace("counter data image");
        std::vector<const char*> names;
        for (const auto& m : metrics_) names.push_back(m.c_str());
        if (counter_data_.empty()) {
            CUpti_RangeProfiler_GetCounterDataSize_Params data_size{CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
            data_size.pRangeProfilerObject = object;
            data_size.pMetricNames = names.data();
            data_size.numMetrics = names.size();
            data_size.maxNumOfRanges = 1;
            data_size.maxNumRangeTreeNodes = 1;
            check(cupti, p.cuptiRangeProfilerGetCounterDataSize(&data_size), "cuptiRangeProfilerGetCounterDataSize");
            counter_data_.assign(data_size.counterDataSize, 0);
        }
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
        init.pRangeProfilerObject = object;
        init.counterDataSize = counter_data_.size();
        init.pCounterData = counter_data_.data();
        check(cupti, p.cuptiRangeProfilerCounterDataImageInitialize(&init),
              "cuptiRangeProfilerCounterDataImageInitialize");
        CUpti_RangeProfiler_SetConfig_Params config{CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
        config.pRangeProfilerObject = object;
        config.configSize = config_image_.size();
        config.pConfig = config_image_.data();
        config.counterDataImageSize = counter_data_.size();
        config.pCounterDataImage = counter_data_.data();
        // Auto ranges: the range is the replayed kernel alone (its launch latency and the
        // flushes, launched before the profiler starts, are outside it).
        config.range = CUPTI_AutoRange;
        config.replayMode = CUPTI_UserReplay;
        config.maxRangesPerPass = 1;
        config.numNestingLevels = 1;
        config.minNestingLevel = 1;
        config.passIndex = 0;
        config.targetNestingLevel = 1;
        trace("cuptiRangeProfilerSetConfig");
        check(cupti, p.cuptiRangeProfilerSetConfig(&config), "cuptiRangeProfilerSetConfig");
        const unsigned threads = 512;
        size_t n16 = u.flush_bytes / 16;
        CUdeviceptr write_buf = u.scratch, read_buf = u.scratch + u.flush_bytes;
        void* write_args[] = {&write_buf, &n16, &u.sink};
        void* read_args[] = {&read_buf, &n16, &u.sink};
        bool all = false;
        for (size_t pass = 0; !all; ++pass) {
            if (pass >= kMaxUserPasses) throw CaptureError(-2, "user replay did not finish its passes");
            trace("user replay: pass", pass);
            if (pass) check(cupti, p.cuptiCheckpointRestore(&u.checkpoint), "cuptiCheckpointRestore");
            trace("user replay: flush");
            drv(p.cuLaunchKernel(u.write_fn, u.blocks, 1, 1, threads, 1, 1, 0, stream, write_args, nullptr),
                "the L2 flush (write)");
            for (int r = 0; r < kFlushReads; ++r)
                drv(p.cuLaunchKernel(u.read_fn, u.blocks, 1, 1, threads, 1, 1, 0, stream, read_args, nullptr),
                    "the L2 flush (read)");
            drv(p.cuCtxSynchronize(), "cuCtxSynchronize after the L2 flush");
            CUpti_RangeProfiler_Start_Params go{CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
            go.pRangeProfilerObject = object;
            trace("cuptiRangeProfilerStart");
            check(cupti, p.cuptiRangeProfilerStart(&go), "cuptiRangeProfilerStart");
            trace("user replay: launch again");
            const CUresult launched = launch();
            const CUresult synced = p.cuCtxSynchronize();
            CUpti_RangeProfiler_Stop_Params halt{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
            halt.pRangeProfilerObject = object;
            check(cupti, p.cuptiRangeProfilerStop(&halt), "cuptiRangeProfilerStop");
            drv(launched, "the replayed launch");
            drv(synced, "cuCtxSynchronize after the replayed launch");
            all = halt.isAllPassSubmitted != 0;
        }
        CUpti_RangeProfiler_DecodeData_Params decode{CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
        decode.pRangeProfilerObject = object;
        trace("cuptiRangeProfilerDecodeData");
        check(cupti, p.cuptiRangeProfilerDecodeData(&decode), "cuptiRangeProfilerDecodeData");
        trace("user replay: evaluate");
        u.rows.dropped += decode.numOfRangeDropped;
        CUpti_RangeProfiler_GetCounterDataInfo_Params info{CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
        info.pCounterDataImage = counter_data_.data();
        info.counterDataImageSize = counter_data_.size();
        check(cupti, p.cuptiRangeProfilerGetCounterDataInfo(&info), "cuptiRangeProfilerGetCounterDataInfo");
        if (info.numTotalRanges != 1)
            throw CaptureError(-4, "the replayed launch gave " + std::to_string(info.numTotalRanges) +
                                       " ranges, not 1");
        evaluate_into(u.rows, u.launches, name);
        ++u.launches;
    } catch (const std::exception& e) {
        trace(e.what());
        skip(e.what());
    } catch (...) {
        skip("unknown failure");
    }
    trace("user replay: restore");
    // The program's launch, which proceeds after this, sees the memory it would have seen.
    if (saved && p.cuptiCheckpointRestore(&u.checkpoint) != CUPTI_SUCCESS)
        skip("cuptiCheckpointRestore failed: the program's memory may differ");
    p.cuCtxSynchronize();
    uint64_t t1 = 0;
    cupti.cuptiGetTimestamp(&t1);
    u.rows.window_start.push_back(t0);
    u.rows.window_end.push_back(t1);
    trace("user replay: launch done");
}

CounterRows RangeCounters::stop_user() {
    trace("user replay: stop");
    auto t0 = std::chrono::steady_clock::now();
    user_armed_.store(false);
    std::shared_ptr<UserReplayState> u;
    {
        std::lock_guard<std::mutex> lock(user_mu_);
        u.swap(user_);
    }
    CounterRows rows = std::move(u->rows);
    rows.ranges = static_cast<uint64_t>(u->launches);
    rows.dropped += u->dropped;
    ProfilerApi& p = api(*cupti_);
    if (u->object) {
        CUpti_RangeProfiler_Disable_Params d{CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
        d.pRangeProfilerObject = u->object;
        p.cuptiRangeProfilerDisable(&d);
    }
    if (u->checkpoint_used) p.cuptiCheckpointFree(&u->checkpoint);
    if (u->module) p.cuModuleUnload(u->module);
    if (u->scratch) p.cuMemFree(u->scratch);
    if (u->sink) p.cuMemFree(u->sink);
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
