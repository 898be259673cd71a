"""GPU time by source line: which line of the user's code launched each kernel.

Every kernel with a Python stack is charged to the lines on that stack:

- **launched here** (``gpu_ns``, ``launches``, ``kernels``): each kernel is charged once, to
  its *launching line*, the innermost frame of the user's own code (outside installed packages,
  the standard library and hookmagic; :func:`hookmagic.common.sources.is_library_file`). A
  stack made only of library frames is charged to its innermost frame. So ``gpu_ns`` sums to
  the GPU time of the attributed kernels: every attributed kernel is counted exactly once.
- **inclusive** (``inclusive_ns``, ``inclusive_launches``): each kernel is charged to every line
  on its stack (once per line, however often recursion repeats it): the GPU time spent under
  that line, as ``%lprun`` counts the time of a line that calls a function.

Module frames (``<module>``, made by the capture to name ``nn.Module`` calls) and frames with no
file or line (built-in functions in torch.profiler's stacks) are not source lines and are
skipped; a backward kernel is charged to the line that called ``backward()``.

Pure functions over the trace's tables: the source text comes in as an argument (the facade
reads it, see :func:`hookmagic.common.sources.source_lines`).
"""
from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from hookmagic.analysis.tables import event_mask, table
from hookmagic.common.errors import InvalidArgument
from hookmagic.common.sources import MODULE_FILE, is_library_file

__all__ = ["LINE_COLUMNS", "Focus", "LineBlock", "line_table", "function_blocks", "resolve_focus",
           "function_span"]

#: columns of :func:`line_table`, in order
LINE_COLUMNS = ["file", "line", "function", "source", "gpu_ns", "launches", "kernels",
                "inclusive_ns", "inclusive_launches", "share", "user"]
#: kernels named per line in the ``kernels`` column, heaviest first
TOP_KERNELS = 3
_KEY = ["file", "line", "function"]
#: where source text comes from: filename -> (lines, origin), as a mapping or a function
Sources = Mapping[str, tuple[Sequence[str], str]] | Callable[[str], tuple[Sequence[str], str]]


# -- focus: a function or a file ------------------------------------------------------------------

@dataclass(frozen=True)
class Focus:
    """What ``lines(func_or_file)`` / ``%cudahook -f`` asks for: a file, a function, or both."""

    file: str | None = None
    function: str | None = None
    text: str = ""

    def files_mask(self, files: pd.Series) -> np.ndarray:
        if self.file is None:
            return np.ones(len(files), dtype=bool)
        return files.astype(str).map(lambda f: _same_file(f, self.file)).to_numpy(dtype=bool)

    def functions_mask(self, functions: pd.Series) -> np.ndarray:
        if self.function is None:
            return np.ones(len(functions), dtype=bool)
        return functions.astype(str).map(lambda f: _same_function(f, self.function)
                                         ).to_numpy(dtype=bool)


def _same_file(recorded: str, wanted: str) -> bool:
    if recorded == wanted:
        return True
    wanted = wanted.replace("\\", "/")
    return recorded.replace("\\", "/").endswith("/" + wanted.lstrip("/"))


def _same_function(recorded: str, wanted: str) -> bool:
    """``Adam.step`` matches ``Adam.step`` and ``step`` (Python 3.10 frames name the bare
    function); ``step`` matches ``Adam.step``, ``SGD.step``."""
    if recorded == wanted:
        return True
    rec_last, want_last = recorded.rsplit(".", 1)[-1], wanted.rsplit(".", 1)[-1]
    if "." not in wanted:
        return rec_last == wanted
    return "." not in recorded and recorded == want_last


def resolve_focus(target: Any) -> Focus:
    """A :class:`Focus` from a function (or method, or code object) or a string.

    A string naming a ``.py`` file (or ending in a path separator-free name with ``.py``)
    selects that file (matched by its full path or a trailing part of it, e.g.
    ``"train.py"``); ``"file.py:func"`` a function in a file; any other string a function by
    its qualified name (``"Model.forward"``) or bare name (``"forward"``).
    """
    if isinstance(target, Focus):
        return target
    if isinstance(target, str):
        text = target.strip()
        if not text:
            raise InvalidArgument("lines(): give a function or a file name, not an empty string")
        head, sep, tail = text.rpartition(":")
        if sep and head.endswith(".py") and tail:
            return Focus(file=head, function=tail, text=text)
        if text.endswith(".py") or "/" in text or "\\" in text:
            return Focus(file=text, text=text)
        return Focus(function=text, text=text)
    func = inspect.unwrap(target) if callable(target) else target
    func = getattr(func, "__func__", func)  # bound methods
    code = getattr(func, "__code__", None) or (func if inspect.iscode(func) else None)
    if code is None:
        raise InvalidArgument(f"lines(): {target!r} is not a function, a method or a file name")
    name = getattr(code, "co_qualname", None) or getattr(func, "__qualname__", code.co_name)
    return Focus(file=code.co_filename, function=name, text=name)


# -- the frames every attributed kernel passes through ---------------------------------------------

def _frames(trace: Any, device: Any, stream: Any) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(per-stack totals, the source frames of those stacks with a ``user`` flag, totals)."""
    kernels = table(trace, "kernels")
    mask = event_mask(kernels, device, stream)
    kernels = kernels[mask] if not mask.all() else kernels
    stacks = table(trace, "stacks")
    if len(stacks):   # source lines only: not module frames, nor built-ins (no file, line 0)
        names = stacks["filename"].astype(str)
        frames = stacks[(names != MODULE_FILE) & (names != "") & (stacks["line"] > 0)]
    else:
        frames = stacks
    known = np.isin(kernels["stack_id"].to_numpy(), frames["stack_id"].unique()) \
        if len(frames) else np.zeros(len(kernels), dtype=bool)
    totals = {"total_ns": int(kernels["duration_ns"].sum()), "kernels": len(kernels),
              "attributed_ns": int(kernels.loc[known, "duration_ns"].sum()),
              "attributed_kernels": int(known.sum())}
    attributed = kernels[known]
    per_stack = attributed.groupby("stack_id", sort=True).agg(
        ns=("duration_ns", "sum"), n=("duration_ns", "size"))
    frames = frames[frames["stack_id"].isin(per_stack.index)]
    files = frames["filename"].astype(str)
    user_of = {f: not is_library_file(f) for f in files.unique()}
    frames = pd.DataFrame({"stack_id": frames["stack_id"].to_numpy(dtype=np.int64),
                           "depth": frames["depth"].to_numpy(dtype=np.int64),
                           "file": files.to_numpy(object),
                           "line": frames["line"].to_numpy(dtype=np.int64),
                           "function": frames["function"].astype(str).to_numpy(object),
                           "user": files.map(user_of).to_numpy(dtype=bool)})
    return per_stack, frames, {**totals, "_attributed": attributed}


def _launching_frames(frames: pd.DataFrame) -> pd.DataFrame:
    """One row per stack: its innermost user frame, else its innermost frame."""
    if not len(frames):
        return frames
    rank = frames["user"].to_numpy(dtype=np.int64) * (1 << 32) + frames["depth"].to_numpy()
    order = np.lexsort((rank, frames["stack_id"].to_numpy()))
    ordered = frames.iloc[order]
    return ordered.drop_duplicates("stack_id", keep="last")


def _top_kernels(attributed: pd.DataFrame, launch: pd.DataFrame) -> pd.Series:
    """The kernels launched from each line, heaviest first: ``name ×count``, ``; ``-joined."""
    if not len(launch):
        return pd.Series(dtype=object)
    code, keys = pd.factorize(pd.MultiIndex.from_frame(launch[_KEY]))
    line_of_stack = pd.Series(code, index=launch["stack_id"].to_numpy())
    k = pd.DataFrame({"key": line_of_stack.reindex(attributed["stack_id"].to_numpy()).to_numpy(),
                      "name": attributed["name"].astype(str).to_numpy(),
                      "ns": attributed["duration_ns"].to_numpy(dtype=np.int64)})
    g = k.groupby(["key", "name"], sort=False).agg(ns=("ns", "sum"), n=("ns", "size")).reset_index()
    g = g.sort_values(["key", "ns"], ascending=[True, False], kind="stable")
    g = g.groupby("key", sort=False).head(TOP_KERNELS)
    text = g.assign(t=g["name"] + " ×" + g["n"].astype(str)).groupby("key")["t"].agg("; ".join)
    return pd.Series(text.reindex(range(len(keys))).fillna("").to_numpy(object),
                     index=pd.MultiIndex.from_tuples(list(keys), names=_KEY))


def line_table(trace: Any, focus: Any = None, device: int | Iterable[int] | None = None,
               stream: int | Iterable[int] | None = None, user_only: bool = False,
               sources: Sources | None = None) -> pd.DataFrame:
    """GPU time by source line, the user's own lines first.

    Parameters
    ----------
    focus : a function, method, file name or function name (see :func:`resolve_focus`): keep
        only the lines of that function or file. None: every line.
    device, stream : count only kernels on these devices / streams.
    user_only : keep only lines of the user's own code (outside installed packages, the
        standard library and hookmagic).
    sources : filename -> ``(lines, origin)``, a mapping or a function (the facade reads them
        with :func:`hookmagic.common.sources.source_lines`); fills the ``source`` column. A
        function whose recorded lines do not fit the given text (the file changed since) gets
        no source text.

    Returns
    -------
    One row per (file, line, function) on the stacks of the kernels: ``file, line, function,
    source`` (the line's text, stripped; "" when unavailable), ``gpu_ns`` and ``launches`` (the
    kernels this line launched: it is their innermost user frame; the column sums to
    ``attrs["attributed_ns"]``), ``kernels`` (those kernels' names, heaviest first, as
    ``name ×count``), ``inclusive_ns`` and ``inclusive_launches`` (kernels launched anywhere under
    this line), ``share`` (gpu_ns / attributed GPU time) and ``user`` (the user's own code).
    Rows: user lines first, then by ``gpu_ns`` and ``inclusive_ns``, largest first.
    ``attrs`` holds ``total_ns``, ``kernels``, ``attributed_ns``, ``attributed_kernels`` (kernels
    with a stack of source frames; the rest are on no line) and ``focus``.
    """
    per_stack, frames, totals = _frames(trace, device, stream)
    attributed = totals.pop("_attributed")
    launch = _launching_frames(frames)
    ns = per_stack["ns"]
    n = per_stack["n"]
    self_part = launch.assign(gpu_ns=ns.reindex(launch["stack_id"]).to_numpy(),
                              launches=n.reindex(launch["stack_id"]).to_numpy())
    own = self_part.groupby(_KEY, sort=False).agg(gpu_ns=("gpu_ns", "sum"),
                                                 launches=("launches", "sum"))
    once = frames.drop_duplicates(["stack_id"] + _KEY)
    incl = once.assign(inclusive_ns=ns.reindex(once["stack_id"]).to_numpy(),
                       inclusive_launches=n.reindex(once["stack_id"]).to_numpy(),
                       ).groupby(_KEY, sort=False).agg(
        inclusive_ns=("inclusive_ns", "sum"), inclusive_launches=("inclusive_launches", "sum"),
        user=("user", "first"))
    out = incl.join(own, how="left").fillna({"gpu_ns": 0, "launches": 0})
    out["kernels"] = _top_kernels(attributed, launch).reindex(out.index).fillna("")
    out = out.reset_index()
    if focus is not None:
        f = resolve_focus(focus)
        out = out[f.files_mask(out["file"]) & f.functions_mask(out["function"])]
    if user_only:
        out = out[out["user"]]
    out = out.assign(gpu_ns=out["gpu_ns"].astype(np.int64), launches=out["launches"].astype(np.int64),
                     inclusive_ns=out["inclusive_ns"].astype(np.int64),
                     inclusive_launches=out["inclusive_launches"].astype(np.int64),
                     user=out["user"].astype(bool))
    attributed_ns = totals["attributed_ns"]
    out["share"] = out["gpu_ns"] / attributed_ns if attributed_ns else 0.0
    out["source"] = _source_column(out, frames, sources)
    out = out.sort_values(["user", "gpu_ns", "inclusive_ns", "file", "line"],
                          ascending=[False, False, False, True, True], kind="stable")
    out = out[LINE_COLUMNS].reset_index(drop=True)
    out.attrs.update(totals)
    out.attrs["focus"] = resolve_focus(focus).text if focus is not None else None
    return out


def _lookup(sources: Sources | None, filename: str) -> tuple[list[str], str]:
    if sources is None:
        return [], "unavailable"
    found = sources(filename) if callable(sources) else sources.get(filename)
    if not found:
        return [], "unavailable"
    lines, origin = found
    return list(lines or []), str(origin)


def _source_column(rows: pd.DataFrame, frames: pd.DataFrame,
                   sources: Sources | None) -> np.ndarray:
    text = np.full(len(rows), "", dtype=object)
    if not sources or not len(rows):
        return text
    recorded = frames.groupby(["file", "function"], sort=False)["line"].agg(list)
    fits: dict[tuple[str, str], bool] = {}
    texts: dict[str, list[str]] = {}
    for i, (fl, ln, fn) in enumerate(zip(rows["file"], rows["line"], rows["function"])):
        if fl not in texts:
            texts[fl] = _lookup(sources, fl)[0]
        lines = texts[fl]
        if not lines or not 1 <= ln <= len(lines):
            continue
        if (fl, fn) not in fits:
            fits[(fl, fn)] = function_span(lines, fn, recorded.get((fl, fn), [ln])) is not None
        if fits[(fl, fn)]:
            text[i] = str(lines[ln - 1]).strip()
    return text


# -- a function's source with GPU time beside each line -------------------------------------------

@dataclass
class LineBlock:
    """One function (or a file's top level) to render, line by line.

    ``rows``: one per source line from ``first`` to ``last``: ``line, source, inclusive_ns,
    inclusive_launches, gpu_ns, launches, share`` (inclusive_ns / the function's GPU time).
    ``origin``: where the text came from: "recording", "disk", "disk-changed" (modified after
    the capture started), "unavailable", or "mismatch"
    (a file on disk whose lines do not fit the recorded frames: it changed since; then only the
    recorded lines are listed, without text).
    """

    file: str
    function: str
    first: int
    last: int
    total_ns: int
    launches: int
    origin: str
    rows: pd.DataFrame = field(repr=False)


def function_blocks(trace: Any, focus: Any = None, sources: Sources | None = None,
                    device: int | Iterable[int] | None = None,
                    stream: int | Iterable[int] | None = None, limit: int = 5) -> list[LineBlock]:
    """The functions to render for ``lines(focus)``: each function's source lines with the GPU
    time under each line.

    ``focus`` as in :func:`resolve_focus`; None renders the ``limit`` user functions with the
    most GPU time. ``sources`` maps a filename (or is called with it) to ``(lines, origin)``.
    Blocks come heaviest first; a function with no GPU time in this trace gives no block.
    """
    per_stack, frames, _ = _frames(trace, device, stream)
    if focus is not None:
        f = resolve_focus(focus)
        chosen = frames[f.files_mask(frames["file"]) & f.functions_mask(frames["function"])]
    else:
        chosen = frames[frames["user"]]
    if not len(chosen):
        return []
    ns, n = per_stack["ns"], per_stack["n"]
    once = chosen.drop_duplicates(["stack_id"] + _KEY)
    once = once.assign(ns=ns.reindex(once["stack_id"]).to_numpy(),
                       n=n.reindex(once["stack_id"]).to_numpy())
    per_func = chosen.drop_duplicates(["stack_id", "file", "function"])
    per_func = per_func.assign(ns=ns.reindex(per_func["stack_id"]).to_numpy(),
                               n=n.reindex(per_func["stack_id"]).to_numpy()
                               ).groupby(["file", "function"], sort=False)[["ns", "n"]].sum()
    per_func = per_func.sort_values("ns", ascending=False, kind="stable")
    if focus is None:
        per_func = per_func.head(limit)
    launch = _launching_frames(frames)
    launch = launch.assign(ns=ns.reindex(launch["stack_id"]).to_numpy(),
                           n=n.reindex(launch["stack_id"]).to_numpy())
    blocks = []
    for (fl, fn), tot in per_func.iterrows():
        mine = once[(once["file"] == fl) & (once["function"] == fn)]
        by_line = mine.groupby("line").agg(inclusive_ns=("ns", "sum"), inclusive_launches=("n", "sum"))
        here = launch[(launch["file"] == fl) & (launch["function"] == fn)].groupby("line").agg(
            gpu_ns=("ns", "sum"), launches=("n", "sum"))
        lines, origin = _lookup(sources, fl)
        recorded = sorted(by_line.index.tolist())
        span = function_span(lines, fn, recorded) if lines else None
        if lines and span is None:
            origin = "mismatch"
        if span is None:
            numbers = recorded
            texts = [""] * len(numbers)
            first, last = recorded[0], recorded[-1]
        else:
            first, last = span
            numbers = list(range(first, last + 1))
            texts = [lines[i - 1] for i in numbers]
        rows = pd.DataFrame({"line": np.asarray(numbers, dtype=np.int64), "source": texts})
        rows = rows.join(by_line, on="line").join(here, on="line")
        for c in ("inclusive_ns", "inclusive_launches", "gpu_ns", "launches"):
            rows[c] = rows[c].fillna(0).astype(np.int64)
        total = int(tot["ns"])
        rows["share"] = rows["inclusive_ns"] / total if total else 0.0
        blocks.append(LineBlock(file=str(fl), function=str(fn), first=int(first), last=int(last),
                                total_ns=total, launches=int(tot["n"]), origin=origin, rows=rows))
    return blocks


def function_span(lines: Sequence[str], function: str, recorded: Sequence[int]
                  ) -> tuple[int, int] | None:
    """The first and last line (1-based, decorators included) of ``function`` in ``lines``,
    checked against the lines a trace recorded in it; None when no such function holds them
    all (the text is not what ran).

    ``function`` is a frame's name: a qualified name (``Model.forward``, ``f.<locals>.g``;
    Python ≥ 3.11) or a bare one (3.10). ``<module>`` is the file's top level: the whole file
    when short, else the recorded lines with three lines around them. Comprehensions and
    lambdas are shown in the function that holds them.
    """
    if not recorded:
        return None
    lo, hi = min(recorded), max(recorded)
    n = len(lines)
    if lo < 1 or hi > n:
        return None
    parts = [p for p in str(function).split(".") if p != "<locals>"]
    while parts and parts[-1].startswith("<") and parts[-1] != "<module>":
        parts.pop()  # <lambda>, <listcomp>, <genexpr>: the enclosing function
    try:
        tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError):
        tree = None
    if not parts or parts == ["<module>"]:
        if tree is not None and parts == ["<module>"]:
            inside = [d for d in _defs(tree) if d[1] <= lo and hi <= d[2]]
            if inside and all(d[1] < lo for d in inside):
                return None  # "top level" lines inside a def: not the text that ran
        if not parts:  # a lambda etc. at top level: the lines around it
            return max(1, lo - 3), min(n, hi + 3)
        return (1, n) if n <= 300 else (max(1, lo - 3), min(n, hi + 3))
    if tree is None:
        return None
    want = ".".join(parts)
    best = None
    for qual, start, end in _defs(tree):
        plain = ".".join(p for p in qual.split(".") if p != "<locals>")
        if plain != want and not (len(parts) == 1 and plain.rsplit(".", 1)[-1] == want):
            continue
        if start <= lo and hi <= end and (best is None or end - start < best[1] - best[0]):
            best = (start, end)
    return best


def _defs(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(qualified name, first line with decorators, last line) of every function in ``tree``."""
    out: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((qual, start, int(getattr(child, "end_lineno", child.lineno))))
                visit(child, qual + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out
