/* A minimal extension around the real stack walker (../../src/python_frames.c) for run.sh. */
#include <Python.h>
#include "python_frames.h"

static PyObject* walk(PyObject* self, PyObject* args) {
    PyObject* code; int slot; PyObject* skip = NULL;
    if (!PyArg_ParseTuple(args, "Oi|O!", &code, &slot, &PyTuple_Type, &skip)) return NULL;
    if (!hm_module_probe_check(code, slot)) { PyErr_SetString(PyExc_ValueError, "bad slot"); return NULL; }
    hm_module_probe probe = {code, slot, {NULL}, 0};
    for (Py_ssize_t i = 0; skip && i < PyTuple_GET_SIZE(skip) && i < HM_MAX_SKIP; ++i)
        probe.skip[probe.n_skip++] = PyTuple_GET_ITEM(skip, i);
    hm_frame frames[128];
    int n;
    Py_BEGIN_ALLOW_THREADS
    n = hm_walk_current_thread(NULL, &probe, frames, 128);
    Py_END_ALLOW_THREADS
    PyObject* out = PyList_New(0);
    for (int i = 0; i < n; ++i) {
        char file[512], func[256], type[256]; int line;
        hm_describe(&frames[i], file, sizeof file, func, sizeof func, &line, type, sizeof type);
        PyObject* t = Py_BuildValue("(sKs)", func, (unsigned long long)(uintptr_t)frames[i].module, type);
        PyList_Append(out, t); Py_DECREF(t);
    }
    return out;
}
static PyMethodDef methods[] = {{"walk", walk, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "harness", NULL, -1, methods};
PyMODINIT_FUNC PyInit_harness(void) { return PyModule_Create(&mod); }
