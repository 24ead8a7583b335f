"""Lab 5's MLP at N=2: parameter server vs ring all-reduce images/s, bytes per task vs analytic, cost-model error.

Every contender is a real cluster of ``labkit.tasks.strategy_train`` tasks on 127.0.0.1
(``labkit.labs.lab5.experiment``), training the communication-heavy MLP (784-2048-2048-10,
M = 23 MB) with the same loop, per-worker batch and steps: ``ring N=1`` (compute per image, no
communication), ``ps N=2`` (one ps, a chief, two workers) and ``ring N=2`` (MWMS, RING).

They run in rounds, one of each per round, so drift on a shared machine hits them alike; medians
are reported. Bytes per step come from each task's own sockets, against the reference model
(``labkit.labs.lab5.solution.step_bytes``): the ps sends and receives N x M, a PS worker M, a
ring worker 2(N-1)/N x M. The cost model's error compares its prediction (compute from ``ring
N=1``, alpha and B from a loopback micro-benchmark: it saw none of the N=2 runs) with the
measured step. (On one machine all tasks share its cores, so neither architecture can scale.)
"""

from __future__ import annotations

import os
import statistics
import tempfile

from labkit.bench import entry, ratio

MODEL = "mlp"
CONTENDERS = (("ring N=1", "ring", 1), ("ps N=2", "ps", 2), ("ring N=2", "ring", 2))
BATCH = 64


def run(quick: bool = False) -> dict:
    from labkit.learning import costmodel
    from labkit.labs.lab5 import experiment as ring_vs_ps
    from labkit.core.proc import usable_cores

    rounds, steps = (1, 8) if quick else (3, 20)
    loopback = costmodel.measure_loopback_link()
    per_round = []
    with tempfile.TemporaryDirectory(prefix="labkit-bench-ring-vs-ps-") as runs_dir:
        os.environ["LABKIT_RUNS"] = runs_dir
        for r in range(rounds):
            runs = [
                ring_vs_ps.run_one(
                    arch,
                    MODEL,
                    n,
                    batch_size=BATCH,
                    steps=steps,
                    epochs=2,
                    test_limit=500,
                    run=f"{arch}-w{n}-{r}",
                    timeout=900,
                )
                for _, arch, n in CONTENDERS
            ]
            sweep = ring_vs_ps.Scaling(runs, settings={"cores": usable_cores()})
            table = sweep.table().set_index(["arch", "workers"])
            tb = sweep.task_bytes(expected=costmodel.step_bytes)  # the reference model (labkit.labs.lab5.solution)
            err = sweep.calibrate(loopback=loopback).errors("loopback").set_index(["arch", "workers"])["rel_error"]
            per_round.append(
                {
                    name: {
                        "images_per_s": table.loc[(a, n), "images_per_s"],
                        "step_s": table.loc[(a, n), "step_s"],
                        "error": err.loc[(a, n)],
                        "model_bytes": table.loc[(a, n), "model_bytes"],
                        "bytes": {
                            t.task: (t.sent_bytes, t.expected_sent_bytes)
                            for t in tb[(tb["arch"] == a) & (tb["workers"] == n)].itertuples()
                        },
                    }
                    for name, a, n in CONTENDERS
                }
            )
    med = {}
    for name, _, _ in CONTENDERS:
        xs = [rnd[name] for rnd in per_round]
        med[name] = {k: statistics.median(x[k] for x in xs) for k in ("images_per_s", "step_s", "error")}
        med[name]["bytes"] = {
            task: (statistics.median(x["bytes"][task][0] for x in xs), analytic)
            for task, (_, analytic) in xs[0]["bytes"].items()
        }
    m = per_round[0]["ring N=1"]["model_bytes"]
    rows = []
    for name, arch, workers in CONTENDERS:
        b = med[name]["bytes"]
        busiest = max((t for t in b if t not in ("total", "chief:0")), key=lambda t: b[t][0], default=None)
        rows.append(
            {
                "setup": name,
                "images/s": med[name]["images_per_s"],
                "step ms": 1000 * med[name]["step_s"],
                "busiest task": busiest or "-",
                "its MB/step": b[busiest][0] / 1e6 if busiest else 0.0,
                "analytic MB": b[busiest][1] / 1e6 if busiest else 0.0,
                "predicted step ms (loopback link)": 1000 * med[name]["step_s"] * (1 + med[name]["error"]),
            }
        )
    task_ratios = {
        f"{name} {task}": sent / analytic
        for name in ("ps N=2", "ring N=2")
        for task, (sent, analytic) in med[name]["bytes"].items()
        if task in ("ps:0", "worker:0", "total")
    }
    worst = max(task_ratios.items(), key=lambda kv: abs(kv[1] - 1))
    return {
        "title": "MLP at N=2: parameter server vs ring all-reduce (images/s, bytes per task, cost model)",
        "rows": rows,
        "ratios": [
            ratio(
                "ring N=2 / ps N=2 images/s (one machine: shared cores, no scaling expected)",
                med["ring N=2"]["images_per_s"] / med["ps N=2"]["images_per_s"],
                "",
            ),
            ratio(
                "ps:0 bytes sent per step / ring worker's (analytic: N*M / (2(N-1)/N*M) = 2)",
                med["ps N=2"]["bytes"]["ps:0"][0] / med["ring N=2"]["bytes"]["worker:0"][0],
                ">= 1.5",
            ),
            *[
                ratio(f"{name}: bytes sent per step, measured / analytic", value, "<= 1.25")
                for name, value in task_ratios.items()
            ],
            ratio(f"largest |measured / analytic - 1| over tasks ({worst[0]})", abs(worst[1] - 1), "<= 0.25"),
            ratio("cost model (loopback link) |predicted / measured - 1|, ps N=2", abs(med["ps N=2"]["error"]), ""),
            ratio("cost model (loopback link) |predicted / measured - 1|, ring N=2", abs(med["ring N=2"]["error"]), ""),
        ],
        "notes": [
            f"median of {rounds} round(s); {steps} steps per run over 2 epochs, per-worker batch {BATCH}, lr 0.05; "
            f"one intra-op thread per task on {os.cpu_count()} shared cores",
            f"M = {m:,} bytes; bytes from each task's sockets (ss); total rows from the lo counter",
            f"loopback micro-benchmark: alpha {loopback.alpha_s * 1e6:.0f} us, B {loopback.bandwidth / 1e6:,.0f} MB/s",
        ],
    }


if __name__ == "__main__":
    entry(run)
