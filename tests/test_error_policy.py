"""The error policy, checked on the source of all of hookmagic/: every exception the package
raises on purpose is a HookmagicError subclass (hookmagic/common/errors.py), never a bare
built-in (ValueError, TypeError, RuntimeError, KeyError, ...).

A static scan: it reads every module's syntax tree, so it also sees code paths that need a GPU
or an optional package to run.
"""
from __future__ import annotations

import ast
import builtins
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hookmagic"
ERRORS_MODULE = PACKAGE / "common" / "errors.py"

#: every exception class Python provides as a builtin name (ValueError, OSError, ...)
BUILTIN_EXCEPTIONS = frozenset(
    name for name in dir(builtins)
    if isinstance(getattr(builtins, name), type)
    and issubclass(getattr(builtins, name), BaseException))


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != ERRORS_MODULE)


def _builtin_name(node: ast.expr) -> str | None:
    """The built-in exception class that ``node`` names or calls (``ValueError``,
    ``ValueError("x")``, ``builtins.ValueError(...)``), else None."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Name) and target.id in BUILTIN_EXCEPTIONS:
        return target.id
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
            and target.value.id == "builtins" and target.attr in BUILTIN_EXCEPTIONS:
        return target.attr
    return None


def _protocol_raises(tree: ast.AST) -> set[int]:
    """Lines where Python's own protocol asks for the built-in: ``AttributeError`` from a
    module's or class's ``__getattr__`` (``hasattr`` and ``import`` rely on it)."""
    lines = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == "__getattr__":
            for node in ast.walk(fn):
                if isinstance(node, ast.Raise) and node.exc is not None \
                        and _builtin_name(node.exc) == "AttributeError":
                    lines.add(node.lineno)
    return lines


def builtin_raises(source: str, where: str) -> list[str]:
    """``"file:line: ValueError"`` for every ``raise`` of a built-in exception class (but the
    ``AttributeError`` that ``__getattr__`` must raise)."""
    out = []
    tree = ast.parse(source)
    allowed = _protocol_raises(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None and node.lineno not in allowed:
            name = _builtin_name(node.exc)
            if name:
                out.append((node.lineno, f"{where}:{node.lineno}: raise {name}"))
    return [text for _, text in sorted(out)]


def builtin_only_classes(source: str, where: str) -> list[str]:
    """Exception classes whose every base is a built-in exception: raised, they would bypass
    the hierarchy as surely as a bare ``raise ValueError``. Warning categories are issued,
    not raised, and are left alone."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.bases \
                and all(_builtin_name(b) for b in node.bases) \
                and not all(issubclass(getattr(builtins, _builtin_name(b)), Warning)
                            for b in node.bases):
            out.append(f"{where}:{node.lineno}: class {node.name}"
                       f"({', '.join(_builtin_name(b) or '' for b in node.bases)})")
    return out


def _scan(check) -> list[str]:
    found = []
    for path in _modules():
        found += check(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    return found


def test_the_scanner_finds_each_form_of_builtin_raise():
    # the scanner itself, on synthetic source: each form it must catch, and what it must pass
    source = ("import builtins\n"
              "def f(x):\n"
              "    if x == 1: raise ValueError('a')\n"
              "    if x == 2: raise KeyError\n"
              "    if x == 3: raise builtins.TypeError('b')\n"
              "    if x == 4: raise NotImplementedError\n"
              "    if x == 5: raise InvalidArgument('c')\n"
              "    try: pass\n"
              "    except OSError as err: raise\n"
              "    raise Wrapped('d') from None\n"
              "class Mine(RuntimeError): pass\n"
              "class Good(HookmagicError, RuntimeError): pass\n"
              "class Careful(UserWarning): pass\n")
    assert builtin_raises(source, "synthetic.py") == [
        "synthetic.py:3: raise ValueError", "synthetic.py:4: raise KeyError",
        "synthetic.py:5: raise TypeError", "synthetic.py:6: raise NotImplementedError"]
    assert builtin_only_classes(source, "synthetic.py") == [
        "synthetic.py:11: class Mine(RuntimeError)"]


def test_no_module_raises_a_builtin_exception_class():
    found = _scan(builtin_raises)
    assert not found, ("raise a hookmagic.common.errors class (or a subclass of one that also "
                       "derives from the built-in callers expect) instead of:\n  "
                       + "\n  ".join(found))


def test_every_exception_class_is_in_the_project_hierarchy():
    found = _scan(builtin_only_classes)
    assert not found, ("derive these from a hookmagic.common.errors class as well as the "
                       "built-in:\n  " + "\n  ".join(found))
