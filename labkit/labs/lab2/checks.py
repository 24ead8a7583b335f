"""Lab 2's hidden checks: the synchronous round (a short real cluster of the kit's tasks, the weights and
global step its ps read, against SGD on the mean of the workers' gradients), the ps's global step in
each mode, and worker 0's
share of the async steps on emulated links, on cases the notebook never had (see ``labkit.labs.declare``)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from labkit.labs.declare import Unverifiable, Verdict, close, declare, numbers, shuffled

# ---------------------------------------------------------------------------------------------
# The synchronous round, in a short real cluster, judged from the files its tasks wrote


def settings_sync_round(
    deploy: str = "cluster",
    rounds: int = 20,
    batch_size: int = 50,
    learning_rate: float = 0.5,
    train_limit: int = 2000,
    test_limit: int = 500,
    seed: int = 0,
    timeout: float = 240,
) -> dict:
    if int(rounds) < 1 or int(batch_size) < 1 or not float(learning_rate) > 0:
        raise ValueError(
            f"rounds, batch_size and learning_rate must be positive, got {rounds}, {batch_size}, {learning_rate}"
        )
    return {
        "deploy": str(deploy),
        "rounds": int(rounds),
        "batch_size": int(batch_size),
        "learning_rate": float(learning_rate),
        "train_limit": int(train_limit),
        "test_limit": int(test_limit),
        "seed": int(seed),
        "timeout": float(timeout),
    }


def sync_round(fns: dict, args: dict, out: Path) -> dict:
    """``sync_round`` runs a parameter-server cluster of the kit's tasks in sync mode for
    ``rounds`` global steps from the seeded start; the ps saves the final weights and global step.
    The tasks' result files land in ``out/runs`` for the judge."""
    from labkit.labs.lab2 import experiment as sync_async

    s = settings_sync_round(**args)
    os.environ["LABKIT_RUNS"] = str(out / "runs")
    run = sync_async.run(
        "sync",
        s["deploy"],
        s["batch_size"],
        log=None,
        target_loss=None,
        max_steps=s["rounds"],
        learning_rate=s["learning_rate"],
        train_limit=s["train_limit"],
        test_limit=s["test_limit"],
        eval_every=0,
        seed=s["seed"],
        sync_round=fns["sync_round"],
        run="hidden-sync",
        timeout=s["timeout"],
        save_weights=True,
        scalars=False,
    )
    return {"run_dir": np.asarray(str(Path(run.result.run_dir).resolve().relative_to(out.resolve())))}


def reference_sync_weights(s: dict, workers: int) -> tuple[np.ndarray, np.ndarray]:
    """The weights after ``s["rounds"]`` synchronous rounds of ``workers`` workers, computed in
    float64 without TensorFlow: from the tasks' seeded start, each round one SGD step on the mean
    of the workers' gradients, each on the next batch of its own shard and stream (the tasks'
    ``batches``, seeded ``seed + rank``)."""
    from labkit.datasets.loaders import load_mnist
    from labkit.learning.lr import softmax_gradient
    from labkit.tasks.ps_sgd import NUM_FEATURES, batches, init_weights

    data = load_mnist(limit=s["train_limit"], test_limit=s["test_limit"], seed=s["seed"])
    x, y = data.x_train.reshape(-1, NUM_FEATURES), data.y_train
    streams = [batches(x[r::workers], y[r::workers], s["batch_size"], s["seed"] + r) for r in range(workers)]
    W, b = (a.astype(np.float64) for a in init_weights(s["seed"]))
    for _ in range(s["rounds"]):
        grads = [softmax_gradient(W, b, *next(stream))[:2] for stream in streams]
        W = W - s["learning_rate"] * np.mean([g[0] for g in grads], axis=0)
        b = b - s["learning_rate"] * np.mean([g[1] for g in grads], axis=0)
    return W, b


def _results(run: Path, job: str) -> dict[str, dict]:
    """The run's result files of ``job``'s tasks (``<job>-<i>.json``, not the ``.hello.json`` ones),
    by task name."""
    found = {}
    for f in sorted(run.glob(f"{job}-*.json")):
        if not f.name.endswith(".hello.json"):
            data = json.loads(f.read_text())
            found[str(data.get("task"))] = data
    return found


def ps_readings(run: Path) -> tuple[int | None, dict]:
    """The final global step and weights as the ps tasks read them, in processes that run none of
    the notebook's code (``labkit.tasks.ps_sgd.run_ps``); weights merged over the ps tasks."""
    ps = _results(run, "ps")
    step = ps.get("ps:0", {}).get("steps", {}).get("global_final")
    weights: dict = {}
    for data in ps.values():
        weights.update(data.get("weights") or {})
    return step, weights


def judge_sync_round(args: dict, arrays: dict, folder: Path) -> Verdict:
    """Every worker made ``rounds`` steps, the global step the ps read is ``rounds`` (one update
    per round), and the weights the ps read are plain SGD on the mean of the workers' gradients,
    round after round, from the same seeded start and batches (``reference_sync_weights``). The
    step and the weights come from the ps's result, never the workers': the workers' processes
    ran the notebook's round and could have written anything into their own results."""
    from labkit.tasks.ps_sgd import init_weights

    s = settings_sync_round(**args)
    rel = str(arrays["run_dir"])
    run = (folder / rel).resolve()
    if folder.resolve() not in run.parents or not run.is_dir():
        raise Unverifiable("the sync run left no folder of task results")
    workers = _results(run, "worker")
    if not workers or "worker:0" not in workers:
        raise Unverifiable("the sync run's workers wrote no result files")
    global_step, weights = ps_readings(run)
    if global_step is None:
        raise Unverifiable("the sync run's ps wrote no final global step")
    local = {k: v.get("steps", {}).get("local") for k, v in workers.items()}
    found = {"local": local, "global": global_step}
    if set(local.values()) != {s["rounds"]} or global_step != s["rounds"]:
        return Verdict(
            False,
            f"after {s['rounds']} rounds the workers made {local} steps and the ps's global step is "
            f"{global_step}: in a synchronous round every worker makes one step and the chief one "
            f"update",
            found,
        )
    try:
        W, b = np.asarray(weights["W"], np.float64), np.asarray(weights["b"], np.float64)
    except KeyError:
        raise Unverifiable("the ps saved no final weights") from None
    want_W, want_b = reference_sync_weights(s, len(workers))
    W0, b0 = init_weights(s["seed"])
    scale = max(np.abs(want_W - W0).max(), np.abs(want_b - b0).max())  # the whole update's size
    error = max(close(W, want_W, 1e-3 * scale, 1e-3), close(b, want_b, 1e-3 * scale, 1e-3))
    if error <= 1:
        return Verdict(True, value={**found, "error": error})
    if math.isinf(error):
        return Verdict(False, f"the ps's final weights have shapes {W.shape}, {b.shape} or are not finite", found)
    return Verdict(
        False,
        f"after {s['rounds']} rounds of {len(workers)} workers the weights on the ps are {error:.3g} x the "
        f"tolerance away from SGD on the mean of their gradients: does the chief apply the mean of "
        f"all {len(workers)} gradients, once per round, at the learning rate?",
        found,
    )


declare("lab2_sync_round", ["sync_round"], settings_sync_round, probe=sync_round, judge=judge_sync_round)


# ---------------------------------------------------------------------------------------------
# Worker 0's share of the async steps on emulated links, on cases the notebook never had


def inputs_worker0_share(seed: int = 0, cases: int = 24) -> list[dict]:
    """Cases drawn from ``seed``: a worker step's bytes (1 KB to 100 MB), a link rate (1 Mbit/s to
    100 Gbit/s), a step time (0.1 ms to 1 s), 1-8 workers and 1 to all of them beside the ps (one in
    most cases, as in the notebook; never the notebook's own 2 x 31,400 bytes, 3 workers and two links),
    so the link is in turn negligible and most of a remote step."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(int(cases)):
        workers = int(rng.integers(1, 9))
        beside = 1 if workers == 1 or rng.random() < 0.6 else int(rng.integers(2, workers + 1))
        out.append(
            {
                "step_bytes": float(round(10 ** rng.uniform(3, 8))),
                "rate_bits": float(round(10 ** rng.uniform(6, 11))),
                "step_s": float(10 ** rng.uniform(-4, 0)),
                "workers": workers,
                "beside_ps": beside,
            }
        )
    return out


WORKER0_SHARE_HINT = (
    "worker0_share(step_bytes={step_bytes:,.0f}, rate_bits={rate_bits:,.0f}, step_s={step_s:.4g}, workers={workers}, "
    "beside_ps={beside_ps}) is {mine:.6g}, not the grader's value for this case: check the link's seconds per step "
    "(bits, not bytes), which workers cross it, and that the share is of every worker's steps per second"
)
WORKER0_SHARE_ORDER = ("step_bytes", "rate_bits", "step_s", "workers", "beside_ps")
numbers(
    "worker0_share",
    inputs_worker0_share,
    "shares",
    1e-9,
    1e-6,
    WORKER0_SHARE_HINT,
    order=WORKER0_SHARE_ORDER,
    what="worker 0's share",
)


# ---------------------------------------------------------------------------------------------
# The prediction of the ps's global step, on clusters the notebook never had


def inputs_global_step(seed: int = 0, cases: int = 24) -> list[dict]:
    """Cases drawn from ``seed``: 'sync' and 'async' alike, 1-64 workers and 1-10,000 steps per
    worker; one worker in each mode, and one step each in each mode, among them; never the
    notebook's 3 workers with 100 steps each."""
    rng = np.random.default_rng(seed)
    modes = ("sync", "async")
    out = [{"mode": m, "workers": 1, "local_steps": int(rng.integers(2, 10_001))} for m in modes]
    out += [{"mode": m, "workers": int(rng.integers(2, 65)), "local_steps": 1} for m in modes]
    while len(out) < int(cases):
        workers, steps = int(rng.integers(2, 65)), int(rng.integers(2, 10_001))
        if (workers, steps) != (3, 100):
            out.append({"mode": modes[len(out) % 2], "workers": workers, "local_steps": steps})
    return shuffled(rng, out)


GLOBAL_STEP_HINT = (
    "global_step({mode!r}, workers={workers}, local_steps={local_steps}) is {mine:.10g}, not the grader's value "
    "for this case: check how many updates the ps applies in a {mode} run for each step a worker makes"
)
GLOBAL_STEP_ORDER = ("mode", "workers", "local_steps")
numbers(
    "global_step",
    inputs_global_step,
    "steps",
    1e-6,
    0.0,
    GLOBAL_STEP_HINT,
    order=GLOBAL_STEP_ORDER,
    what="the ps's global step",
)
