// Per-kernel hardware counters through CUPTI's Range Profiler API (CUPTI 12.6+).
//
// Replay: CUPTI_KernelReplay with CUPTI_AutoRange. Every kernel launched on the profiled
// context while counting is one range; CUPTI saves the memory the kernel may touch, runs the
// kernel once per pass of the metric set's schedule (passes() of them, restoring memory in
// between) and keeps one set of values. The launches are serialised. Metric values are
// evaluated on the host (cuptiProfilerHost*) when counting stops.
//
// The profiler functions are resolved from the CUPTI the session loaded (dlsym on its
// handle): an older CUPTI without them still traces, and counting says what is missing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hookmagic {

struct CuptiApi;
struct HostInputs;

// One row per (range, metric): ranges are numbered in launch order from 0.
struct CounterRows {
    std::vector<int64_t> range_index;
    std::vector<std::string> range_name;
    std::vector<std::string> metric;
    std::vector<double> value;
    uint64_t ranges = 0;       // ranges decoded
    uint64_t dropped = 0;      // ranges CUPTI dropped (more kernels than max_ranges)
    double decode_s = 0;       // stop + decode + evaluate
};

class RangeCounters {
public:
    static RangeCounters& instance();

    // The chip's name as CUPTI's host API knows it ("GH100"), for the device of the current
    // (or primary) context. Throws CaptureError.
    std::string chip_name(const CuptiApi& cupti);
    // Every metric name (base metric + each of its submetrics/rollups) the chip supports for
    // the range profiler. Throws CaptureError.
    std::vector<std::string> supported_metrics(const CuptiApi& cupti);
    // Names from `metrics` the host API does not know (empty: all known).
    std::vector<std::string> unknown_metrics(const CuptiApi& cupti,
                                             const std::vector<std::string>& metrics);
    // Starts counting on the current CUDA context (the device's primary context, made
    // current, if none is). Throws CaptureError (code = CUptiResult; -1: profiler functions
    // missing; -3: no CUDA device).
    void start(const CuptiApi& cupti, const std::vector<std::string>& metrics,
               size_t max_ranges);
    // Stops counting and evaluates every range; safe to call when not running (no rows).
    CounterRows stop();
    bool running() const { return range_profiler_ != nullptr; }
    // Replay passes of the last started metric set.
    size_t passes() const { return passes_; }

private:
    void release() noexcept;

    const CuptiApi* cupti_ = nullptr;
    void* context_ = nullptr;
    void* range_profiler_ = nullptr;  // CUpti_RangeProfiler_Object*
    void* host_ = nullptr;            // CUpti_Profiler_Host_Object*
    std::shared_ptr<HostInputs> host_inputs_;  // what host_ points into
    std::vector<std::string> metrics_;
    std::vector<uint8_t> config_image_;
    std::vector<uint8_t> counter_data_;
    size_t passes_ = 0;
};

}  // namespace hookmagic
