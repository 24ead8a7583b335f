"""TensorBoard: scalars from a finished run's series, written by the driver; the notebooks' TensorBoard cell.

Lab 2's and Lab 3's task programs keep their chief's evaluations in their result files
(``series``) instead of writing TensorBoard events; once the run has ended, the driver turns
those series into scalars under ``runs/<lab>/<run>/tensorboard``, next to the task logs on this
machine even when the chief ran on another node. Each point keeps its time in the run as its
wall time, so TensorBoard's *Relative* axis is training time. (Labs 1, 4 and 5 write events
while they train: ``labkit.learning.lr``, ``labkit.learning.train_loop``.)

    write(run_dir / "tensorboard", chief["series"]["eval"], step="global_step",
          keys=("test_loss", "test_accuracy"))

``tensorboard(...)`` is every notebook's last cell: where the runs are, and TensorBoard itself
inside the notebook when a person watches in JupyterLab (never under papermill).
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def write(logdir, rows: list[dict], step: str, keys, t: str = "t", end: float | None = None) -> Path:
    """One scalar per key of ``keys`` at ``row[step]``, for every row that has that key;
    returns ``logdir``. A row's wall time is ``row[t]`` seconds after the run's start, placed
    so that the last row is at ``end`` (default: now, as the run has just ended)."""
    rows = list(rows)
    bad = [row for row in rows if step not in row or t not in row]
    if bad:
        raise ValueError(f"a row lacks its step {step!r} or time {t!r}: {bad[0]}; give the columns every row has")
    from tensorboard.summary import Writer  # events with their own wall time (it imports TensorFlow for its files)

    start = (time.time() if end is None else end) - max((row[t] for row in rows), default=0.0)
    logdir = Path(logdir)
    writer = Writer(str(logdir))
    try:
        for row in rows:
            for key in keys:
                if row.get(key) is not None:
                    writer.add_scalar(key, float(row[key]), int(row[step]), wall_time=start + float(row[t]))
    finally:
        writer.close()
    return logdir


def tensorboard(*logdirs, start: bool = True) -> str:
    """Say where the TensorBoard runs are (``logdirs``, default the runs root) and, with
    ``start`` in live JupyterLab, start TensorBoard on the whole runs root inside the notebook
    (``%tensorboard --logdir``); elsewhere (papermill, a script) print how to start it.
    Returns the ``--logdir`` it uses: ``runs`` when the root is ``./runs``."""
    from labkit.core import paths
    from labkit.measure import progress

    root = paths.runs_root()
    cwd = Path.cwd()
    logdir = os.path.relpath(root, cwd) if root.is_relative_to(cwd) else str(root)
    print("TensorBoard runs under", ", ".join(str(d) for d in logdirs if d) or root)
    if start and progress.is_live():
        from IPython import get_ipython

        shell = get_ipython()
        shell.run_line_magic("load_ext", "tensorboard")
        shell.run_line_magic("tensorboard", f"--logdir {logdir}")
    else:
        print(
            f"headless run: in JupyterLab `%load_ext tensorboard` then `%tensorboard --logdir {logdir}`; in a "
            f"terminal `tensorboard --logdir {logdir}` serves them at http://localhost:6006"
        )
    return logdir
