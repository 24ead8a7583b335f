"""Lab 2's verifier: section 5's reading of the killed worker's run, recomputed from the run's own files."""

from __future__ import annotations

import json
import math

from labkit.labs.declare import claimed_number, Unverifiable, Verdict, verifier
from labkit.notebook.record import Missing, lookup


@verifier("lab2_killed_trace")
def lab2_killed_trace(
    ctx, window: str = "before", run_dir: str = "killed_worker.run_dir", tolerance: float = 1e-6
) -> Verdict:
    """Lab 2: the recorded others' updates per step of worker 0 in ``window`` ("before" or "after"
    the kill) are what the reference reads in the killed run's files: worker 0's ``train`` series
    in its result file, the windows from the kill record the kit wrote beside it
    (``experiment.kill_windows``). ``run_dir`` is the record naming the run's folder."""
    from labkit.labs.lab2 import solution
    from labkit.labs.lab2.experiment import KILL_RECORD, kill_windows

    try:
        folder = str(lookup(ctx.records, run_dir))
    except Missing as e:
        raise Unverifiable(f"no record {run_dir!r} names the killed run's folder (section 5 writes it): {e}") from e
    files = {}
    for name in (KILL_RECORD, "worker-0.json"):
        try:
            files[name] = json.loads(ctx.path(f"{folder.rstrip('/')}/{name}", "run file").read_text())
        except (OSError, ValueError) as e:
            raise Unverifiable(f"{folder}/{name} is unreadable: {e}") from e
    try:
        start, end = kill_windows(files[KILL_RECORD])[window]
        rows = lookup(files["worker-0.json"], "series.train")
        expected = solution.others_per_step(rows, start, end)
    except (KeyError, TypeError, ValueError, Missing, ZeroDivisionError) as e:
        raise Unverifiable(f"the killed run's files do not give worker 0's trace {window} the kill: {e}") from e
    claimed = claimed_number(ctx)
    if math.isclose(claimed, expected, rel_tol=tolerance, abs_tol=tolerance):
        return Verdict(True, value=expected)
    return Verdict(
        False,
        f"the recorded value {window} the kill is not what worker 0's own trace in {folder} gives over the "
        "section's window: check which rows fall in the window, and that a worker's own steps are left out",
    )
