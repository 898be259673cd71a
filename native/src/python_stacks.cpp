#include "python_stacks.h"

#include "python_frames.h"

namespace hookmagic {
namespace {

inline uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xFF51AFD7ED558CCDull;
}

// A frame's identity: its code object, instruction, the code's name and file objects, and
// for a module frame the module it calls. Name and file guard against a freed code object
// whose address is reused by another.
inline uint64_t frame_key(const hm_frame& f) {
    uint64_t h = mix(0, reinterpret_cast<uintptr_t>(f.code));
    h = mix(h, static_cast<uint32_t>(f.addr));
    h = mix(h, reinterpret_cast<uintptr_t>(f.name_obj));
    h = mix(h, reinterpret_cast<uintptr_t>(f.file_obj));
    return f.module ? mix(h, reinterpret_cast<uintptr_t>(f.module)) : h;
}

constexpr int kMaxDepth = 256;

}  // namespace

void StackInterner::begin(void* boundary_frame, int max_depth) {
    std::lock_guard<std::mutex> lock(mu_);
    boundary_ = hm_boundary_of(boundary_frame);
    max_depth_ = max_depth > 0 && max_depth < kMaxDepth ? max_depth : kMaxDepth;
}

bool StackInterner::set_module_probe(const void* code, int slot) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool ok = code && hm_module_probe_check(code, slot);
    module_code_ = ok ? code : nullptr;
    module_slot_ = ok ? slot : 0;
    return ok || !code;
}

int32_t StackInterner::intern_node(int32_t parent, int32_t frame) {
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) |
                   static_cast<uint32_t>(frame);
    auto it = node_index_.find(key);
    if (it != node_index_.end()) return it->second;
    nodes_.push_back({parent, frame});
    int32_t id = static_cast<int32_t>(nodes_.size() - 1);
    node_index_.emplace(key, id);
    return id;
}

int32_t StackInterner::sample(int skip_innermost) {
    hm_frame frames[kMaxDepth];
    const hm_module_probe probe{module_code_, module_slot_};
    int depth = hm_walk_current_thread(boundary_, &probe, frames, max_depth_);
    if (skip_innermost < 0) skip_innermost = 0;
    if (depth <= skip_innermost) return -1;
    const hm_frame* walk = frames + skip_innermost;
    depth -= skip_innermost;
    uint64_t keys[kMaxDepth];
    uint64_t whole = 0x84222325CBF29CE4ull;
    for (int i = 0; i < depth; ++i) {
        keys[i] = frame_key(walk[i]);
        whole = mix(whole, keys[i]);
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto hit = stack_index_.find(whole);
    if (hit != stack_index_.end()) return hit->second;
    int32_t node = -1;
    char file[512], func[256], module_type[256];
    for (int i = depth - 1; i >= 0; --i) {  // outermost first
        int32_t frame;
        auto known = frame_index_.find(keys[i]);
        if (known != frame_index_.end()) {
            frame = known->second;
        } else {
            int line = -1;
            hm_describe(&walk[i], file, sizeof(file), func, sizeof(func), &line, module_type,
                        sizeof(module_type));
            frames_.push_back({file, func, line, reinterpret_cast<uintptr_t>(walk[i].module),
                               module_type});
            frame = static_cast<int32_t>(frames_.size() - 1);
            frame_index_.emplace(keys[i], frame);
        }
        node = intern_node(node, frame);
    }
    stack_index_.emplace(whole, node);
    return node;
}

StackInterner::Rows StackInterner::resolve() const {
    std::lock_guard<std::mutex> lock(mu_);
    Rows rows;
    std::vector<int32_t> chain;
    for (size_t n = 0; n < nodes_.size(); ++n) {
        chain.clear();
        for (int32_t k = static_cast<int32_t>(n); k >= 0; k = nodes_[k].parent)
            chain.push_back(nodes_[k].frame);
        int32_t depth = 0;
        for (auto it = chain.rbegin(); it != chain.rend(); ++it, ++depth) {
            const Frame& f = frames_[*it];
            rows.stack_id.push_back(static_cast<int64_t>(n));
            rows.depth.push_back(depth);
            rows.filename.push_back(f.file);
            rows.function.push_back(f.function);
            rows.line.push_back(f.line);
            if (f.module) {
                rows.module_stack_id.push_back(static_cast<int64_t>(n));
                rows.module_depth.push_back(depth);
                rows.module.push_back(f.module);
                rows.module_type.push_back(f.module_type);
            }
        }
    }
    return rows;
}

void StackInterner::clear() {
    std::lock_guard<std::mutex> lock(mu_);
    frames_.clear();
    frame_index_.clear();
    nodes_.clear();
    node_index_.clear();
    stack_index_.clear();
    boundary_ = nullptr;
    module_code_ = nullptr;
    module_slot_ = 0;
}

}  // namespace hookmagic
