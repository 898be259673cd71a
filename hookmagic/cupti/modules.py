"""Module paths in stacks: ``layer1.0.conv1 (Conv2d)`` instead of ``Module._call_impl`` frames.

Nothing runs per module call. When a capture with stacks starts and torch is already imported,
the native session is told which code object is ``torch.nn.Module._call_impl`` and where its
``self`` lives (:func:`module_probe`); the stack walk that runs at each launch anyway then
reads, from each such frame, the module being called (its address and a copy of its class
name; the address is part of the frame's identity, so one call site under two modules is two
stacks). When the capture ends, :func:`module_stacks` names those addresses without ever
dereferencing one (the module may be gone and its address reused): it compares them with
``id()`` of live modules found from the namespace that ran the capture (the notebook's, or
the locals and globals of the frame holding the ``with``: modules there, one level into
objects' attributes and functions' closures, and every submodule of those); only if some
remain unknown, it looks through ``gc.get_objects()`` within :data:`GC_SCAN_BUDGET_S`. A
module is named by its qualified name in the outermost module called in that stack (as
``named_modules()`` names it) and its class; the outermost module by its class; a module that
cannot be found by its class only. The k-th ``Module._call_impl`` frame becomes a frame
naming the k-th module, and the ``_wrapped_call_impl`` / ``_call_impl.<locals>.inner``
plumbing frames go. Torch's fast call path is kept: no global module hook is installed.

``CaptureOptions.module_names=False`` keeps the raw frames. Backward kernels (launched on
autograd's engine threads, attributed to the caller of ``backward()``) get one more frame,
``backward of <op>``, from the autograd node whose backward launched them
(:mod:`hookmagic.cupti.autograd`).
"""
from __future__ import annotations

import gc
import sys
import time
import types
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

MODULE_FILE = "<module>"  # filename of the frames that name modules
# The native stack walker names frames by co_qualname (Python >= 3.11: "Module._call_impl")
# and by co_name on 3.10 ("_call_impl"); both spellings are matched.
_PLUMBING = frozenset({"_wrapped_call_impl", "Module._wrapped_call_impl",
                       "Module._call_impl.<locals>.inner"})
_TORCH_MODULE_FILE = "torch/nn/modules/module.py"
_CALL = frozenset({"_call_impl", "Module._call_impl"})
#: Longest time spent looking through ``gc.get_objects()`` for modules the namespaces did not
#: hold (about 60 ms for 340,000 objects with torch and torchvision imported, on 2 cores).
GC_SCAN_BUDGET_S = 0.25


def module_probe() -> tuple[Any, int] | None:
    """``(code, slot)``: the code object of ``torch.nn.Module._call_impl`` and the index of its
    ``self`` among the frame's fast locals, for the native walker; None if torch is not imported
    (a capture never imports it) or ``_call_impl`` does not take ``self`` first."""
    torch = sys.modules.get("torch")
    module_cls = getattr(getattr(torch, "nn", None), "Module", None)
    code = getattr(getattr(module_cls, "_call_impl", None), "__code__", None)
    if not isinstance(code, types.CodeType) or code.co_argcount < 1 or code.co_varnames[0] != "self":
        return None
    if sys.version_info >= (3, 11) or "self" not in code.co_cellvars:
        return code, 0  # 3.11+: an argument's cell replaces it in its own slot (MAKE_CELL)
    return code, code.co_nlocals + code.co_cellvars.index("self")  # 3.10: cells follow locals


def module_stacks(tables: dict[str, pd.DataFrame], stack_modules: Mapping[str, Any] | None = None,
                  namespaces: Iterable[Mapping[str, Any]] = ()) -> int:
    """Rewrite ``tables["stacks"]`` in place to name their modules; returns how many kernels got
    module frames.

    ``stack_modules``: the native session's module frames (columns stack_id, depth, module,
    module_type); their ``Module._call_impl`` frames become ``<module>`` frames named as the
    module docstring says (:func:`module_labels`), and the plumbing frames of those stacks go.
    ``namespaces``: where to look for the modules. Kernels in a "backward of" range (source
    ``module_backward``) then get a copy of their stack with that range's name as one more frame
    (one copy per distinct stack and name, not per kernel)."""
    stacks, kernels = tables.get("stacks"), tables.get("kernels")
    if stacks is None or not len(stacks):
        return 0
    named: set[int] = set()
    if stack_modules is not None and len(stack_modules["stack_id"]):
        labels = module_labels(stack_modules, namespaces)
        stacks, named = _name_module_frames(stacks, labels)
        tables["stacks"] = stacks
    changed = 0
    if kernels is not None and len(kernels):
        if named:
            changed = int(kernels["stack_id"].isin(list(named)).sum())
        changed += _backward_frames(tables)
    return changed


def module_labels(stack_modules: Mapping[str, Any], namespaces: Iterable[Mapping[str, Any]] = (),
                  *, gc_budget_s: float = GC_SCAN_BUDGET_S) -> pd.DataFrame:
    """The label of each module frame the native walker recorded: columns stack_id, depth,
    label.

    Each stack's outermost module is found among live modules by ``id()`` (never by reading
    the address) and its class name must match the one recorded; the others are named by their
    qualified name in it (``layer1.0.conv1 (Conv2d)``), the outermost by its class (``ResNet``).
    A module not found (freed, or in no namespace and beyond the gc budget) is named by its
    class only."""
    rows = pd.DataFrame({"stack_id": np.asarray(stack_modules["stack_id"], dtype=np.int64),
                         "depth": np.asarray(stack_modules["depth"], dtype=np.int64),
                         "module": np.asarray(stack_modules["module"], dtype=np.uint64),
                         "module_type": [_short(t) for t in stack_modules["module_type"]]})
    if not len(rows):
        return pd.DataFrame({"stack_id": [], "depth": [], "label": []})
    rows = rows.sort_values(["stack_id", "depth"], kind="stable")
    first = rows.groupby("stack_id", sort=False)["module"].transform("first")
    rows["root"] = first.to_numpy()
    rows["outermost"] = ~rows["stack_id"].duplicated()
    # One label per distinct (outermost module, module, class): twenty iterations of a model
    # share them, and a stack per call site only repeats them.
    combos = rows[["root", "module", "module_type", "outermost"]].drop_duplicates()
    roots = dict(zip(combos.loc[combos["outermost"], "root"].tolist(),
                     combos.loc[combos["outermost"], "module_type"].tolist()))
    found = find_modules(roots, namespaces, gc_budget_s=gc_budget_s)
    qualnames = {addr: _qualnames(module) for addr, module in found.items()}
    text = []
    for root, addr, type_name, outermost in combos.itertuples(index=False, name=None):
        known = None if outermost else qualnames.get(root, {}).get(addr)
        text.append(f"{known[0]} ({type_name})" if known and known[0] and known[1] == type_name
                    else type_name)
    combos = combos.assign(label=text)
    labelled = rows.merge(combos, on=["root", "module", "module_type", "outermost"], how="left")
    return labelled[["stack_id", "depth", "label"]]


def find_modules(wanted: Mapping[int, str], namespaces: Iterable[Mapping[str, Any]] = (), *,
                 gc_budget_s: float = GC_SCAN_BUDGET_S) -> dict[int, Any]:
    """``{address: module}`` for the live ``nn.Module`` s whose ``id()`` is in ``wanted`` and
    whose class name is the one ``wanted`` gives: first among the modules the namespaces hold
    (and their submodules), then, for any left, through ``gc.get_objects()`` for at most
    ``gc_budget_s`` seconds (0: never)."""
    module_cls = getattr(getattr(sys.modules.get("torch"), "nn", None), "Module", None)
    if module_cls is None or not wanted:
        return {}
    found: dict[int, Any] = {}

    def take(obj: Any) -> None:
        key = id(obj)
        if key in wanted and key not in found and type(obj).__name__ == wanted[key]:
            found[key] = obj

    for candidate in _namespace_modules(namespaces, module_cls):
        for sub in candidate.modules():
            take(sub)
        if len(found) == len(wanted):
            return found
    if gc_budget_s > 0:
        deadline = time.perf_counter() + gc_budget_s
        everything = gc.get_objects()
        try:
            for start in range(0, len(everything), 65536):
                for obj in everything[start:start + 65536]:
                    if id(obj) in wanted and issubclass(type(obj), module_cls):
                        take(obj)
                if len(found) == len(wanted) or time.perf_counter() > deadline:
                    break
        finally:
            del everything
    return found


def _namespace_modules(namespaces: Iterable[Mapping[str, Any]], module_cls: type) -> Iterator[Any]:
    """The modules held by the namespaces' values, by one level of attributes of other objects
    and by the closures and defaults of functions (a model captured by a local ``run()``).
    ``type()`` and ``__dict__`` only: no property, ``__getattr__`` or ``__class__`` runs."""
    seen: set[int] = set()

    def module(v: Any) -> bool:
        """A module not yielded before."""
        if not issubclass(type(v), module_cls) or id(v) in seen:
            return False
        seen.add(id(v))
        return True

    for ns in namespaces:
        try:
            values = list(ns.values())
        except Exception:
            continue
        for value in values:
            if module(value):
                yield value
                continue
            if isinstance(value, (type, types.ModuleType)):
                continue
            try:
                inner = _one_level(value)
            except Exception:
                continue
            for v in inner:
                if module(v):
                    yield v


def _one_level(value: Any) -> list[Any]:
    """What one object holds: a bound method its object, a function its closure and defaults,
    a list, tuple or dict its first 256 items, any other object its ``__dict__`` values."""
    if isinstance(value, types.MethodType):
        return [value.__self__]
    if isinstance(value, types.FunctionType):
        cells = [c.cell_contents for c in (value.__closure__ or ()) if _filled(c)]
        return cells + list(value.__defaults__ or ())
    if isinstance(value, (list, tuple)):
        return list(value[:256])
    if isinstance(value, dict):
        return list(value.values())[:256]
    attrs = getattr(type(value), "__dictoffset__", 0) and object.__getattribute__(value, "__dict__")
    return list(attrs.values()) if isinstance(attrs, dict) else []


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def _qualnames(root: Any) -> dict[int, tuple[str, str]]:
    """``{id(sub): (qualified name, class name)}`` in ``root`` (first name of a shared one)."""
    names: dict[int, tuple[str, str]] = {}
    for qualname, sub in root.named_modules(remove_duplicate=False):
        names.setdefault(id(sub), (qualname, type(sub).__name__))
    return names


def _short(type_name: str) -> str:
    """A class name from ``tp_name`` (``module.Name`` for static types, ``Name`` otherwise)."""
    return type_name.rsplit(".", 1)[-1]


def _name_module_frames(stacks: pd.DataFrame, labels: pd.DataFrame) -> tuple[pd.DataFrame, set[int]]:
    """The stacks table with each labelled ``_call_impl`` frame renamed and the plumbing frames
    of those stacks dropped, depths renumbered; and the ids of the stacks that changed."""
    if not len(labels):
        return stacks, set()
    named = set(labels["stack_id"].tolist())
    keys = {"stack_id": np.int64, "depth": np.int64}
    merged = stacks.astype(keys).merge(labels.astype(keys), how="left", on=["stack_id", "depth"])
    functions = merged["function"]
    in_named = merged["stack_id"].isin(named).to_numpy()
    labelled = merged["label"].notna().to_numpy() & functions.isin(_CALL).to_numpy()
    inner = (functions == "inner").to_numpy()  # 3.10's name for _call_impl's nested function
    if inner.any():
        inner = inner & merged["filename"].astype(str).str.replace("\\", "/").str.endswith(
            _TORCH_MODULE_FILE).to_numpy()
    plumbing = in_named & (functions.isin(_PLUMBING).to_numpy() | inner)
    mask = pd.Series(labelled, index=merged.index)
    out = merged.assign(filename=merged["filename"].mask(mask, MODULE_FILE),
                        function=functions.mask(mask, merged["label"]),
                        line=merged["line"].mask(mask, 0))[list(stacks.columns)][~plumbing]
    sid, depth = out["stack_id"].to_numpy(), out["depth"].to_numpy()
    if len(out) > 1 and not ((np.diff(sid) > 0) | ((np.diff(sid) == 0) & (np.diff(depth) > 0))).all():
        out = out.sort_values(["stack_id", "depth"], kind="stable")
    out = out.assign(depth=out.groupby("stack_id", sort=False).cumcount())
    return out.reset_index(drop=True).astype(stacks.dtypes.to_dict()), named


def _backward_frames(tables: dict[str, pd.DataFrame]) -> int:
    """Kernels in a ``module_backward`` range get their stack plus a frame naming that range;
    returns how many."""
    kernels, ranges, stacks = (tables.get(n) for n in ("kernels", "ranges", "stacks"))
    if ranges is None or not len(ranges) or "source" not in ranges:
        return 0
    backward = ranges[ranges["source"] == "module_backward"]
    if not len(backward):
        return 0
    label_of = dict(zip(backward["range_id"].tolist(), backward["name"].tolist()))
    sids = kernels["stack_id"].to_numpy().astype(np.int64)
    rids = kernels["range_id"].to_numpy().astype(np.int64)
    labels = list(dict.fromkeys(label_of.values()))
    label_index = {name: j for j, name in enumerate(labels)}
    rid_label = np.array([label_index.get(label_of.get(r), -1) for r in rids.tolist()], dtype=np.int64)
    width = max(len(labels), 1)
    combo = np.where((sids >= 0) & (rid_label >= 0), sids * width + rid_label, -1)
    frames = _frames_of(stacks, np.unique(sids[combo >= 0]))
    next_id = int(stacks["stack_id"].max()) + 1
    new_frames: list[tuple[int, int, str, str, int]] = []

    def extend(sid: int, label: str) -> int:
        nonlocal next_id
        if sid not in frames:
            return sid
        rows = frames[sid] + [(MODULE_FILE, label, 0)]
        new_frames.extend((next_id, depth, f[0], f[1], int(f[2])) for depth, f in enumerate(rows))
        next_id += 1
        return next_id - 1

    unique_combos, combo_index = np.unique(combo, return_inverse=True)
    mapped = np.array([extend(c // width, labels[c % width]) if c >= 0 else -1
                       for c in unique_combos.tolist()], dtype=np.int64)
    ids = np.where(combo >= 0, mapped[combo_index.reshape(-1)], sids)
    changed = int((ids != sids).sum())
    if new_frames:
        added = pd.DataFrame(new_frames, columns=["stack_id", "depth", "filename", "function", "line"])
        tables["stacks"] = pd.concat([stacks, added], ignore_index=True).astype(stacks.dtypes.to_dict())
        tables["kernels"] = kernels.assign(stack_id=ids.astype(kernels["stack_id"].dtype))
    return changed


def _frames_of(stacks: pd.DataFrame, wanted: np.ndarray) -> dict[int, list[tuple[str, str, int]]]:
    """``(filename, function, line)`` frames, outermost first, of each stack id in ``wanted``
    (one sort and three column conversions, not one pandas group per stack)."""
    s = stacks[stacks["stack_id"].isin(wanted)].sort_values(["stack_id", "depth"], kind="stable")
    ids = s["stack_id"].to_numpy()
    files, funcs, lines = s["filename"].tolist(), s["function"].tolist(), s["line"].tolist()
    cuts = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), len(ids)]
    return {int(ids[a]): list(zip(files[a:b], funcs[a:b], lines[a:b]))
            for a, b in zip(cuts[:-1], cuts[1:]) if b > a}
