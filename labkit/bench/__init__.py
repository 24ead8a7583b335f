"""``make bench``: benchmarks that report ratios measured side by side in one run.

Absolute times drift on shared machines; ratios of contenders timed in the same run
do not (much). Each benchmark is a module here with ``run(quick: bool) -> dict``, registered
by name in ``BENCHMARKS`` (a ``labkit.core.registry.Registry``, by reference: a benchmark's module
is imported only in the process that runs it):

    {"title": str,
     "rows":   [{column: value, ...}, ...],              # what was measured, one row per contender
     "ratios": [{"name": str, "value": float, "goal": str, "met": bool | None}, ...],
     "notes":  [str, ...]}

The harness runs each benchmark in its own process (they set thread pools and
collectives differently, and TensorFlow allows that only once per process), prints
Markdown tables and writes ``bench.md`` and ``bench.json`` under the output folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from labkit.core import scratch
from labkit.core.registry import Registry

# module name -> "module:run"; each module defines run(quick) and ends with `entry(run)`. The
# aliases are the names some benchmarks had before (``labkit bench ring_vs_ps`` still runs one).
BENCHMARKS = Registry(
    "benchmark",
    builtin={
        "lr_loop": "labkit.bench.lr_loop:run",
        "sparse_step": "labkit.bench.sparse_step:run",
        "launcher": "labkit.bench.launcher:run",
        "grader": "labkit.bench.grader:run",
        "slurm_grader": "labkit.bench.slurm_grader:run",
        "lenet": "labkit.bench.lenet:run",
        "mlp_exchange": "labkit.bench.mlp_exchange:run",
        "links": "labkit.bench.links:run",
        "startup": "labkit.bench.startup:run",
        "warm_pages": "labkit.bench.warm_pages:run",
    },
    aliases={
        "sparse": "sparse_step",
        "grading": "grader",
        "slurm_grading": "slurm_grader",
        "ring_vs_ps": "mlp_exchange",
        "netem": "links",
        "pages": "warm_pages",
    },
)


def ratio(name: str, value: float, goal: str) -> dict:
    """A ratio row. ``goal`` is '<= X' or '>= X' (or '' for information only)."""
    value, met = float(value), None  # plain floats: numpy scalars would not serialize as JSON
    if goal:
        op, x = goal.split()
        met = value <= float(x) if op == "<=" else value >= float(x)
    return {"name": name, "value": value, "goal": goal, "met": met}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def to_markdown(result: dict) -> str:
    lines = [f"## {result['title']}", ""]
    rows = result.get("rows", [])
    if rows:
        cols = list(dict.fromkeys(k for r in rows for k in r))
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
        lines.append("")
    if result.get("ratios"):
        lines += ["| ratio | value | goal | met |", "|---|---|---|---|"]
        for r in result["ratios"]:
            met = {True: "yes", False: "**no**", None: "-"}[r["met"]]
            lines.append(f"| {r['name']} | {r['value']:.3g} | {r['goal'] or '-'} | {met} |")
        lines.append("")
    lines += [f"- {n}" for n in result.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"


def run_one(name: str, quick: bool, timeout: float) -> dict:
    """Run one benchmark in a child process that is killed with its tree on timeout."""
    from labkit.core.proc import OwnedProcess, tail

    with scratch.folder(f"labkit-bench-{name}-") as tmp:
        out, log = Path(tmp) / "result.json", Path(tmp) / "log.txt"
        module = BENCHMARKS.reference(name).partition(":")[0]
        cmd = [sys.executable, "-m", module, "--json", out] + (["--quick"] if quick else [])
        t0 = time.monotonic()
        with OwnedProcess(cmd, log, timeout=timeout) as p:
            try:
                rc = p.wait()
            except subprocess.TimeoutExpired as e:  # wait() has killed the tree
                return {"title": name, "error": f"{type(e).__name__}: {e}", "log_tail": tail(log)}
        if rc != 0 or not out.exists():
            return {"title": name, "error": f"exit code {rc}", "log_tail": tail(log)}
        result = json.loads(out.read_text())
        result["seconds"] = round(time.monotonic() - t0, 1)
        return result


def run_all(names, out: Path, quick: bool = False, timeout: float = 1800) -> int:
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    names = [BENCHMARKS.canonical(n) for n in names]
    out.mkdir(parents=True, exist_ok=True)
    results, failed = {}, 0
    for name in names:
        print(f"... {name}", flush=True)
        res = results[name] = run_one(name, quick, timeout)
        if "error" in res:
            failed += 1
            print(f"## {name}: FAILED ({res['error']})\n{res.get('log_tail', '')}\n", flush=True)
        else:
            print(to_markdown(res), flush=True)
    md = "# labkit benchmarks\n\n" + "\n".join(
        to_markdown(r) if "error" not in r else f"## {n}: FAILED\n\n```\n{r['error']}\n{r.get('log_tail', '')}\n```\n"
        for n, r in results.items()
    )
    (out / "bench.md").write_text(md)
    (out / "bench.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'bench.md'} and {out / 'bench.json'}")
    return 1 if failed else 0


def entry(run) -> None:
    """``python -m labkit.bench.NAME [--quick] [--json PATH]``: run one benchmark, print it, save it."""
    from labkit.core.proc import unwind_on_signals

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    unwind_on_signals()  # the harness's SIGTERM (or its death) stops what this benchmark started
    result = run(quick=args.quick)
    print(to_markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
