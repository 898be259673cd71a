// GPU utilisation, memory, clocks, power and temperature sampled with NVML on a native thread.
//
// Native so that sampling never needs the GIL the cell runs under, and so that NVML stays
// initialised between captures: starting the sampler costs about 0.1 ms instead of the ~2 ms of
// an nvmlInit per capture. On the GPU machine neither a pynvml thread nor this one changed a
// launch-bound loop measurably (benchmarks/results/overhead_probe_tiny_kernels_20000.md: 0.92x
// and 1.00x, inside that host's noise); the GIL argument is for cells that hold it longer.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tables.h"

namespace hookmagic {

#define HM_SAMPLE_COLUMNS(X)                                                              \
    X(int64_t, time_ns) X(int32_t, nvml_index) X(double, gpu_util) X(double, mem_util)    \
    X(int64_t, memory_used) X(int64_t, memory_total) X(double, sm_clock_mhz)              \
    X(double, mem_clock_mhz) X(double, power_w) X(double, temperature_c)

HM_TABLE(SampleTable, HM_SAMPLE_COLUMNS)

class NvmlSampler {
public:
    ~NvmlSampler();
    // Samples every device now, then every `interval_ns` on a thread, and once more at stop.
    // Returns "" or why NVML cannot be used (no driver, no libnvidia-ml).
    std::string start(int64_t interval_ns, std::function<uint64_t()> clock);
    // Joins the thread; the rows are then in `samples`. Idempotent.
    void stop();
    SampleTable samples;
    // (PCI domain, bus, device) of each NVML device, to match NVML's order to CUDA's;
    // (-1, -1, -1) where NVML does not say (some Jetson releases).
    std::vector<std::array<int, 3>> pci;

private:
    std::string open();
    void sample_all();
    void run();

    bool opened_ = false;
    std::vector<void*> devices_;  // nvmlDevice_t handles, valid for the process's life
    std::function<uint64_t()> clock_;
    int64_t interval_ns_ = 0;
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable wake_;
    bool stopping_ = false;
};

}  // namespace hookmagic
