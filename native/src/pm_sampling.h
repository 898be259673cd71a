// A time series of GPU-wide metrics through CUPTI's PM sampling API (CUPTI 12.6+).
//
// The GPU's performance monitors are read every `interval_ns` of GPU time (trigger mode
// CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL) into a hardware buffer; a native thread
// drains it every `decode_period_ms` (cuptiPmSamplingDecodeData into a counter data image),
// evaluates each completed sample on the host (cuptiProfilerHostEvaluateToGpuValues, the
// sample index as the range index) and keeps one row per sample. Nothing is replayed and the
// program's kernels run as they would: the values are the whole GPU's, not per kernel.
// Every metric set must fit in one pass.
//
// Sample timestamps are CUPTI's (cuptiPmSamplingCounterDataGetSampleInfo: start and end of each
// sample, ns); stop() also returns cuptiGetTimestamp() read right after cuptiPmSamplingStart
// and right before cuptiPmSamplingStop, so a caller can see how the two clocks relate.
//
// The functions are resolved from the CUPTI the session loaded; an older CUPTI without them
// says what is missing (CaptureError -1).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hookmagic {

struct CuptiApi;
struct HostInputs;

struct PmRows {
    std::vector<int64_t> start_ns;      // per sample
    std::vector<int64_t> end_ns;
    std::vector<std::string> metrics;   // the metric names, in the order of each row's values
    std::vector<double> values;         // samples x metrics, row-major
    uint64_t overflow = 0;              // decodes that reported a hardware buffer overflow
    uint64_t image_full = 0;            // decodes that stopped on a full counter data image
    uint64_t decodes = 0;               // cuptiPmSamplingDecodeData calls
    double decode_s = 0;                // time spent decoding and evaluating (thread + stop)
    int64_t cupti_start_ns = 0;         // cuptiGetTimestamp() right after Start
    int64_t cupti_stop_ns = 0;          // cuptiGetTimestamp() right before Stop
    std::string error;                  // why decoding stopped early ("" if it did not)
    int64_t device = 0;                 // the CUDA device sampled
};

class PmSampler {
public:
    static PmSampler& instance();

    // Every metric name (base metric + each of its submetrics) PM sampling supports on the
    // device of the current (or primary) context. Throws CaptureError.
    std::vector<std::string> supported_metrics(const CuptiApi& cupti);
    // Names from `metrics` PM sampling's host API does not know on that device.
    std::vector<std::string> unknown_metrics(const CuptiApi& cupti,
                                             const std::vector<std::string>& metrics);
    // The replay passes `metrics` would need (PM sampling takes sets of one). Throws
    // CaptureError (e.g. a name the host API does not know).
    size_t passes(const CuptiApi& cupti, const std::vector<std::string>& metrics);
    // Starts sampling `metrics` on the device of the current (or primary) context; returns the
    // passes of the set (always 1: more throws). Throws CaptureError (code = CUptiResult; -1:
    // functions missing; -2: bad arguments or more than one pass; -3: no CUDA device).
    size_t start(const CuptiApi& cupti, const std::vector<std::string>& metrics,
                 uint64_t interval_ns, size_t hardware_buffer_bytes, uint32_t max_samples,
                 uint32_t decode_period_ms);
    // Stops sampling, decodes what is left and returns every sample; safe when not running.
    PmRows stop();
    bool running() const { return object_ != nullptr; }

private:
    void decode_loop();
    bool decode_once();  // true when the hardware buffer had no more records
    void release() noexcept;

    const CuptiApi* cupti_ = nullptr;
    void* object_ = nullptr;          // CUpti_PmSampling_Object*
    void* host_ = nullptr;            // CUpti_Profiler_Host_Object*
    std::shared_ptr<HostInputs> host_inputs_;
    std::vector<std::string> metrics_;
    std::vector<uint8_t> config_image_;
    std::vector<uint8_t> counter_data_;
    std::vector<uint8_t> counter_data_blank_;  // the initialised image, copied back after each decode
    uint32_t decode_period_ms_ = 20;
    PmRows rows_;
    std::mutex mu_;                   // one decode at a time
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

}  // namespace hookmagic
