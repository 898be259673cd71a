"""The worker threads a :class:`~hookmagic.pipeline.Pipeline` keeps across its runs.

A stage's workers are threads that live as long as the pipeline (daemon threads, ended by
:meth:`Workers.close`, which the pipeline calls when it is closed or collected), so what a
thread builds for itself on its first run is still there on the next: its CUDA stream, the
libraries' per-thread handles (cuBLAS, cuDNN), its timing events. A fresh thread per run paid
for those again on every run's first batch. Each thread waits for a task, runs it with its own
``state`` dict, and waits for the next; a thread still inside a task when its run gave up on it
(a stage that never returned) is abandoned: it leaves once the task returns, and the next run
gets a new thread in its place.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Hashable


class _Kept:
    def __init__(self, name: str) -> None:
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.state: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        while True:
            task = self.inbox.get()
            if task is None:
                return
            try:
                task(self.state)
            except BaseException:  # noqa: BLE001 - a task reports its own errors; keep serving
                pass
            del task  # hold nothing of a finished run while waiting


class Workers:
    """Kept threads by key (a pipeline's ``(stage index, worker)``)."""

    def __init__(self) -> None:
        self._threads: dict[Hashable, _Kept] = {}
        self._lock = threading.Lock()

    def submit(self, key: Hashable, name: str, task: Callable[[dict], None]) -> None:
        """Run ``task(state)`` on the thread kept for ``key`` (started now if there is none)."""
        with self._lock:
            kept = self._threads.get(key)
            if kept is None or not kept.thread.is_alive():
                kept = self._threads[key] = _Kept(name)
        kept.inbox.put(task)

    def abandon(self, key: Hashable) -> None:
        """Give up on ``key``'s thread (stuck in a task): it leaves when the task returns."""
        with self._lock:
            kept = self._threads.pop(key, None)
        if kept is not None:
            kept.inbox.put(None)

    def close(self) -> None:
        """Let every kept thread leave (after the task it is running, if any)."""
        with self._lock:
            kept, self._threads = list(self._threads.values()), {}
        for k in kept:
            k.inbox.put(None)

    def __len__(self) -> int:
        return len(self._threads)
