"""Lab 4's LeNet: images/s without a strategy, under MWMS with 1 and 2 workers; ring bytes vs analytic.

Every contender is a real cluster task (``labkit.tasks.strategy_train``) started by the
launcher on 127.0.0.1, training LeNet on MNIST with the same loop and per-worker batch:

- ``default``: one process, no strategy (the loop under TensorFlow's default strategy);
- ``mwms x1``: MultiWorkerMirroredStrategy (RING) with one worker: what the strategy costs
  when there is no one to talk to;
- ``mwms x2``: two workers, each with half the cores, exchanging gradients every step.

Images/s leave out the first step (tracing, collective set-up). The contenders run in
rounds, one of each per round, so drift on a shared machine hits them alike; the median
over rounds is reported. Bytes per step per worker are what each worker's own TCP sockets
sent around the training steps (``labkit.measure.sockets``; the host-wide ``lo`` counters would add
other programs' traffic); the ring's analytic volume is 2(N-1)/N x model bytes.
"""

from __future__ import annotations

import os
import statistics
import tempfile

from labkit.bench import entry, ratio

CONTENDERS = (("default", "default", 1), ("mwms x1", "mwms", 1), ("mwms x2", "mwms", 2))
BATCH = 50


def run(quick: bool = False) -> dict:
    from labkit.learning.costmodel import step_bytes
    from labkit.labs.lab4.experiment import train_cluster, worker_bytes

    rounds, limit, epochs = (1, 2000, 1) if quick else (3, 12000, 2)
    got: dict[str, list[dict]] = {name: [] for name, _, _ in CONTENDERS}
    with tempfile.TemporaryDirectory(prefix="labkit-bench-lenet-") as runs:
        os.environ["LABKIT_RUNS"] = runs
        for r in range(rounds):
            for name, strategy, workers in CONTENDERS:
                res = train_cluster(
                    workers,
                    BATCH,
                    strategy=strategy,
                    epochs=epochs,
                    train_limit=limit,
                    test_limit=1000,
                    run=f"{name.replace(' ', '')}-{r}",
                    log=None,
                    timeout=900,
                )
                tr = res.chief().training
                per_worker = [worker_bytes(res, t) for t in res]
                got[name].append(
                    {
                        "images_per_s": tr["images_per_s"],
                        "step_time_s": tr["step_time_s"],
                        "bytes": statistics.mean(b for b in per_worker if b is not None)
                        if strategy == "mwms"
                        else None,
                        "model_bytes": tr["model_bytes"],
                        "val_accuracy": tr["val_accuracy"],
                    }
                )
    med = {
        name: {k: statistics.median(v[k] for v in runs_) if runs_[0][k] is not None else None for k in runs_[0]}
        for name, runs_ in got.items()
    }
    m = med["default"]["model_bytes"]
    rows = []
    for name, strategy, workers in CONTENDERS:
        analytic = step_bytes("ring", m, workers).worker_sent if strategy == "mwms" else None
        rows.append(
            {
                "setup": name,
                "workers": workers,
                "global batch": BATCH * workers,
                "images/s": med[name]["images_per_s"],
                "step ms": 1000 * med[name]["step_time_s"],
                "KB/step/worker": med[name]["bytes"] / 1e3 if med[name]["bytes"] is not None else "-",
                "analytic KB": analytic / 1e3 if analytic is not None else "-",
                "val acc": med[name]["val_accuracy"],
            }
        )
    bytes_ratio = med["mwms x2"]["bytes"] / step_bytes("ring", m, 2).worker_sent
    return {
        "title": "LeNet images/s: no strategy vs MultiWorkerMirroredStrategy (RING), 1 and 2 workers",
        "rows": rows,
        "ratios": [
            ratio(
                "MWMS overhead: mwms x1 / default images/s",
                med["mwms x1"]["images_per_s"] / med["default"]["images_per_s"],
                ">= 0.6",
            ),
            ratio(
                "mwms x2 / mwms x1 images/s (2 cores: no speed-up expected)",
                med["mwms x2"]["images_per_s"] / med["mwms x1"]["images_per_s"],
                "",
            ),
            ratio("ring bytes per step per worker, measured / analytic (2 workers)", bytes_ratio, "<= 1.25"),
            ratio("ring bytes, analytic / measured (catches under-counting)", 1 / bytes_ratio, "<= 1.1"),
        ],
        "notes": [
            f"median of {rounds} round(s); {limit:,} MNIST images x {epochs} epoch(s), per-worker batch {BATCH}, "
            f"lr 0.05; {os.cpu_count()} cores shared by every task (threads: cores / tasks per host)",
            f"model bytes M = {m:,} (LeNet, float32); analytic ring volume per worker 2(N-1)/N x M",
        ],
    }


if __name__ == "__main__":
    entry(run)
