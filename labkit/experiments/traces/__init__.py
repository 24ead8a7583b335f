"""Traces the kit recorded with its own runs, shipped for the sections a machine may not run.

A lab's section on emulated links needs Linux with root or user namespaces, and its failure demo
kills tasks; the grader runs neither. Each such section reads, where it does not run, the trace
the kit recorded by running the same call: ``labkit/labs/<lab>/traces/<what>.json``, named
``<lab>_<what>`` (``lab2_emulated_shares``). A trace holds the section's data (frames as lists of
records) and its ``provenance``: the call, labkit's commit, TensorFlow's version, the cores and the
load of the machine that recorded it, and when. A student's analysis of a trace is graded by hidden
checks on traces the grader draws itself. ``recorder`` records one again.
"""

from __future__ import annotations

import json
from pathlib import Path

LABS = Path(__file__).resolve().parents[2] / "labs"  # labkit/labs: each lab's recordings are in its traces/


def names() -> list[str]:
    """Every recorded trace's name, ``<lab>_<what>``."""
    return sorted(f"{p.parent.parent.name}_{p.stem}" for p in LABS.glob("*/traces/*.json"))


def path(name: str) -> Path:
    """Where the trace ``name`` (``<lab>_<what>``) is, or is written: ``labkit/labs/<lab>/traces/<what>.json``."""
    lab, _, what = name.partition("_")
    if not lab or not what or "/" in name or name.startswith("."):
        raise ValueError(f"a trace is named <lab>_<what> (e.g. lab2_emulated_shares); got {name!r}")
    return LABS / lab / "traces" / f"{what}.json"


def load(name: str) -> dict:
    """The recorded trace ``name`` (e.g. "lab2_emulated_shares"); a FileNotFoundError naming those there are."""
    file = path(name)
    if not file.is_file():
        raise FileNotFoundError(f"no recorded trace {name!r} ({file}); there are: {', '.join(names()) or 'none'}")
    return json.loads(file.read_text())


def frame(name: str):
    """A recorded section's data frame (its ``frame`` records) as a pandas DataFrame, and the provenance."""
    import pandas as pd

    data = load(name)
    return pd.DataFrame(data["frame"]), data["provenance"]


def argument(provenance: dict, name: str):
    """The value the recorded call (``provenance["recorded_by"]``) gave its argument ``name``, read
    from the call as written (a keyword, or one inside a ``**{...}``), so a section that needs a
    parameter of the recorded runs reads it from their record instead of restating it."""
    import ast

    call = ast.parse(provenance["recorded_by"], mode="eval").body
    for keyword in getattr(call, "keywords", []):
        if keyword.arg == name:
            return ast.literal_eval(keyword.value)
        if keyword.arg is None and isinstance(keyword.value, ast.Dict):
            spread = ast.literal_eval(keyword.value)
            if name in spread:
                return spread[name]
    raise KeyError(f"the recorded call gives no argument {name!r}: {provenance['recorded_by']}")
