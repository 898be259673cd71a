/* Reading a thread's Python stack without holding the GIL.
 *
 * PyTorch and CuPy release the GIL around their CUDA calls, so a launch callback usually runs
 * on a thread that does not hold it. The calling thread's own frames cannot change while it is
 * inside that call, so they can be read directly from CPython's frame structures, as
 * out-of-process samplers do, without touching reference counts or allocating. This file is C
 * because CPython's internal headers are. */
#ifndef HOOKMAGIC_PYTHON_FRAMES_H
#define HOOKMAGIC_PYTHON_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const void* code;      /* code object (borrowed; valid only during the walk) */
    int addr;              /* byte offset of the current instruction */
    const void* name_obj;  /* co_qualname (co_name on 3.10): identity check for reused code */
    const void* file_obj;  /* co_filename */
    const void* module;    /* `self` of a module frame (see hm_module_probe), else NULL */
} hm_frame;

#define HM_MAX_SKIP 4

/* Which frames are nn.Module calls and where their `self` lives: the code object of
 * torch.nn.Module._call_impl and the index of `self` among its fast locals (localsplus on
 * 3.11+, f_localsplus on 3.10: a cell once MAKE_CELL ran, the raw object before). A NULL
 * code: no module frames. `skip`: code objects whose frames are left out of walks (torch's
 * call plumbing around module calls: _wrapped_call_impl, _call_impl's nested `inner`).
 * Checked from Python, with the GIL, by hm_module_probe_check(). */
typedef struct {
    const void* code;
    int slot;
    const void* skip[HM_MAX_SKIP];
    int n_skip;
} hm_module_probe;

/* 1 if `slot` is a valid fast-local index of the code object `code` (borrowed). Needs the GIL. */
int hm_module_probe_check(const void* code, int slot);

/* 1 if this build knows how to read frames of the running Python. */
int hm_frames_supported(void);

/* The internal frame behind a frame object (the walk stops there), or NULL. Needs the GIL. */
const void* hm_boundary_of(void* frame_object);

/* Writes the calling thread's frames, innermost first, stopping before `boundary` or after
 * `max` frames; returns how many. 0 when the thread has no Python state. GIL not needed.
 * With `probe` (may be NULL), a frame running probe->code gets `module`: the object in its
 * slot (through its cell), read without touching reference counts; frames running one of
 * probe->skip are left out. */
int hm_walk_current_thread(const void* boundary, const hm_module_probe* probe, hm_frame* out,
                           int max);

/* Copies a frame's file name, function name and line into the buffers (UTF-8, truncated),
 * and, for a module frame, its module's class name (tp_name) into `module_type` ("" if none).
 * Reads immutable parts of the code object and type only; valid during the walk only. */
void hm_describe(const hm_frame* frame, char* file, size_t file_cap, char* func,
                 size_t func_cap, int* line, char* module_type, size_t module_type_cap);

#ifdef __cplusplus
}
#endif

#endif
