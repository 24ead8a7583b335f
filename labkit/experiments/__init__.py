"""Experiments: one function per lab experiment that a notebook calls, returning tidy pandas frames."""
from __future__ import annotations

import numbers


def positive_ints(name: str, values, example: str = "(1, 2, 3)") -> tuple[int, ...]:
    """One positive integer or several (numpy's too) as a tuple of ints: a sweep's axis. Anything
    else raises a ValueError that names ``name`` and shows ``example``."""
    if isinstance(values, numbers.Integral):
        values = (values,)
    items = tuple(values) if hasattr(values, "__iter__") and not isinstance(values, (str, bytes)) else ()
    if not items or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1 for v in items):
        raise ValueError(f"{name} must be positive integers, e.g. {example}; got {values!r}")
    return tuple(int(v) for v in items)
