// Python bindings: hookmagic._native.
//
// Hands decoded columns to Python as NumPy arrays that own the vectors' memory (no copy, no
// per-record objects).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <frameobject.h>

#include <cstdio>
#include <string>

#include "counters.h"
#include "pm_sampling.h"
#include "nvml_sampler.h"
#include "python_frames.h"
#include "selection.h"
#include "session.h"

namespace py = pybind11;
using hookmagic::Session;

namespace {

template <class T>
py::array to_numpy(std::vector<T>& column) {
    auto* owned = new std::vector<T>(std::move(column));
    py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
    return py::array_t<T>(static_cast<py::ssize_t>(owned->size()), owned->data(), free_when_done);
}

#define HM_EXPORT_COLUMN(type, name, ...) out[#name] = to_numpy(table.name);

template <class Table>
py::dict export_table(Table& table);

#define HM_EXPORTER(Table, COLUMNS)                 \
    template <>                                     \
    py::dict export_table<hookmagic::Table>(hookmagic::Table & table) { \
        py::dict out;                               \
        COLUMNS(HM_EXPORT_COLUMN)                   \
        return out;                                 \
    }

HM_EXPORTER(KernelTable, HM_KERNEL_COLUMNS)
HM_EXPORTER(MemcpyTable, HM_MEMCPY_COLUMNS)
HM_EXPORTER(MemsetTable, HM_MEMSET_COLUMNS)
HM_EXPORTER(MemoryTable, HM_MEMORY_COLUMNS)
HM_EXPORTER(SyncTable, HM_SYNC_COLUMNS)
HM_EXPORTER(ApiTable, HM_API_COLUMNS)
HM_EXPORTER(MarkerTable, HM_MARKER_COLUMNS)
HM_EXPORTER(LaunchTable, HM_LAUNCH_COLUMNS)
HM_EXPORTER(VmmTable, HM_VMM_COLUMNS)
HM_EXPORTER(GraphNodeTable, HM_GRAPH_NODE_COLUMNS)
HM_EXPORTER(SampleTable, HM_SAMPLE_COLUMNS)

// Names of CUPTI's enumerations, indexed by value, taken from the headers themselves.
py::dict enum_names() {
    auto names = [](std::initializer_list<std::pair<int, const char*>> items) {
        int top = 0;
        for (auto& it : items) top = std::max(top, it.first);
        py::list out;
        for (int i = 0; i <= top; ++i) out.append("unknown");
        for (auto& it : items) out[it.first] = it.second;
        return out;
    };
    py::dict d;
    d["memcpy_kind"] = names({{CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN, "unknown"},
                              {CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, "htod"},
                              {CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, "dtoh"},
                              {CUPTI_ACTIVITY_MEMCPY_KIND_HTOA, "htoa"},
                              {CUPTI_ACTIVITY_MEMCPY_KIND_ATOH, "atoh"},
                              {CUPTI_ACTIVITY_MEMCPY_KIND_ATOA, "atoa"},
                              {CUPTI_ACTIVITY_MEMCPY_KIND_ATOD, "atod"},
                              {CUPTI_ACTIVITY_MEMCPY_KIND_DTOA, "dtoa"},
                              {CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, "dtod"},
                              {CUPTI_ACTIVITY_MEMCPY_KIND_HTOH, "htoh"},
                              {CUPTI_ACTIVITY_MEMCPY_KIND_PTOP, "ptop"}});
    d["memory_kind"] = names({{CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN, "unknown"},
                              {CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE, "pageable"},
                              {CUPTI_ACTIVITY_MEMORY_KIND_PINNED, "pinned"},
                              {CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, "device"},
                              {CUPTI_ACTIVITY_MEMORY_KIND_ARRAY, "array"},
                              {CUPTI_ACTIVITY_MEMORY_KIND_MANAGED, "managed"},
                              {CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC, "device_static"},
                              {CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC, "managed_static"}});
    d["memory_op"] = names({{CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID, "unknown"},
                            {CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, "alloc"},
                            {CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, "free"}});
    d["sync_type"] = names({{CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN, "unknown"},
                            {CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, "event"},
                            {CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, "stream_wait_event"},
                            {CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, "stream"},
                            {CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, "context"}});
    d["vmm_op"] = names({{1, "map"}, {2, "unmap"}});
    d["activity_kind"] = py::dict(
        py::arg("concurrent_kernel") = (int)CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        py::arg("memcpy") = (int)CUPTI_ACTIVITY_KIND_MEMCPY,
        py::arg("memset") = (int)CUPTI_ACTIVITY_KIND_MEMSET,
        py::arg("memory2") = (int)CUPTI_ACTIVITY_KIND_MEMORY2,
        py::arg("synchronization") = (int)CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
        py::arg("runtime") = (int)CUPTI_ACTIVITY_KIND_RUNTIME,
        py::arg("driver") = (int)CUPTI_ACTIVITY_KIND_DRIVER,
        py::arg("marker") = (int)CUPTI_ACTIVITY_KIND_MARKER);
    d["marker_flags"] = py::dict(py::arg("start") = (int)CUPTI_ACTIVITY_FLAG_MARKER_START,
                                 py::arg("end") = (int)CUPTI_ACTIVITY_FLAG_MARKER_END,
                                 py::arg("instantaneous") = (int)CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS);
    return d;
}

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L and NVML print it.
std::string format_uuid(const CUuuid& uuid) {
    static const int groups[] = {4, 2, 2, 2, 6};
    std::string out = "GPU";
    char hex[3];
    int k = 0;
    for (int g : groups) {
        out += '-';
        for (int i = 0; i < g; ++i, ++k) {
            std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned char>(uuid.bytes[k]));
            out += hex;
        }
    }
    return out;
}

py::list device_properties() {
    py::list out;
    auto& drv = Session::instance().driver();
    if (!drv.bind_if_loaded() || drv.cuInit(0) != CUDA_SUCCESS) return out;
    int count = 0;
    if (drv.cuDeviceGetCount(&count) != CUDA_SUCCESS) return out;
    for (int i = 0; i < count; ++i) {
        CUdevice dev;
        if (drv.cuDeviceGet(&dev, i) != CUDA_SUCCESS) continue;
        char name[256] = {0};
        drv.cuDeviceGetName(name, sizeof(name) - 1, dev);
        size_t total = 0;
        drv.cuDeviceTotalMem(&total, dev);
        auto attr = [&](CUdevice_attribute a) {
            int v = -1;
            return drv.cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : -1;
        };
        py::dict d;
        d["index"] = i;
        d["name"] = std::string(name);
        d["total_memory"] = total;
        d["multiprocessors"] = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        d["compute_capability"] = py::make_tuple(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                                                 attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
        d["pci"] = py::make_tuple(attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
                                  attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
                                  attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID));
        d["max_threads_per_sm"] = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
        d["max_blocks_per_sm"] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
        d["max_regs_per_sm"] = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
        d["max_regs_per_block"] = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
        d["max_smem_per_sm"] = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
        d["max_smem_per_block"] = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
        d["reserved_smem_per_block"] = attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
        d["warp_size"] = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
        d["l2_bytes"] = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
        d["memory_bus_bits"] = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
        d["pci_bus"] = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
        d["integrated"] = attr(CU_DEVICE_ATTRIBUTE_INTEGRATED) == 1;
        CUuuid uuid;
        if (drv.cuDeviceGetUuid && drv.cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS)
            d["uuid"] = format_uuid(uuid);
        out.append(d);
    }
    return out;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "hookmagic's native CUPTI session (internal; use hookmagic.capture()).";
    // CaptureError(message) with .code = the CUptiResult, so Python can tell "another tool
    // holds CUPTI" from "no driver" without parsing text.
    static py::object capture_error = py::reinterpret_steal<py::object>(
        PyErr_NewException("hookmagic._native.CaptureError", PyExc_RuntimeError, nullptr));
    m.attr("CaptureError") = capture_error;
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const hookmagic::CaptureError& e) {
            py::object err = capture_error(e.what());
            err.attr("code") = e.code;
            PyErr_SetObject(capture_error.ptr(), err.ptr());
        }
    });

    m.def("load", [](const std::string& path) {
        std::string err = Session::instance().load(path);
        if (!err.empty()) throw std::runtime_error(err);
        return Session::instance().cupti_version();
    }, py::arg("path"), "Open libcupti at `path`; returns CUPTI's API version.");
    m.def("loaded", [] { return Session::instance().loaded(); });
    m.def("cupti_version", [] { return Session::instance().cupti_version(); },
          "CUPTI's API version (0 until load()).");
    m.def("cupti_path", [] { return Session::instance().cupti().path; });
    m.def("driver_version", [] {
        auto& drv = Session::instance().driver();
        int v = 0;
        if (drv.bind_if_loaded()) drv.cuDriverGetVersion(&v);
        return v;
    });
    m.def("timestamp", [] { return Session::instance().timestamp(); },
          "Now, on CUPTI's clock (nanoseconds).");
    m.def("running", [] { return Session::instance().running(); });
    m.def("push_range", [](int64_t id) { hookmagic::CallbackHooks::push_range(id); });
    m.def("pop_range", [] { hookmagic::CallbackHooks::pop_range(); });
    m.def("set_fallback", [](int skip_innermost) {
        Session::instance().hooks.set_fallback(skip_innermost);
    }, py::arg("skip_innermost") = 0,
       "Until clear_fallback(): work launched from threads with no Python frames is attributed "
       "to this thread's stack (less skip_innermost frames) and innermost range.");
    m.def("clear_fallback", [] { Session::instance().hooks.clear_fallback(); });
    m.def("set_backward_range", [](int64_t id) { Session::instance().hooks.set_backward_range(id); },
          "On this (engine) thread, until the next set_fallback(): launches belong to range `id`.");
    // The module frames' code objects are kept alive here while the session may read frames.
    static py::list* module_code = new py::list();  // lives until exit
    m.def("set_module_probe", [](py::object code, int slot, std::vector<py::object> skip) {
        std::vector<const void*> skip_codes;
        for (auto& c : skip) skip_codes.push_back(c.ptr());
        const bool ok = Session::instance().stacks.set_module_probe(
            code.is_none() ? nullptr : code.ptr(), slot, skip_codes);
        *module_code = py::list();
        if (ok && !code.is_none()) {
            module_code->append(code);
            for (auto& c : skip) module_code->append(c);
        }
        return ok;
    }, py::arg("code"), py::arg("slot") = 0, py::arg("skip") = std::vector<py::object>{},
       "Frames running the code object `code` (torch.nn.Module._call_impl's) are module calls: "
       "stack walks read the module from fast-local `slot` (its cell) and leave out frames "
       "running a code object in `skip` (at most 4: torch's call plumbing). None: no module "
       "frames. Set before start(); take() clears it. False if `slot` is not one of the code's "
       "fast locals (nothing is read then).");
    m.def("module_combos", [] {
        auto c = Session::instance().stacks.module_combos();
        py::dict out;
        out["root"] = to_numpy(c.root);
        out["module"] = to_numpy(c.module);
        out["module_type"] = py::cast(c.module_type);
        return out;
    }, "After stop(), before take(): each distinct (root: the outermost module on the stack, "
       "module, module_type: its class name) of the module frames seen, as columns.");
    m.def("set_module_labels", [](std::vector<std::string> labels) {
        Session::instance().stacks.set_module_labels(std::move(labels));
    }, py::arg("labels"),
       "One name per row of module_combos(), in its order: take() writes each module frame as "
       "('<module>', name, 0) ('' or no name: its class name).");
    m.def("enum_names", &enum_names);
    m.def("device_properties", &device_properties,
          "Properties of each visible GPU, if the process has already loaded the driver.");
    m.def("callback_name", [](int domain, uint32_t cbid) -> py::object {
        auto& s = Session::instance();
        const char* name = nullptr;
        if (!s.loaded()) return py::none();
        auto d = domain == 0 ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
        if (s.cupti().cuptiGetCallbackName(d, cbid, &name) != CUPTI_SUCCESS || !name)
            return py::none();
        return py::str(name);
    });

    // The capture's options: one struct, filled from hookmagic.cupti.options.CaptureOptions
    // (whose dataclass holds the defaults and validates them).
    py::class_<hookmagic::CaptureOptions>(m, "CaptureOptions",
        "What one capture records (internal: build it with hookmagic.cupti.options.CaptureOptions).")
        .def(py::init<>())
#define HM_OPTION(name) .def_readwrite(#name, &hookmagic::CaptureOptions::name)
        HM_OPTION(kernels) HM_OPTION(memory) HM_OPTION(stacks) HM_OPTION(api) HM_OPTION(nvtx)
        HM_OPTION(detach) HM_OPTION(sync_from_callbacks) HM_OPTION(activities_without_callbacks)
        HM_OPTION(callbacks) HM_OPTION(max_stack_depth) HM_OPTION(buffer_bytes)
        HM_OPTION(max_buffers) HM_OPTION(max_table_bytes)
        HM_OPTION(sync) HM_OPTION(launch_callbacks);
#undef HM_OPTION
    // What start() turns on for given options, without starting anything (no GPU needed).
    m.def("activity_selection", [](const hookmagic::CaptureOptions& o, bool subscribed) {
        std::vector<int> kinds;
        for (auto k : hookmagic::activity_kinds_for(o, subscribed)) kinds.push_back(static_cast<int>(k));
        return kinds;
    }, py::arg("options"), py::arg("subscribed"),
       "The CUPTI activity kinds a capture with `options` enables (`subscribed`: it holds "
       "CUPTI's callback API).");
    m.def("callback_selection", [](const hookmagic::CaptureOptions& o) {
        py::dict out;
        out["subscribe"] = hookmagic::wants_subscription(o);
        py::list roles;
        const std::pair<uint8_t, const char*> names[] = {
            {hookmagic::kRoleWork, "launch"}, {hookmagic::kRoleMap, "map"},
            {hookmagic::kRoleUnmap, "unmap"}, {hookmagic::kRoleSync, "sync"}};
        if (o.callbacks)
            for (const auto& [role, name] : names)
                if (hookmagic::role_wanted(role, o)) roles.append(name);
        out["roles"] = roles;
        return out;
    }, py::arg("options"),
       "{'subscribe': bool, 'roles': [...]}: whether a capture with `options` subscribes to "
       "CUPTI's callback API and which callbacks it enables (launch, map, unmap, sync).");
    m.def("frames_supported", [] { return hm_frames_supported() != 0; },
          "Whether this build reads Python stacks of the running Python (CPython 3.10-3.13).");
    py::class_<hookmagic::ProbeOptions>(m, "ProbeOptions",
        "Benchmark-only switches for probe_start (benchmarks/overhead_probe.py).")
        .def(py::init<>())
        .def_readwrite("activity_kinds", &hookmagic::ProbeOptions::activity_kinds)
        .def_readwrite("callback_domains", &hookmagic::ProbeOptions::callback_domains)
        .def_readwrite("noop_callbacks", &hookmagic::ProbeOptions::noop_callbacks);

    auto start = [](const hookmagic::CaptureOptions& options, py::object boundary,
                    const hookmagic::ProbeOptions& probe) {
        auto& s = Session::instance();
        s.start(options, boundary.is_none() ? nullptr : boundary.ptr(), probe);
        py::dict started;
        started["callbacks"] = s.callbacks_active();
        started["subscribe_error"] = s.subscribe_error();
        started["hw_trace"] = s.hw_trace();
        return started;
    };
    m.def("start", [start](const hookmagic::CaptureOptions& options, py::object boundary) {
        return start(options, boundary, hookmagic::ProbeOptions{});
    }, py::arg("options"), py::arg("boundary") = py::none(),
       "Start capturing with `options` (a CaptureOptions); stacks begin below the frame "
       "`boundary`. Returns {'callbacks': bool, 'subscribe_error': CUptiResult, 'hw_trace': bool}.");
    m.def("probe_start", start, py::arg("options"), py::arg("boundary") = py::none(),
          py::arg("probe") = hookmagic::ProbeOptions{},
          "start() with benchmark-only overrides (ProbeOptions): for the overhead probes only.");

    static hookmagic::NvmlSampler* sampler = new hookmagic::NvmlSampler();  // lives until exit
    m.def("nvml_start", [](double interval_s) {
        return sampler->start(static_cast<int64_t>(interval_s * 1e9),
                              [] { return Session::instance().timestamp(); });
    }, py::arg("interval_s") = 0.02,
       "Start sampling NVML on a native thread; returns '' or why NVML cannot be used.");
    m.def("nvml_stop", [] {
        {
            py::gil_scoped_release release;
            sampler->stop();
        }
        return export_table(sampler->samples);
    }, "Stop sampling; the samples as columns (nvml_index is NVML's device index).");
    m.def("nvml_pci", [] { return sampler->pci; },
          "(PCI domain, bus, device) of each NVML device, (-1, -1, -1) where unknown.");

    // Hardware counters (native/src/counters.h): kernel replay, one range per kernel launch.
    m.def("counters_start", [](std::vector<std::string> metrics, size_t max_ranges,
                               const std::string& replay) {
        auto& c = hookmagic::RangeCounters::instance();
        if (replay == "user") {
            c.start(Session::instance().cupti(), metrics, max_ranges, hookmagic::Replay::user,
                    Session::instance().ensure_subscriber());
        } else if (replay == "kernel") {
            c.start(Session::instance().cupti(), metrics, max_ranges);
        } else {
            throw hookmagic::CaptureError(-2, "replay is 'kernel' or 'user'");
        }
        return c.passes();
    }, py::arg("metrics"), py::arg("max_ranges"), py::arg("replay") = "kernel",
       "Count `metrics` for every kernel launched until counters_stop(); returns the replay "
       "passes. replay='user' needs a running capture (its CUPTI subscriber).");
    m.def("counters_stop", [] {
        hookmagic::CounterRows rows;
        {
            py::gil_scoped_release release;
            rows = hookmagic::RangeCounters::instance().stop();
        }
        py::dict out;
        out["range_index"] = to_numpy(rows.range_index);
        out["range_name"] = py::cast(rows.range_name);
        out["metric"] = py::cast(rows.metric);
        out["value"] = to_numpy(rows.value);
        out["ranges"] = rows.ranges;
        out["dropped"] = rows.dropped;
        out["decode_s"] = rows.decode_s;
        out["window_start"] = to_numpy(rows.window_start);
        out["window_end"] = to_numpy(rows.window_end);
        out["skipped"] = rows.skipped;
        out["first_error"] = rows.first_error;
        out["passes"] = hookmagic::RangeCounters::instance().passes();
        return out;
    }, "Stop counting; one row per (range, metric), ranges numbered in launch order.");
    m.def("counters_running", [] { return hookmagic::RangeCounters::instance().running(); });
    m.def("counters_chip", [] {
        return hookmagic::RangeCounters::instance().chip_name(Session::instance().cupti());
    }, "The chip name CUPTI's profiler host API uses for the current device.");
    m.def("counters_supported", [] {
        return hookmagic::RangeCounters::instance().supported_metrics(Session::instance().cupti());
    }, "Every metric name the current device supports for counting.");
    m.def("counters_unknown", [](std::vector<std::string> metrics) {
        return hookmagic::RangeCounters::instance().unknown_metrics(Session::instance().cupti(), metrics);
    }, py::arg("metrics"), "The names in `metrics` the profiler does not know.");

    // PM sampling (native/src/pm_sampling.h): GPU-wide metrics every interval_ns of GPU time.
    m.def("pm_start", [](std::vector<std::string> metrics, uint64_t interval_ns,
                         size_t buffer_bytes, uint32_t max_samples, uint32_t decode_period_ms) {
        return hookmagic::PmSampler::instance().start(Session::instance().cupti(), metrics,
                                                      interval_ns, buffer_bytes, max_samples,
                                                      decode_period_ms);
    }, py::arg("metrics"), py::arg("interval_ns"), py::arg("buffer_bytes"),
       py::arg("max_samples"), py::arg("decode_period_ms"),
       "Sample `metrics` every interval_ns until pm_stop(); returns the passes (1).");
    m.def("pm_stop", [] {
        hookmagic::PmRows rows;
        {
            py::gil_scoped_release release;
            rows = hookmagic::PmSampler::instance().stop();
        }
        py::dict out;
        out["start_ns"] = to_numpy(rows.start_ns);
        out["end_ns"] = to_numpy(rows.end_ns);
        out["metrics"] = py::cast(rows.metrics);
        out["values"] = to_numpy(rows.values);
        for (auto [key, value] : {std::pair<const char*, uint64_t>{"overflow", rows.overflow},
                                  {"image_full", rows.image_full}, {"decodes", rows.decodes}})
            out[key] = value;
        out["decode_s"] = rows.decode_s;
        out["cupti_start_ns"] = rows.cupti_start_ns;
        out["cupti_stop_ns"] = rows.cupti_stop_ns;
        out["error"] = rows.error;
        out["device"] = rows.device;
        return out;
    }, "Stop PM sampling; start_ns/end_ns per sample, values as samples x metrics.");
    m.def("pm_running", [] { return hookmagic::PmSampler::instance().running(); });
    m.def("pm_supported", [] {
        return hookmagic::PmSampler::instance().supported_metrics(Session::instance().cupti());
    }, "Every metric name PM sampling supports on the current device.");
    m.def("pm_unknown", [](std::vector<std::string> metrics) {
        return hookmagic::PmSampler::instance().unknown_metrics(Session::instance().cupti(), metrics);
    }, py::arg("metrics"), "The names in `metrics` PM sampling does not know.");
    m.def("pm_passes", [](std::vector<std::string> metrics) {
        return hookmagic::PmSampler::instance().passes(Session::instance().cupti(), metrics);
    }, py::arg("metrics"), "The hardware passes `metrics` need (PM sampling takes one).");

    m.def("stop", [] {
        py::gil_scoped_release release;
        Session::instance().stop();
    }, "Stop, drain, and finalize CUPTI unless started with detach=False. Idempotent.");

    m.def("take", [] {
        auto& s = Session::instance();
        if (s.running()) throw std::runtime_error("take() while a capture is running");
        py::dict out;
        // Synchronisation recorded by the callbacks joins the activity records' table.
#define HM_APPEND_SYNC(type, name, ...)                                                  \
    s.tables.sync.name.insert(s.tables.sync.name.end(), s.hooks.sync.name.begin(),       \
                              s.hooks.sync.name.end());
        HM_SYNC_COLUMNS(HM_APPEND_SYNC)
#undef HM_APPEND_SYNC
        out["kernels"] = export_table(s.tables.kernels);
        out["memcpy"] = export_table(s.tables.memcpy);
        out["memset"] = export_table(s.tables.memset);
        out["memory"] = export_table(s.tables.memory);
        out["sync"] = export_table(s.tables.sync);
        out["api"] = export_table(s.tables.api);
        out["markers"] = export_table(s.tables.markers);
        out["launches"] = export_table(s.hooks.launches);
        out["vmm"] = export_table(s.hooks.vmm);
        out["graph_nodes"] = export_table(s.hooks.graph_nodes);
        out["strings"] = py::cast(s.strings.strings);
        auto rows = s.stacks.resolve();
        py::dict st;
        st["stack_id"] = to_numpy(rows.stack_id);
        st["depth"] = to_numpy(rows.depth);
        st["filename"] = to_numpy(rows.filename);  // codes into "text"
        st["function"] = to_numpy(rows.function);
        st["line"] = to_numpy(rows.line);
        st["text"] = py::cast(rows.text);
        out["stacks"] = st;
        s.stacks.clear();
        *module_code = py::list();
        const auto& c = s.counters;
        py::dict counters;
        counters["records"] = c.records;
        counters["dropped_cupti"] = c.dropped_cupti;
        counters["dropped_limit"] = c.dropped_limit;
        counters["buffers_refused"] = s.buffers_refused();
        counters["buffers"] = c.buffers;
        counters["callbacks"] = s.hooks.callbacks;
        counters["stacks_sampled"] = s.hooks.stacks_sampled;
        counters["decode_s"] = c.decode_ns / 1e9;
        counters["subscribe_s"] = c.subscribe_ns / 1e9;
        counters["callbacks_s"] = c.callbacks_ns / 1e9;
        counters["enable_s"] = c.enable_ns / 1e9;
        counters["flush_s"] = c.flush_ns / 1e9;
        counters["detach_s"] = c.detach_ns / 1e9;
        counters["detached"] = s.detached_last();
        // The last this-many rows of "sync" came from the synchronising API callbacks.
        counters["sync_callback_rows"] = s.hooks.sync.rows();
        counters["fallback_launches"] = s.hooks.fallback_launches();
        // Exceptions caught where CUPTI calls in (the process survived; this work was lost).
        counters["faults_buffer_requested"] = s.entry_faults(hookmagic::EntryPoint::buffer_requested);
        counters["faults_buffer_completed"] = s.entry_faults(hookmagic::EntryPoint::buffer_completed);
        counters["faults_api_callback"] = s.entry_faults(hookmagic::EntryPoint::api_callback);
        out["counters"] = counters;
        s.reset_tables();
        return out;
    }, "Move the decoded columns out as NumPy arrays (the session keeps nothing).");
}
