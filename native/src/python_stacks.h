// Python stacks sampled at CUDA API callbacks, interned into a caller-first trie.
//
// There is no per-call profiling hook: a stack is read only when a launch, copy or
// allocation callback fires on a thread that holds the GIL. Frames are keyed by
// (code object, instruction offset) and resolved to file/function/line once, at the end.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace hookmagic {

class StackInterner {
public:
    // Frames at and above `boundary` (the code that started the capture) are not recorded,
    // so every stack begins with the user's own code. Holds a strong reference.
    void begin(PyObject* boundary_frame, int max_depth);
    // Samples the calling thread's stack; -1 when the thread does not hold the GIL.
    // Safe to call from CUPTI callbacks on any thread.
    int32_t sample();
    // Long-form table: one row per (stack, depth), depth 0 the outermost frame. Needs the GIL.
    struct Rows {
        std::vector<int64_t> stack_id;
        std::vector<int32_t> depth;
        std::vector<std::string> filename, function;
        std::vector<int32_t> line;
    };
    Rows resolve() const;
    // Drops every reference; needs the GIL.
    void clear();
    size_t size() const { return nodes_.size(); }

private:
    struct Frame {
        PyObject* code;  // strong reference
        int addr;        // instruction offset (Python >= 3.11) or line number (3.10)
    };
    struct Node {
        int32_t parent;  // -1 for a stack of one frame
        int32_t frame;
    };
    int32_t intern_frame(PyObject* code, int addr);
    int32_t intern_node(int32_t parent, int32_t frame);

    PyObject* boundary_ = nullptr;
    int max_depth_ = 64;
    uint64_t generation_ = 0;  // invalidates the per-thread leaf caches of earlier captures
    std::vector<Frame> frames_;
    std::unordered_map<uint64_t, int32_t> frame_index_;  // (code ptr, addr) hash -> frame
    std::vector<Node> nodes_;
    std::unordered_map<uint64_t, int32_t> node_index_;   // (parent, frame) -> node
};

}  // namespace hookmagic
