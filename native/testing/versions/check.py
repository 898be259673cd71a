"""Run by run.sh: the walker reads each Module-like frame's `self` on this CPython."""
import sys, harness

class Module:
    """Mimics torch.nn.Module._call_impl: self is a cell (used by a nested function)."""
    def _call_impl(self, *args, **kwargs):
        forward_call = self.forward
        if not getattr(self, "slow", False):
            return forward_call(*args, **kwargs)
        def inner():
            return forward_call(*args, **kwargs)
        return inner()

def slot_of(code):
    if sys.version_info >= (3, 11) or "self" not in code.co_cellvars:
        return 0
    return code.co_nlocals + code.co_cellvars.index("self")

code = Module._call_impl.__code__
class Outer(Module):
    def __init__(self): self.inner = Leaf()
    def forward(self): return self.inner._call_impl()
class Leaf(Module):
    def forward(self): return harness.walk(code, slot_of(code))
o = Outer()
for slow in (False, True):
    o.slow = o.inner.slow = slow
    rows = o._call_impl()
    mods = [(m, t) for f, m, t in rows if m]
    assert [m for m, _ in mods] == [id(o.inner), id(o)], (rows, id(o), id(o.inner))
    assert [t for _, t in mods] == ["Leaf", "Outer"], mods
# torch's plumbing (here: the nested `inner`) is left out when named as skipped
inner_code = next(c for c in code.co_consts if getattr(c, "co_name", None) == "inner")
Leaf.forward = lambda self: harness.walk(code, slot_of(code), (inner_code,))
o.slow = o.inner.slow = True
rows = o._call_impl()
assert not [f for f, m, t in rows if f.endswith("inner")], rows
assert [m for f, m, t in rows if m] == [id(o.inner), id(o)], rows


def gen(x):
    yield harness.walk(gen.__code__, 0)
r = next(gen(o))
assert [m for f, m, t in r if m] == [id(o)], r
print(sys.version.split()[0], "ok", [f for f, m, t in rows][:4])
