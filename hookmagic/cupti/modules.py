"""Module paths in stacks: ``layer1.0.conv1 (Conv2d)`` instead of ``Module._call_impl`` frames.

While a capture with stacks runs and torch is already imported, global forward hooks open a
range (source "module") around every ``nn.Module`` call, named by the module's qualified name
in the outermost module being called (as ``named_modules()`` names it) and its class. When the
capture ends, :func:`module_stacks` rewrites each kernel's stack: the k-th
``Module._call_impl`` frame becomes a frame naming the k-th enclosing module, and the
``_wrapped_call_impl`` plumbing frames go. A stack whose frames and modules do not line up
(hooks missed a call) is left as it was. ``CaptureOptions.module_names=False`` keeps the raw
frames. Backward kernels (launched on autograd's engine threads, attributed to the caller of
``backward()``) get one more frame, ``backward of <module>``, from a hook on each leaf module's
output node (:func:`hookmagic.cupti.autograd.enter_module_backward`).
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable

import numpy as np
import pandas as pd

MODULE_FILE = "<module>"  # filename of the frames that name modules
# The native stack walker names frames by co_qualname (Python >= 3.11: "Module._call_impl")
# and by co_name on 3.10 ("_call_impl"); both spellings are matched.
_PLUMBING = frozenset({"_wrapped_call_impl", "Module._wrapped_call_impl"})
_CALL = frozenset({"_call_impl", "Module._call_impl"})


def install(native: Any = None) -> Callable[[], None] | None:
    """Register the global module hooks for one capture; returns the undo, or None.

    With ``native``, a leaf module's output node also gets a hook that, when its backward
    begins on an engine thread, opens a "backward of <module>" range there."""
    torch = sys.modules.get("torch")
    module_mod = getattr(getattr(getattr(torch, "nn", None), "modules", None), "module", None)
    if module_mod is None or not hasattr(module_mod, "register_module_forward_pre_hook"):
        return None
    from hookmagic.cupti.ranges import RECORDER, RangeRecord, _native

    ranges_native = _native()
    local = threading.local()
    names: dict[int, str] = {}
    labels: dict[int, str] = {}  # module id -> "qualname (Class)", made once per capture
    ids, recorder_local = RECORDER.ids, RECORDER.local

    # The hooks run on every nn.Module call of the user's model: they do what a
    # hookmagic.range does (push the id the launch callbacks read, time it, record it) without
    # its object, import and label formatting per call (ResNet-50 makes ~180 calls a forward).
    def pre(module: Any, args: Any) -> None:
        try:
            stack = getattr(local, "stack", None)
            if stack is None:
                stack = local.stack = []
            key = id(module)
            label = labels.get(key)
            if label is None:
                if not stack and key not in names:  # an outermost module: name its tree
                    for qualname, sub in module.named_modules(remove_duplicate=False):
                        names.setdefault(id(sub), qualname)
                qualname = names.get(key, "")
                label = f"{qualname} ({type(module).__name__})" if qualname else type(module).__name__
                labels[key] = label
            open_ids = getattr(recorder_local, "stack", None)
            if open_ids is None:
                open_ids = recorder_local.stack = []
            range_id = next(ids)
            parent = open_ids[-1] if open_ids else -1
            depth = len(open_ids)
            open_ids.append(range_id)
            start = 0
            if ranges_native is not None:
                ranges_native.push_range(range_id)
                start = ranges_native.timestamp()
            stack.append((key, range_id, label, start, parent, depth))
        except Exception:  # never disturb the user's model
            pass

    def post(module: Any, args: Any, output: Any) -> None:
        try:
            stack = getattr(local, "stack", None)
            if stack and stack[-1][0] == id(module):
                _close(stack.pop())
                if native is not None:
                    _hook_backward(module, output, labels.get(id(module), type(module).__name__))
        except Exception:
            pass

    def _close(entry: tuple) -> None:
        _, range_id, label, start, parent, depth = entry
        end = 0
        if ranges_native is not None:
            end = ranges_native.timestamp()
            ranges_native.pop_range()
        open_ids = getattr(recorder_local, "stack", None)
        if open_ids:
            open_ids.pop()
        if RECORDER.active and ranges_native is not None:
            record = RangeRecord(range_id, label, start, end, threading.get_native_id(), depth,
                                 parent, "module")
            with RECORDER.lock:
                RECORDER.records.append(record)

    def _hook_backward(module: Any, output: Any, label: str) -> None:
        if not torch.is_grad_enabled() or next(iter(module.children()), None) is not None:
            return  # leaf modules only: their output node starts their backward (no_grad: none)
        node = getattr(output, "grad_fn", None)
        if node is None and isinstance(output, (tuple, list)):
            node = next((getattr(o, "grad_fn", None) for o in output
                         if getattr(o, "grad_fn", None) is not None), None)
        if node is None:
            return
        from hookmagic.cupti.autograd import enter_module_backward

        def begins(*_: Any) -> None:
            try:
                enter_module_backward(native, label)
            except Exception:
                pass
        node.register_prehook(begins)

    handles = [module_mod.register_module_forward_pre_hook(pre)]
    try:
        handles.append(module_mod.register_module_forward_hook(post, always_call=True))
    except TypeError:  # older torch: no always_call (a raising forward leaves its range open)
        handles.append(module_mod.register_module_forward_hook(post))

    def uninstall() -> None:
        for h in handles:
            h.remove()
        stack = getattr(local, "stack", None)
        while stack:
            _close(stack.pop())

    return uninstall


def module_stacks(tables: dict[str, pd.DataFrame]) -> int:
    """Rewrite the stacks of ``tables["kernels"]`` in place to name their modules; returns how
    many kernels got module frames.

    Work is per distinct (raw stack, module path), not per kernel: twenty iterations of a model
    share one rewritten stack per call site (rebuilding one per kernel cost seconds on ResNet-50)."""
    kernels, ranges, stacks = (tables.get(n) for n in ("kernels", "ranges", "stacks"))
    if kernels is None or ranges is None or stacks is None or not len(ranges) or not len(stacks):
        return 0
    if "source" not in ranges or not ranges["source"].isin(["module", "module_backward"]).any():
        return 0
    range_ids = ranges["range_id"].to_numpy().tolist()
    parent = dict(zip(range_ids, ranges["parent_id"].to_numpy().tolist()))
    source = dict(zip(range_ids, ranges["source"].tolist()))
    label = dict(zip(range_ids, ranges["name"].tolist()))
    chains: dict[int, tuple[str, ...]] = {}

    def chain_of(rid: int) -> tuple[str, ...]:
        """Labels of the module ranges enclosing ``rid`` (itself included), outermost first."""
        pending = []
        r = rid
        while r is not None and r >= 0 and r in parent and r not in chains:
            pending.append(r)
            r = parent[r]
        known = chains.get(r, ())
        for p in reversed(pending):
            known = known + (label[p],) if source[p] == "module" else known
            chains[p] = known
        return chains.get(rid, ())

    sids = kernels["stack_id"].to_numpy().astype(np.int64)
    rids = kernels["range_id"].to_numpy().astype(np.int64)
    # Each kernel's module path (or the module whose backward it ran in), as a small integer.
    paths: dict[tuple, int] = {}
    unique_rids, rid_index = np.unique(rids, return_inverse=True)
    path_of_rid = np.full(len(unique_rids), -1, dtype=np.int64)
    for j, rid in enumerate(unique_rids.tolist()):
        if rid < 0 or rid not in parent:
            continue
        if source[rid] == "module_backward":
            key: tuple = (None, label[rid])  # None is never a module label
        else:
            key = chain_of(rid)
            if not key:
                continue
        path_of_rid[j] = paths.setdefault(key, len(paths))
    path_ids = path_of_rid[rid_index.reshape(-1)] if len(rids) else rids
    keys = list(paths)
    width = max(len(keys), 1)
    combo = np.where((sids >= 0) & (path_ids >= 0), sids * width + path_ids, -1)
    frames = _frames_of(stacks, np.unique(sids[combo >= 0]))
    calls = {sid: sum(f[1] in _CALL for f in rows) for sid, rows in frames.items()}
    next_id = int(stacks["stack_id"].max()) + 1
    new_frames: list[tuple[int, int, str, str, int]] = []

    def rewrite(sid: int, key: tuple) -> int:
        """The stack id for raw stack ``sid`` under module path ``key`` (made once)."""
        nonlocal next_id
        if sid not in frames:
            return sid
        if key[0] is None:  # the caller of backward(), then the module's backward
            rows = frames[sid] + [(MODULE_FILE, key[1], 0)]
        elif calls[sid] != len(key):
            return sid  # frames and modules do not line up: leave the raw stack
        else:
            rows, k = [], 0
            for f in frames[sid]:
                if f[1] in _PLUMBING:
                    continue
                if f[1] in _CALL:
                    rows.append((MODULE_FILE, key[k], 0))
                    k += 1
                else:
                    rows.append(f)
        new_frames.extend((next_id, depth, f[0], f[1], int(f[2])) for depth, f in enumerate(rows))
        next_id += 1
        return next_id - 1

    unique_combos, combo_index = np.unique(combo, return_inverse=True)
    mapped = np.array([rewrite(c // width, keys[c % width]) if c >= 0 else -1
                       for c in unique_combos.tolist()], dtype=np.int64)
    ids = np.where(combo >= 0, mapped[combo_index.reshape(-1)], sids) if len(sids) else sids
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
