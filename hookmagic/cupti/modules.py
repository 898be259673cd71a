"""Module paths in stacks: ``layer1.0.conv1 (Conv2d)`` instead of ``Module._call_impl`` frames.

Nothing runs per module call. When a capture with stacks starts and torch is already imported,
the native session is told which code object is ``torch.nn.Module._call_impl``, where its
``self`` lives, and which code objects are torch's call plumbing (:func:`module_probe`). The
stack walk that runs at each launch anyway then reads, from each ``_call_impl`` frame, the
module being called (its address and a copy of its class name; the address is part of the
frame's identity, so one call site under two modules is two stacks) and leaves the
``_wrapped_call_impl`` / ``_call_impl.<locals>.inner`` frames out. Torch keeps its fast call
path: no global module hook is installed.

When the capture ends, the session lists the distinct (outermost module on the stack, module,
class) it saw, a few hundred for a ResNet-50, and :func:`combo_labels` names them without ever
dereferencing an address (the module may be gone and its address reused): it compares them
with ``id()`` of live modules found from the namespace that ran the capture (the notebook's,
or the locals of the frame holding the ``with`` and of a few callers, then their globals:
modules there, one level into
objects' attributes, lists, dicts and functions' closures, and every submodule of those); only
if some outermost module is still unknown, it looks through ``gc.get_objects()`` within
:data:`GC_SCAN_BUDGET_S`. A module is named by its qualified name in the outermost module
called on that stack (as ``named_modules()`` names it) and its class, the outermost module by
its class, a module that cannot be found by its class only. The native session then writes
each ``_call_impl`` frame as a ``<module>`` frame with that name, once per stack.

``CaptureOptions.module_names=False`` keeps the raw frames. Backward kernels (launched on
autograd's engine threads, attributed to the caller of ``backward()``) get one more frame,
``backward of <module/op>``, from the autograd node whose backward launched them
(:mod:`hookmagic.cupti.autograd`, :func:`module_stacks`).
"""
from __future__ import annotations

import gc
import sys
import time
import types
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from hookmagic.common.sources import MODULE_FILE  # the native session writes "<module>" too

#: Longest time spent looking through ``gc.get_objects()`` for modules the namespaces did not
#: hold (about 60 ms for 340,000 objects with torch and torchvision imported, on 2 cores).
GC_SCAN_BUDGET_S = 0.25


def module_probe() -> tuple[Any, int, list[Any]] | None:
    """``(code, slot, plumbing)`` for the native walker: the code object of
    ``torch.nn.Module._call_impl``, the index of its ``self`` among the frame's fast locals,
    and the code objects of the plumbing frames around it (``_wrapped_call_impl``,
    ``_call_impl``'s nested ``inner``). None if torch is not imported (a capture never imports
    it) or ``_call_impl`` does not take ``self`` first."""
    torch = sys.modules.get("torch")
    module_cls = getattr(getattr(torch, "nn", None), "Module", None)
    code = getattr(getattr(module_cls, "_call_impl", None), "__code__", None)
    if not isinstance(code, types.CodeType) or code.co_argcount < 1 or code.co_varnames[0] != "self":
        return None
    plumbing = [c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == "inner"]
    wrapped = getattr(getattr(module_cls, "_wrapped_call_impl", None), "__code__", None)
    if isinstance(wrapped, types.CodeType):
        plumbing.append(wrapped)
    if sys.version_info >= (3, 11) or "self" not in code.co_cellvars:
        return code, 0, plumbing[:4]  # 3.11+: an argument's cell takes its own slot (MAKE_CELL)
    return code, code.co_nlocals + code.co_cellvars.index("self"), plumbing[:4]  # 3.10: after locals


def combo_labels(combos: Mapping[str, Any], namespaces: Iterable[Mapping[str, Any]] = (), *,
                 gc_budget_s: float = GC_SCAN_BUDGET_S) -> list[str]:
    """A name for each (root, module, module_type) row of ``combos`` (the native session's
    ``module_combos()``): ``layer1.0.conv1 (Conv2d)``, the module's qualified name in ``root``
    (the outermost module called on its stack) and its class; ``root`` itself by its class
    (``ResNet``). The roots are found among live modules by ``id()`` and must have the class
    recorded (:func:`find_modules`); a module not found, or whose class differs, is named by
    its class only."""
    roots = [int(r) for r in np.asarray(combos["root"], dtype=np.uint64).tolist()]
    addrs = [int(m) for m in np.asarray(combos["module"], dtype=np.uint64).tolist()]
    type_names = [_short(t) for t in combos["module_type"]]
    wanted = {a: t for r, a, t in zip(roots, addrs, type_names) if r == a}
    found = find_modules(wanted, namespaces, gc_budget_s=gc_budget_s)
    qualnames = {addr: _qualnames(module) for addr, module in found.items()}
    labels = []
    for root, addr, type_name in zip(roots, addrs, type_names):
        known = qualnames.get(root, {}).get(addr) if addr != root else None
        labels.append(f"{known[0]} ({type_name})" if known and known[0] and known[1] == type_name
                      else type_name)
    return labels


def module_stacks(tables: dict[str, pd.DataFrame], modules_named: bool = True) -> int:
    """Kernels in a "backward of" range (source ``module_backward``) get a copy of their stack
    with that range's name as one more frame (one copy per distinct stack and name, not per
    kernel); returns how many kernels have a ``<module>`` frame (a module, or a backward).
    ``modules_named``: whether the stacks have module frames at all (else only the backward
    frames are looked for: nothing to do without torch)."""
    stacks, kernels = tables.get("stacks"), tables.get("kernels")
    if stacks is None or not len(stacks) or kernels is None or not len(kernels):
        return 0
    backward = _backward_frames(tables)
    if not modules_named:
        return backward
    return named_module_kernels(tables["kernels"], tables["stacks"])


def named_module_kernels(kernels: Any, stacks: Any) -> int:
    """How many kernels' stacks hold a ``<module>`` frame. ``stacks``: the stacks table, or
    its columns as the native session hands them over (``filename`` as codes into ``text``:
    see :func:`hookmagic.cupti.columns.stack_columns`), so that counting needs no table."""
    if kernels is None or not len(kernels) or stacks is None:
        return 0
    if "text" in stacks:
        texts = list(stacks["text"])
        if MODULE_FILE not in texts:
            return 0
        module_rows = np.asarray(stacks["filename"]) == texts.index(MODULE_FILE)
    else:
        module_rows = np.asarray(stacks["filename"], dtype=object) == MODULE_FILE
    named = np.unique(np.asarray(stacks["stack_id"])[module_rows])
    return int(np.isin(np.asarray(kernels["stack_id"]), named).sum())


def has_backward_ranges(ranges: pd.DataFrame | None) -> bool:
    """Whether ``ranges`` holds ``module_backward`` ranges (whose kernels
    :func:`module_stacks` gives a ``backward of`` frame)."""
    return (ranges is not None and len(ranges) > 0 and "source" in ranges
            and bool((ranges["source"] == "module_backward").any()))


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


def parameter_owners(namespaces: Iterable[Mapping[str, Any]]) -> dict[int, str]:
    """``{id(parameter): "qualname (Class)"}`` for the parameters of the modules the namespaces
    hold (found as :func:`find_modules` finds them), each named in the outermost of those
    modules, the outermost itself by its class: the labels forward stacks give the same
    modules. Empty if torch is not imported."""
    module_cls = getattr(getattr(sys.modules.get("torch"), "nn", None), "Module", None)
    if module_cls is None:
        return {}
    candidates = list(_namespace_modules(namespaces, module_cls))
    inside = {id(sub) for c in candidates for sub in c.modules() if sub is not c}
    owners: dict[int, str] = {}
    for root in candidates:
        if id(root) in inside:
            continue
        for qualname, sub in root.named_modules():
            label = f"{qualname} ({type(sub).__name__})" if qualname else type(sub).__name__
            for parameter in sub.parameters(recurse=False):
                owners.setdefault(id(parameter), label)
    return owners


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
    """``{id(sub): (qualified name, class name)}`` in ``root`` (first name of a shared one),
    named as ``root.named_modules()`` names them, in its order (outer first, children in
    registration order), walking the ``_modules`` dicts that method walks: a third of its
    time, which a capture ending pays on every module of the model."""
    names: dict[int, tuple[str, str]] = {}
    todo = [("", root)]
    while todo:
        qualname, module = todo.pop()
        if id(module) in names:  # a shared module keeps its first name; its subtree was walked
            continue
        names[id(module)] = (qualname, type(module).__name__)
        children = getattr(module, "_modules", None) or {}
        prefix = f"{qualname}." if qualname else ""
        todo.extend((f"{prefix}{key}", sub) for key, sub in reversed(children.items())
                    if sub is not None)
    return names


def _short(type_name: str) -> str:
    """A class name from ``tp_name`` (``module.Name`` for static types, ``Name`` otherwise)."""
    return type_name.rsplit(".", 1)[-1]


def _backward_frames(tables: dict[str, pd.DataFrame]) -> int:
    """Kernels in a ``module_backward`` range get their stack plus a frame naming that range;
    returns how many."""
    kernels, ranges, stacks = (tables.get(n) for n in ("kernels", "ranges", "stacks"))
    if not has_backward_ranges(ranges):
        return 0
    backward = ranges[ranges["source"] == "module_backward"]
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
