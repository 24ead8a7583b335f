"""Lab 5's verifier: the cost model's held-out error, against the kit's own model on the same runs."""

from __future__ import annotations

import glob
from pathlib import Path

from labkit.labs.declare import claimed_number, Unverifiable, Verdict, verifier


@verifier("lab5_held_out")
def lab5_held_out(ctx, sweeps: str = "runs/lab5/scaling-*", bound: float = 0.3, margin: float = 0.1) -> Verdict:
    """Lab 5: the held-out error of the student's cost model, judged against the kit's own model
    on the same runs. The grader reads the sweep's task result files (``sweeps``: a glob in the
    run's folder; the one with the most runs), fits the reference critical path to N below the
    largest and predicts the largest, as the notebook did with the student's ``comm_terms``. The
    claim passes at or below ``bound``, or within ``margin`` of the reference's own error: step
    times carry the load the machine had during these runs, and no answer can beat what the
    reference makes of the same runs by more than luck."""
    from labkit.learning import costmodel
    from labkit.labs.lab5 import experiment as ring_vs_ps
    from labkit.core.proc import usable_cores

    root = ctx.workdir.resolve()
    folders = [Path(f) for f in glob.glob(str(root / sweeps)) if Path(f).is_dir()]
    for f in folders:
        ctx.path(f.relative_to(root).as_posix(), "sweep folder")  # refuses links out of the run's folder
    if not folders:
        raise Unverifiable(f"no sweep under {sweeps}: section 1 runs it")
    folder = max(folders, key=lambda f: len(list(f.glob("*/cluster.json"))))
    claimed = claimed_number(ctx)
    sweep = ring_vs_ps.load_sweep(folder, cores=usable_cores())
    fit = ctx.records.get("fit_error") if isinstance(ctx.records.get("fit_error"), dict) else {}
    try:  # the loopback link stands in only where a fit fails; the notebook measured it
        loopback = costmodel.Link(float(fit["loopback_alpha_s"]), float(fit["loopback_bandwidth_bytes_per_s"]))
    except (KeyError, TypeError, ValueError):
        loopback = costmodel.Link(30e-6, 3e9, "nominal loopback")
    reference = ring_vs_ps.reference_held_out_error(sweep, loopback)
    if reference is None:
        raise Unverifiable(f"the sweep in {folder.name} has no N above the ones fitted")
    allowed = max(bound, reference + margin)
    shown = {"reference_held_out_median_abs_error": round(reference, 4), "allowed": round(allowed, 4)}
    if claimed <= allowed:
        return Verdict(True, value=shown)
    return Verdict(
        False,
        f"held-out error {claimed:.3f}: above {bound:g} and more than {margin:g} above the kit's own "
        f"model on the same runs ({reference:.3f})",
        shown,
    )
