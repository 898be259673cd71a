"""The ``%trtprofile`` line magic: layer-by-layer profiles in the notebook.

Only parses arguments and wires importers/profilers to the display; the work is in
:mod:`hookmagic.layers`. ``%load_ext hookmagic`` registers it (:mod:`hookmagic.extension`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display
from traitlets import Int, Unicode

from hookmagic.magic_args import MagicFailed, parse_line


@magics_class
class TrtProfileMagics(Magics):
    """Layer profiler magics. Defaults are configurable, e.g.
    ``%config TrtProfileMagics.iterations = 50``."""

    iterations = Int(20, help="Profiled iterations for live profiles.").tag(config=True)
    warmup = Int(5, help="Unprofiled warm-up iterations for live profiles.").tag(config=True)
    cache_dir = Unicode("~/.cache/hookmagic/engines",
                        help="Where built TensorRT engines are cached ('' to disable)."
                        ).tag(config=True)

    @magic_arguments()
    @argument("target", nargs="?", help="model.onnx or model.engine (live TensorRT), or the name "
              "of a torch.nn.Module variable (live PyTorch). Omit when importing files.")
    @argument("--profile", metavar="P", help="trtexec --exportProfile JSON")
    @argument("--layers", metavar="L", help="trtexec --exportLayerInfo JSON")
    @argument("--times", metavar="T", help="trtexec --exportTimes JSON")
    @argument("--ort", metavar="FILE", help="ONNX Runtime profiler JSON")
    @argument("--load", metavar="FILE", help="a saved LayerProfile (.parquet or .json)")
    @argument("--name", metavar="LABEL", help="label for this profile")
    @argument("--input-shape", metavar="SHAPE", action="append",
              help="PyTorch: shape of a random input, e.g. 8x3x224x224 (repeat per input). "
                   "TensorRT: NAME=SHAPE for a dynamic input.")
    @argument("--dtype", default="float32", help="PyTorch input dtype (float32, float16, bfloat16)")
    @argument("--fp16", action="store_true", help="TensorRT 10.x: allow FP16 kernels")
    @argument("--int8", action="store_true", help="TensorRT 10.x: allow INT8 kernels")
    @argument("--workspace", type=int, metavar="MB", help="TensorRT builder workspace limit")
    @argument("--timing-cache", metavar="FILE", help="TensorRT timing cache to read and update")
    @argument("--cuda-graph", action="store_true", help="TensorRT: run through a CUDA graph")
    @argument("-n", "--iterations", type=int, help="profiled iterations (live profiles)")
    @argument("--warmup", type=int, help="warm-up iterations (live profiles)")
    @argument("--top", type=int, default=5, help="layers listed in the summary (5)")
    @argument("--explore", action="store_true", help="show the interactive explorer")
    @argument("-q", dest="quiet", action="store_true", help="display nothing")
    @argument("-o", dest="return_profile", action="store_true", help="return the LayerProfile")
    @argument("-v", dest="var", metavar="VAR", help="store the LayerProfile in VAR")
    @line_magic
    def trtprofile(self, line: str) -> Any:
        """Profile a model layer by layer, or import a layer profile.

        %trtprofile --profile p.json --layers l.json [--times t.json]   trtexec exports
        %trtprofile model.onnx [--fp16] [--input-shape x=1x3x224x224]   build + profile (TensorRT)
        %trtprofile model.engine                                         profile an engine
        %trtprofile model --input-shape 8x3x224x224 --dtype float16      PyTorch module on the GPU
        %trtprofile --ort ort_profile.json | --load saved.parquet

        Shows the headline numbers and slowest layers; ``--explore`` opens the filterable
        explorer; ``-o`` returns / ``-v VAR`` stores the LayerProfile. When a file is bad, or
        TensorRT or a GPU is missing, the cell fails with one line saying why and how to
        proceed (:class:`~hookmagic.magic_args.MagicFailed`); the kernel keeps running.
        """
        args = parse_line(self.trtprofile, line)
        try:
            profile = self._profile(args)
        except (UsageError, MagicFailed):
            raise
        except Exception as exc:  # one clear line that fails the cell; never a crash of the kernel
            raise MagicFailed(_one_line(exc)) from exc
        if args.var:
            self.shell.user_ns[args.var] = profile
        if not args.quiet:
            if args.explore:
                from hookmagic.views.layers_explorer import explore
                display(explore(profile, n=max(args.top, 20)))
            else:
                display(profile.summary_bundle(top=args.top), raw=True)
        return profile if args.return_profile else None

    # -- wiring ----------------------------------------------------------------------------
    def _profile(self, args: Any):
        from hookmagic.layers import LayerProfile, from_trtexec

        sources = [bool(args.profile or args.layers), bool(args.ort), bool(args.load),
                   bool(args.target)]
        if sum(sources) != 1:
            raise UsageError("%trtprofile needs exactly one source: a model (file or variable), "
                             "--profile/--layers, --ort or --load. See %trtprofile?")
        if args.profile or args.layers:
            return from_trtexec(profile=args.profile, layers=args.layers, times=args.times,
                                name=args.name)
        if args.load:
            p = LayerProfile.load(args.load)
            if args.name:
                p.meta["name"] = args.name
            return p
        if args.ort:
            from hookmagic.layers.onnxruntime import from_onnxruntime
            return from_onnxruntime(args.ort, name=args.name)
        target = args.target
        iterations = args.iterations or self.iterations
        warmup = self.warmup if args.warmup is None else args.warmup
        suffix = Path(target).suffix.lower()
        if suffix in (".onnx", ".engine", ".plan", ".trt"):
            return self._tensorrt(args, Path(target), iterations, warmup)
        if target in self.shell.user_ns:
            return self._torch(args, self.shell.user_ns[target], iterations, warmup)
        raise UsageError(f"{target!r} is neither a .onnx/.engine file nor a variable in the "
                         "namespace")

    def _tensorrt(self, args: Any, path: Path, iterations: int, warmup: int):
        from hookmagic.layers import tensorrt_live as live

        try:
            trt = live.import_tensorrt()
        except live.TensorRTUnavailable as exc:
            raise MagicFailed(str(exc)) from exc
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
        shapes = _named_shapes(args.input_shape)
        if path.suffix.lower() == ".onnx":
            cache = str(Path(self.cache_dir).expanduser()) if self.cache_dir else None
            engine = live.build_engine(path, fp16=args.fp16, int8=args.int8, shapes=shapes or None,
                                       workspace_mb=args.workspace, timing_cache=args.timing_cache,
                                       cache_dir=cache, gpu=_gpu_name(),
                                       progress=lambda s: print(f"hookmagic: {s}", flush=True),
                                       trt=trt)
        else:
            engine = path.read_bytes()
        return live.profile_engine(engine, iterations=iterations, warmup=warmup,
                                   cuda_graph=args.cuda_graph, input_shapes=shapes or None,
                                   name=args.name or path.stem, trt=trt)

    def _torch(self, args: Any, model: Any, iterations: int, warmup: int):
        if not args.input_shape:
            raise UsageError("profiling a PyTorch module needs --input-shape, e.g. 1x3x224x224")
        try:
            import torch
        except ImportError as exc:
            raise MagicFailed("PyTorch is not installed in this kernel") from exc
        if not torch.cuda.is_available():
            raise MagicFailed("no CUDA GPU is visible, so no layer times can be measured; "
                              "import trtexec exports instead (%trtprofile --profile P --layers L)")
        dtype = getattr(torch, args.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise UsageError(f"unknown --dtype {args.dtype!r}")
        inputs = tuple(torch.randn(_shape(s), device="cuda", dtype=dtype) for s in args.input_shape)
        from hookmagic.layers.torch_modules import profile_module
        return profile_module(model, inputs, iterations=iterations, warmup=warmup,
                              name=args.name or type(model).__name__)


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in text.lower().replace(",", "x").split("x") if d)
    except ValueError:
        raise UsageError(f"bad shape {text!r}; write it like 1x3x224x224") from None


def _named_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"TensorRT inputs need NAME=SHAPE, got {item!r}")
        name, shape = item.split("=", 1)
        out[name] = _shape(shape)
    return out


def _gpu_name() -> str:
    try:
        import torch
        return torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    except ImportError:
        return ""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
