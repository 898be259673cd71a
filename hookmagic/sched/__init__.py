"""Multi-model GPU scheduling: one set of policies for a fast simulator and real engines.

    from hookmagic import sched
    models = [sched.ModelSpec.linear("det", 2.0, 0.4), sched.ModelSpec.linear("cls", 0.8, 0.1)]
    wl = sched.make_workload([sched.Cameras("det", n=8, fps=30, slo_ms=50),
                              sched.Poisson("cls", rate=300, slo_ms=20, priority=1)], 10, seed=1)
    res = sched.simulate(models, wl, sched.Policy(order="priority",
                                                  batching=sched.Batching(8, 2.0)))
    res.metrics()

``simulate`` runs in this process on any machine; ``run`` drives the same policy on real
engines (PyTorch, CuPy) on real CUDA streams and returns a result with the same columns.
"""
from .models import ModelSpec, specs_from_sweep
from .workloads import Bursty, Cameras, Poisson, Replay, Workload, make_workload
from .policies import AIMD, Batching, CameraFairness, Limit, Policy, QueuePolicy, Stream
from .dispatcher import Dispatcher
from .result import Result, RunResult, SimResult, load_result
from .simulator import simulate


def run(*args, **kwargs):
    """Drive real engines with a policy; see :func:`hookmagic.sched.driver.run`."""
    from .driver import run as _run
    return _run(*args, **kwargs)


try:  # keep ``run?`` showing the driver's full help without importing torch
    from .driver import run as _driver_run
    run.__doc__ = _driver_run.__doc__
    run.__wrapped__ = _driver_run
except Exception:  # pragma: no cover - the driver module itself imports nothing heavy
    pass

__all__ = ["ModelSpec", "specs_from_sweep", "Poisson", "Cameras", "Bursty", "Replay", "Workload",
           "make_workload", "Policy", "Batching", "AIMD", "QueuePolicy", "CameraFairness",
           "Stream", "Limit", "Dispatcher", "Result", "SimResult", "RunResult", "load_result",
           "simulate", "run"]
