#include "python_stacks.h"

#include <map>
#include <tuple>

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

bool StackInterner::set_module_probe(const void* code, int slot,
                                     const std::vector<const void*>& skip) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool ok = code && hm_module_probe_check(code, slot);
    module_code_ = ok ? code : nullptr;
    module_slot_ = ok ? slot : 0;
    skip_.clear();
    if (ok)
        for (const void* c : skip)
            if (c && skip_.size() < HM_MAX_SKIP) skip_.push_back(c);
    return ok || !code;
}

void StackInterner::name_module_nodes() {
    // Parents are interned before their children, so one pass in id order sees each node's
    // outermost module (its root) already set on its parent.
    std::vector<uint64_t> root(nodes_.size(), 0);
    node_combo_.assign(nodes_.size(), -1);
    std::map<std::tuple<uint64_t, uint64_t, std::string>, int32_t> index;
    for (size_t i = 0; i < combos_.root.size(); ++i)
        index.emplace(std::make_tuple(combos_.root[i], combos_.module[i], combos_.module_type[i]),
                      static_cast<int32_t>(i));
    for (size_t n = 0; n < nodes_.size(); ++n) {
        const Node& node = nodes_[n];
        root[n] = node.parent >= 0 ? root[node.parent] : 0;
        const Frame& f = frames_[node.frame];
        if (!f.module) continue;
        if (!root[n]) root[n] = f.module;
        auto key = std::make_tuple(root[n], f.module, f.module_type);
        auto it = index.find(key);
        if (it == index.end()) {
            it = index.emplace(key, static_cast<int32_t>(combos_.root.size())).first;
            combos_.root.push_back(root[n]);
            combos_.module.push_back(f.module);
            combos_.module_type.push_back(f.module_type);
        }
        node_combo_[n] = it->second;
    }
}

StackInterner::Combos StackInterner::module_combos() {
    std::lock_guard<std::mutex> lock(mu_);
    name_module_nodes();
    return combos_;
}

void StackInterner::set_module_labels(std::vector<std::string> labels) {
    std::lock_guard<std::mutex> lock(mu_);
    labels_ = std::move(labels);
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
    hm_module_probe probe{module_code_, module_slot_, {nullptr}, 0};
    for (const void* code : skip_) probe.skip[probe.n_skip++] = code;
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

StackInterner::Rows StackInterner::resolve() {
    std::lock_guard<std::mutex> lock(mu_);
    if (node_combo_.size() != nodes_.size()) name_module_nodes();
    Rows rows;
    std::unordered_map<std::string, int32_t> index;
    auto code = [&](const std::string& text) {
        auto it = index.find(text);
        if (it != index.end()) return it->second;
        const int32_t c = static_cast<int32_t>(rows.text.size());
        rows.text.push_back(text);
        index.emplace(text, c);
        return c;
    };
    // Each frame's texts coded once; a module frame by Python's label, else its class.
    std::vector<int32_t> frame_file(frames_.size()), frame_function(frames_.size());
    for (size_t f = 0; f < frames_.size(); ++f) {
        frame_file[f] = code(frames_[f].file);
        frame_function[f] = code(frames_[f].function);
    }
    std::vector<int32_t> combo_function(combos_.root.size());
    for (size_t c = 0; c < combos_.root.size(); ++c)
        combo_function[c] = code(c < labels_.size() && !labels_[c].empty() ? labels_[c]
                                                                           : combos_.module_type[c]);
    const int32_t module_file = combos_.root.empty() ? -1 : code("<module>");
    // Parents are interned before their children: a node's depth is its parent's plus one.
    std::vector<int32_t> depth_of(nodes_.size());
    size_t total = 0;
    for (size_t n = 0; n < nodes_.size(); ++n) {
        depth_of[n] = nodes_[n].parent >= 0 ? depth_of[nodes_[n].parent] + 1 : 0;
        total += static_cast<size_t>(depth_of[n]) + 1;
    }
    rows.stack_id.reserve(total);
    rows.depth.reserve(total);
    rows.filename.reserve(total);
    rows.function.reserve(total);
    rows.line.reserve(total);
    std::vector<int32_t> chain;
    for (size_t n = 0; n < nodes_.size(); ++n) {
        chain.clear();
        for (int32_t k = static_cast<int32_t>(n); k >= 0; k = nodes_[k].parent) chain.push_back(k);
        int32_t depth = 0;
        for (auto it = chain.rbegin(); it != chain.rend(); ++it, ++depth) {
            const int32_t frame = nodes_[*it].frame;
            rows.stack_id.push_back(static_cast<int64_t>(n));
            rows.depth.push_back(depth);
            const int32_t combo = node_combo_[*it];
            if (combo >= 0) {
                rows.filename.push_back(module_file);
                rows.function.push_back(combo_function[combo]);
                rows.line.push_back(0);
            } else {
                rows.filename.push_back(frame_file[frame]);
                rows.function.push_back(frame_function[frame]);
                rows.line.push_back(frames_[frame].line);
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
    skip_.clear();
    combos_ = Combos{};
    labels_.clear();
    node_combo_.clear();
}

}  // namespace hookmagic
