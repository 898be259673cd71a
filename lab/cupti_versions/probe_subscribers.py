"""Can a second CUPTI subscriber attach inside torch.profiler with this driver?

Loads a given libcupti (e.g. a newer nvidia-cuda-cupti wheel's) with ctypes before anything else
loads CUPTI, starts torch.profiler (Kineto subscribes first), then asks that CUPTI for a second
subscriber: with cuptiSubscribe (one subscriber per process) and, where the library has it, with
cuptiSubscribe_v2 and allowMultipleSubscribers=1. Prints one JSON line of what each call
returned, with the driver's and the library's CUDA versions.

    python lab/cupti_versions/probe_subscribers.py /path/to/libcupti.so.13
"""
from __future__ import annotations

import ctypes
import json
import sys


class SubscriberParams(ctypes.Structure):
    # CUpti_SubscriberParams of cupti_callbacks.h (CUPTI 13.3+)
    _fields_ = [("structSize", ctypes.c_size_t), ("subscriberName", ctypes.c_char_p),
                ("oldSubscriberName", ctypes.c_char_p), ("oldSubscriberSize", ctypes.c_size_t),
                ("allowMultipleSubscribers", ctypes.c_uint8), ("padding", ctypes.c_uint8 * 7)]


CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)


def main(path: str) -> dict:
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    out: dict = {"library": path}
    version = ctypes.c_uint32()
    out["cuptiGetVersion"] = [lib.cuptiGetVersion(ctypes.byref(version)), version.value]

    import torch

    out["torch"] = torch.__version__
    out["driver_cuda"] = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None
    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    noop = CALLBACK(lambda *a: None)

    def string(code: int) -> str:
        text = ctypes.c_char_p()
        lib.cuptiGetResultString(code, ctypes.byref(text))
        return (text.value or b"").decode()

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        (x * 2).sum().item()
        handle = ctypes.c_void_p()
        r = lib.cuptiSubscribe(ctypes.byref(handle), noop, None)
        out["cuptiSubscribe_inside_profiler"] = [r, string(r)]
        if r == 0:
            lib.cuptiUnsubscribe(handle)
        if hasattr(lib, "cuptiSubscribe_v2"):
            old = ctypes.create_string_buffer(128)
            params = SubscriberParams(ctypes.sizeof(SubscriberParams), b"hookmagic",
                                      ctypes.cast(old, ctypes.c_char_p), 128, 1)
            handle = ctypes.c_void_p()
            r = lib.cuptiSubscribe_v2(ctypes.byref(handle), noop, None, ctypes.byref(params))
            out["cuptiSubscribe_v2_inside_profiler"] = [r, string(r), old.value.decode(errors="replace")]
            if r == 0:
                lib.cuptiUnsubscribe(handle)
        else:
            out["cuptiSubscribe_v2_inside_profiler"] = "not in this library"
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
