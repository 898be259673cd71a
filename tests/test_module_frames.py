"""Module frames read by the native stack walker (issue 10): the real walker and interner
(src/python_frames.c, src/python_stacks.cpp, through the test extension's sample_stack, run
with the GIL released as a launch callback runs them) on real CPU nn.Modules. The module each
``Module._call_impl`` frame calls is read from its ``self`` cell; references are torch's own
``named_modules()`` and ``id()``. Then hookmagic.cupti.modules names them as a capture does."""
from __future__ import annotations

import asyncio
import gc
import sys

import pandas as pd
import pytest

torch = pytest.importorskip("torch")
testing = pytest.importorskip("tests.hookmagic_decoder_testing",
                              reason="test extension not built (pip install -e .)")

from hookmagic.cupti import modules  # noqa: E402
from hookmagic.cupti.modules import MODULE_FILE, module_labels, module_probe, module_stacks  # noqa: E402

nn = torch.nn


class Probe(nn.Module):
    """Samples the stack inside its forward, as a launch callback would."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[dict] = []

    def forward(self, x):
        code, slot = module_probe()
        self.samples.append(testing.sample_stack(code, slot))
        return x


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Linear(4, 4)
        self.probe = Probe()

    def forward(self, x):
        return self.probe(self.conv(x))


def _name(code) -> str:
    """A frame's function as the walker names it (co_qualname; co_name on 3.10)."""
    return getattr(code, "co_qualname", code.co_name)


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(Block(), Block()))


def _path_to(model: nn.Module, target: nn.Module) -> list[tuple[str, nn.Module]]:
    """Reference: the chain of (qualified name, module) from ``model`` down to ``target``, by
    named_modules() (each prefix of target's name is an enclosing module)."""
    names = {m: n for n, m in model.named_modules()}
    name = names[target]
    parts = name.split(".")
    by_name = dict(model.named_modules())
    return [("", model)] + [(".".join(parts[:i]), by_name[".".join(parts[:i])])
                            for i in range(1, len(parts) + 1)]


def _sample_rows(sample: dict) -> list[tuple[int, str, int, str]]:
    """The sampled stack's (depth, function, module, module_type), outermost first."""
    sid = sample["id"]
    mods = {d: (m, t) for s, d, m, t in zip(sample["module_stack_id"], sample["module_depth"],
                                            sample["module"], sample["module_type"]) if s == sid}
    rows = [(d, fn) for s, d, fn in zip(sample["stack_id"], sample["depth"], sample["function"])
            if s == sid]
    return [(d, fn, *mods.get(d, (0, ""))) for d, fn in sorted(rows)]


def test_module_probe_names_self_of_call_impl():
    code, slot = module_probe()
    assert code is nn.Module._call_impl.__code__
    assert code.co_varnames[0] == "self" and "self" in code.co_cellvars  # torch 2.x: a cell
    assert slot == (0 if sys.version_info >= (3, 11) else code.co_nlocals + code.co_cellvars.index("self"))


def test_walker_reads_each_call_impl_frames_module():
    model = _model()
    model(torch.zeros(1, 4))
    for block in (model[1][0], model[1][1]):
        (sample,) = block.probe.samples
        rows = _sample_rows(sample)
        called = [(fn, m, t) for _, fn, m, t in rows if m]
        assert all(fn == _name(nn.Module._call_impl.__code__) for fn, _, _ in called)
        expected = _path_to(model, block.probe)
        assert [m for _, m, _ in called] == [id(mod) for _, mod in expected]
        assert [t for _, _, t in called] == [type(mod).__name__ for _, mod in expected]
        # no other frame carries a module
        call_impl = _name(nn.Module._call_impl.__code__)
        assert sum(1 for _, fn, _, _ in rows if fn == call_impl) == len(called)


def test_one_call_site_under_two_modules_is_two_stacks():
    """Both blocks run the same lines: the module address is part of the frames' identity."""
    model = _model()
    model(torch.zeros(1, 4))
    a, b = (blk.probe.samples[0] for blk in model[1])
    fa = [(f, d) for s, d, f in zip(a["stack_id"], a["depth"], a["function"]) if s == a["id"]]
    fb = [(f, d) for s, d, f in zip(b["stack_id"], b["depth"], b["function"]) if s == b["id"]]
    assert [f for f, _ in fa] == [f for f, _ in fb]          # same frames by name and line...
    assert _sample_rows(a) != _sample_rows(b)                # ...under different modules


def _tables_of(sample: dict) -> tuple[dict, dict]:
    """A capture's stacks table, kernels on the sampled stack, and the walker's module rows."""
    stacks = pd.DataFrame({k: sample[k] for k in ("stack_id", "depth", "filename", "function", "line")})
    stack_modules = {"stack_id": sample["module_stack_id"], "depth": sample["module_depth"],
                     "module": sample["module"], "module_type": sample["module_type"]}
    kernels = pd.DataFrame({"stack_id": [sample["id"]], "range_id": [-1]})
    return {"stacks": stacks, "kernels": kernels}, stack_modules


def test_stacks_are_renamed_as_named_modules_names_them():
    model = _model()
    model(torch.zeros(1, 4))
    probe = model[1][1].probe
    tables, stack_modules = _tables_of(probe.samples[0])
    assert module_stacks(tables, stack_modules, [{"model": model}]) == 1
    sid = probe.samples[0]["id"]
    frames = tables["stacks"][tables["stacks"].stack_id == sid].sort_values("depth")
    named = frames.function[frames.filename == MODULE_FILE].tolist()
    expected = _path_to(model, probe)
    assert named == [type(model).__name__] + [f"{n} ({type(m).__name__})" for n, m in expected[1:]]
    assert named[-1] == "1.1.probe (Probe)"
    assert not set(frames.function) & {"Module._call_impl", "Module._wrapped_call_impl", "_call_impl",
                                       "_wrapped_call_impl"}


def test_a_model_held_by_a_closure_or_an_attribute_is_found():
    model = _model()
    model(torch.zeros(1, 4))

    def run():
        return model

    class Holder:
        pass

    holder = Holder()
    holder.net = model
    sample = model[1][0].probe.samples[0]
    _, stack_modules = _tables_of(sample)
    for ns in ({"run": run}, {"holder": holder}, {"models": [model]}, {"step": holder.__init__}):
        labels = module_labels(stack_modules, [ns], gc_budget_s=0)
        if "step" in ns:
            continue  # a bound method of an unrelated object: nothing to find, nothing raised
        assert "1.0.probe (Probe)" in labels.label.tolist(), ns


def test_unresolvable_modules_are_named_by_class():
    model = _model()
    model(torch.zeros(1, 4))
    sample = model[1][0].probe.samples[0]
    _, stack_modules = _tables_of(sample)
    labels = module_labels(stack_modules, [], gc_budget_s=0)  # nowhere to look
    assert sorted(set(labels.label)) == ["Block", "Probe", "Sequential"]
    # found through gc.get_objects() when the namespaces do not hold it
    labels = module_labels(stack_modules, [], gc_budget_s=5)
    assert "1.0.probe (Probe)" in labels.label.tolist()


def test_a_freed_module_is_named_by_class_even_if_its_address_is_reused():
    model = _model()
    model(torch.zeros(1, 4))
    sample = model[1][0].probe.samples[0]
    _, stack_modules = _tables_of(sample)
    del model
    gc.collect()
    labels = module_labels(stack_modules, [], gc_budget_s=5)
    assert sorted(set(labels.label)) == ["Block", "Probe", "Sequential"]
    # an address now held by a live module of another class: its class name decides
    other = nn.ReLU()
    fake = dict(stack_modules, module=[id(other)] * len(stack_modules["module"]))
    assert "ReLU" not in "".join(module_labels(fake, [{"other": other}], gc_budget_s=0).label)


def test_the_fast_path_is_kept_and_the_slow_path_still_read():
    """No global module hook: _call_impl calls forward directly (no ``inner`` frame). With a
    global hook (the user's), ``self`` is read all the same and ``inner`` is dropped."""
    from torch.nn.modules import module as module_mod

    assert not module_mod._global_forward_pre_hooks and not module_mod._global_forward_hooks
    model = _model()
    model(torch.zeros(1, 4))
    fast = model[1][0].probe.samples[0]
    assert not any(f.endswith("inner") for f in fast["function"])
    handle = nn.modules.module.register_module_forward_pre_hook(lambda m, a: None)
    try:
        model(torch.zeros(1, 4))
    finally:
        handle.remove()
    slow = model[1][0].probe.samples[1]
    assert any(f.endswith("inner") for f in slow["function"])
    assert [m for *_, m, _ in _sample_rows(slow) if m] == [m for *_, m, _ in _sample_rows(fast) if m]
    tables, stack_modules = _tables_of(slow)
    module_stacks(tables, stack_modules, [{"model": model}])
    frames = tables["stacks"][tables["stacks"].stack_id == slow["id"]]
    assert not frames.function.str.endswith("inner").any()
    assert "1.0.probe (Probe)" in set(frames.function)


@pytest.mark.filterwarnings("ignore:hookmagic. nothing captured")
def test_no_global_module_hook_during_a_capture():
    """A capture (here without a GPU: it records nothing, but runs its start and finish)
    leaves torch's global hook tables empty, so module calls keep their fast path."""
    import hookmagic
    from torch.nn.modules import module as module_mod

    model = _model()
    with hookmagic.capture():
        assert not (module_mod._global_forward_pre_hooks or module_mod._global_forward_hooks
                    or module_mod._global_backward_hooks or module_mod._global_backward_pre_hooks)
        model(torch.zeros(1, 4))
    assert not any(f.endswith("inner") for f in model[1][0].probe.samples[0]["function"])


# -- hostile frames: the walker reads only frames running the probe's code ---------------------

def test_generators_and_coroutines_as_module_frames_do_not_crash():
    samples = []

    def gen(x):
        samples.append(testing.sample_stack(gen.__code__, 0))
        yield x

    async def coro(x):
        samples.append(testing.sample_stack(coro.__code__, 0))
        await asyncio.sleep(0)
        samples.append(testing.sample_stack(coro.__code__, 0))
        return x

    list(gen(object()))
    asyncio.run(coro(nn.ReLU()))
    assert len(samples) == 3
    assert samples[0]["module_type"] == ["object"]
    assert samples[1]["module_type"] == samples[2]["module_type"] == ["ReLU"]


def _fast_locals(code) -> int:
    """How many fast-local slots a frame of ``code`` has (3.11+: an argument's cell shares its
    slot; 3.10: cells follow the locals)."""
    if sys.version_info >= (3, 11):
        return len(set(code.co_varnames) | set(code.co_cellvars)) + len(code.co_freevars)
    return code.co_nlocals + len(code.co_cellvars) + len(code.co_freevars)


def test_unset_and_out_of_range_slots():
    samples = []

    def f():
        samples.append(testing.sample_stack(f.__code__, 0))  # local 0 not assigned yet
        later = 1
        return later

    f()
    assert samples[0]["module"] == []  # an empty slot is no module
    with pytest.raises(ValueError):
        testing.sample_stack(f.__code__, _fast_locals(f.__code__))
    with pytest.raises(ValueError):
        testing.sample_stack((lambda: None).__code__, 0)  # no locals at all
    with pytest.raises(ValueError):
        testing.sample_stack("not a code object", 0)
    assert testing.sample_stack(None, 0)["module"] == []


def test_walker_on_every_frame_of_a_deep_mixed_stack():
    """Each function of a stack mixing generators, a coroutine, lambdas and modules taken in
    turn as the probe's code, each of its slots: the walk returns, types are strings."""
    seen = []

    def leaf():
        for frame_fn in targets:
            code = frame_fn.__code__
            for slot in range(_fast_locals(code)):
                out = testing.sample_stack(code, slot)
                assert all(isinstance(t, str) for t in out["module_type"])
                seen.append(len(out["function"]))
        return 0

    def gen(n):
        yield (lambda: leaf())()

    async def coro():
        return next(gen(1))

    targets = [leaf, gen, coro, Probe.forward, nn.Module._call_impl]
    asyncio.run(coro())
    assert seen and all(n > 0 for n in seen)
