"""Backward kernels attributed to the code that called ``backward()``.

PyTorch runs backward on its autograd engine threads, which have no Python frames, so a launch
callback there finds no stack. While a capture runs, ``torch.autograd.backward`` and
``torch.autograd.grad`` (which ``Tensor.backward`` calls) are wrapped: each call opens a
``hookmagic.range("backward")`` and tells the native session to attribute launches from
threads without Python frames to the caller's stack and that range, until it returns. Nothing
is wrapped if torch is not already imported (a capture never imports it), and the originals are
put back when the capture ends. Process-wide: with two threads in backward at once, the later
caller's attribution applies to both.

With ``label_nodes`` (module names on), each call also walks the autograd graph from its roots
(``grad_fn``, ``next_functions``; at most :data:`MAX_NODES` nodes) and puts a pre-hook on every
node; as a node's backward begins on an engine thread, the hook opens a "backward of ..."
range there (:func:`enter_module_backward`), which the node's kernels fall in. A node that
differentiates a module's parameter (its AccumulateGrad, or an op taking the parameter, e.g.
the ``addmm`` of a Linear) is named by that module as forward stacks name it,
``backward of linear1 (Linear)`` (:func:`parameter_owner`; modules found as for forward names,
among the locals of the code calling backward() and its callers, then the capture's
namespaces); any other node by the forward op it differentiates, from its
name: ``ReluBackward0`` -> ``backward of relu`` (:func:`op_label`). The hooks are removed when
the call returns. Nothing runs in the forward.
"""
from __future__ import annotations

import functools
import re
import sys
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping

_NAMES = ("backward", "grad")
#: Most autograd nodes labelled per backward() call (a ResNet-50 training step has ~500;
#: beyond, kernels stay in the enclosing "backward" range).
MAX_NODES = 50_000
_CALLER_FRAMES = 12  # frames above backward() whose locals are searched for the model
_BACKWARD_SUFFIX = re.compile(r"(.+?)Backward\d*")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

# "backward of <module/op>" ranges open on engine threads: thread id -> (range id, label, start).
_open: dict[int, tuple[int, str, int]] = {}
_open_lock = threading.Lock()
_backward_range = [-1]  # the innermost "backward" range of the current backward() call


def enter_module_backward(native: Any, label: str) -> None:
    """On an engine thread, as the backward of ``label`` begins (a pre-hook on its autograd
    node): close this thread's previous "backward of" range, open one for ``label``."""
    from hookmagic.cupti.ranges import RECORDER, RangeRecord

    thread = threading.get_native_id()
    now = native.timestamp()
    range_id = next(RECORDER.ids)
    with _open_lock:
        previous = _open.pop(thread, None)
        _open[thread] = (range_id, label, now)
    native.set_backward_range(range_id)
    if previous is not None:
        _record(RECORDER, RangeRecord, previous, now, thread)


def _record(recorder: Any, record_type: Any, entry: tuple[int, str, int], end: int,
            thread: int) -> None:
    range_id, label, start = entry
    if recorder.active:
        with recorder.lock:
            recorder.records.append(record_type(range_id, f"backward of {label}", start, end,
                                                thread, 1, _backward_range[0], "module_backward"))


def _close_module_ranges(native: Any) -> None:
    from hookmagic.cupti.ranges import RECORDER, RangeRecord

    now = native.timestamp()
    with _open_lock:
        entries = list(_open.items())
        _open.clear()
    for thread, entry in entries:
        _record(RECORDER, RangeRecord, entry, now, thread)


def op_label(node: Any) -> str:
    """The forward op an autograd node differentiates: ``AddmmBackward0`` -> ``addmm`` (the
    name without its ``Backward<N>`` suffix, CamelCase to snake_case, namespaces dropped), a
    custom ``torch.autograd.Function``'s class name as written, other nodes by their name
    (``AccumulateGrad``)."""
    forward_cls = getattr(type(node), "_forward_cls", None)
    if isinstance(forward_cls, type):
        return forward_cls.__name__
    return _op_of(str(node.name()))


@functools.lru_cache(maxsize=4096)
def _op_of(name: str) -> str:
    name = name.rsplit("::", 1)[-1]
    match = _BACKWARD_SUFFIX.fullmatch(name)
    return _CAMEL.sub("_", match.group(1)).lower() if match else name


def graph_nodes(roots: Any, max_nodes: int = MAX_NODES) -> Iterator[Any]:
    """The autograd nodes reachable from ``roots`` (a tensor, a GradientEdge, or a sequence of
    them), each once, at most ``max_nodes``."""
    if not isinstance(roots, (list, tuple)):
        roots = (roots,)
    pending = []
    for root in roots:
        node = getattr(root, "grad_fn", None)
        if node is None:
            node = getattr(root, "node", None)  # torch.autograd.graph.GradientEdge
        if node is not None:
            pending.append(node)
    # Each node's Python object is held until the walk ends: torch makes them on demand and
    # frees them with their last reference, so a freed one's id() could name another node.
    seen: dict[int, Any] = {}
    while pending and len(seen) < max_nodes:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        yield node
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None and id(nxt) not in seen:
                pending.append(nxt)


def parameter_owner(node: Any, owners: Mapping[int, str]) -> str | None:
    """The module whose parameter ``node`` differentiates: ``node`` is that parameter's
    AccumulateGrad, or takes it as an input directly or through one single-input node (a
    transpose, view or cast: ``addmm(bias, x, weight.t())``). ``owners``: ``id(parameter) ->
    module label`` (:func:`hookmagic.cupti.modules.parameter_owners`). None if none."""
    if not owners:
        return None
    variable = getattr(node, "variable", None)  # an AccumulateGrad node's leaf tensor
    if variable is not None:
        return owners.get(id(variable))
    for nxt, _ in getattr(node, "next_functions", ()):
        if nxt is None:
            continue
        variable = getattr(nxt, "variable", None)
        if variable is None:
            inputs = [n for n, _ in getattr(nxt, "next_functions", ()) if n is not None]
            variable = getattr(inputs[0], "variable", None) if len(inputs) == 1 else None
        owner = owners.get(id(variable)) if variable is not None else None
        if owner is not None:
            return owner
    return None


def _label_graph(native: Any, roots: Any, owners: Mapping[int, str]) -> list[Any]:
    """A "backward of <module/op>" pre-hook on every node reachable from ``roots``; their
    handles."""
    handles = []
    hooks: dict[str, Callable[..., None]] = {}

    def hook_for(label: str) -> Callable[..., None]:
        def begins(*_: Any) -> None:
            try:
                enter_module_backward(native, label)
            except Exception:  # never disturb the user's backward
                pass
        return begins

    try:
        for node in graph_nodes(roots):
            label = parameter_owner(node, owners) or op_label(node)
            hook = hooks.get(label)
            if hook is None:
                hook = hooks[label] = hook_for(label)
            try:
                handles.append(node.register_prehook(hook))
            except Exception:
                continue
    except Exception:
        pass
    return handles


def install(native: Any, label_nodes: bool = True,
            namespaces: Callable[[], Iterable[Mapping[str, Any]]] | None = None
            ) -> Callable[[], None] | None:
    """Wrap torch.autograd's entry points for one capture; returns the undo, or None.

    ``label_nodes``: also open a "backward of <module/op>" range as each autograd node's
    backward begins (see the module docstring). The modules whose parameters name nodes are
    found, at the first backward, among the locals of the code calling it and its callers, then
    in ``namespaces()`` (the capture's)."""
    torch = sys.modules.get("torch")
    autograd = getattr(torch, "autograd", None) if torch is not None else None
    if autograd is None or not all(callable(getattr(autograd, n, None)) for n in _NAMES):
        return None
    from hookmagic.cupti.ranges import range as hm_range

    originals = {name: getattr(autograd, name) for name in _NAMES}
    owners: list[dict[int, str]] = []  # id(parameter) -> module label, made at the first call

    def parameter_labels(caller: Any) -> dict[int, str]:
        """Made at the first call: from the variables of the code calling backward() and its
        callers (the model is often a local there), then the capture's namespaces."""
        if not owners:
            from hookmagic.cupti.modules import parameter_owners

            try:
                maps = []
                for _ in range(_CALLER_FRAMES):
                    if caller is None:
                        break
                    maps.append(caller.f_locals)
                    caller = caller.f_back
                owners.append(parameter_owners(maps + list(namespaces() if namespaces else ())))
            except Exception:
                owners.append({})
        return owners[0]

    def wrap(name: str, original: Callable) -> Callable:
        root_arg = "tensors" if name == "backward" else "outputs"

        @functools.wraps(original)
        def attributed(*args: Any, **kwargs: Any) -> Any:
            with hm_range("backward") as outer:
                handles = []
                if label_nodes:
                    handles = _label_graph(native, args[0] if args else kwargs.get(root_arg),
                                           parameter_labels(sys._getframe(1)))
                native.set_fallback(1)  # the caller's stack, without this frame
                _backward_range[0] = outer._id
                try:
                    return original(*args, **kwargs)
                finally:
                    native.clear_fallback()
                    _close_module_ranges(native)
                    for handle in handles:
                        handle.remove()
        attributed.__hookmagic_original__ = original  # type: ignore[attr-defined]
        return attributed

    for name, original in originals.items():
        setattr(autograd, name, wrap(name, original))

    def uninstall() -> None:
        for name, original in originals.items():
            current = getattr(autograd, name, None)
            if getattr(current, "__hookmagic_original__", None) is original:
                setattr(autograd, name, original)
        native.clear_fallback()

    return uninstall
