"""Module frames read by the native stack walker: the real walker and interner
(src/python_frames.c, src/python_stacks.cpp, through the test extension's StackInterner,
sampling with the GIL released as a launch callback does) on real CPU nn.Modules. The module
each ``Module._call_impl`` frame calls is read from its ``self`` cell; hookmagic.cupti.modules
names the distinct modules as a capture does, and the interner writes the named stacks.
References are torch's own ``named_modules()`` and ``id()``."""
from __future__ import annotations

import asyncio
import gc
import sys

import pytest

torch = pytest.importorskip("torch")
testing = pytest.importorskip("tests.hookmagic_decoder_testing",
                              reason="test extension not built (pip install -e .)")

from hookmagic.cupti.modules import MODULE_FILE, combo_labels, module_probe  # noqa: E402

nn = torch.nn


class Probe(nn.Module):
    """Samples the stack inside its forward, as a launch callback would."""

    def __init__(self, interner=None) -> None:
        super().__init__()
        self.interner = interner
        self.samples: list[int] = []

    def forward(self, x):
        self.samples.append(self.interner.sample())
        return x


class Block(nn.Module):
    def __init__(self, interner) -> None:
        super().__init__()
        self.conv = nn.Linear(4, 4)
        self.probe = Probe(interner)

    def forward(self, x):
        return self.probe(self.conv(x))


def _interner(names: bool = True):
    stacks = testing.StackInterner()
    if names:
        stacks.set_module_probe(*module_probe())
    else:
        stacks.set_module_probe(None)
    return stacks


def _model(interner) -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(Block(interner), Block(interner)))


def _stack(rows: dict, sid: int) -> list[tuple[str, str]]:
    """(filename, function) of stack ``sid``, outermost first."""
    picked = sorted((d, f, fn) for s, d, f, fn in zip(rows["stack_id"], rows["depth"],
                                                      rows["filename"], rows["function"]) if s == sid)
    return [(f, fn) for _, f, fn in picked]


def _path_to(model: nn.Module, target: nn.Module) -> list[tuple[str, nn.Module]]:
    """Reference: (qualified name, module) from ``model`` down to ``target``, by named_modules()
    (each prefix of target's name is an enclosing module)."""
    name = {m: n for n, m in model.named_modules()}[target]
    by_name = dict(model.named_modules())
    parts = name.split(".")
    return [("", model)] + [(".".join(parts[:i]), by_name[".".join(parts[:i])])
                            for i in range(1, len(parts) + 1)]


def _name(code) -> str:
    """A frame's function as the walker names it (co_qualname; co_name on 3.10)."""
    return getattr(code, "co_qualname", code.co_name)


def test_module_probe_names_self_of_call_impl_and_the_plumbing():
    code, slot, plumbing = module_probe()
    assert code is nn.Module._call_impl.__code__
    assert code.co_varnames[0] == "self" and "self" in code.co_cellvars  # torch 2.x: a cell
    assert slot == (0 if sys.version_info >= (3, 11) else code.co_nlocals + code.co_cellvars.index("self"))
    assert nn.Module._wrapped_call_impl.__code__ in plumbing
    assert [c.co_name for c in plumbing if c is not nn.Module._wrapped_call_impl.__code__] == ["inner"]


def test_walker_reads_each_call_impl_frames_module():
    stacks = _interner()
    model = _model(stacks)
    model(torch.zeros(1, 4))
    combos = stacks.module_combos()
    for block in model[1]:
        expected = _path_to(model, block.probe)
        # every enclosing module is seen under the outermost one, with its class name
        seen = {(r, m, t) for r, m, t in zip(combos["root"], combos["module"], combos["module_type"])}
        assert {(id(model), id(mod), type(mod).__name__) for _, mod in expected} <= seen
    # nothing but these modules: (outermost, module) pairs of the two probes' paths
    assert set(combos["root"]) == {id(model)}
    assert set(combos["module"]) == {id(mod) for blk in model[1] for _, mod in _path_to(model, blk.probe)}


def test_stacks_name_modules_as_named_modules_does():
    stacks = _interner()
    model = _model(stacks)
    model(torch.zeros(1, 4))
    stacks.set_module_labels(combo_labels(stacks.module_combos(), [{"model": model}]))
    rows = stacks.resolve()
    for block in model[1]:
        frames = _stack(rows, block.probe.samples[0])
        named = [fn for f, fn in frames if f == MODULE_FILE]
        expected = _path_to(model, block.probe)
        assert named == ["Sequential"] + [f"{n} ({type(m).__name__})" for n, m in expected[1:]]
        assert not {fn for _, fn in frames} & {_name(nn.Module._call_impl.__code__),
                                               _name(nn.Module._wrapped_call_impl.__code__)}
    a, b = (_stack(rows, blk.probe.samples[0]) for blk in model[1])
    # the same lines under two modules: two stacks (the address is part of the frame identity)
    assert a != b and [x for x in a if x[0] != MODULE_FILE] == [x for x in b if x[0] != MODULE_FILE]


def test_without_module_names_the_raw_frames_stay():
    stacks = _interner(names=False)
    model = _model(stacks)
    model(torch.zeros(1, 4))
    assert len(stacks.module_combos()["module"]) == 0
    functions = {fn for _, fn in _stack(stacks.resolve(), model[1][0].probe.samples[0])}
    assert _name(nn.Module._call_impl.__code__) in functions
    assert _name(nn.Module._wrapped_call_impl.__code__) in functions


def test_a_model_held_by_a_closure_an_attribute_or_a_list_is_found():
    stacks = _interner()
    model = _model(stacks)
    model(torch.zeros(1, 4))
    combos = stacks.module_combos()

    def run():
        return model

    class Holder:
        pass

    holder = Holder()
    holder.net = model
    for ns in ({"run": run}, {"holder": holder}, {"models": [model]}, {"by_name": {"m": model}},
               {"bound": holder.__init__}, {"forward": model.forward}):
        labels = combo_labels(combos, [ns], gc_budget_s=0)
        if "bound" in ns:
            assert "1.0.probe (Probe)" not in labels  # an unrelated object: nothing found
        else:
            assert "1.0.probe (Probe)" in labels, ns


@pytest.mark.filterwarnings("ignore:hookmagic. nothing captured")
def test_a_model_held_by_a_caller_of_the_with_is_found():
    """The capture looks in the locals of the frame holding the ``with`` and of its callers:
    here the model is two calls above it."""
    import hookmagic

    stacks = _interner()
    model = _model(stacks)
    model(torch.zeros(1, 4))
    combos = stacks.module_combos()

    def holds_the_with():
        cap = hookmagic.capture()
        cap.__enter__()  # as `with` calls it: the frame holding the `with` is this one
        try:
            return combo_labels(combos, cap._namespace_mappings(), gc_budget_s=0)
        finally:
            cap.__exit__(None, None, None)

    def middle():
        return holds_the_with()

    assert "1.0.probe (Probe)" in middle()
    assert model is not None  # held here, two frames above the `with`


def test_unresolvable_modules_are_named_by_class():
    stacks = _interner()
    model = _model(stacks)
    model(torch.zeros(1, 4))
    combos = stacks.module_combos()
    assert set(combo_labels(combos, [], gc_budget_s=0)) == {"Sequential", "Block", "Probe"}
    # found through gc.get_objects() when no namespace holds it
    assert "1.0.probe (Probe)" in combo_labels(combos, [], gc_budget_s=5)
    # without labels the interner writes class names
    rows = stacks.resolve()
    named = [fn for f, fn in _stack(rows, model[1][0].probe.samples[0]) if f == MODULE_FILE]
    assert named == ["Sequential", "Sequential", "Block", "Probe"]


def test_a_freed_module_is_named_by_class_even_if_its_address_is_reused():
    stacks = _interner()
    model = _model(stacks)
    model(torch.zeros(1, 4))
    combos = stacks.module_combos()
    del model
    gc.collect()
    assert set(combo_labels(combos, [], gc_budget_s=5)) == {"Sequential", "Block", "Probe"}
    # an address now held by a live module of another class: the recorded class decides
    other = nn.ReLU()
    reused = dict(combos, root=[id(other)] * len(combos["root"]))
    assert not any("(" in label for label in combo_labels(reused, [{"other": other}], gc_budget_s=0))


def test_the_fast_path_is_kept_and_the_slow_path_still_read():
    """No global module hook: _call_impl calls forward directly (no ``inner`` frame). With a
    global hook (the user's), ``self`` is read all the same and ``inner`` is left out."""
    from torch.nn.modules import module as module_mod

    assert not module_mod._global_forward_pre_hooks and not module_mod._global_forward_hooks
    raw = _interner(names=False)
    model = _model(raw)
    model(torch.zeros(1, 4))
    assert not any(fn.endswith("inner") for _, fn in _stack(raw.resolve(), model[1][0].probe.samples[0]))
    stacks = _interner()
    for blk in model[1]:
        blk.probe.interner = stacks
    handle = nn.modules.module.register_module_forward_pre_hook(lambda m, a: None)
    try:
        model(torch.zeros(1, 4))
    finally:
        handle.remove()
    stacks.set_module_labels(combo_labels(stacks.module_combos(), [{"model": model}]))
    frames = _stack(stacks.resolve(), model[1][0].probe.samples[-1])
    assert not any(fn.endswith("inner") for _, fn in frames)
    assert (MODULE_FILE, "1.0.probe (Probe)") in frames


@pytest.mark.filterwarnings("ignore:hookmagic. nothing captured")
def test_no_global_module_hook_during_a_capture():
    """A capture (here without a GPU: it records nothing, but runs its start and finish)
    leaves torch's global hook tables empty, so module calls keep their fast path."""
    import hookmagic
    from torch.nn.modules import module as module_mod

    with hookmagic.capture():
        assert not (module_mod._global_forward_pre_hooks or module_mod._global_forward_hooks
                    or module_mod._global_backward_hooks or module_mod._global_backward_pre_hooks)


# -- hostile frames: the walker reads only frames running the probe's code ---------------------

def _fast_locals(code) -> int:
    """How many fast-local slots a frame of ``code`` has (3.11+: an argument's cell shares its
    slot; 3.10: cells follow the locals)."""
    if sys.version_info >= (3, 11):
        return len(set(code.co_varnames) | set(code.co_cellvars)) + len(code.co_freevars)
    return code.co_nlocals + len(code.co_cellvars) + len(code.co_freevars)


def _sample_once(code, slot) -> list[str]:
    """The class names of the module frames of one sample taken with ``code`` as the probe."""
    stacks = testing.StackInterner()
    stacks.set_module_probe(code, slot)
    stacks.sample()
    return list(stacks.module_combos()["module_type"])


def test_generators_and_coroutines_as_module_frames_do_not_crash():
    seen = []

    def gen(x):
        seen.append(_sample_once(gen.__code__, 0))
        yield x

    async def coro(x):
        seen.append(_sample_once(coro.__code__, 0))
        await asyncio.sleep(0)
        seen.append(_sample_once(coro.__code__, 0))
        return x

    list(gen(object()))
    asyncio.run(coro(nn.ReLU()))
    assert seen == [["object"], ["ReLU"], ["ReLU"]]


def test_unset_and_out_of_range_slots():
    seen = []

    def f():
        seen.append(_sample_once(f.__code__, 0))  # local 0 not assigned yet
        later = 1
        return later

    f()
    assert seen == [[]]  # an empty slot is no module
    stacks = testing.StackInterner()
    with pytest.raises(ValueError):
        stacks.set_module_probe(f.__code__, _fast_locals(f.__code__))
    with pytest.raises(ValueError):
        stacks.set_module_probe((lambda: None).__code__, 0)  # no locals at all
    with pytest.raises(ValueError):
        stacks.set_module_probe("not a code object", 0)
    stacks.set_module_probe(None)
    assert stacks.sample() >= 0 and len(stacks.module_combos()["module"]) == 0


def test_walker_on_every_frame_of_a_deep_mixed_stack():
    """Each function of a stack mixing generators, a coroutine, lambdas and modules taken in
    turn as the probe's code, each of its slots: the walk returns, class names are strings."""
    seen = []

    def leaf():
        for frame_fn in targets:
            code = frame_fn.__code__
            for slot in range(_fast_locals(code)):
                types_ = _sample_once(code, slot)
                assert all(isinstance(t, str) for t in types_)
                seen.append(len(types_))
        return 0

    def gen(n):
        yield (lambda: leaf())()

    async def coro():
        return next(gen(1))

    targets = [leaf, gen, coro, Probe.forward, nn.Module._call_impl]
    asyncio.run(coro())
    assert seen
