"""The cost model's arguments, checked: an architecture, a count, a positive size, the shards of a
model over its ps tasks. Below ``costmodel`` and the exercises' reference answers
(``labkit.labs.lab5.solution``) alike, so a reference checks its arguments as the kit does without
depending on a module that names the references."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

ARCHS = ("ps", "ring")


def check_arch(arch: str) -> str:
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; use 'ps' (parameter server) or 'ring' (all-reduce)")
    return arch


def check_count(name: str, value) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(value)


def check_positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float, np.number)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def even_shards(model_bytes: float, n_ps: int) -> tuple[float, ...]:
    """Bytes per ps when the weights split evenly (a variable partitioner): M/k each."""
    n_ps = check_count("n_ps", n_ps)
    return (float(model_bytes) / n_ps,) * n_ps


def check_shards(model_bytes: float, shards: Sequence[float]) -> tuple[float, ...]:
    shards = tuple(float(s) for s in shards)
    if not shards or min(shards) < 0 or not math.isclose(sum(shards), model_bytes, rel_tol=1e-6):
        raise ValueError(
            f"shards must hold the whole model ({model_bytes:.0f} bytes), got {sum(shards):.0f} "
            f"in {len(shards)} shard(s); use even_shards() or round_robin_shards()"
        )
    return shards
