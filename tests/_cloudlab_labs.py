"""Run on node0 of the emulated CloudLab nodes by tests/infra/test_cloudlab_path.py, as the TA's
notebook would: Labs 2, 3 and 5's experiment functions with ``hosts`` = the hosts file, at
small sizes; prints one JSON line with each lab's headline comparison and run folders."""

import json
import sys

from labkit.labs.lab2 import experiment as sync_async
from labkit.labs.lab3 import experiment as sparse_lr
from labkit.labs.lab5 import experiment as ring_vs_ps

hosts = sys.argv[1]
out = {}

# Lab 2: sync vs async SGD on report 002's cluster2 (1 ps + 3 workers), one cluster, both modes
study = sync_async.sweep(
    modes=("sync", "async"),
    deploys=("cluster2",),
    batch_sizes=(50,),
    max_steps=150,
    train_limit=3000,
    test_limit=500,
    eval_every=75,
    hosts=hosts,
    progress=False,
    log=None,
    timeout=300,
)
table = study.summary().reset_index()
out["lab2"] = {
    r["mode"]: {
        "global_steps_per_s": r["global_steps_per_s"],
        "iterations": r["iterations"],
        "test_accuracy": r["test_accuracy"],
    }
    for _, r in table.iterrows()
}
out["lab2_run"] = str(study.runs[0].result.run_dir)
out["lab2_hosts"] = {t.name: t.result["address"] for t in study.runs[0].result if t.result}

# Lab 3: sparse LR at click-through scale, sync vs async, 1 ps + 2 workers
exp = sparse_lr.train(
    ["sync:100", "async:100"],
    workers=2,
    hosts=hosts,
    num_features=100_000,
    train_rows=20_000,
    test_rows=2_000,
    samples=4_000,
    eval_every=2_000,
    progress=False,
    timeout=300,
)
out["lab3"] = json.loads(exp.summary().reset_index().to_json(orient="records"))

# Lab 5: ring all-reduce vs parameter server, 2 workers, the small model
runs = [
    ring_vs_ps.run_one(arch, "mlp", 2, hosts=hosts, steps=10, epochs=1, train_limit=2000, test_limit=200, timeout=300)
    for arch in ("ps", "ring")
]
out["lab5"] = {
    r.arch: {"wall_s": r.result.wall_s, "step_time_s": r.train.get("step_time_s"), "bytes": r.total_bytes()}
    for r in runs
}
print(json.dumps(out, default=float))
