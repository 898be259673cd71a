#include "cupti_loader.h"

#include <dlfcn.h>

namespace hookmagic {

std::string CuptiApi::load(const std::string& library_path) {
    if (handle) return "";
    // RTLD_NOLOAD first: if the process already holds a CUPTI (PyTorch's Kineto loads one),
    // a second copy would fight it for the same driver hooks.
    void* h = dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h) h = dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char* err = dlerror();
        return std::string("could not open CUPTI at ") + library_path + ": " + (err ? err : "?");
    }
#define HM_RESOLVE(name)                                                            \
    name = reinterpret_cast<decltype(name)>(dlsym(h, #name));                                 \
    if (!name) {                                                                    \
        dlclose(h);                                                                 \
        return std::string("CUPTI at ") + library_path + " lacks " #name            \
               " (CUPTI from CUDA 12.0 or newer is needed)";                        \
    }
    HM_CUPTI_FUNCTIONS(HM_RESOLVE)
#undef HM_RESOLVE
    cuptiActivityEnableHWTrace =
        reinterpret_cast<decltype(cuptiActivityEnableHWTrace)>(dlsym(h, "cuptiActivityEnableHWTrace"));
    cuptiGetStreamIdEx =
        reinterpret_cast<decltype(cuptiGetStreamIdEx)>(dlsym(h, "cuptiGetStreamIdEx"));
    handle = h;
    path = library_path;
    return "";
}

std::string CuptiApi::error_string(CUptiResult result) const {
    const char* text = nullptr;
    if (cuptiGetResultString && cuptiGetResultString(result, &text) == CUPTI_SUCCESS && text)
        return text;
    return "CUPTI error " + std::to_string(static_cast<int>(result));
}

bool DriverApi::bind_if_loaded() {
    if (handle) return true;
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h) return false;
    cuInit = reinterpret_cast<decltype(cuInit)>(dlsym(h, "cuInit"));
    cuDriverGetVersion = reinterpret_cast<decltype(cuDriverGetVersion)>(dlsym(h, "cuDriverGetVersion"));
    cuDeviceGetCount = reinterpret_cast<decltype(cuDeviceGetCount)>(dlsym(h, "cuDeviceGetCount"));
    cuDeviceGet = reinterpret_cast<decltype(cuDeviceGet)>(dlsym(h, "cuDeviceGet"));
    cuDeviceGetName = reinterpret_cast<decltype(cuDeviceGetName)>(dlsym(h, "cuDeviceGetName"));
    cuDeviceGetAttribute = reinterpret_cast<decltype(cuDeviceGetAttribute)>(dlsym(h, "cuDeviceGetAttribute"));
    cuDeviceTotalMem = reinterpret_cast<decltype(cuDeviceTotalMem)>(dlsym(h, "cuDeviceTotalMem_v2"));
    cuDeviceGetUuid = reinterpret_cast<decltype(cuDeviceGetUuid)>(dlsym(h, "cuDeviceGetUuid_v2"));
    if (!cuDeviceGetUuid)
        cuDeviceGetUuid = reinterpret_cast<decltype(cuDeviceGetUuid)>(dlsym(h, "cuDeviceGetUuid"));
    if (!cuInit || !cuDriverGetVersion || !cuDeviceGetCount || !cuDeviceGet || !cuDeviceGetName ||
        !cuDeviceGetAttribute || !cuDeviceTotalMem) {
        dlclose(h);
        return false;
    }
    handle = h;
    return true;
}

}  // namespace hookmagic
