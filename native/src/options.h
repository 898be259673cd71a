// What a capture records: the one struct that hookmagic.cupti.options.CaptureOptions fills
// (through pybind11, field by field). Defaults live in the Python dataclass; the values here
// only matter to native code that builds an Options itself (the tests' extension does not).
#pragma once

#include <cstddef>
#include <vector>

namespace hookmagic {

struct CaptureOptions {
    bool kernels = true;
    bool memory = true;       // MEMORY2 records plus virtual-memory map/unmap callbacks
    bool stacks = true;       // Python stack at every launch, copy and allocation
    bool api = false;         // runtime and driver API activity records
    bool nvtx = false;        // NVTX markers (only if NVTX was routed to CUPTI)
    bool detach = true;       // cuptiFinalize after the capture (see hookmagic.capture)
    // Synchronisation from the synchronising API callbacks (stream/device/event/context
    // synchronize, stream wait event) instead of CUPTI's SYNCHRONIZATION activity kind,
    // which costs ~0.28x on launch-bound code. Needs callbacks.
    bool sync_from_callbacks = true;
    bool sync = true;         // synchronisation at all (the sync table); off in lite captures
    // Launch, copy and allocation callbacks (thread, Python stack and range of each call).
    // Off in lite captures: CUPTI's callback API is then used only for what `memory` needs.
    bool launch_callbacks = true;
    bool activities_without_callbacks = false;  // if another subscriber holds the callbacks
    bool callbacks = true;    // API callbacks at all (threads, ranges, stacks, map/unmap)
    int max_stack_depth = 64;
    size_t buffer_bytes = 8u << 20;
    size_t max_buffers = 32;            // CUPTI buffers in flight at once
    size_t max_table_bytes = 2ull << 30;  // decoded columns kept; beyond, records are dropped
};

// Benchmark-only switches (benchmarks/overhead_probe.py, bench_overhead.py): reachable only
// through the probe entry point (_native.probe_start), never through a capture.
struct ProbeOptions {
    // When not empty, exactly these activity kinds are enabled instead of the ones the
    // capture options choose.
    std::vector<int> activity_kinds;
    int callback_domains = 3;     // bit 0: runtime API callbacks, bit 1: driver API callbacks
    bool noop_callbacks = false;  // callbacks that return at once: CUPTI's own cost per call
};

}  // namespace hookmagic
