"""Where runs go: the one ``runs/`` root for TensorBoard scalars and cluster run directories.

Every lab writes under ``runs/<lab>/<run>/``: TensorBoard scalars (``lr.train``, the chief
of a multi-worker run) and the launcher's task logs and result files alike, so one
``%tensorboard --logdir runs`` sees everything. The root is

1. ``$LABKIT_RUNS`` when set (the grader sets it to each submission's work directory,
   so submissions never mix), else
2. ``runs/`` in the current working directory: a notebook's own directory in JupyterLab
   (``notebooks/runs/``, where ``%tensorboard --logdir runs`` looks), the repository
   when the CLI runs from it.

The root is resolved to an absolute path when asked for, so a later ``os.chdir`` does
not move a run that has started. A run (or a sweep of runs) made now is named by ``run_name``,
the kit's one rule. Imports nothing from labkit.
"""

from __future__ import annotations

import os
import re
import secrets
from datetime import datetime
from pathlib import Path

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def runs_root() -> Path:
    """``$LABKIT_RUNS``, else ``./runs``, as an absolute path (see the module docstring)."""
    root = os.environ.get("LABKIT_RUNS")
    return Path(root).absolute() if root else Path.cwd() / "runs"


_ISSUED: set[str] = set()  # this process's names: a suffix drawn twice is drawn again


def run_name(prefix: str) -> str:
    """``<prefix>-<YYYYmmdd-HHMMSS>-<6 hex digits>``: a run, or a sweep's folder, made now. The time
    sorts runs and says when; the random suffix keeps two made in the same second apart: never
    within this process, and between processes (two notebooks) all but surely (24 bits)."""
    while True:
        name = f"{prefix}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
        if name not in _ISSUED:
            _ISSUED.add(name)
            return name


def run_dir(lab: str, run: str | None = None, prefix: str = "run") -> Path:
    """``runs_root()/<lab>/<run>``; ``run`` defaults to ``run_name(prefix)``, and may be
    ``<sweep>/<run>`` for the runs of one sweep. Nothing is created."""
    run = run or run_name(prefix)
    parts = [("lab", lab)] + [("run", part) for part in (run.split("/") if isinstance(run, str) else [run])]
    for what, name in parts:
        if not isinstance(name, str) or not _NAME.match(name) or name in (".", ".."):
            raise ValueError(
                f"{what} name {name!r} must be one path component of letters, digits, '_', '-' "
                f"or '.' (a run may be '<sweep>/<run>'), e.g. 'lab2'"
            )
    return runs_root() / lab / run
