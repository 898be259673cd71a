#define Py_BUILD_CORE 1
#include <Python.h>

#include "python_frames.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#include <internal/pycore_frame.h>
#define HM_FRAMES 1
#elif PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#define HM_FRAMES 1
#else
#define HM_FRAMES 0
#endif

int hm_frames_supported(void) { return HM_FRAMES; }

#if HM_FRAMES

/* A module frame's `self`: the slot holds a cell once MAKE_CELL ran (torch 2.x: `self` is a
 * cell variable of _call_impl, captured by its nested `inner`), the object itself before that
 * or where `self` is a plain local. Macros only: no reference counts, no allocation. */
static const void* module_in_slot(PyObject* value) {
    if (value && PyCell_Check(value)) value = PyCell_GET(value);
    return value;
}

/* Plumbing frames around module calls, left out of walks when module frames are read. */
static int skipped(const hm_module_probe* probe, const void* code) {
    if (!probe) return 0;
    for (int i = 0; i < probe->n_skip && i < HM_MAX_SKIP; ++i)
        if (probe->skip[i] == code) return 1;
    return 0;
}

#if PY_VERSION_HEX >= 0x030B0000
typedef _PyInterpreterFrame hm_iframe;

static hm_iframe* current_frame(PyThreadState* ts) {
#if PY_VERSION_HEX >= 0x030D0000
    return ts->current_frame;
#else
    return ts->cframe ? ts->cframe->current_frame : NULL;
#endif
}

static PyCodeObject* frame_code(hm_iframe* f) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject* exe = f->f_executable;
    return (exe && Py_TYPE(exe) == &PyCode_Type) ? (PyCodeObject*)exe : NULL;
#else
    return f->f_code;
#endif
}

static int frame_addr(hm_iframe* f, PyCodeObject* code) {
#if PY_VERSION_HEX >= 0x030D0000
    return (int)((f->instr_ptr - _PyCode_CODE(code)) * (int)sizeof(_Py_CODEUNIT));
#else
    return (int)((f->prev_instr - _PyCode_CODE(code)) * (int)sizeof(_Py_CODEUNIT));
#endif
}

const void* hm_boundary_of(void* frame_object) {
    return frame_object ? (const void*)((PyFrameObject*)frame_object)->f_frame : NULL;
}

int hm_module_probe_check(const void* code, int slot) {
    if (!code || !PyCode_Check((PyObject*)code)) return 0;
    return slot >= 0 && slot < ((PyCodeObject*)code)->co_nlocalsplus;
}

int hm_walk_current_thread(const void* boundary, const hm_module_probe* probe, hm_frame* out,
                           int max) {
    /* CUDA calls made while the interpreter shuts down (library destructors) have no frames
     * worth reading, and the thread states may already be gone. */
    if (!Py_IsInitialized()) return 0;
    PyThreadState* ts = PyGILState_GetThisThreadState();
    if (!ts) return 0;
    const void* module_code = probe ? probe->code : NULL;
    int n = 0;
    for (hm_iframe* f = current_frame(ts); f && n < max; f = f->previous) {
        if ((const void*)f == boundary) break;
        if (_PyFrame_IsIncomplete(f)) continue; /* C-stack shims, frames still being set up */
        PyCodeObject* code = frame_code(f);
        if (!code || skipped(probe, code)) continue;
        out[n].code = code;
        out[n].addr = frame_addr(f, code);
        out[n].name_obj = code->co_qualname;
        out[n].file_obj = code->co_filename;
        /* the slot index was checked against this very code object (hm_module_probe_check) */
        out[n].module = (const void*)code == module_code ? module_in_slot(f->localsplus[probe->slot])
                                                         : NULL;
        ++n;
    }
    return n;
}

#else /* 3.10: frame objects are the frames */

const void* hm_boundary_of(void* frame_object) { return frame_object; }

int hm_module_probe_check(const void* code, int slot) {
    if (!code || !PyCode_Check((PyObject*)code)) return 0;
    PyCodeObject* c = (PyCodeObject*)code;
    Py_ssize_t slots = c->co_nlocals + PyTuple_GET_SIZE(c->co_cellvars) + PyTuple_GET_SIZE(c->co_freevars);
    return slot >= 0 && slot < slots;
}

int hm_walk_current_thread(const void* boundary, const hm_module_probe* probe, hm_frame* out,
                           int max) {
    /* CUDA calls made while the interpreter shuts down (library destructors) have no frames
     * worth reading, and the thread states may already be gone. */
    if (!Py_IsInitialized()) return 0;
    PyThreadState* ts = PyGILState_GetThisThreadState();
    if (!ts) return 0;
    const void* module_code = probe ? probe->code : NULL;
    int n = 0;
    for (PyFrameObject* f = ts->frame; f && n < max; f = f->f_back) {
        if ((const void*)f == boundary) break;
        if (skipped(probe, f->f_code)) continue;
        out[n].code = f->f_code;
        out[n].addr = f->f_lasti * (int)sizeof(_Py_CODEUNIT);
        out[n].name_obj = f->f_code->co_name;
        out[n].file_obj = f->f_code->co_filename;
        /* 3.10 keeps cells after the locals: f_localsplus[co_nlocals + cell index] */
        out[n].module = (const void*)f->f_code == module_code
                            ? module_in_slot(f->f_localsplus[probe->slot]) : NULL;
        ++n;
    }
    return n;
}

#endif

/* UTF-8 from a ready str of any kind, without the C API calls that may allocate. */
static void copy_text(PyObject* s, char* out, size_t cap) {
    size_t w = 0;
    if (cap == 0) return;
    if (s && PyUnicode_Check(s)) {
        Py_ssize_t len = PyUnicode_GET_LENGTH(s);
        int kind = PyUnicode_KIND(s);
        const void* data = PyUnicode_DATA(s);
        for (Py_ssize_t i = 0; i < len; ++i) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            char buf[4];
            size_t k;
            if (c < 0x80) { buf[0] = (char)c; k = 1; }
            else if (c < 0x800) { buf[0] = (char)(0xC0 | (c >> 6)); buf[1] = (char)(0x80 | (c & 0x3F)); k = 2; }
            else if (c < 0x10000) { buf[0] = (char)(0xE0 | (c >> 12)); buf[1] = (char)(0x80 | ((c >> 6) & 0x3F)); buf[2] = (char)(0x80 | (c & 0x3F)); k = 3; }
            else { buf[0] = (char)(0xF0 | (c >> 18)); buf[1] = (char)(0x80 | ((c >> 12) & 0x3F)); buf[2] = (char)(0x80 | ((c >> 6) & 0x3F)); buf[3] = (char)(0x80 | (c & 0x3F)); k = 4; }
            if (w + k >= cap) break;
            for (size_t j = 0; j < k; ++j) out[w++] = buf[j];
        }
    }
    out[w] = '\0';
}

void hm_describe(const hm_frame* frame, char* file, size_t file_cap, char* func,
                 size_t func_cap, int* line, char* module_type, size_t module_type_cap) {
    PyCodeObject* code = (PyCodeObject*)frame->code;
    copy_text((PyObject*)frame->file_obj, file, file_cap);
    copy_text((PyObject*)frame->name_obj, func, func_cap);
    *line = frame->addr >= 0 ? PyCode_Addr2Line(code, frame->addr) : code->co_firstlineno;
    if (module_type_cap == 0) return;
    module_type[0] = '\0';
    if (frame->module) {
        /* the frame holds the module, which holds its type: tp_name lives as long as both */
        const char* name = Py_TYPE((PyObject*)frame->module)->tp_name;
        size_t w = 0;
        for (; name && name[w] && w + 1 < module_type_cap; ++w) module_type[w] = name[w];
        module_type[w] = '\0';
    }
}

#else /* unsupported Python: no stacks */

const void* hm_boundary_of(void* frame_object) { (void)frame_object; return NULL; }
int hm_module_probe_check(const void* code, int slot) { (void)code; (void)slot; return 0; }
int hm_walk_current_thread(const void* boundary, const hm_module_probe* probe, hm_frame* out,
                           int max) {
    (void)boundary; (void)probe; (void)out; (void)max;
    return 0;
}
void hm_describe(const hm_frame* frame, char* file, size_t file_cap, char* func,
                 size_t func_cap, int* line, char* module_type, size_t module_type_cap) {
    (void)frame; (void)file_cap; (void)func_cap;
    file[0] = '\0'; func[0] = '\0'; *line = -1;
    if (module_type_cap) module_type[0] = '\0';
}

#endif
