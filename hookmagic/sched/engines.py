"""Engines the real driver dispatches batches to, and the backends that time them.

A backend owns the lanes (CUDA streams, or worker threads for the synthetic CPU backend) and
times each batch: :class:`CudaBackend` with CUDA events recorded on the batch's stream around
the launch, mapped onto the host clock through one reference event; :class:`ThreadBackend` with
the worker thread's clock.

Engines enqueue a batch of a given size on a lane and return without waiting:

- :class:`TorchEngine`: a PyTorch module (a torchvision architecture name gives random weights),
  fp16/fp32, optionally replayed from CUDA graphs captured per (stream, batch size);
- :class:`CupyPipeline`: a chain of CuPy array functions (default: normalise, a dense layer,
  ReLU, a second dense layer, softmax);
- :class:`SleepEngine`: a *synthetic* engine that sleeps its spec's latency on a worker thread,
  for exercising the driver without a GPU (tests only; never reported as a measurement).

torch and cupy are imported only when an engine or backend that needs them is built.
"""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from hookmagic.common.errors import InvalidArgument, MissingDependency

from .models import ModelSpec
from .names import unknown_model
from .policies import Stream

__all__ = ["CudaBackend", "ThreadBackend", "TorchEngine", "CupyPipeline", "SleepEngine",
           "measure", "gpu_available"]


def gpu_available() -> tuple[bool, str]:
    """Whether a CUDA GPU can be used here, and a sentence saying which or why not."""
    try:
        import torch
        if torch.cuda.is_available():
            return True, f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})"
        reason = "torch sees no CUDA device"
    except ImportError:
        reason = "torch is not installed"
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return True, "CUDA device via CuPy"
    except Exception as exc:  # no cupy, or no driver
        reason += f"; CuPy unavailable ({type(exc).__name__})"
    return False, reason


# -- backends ---------------------------------------------------------------------------------
class _CudaHandle:
    __slots__ = ("backend", "start", "end")

    def __init__(self, backend: "CudaBackend", start: Any, end: Any) -> None:
        self.backend, self.start, self.end = backend, start, end

    def done(self) -> bool:
        return self.backend._query(self.end)

    def times(self) -> tuple[float, float]:
        """(start, end) of the batch on the GPU, in host ``perf_counter`` seconds."""
        b = self.backend
        return (b.ref_host + b._elapsed(b.ref, self.start) / 1e3,
                b.ref_host + b._elapsed(b.ref, self.end) / 1e3)


class CudaBackend:
    """CUDA streams and CUDA-event timing (through torch when installed, else CuPy).

    ``lanes(streams)`` makes one CUDA stream per :class:`Stream`, with its priority (CUDA's
    convention: lower is more urgent; clamped to the device's range). ``submit`` records a start
    event on the stream, calls the launch function inside the stream's context, records an end
    event, and returns a handle whose ``done()`` polls the end event without blocking.

    Clock: one reference event is recorded on an idle device; the host time of that event is
    taken as the midpoint of the host clock before the record and after its completion, so the
    mapping from GPU event times to host seconds is good to half that interval (microseconds).
    """

    kind = "cuda"

    def __init__(self, device: int = 0, prefer: str = "torch") -> None:
        self.device = device
        self.lib = None
        self._meter = None  # (event, stream) of meter_pass, made on first use
        if prefer == "torch":
            try:
                import torch
                if torch.cuda.is_available():
                    self.lib = "torch"
            except ImportError:
                pass
        if self.lib is None:
            import cupy  # noqa: F401  (raises ImportError with a clear message if missing)
            self.lib = "cupy"
        self.sync_reference()

    # event primitives, per library
    def _event(self):
        if self.lib == "torch":
            import torch
            return torch.cuda.Event(enable_timing=True)
        import cupy
        return cupy.cuda.Event()

    def _record(self, ev, stream) -> None:
        ev.record(stream)

    def _query(self, ev) -> bool:
        return ev.query() if self.lib == "torch" else ev.done

    def _elapsed(self, a, b) -> float:
        if self.lib == "torch":
            return a.elapsed_time(b)
        import cupy
        return cupy.cuda.get_elapsed_time(a, b)

    def synchronize(self) -> None:
        if self.lib == "torch":
            import torch
            torch.cuda.synchronize(self.device)
        else:
            import cupy
            cupy.cuda.Device(self.device).synchronize()

    def _reference(self, samples: int) -> tuple[Any, float, float]:
        """One reference event on an idle device and its host time: of ``samples`` tries the
        one with the shortest host round trip (record to completion), its midpoint; returns
        (event, host seconds, half the round trip)."""
        self.synchronize()
        best = None
        for _ in range(max(1, int(samples))):
            ev = self._event()
            h0 = time.perf_counter()
            self._record(ev, None if self.lib == "cupy" else self._default_stream())
            ev.synchronize()
            h1 = time.perf_counter()
            if best is None or h1 - h0 < best[2] * 2:
                best = (ev, 0.5 * (h0 + h1), 0.5 * (h1 - h0))
        return best

    def sync_reference(self, samples: int = 9) -> None:
        """(Re)take the reference event that maps GPU event times onto the host clock."""
        self.ref, self.ref_host, self.ref_uncertainty_s = self._reference(samples)

    def clock_fit(self, samples: int = 9) -> dict[str, float]:
        """Compare the GPU's event clock with the host clock since :meth:`sync_reference`.

        Takes a second reference event now and returns ``drift`` (host seconds per GPU second
        minus 1: the two clocks' rates differ by tens of ppm, so GPU times mapped through one
        reference drift from the host clock by ~20 µs per second; H100 runs),
        ``ref_host`` (host time of the first reference), ``span_s`` and ``uncertainty`` (of
        ``drift``, from both references' round trips). A time ``t`` mapped through the first
        reference is then ``t + drift * (t - ref_host)`` on the host clock."""
        ev, host, unc = self._reference(samples)
        gpu_span = self._elapsed(self.ref, ev) / 1e3
        host_span = host - self.ref_host
        if gpu_span <= 0:
            return {"drift": 0.0, "ref_host": self.ref_host, "span_s": host_span,
                    "uncertainty": float("inf")}
        return {"drift": host_span / gpu_span - 1.0, "ref_host": self.ref_host,
                "span_s": host_span, "uncertainty": (unc + self.ref_uncertainty_s) / gpu_span}

    def _default_stream(self):
        import torch
        return torch.cuda.current_stream(self.device)

    def lanes(self, streams: Sequence[Stream]) -> list[Any]:
        """One CUDA stream per :class:`Stream`, created with its priority."""
        out = []
        if self.lib == "torch":
            import torch
            lo, hi = torch.cuda.Stream.priority_range()  # (lowest=0, greatest=-k)
            for st in streams:
                prio = int(min(max(st.priority, hi), lo))
                out.append(torch.cuda.Stream(device=self.device, priority=prio))
        else:
            import cupy
            for st in streams:
                out.append(cupy.cuda.Stream(non_blocking=True, priority=int(st.priority)))
        return out

    def stream_context(self, lane):
        if self.lib == "torch":
            import torch
            return torch.cuda.stream(lane)
        return lane

    def meter_pass(self) -> float:
        """Seconds one fixed piece of CUDA host work takes now: recording an event on a stream
        of its own (nothing else runs there) and querying it. The driver times it about once
        a ms beside its interpreter meter (``meta["backend_meter"]``): the launch calls' speed
        moved without the interpreter's on an H100."""
        if self._meter is None:
            if self.lib == "torch":
                import torch
                lane = torch.cuda.Stream(device=self.device)
            else:
                import cupy
                lane = cupy.cuda.Stream(non_blocking=True)
            self._meter = (self._event(), lane)
        ev, lane = self._meter
        a = time.perf_counter()
        ev.record(lane)
        self._query(ev)
        return time.perf_counter() - a

    def submit(self, lane, launch: Callable[[], None]) -> _CudaHandle:
        start, end = self._event(), self._event()
        start.record(lane)
        with self.stream_context(lane):
            launch()
        end.record(lane)
        return _CudaHandle(self, start, end)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"backend": f"cuda/{self.lib}"}
        try:
            if self.lib == "torch":
                import torch
                p = torch.cuda.get_device_properties(self.device)
                info.update(gpu=p.name, torch=torch.__version__, cuda=torch.version.cuda)
            else:
                import cupy
                p = cupy.cuda.runtime.getDeviceProperties(self.device)
                info.update(gpu=p["name"].decode(), cupy=cupy.__version__)
            import subprocess
            drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
            info["driver"] = drv.splitlines()[0] if drv else "unknown"
        except Exception as exc:  # description only; never fatal
            info["describe_error"] = repr(exc)
        return info


class _ThreadHandle:
    __slots__ = ("future",)

    def __init__(self, future: Future) -> None:
        self.future = future

    def done(self) -> bool:
        return self.future.done()

    def times(self) -> tuple[float, float]:
        return self.future.result()


class ThreadBackend:
    """Synthetic CPU backend: each lane is one worker thread; times come from its clock."""

    kind = "threads"

    def __init__(self) -> None:
        self._pools: list[ThreadPoolExecutor] = []

    def lanes(self, streams: Sequence[Stream]) -> list[ThreadPoolExecutor]:
        self._pools = [ThreadPoolExecutor(1, thread_name_prefix=f"lane{k}") for k in range(len(streams))]
        return self._pools

    def stream_context(self, lane):
        from contextlib import nullcontext
        return nullcontext()

    def submit(self, lane: ThreadPoolExecutor, launch: Callable[[], None]) -> _ThreadHandle:
        def work() -> tuple[float, float]:
            t0 = time.perf_counter()
            launch()
            return t0, time.perf_counter()
        return _ThreadHandle(lane.submit(work))

    def synchronize(self) -> None:
        for pool in self._pools:
            pool.submit(lambda: None).result()

    def close(self) -> None:
        for pool in self._pools:
            pool.shutdown(wait=True)

    def describe(self) -> dict[str, Any]:
        return {"backend": "threads (synthetic CPU lanes, no GPU)"}


# -- engines ----------------------------------------------------------------------------------
class SleepEngine:
    """Synthetic engine: a batch of ``b`` sleeps ``spec.latency(b)`` ms on its lane's thread."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.max_batch = spec.max_batch
        self.precision = spec.precision
        self.memory_bytes = spec.memory_bytes

    def setup(self, backend: Any, lanes: Sequence[Any], max_batch: int | None = None) -> None:
        pass

    def launch(self, batch_size: int, lane_index: int) -> None:
        # Plain sleep: it releases the GIL, so the driver's loop keeps running meanwhile. Its
        # overshoot (~0.1 ms) is real time the lane was busy and is recorded as such.
        time.sleep(self.spec.latency(batch_size) / 1e3)


class TorchEngine:
    """A PyTorch model on the GPU.

    ``model``: an ``nn.Module`` or a torchvision architecture name ("resnet50",
    "mobilenet_v3_large", ...; random weights). Inputs are static device tensors of
    ``(max_batch, *input_shape)`` per lane, so a batch of ``b`` runs on the first ``b`` rows and
    no host copy is timed (say ``h2d=True`` to copy the batch from pinned host memory first, as a
    server receiving images would). ``cuda_graphs=True`` captures one graph per (lane, size)
    and replays it, which removes Python launch cost from the GPU's critical path.
    """

    def __init__(self, name: str, model: Any = None, *, input_shape: tuple[int, ...] = (3, 224, 224),
                 precision: str = "fp16", max_batch: int = 16, cuda_graphs: bool = False,
                 channels_last: bool = True, h2d: bool = False, spec: ModelSpec | None = None) -> None:
        self.name = name
        self.model_arg = model if model is not None else name
        self.input_shape = tuple(input_shape)
        self.precision = precision
        self.max_batch = int(max_batch)
        self.cuda_graphs = cuda_graphs
        self.channels_last = channels_last
        self.h2d = h2d
        self.spec = spec
        self.memory_bytes = 0
        self._ready = False

    def _build(self):
        import torch
        m = self.model_arg
        if isinstance(m, str):
            try:
                import torchvision
            except ImportError as err:
                raise MissingDependency(
                    f"model {m!r} is named by a string, which is built from torchvision.models, and "
                    "torchvision is not installed: pip install torchvision (the build matching your "
                    "torch), or pass an nn.Module") from err
            known = torchvision.models.list_models()
            if m not in known:
                raise InvalidArgument(unknown_model(m, known))
            m = torchvision.models.get_model(m, weights=None)
        dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
        if self.precision not in dtypes:
            raise InvalidArgument(f"unknown precision {self.precision!r}; known: {', '.join(dtypes)}")
        dtype = dtypes[self.precision]
        m = m.eval().to("cuda", dtype=dtype)
        if self.channels_last and len(self.input_shape) == 3:
            m = m.to(memory_format=torch.channels_last)
        self.memory_bytes = int(sum(p.numel() * p.element_size() for p in m.parameters())
                                + sum(b.numel() * b.element_size() for b in m.buffers()))
        return m, dtype

    def setup(self, backend: CudaBackend, lanes: Sequence[Any], max_batch: int | None = None) -> None:
        """Build the model, allocate per-lane inputs, warm every batch size up (and capture graphs).

        Done once for as many lanes and as large a batch as asked so far: a later call that
        needs no more keeps them (a CUDA graph replays on whatever stream is current, and lane
        ``k``'s inputs and graphs serve any backend's lane ``k``), so runs after the first do
        not pay warm-up and capture again."""
        import torch
        torch.backends.cudnn.benchmark = True
        if not self._ready:
            self.module, self.dtype = self._build()
            self._ready = True
        mb = min(self.max_batch, int(max_batch or self.max_batch))
        done = getattr(self, "_set_up", None)
        if done is not None and done[0] >= len(lanes) and done[1] >= mb:
            return
        self.inputs, self.hosts, self.graphs = [], [], []
        fmt = torch.channels_last if (self.channels_last and len(self.input_shape) == 3) else None
        for lane in lanes:
            x = torch.randn((self.max_batch, *self.input_shape), device="cuda", dtype=self.dtype)
            if fmt is not None:
                x = x.contiguous(memory_format=fmt)
            self.inputs.append(x)
            self.hosts.append(torch.randn(x.shape, dtype=self.dtype).pin_memory() if self.h2d else None)
            graphs = {}
            with torch.inference_mode(), torch.cuda.stream(lane):
                for b in range(1, mb + 1):
                    for _ in range(3):  # warm-up also lets cudnn.benchmark pick its algorithms
                        self.module(x[:b])
                lane.synchronize()
                if self.cuda_graphs:
                    pool = torch.cuda.graph_pool_handle()  # sizes on one lane never overlap
                    for b in range(1, mb + 1):
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g, pool=pool, stream=lane):
                            self.module(x[:b])
                        graphs[b] = g
                    # A captured graph's first launch uploads it to the GPU: on the H100 runs of
                    # that first launch held the host 0.4-0.65 ms (median; later ones
                    # ~0.1 ms) and stalled over 0.5 ms in 38-100 % of cases. Launch each once
                    # here, so that no served batch pays it.
                    for g in graphs.values():
                        g.replay()
                    lane.synchronize()
            self.graphs.append(graphs)
        torch.cuda.synchronize()
        self._set_up = (len(lanes), mb)

    def launch(self, batch_size: int, lane_index: int) -> None:
        """Enqueue one batch on the current stream (the driver has entered the lane's stream)."""
        import torch
        x = self.inputs[lane_index]
        if self.h2d:
            x[:batch_size].copy_(self.hosts[lane_index][:batch_size], non_blocking=True)
        g = self.graphs[lane_index].get(batch_size) if self.cuda_graphs else None
        if g is not None:
            g.replay()
        else:
            with torch.inference_mode():
                self.module(x[:batch_size])


class CupyPipeline:
    """A chain of CuPy functions over a ``(batch, features)`` array.

    ``stages``: callables ``x -> x``. Default: normalise, ``features x hidden`` matmul, ReLU,
    ``hidden x classes`` matmul, softmax — a small MLP head as a kernel pipeline.
    """

    def __init__(self, name: str, stages: Sequence[Callable] | None = None, *, features: int = 4096,
                 hidden: int = 4096, classes: int = 1000, precision: str = "fp16",
                 max_batch: int = 64, spec: ModelSpec | None = None) -> None:
        self.name, self.features, self.hidden, self.classes = name, features, hidden, classes
        self.precision, self.max_batch, self.spec = precision, int(max_batch), spec
        self.stages = list(stages) if stages is not None else None
        self.memory_bytes = 0

    def setup(self, backend: CudaBackend, lanes: Sequence[Any], max_batch: int | None = None) -> None:
        import cupy as cp
        dt = cp.float16 if self.precision == "fp16" else cp.float32
        if self.stages is None:
            w1 = cp.random.standard_normal((self.features, self.hidden), dtype=cp.float32).astype(dt)
            w2 = cp.random.standard_normal((self.hidden, self.classes), dtype=cp.float32).astype(dt)
            self.memory_bytes = int(w1.nbytes + w2.nbytes)

            def softmax(z):
                z = z.astype(cp.float32)
                e = cp.exp(z - z.max(axis=1, keepdims=True))
                return e / e.sum(axis=1, keepdims=True)
            self.stages = [lambda x: (x - x.mean(axis=1, keepdims=True)) / (x.std(axis=1, keepdims=True) + 1e-3),
                           lambda x: x @ w1, lambda x: cp.maximum(x, 0), lambda x: x @ w2, softmax]
        self.inputs = [cp.random.standard_normal((self.max_batch, self.features),
                                                 dtype=cp.float32).astype(dt) for _ in lanes]
        # CuPy's view of each lane (a torch stream is wrapped, the same CUDA stream underneath)
        self._streams = [_cupy_ctx(lane) for lane in lanes]
        for k in range(len(lanes)):
            for b in range(1, min(self.max_batch, int(max_batch or self.max_batch)) + 1):
                self.launch(b, k)
        backend.synchronize()

    def launch(self, batch_size: int, lane_index: int) -> None:
        """Enqueue the pipeline for ``batch_size`` rows on lane ``lane_index``."""
        with self._streams[lane_index]:
            x = self.inputs[lane_index][:batch_size]
            for f in self.stages:
                x = f(x)


def _cupy_ctx(lane):
    import cupy as cp
    if hasattr(lane, "cuda_stream"):  # a torch stream: wrap the same CUDA stream for CuPy
        return cp.cuda.ExternalStream(lane.cuda_stream)
    return lane


def measure(engine: Any, backend: Any = None, batch_sizes: Sequence[int] | None = None,
            repeats: int = 20, warmup: int = 3, lane_index: int = 0, lanes: Sequence[Any] | None = None,
            setup: bool = True) -> pd.DataFrame:
    """Measure an engine's latency per batch size the way the driver times batches.

    Each repeat launches one batch on an idle lane between a start and an end event and waits
    for it; the table holds the median (``latency_ms``), standard deviation (``std_ms``), p90
    and the number of repeats per size. Feed it to :meth:`ModelSpec.from_sweep`.
    """
    backend = backend or CudaBackend()
    if lanes is None:
        lanes = backend.lanes([Stream()])
    if setup:
        engine.setup(backend, lanes)
    sizes = list(batch_sizes or range(1, engine.max_batch + 1))
    lane = lanes[lane_index]
    threads = getattr(backend, "kind", "") == "threads"
    rows = []
    for b in sizes:
        times = []
        for k in range(warmup + repeats):
            h = backend.submit(lane, lambda b=b: engine.launch(b, lane_index))
            while not h.done():
                if threads:
                    time.sleep(0)  # a thread lane needs the GIL to finish
            s, e = h.times()
            if k >= warmup:
                times.append((e - s) * 1e3)
        t = np.asarray(times)
        rows.append({"model": engine.name, "precision": engine.precision, "batch_size": b,
                     "latency_ms": float(np.median(t)), "std_ms": float(t.std(ddof=1)) if len(t) > 1 else 0.0,
                     "p90_ms": float(np.percentile(t, 90)), "repeats": len(t),
                     "memory_bytes": int(getattr(engine, "memory_bytes", 0))})
    return pd.DataFrame(rows)
