#include "python_stacks.h"

#if PY_VERSION_HEX >= 0x030B0000
#define HM_FRAME_ADDR(f) PyFrame_GetLasti(f)
#else
#define HM_FRAME_ADDR(f) PyFrame_GetLineNumber(f)
#endif

namespace hookmagic {
namespace {

// A tight loop launches thousands of kernels from one line. While a frame is alive and
// suspended in a call, its callers cannot change, so (leaf frame, its code, its offset, its
// caller) identifies the whole stack: a hit skips the walk entirely.
struct LeafCache {
    uint64_t generation = 0;
    PyFrameObject* frame = nullptr;
    PyObject* code = nullptr;
    int addr = -1;
    PyFrameObject* back = nullptr;
    int32_t stack = -1;
};
thread_local LeafCache t_leaf;

inline uint64_t mix(uint64_t a, uint64_t b) {
    return a * 0x9E3779B97F4A7C15ull ^ (b + 0x7F4A7C159E3779B9ull + (a << 6) + (a >> 2));
}

}  // namespace

void StackInterner::begin(PyObject* boundary_frame, int max_depth) {
    Py_XINCREF(boundary_frame);
    Py_XDECREF(boundary_);
    boundary_ = boundary_frame;
    max_depth_ = max_depth > 0 ? max_depth : 64;
    ++generation_;
}

int32_t StackInterner::intern_frame(PyObject* code, int addr) {
    uint64_t key = mix(reinterpret_cast<uintptr_t>(code), static_cast<uint32_t>(addr));
    auto it = frame_index_.find(key);
    // A hash collision between two distinct frames is guarded by comparing the stored pair.
    while (it != frame_index_.end()) {
        const Frame& f = frames_[it->second];
        if (f.code == code && f.addr == addr) return it->second;
        key = mix(key, 1);
        it = frame_index_.find(key);
    }
    Py_INCREF(code);
    frames_.push_back({code, addr});
    int32_t id = static_cast<int32_t>(frames_.size() - 1);
    frame_index_.emplace(key, id);
    return id;
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

int32_t StackInterner::sample() {
    if (!Py_IsInitialized() || !PyGILState_Check()) return -1;
    PyThreadState* ts = PyThreadState_Get();
    PyFrameObject* leaf = PyThreadState_GetFrame(ts);  // new reference
    if (!leaf) return -1;
    PyCodeObject* leaf_code = PyFrame_GetCode(leaf);    // new reference
    int leaf_addr = HM_FRAME_ADDR(leaf);
    PyFrameObject* leaf_back = PyFrame_GetBack(leaf);   // new reference or NULL

    LeafCache& c = t_leaf;
    if (c.generation == generation_ && c.frame == leaf && c.code == (PyObject*)leaf_code &&
        c.addr == leaf_addr && c.back == leaf_back) {
        Py_XDECREF(leaf_back);
        Py_DECREF(leaf_code);
        Py_DECREF(leaf);
        return c.stack;
    }

    // Materialising a caller's frame object allocates; keep the collector (and any __del__
    // that might call back into CUDA) out of the walk.
    const int gc_was_enabled = PyGC_Disable();
    // Walk leaf -> root, collecting frames until the capture's boundary.
    int32_t path[256];
    int depth = 0;
    const int limit = max_depth_ < 256 ? max_depth_ : 256;
    path[depth++] = intern_frame((PyObject*)leaf_code, leaf_addr);
    PyFrameObject* f = leaf_back;
    Py_XINCREF(f);
    while (f && (PyObject*)f != boundary_ && depth < limit) {
        PyCodeObject* code = PyFrame_GetCode(f);
        path[depth++] = intern_frame((PyObject*)code, HM_FRAME_ADDR(f));
        Py_DECREF(code);
        PyFrameObject* back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    if (gc_was_enabled) PyGC_Enable();

    int32_t node = -1;
    for (int i = depth - 1; i >= 0; --i) node = intern_node(node, path[i]);

    c.generation = generation_;
    c.frame = leaf;
    c.code = (PyObject*)leaf_code;
    c.addr = leaf_addr;
    c.back = leaf_back;
    c.stack = node;
    Py_XDECREF(leaf_back);
    Py_DECREF(leaf_code);
    Py_DECREF(leaf);
    return node;
}

StackInterner::Rows StackInterner::resolve() const {
    Rows rows;
    std::vector<std::string> file(frames_.size()), func(frames_.size());
    std::vector<int32_t> line(frames_.size());
    for (size_t i = 0; i < frames_.size(); ++i) {
        PyCodeObject* code = reinterpret_cast<PyCodeObject*>(frames_[i].code);
        PyObject* fn = PyObject_GetAttrString(frames_[i].code, "co_filename");
        PyObject* qn = PyObject_GetAttrString(frames_[i].code, "co_qualname");
        if (!qn) { PyErr_Clear(); qn = PyObject_GetAttrString(frames_[i].code, "co_name"); }
        const char* fs = fn ? PyUnicode_AsUTF8(fn) : nullptr;
        const char* qs = qn ? PyUnicode_AsUTF8(qn) : nullptr;
        if (!fs || !qs) PyErr_Clear();
        file[i] = fs ? fs : "?";
        func[i] = qs ? qs : "?";
        Py_XDECREF(fn);
        Py_XDECREF(qn);
#if PY_VERSION_HEX >= 0x030B0000
        line[i] = frames_[i].addr >= 0 ? PyCode_Addr2Line(code, frames_[i].addr) : -1;
#else
        (void)code;
        line[i] = frames_[i].addr;
#endif
    }
    // Expand each trie node into its root-first frame list.
    std::vector<int32_t> chain;
    for (size_t n = 0; n < nodes_.size(); ++n) {
        chain.clear();
        for (int32_t k = static_cast<int32_t>(n); k >= 0; k = nodes_[k].parent)
            chain.push_back(nodes_[k].frame);
        int32_t depth = 0;
        for (auto it = chain.rbegin(); it != chain.rend(); ++it, ++depth) {
            rows.stack_id.push_back(static_cast<int64_t>(n));
            rows.depth.push_back(depth);
            rows.filename.push_back(file[*it]);
            rows.function.push_back(func[*it]);
            rows.line.push_back(line[*it]);
        }
    }
    return rows;
}

void StackInterner::clear() {
    for (auto& f : frames_) Py_DECREF(f.code);
    frames_.clear();
    frame_index_.clear();
    nodes_.clear();
    node_index_.clear();
    Py_XDECREF(boundary_);
    boundary_ = nullptr;
    ++generation_;
}

}  // namespace hookmagic
