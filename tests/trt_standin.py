"""A stand-in for the ``tensorrt`` module: NOT TensorRT. It implements the documented 10.x /
11.x Python API surface that hookmagic.layers.tensorrt_live uses, and replays a real engine's
layers and per-layer times (the mobilenet trtexec sample) so results can be checked against
the sample's own numbers. Tests that need real TensorRT are marked ``tensorrt``."""
from __future__ import annotations

import enum
import json
import types


def make_standin(version: str, graph: dict, layer_ms: dict[str, float]) -> types.SimpleNamespace:
    major = int(version.split(".")[0])

    class Severity(enum.IntEnum):
        ERROR = 1
        WARNING = 2

    class Logger:
        WARNING = Severity.WARNING

        def __init__(self, severity):
            self.severity = severity

    class TensorIOMode(enum.Enum):
        NONE = 0
        INPUT = 1
        OUTPUT = 2

    class DataType(enum.Enum):     # values renumbered in 11.x in the real thing; names kept
        FLOAT = 0
        HALF = 1
        INT8 = 2

    builder_flags = {"FP16": 1, "INT8": 2, "REFIT": 3} if major < 11 else {"REFIT": 3}
    BuilderFlag = enum.Enum("BuilderFlag", builder_flags)

    class ProfilingVerbosity(enum.Enum):
        LAYER_NAMES_ONLY = 0
        DETAILED = 2

    class MemoryPoolType(enum.Enum):
        WORKSPACE = 0

    class LayerInformationFormat(enum.Enum):
        ONELINE = 0
        JSON = 1

    class IProfiler:
        def __init__(self):
            self._initialised = True

    class Inspector:
        def __init__(self):
            self.execution_context = None

        def get_engine_information(self, fmt):
            assert fmt is LayerInformationFormat.JSON
            if major < 11:
                return json.dumps(graph)
            doc = {"Layers": [], "I/O Tensors": [
                {"Name": n, "IOMode": "INPUT" if i == 0 else "OUTPUT", "DataType": "Float",
                 "Dimensions": [1], "Location": "Device", "IsShapeInferenceIO": False,
                 "ProfileInfo": []} for i, n in enumerate(graph["Bindings"])]}
            for layer in graph["Layers"]:
                layer = dict(layer)
                for key in ("Inputs", "Outputs"):   # 11.x splits Format/Datatype in two keys
                    tensors = []
                    for t in layer.get(key, []):
                        t = dict(t)
                        phrase = t.pop("Format/Datatype")
                        t["Format"] = phrase
                        t["DataType"] = phrase.split()[-2] if phrase.endswith("format") else phrase.split()[-1]
                        tensors.append(t)
                    layer[key] = tensors
                doc["Layers"].append(layer)
            return json.dumps(doc)

    class Context:
        def __init__(self, engine):
            self.engine = engine
            self.profiler = None
            self.enqueue_emits_profile = True
            self.addresses = {}
            self.runs = 0
            self._pending = None

        def set_input_shape(self, name, shape):
            self.engine.shapes[name] = tuple(shape)
            return True

        def get_tensor_shape(self, name):
            return self.engine.shapes[name]

        def set_tensor_address(self, name, ptr):
            self.addresses[name] = ptr
            return True

        def execute_async_v3(self, stream_handle):
            assert set(self.addresses) == set(self.engine.names), "every I/O tensor needs an address"
            self.runs += 1
            # deterministic run-to-run jitter so median/p90 differ from the mean
            times = [(n, ms * (1.0 + 0.01 * (self.runs % 3))) for n, ms in layer_ms.items()]
            if self.profiler is not None:
                if self.enqueue_emits_profile:
                    for n, ms in times:
                        self.profiler.report_layer_time(n, ms)
                else:
                    self._pending = times
            return True

        def report_to_profiler(self):
            for n, ms in self._pending or []:
                self.profiler.report_layer_time(n, ms)
            self._pending = None
            return True

    class Engine:
        def __init__(self):
            self.names = list(graph["Bindings"])
            self.shapes = {self.names[0]: (-1, 3, 224, 224), self.names[1]: (1, 1000)}

        @property
        def num_io_tensors(self):
            return len(self.names)

        def get_tensor_name(self, i):
            return self.names[i]

        def get_tensor_mode(self, name):
            return TensorIOMode.INPUT if name == self.names[0] else TensorIOMode.OUTPUT

        def get_tensor_dtype(self, name):
            return DataType.FLOAT

        def get_tensor_shape(self, name):
            return self.shapes[name]

        def create_execution_context(self):
            return Context(self)

        def create_engine_inspector(self):
            return Inspector()

    class Runtime:
        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, blob):
            return Engine() if blob == b"standin-engine" else None

    class Parser:
        def __init__(self, network, logger):
            self.num_errors = 0

        def parse(self, data):
            if not data.startswith(b"onnx"):
                self.num_errors = 1
                return False
            return True

        def get_error(self, i):
            return "stand-in: not an ONNX model"

    class Config:
        def __init__(self):
            self.flags, self.pools, self.profiles = set(), {}, []
            self.profiling_verbosity = None

        def set_flag(self, flag):
            self.flags.add(flag)

        def set_memory_pool_limit(self, pool, size):
            self.pools[pool] = size

        def add_optimization_profile(self, profile):
            self.profiles.append(profile)

    class OptProfile(dict):
        def set_shape(self, name, lo, opt, hi):
            self[name] = (lo, opt, hi)

    class Builder:
        last_config = None

        def __init__(self, logger):
            pass

        def create_network(self, flags):
            return object()

        def create_builder_config(self):
            Builder.last_config = Config()
            return Builder.last_config

        def create_optimization_profile(self):
            return OptProfile()

        def build_serialized_network(self, network, config):
            assert config.profiling_verbosity is ProfilingVerbosity.DETAILED
            return b"standin-engine"

    return types.SimpleNamespace(
        __version__=version, Logger=Logger, TensorIOMode=TensorIOMode, DataType=DataType,
        BuilderFlag=BuilderFlag, ProfilingVerbosity=ProfilingVerbosity,
        MemoryPoolType=MemoryPoolType, LayerInformationFormat=LayerInformationFormat,
        IProfiler=IProfiler, Runtime=Runtime, Builder=Builder, OnnxParser=Parser)


class StandInBackend:
    """Host-side stand-in for GPU buffers, streams, events and graphs (named as such)."""

    def __init__(self, ms_per_run: float = 0.35):
        self.ms_per_run = ms_per_run
        self.allocated = []
        self.graphs = 0

    def empty(self, shape, dtype):
        self.allocated.append((tuple(shape), dtype))
        return object(), 0x1000 * len(self.allocated)

    def stream(self):
        return "stream"

    def stream_handle(self, stream):
        return 7

    def synchronize(self, stream):
        pass

    def time_runs(self, stream, run, n):
        out = []
        for _ in range(n):
            run()
            out.append(self.ms_per_run)
        return out

    def capture_graph(self, stream, enqueue):
        self.graphs += 1
        return enqueue

    def replay(self, graph, stream):
        graph()

    def device_name(self):
        return "stand-in device"
