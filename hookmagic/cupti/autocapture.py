"""Capture set up by environment variables, so a launched job needs only ``import hookmagic``.

``import hookmagic`` calls :func:`install_from_env` when ``HOOKMAGIC_CAPTURE_DIR`` is set::

    HOOKMAGIC_CAPTURE_DIR=/tmp/run HOOKMAGIC_CAPTURE_STEPS=5:8 \\
        torchrun --nproc-per-node 2 train.py        # train.py imports hookmagic

Variables:

- ``HOOKMAGIC_CAPTURE_DIR``: where each rank writes its trace folder ``rank=<N>``.
- ``HOOKMAGIC_CAPTURE_STEPS``: ``A:B`` captures training steps A to B-1 (0-based, counted by
  ``torch.optim`` optimizer steps, through PyTorch's global optimizer-step hooks); ``A:`` from
  step A to the end of the process. Unset: from the import to the end of the process. The
  boundaries of each captured step (host clock, the moment its ``optimizer.step()`` returned)
  are kept in ``meta["steps"]`` as ``[step, start_ns, end_ns]``.
- ``HOOKMAGIC_CAPTURE_RANKS``: comma-separated ranks to capture (default: all).
- ``HOOKMAGIC_CAPTURE_OPTIONS``: comma-separated ``name=value`` options of
  :func:`hookmagic.capture`, e.g. ``stacks=0,nvml=0``.

A process that exits while its capture runs (or before step B) is stopped and written at exit.
"""
from __future__ import annotations

import atexit
import os
import threading
import warnings
from typing import Any, Mapping

from hookmagic.common.errors import HookmagicError, InvalidArgument

_state: dict[str, Any] = {}
_lock = threading.Lock()


class AutoCaptureConfigError(InvalidArgument):
    """A ``HOOKMAGIC_CAPTURE_*`` variable could not be understood; the message says which."""


def parse_steps(text: str | None) -> tuple[int, int | None] | None:
    """``"A:B"`` -> ``(A, B)``, ``"A:"`` -> ``(A, None)``, ``"N"`` -> ``(N, N+1)``; None if
    unset."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    try:
        if ":" in text:
            a, b = text.split(":", 1)
            start = int(a) if a.strip() else 0
            stop = int(b) if b.strip() else None
        else:
            start = int(text)
            stop = start + 1
    except ValueError:
        raise AutoCaptureConfigError(
            f"HOOKMAGIC_CAPTURE_STEPS={text!r}: expected A:B (steps A to B-1), A: or N") from None
    if start < 0 or (stop is not None and stop <= start):
        raise AutoCaptureConfigError(f"HOOKMAGIC_CAPTURE_STEPS={text!r}: needs 0 <= A < B")
    return start, stop


def parse_options(text: str | None) -> dict[str, Any]:
    """``"stacks=0,nvml=false,buffer_mb=16"`` -> capture keyword arguments."""
    out: dict[str, Any] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise AutoCaptureConfigError(f"HOOKMAGIC_CAPTURE_OPTIONS: {part!r} is not name=value")
        name, value = (x.strip() for x in part.split("=", 1))
        low = value.lower()
        if low in ("0", "false", "no", "off"):
            out[name] = False
        elif low in ("1", "true", "yes", "on"):
            out[name] = True
        else:
            try:
                out[name] = int(value)
            except ValueError:
                try:
                    out[name] = float(value)
                except ValueError:
                    out[name] = value
    return out


def install_from_env(env: Mapping[str, str] | None = None) -> bool:
    """Start (or arm) the capture the environment asks for; True if one was set up.

    Called by ``import hookmagic``; calling it again does nothing. Problems are warnings,
    never errors: the job must run whatever the capture does.
    """
    env = os.environ if env is None else env
    directory = env.get("HOOKMAGIC_CAPTURE_DIR")
    if not directory:
        return False
    with _lock:
        if _state:
            return False
        _state["installed"] = True
    try:
        from hookmagic.distributed.identity import rank_identity

        ident = rank_identity(env)
        ranks = env.get("HOOKMAGIC_CAPTURE_RANKS", "").strip()
        wanted = [r.strip() for r in ranks.split(",") if r.strip()]
        if any(not r.isascii() or not r.isdigit() for r in wanted):
            raise AutoCaptureConfigError(f"HOOKMAGIC_CAPTURE_RANKS={ranks!r}: expected rank "
                                         "numbers separated by commas (0,3)")
        if wanted and ident.rank not in {int(r) for r in wanted}:
            return False
        steps = parse_steps(env.get("HOOKMAGIC_CAPTURE_STEPS"))
        options = parse_options(env.get("HOOKMAGIC_CAPTURE_OPTIONS"))
        from hookmagic.cupti.options import CaptureOptions

        # checked now, so a wrong option is one warning at import, not an error mid-training
        try:
            CaptureOptions.from_kwargs(**{k: v for k, v in options.items() if k != "label"})
        except HookmagicError as exc:
            raise AutoCaptureConfigError(f"HOOKMAGIC_CAPTURE_OPTIONS="
                                         f"{env.get('HOOKMAGIC_CAPTURE_OPTIONS')!r}: {exc}") from None
    except (HookmagicError, ValueError, TypeError) as exc:
        warnings.warn(f"hookmagic: no automatic capture: {exc}", stacklevel=2)
        return False
    _state.update(dir=directory, steps=steps, options=options, identity=ident,
                  step=0, boundaries=[], capture=None)
    atexit.register(_finish_at_exit)
    if steps is None:
        _start()
        return True
    try:
        import torch.optim.optimizer as optim
    except ImportError:
        warnings.warn("hookmagic: HOOKMAGIC_CAPTURE_STEPS counts torch.optim optimizer steps, "
                      "but PyTorch is not installed; capturing the whole process instead",
                      stacklevel=2)
        _start()
        return True
    _state["hook"] = optim.register_optimizer_step_post_hook(_after_step)
    if steps[0] == 0:
        _start()
    return True


def _timestamp() -> int:
    from hookmagic.cupti import native_module

    native = native_module()
    return int(native.timestamp()) if native is not None else 0


def _finished_frame() -> Any:
    """A frame object that has returned: it owns its data, so it never matches a frame on any
    thread's stack. As the capture's stack boundary it keeps whole stacks (a capture started
    inside an optimizer hook has no caller frame that lives as long as the capture)."""
    import sys

    return sys._getframe()


def _start() -> None:
    from hookmagic.cupti.session import capture

    _state["boundary"] = _finished_frame()
    cap = capture(_boundary_frame=_state["boundary"], **_state["options"])
    cap.__enter__()
    _state["capture"] = cap
    _state["boundaries"] = [(_state["step"], _timestamp())]


def _wait_for_gpu() -> None:
    """Let the GPU finish the work the captured steps launched (the host runs ahead of it), so
    the last step's kernels are complete when the capture ends. Only PyTorch's CUDA, and only
    once it is initialised: nothing is started that the job did not start."""
    import sys

    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:  # never break the job over this
        pass


def _stop() -> None:
    """End the running capture and write it, with its step boundaries, as this rank's folder."""
    cap, _state["capture"] = _state.get("capture"), None
    if cap is None:
        return
    bounds = _state["boundaries"]
    _wait_for_gpu()
    cap.__exit__(None, None, None)
    cap.trace.meta["steps"] = [[step, start, end]
                               for (step, start), (_, end) in zip(bounds, bounds[1:])]
    cap.trace.meta["autocapture"] = {"steps": list(_state["steps"] or []) or None,
                                     "dir": str(_state["dir"])}
    from hookmagic.distributed.output import save_rank_trace

    try:
        cap.trace.meta["saved_to"] = save_rank_trace(cap.trace, _state["dir"],
                                                     _state["identity"])
    except Exception as exc:  # never break the job
        warnings.warn(f"hookmagic: the automatic capture could not be written under "
                      f"{_state['dir']!r} ({type(exc).__name__}: {exc})", stacklevel=2)
    _state["last_trace"] = cap.trace


def _after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """PyTorch's global post-hook: runs after every ``optimizer.step()``."""
    with _lock:
        _state["step"] += 1
        step = _state["step"]
        start, stop = _state["steps"]
        if _state["capture"] is not None:
            _state["boundaries"].append((step, _timestamp()))
            if stop is not None and step >= stop:
                _stop()
                hook = _state.pop("hook", None)
                if hook is not None:
                    hook.remove()
        elif step == start:
            _start()


def _finish_at_exit() -> None:
    with _lock:
        if _state.get("capture") is not None:
            _state["boundaries"].append((_state["step"] + 1, _timestamp()))
            _stop()


def _reset_for_tests() -> None:
    """Forget an installed configuration (tests only)."""
    with _lock:
        hook = _state.pop("hook", None)
        if hook is not None:
            hook.remove()
        _state.clear()
