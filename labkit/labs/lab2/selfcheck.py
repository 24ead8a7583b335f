"""Lab 2's self-checks: properties each exercise's function has, tried on cases of the check's own.

``global_step`` against what a round and an asynchronous step do to the ps's count: one worker's
steps are its updates in either mode, a synchronous round is one update whatever the workers, the
asynchronous workers' steps add up, and more steps give proportionally more updates.
``worker0_share`` against the limits of its model (one worker; every worker beside the ps; no
bytes; a link far slower than a step), its monotonicity in the link's rate and the step's bytes,
its invariance to the units' scale, and, given the notebook's runs on emulated links, the share
worker 0 made in each. ``others_per_step`` on traces of the check's own: alone, steady, and with a
worker gone mid-trace, read through windows that leave rows out at either end. ``sync_round`` run in one process as a cluster runs it
(``check_sync_round``), at two worker counts. The audits (``audit_000``, ``audit_sync``) against
the notebook's own measured worker steps, as the grader reads them. None uses the grader's
cases, and a failure names the function and the property, never a value
(``labkit.notebook.verdicts``). Each returns the ``Verdict`` it showed in the cell.
"""

from __future__ import annotations

import math

from labkit.experiments.sync_rounds import SOURCE_PROPERTY  # noqa: F401  (what the round's self-check says of a source the tasks cannot take)
from labkit.experiments.sync_rounds import selfcheck as sync_round  # noqa: F401  (Lab 3 runs the same round)
from labkit.notebook.verdicts import Verdict, verdict

WORKERS = (1, 2, 3, 4, 6)
STEPS = (1, 7, 40)
RUN_TOLERANCE = 0.1  # of a share: a run's measured share against the model's (the recorded runs: within 0.01; a live run on a busy machine varies more)


def global_step(fn) -> Verdict:
    """``fn(mode, workers, local_steps)``: a whole number; at one worker, its steps in either mode;
    in sync, the same at any number of workers; in async, the workers' steps added up; and in
    proportion to the steps per worker."""
    v = Verdict("global_step")
    cases = [
        (m, n, k) for m in ("sync", "async") for n in range(1, 2 * WORKERS[-1] + 1) for k in (*STEPS, 2 * STEPS[-1])
    ]
    got = v.values(lambda c: fn(*c), cases)
    if got is None:
        return verdict(v)
    g = dict(zip(cases, got))
    v.expect(all(float(x).is_integer() for x in got), "a whole number of updates")
    v.expect(
        all(g[m, 1, k] == k for m in ("sync", "async") for k in STEPS),
        "one worker: each of its steps is one update, in either mode",
    )
    v.expect(
        all(g["sync", n, k] == g["sync", 1, k] for n in WORKERS for k in STEPS),
        "sync: one update per round (a step of every worker), whatever the number of workers",
    )
    v.expect(
        all(g["async", 2 * n, k] == 2 * g["async", n, k] for n in WORKERS for k in STEPS)
        and all(g["async", n, k] == g["async", n - 1, k] + g["async", 1, k] for n in WORKERS[1:] for k in STEPS),
        "async: every worker's steps are updates of their own, so the workers' counts add up",
    )
    v.expect(
        all(g[m, n, 2 * STEPS[-1]] == 2 * g[m, n, STEPS[-1]] for m in ("sync", "async") for n in WORKERS),
        "in proportion to the steps each worker makes",
    )
    return verdict(v)


def worker0_share(fn, runs=None) -> Verdict:
    """``fn(step_bytes, rate_bits, step_s, workers, beside_ps)``: a share; 1 for one worker; an equal
    share each with every worker beside the ps or no bytes to move; only the workers beside the ps
    left on a link far slower than a step; larger on a slower link or with more bytes; unchanged
    when the bytes and the rate scale together; and, with ``runs`` (the notebook's
    ``emulated_steps``: link, worker, node, share, steps_per_s), close to worker 0's measured share."""
    v = Verdict("worker0_share")
    grid = [
        (b, r, s, n, k)
        for b in (5e4, 2e6)
        for r in (1e7, 1e9)
        for s in (0.005, 0.08)
        for n in (2, 3, 5)
        for k in (1, 2)
        if k < n
    ]
    slower = [(b, r / 10, s, n, k) for b, r, s, n, k in grid]
    heavier = [(3 * b, r, s, n, k) for b, r, s, n, k in grid]
    scaled = [(4 * b, 4 * r, s, n, k) for b, r, s, n, k in grid]
    limits = [(b, r, s, 1, 1) for b, r, s, _, _ in grid] + [(b, r, s, n, n) for b, r, s, n, _ in grid]
    empty = [(0.0, r, s, n, k) for _, r, s, n, k in grid]
    stalled = [(b, r * 1e-9, s, n, k) for b, r, s, n, k in grid]
    calls = v.values(lambda c: fn(*c), grid + slower + heavier + scaled + limits + empty + stalled)
    if calls is None:
        return verdict(v)
    g = dict(zip(grid + slower + heavier + scaled + limits + empty + stalled, calls))
    if not v.expect(all(0 < x <= 1 + 1e-12 for x in calls), "a share: a number above 0 and at most 1"):
        return verdict(v)
    v.expect(all(_near(g[b, r, s, 1, 1], 1.0) for b, r, s, _, _ in grid), "one worker: every step is worker 0's")
    v.expect(
        all(_near(g[b, r, s, n, n], 1 / n) for b, r, s, n, _ in grid),
        "every worker beside the ps: no link to cross, an equal share each",
    )
    v.expect(all(_near(g[c], 1 / c[3]) for c in empty), "no bytes to move: an equal share each")
    v.expect(
        all(g[s] > g[c] and g[h] > g[c] for c, s, h in zip(grid, slower, heavier)),
        "a slower link, or more bytes per step: a larger share for worker 0",
    )
    v.expect(
        all(math.isclose(g[c], 1 / c[4], rel_tol=1e-3) for c in stalled),
        "a link far slower than a step: the steps are shared among the workers beside the ps alone",
    )
    v.expect(
        all(_near(g[a], g[c]) for a, c in zip(scaled, grid)),
        "the link's seconds per step are what count: bytes and the rate scaled together change nothing",
    )
    if runs is not None and len(runs):
        v.expect(
            _close_to_runs(fn, runs),
            "close to the share worker 0 made in each of your runs on emulated links (within ten points), "
            "from a step's bytes, the link's rate in bits per second and worker 0's own step time",
        )
    return verdict(v)


def _near(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _close_to_runs(fn, runs) -> bool:
    """``fn`` on each run as the notebook's comparison calls it, against worker 0's measured share."""
    from labkit.infra import netem
    from labkit.labs.lab2.experiment import MODEL_BYTES

    for link, run in runs.groupby("link", sort=False):
        w0 = run[run["worker"] == "worker:0"].iloc[0]
        beside = int((run["node"] == w0["node"]).sum())
        rate = netem.parse_link(link).rate_bits
        mine = float(fn(2 * MODEL_BYTES, rate, 1 / w0["steps_per_s"], len(run), beside))
        if not abs(mine - float(w0["share"])) <= RUN_TOLERANCE:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# The audits of report 000's send rates, from the notebook's own measured worker steps

REPORT_ASYNC_RATE = 227  # bytes per second: report 000's async 3rd node's "Average Network Send"
REPORT_SYNC_RATE, REPORT_SYNC_S = 19_775_391, 8 * 60 + 46  # its sync 2nd node's, over 8 min 46 s
STEPS_AT_MOST = 50 * 60_000 // 50  # report 000's sync run: 50 epochs of 60,000 images at batch 50


def audit_000(audit, async_bytes: float) -> Verdict:
    """``audit["seconds_to_send_one_gradient_at_227_bytes_per_s"]``: a gradient, half of the async
    worker step's measured bytes ``async_bytes`` (a pull and a push), at report 000's 227 bytes per
    second (within 5%, as the grader reads it)."""
    v = Verdict("audit_000")
    seconds = _number(audit, "seconds_to_send_one_gradient_at_227_bytes_per_s")
    v.expect(
        seconds is not None and _within(seconds, async_bytes / 2 / REPORT_ASYNC_RATE, 0.05),
        "seconds_to_send_one_gradient_at_227_bytes_per_s: one gradient, half of your measured async worker "
        "step's bytes, sent at 227 bytes per second",
    )
    return verdict(v)


def audit_sync(audit, sync_bytes: float) -> Verdict:
    """``audit``'s three figures for report 000's 19.8 MB/s: the bytes that rate sends over the sync
    run's 8 min 46 s; the most its gradients can be (every one of its steps pushing half a measured
    sync worker step's bytes ``sync_bytes``); and the first over the second."""
    v = Verdict("audit_sync")
    sent, grads, ratio = (_number(audit, k) for k in ("report_sent_bytes", "gradient_bytes_at_most", "ratio"))
    v.expect(
        sent is not None and _within(sent, REPORT_SYNC_RATE * REPORT_SYNC_S, 0.01),
        "report_sent_bytes: the report's bytes per second times its sync run's seconds (8 min 46 s)",
    )
    v.expect(
        grads is not None and _within(grads, STEPS_AT_MOST * sync_bytes / 2, 0.02),
        "gradient_bytes_at_most: every step of the report's sync run (50 epochs of 60,000 images at batch "
        "50) pushing one gradient, half of your measured sync worker step's bytes",
    )
    v.expect(
        None not in (sent, grads, ratio) and grads > 0 and _within(ratio, sent / grads, 1e-6),
        "ratio: report_sent_bytes over gradient_bytes_at_most",
    )
    return verdict(v)


def _number(audit, key: str) -> float | None:
    """``audit[key]`` as a finite float, or None when the audit is no dict, lacks it, or holds no number."""
    try:
        value = float(audit[key])
    except (TypeError, ValueError, KeyError, IndexError):
        return None
    return value if math.isfinite(value) else None


def _within(mine: float, want: float, tolerance: float) -> bool:
    return abs(mine - want) <= tolerance * abs(want)


def others_per_step(fn) -> Verdict:
    """``fn(rows, start, end)`` on made-up train series of one worker: 0 when every global step is its
    own; k when k others step as often as it does; its window's rows only (from the first at or after
    ``start`` to the last at or before ``end``), so a trace whose rate changes reads each part apart;
    the same whether the rows are logged every step or every fifth."""
    v = Verdict("others_per_step")

    def trace(rates, every=5, steps=200):  # rates: the others' updates per own step, in successive parts
        rows, g = [], 0
        for part, k in enumerate(rates):
            for i in range(1, steps + 1):
                g += 1 + k
                local = part * steps + i
                if local % every == 0:
                    rows.append({"t": local / 100, "local_step": local, "global_step": g, "loss": 1.0})
        return rows

    changing = trace((2, 1))  # 600 global steps in the first 200 own steps, then 2 per step
    cases = [
        (trace((0,)), 0, 10**9),
        (trace((3,)), 0, 10**9),
        (trace((1,), every=1), 0, 10**9),
        (changing, 0, 600),
        (changing, 650, 10**9),
        (changing, 30, 400),
    ]
    got = v.values(lambda c: fn(*c), cases)
    if got is None:
        return verdict(v)
    v.expect(_near(got[0], 0.0), "alone: every global step is the worker's own, so no others' updates")
    v.expect(_near(got[1], 3.0) and _near(got[2], 1.0), "k others stepping as often as it does: k per step")
    v.expect(
        _near(got[3], 2.0) and _near(got[4], 1.0),
        "the window's rows only: a trace whose rate changes mid-way reads each part apart",
    )
    v.expect(
        _near(got[5], 2.0),
        "from the first row at or after start to the last at or before end, not the rows outside",
    )
    return verdict(v)
