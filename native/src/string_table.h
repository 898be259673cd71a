// String interning for decoded records: each distinct text gets one id, its index in
// `strings`. Kernel names are cached by address as well (CUPTI owns them for the module's
// life, so an address seen twice is the same name); demangling happens once per name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hookmagic {

class StringTable {
public:
    // The id of `text` (demangled first when `demangle`, if it is a mangled C++ name).
    int32_t intern(std::string_view text, bool demangle);
    // As intern(), cached by the address `s` (which must stay valid and unchanged for as long
    // as this table is not cleared). Only for strings owned by CUPTI.
    int32_t intern_owned(const char* s, bool demangle);
    void clear();

    std::vector<std::string> strings;

private:
    std::unordered_map<const char*, int32_t> by_address_;
    std::unordered_map<std::string, int32_t> by_text_;
};

}  // namespace hookmagic
