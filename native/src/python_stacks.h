// Python stacks sampled at CUDA API callbacks, interned into a caller-first trie.
//
// There is no per-call profiling hook: a stack is read only when a launch, copy or
// allocation callback fires, from the launching thread's own frames (python_frames.c), with
// or without the GIL. A frame is named once, the first time it is seen; a stack seen before
// costs one walk and one hash lookup.
//
// Module frames: a frame running torch.nn.Module._call_impl (the code object Python names
// with set_module_probe) also records its `self`, the module being called: its address is
// part of the frame's identity (one call site under two modules is two frames), and its
// class name is copied when the frame is first seen. Python turns addresses into qualified
// names at the end (hookmagic.cupti.modules), comparing them with id() of live modules and
// never dereferencing them.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace hookmagic {

class StackInterner {
public:
    // Frames at and above `boundary_frame` (a frame object: the code that started the
    // capture) are left out, so stacks begin with the user's own code. Needs the GIL.
    void begin(void* boundary_frame, int max_depth);
    // The code object whose frames are module calls and the fast-local slot of their `self`
    // (null: none), and code objects whose frames are left out (torch's call plumbing; at most
    // HM_MAX_SKIP). The caller keeps them alive until clear(). Needs the GIL; false if the
    // slot is not one of the code's fast locals (then no module frames are read).
    bool set_module_probe(const void* code, int slot, const std::vector<const void*>& skip = {});
    // After the capture: each distinct (outermost module on the stack, module, its class) of
    // the module frames seen, for Python to name (addresses are compared, never read).
    struct Combos {
        std::vector<uint64_t> root, module;
        std::vector<std::string> module_type;
    };
    Combos module_combos();
    // One label per combo of the last module_combos(), in its order: resolve() then writes each
    // module frame as ("<module>", label, 0). Without labels a module frame is its class name.
    void set_module_labels(std::vector<std::string> labels);
    // The calling thread's stack id, or -1 if it has no Python frames. Any thread, no GIL.
    // `skip_innermost` leaves out that many of the innermost frames (a wrapper's own).
    int32_t sample(int skip_innermost = 0);
    // Long-form table: one row per (stack, depth), depth 0 the outermost frame. Filenames and
    // functions are codes into `text`, which holds each distinct one once (a stack table
    // repeats a few hundred texts over thousands of rows; Python converts each text once).
    struct Rows {
        std::vector<int64_t> stack_id;
        std::vector<int32_t> depth;
        std::vector<int32_t> filename, function;
        std::vector<int32_t> line;
        std::vector<std::string> text;
    };
    Rows resolve();
    void clear();

private:
    struct Frame {
        std::string file, function;
        int32_t line;
        uint64_t module;          // address of the module a module frame calls, else 0
        std::string module_type;  // its class name (tp_name), copied at first sight
    };
    struct Node {
        int32_t parent;  // -1 for the outermost frame
        int32_t frame;
    };
    int32_t intern_node(int32_t parent, int32_t frame);
    void name_module_nodes();  // node_combo_ for every node; needs mu_ held

    mutable std::mutex mu_;
    const void* boundary_ = nullptr;
    int max_depth_ = 64;
    const void* module_code_ = nullptr;  // read by sample() on any thread; set between captures
    int module_slot_ = 0;
    std::vector<const void*> skip_;
    Combos combos_;
    std::vector<std::string> labels_;     // one per combo, from Python
    std::vector<int32_t> node_combo_;     // per node: its frame's combo, -1 if not a module frame
    std::vector<Frame> frames_;
    std::unordered_map<uint64_t, int32_t> frame_index_;  // hash of the frame's identity
    std::vector<Node> nodes_;
    std::unordered_map<uint64_t, int32_t> node_index_;   // (parent, frame) -> node
    std::unordered_map<uint64_t, int32_t> stack_index_;  // hash of a whole walk -> node
};

}  // namespace hookmagic
