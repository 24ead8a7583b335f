"""Experiments: one function per lab experiment that a notebook calls, returning tidy pandas frames."""
from __future__ import annotations

import inspect
import numbers
import textwrap
import types


def positive_ints(name: str, values, example: str = "(1, 2, 3)") -> tuple[int, ...]:
    """One positive integer or several (numpy's too) as a tuple of ints: a sweep's axis. Anything
    else raises a ValueError that names ``name`` and shows ``example``."""
    if isinstance(values, numbers.Integral):
        values = (values,)
    items = tuple(values) if hasattr(values, "__iter__") and not isinstance(values, (str, bytes)) else ()
    if not items or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1 for v in items):
        raise ValueError(f"{name} must be positive integers, e.g. {example}; got {values!r}")
    return tuple(int(v) for v in items)


def function_source(fn, name: str, signature: str, what: str) -> str:
    """The source of the notebook's function ``name`` (a ``def`` at the top level of a cell), to
    send to the tasks, which define it and train with it (``tasks.common.define_function``).
    ``what``: the argument that took it, for the error."""
    if not callable(fn) or getattr(fn, "__name__", None) != name:
        raise ValueError(f"{what} must be a function named {name}{signature}, got {fn!r}")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise ValueError(f"cannot read the source of {name}; define it with `def` at the top level of a "
                         f"notebook cell or a module ({e})") from None
    return "".join(line + "\n" for line in _module_imports(fn)) + source


def _module_imports(fn) -> list[str]:
    """``import`` lines for the modules the function uses by a global name (``tf``, ``np``), as
    the notebook imported them, so the source defines the same function in a task's process."""
    names, codes = set(), [getattr(fn, "__code__", None)]
    while codes:
        code = codes.pop()
        if code is not None:
            names.update(code.co_names)
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    lines = []
    for n in sorted(names):
        module = getattr(fn, "__globals__", {}).get(n)
        if isinstance(module, types.ModuleType):
            lines.append(f"import {module.__name__}" + (f" as {n}" if module.__name__ != n else ""))
    return lines
