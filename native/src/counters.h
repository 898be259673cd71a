// Per-kernel hardware counters through CUPTI's Range Profiler API (CUPTI 12.6+).
//
// Two replays, each counting every kernel launched on the profiled context as one range:
// - Replay::kernel: CUPTI_KernelReplay with CUPTI_AutoRange. CUPTI saves the memory the kernel
//   may touch, runs the kernel once per pass of the metric set's schedule (passes() of them,
//   restoring memory in between) and keeps one set of values. Each pass starts from whatever
//   the save/restore left in L2 (dirty lines included), so DRAM writes and the L2 hit rate
//   differ from Nsight Compute's, which flushes the caches before every pass.
// - Replay::user: CUPTI_UserReplay with CUPTI_AutoRange, driven from the launch's driver
//   API callback (on_driver_callback, at API entry): the context is synchronised, its memory
//   saved (CUPTI's checkpoint API), and for each pass the memory restored, L2 flushed (our own
//   kernels write one scratch buffer of twice the L2 size, then read another twice, so no line
//   of the program's data is cached and none is dirty), the profiler started, the kernel
//   launched again with the same arguments (its own auto range: the flushes and the launch
//   latency are outside it), the context synchronised and the profiler stopped; then the
//   memory is restored once more and the program's own launch proceeds, uncounted and with its
//   normal timestamps. The replays and flushes are the counting's own work: on_driver_callback
//   tells the session to leave their callbacks out, and their activity records lie inside the
//   time windows that stop() returns.
//   On the H200 (CUPTI 13.0) the smsp__sass_* counters read 0 under user replay (also when the
//   replay is launched from another thread than the callback's).
// The launches are serialised. Metric values are evaluated on the host (cuptiProfilerHost*).
//
// The profiler functions are resolved from the CUPTI the session loaded (dlsym on its
// handle): an older CUPTI without them still traces, and counting says what is missing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace hookmagic {

struct CuptiApi;
struct HostInputs;
struct UserReplayState;

enum class Replay { kernel, user };

// One row per (range, metric): ranges are numbered in launch order from 0.
struct CounterRows {
    std::vector<int64_t> range_index;
    std::vector<std::string> range_name;
    std::vector<std::string> metric;
    std::vector<double> value;
    uint64_t ranges = 0;       // ranges decoded
    uint64_t dropped = 0;      // ranges CUPTI dropped (more kernels than max_ranges)
    double decode_s = 0;       // stop + decode + evaluate
    // Replay::user: CUPTI timestamps [start, end] of each launch's replay (memory save,
    // passes, flushes, final restore); every activity record inside one is counting's own.
    std::vector<uint64_t> window_start;
    std::vector<uint64_t> window_end;
    uint64_t skipped = 0;      // launches not counted (stream capture, other context, failure)
    std::string first_error;   // why the first skipped launch was skipped
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
    // Replay::user needs the session's CUPTI subscriber (the caller makes sure of one and
    // passes it) for the driver's launch callbacks.
    void start(const CuptiApi& cupti, const std::vector<std::string>& metrics,
               size_t max_ranges, Replay replay = Replay::kernel, void* subscriber = nullptr);
    // Called by the session for every driver API callback. With Replay::user, a kernel launch
    // (API entry) is replayed and counted here before it proceeds. Returns true for the
    // callbacks of counting's own launches (replays, flushes), which the session leaves out.
    bool on_driver_callback(uint32_t cbid, const void* callback_data);
    // Stops counting and evaluates every range; safe to call when not running (no rows).
    CounterRows stop();
    bool running() const { return range_profiler_ != nullptr || user_ != nullptr; }
    Replay replay() const { return replay_; }
    // Replay passes of the last started metric set.
    size_t passes() const { return passes_; }

private:
    void release() noexcept;
    void setup_host(const CuptiApi& cupti, void* ctx);
    void start_user(void* subscriber, size_t max_ranges);
    void replay_launch(uint32_t cbid, const void* callback_data);
    CounterRows stop_user();
    void evaluate_into(CounterRows& rows, int64_t first_index, const std::string& name_override);

    const CuptiApi* cupti_ = nullptr;
    void* context_ = nullptr;
    void* range_profiler_ = nullptr;  // CUpti_RangeProfiler_Object*
    void* host_ = nullptr;            // CUpti_Profiler_Host_Object*
    std::shared_ptr<HostInputs> host_inputs_;  // what host_ points into
    std::vector<std::string> metrics_;
    std::vector<uint8_t> config_image_;
    std::vector<uint8_t> counter_data_;
    size_t passes_ = 0;
    Replay replay_ = Replay::kernel;
    std::shared_ptr<UserReplayState> user_;
    std::atomic<bool> user_armed_{false};
    std::mutex user_mu_;  // one launch replayed at a time
};

}  // namespace hookmagic
