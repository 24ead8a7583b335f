"""TensorBoard scalars from a finished run's series, written by the driver.

Lab 2's and Lab 3's task programs keep their chief's evaluations in their result files
(``series``) instead of writing TensorBoard events; the driver turns those series into
scalars under the run's directory, ``runs/<lab>/<run>/tensorboard``, once the run has
ended. That way they land next to the task logs on this machine, also when the chief ran
on another node, and only the chief's series is written. Each point keeps its time in the
run (``t``, seconds since training started) as its wall time, so TensorBoard's *Relative*
axis is training time, as the notebooks' curves. (Labs 1, 4 and 5 write events while
they train: ``labkit.lr``, ``labkit.train_loop``.)

    write(run_dir / "tensorboard", chief["series"]["eval"], step="global_step",
          keys=("test_loss", "test_accuracy"))
"""
from __future__ import annotations

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
    from tensorboard.summary import Writer  # no TensorFlow API needed: events with their own wall time

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
