#include "pm_sampling.h"

#include <cupti_pmsampling.h>
#include <dlfcn.h>

#include <chrono>

#include "cupti_loader.h"
#include "profiler_host.h"
#include "session.h"

namespace hookmagic {

namespace {

using namespace prof;

#define HM_PM_FUNCTIONS(X)                                                                   \
    X(cuptiPmSamplingSetConfig) X(cuptiPmSamplingEnable) X(cuptiPmSamplingDisable)          \
    X(cuptiPmSamplingStart) X(cuptiPmSamplingStop) X(cuptiPmSamplingDecodeData)             \
    X(cuptiPmSamplingGetCounterAvailability) X(cuptiPmSamplingGetCounterDataSize)           \
    X(cuptiPmSamplingCounterDataImageInitialize) X(cuptiPmSamplingGetCounterDataInfo)       \
    X(cuptiPmSamplingCounterDataGetSampleInfo)

// The PM sampling functions, resolved apart from the range profiler's so that a CUPTI without
// them still counts.
struct PmApi {
    void* handle = nullptr;
#define HM_DECLARE(name) decltype(&::name) name = nullptr;
    HM_PM_FUNCTIONS(HM_DECLARE)
#undef HM_DECLARE
};

PmApi& pm_api(const CuptiApi& cupti) {
    static PmApi p;
    if (!cupti.loaded()) throw CaptureError(-1, "CUPTI is not loaded");
    if (p.handle == cupti.handle) return p;
    PmApi fresh;
#define HM_RESOLVE(name)                                                                    \
    fresh.name = reinterpret_cast<decltype(fresh.name)>(dlsym(cupti.handle, #name));        \
    if (!fresh.name)                                                                        \
        throw CaptureError(-1, "CUPTI at " + cupti.path + " lacks " #name                   \
                               " (PM sampling needs CUPTI 12.6 or newer)");
    HM_PM_FUNCTIONS(HM_RESOLVE)
#undef HM_RESOLVE
    fresh.handle = cupti.handle;
    p = fresh;
    return p;
}

// The CUDA device of the current (or primary) context.
size_t current_device(ProfilerApi& p) {
    current_context(p);
    CUdevice dev = 0;
    if (p.cuCtxGetDevice(&dev) != CUDA_SUCCESS) dev = 0;
    return static_cast<size_t>(dev);
}

void pm_inputs(const CuptiApi& cupti, ProfilerApi& p, PmApi& pm, size_t device,
               HostInputs& inputs) {
    inputs.chip = device_chip(cupti, p, device);
    CUpti_PmSampling_GetCounterAvailability_Params a{CUpti_PmSampling_GetCounterAvailability_Params_STRUCT_SIZE};
    a.deviceIndex = device;
    check(cupti, pm.cuptiPmSamplingGetCounterAvailability(&a), "cuptiPmSamplingGetCounterAvailability");
    inputs.availability.assign(a.counterAvailabilityImageSize, 0);
    a.pCounterAvailabilityImage = inputs.availability.data();
    check(cupti, pm.cuptiPmSamplingGetCounterAvailability(&a), "cuptiPmSamplingGetCounterAvailability");
}

// A PM-sampling host object made and freed around one query.
template <class F>
auto with_pm_host(const CuptiApi& cupti, F&& body) {
    ProfilerApi& p = api(cupti);
    PmApi& pm = pm_api(cupti);
    const size_t device = current_device(p);
    profiler_init(cupti, p);
    HostInputs inputs;
    pm_inputs(cupti, p, pm, device, inputs);
    CUpti_Profiler_Host_Object* host = host_initialize(cupti, p, CUPTI_PROFILER_TYPE_PM_SAMPLING, inputs);
    try {
        auto out = body(p, host);
        host_free(p, host);
        return out;
    } catch (...) {
        host_free(p, host);
        throw;
    }
}

int64_t now_cupti(const CuptiApi& cupti) {
    uint64_t t = 0;
    if (cupti.cuptiGetTimestamp) cupti.cuptiGetTimestamp(&t);
    return static_cast<int64_t>(t);
}

}  // namespace

PmSampler& PmSampler::instance() {
    static PmSampler s;
    return s;
}

std::vector<std::string> PmSampler::supported_metrics(const CuptiApi& cupti) {
    return with_pm_host(cupti, [&](ProfilerApi& p, CUpti_Profiler_Host_Object* host) {
        return host_metric_names(cupti, p, host);
    });
}

std::vector<std::string> PmSampler::unknown_metrics(const CuptiApi& cupti,
                                                    const std::vector<std::string>& metrics) {
    return with_pm_host(cupti, [&](ProfilerApi& p, CUpti_Profiler_Host_Object* host) {
        return host_unknown_metrics(p, host, metrics);
    });
}

size_t PmSampler::passes(const CuptiApi& cupti, const std::vector<std::string>& metrics) {
    return with_pm_host(cupti, [&](ProfilerApi& p, CUpti_Profiler_Host_Object* host) {
        size_t n = 0;
        config_image(cupti, p, host, metrics, &n);
        return n;
    });
}

size_t PmSampler::start(const CuptiApi& cupti, const std::vector<std::string>& metrics,
                        uint64_t interval_ns, size_t hardware_buffer_bytes, uint32_t max_samples,
                        uint32_t decode_period_ms) {
    if (running()) throw CaptureError(-2, "PM sampling is already running");
    if (metrics.empty()) throw CaptureError(-2, "no metrics to sample");
    if (interval_ns == 0 || hardware_buffer_bytes == 0 || max_samples == 0 || decode_period_ms == 0)
        throw CaptureError(-2, "PM sampling needs a positive interval, buffer, sample count and period");
    ProfilerApi& p = api(cupti);
    PmApi& pm = pm_api(cupti);
    const size_t device = current_device(p);
    cupti_ = &cupti;
    metrics_ = metrics;
    decode_period_ms_ = decode_period_ms;
    rows_ = PmRows{};
    rows_.metrics = metrics;
    rows_.device = static_cast<int64_t>(device);
    try {
        profiler_init(cupti, p);
        host_inputs_ = std::make_shared<HostInputs>();
        trace("pm sampling: host object");
        pm_inputs(cupti, p, pm, device, *host_inputs_);
        auto* host = host_initialize(cupti, p, CUPTI_PROFILER_TYPE_PM_SAMPLING, *host_inputs_);
        host_ = host;
        size_t passes = 0;
        config_image_ = config_image(cupti, p, host, metrics_, &passes);
        if (passes != 1)
            throw CaptureError(-2, "these metrics need " + std::to_string(passes) +
                                   " passes; PM sampling takes a set that fits in one");

        CUpti_PmSampling_Enable_Params enable{CUpti_PmSampling_Enable_Params_STRUCT_SIZE};
        enable.deviceIndex = device;
        trace("cuptiPmSamplingEnable");
        check(cupti, pm.cuptiPmSamplingEnable(&enable), "cuptiPmSamplingEnable");
        object_ = enable.pPmSamplingObject;

        std::vector<const char*> names;
        for (const auto& m : metrics_) names.push_back(m.c_str());
        CUpti_PmSampling_GetCounterDataSize_Params size{CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE};
        size.pPmSamplingObject = enable.pPmSamplingObject;
        size.pMetricNames = names.data();
        size.numMetrics = names.size();
        size.maxSamples = max_samples;
        trace("cuptiPmSamplingGetCounterDataSize");
        check(cupti, pm.cuptiPmSamplingGetCounterDataSize(&size), "cuptiPmSamplingGetCounterDataSize");
        counter_data_.assign(size.counterDataSize, 0);
        CUpti_PmSampling_CounterDataImage_Initialize_Params init{CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE};
        init.pPmSamplingObject = enable.pPmSamplingObject;
        init.counterDataSize = counter_data_.size();
        init.pCounterData = counter_data_.data();
        trace("cuptiPmSamplingCounterDataImageInitialize");
        check(cupti, pm.cuptiPmSamplingCounterDataImageInitialize(&init),
              "cuptiPmSamplingCounterDataImageInitialize");
        counter_data_blank_ = counter_data_;

        CUpti_PmSampling_SetConfig_Params config{CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE};
        config.pPmSamplingObject = enable.pPmSamplingObject;
        config.configSize = config_image_.size();
        config.pConfig = config_image_.data();
        config.hardwareBufferSize = hardware_buffer_bytes;
        config.samplingInterval = interval_ns;
        config.triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
        // keep the oldest: an overflow is then reported rather than silently overwritten
        config.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
        trace("cuptiPmSamplingSetConfig");
        check(cupti, pm.cuptiPmSamplingSetConfig(&config), "cuptiPmSamplingSetConfig");

        CUpti_PmSampling_Start_Params go{CUpti_PmSampling_Start_Params_STRUCT_SIZE};
        go.pPmSamplingObject = enable.pPmSamplingObject;
        trace("cuptiPmSamplingStart");
        check(cupti, pm.cuptiPmSamplingStart(&go), "cuptiPmSamplingStart");
        rows_.cupti_start_ns = now_cupti(cupti);
    } catch (...) {
        release();
        throw;
    }
    stopping_ = false;
    thread_ = std::thread([this] { decode_loop(); });
    return 1;
}

// Drains the hardware buffer into the counter data image and turns each completed sample into
// a row; the image is then reset for the next decode.
bool PmSampler::decode_once() {
    const CuptiApi& cupti = *cupti_;
    ProfilerApi& p = api(cupti);
    PmApi& pm = pm_api(cupti);
    auto* object = static_cast<CUpti_PmSampling_Object*>(object_);
    auto t0 = std::chrono::steady_clock::now();
    CUpti_PmSampling_DecodeData_Params decode{CUpti_PmSampling_DecodeData_Params_STRUCT_SIZE};
    decode.pPmSamplingObject = object;
    decode.pCounterDataImage = counter_data_.data();
    decode.counterDataImageSize = counter_data_.size();
    ++rows_.decodes;
    check(cupti, pm.cuptiPmSamplingDecodeData(&decode), "cuptiPmSamplingDecodeData");
    if (decode.overflow) ++rows_.overflow;
    if (decode.decodeStopReason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL)
        ++rows_.image_full;
    CUpti_PmSampling_GetCounterDataInfo_Params info{CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE};
    info.pCounterDataImage = counter_data_.data();
    info.counterDataImageSize = counter_data_.size();
    check(cupti, pm.cuptiPmSamplingGetCounterDataInfo(&info), "cuptiPmSamplingGetCounterDataInfo");
    std::vector<const char*> names;
    for (const auto& m : metrics_) names.push_back(m.c_str());
    std::vector<double> values(names.size());
    for (size_t i = 0; i < info.numCompletedSamples; ++i) {
        CUpti_PmSampling_CounterData_GetSampleInfo_Params sample{CUpti_PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE};
        sample.pPmSamplingObject = object;
        sample.pCounterDataImage = counter_data_.data();
        sample.counterDataImageSize = counter_data_.size();
        sample.sampleIndex = i;
        check(cupti, pm.cuptiPmSamplingCounterDataGetSampleInfo(&sample),
              "cuptiPmSamplingCounterDataGetSampleInfo");
        CUpti_Profiler_Host_EvaluateToGpuValues_Params eval{CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
        eval.pHostObject = static_cast<CUpti_Profiler_Host_Object*>(host_);
        eval.pCounterDataImage = counter_data_.data();
        eval.counterDataImageSize = counter_data_.size();
        eval.rangeIndex = i;
        eval.ppMetricNames = names.data();
        eval.numMetrics = names.size();
        eval.pMetricValues = values.data();
        check(cupti, p.cuptiProfilerHostEvaluateToGpuValues(&eval), "cuptiProfilerHostEvaluateToGpuValues");
        rows_.start_ns.push_back(static_cast<int64_t>(sample.startTimestamp));
        rows_.end_ns.push_back(static_cast<int64_t>(sample.endTimestamp));
        rows_.values.insert(rows_.values.end(), values.begin(), values.end());
    }
    counter_data_ = counter_data_blank_;
    rows_.decode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return decode.decodeStopReason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS;
}

void PmSampler::decode_loop() {
    while (!stopping_.load()) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!rows_.error.empty()) return;
            try {
                decode_once();
            } catch (const CaptureError& e) {
                rows_.error = e.what();
                return;
            } catch (...) {
                rows_.error = "decoding failed";
                return;
            }
        }
        for (uint32_t waited = 0; waited < decode_period_ms_ && !stopping_.load(); ++waited)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

PmRows PmSampler::stop() {
    if (!running()) return PmRows{};
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    const CuptiApi& cupti = *cupti_;
    ProfilerApi& p = api(cupti);
    PmApi& pm = pm_api(cupti);
    p.cuCtxSynchronize();  // the program's last work lies inside the sampled time
    rows_.cupti_stop_ns = now_cupti(cupti);
    CUpti_PmSampling_Stop_Params halt{CUpti_PmSampling_Stop_Params_STRUCT_SIZE};
    halt.pPmSamplingObject = static_cast<CUpti_PmSampling_Object*>(object_);
    trace("cuptiPmSamplingStop");
    CUptiResult stopped = pm.cuptiPmSamplingStop(&halt);
    if (stopped != CUPTI_SUCCESS && rows_.error.empty())
        rows_.error = std::string("cuptiPmSamplingStop: ") + cupti.error_string(stopped);
    // what the thread left in the hardware buffer; a bounded number of decodes
    for (int i = 0; i < 256 && rows_.error.empty(); ++i) {
        try {
            if (decode_once()) break;
        } catch (const CaptureError& e) {
            rows_.error = e.what();
        }
    }
    PmRows out = std::move(rows_);
    rows_ = PmRows{};
    release();
    return out;
}

void PmSampler::release() noexcept {
    if (object_ && cupti_) {
        try {
            PmApi& pm = pm_api(*cupti_);
            CUpti_PmSampling_Disable_Params d{CUpti_PmSampling_Disable_Params_STRUCT_SIZE};
            d.pPmSamplingObject = static_cast<CUpti_PmSampling_Object*>(object_);
            trace("cuptiPmSamplingDisable");
            pm.cuptiPmSamplingDisable(&d);
        } catch (...) {
        }
    }
    object_ = nullptr;
    if (host_ && cupti_) {
        try {
            host_free(api(*cupti_), static_cast<CUpti_Profiler_Host_Object*>(host_));
        } catch (...) {
        }
    }
    host_ = nullptr;
    host_inputs_.reset();
    config_image_.clear();
    counter_data_.clear();
    counter_data_blank_.clear();
}

}  // namespace hookmagic
