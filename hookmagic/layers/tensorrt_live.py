"""Live TensorRT backend (10.x and 11.x): build or load an engine, time every layer.

Written against TensorRT's documented Python API; what differs between versions is detected
(``hasattr``), not assumed from the version number:

- per-layer time: an ``IProfiler`` subclass attached as ``context.profiler``, called once per
  layer per ``execute_async_v3``; in CUDA-graph mode ``enqueue_emits_profile = False`` and
  ``report_to_profiler()`` after each replay;
- layer details: ``engine.create_engine_inspector()`` at DETAILED verbosity, parsed by the
  same code as trtexec's ``--exportLayerInfo`` (both versions' forms);
- end-to-end latency: CUDA events around unprofiled runs (profiling synchronises per layer, so
  like trtexec's "separate profiling" the two are measured apart);
- precision flags exist in 10.x only; 11.x networks are strongly typed (precision comes from the
  model), so asking 11.x for FP16/INT8 raises a clear error instead of being ignored.

GPU memory, streams, events and graphs go through a small backend object (PyTorch's CUDA by
default), so that the TensorRT logic can be tested against a stand-in without a GPU.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from hookmagic.common.errors import CaptureFailed, InvalidArgument, Unavailable

from .model import LayerProfile, make_layers
from .trtexec import fold_noops, join_timing, latency_stats, layer_info_from_doc, split_constants

INSTALL_HINT = ("TensorRT is not installed in this kernel. Install it from NVIDIA "
                "(pip install tensorrt --extra-index-url https://pypi.nvidia.com, or the "
                "TensorRT container), or profile with trtexec and import its exports: "
                "trtexec --onnx=model.onnx --profilingVerbosity=detailed --exportProfile=p.json "
                "--exportLayerInfo=l.json --exportTimes=t.json, then "
                "%trtprofile --profile p.json --layers l.json --times t.json")


class TensorRTUnavailable(Unavailable):
    """TensorRT (or a CUDA device for it) is missing; the message says what to do instead."""


class EngineBuildError(CaptureFailed, ValueError):
    """TensorRT could not parse, build or deserialize an engine; the message says which."""


def import_tensorrt() -> Any:
    """The ``tensorrt`` module, or :class:`TensorRTUnavailable` with the install hint."""
    try:
        import tensorrt
    except ImportError as exc:
        raise TensorRTUnavailable(INSTALL_HINT) from exc
    return tensorrt


def version_of(trt: Any) -> tuple[int, int]:
    """(major, minor) of the TensorRT module."""
    parts = str(getattr(trt, "__version__", "0.0")).split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


# ---- building ----------------------------------------------------------------------------

def engine_cache_key(model_bytes: bytes, options: dict[str, Any], gpu: str, trt_version: str) -> str:
    """Hash of everything that makes a built engine reusable: model, options, GPU, TensorRT."""
    h = hashlib.sha256(model_bytes)
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    h.update(gpu.encode())
    h.update(trt_version.encode())
    return h.hexdigest()[:32]


def build_engine(onnx_path: str | os.PathLike, *, fp16: bool = False, int8: bool = False,
                 shapes: dict[str, Any] | None = None, workspace_mb: int | None = None,
                 timing_cache: str | os.PathLike | None = None,
                 cache_dir: str | os.PathLike | None = None, gpu: str = "",
                 progress: Callable[[str], None] | None = None, trt: Any = None) -> bytes:
    """Build (or fetch from ``cache_dir``) a serialized engine for an ONNX model.

    ``shapes`` maps input names to one shape or a ``(min, opt, max)`` triple for dynamic inputs.
    ``fp16``/``int8`` set builder flags on TensorRT 10.x; on 11.x (strongly typed, no such flags)
    they raise EngineBuildError: cast the model or add Q/DQ nodes instead. ``progress`` receives one
    line per build phase. The engine cache key covers model bytes, options, ``gpu`` and the
    TensorRT version.
    """
    trt = trt or import_tensorrt()
    model = Path(onnx_path).read_bytes()
    options = {"fp16": fp16, "int8": int8, "shapes": shapes, "workspace_mb": workspace_mb}
    cached = None
    if cache_dir is not None:
        key = engine_cache_key(model, options, gpu, str(trt.__version__))
        cached = Path(cache_dir) / f"{key}.engine"
        if cached.is_file():
            if progress:
                progress(f"engine cache hit: {cached}")
            return cached.read_bytes()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)      # explicit batch is the only mode in 10.x and 11.x
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise EngineBuildError(f"TensorRT could not parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if workspace_mb:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mb) << 20)
    for flag, wanted in (("FP16", fp16), ("INT8", int8)):
        if not wanted:
            continue
        if not hasattr(trt.BuilderFlag, flag):
            raise EngineBuildError(f"TensorRT {trt.__version__} has no BuilderFlag.{flag}: networks are "
                             "strongly typed, so precision comes from the model (cast it, or add "
                             "Q/DQ nodes for INT8)")
        config.set_flag(getattr(trt.BuilderFlag, flag))
    if shapes:
        profile = builder.create_optimization_profile()
        for name, shape in shapes.items():
            lo, opt, hi = shape if len(shape) == 3 and all(isinstance(s, (tuple, list)) for s in shape) \
                else (shape, shape, shape)
            profile.set_shape(name, tuple(lo), tuple(opt), tuple(hi))
        config.add_optimization_profile(profile)
    cache_obj = None
    if timing_cache is not None:
        blob = Path(timing_cache).read_bytes() if Path(timing_cache).is_file() else b""
        cache_obj = config.create_timing_cache(blob)
        config.set_timing_cache(cache_obj, False)
    if progress and hasattr(trt, "IProgressMonitor"):
        config.progress_monitor = _progress_monitor(trt, progress)
    if progress:
        progress("building engine (this can take minutes)")
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(f"TensorRT failed to build an engine for {onnx_path}; see the log above")
    data = bytes(serialized)
    if timing_cache is not None and cache_obj is not None:
        Path(timing_cache).write_bytes(bytes(config.get_timing_cache().serialize()))
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(data)
    return data


def _progress_monitor(trt: Any, report: Callable[[str], None]) -> Any:
    class _Monitor(trt.IProgressMonitor):
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)

        def phase_start(self, phase_name, parent_phase, num_steps):
            report(f"{phase_name} ({num_steps} steps)")

        def step_complete(self, phase_name, step):
            return True          # never cancel

        def phase_finish(self, phase_name):
            pass

    return _Monitor()


# ---- profiling ---------------------------------------------------------------------------

def make_profiler(trt: Any) -> Any:
    """An ``IProfiler`` that keeps ``(iteration, layer, ms)`` for every report."""

    class _LayerTimes(trt.IProfiler):
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.iteration = 0
            self.records: list[tuple[int, str, float]] = []

        def report_layer_time(self, layer_name, ms):
            self.records.append((self.iteration, str(layer_name), float(ms)))

    return _LayerTimes()


def timing_rows(records: list[tuple[int, str, float]], iterations: int) -> list[dict[str, Any]]:
    """Per layer (first-report order): mean, median, p90 over iterations, ms. A layer reported
    twice in one iteration (a name TensorRT reuses) is summed within the iteration."""
    if not records:
        return []
    frame = pd.DataFrame(records, columns=["iteration", "name", "ms"])
    order = list(dict.fromkeys(frame["name"]))
    per = frame.groupby(["name", "iteration"])["ms"].sum().unstack(fill_value=0.0)
    per = per.reindex(columns=range(iterations), fill_value=0.0).reindex(order)
    return [{"name": n, "mean_ms": float(per.loc[n].mean()), "median_ms": float(per.loc[n].median()),
             "p90_ms": float(per.loc[n].quantile(0.9))} for n in order]


def profile_engine(engine: bytes | str | os.PathLike, *, iterations: int = 20, warmup: int = 5,
                   cuda_graph: bool = False, input_shapes: dict[str, tuple] | None = None,
                   name: str = "engine", trt: Any = None, backend: Any = None) -> LayerProfile:
    """Run a serialized engine and profile it layer by layer.

    ``input_shapes`` fixes dynamic input dimensions. ``cuda_graph`` captures one enqueue in a
    CUDA graph and replays it, reporting layer times with ``report_to_profiler()``.
    Returns a :class:`LayerProfile` with ``meta["latency_ms"]`` from CUDA events.
    """
    trt = trt or import_tensorrt()
    backend = backend or TorchCudaBackend()
    blob = Path(engine).read_bytes() if isinstance(engine, (str, os.PathLike)) else bytes(engine)
    logger = trt.Logger(trt.Logger.WARNING)
    runtime = trt.Runtime(logger)
    eng = runtime.deserialize_cuda_engine(blob)
    if eng is None:
        raise EngineBuildError("TensorRT could not deserialize the engine (built by another TensorRT "
                         "version or for another GPU?)")
    ctx = eng.create_execution_context()
    buffers = _bind_io(trt, eng, ctx, backend, input_shapes or {})
    stream = backend.stream()
    handle = backend.stream_handle(stream)

    def enqueue() -> None:
        if not ctx.execute_async_v3(handle):
            raise CaptureFailed("execute_async_v3 failed; see TensorRT's log")

    for _ in range(max(1, warmup)):          # also flushes deferred allocations before capture
        enqueue()
    backend.synchronize(stream)
    graph = backend.capture_graph(stream, enqueue) if cuda_graph else None
    run = (lambda: backend.replay(graph, stream)) if graph is not None else enqueue
    latencies = backend.time_runs(stream, run, iterations)

    prof = make_profiler(trt)
    if graph is not None:
        ctx.enqueue_emits_profile = False
    ctx.profiler = prof
    if graph is not None:
        # the graph was captured without a profiler: recapture so the replay carries timing
        graph = backend.capture_graph(stream, enqueue)
    for i in range(iterations):
        prof.iteration = i
        if graph is not None:
            backend.replay(graph, stream)
            backend.synchronize(stream)
            ctx.report_to_profiler()
        else:
            enqueue()
            backend.synchronize(stream)
    warnings: list[str] = []
    info = _inspect(trt, eng, ctx, warnings)
    rows = join_timing(timing_rows(prof.records, iterations), info["layers"] if info else None, warnings)
    rows, constants = split_constants(rows, warnings)
    rows = fold_noops(rows)
    meta = {"name": name, "source": "tensorrt", "tensorrt_version": str(trt.__version__),
            "device": backend.device_name(), "iterations": iterations, "cuda_graph": cuda_graph,
            "latency_ms": latency_stats(latencies), "io_tensors": info["io"] if info else [],
            "warnings": warnings}
    del buffers
    return LayerProfile(layers=make_layers(rows), meta=meta,
                        times=pd.DataFrame({"latency_ms": latencies}),
                        constants=pd.DataFrame(constants))


def _bind_io(trt: Any, eng: Any, ctx: Any, backend: Any, shapes: dict[str, tuple]) -> list[Any]:
    names = [eng.get_tensor_name(i) for i in range(eng.num_io_tensors)]
    inputs = [n for n in names if eng.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    for n in inputs:
        shape = tuple(eng.get_tensor_shape(n))
        if any(d < 0 for d in shape):
            if n not in shapes:
                raise InvalidArgument(f"input {n!r} has dynamic shape {shape}: give input_shapes={{{n!r}: ...}}")
            ctx.set_input_shape(n, tuple(shapes[n]))
    keep = []
    for n in names:
        shape = tuple(ctx.get_tensor_shape(n))
        buf, ptr = backend.empty(shape, _dtype_name(eng.get_tensor_dtype(n)))
        ctx.set_tensor_address(n, ptr)
        keep.append(buf)
    return keep


def _dtype_name(dtype: Any) -> str:
    # trt.DataType prints as "DataType.HALF"; enum values were renumbered in 11.x, names were not
    return str(getattr(dtype, "name", dtype)).split(".")[-1].upper()


def _inspect(trt: Any, eng: Any, ctx: Any, warnings: list[str]) -> dict[str, Any] | None:
    try:
        inspector = eng.create_engine_inspector()
        inspector.execution_context = ctx
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        return layer_info_from_doc(json.loads(text), warnings, "engine inspector")
    except Exception as exc:  # timing is still worth returning without details
        warnings.append(f"engine inspector failed ({type(exc).__name__}: {exc}); "
                        "build with profiling_verbosity=DETAILED for layer details")
        return None


class TorchCudaBackend:
    """GPU memory, streams, events and graphs through PyTorch's CUDA API."""

    _DTYPES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8",
               "INT32": "int32", "INT64": "int64", "BOOL": "bool", "UINT8": "uint8",
               "FP8": "float8_e4m3fn"}

    def __init__(self) -> None:
        try:
            import torch
        except ImportError as exc:
            raise TensorRTUnavailable("the live TensorRT profiler uses PyTorch's CUDA API for "
                                      "buffers and timing; install torch with CUDA") from exc
        if not torch.cuda.is_available():
            raise TensorRTUnavailable("no CUDA GPU is visible to this kernel")
        self.torch = torch

    def empty(self, shape: tuple, dtype: str):
        t = self.torch.empty(shape, dtype=getattr(self.torch, self._DTYPES.get(dtype, "float32")),
                             device="cuda")
        return t, t.data_ptr()

    def stream(self):
        return self.torch.cuda.Stream()

    def stream_handle(self, stream) -> int:
        return stream.cuda_stream

    def synchronize(self, stream) -> None:
        stream.synchronize()

    def time_runs(self, stream, run: Callable[[], None], n: int) -> list[float]:
        pairs = []
        with self.torch.cuda.stream(stream):
            for _ in range(n):
                s, e = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
                s.record(stream)
                run()
                e.record(stream)
                pairs.append((s, e))
        stream.synchronize()
        return [s.elapsed_time(e) for s, e in pairs]

    def capture_graph(self, stream, enqueue: Callable[[], None]):
        g = self.torch.cuda.CUDAGraph()
        with self.torch.cuda.graph(g, stream=stream):
            enqueue()
        return g

    def replay(self, graph, stream) -> None:
        with self.torch.cuda.stream(stream):
            graph.replay()

    def device_name(self) -> str:
        return self.torch.cuda.get_device_name()
