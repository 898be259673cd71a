#include "nvml_sampler.h"

#include <dlfcn.h>

#include <chrono>
#include <cmath>

namespace hookmagic {
namespace {

// The handful of NVML entry points used, declared from NVML's stable C ABI (nvml.h ships
// with the driver's development files, not with any wheel the build can rely on).
using nvmlReturn = int;
using nvmlDevice = void*;
struct nvmlUtilization { unsigned int gpu, memory; };
struct nvmlMemory { unsigned long long total, free, used; };
struct nvmlPciInfo {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};
constexpr int kClockSm = 1, kClockMem = 2, kTemperatureGpu = 0;

struct NvmlApi {
    nvmlReturn (*init)() = nullptr;
    nvmlReturn (*count)(unsigned int*) = nullptr;
    nvmlReturn (*handle)(unsigned int, nvmlDevice*) = nullptr;
    nvmlReturn (*utilization)(nvmlDevice, nvmlUtilization*) = nullptr;
    nvmlReturn (*memory)(nvmlDevice, nvmlMemory*) = nullptr;
    nvmlReturn (*clock)(nvmlDevice, int, unsigned int*) = nullptr;
    nvmlReturn (*power)(nvmlDevice, unsigned int*) = nullptr;
    nvmlReturn (*temperature)(nvmlDevice, int, unsigned int*) = nullptr;
    nvmlReturn (*pci)(nvmlDevice, nvmlPciInfo*) = nullptr;  // optional
    const char* (*error)(nvmlReturn) = nullptr;
};

NvmlApi& api() {
    static NvmlApi a;
    return a;
}

template <class F>
void bind(void* lib, F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

NvmlSampler::~NvmlSampler() { stop(); }

// NVML stays initialised for the life of the process: nvmlInit costs milliseconds, and an
// initialised NVML costs nothing while no one queries it.
std::string NvmlSampler::open() {
    NvmlApi& a = api();
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return "libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)";
    bind(lib, a.init, "nvmlInit_v2");
    bind(lib, a.count, "nvmlDeviceGetCount_v2");
    bind(lib, a.handle, "nvmlDeviceGetHandleByIndex_v2");
    bind(lib, a.utilization, "nvmlDeviceGetUtilizationRates");
    bind(lib, a.memory, "nvmlDeviceGetMemoryInfo");
    bind(lib, a.clock, "nvmlDeviceGetClockInfo");
    bind(lib, a.power, "nvmlDeviceGetPowerUsage");
    bind(lib, a.temperature, "nvmlDeviceGetTemperature");
    bind(lib, a.error, "nvmlErrorString");
    bind(lib, a.pci, "nvmlDeviceGetPciInfo_v3");
    if (!a.init || !a.count || !a.handle || !a.utilization || !a.memory || !a.clock || !a.power ||
        !a.temperature || !a.error)
        return "libnvidia-ml.so.1 lacks an NVML function hookmagic needs";
    nvmlReturn r = a.init();
    if (r != 0) return std::string("NVML did not initialise: ") + a.error(r);
    unsigned int n = 0;
    if ((r = a.count(&n)) != 0) return std::string("NVML cannot count devices: ") + a.error(r);
    std::vector<void*> devices(n, nullptr);
    for (unsigned int i = 0; i < n; ++i)
        if ((r = a.handle(i, &devices[i])) != 0)
            return std::string("NVML cannot open device ") + std::to_string(i) + ": " + a.error(r);
    pci.assign(n, {-1, -1, -1});
    for (unsigned int i = 0; i < n; ++i) {
        nvmlPciInfo info{};
        if (a.pci && a.pci(devices[i], &info) == 0)
            pci[i] = {static_cast<int>(info.domain), static_cast<int>(info.bus),
                      static_cast<int>(info.device)};
    }
    devices_ = std::move(devices);
    opened_ = true;
    return "";
}

std::string NvmlSampler::start(int64_t interval_ns, std::function<uint64_t()> clock) {
    stop();
    samples.clear();
    if (!opened_) {
        std::string why = open();
        if (!why.empty()) return why;
    }
    clock_ = std::move(clock);
    interval_ns_ = interval_ns > 0 ? interval_ns : 20'000'000;
    stopping_ = false;
    thread_ = std::thread([this] { run(); });
    return "";
}

void NvmlSampler::stop() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void NvmlSampler::run() {
    // A sample at the start and one at the end, so even a short cell has a before and after.
    sample_all();
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, std::chrono::nanoseconds(interval_ns_), [this] { return stopping_; })) {
        lock.unlock();
        sample_all();
        lock.lock();
    }
    lock.unlock();
    sample_all();
}

void NvmlSampler::sample_all() {
    const NvmlApi& a = api();
    const double nan = std::nan("");
    for (size_t i = 0; i < devices_.size(); ++i) {
        nvmlDevice d = devices_[i];
        // A GPU that does not report a field (Jetson: power or memory on some releases) gets
        // NaN / -1 there instead of losing the sample.
        const int64_t now = static_cast<int64_t>(clock_());
        nvmlUtilization util{};
        nvmlMemory mem{};
        unsigned int sm = 0, memclk = 0, mw = 0, temp = 0;
        const bool has_util = a.utilization(d, &util) == 0;
        const bool has_mem = a.memory(d, &mem) == 0;
        const bool has_sm = a.clock(d, kClockSm, &sm) == 0;
        const bool has_memclk = a.clock(d, kClockMem, &memclk) == 0;
        const bool has_power = a.power(d, &mw) == 0;
        const bool has_temp = a.temperature(d, kTemperatureGpu, &temp) == 0;
        samples.time_ns.push_back(now);
        samples.nvml_index.push_back(static_cast<int32_t>(i));
        samples.gpu_util.push_back(has_util ? util.gpu : nan);
        samples.mem_util.push_back(has_util ? util.memory : nan);
        samples.memory_used.push_back(has_mem ? static_cast<int64_t>(mem.used) : -1);
        samples.memory_total.push_back(has_mem ? static_cast<int64_t>(mem.total) : -1);
        samples.sm_clock_mhz.push_back(has_sm ? sm : nan);
        samples.mem_clock_mhz.push_back(has_memclk ? memclk : nan);
        samples.power_w.push_back(has_power ? mw / 1000.0 : nan);
        samples.temperature_c.push_back(has_temp ? temp : nan);
    }
}

}  // namespace hookmagic
