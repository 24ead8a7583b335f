"""Record a lab's traces again: ``python -m labkit.labs.<lab>.experiment NAME...`` (``--list`` names them).

A lab's experiment module keeps its recorders (``RECORDERS``: what -> a function that runs the
call its section makes, at the notebook's default parameters, and returns the trace) and hands
them to ``main``, which writes ``labkit/labs/<lab>/traces/<what>.json`` with the provenance. The
emulated ones start network namespaces: on a shared machine run them under its lock
(``flock /work/system-tests.lock``). Paths of the machine that recorded them are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

from labkit.experiments import traces


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


def records(df) -> list:
    """A data frame as the trace keeps it: a list of records, JSON's values."""
    return json.loads(df.to_json(orient="records"))


def scrub(data: dict) -> dict:
    """``data`` without the recording machine's paths (the run folder, the runs' root)."""
    run_dir = data.pop("_run_dir", None)
    text = json.dumps(data, default=str)
    for path in filter(None, [run_dir, os.environ.get("LABKIT_RUNS")]):
        text = text.replace(str(path).rstrip("/") + "/", "")
    text = re.sub(r"\(log: [^)]*/([^/)]+)\)", r"(log: \1)", text)
    return json.loads(text)


def main(lab: str, recorders: dict, argv=None) -> int:
    """The command line of ``lab``'s recorders (``{what: function}``): records the traces named,
    or lists them."""
    p = argparse.ArgumentParser(prog=f"python -m labkit.labs.{lab}.experiment", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="traces to record (default: none; --list names them)")
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    if args.list or not args.names:
        print("\n".join(sorted(recorders)))
        return 0
    unknown = sorted(set(args.names) - set(recorders))
    if unknown:
        p.error(f"{lab} records no trace {', '.join(unknown)}; it records: {', '.join(sorted(recorders))}")
    for what in args.names:
        file = traces.path(f"{lab}_{what}")
        file.parent.mkdir(exist_ok=True)
        file.write_text(json.dumps(scrub(recorders[what]()), indent=1))
        print(f"wrote {file}", file=sys.stderr)
    return 0
