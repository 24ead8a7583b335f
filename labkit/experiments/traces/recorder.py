"""Record the kit's traces again: ``python -m labkit.experiments.traces.recorder NAME...`` (``--list`` names them).

Each recorder runs the call its lab's section makes, at the notebook's default parameters, and
writes ``labkit/experiments/traces/<NAME>.json`` with its provenance. The emulated ones start network
namespaces: on a shared machine run them under its lock (``flock /work/system-tests.lock``).
Paths of the machine that recorded them are left out of what is written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

from labkit.core.registry import Registry
from labkit.experiments.traces import FOLDER

RECORDERS = Registry("trace recorder")
LAB2_SHARES = dict(max_steps=2000, learning_rate=0.5, train_limit=10000, test_limit=2000, seed=0, timeout=600)
LAB3_DENSE = dict(
    workers=2,
    hosts=None,
    data="click",
    num_features=1_000_000,
    train_rows=200_000,
    test_rows=10_000,
    learning_rate=0.5,
    seed=0,
    click_seed=0,
)


def provenance(call: str) -> dict:
    """The call, labkit's commit (and whether the tree had changes), TensorFlow's version, the
    cores and the load of this machine, and when."""
    import tensorflow as tf

    from labkit.core.proc import usable_cores

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    git = lambda *a: subprocess.run(["git", "-C", root, *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
    return {
        "recorded_by": call,
        "labkit_commit": git("rev-parse", "HEAD"),
        "uncommitted_changes": bool(git("status", "--porcelain", "--", "labkit")),
        "tensorflow": tf.__version__,
        "cores": usable_cores(),
        "load_1min": round(os.getloadavg()[0], 2),
        "recorded_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "note": "recorded on the kit's developers' machine, shared with other work (load_1min)",
    }


def _frame(df) -> list:
    return json.loads(df.to_json(orient="records"))


@RECORDERS.register("lab2_emulated_shares")
def lab2_emulated_shares() -> dict:
    from labkit.experiments import sync_async

    df = sync_async.emulated_shares(["1gbit", "10mbit"], "cluster2", 50, **LAB2_SHARES)
    if not len(df):
        raise RuntimeError("links cannot be emulated here (see above); nothing recorded")
    call = f"labkit.experiments.sync_async.emulated_shares(['1gbit', '10mbit'], 'cluster2', 50, **{LAB2_SHARES})"
    return {"provenance": provenance(call), "frame": _frame(df)}


@RECORDERS.register("lab3_emulated_dense")
def lab3_emulated_dense() -> dict:
    from labkit.experiments import sparse_lr

    df = sparse_lr.emulated_dense(["1gbit", "100mbit"], batch_size=100, samples=4_000, **LAB3_DENSE)
    if not len(df):
        raise RuntimeError("links cannot be emulated here (see above); nothing recorded")
    call = f"labkit.experiments.sparse_lr.emulated_dense(['1gbit', '100mbit'], batch_size=100, samples=4000, **{LAB3_DENSE})"
    return {"provenance": provenance(call), "frame": _frame(df)}


@RECORDERS.register("lab5_emulated")
def lab5_emulated() -> dict:
    from labkit.experiments import ring_vs_ps

    e = ring_vs_ps.emulated("100mbit", "cifar_cnn", (1, 2, 3), steps=12, cpus_per_node="auto", progress=False)
    if e is None:
        raise RuntimeError("links cannot be emulated here (see above); nothing recorded")
    call = "labkit.experiments.ring_vs_ps.emulated('100mbit', 'cifar_cnn', (1, 2, 3), steps=12, cpus_per_node='auto')"
    return ring_vs_ps.emulated_recording(e, provenance(call))


@RECORDERS.register("lab5_ps_failure")
def lab5_ps_failure() -> dict:
    from labkit.experiments import ring_vs_ps

    out = ring_vs_ps.ps_failure(3, "lenet5", progress=False)
    keep = ("model", "workers", "batch_size", "summary", "steps", "kills", "events", "failure")
    return {
        "provenance": provenance("labkit.experiments.ring_vs_ps.ps_failure(3, 'lenet5')"),
        **{k: out[k] for k in keep},
        "_run_dir": out["run_dir"],
    }


def scrub(data: dict) -> dict:
    """``data`` without the recording machine's paths (the run folder, the runs' root)."""
    run_dir = data.pop("_run_dir", None)
    text = json.dumps(data, default=str)
    for path in filter(None, [run_dir, os.environ.get("LABKIT_RUNS")]):
        text = text.replace(str(path).rstrip("/") + "/", "")
    text = re.sub(r"\(log: [^)]*/([^/)]+)\)", r"(log: \1)", text)
    return json.loads(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m labkit.experiments.traces.recorder", description=__doc__.splitlines()[0]
    )
    p.add_argument("names", nargs="*", help="traces to record (default: none; --list names them)")
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    if args.list or not args.names:
        print("\n".join(sorted(RECORDERS)))
        return 0
    for name in args.names:
        data = scrub(RECORDERS[name]())
        (FOLDER / f"{name}.json").write_text(json.dumps(data, indent=1))
        print(f"wrote {FOLDER / f'{name}.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
