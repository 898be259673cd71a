// hookmagic_decoder_testing: the real CUPTI record decoder (src/decoder.h) on hand-built
// records, for the tests and the decoding benchmark on machines without a GPU. Built from
// native/testing/ beside the production module, never installed into the wheel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>

#include "checked_decode.h"
#include "fake_cupti.h"
#include "python_stacks.h"
#include "session.h"

namespace py = pybind11;

namespace {

template <class Table>
py::dict export_table(const Table& table);

#define HM_LIST_COLUMN(type, name, ...) \
    out[#name] = py::array_t<type>(static_cast<py::ssize_t>(table.name.size()), table.name.data());
#define HM_EXPORTER(Table, COLUMNS)                                          \
    template <>                                                              \
    py::dict export_table<hookmagic::Table>(const hookmagic::Table& table) { \
        py::dict out;                                                        \
        COLUMNS(HM_LIST_COLUMN)                                              \
        return out;                                                          \
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

}  // namespace

PYBIND11_MODULE(hookmagic_decoder_testing, m) {
    m.doc() = "The native CUPTI decoder on caller-given bytes, and the stack walker on the "
              "caller's own stack (tests only).";
    // The real interner and walker (src/python_stacks.cpp, src/python_frames.c), as a
    // capture runs them: samples on the calling thread without the GIL, then names.
    py::class_<hookmagic::StackInterner>(m, "StackInterner",
        "One capture's stack interner (tests only): set_module_probe, sample, module_combos, "
        "set_module_labels, resolve, as the native session calls them.")
        .def(py::init<>())
        .def("set_module_probe", [](hookmagic::StackInterner& self, py::object code, int slot,
                                    std::vector<py::object> skip) {
            std::vector<const void*> codes;
            for (auto& c : skip) codes.push_back(c.ptr());
            if (!self.set_module_probe(code.is_none() ? nullptr : code.ptr(), slot, codes))
                throw py::value_error("slot is not one of the code object's fast locals");
            self.begin(nullptr, 64);
        }, py::arg("code"), py::arg("slot") = 0, py::arg("skip") = std::vector<py::object>{},
           "The caller keeps `code` and `skip` alive while sampling.")
        .def("sample", [](hookmagic::StackInterner& self) {
            py::gil_scoped_release release;  // as a launch callback: without the GIL
            return self.sample();
        }, "The calling thread's stack id (-1: no frames).")
        .def("module_combos", [](hookmagic::StackInterner& self) {
            auto c = self.module_combos();
            py::dict out;
            out["root"] = c.root;
            out["module"] = c.module;
            out["module_type"] = c.module_type;
            return out;
        })
        .def("set_module_labels", &hookmagic::StackInterner::set_module_labels)
        .def("resolve", [](hookmagic::StackInterner& self) {
            auto rows = self.resolve();
            py::dict out;
            out["stack_id"] = rows.stack_id;
            out["depth"] = rows.depth;
            std::vector<std::string> filename, function;  // the texts the codes stand for
            for (int32_t c : rows.filename) filename.push_back(rows.text[c]);
            for (int32_t c : rows.function) function.push_back(rows.text[c]);
            out["filename"] = filename;
            out["function"] = function;
            out["line"] = rows.line;
            return out;
        });
    m.def("decode", [](py::buffer data, std::vector<uint64_t> offsets,
                       std::vector<std::string> names) {
        py::buffer_info info = data.request();
        if (info.ndim != 1 || info.itemsize != 1)
            throw py::value_error("decode() needs a flat buffer of bytes");
        const auto* bytes = static_cast<const uint8_t*>(info.ptr);
        const size_t size = static_cast<size_t>(info.size);
        hookmagic::ActivityTables tables;
        hookmagic::StringTable strings;
        hookmagic::CheckedDecodeCounts counts;
        std::string error;
        bool ok;
        const auto t0 = std::chrono::steady_clock::now();
        {
            py::gil_scoped_release release;
            ok = hookmagic::decode_checked(bytes, size, offsets, names, tables, strings, counts,
                                           error);
        }
        const double decode_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!ok) throw py::value_error(error);
        py::dict out;
        out["kernels"] = export_table(tables.kernels);
        out["memcpy"] = export_table(tables.memcpy);
        out["memset"] = export_table(tables.memset);
        out["memory"] = export_table(tables.memory);
        out["sync"] = export_table(tables.sync);
        out["api"] = export_table(tables.api);
        out["markers"] = export_table(tables.markers);
        out["launches"] = export_table(hookmagic::LaunchTable{});  // no callbacks here
        out["vmm"] = export_table(hookmagic::VmmTable{});
        out["strings"] = py::cast(strings.strings);
        py::dict c;
        c["decoded"] = counts.decoded;
        c["skipped"] = counts.skipped;
        c["too_short"] = counts.too_short;
        c["bad_string"] = counts.bad_string;
        c["decode_s"] = decode_s;
        out["counts"] = c;
        return out;
    }, py::arg("data"), py::arg("offsets"), py::arg("names") = std::vector<std::string>{},
       "Decode the records at `offsets` in `data` (bytes in CUPTI's record layout). String "
       "fields are 1-based indices into `names` (0: none). Returns the tables as NumPy columns (as _native.take() does), the "
       "interned strings and counts of decoded/skipped/too_short/bad_string records; raises "
       "ValueError (decoding nothing) if an offset leaves no record inside the buffer.");

    // The real Session over the CPU stand-in for CUPTI (testing/fake_cupti.h): one capture's
    // lifecycle under a scripted failure, as CUPTI would drive it.
    m.def("fake_session", [](const std::string& scenario, bool activities_without_callbacks) {
        using namespace hookmagic;
        fake::Script script;
        if (scenario == "throw_in_decode")
            script.throw_in_next_record = true;
        else if (scenario == "throw_in_callback")
            script.throw_in_timestamp = true;
        else if (scenario == "enable_refused")
            script.enable_fails_kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        else if (scenario == "subscribe_refused")
            script.subscribe_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
        else if (scenario != "clean")
            throw py::value_error("unknown scenario " + scenario);
        Session& s = Session::instance();
        s.use_api(fake::api(script));
        CaptureOptions options;
        options.stacks = false;
        options.memory = false;
        options.detach = false;
        options.activities_without_callbacks = activities_without_callbacks;
        py::dict out;
        out["start_error"] = py::none();
        try {
            s.start(options, nullptr);
        } catch (const CaptureError& e) {
            out["start_error"] = std::string(e.what());
        }
        out["running_after_start"] = s.running();
        out["subscribed"] = s.callbacks_active();
        if (s.running()) {
            // CUPTI asks for a buffer, then hands it back holding 64 bytes of records.
            if (auto request = fake::registered_request()) {
                uint8_t* buffer = nullptr;
                size_t size = 0, max_records = 0;
                request(&buffer, &size, &max_records);
                out["buffer_bytes"] = size;
                out["buffers_out_during"] = s.buffers_out();
                if (auto complete = fake::registered_complete())
                    complete(nullptr, 0, buffer, size, 64);
            }
            // A synchronising runtime call: its entry and exit callbacks.
            if (auto callback = fake::registered_callback()) {
                CUpti_CallbackData data{};
                data.functionName = "cudaStreamSynchronize";
                data.callbackSite = CUPTI_API_ENTER;
                callback(nullptr, CUPTI_CB_DOMAIN_RUNTIME_API, fake::kStreamSyncCbid, &data);
                data.callbackSite = CUPTI_API_EXIT;
                callback(nullptr, CUPTI_CB_DOMAIN_RUNTIME_API, fake::kStreamSyncCbid, &data);
            }
            s.stop();
        }
        out["running_after_stop"] = s.running();
        out["buffers_out_after"] = s.buffers_out();
        out["faults_buffer_requested"] = s.entry_faults(EntryPoint::buffer_requested);
        out["faults_buffer_completed"] = s.entry_faults(EntryPoint::buffer_completed);
        out["faults_api_callback"] = s.entry_faults(EntryPoint::api_callback);
        out["sync_rows"] = s.hooks.sync.rows();
        const auto& c = fake::calls();
        out["calls"] = py::dict(py::arg("subscribe") = c.subscribe, py::arg("unsubscribe") = c.unsubscribe,
                                py::arg("enable") = c.enable, py::arg("disable") = c.disable,
                                py::arg("flush") = c.flush, py::arg("finalize") = c.finalize);
        s.reset_tables();
        return out;
    }, py::arg("scenario"), py::arg("activities_without_callbacks") = false,
       "Run one capture of the real Session over the CPU stand-in for CUPTI, scripted to fail "
       "as `scenario` says (clean, throw_in_decode, throw_in_callback, enable_refused, "
       "subscribe_refused); returns what the session did and counted.");
}
