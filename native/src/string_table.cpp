#include "string_table.h"

#include <cxxabi.h>

#include <cstdlib>

namespace hookmagic {
namespace {

// Longer "names" are kept as they are: nothing real is that long, and the demangler's work
// grows with its input.
constexpr size_t kMaxDemangle = 16384;

std::string demangled(std::string_view text) {
    if (text.size() < 2 || text.size() > kMaxDemangle || text[0] != '_' || text[1] != 'Z')
        return std::string(text);
    const std::string input(text);  // NUL-terminated for the demangler
    int status = 0;
    char* d = abi::__cxa_demangle(input.c_str(), nullptr, nullptr, &status);
    std::string out = (status == 0 && d) ? std::string(d) : input;
    std::free(d);
    return out;
}

}  // namespace

int32_t StringTable::intern(std::string_view text, bool demangle) {
    std::string key = demangle ? demangled(text) : std::string(text);
    auto it = by_text_.find(key);
    if (it != by_text_.end()) return it->second;
    const auto id = static_cast<int32_t>(strings.size());
    strings.push_back(key);
    by_text_.emplace(std::move(key), id);
    return id;
}

int32_t StringTable::intern_owned(const char* s, bool demangle) {
    if (!s) s = "";
    auto hit = by_address_.find(s);
    if (hit != by_address_.end()) return hit->second;
    const int32_t id = intern(std::string_view(s), demangle);
    by_address_.emplace(s, id);
    return id;
}

void StringTable::clear() {
    strings.clear();
    by_address_.clear();
    by_text_.clear();
}

}  // namespace hookmagic
