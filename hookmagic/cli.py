"""The ``hookmagic`` command line, for scripts and CI.

    hookmagic trt summary --profile P --layers L [--times T] [--top N] [--json] [--max-ms MS]
    hookmagic trt compare --profile P1 --layers L1 --profile P2 --layers L2 [--name A --name B] [--json]
    hookmagic demo [--out DIR]
    hookmagic kernels check [--arch sm_90 ...] [--json] | hookmagic kernels list
    hookmagic report TRACE [-o report.html]
    hookmagic doctor [--json]

Each subcommand group is one ``register_<group>(subparsers)`` function listed in
``REGISTRARS``; a new group (e.g. ``demo``) is a new function and one line there. Commands only
parse arguments and wire importers, analyses and printing together.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Callable, Sequence

import pandas as pd

from hookmagic.common.errors import InvalidArgument
from hookmagic.common.format import short

#: exit statuses: 0 success; 1 an error (one line on stderr: bad or missing input file, a
#: budget exceeded, ...); 2 a usage error (argparse's convention); 3 a ``--max-ms`` gate
#: failed; 130 interrupted (Ctrl-C)
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_THRESHOLD, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _count(text: str) -> int:
    """argparse type: a whole number >= 0 (``--top``)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative; give a number >= 0")
    return n


def _milliseconds(text: str) -> float:
    """argparse type: a finite number of milliseconds >= 0 (``--max-ms``; NaN and inf refused,
    since every comparison with NaN is false and the gate would always pass)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds") from None
    if not math.isfinite(x) or x < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a finite number of milliseconds >= 0")
    return x


def _json_text(doc: Any) -> str:
    """JSON with NaN and infinities written as null: strict JSON that every parser reads."""
    return json.dumps(_finite(doc), indent=1, default=str, allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:
        return _finite(obj.item())   # numpy scalars
    return obj


# ---- trt ----------------------------------------------------------------------------------

def register_trt(subparsers: argparse._SubParsersAction) -> None:
    """``hookmagic trt ...``: TensorRT layer profiles from trtexec exports or saved profiles."""
    trt = subparsers.add_parser("trt", help="TensorRT layer profiles (trtexec exports)",
                                description="Summarise or compare TensorRT layer profiles.")
    sub = trt.add_subparsers(dest="trt_command", metavar="{summary,compare}", required=True)

    s = sub.add_parser("summary", help="headline numbers, slowest layers, time by type/precision")
    _engine_args(s, many=False)
    s.add_argument("--top", type=_count, default=10, metavar="N", help="slowest layers to list (10)")
    s.add_argument("--json", action="store_true", help="print one JSON document")
    s.add_argument("--max-ms", type=_milliseconds, metavar="MS",
                   help=f"exit with status {EXIT_THRESHOLD} if the layer sum exceeds MS (for CI)")
    s.set_defaults(func=_trt_summary)

    c = sub.add_parser("compare", help="pair the layers of two or more engines of one network")
    _engine_args(c, many=True)
    c.add_argument("--top", type=_count, default=10, metavar="N",
                   help="largest per-layer changes to list (10)")
    c.add_argument("--json", action="store_true", help="print one JSON document")
    c.set_defaults(func=_trt_compare)


def _engine_args(p: argparse.ArgumentParser, many: bool) -> None:
    action = "append" if many else "store"
    rep = " (repeat, once per engine)" if many else ""
    p.add_argument("--profile", action=action, metavar="P", help="trtexec --exportProfile JSON" + rep)
    p.add_argument("--layers", action=action, metavar="L", help="trtexec --exportLayerInfo JSON" + rep)
    p.add_argument("--times", action=action, metavar="T", help="trtexec --exportTimes JSON" + rep)
    p.add_argument("--load", action=action, metavar="FILE",
                   help="a saved LayerProfile (.parquet/.json) instead of exports" + rep)
    p.add_argument("--name", action=action, metavar="LABEL", help="label for the engine" + rep)


def _load_one(profile: str | None, layers: str | None, times: str | None, load: str | None,
              name: str | None):
    from hookmagic.layers import LayerProfile, from_trtexec

    if load:
        p = LayerProfile.load(load)
        if name:
            p.meta["name"] = name
        return p
    if not profile and not layers:
        raise _Usage("give --profile and/or --layers (or --load)")
    return from_trtexec(profile=profile, layers=layers, times=times, name=name)


def _load_many(args: argparse.Namespace) -> list:
    lists = {k: getattr(args, k) or [] for k in ("profile", "layers", "times", "load", "name")}
    n = max(len(lists["profile"]), len(lists["layers"])) + len(lists["load"])
    if n < 2:
        raise _Usage("compare needs at least two engines (--profile/--layers twice, or --load)")
    exports = max(len(lists["profile"]), len(lists["layers"]))
    for key in ("profile", "layers", "times"):
        if lists[key] and len(lists[key]) != exports:
            raise _Usage(f"give --{key} once per engine ({exports}), or not at all")
    if lists["name"] and len(lists["name"]) != n:
        raise _Usage(f"give --name once per engine ({n}), or not at all")
    if lists["name"]:
        names = lists["name"]
    else:   # by file name, with enough folders to tell engines apart (fp16/resnet, fp32/resnet)
        from hookmagic.layers.trtexec import engine_labels

        names = engine_labels(lists["profile"] or lists["layers"]) + [None] * len(lists["load"])
    out = []
    for i in range(exports):
        out.append(_load_one(*(lists[k][i] if lists[k] else None for k in ("profile", "layers", "times")),
                             None, names[i]))
    for j, path in enumerate(lists["load"]):
        out.append(_load_one(None, None, None, path, names[exports + j]))
    return out


def _trt_summary(args: argparse.Namespace) -> int:
    from hookmagic.layers.advice import findings
    from hookmagic.layers.breakdown import time_by_precision, time_by_type, top_layers
    from hookmagic.layers.reconcile import reconcile

    p = _load_one(args.profile, args.layers, args.times, args.load, args.name)
    parts = {"top": top_layers(p, args.top), "by_type": time_by_type(p),
             "by_precision": time_by_precision(p), "reconcile": reconcile(p),
             "findings": findings(p)}
    if args.json:
        head = p.summary()
        doc = {"summary": {**head.to_dict(), "warnings": head.notes},
               **{k: _records(v) for k, v in parts.items()}}
        print(_json_text(doc))
    else:
        s = p.summary()
        lat = f", end-to-end {p.latency_ms:.3f} ms" if p.latency_ms is not None else ""
        print(f"{s['name']}: {s['layers']} layers, layer sum {s['total_ms']:.3f} ms{lat}; "
              f"weights {s['weights_mib']:.1f} MiB, activations {s['activations_mib']:.1f} MiB")
        if s["device"]:
            print(f"device: {s['device']}")
        for w in s.notes:
            print(f"warning: {w}")
        _print_table(f"slowest {args.top} layers", parts["top"][["order", "name", "type", "precision",
                                                                 "mean_ms", "pct"]])
        _print_table("time by type", parts["by_type"])
        _print_table("time by precision", parts["by_precision"])
        _print_table("layer sum vs end-to-end", parts["reconcile"])
        _print_table("findings", parts["findings"][["severity", "finding", "evidence"]])
    untimed = int(p.layers["mean_ms"].isna().sum()) if len(p.layers) else 0
    if args.max_ms is not None and (not math.isfinite(p.total_ms) or untimed or not len(p.layers)):
        # a sum that leaves layers out (or a NaN, which compares False with any limit) must
        # not pass as within it
        why = (f"{untimed} of {len(p.layers)} layer(s) have no time" if untimed
               else "no usable layer times")
        print(f"hookmagic: layer sum is {p.total_ms:.3f} ms but {why}; --max-ms {args.max_ms} "
              "cannot be checked", file=sys.stderr)
        return EXIT_THRESHOLD
    if args.max_ms is not None and p.total_ms > args.max_ms:
        print(f"hookmagic: layer sum {p.total_ms:.3f} ms exceeds --max-ms {args.max_ms}",
              file=sys.stderr)
        return EXIT_THRESHOLD
    return EXIT_OK


def _trt_compare(args: argparse.Namespace) -> int:
    from hookmagic.layers.compare import compare_by, compare_layers, engines_summary

    engines = _load_many(args)
    base = engines[0]
    summary = engines_summary(engines)
    pairs = {f"{base.name} -> {e.name}": e for e in engines[1:]}
    by_type = {k: compare_by(base, e, "type") for k, e in pairs.items()}
    layers = {}
    for k, e in pairs.items():
        cmp = compare_layers(base, e)
        cmp = cmp.reindex(cmp["delta_ms"].abs().sort_values(ascending=False).index).head(args.top)
        layers[k] = cmp[["name_a", "name_b", "match", "precision_a", "precision_b", "ms_a", "ms_b",
                         "speedup"]]
    if args.json:
        print(_json_text({"engines": _records(summary),
                          "by_type": {k: _records(v) for k, v in by_type.items()},
                          "largest_changes": {k: _records(v) for k, v in layers.items()}}))
        return EXIT_OK
    _print_table("engines", summary)
    for k in pairs:
        _print_table(f"time by type, {k}", by_type[k])
        _print_table(f"largest per-layer changes, {k}", layers[k])
    return EXIT_OK


# ---- demo ---------------------------------------------------------------------------------

def register_demo(subparsers: argparse._SubParsersAction) -> None:
    """``hookmagic demo``: the tour notebook executed on the bundled recordings, as HTML."""
    d = subparsers.add_parser(
        "demo", help="run the tour notebook on the bundled GPU recordings and write it as HTML",
        description="Execute notebooks/00_tour.ipynb (no GPU or network needed: it replays "
                    "recordings made on a GPU) and render it to DIR/00_tour.html.")
    d.add_argument("--out", default="hookmagic-demo", metavar="DIR",
                   help="folder for 00_tour.html and the executed notebook (./hookmagic-demo)")
    d.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from hookmagic.demo import DemoError, build_demo

    try:
        result = build_demo(args.out)
    except DemoError as exc:
        print(f"hookmagic: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"executed the tour in {result.seconds:.1f} s", file=sys.stderr)
    print(result.html)
    return EXIT_OK


# ---- report -------------------------------------------------------------------------------

def register_report(subparsers: argparse._SubParsersAction) -> None:
    """``hookmagic report TRACE -o report.html``: one offline HTML page to share a profile."""
    r = subparsers.add_parser(
        "report", help="write a standalone, offline HTML report of a saved trace",
        description="Write the report of TRACE (a .hmtrace saved by Trace.save or %%cudahook "
                    "--save, or a torch.profiler / Kineto Chrome-trace JSON, optionally .gz): "
                    "summary, flame graph, timeline, diagnosis, kernels and memory, in one HTML "
                    "file that opens in any browser with no network and no Python.")
    r.add_argument("trace", metavar="TRACE", help="a .hmtrace file or a torch.profiler JSON")
    r.add_argument("-o", "--out", default=None, metavar="HTML",
                   help="the page to write (default: TRACE's name with .html, in this folder)")
    r.add_argument("--title", default=None, help="the page's title (default: the trace's label)")
    r.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hookmagic.facades import load
    from hookmagic.views.report import report_page

    from hookmagic.common.errors import InvalidArgument
    from hookmagic.common.files import atomic_write

    name = Path(args.trace).name
    for suffix in (".gz", ".json", ".hmtrace"):
        name = name.removesuffix(suffix)
    out = Path(args.out) if args.out else Path(name + ".html")
    source = Path(args.trace)
    if source.exists() and out.exists() and os.path.samefile(source, out):
        raise InvalidArgument(f"{out} is the trace being reported on; write the page elsewhere "
                              "(-o report.html)")
    if out.suffix.lower() not in (".html", ".htm"):
        # a page written over a trace (or any other file) would lose it
        raise _Usage(f"-o {out}: the report is an HTML page; give a name ending in .html")
    from hookmagic.trace.model import Trace
    trace = load(args.trace)     # a saved trace, torch.profiler JSON or a recording's name
    if not isinstance(trace, Trace):
        raise InvalidArgument(f"{args.trace} holds a {type(trace).__name__}, not a trace: "
                              "hookmagic report shows one capture (a layer profile: "
                              "hookmagic trt summary --load FILE)")
    page = report_page(trace, title=args.title)
    atomic_write(out, page.encode("utf-8"), "the report")   # a temporary file, then renamed
    print(out)
    return EXIT_OK


# ---- plumbing -----------------------------------------------------------------------------

class _Usage(InvalidArgument):
    """Arguments that parse but do not make sense together."""


def _command_parser(parser: argparse.ArgumentParser, argv: Sequence[str] | None
                    ) -> argparse.ArgumentParser:
    """The (sub)parser of the deepest subcommand named in ``argv`` (``trt compare``)."""
    for word in (sys.argv[1:] if argv is None else argv):
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions or word not in actions[0].choices:
            continue
        parser = actions[0].choices[word]
    return parser


#: one registrar per subcommand group; add yours here
REGISTRARS: list[Callable[[argparse._SubParsersAction], None]] = [register_trt, register_demo]
REGISTRARS.append(register_report)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand group."""
    parser = argparse.ArgumentParser(prog="hookmagic",
                                     description="GPU observability for Jupyter, from the shell.",
                                     epilog="exit status: 0 success, 1 error (one line on "
                                            "stderr), 2 usage error, 3 a --max-ms gate failed, "
                                            "130 interrupted; input budgets: docs/limits.md")
    from hookmagic.common.version import __version__
    parser.add_argument("--version", action="version", version=f"hookmagic {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in REGISTRARS:
        register(sub)
    _no_abbreviations(parser)
    return parser


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """Refuse shortened option names (``--lit`` for ``--lite``) in every (sub)command: a
    prefix that happens to match today may name another option tomorrow."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                _no_abbreviations(child)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hookmagic`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from hookmagic.common.errors import HookmagicError

    try:
        return int(args.func(args) or 0)
    except _Usage as exc:               # the usage shown is the subcommand's own
        _command_parser(parser, argv).error(str(exc))   # exits with status 2
    except (HookmagicError, ValueError, OSError) as exc:
        # one line, no traceback; the message names the file and what to do
        if isinstance(exc, BrokenPipeError):   # `hookmagic ... | head` is fine
            return EXIT_OK
        text = " ".join(str(exc).split()) or type(exc).__name__
        print(f"hookmagic: error: {text}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("hookmagic: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return json.loads(frame.to_json(orient="records"))


def _print_table(title: str, frame: pd.DataFrame) -> None:
    print(f"\n{title}")
    if frame.empty:
        print("  (none)")
        return
    shown = frame.copy()
    for col in shown.columns:
        if shown[col].dtype == object or str(shown[col].dtype) in ("str", "string"):
            shown[col] = shown[col].map(lambda v: short(v, 70) if isinstance(v, str) else v)
    print(shown.to_string(index=False, float_format=lambda v: "nan" if math.isnan(v) else f"{v:.4f}"))


# ---- kernels ------------------------------------------------------------------------------

def register_kernels(subparsers: argparse._SubParsersAction) -> None:
    """``hookmagic kernels check|list``: the NVRTC-compiled kernel library (no GPU needed)."""
    k = subparsers.add_parser("kernels", help="hookmagic's CUDA kernel library (compile checks, list)")
    sub = k.add_subparsers(dest="kernels_command", metavar="{check,list}", required=True)
    c = sub.add_parser("check", help="compile every kernel with NVRTC and print registers, smem, spills",
                       description="Compile every kernels/*.cu for each --arch with NVRTC (no GPU needed); "
                                   "exit 1 on a compile error or on spills a kernel does not declare.")
    c.add_argument("--arch", action="append", metavar="ARCH",
                   help="target, e.g. sm_80, sm_87, sm_90, sm_90a (repeatable; default: all four)")
    c.add_argument("--no-cache", action="store_true", help="compile afresh instead of using the cubin cache")
    c.add_argument("--json", action="store_true", help="print the table as JSON records")
    c.set_defaults(func=_kernels_check)
    ls = sub.add_parser("list", help="every kernel with its variants and dtypes")
    ls.add_argument("--json", action="store_true", help="print the table as JSON records")
    ls.set_defaults(func=_kernels_list)


def _kernels_check(args: argparse.Namespace) -> int:
    from hookmagic.common.errors import HookmagicError
    from hookmagic.kernels import CI_ARCHS, check

    frames = []
    for arch in args.arch or CI_ARCHS:
        try:
            frames.append(check(arch, use_cache=not args.no_cache, progress=_compile_progress))
        except HookmagicError as exc:
            print(f"hookmagic: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
    table = pd.concat(frames, ignore_index=True)
    cols = ["arch", "kernel", "registers", "smem_bytes", "stack_bytes", "spill_store_bytes",
            "spill_load_bytes", "spills_expected", "ok"]
    if args.json:
        print(json.dumps(_records(table[cols + ["family", "nvrtc"]])))
    else:
        _print_table(f"NVRTC {table['nvrtc'].iloc[0] if len(table) else '?'}: {len(table)} kernel builds", table[cols])
    bad = table[~table["ok"]]
    if len(bad):
        print(f"hookmagic: error: undeclared spills in {', '.join(bad['arch'] + ':' + bad['kernel'])}",
              file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _compile_progress(done: int, total: int, family: str, arch: str) -> None:
    """Progress of ``kernels check`` on stderr (a cold compile of every family takes tens of
    seconds): one line rewritten in place on a terminal, one line per architecture otherwise."""
    if sys.stderr.isatty():
        text = f"hookmagic: compiling {family} for {arch} ({done + 1}/{total})" if family else ""
        print(f"\r\033[K{text}", end="" if family else "", file=sys.stderr, flush=True)
    elif done == 0 and family:
        print(f"hookmagic: compiling {total} kernel families for {arch}", file=sys.stderr, flush=True)


def _kernels_list(args: argparse.Namespace) -> int:
    from hookmagic.kernels import available

    table = available()
    if args.json:
        print(json.dumps(_records(table)))
    else:
        _print_table("hookmagic.kernels", table)
    return EXIT_OK


REGISTRARS.append(register_kernels)


# ---- doctor -------------------------------------------------------------------------------

def register_doctor(subparsers: argparse._SubParsersAction) -> None:
    """``hookmagic doctor``: what this machine can do for hookmagic, and why not."""
    d = subparsers.add_parser(
        "doctor", help="what this machine can do (driver, GPUs, CUPTI, CUDA, extras) and the fix "
                       "for each missing piece",
        description="Check the NVIDIA driver, NVML, each GPU and the kernels it can run, which "
                    "CUPTI a capture would load and why, CUDA wheels and toolkits, whether "
                    "performance counters are restricted to admin users, Python, hookmagic, its "
                    "native extension and the optional extras; say how to fix what is missing. "
                    "Needs no GPU; exit status 0 whenever the report was made.")
    d.add_argument("--json", action="store_true", help="print one JSON document")
    d.set_defaults(func=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    from hookmagic.checkup import doctor

    report = doctor()
    print(_json_text(report.to_dict()) if args.json else report.text())
    return EXIT_OK


REGISTRARS.append(register_doctor)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
