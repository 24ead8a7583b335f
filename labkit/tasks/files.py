"""A task's files in its run directory: the hello, written first, and the result, written last.

- **The hello** (``<type>-<index>.hello.json``, one line): the task's pid, host and
  TensorFlow/keras/labkit/Python versions, written before TensorFlow is imported, so the
  launcher can refuse a cluster whose nodes disagree, and once the task has found its port free,
  so the launcher takes what answers there for the task's server (``launch.Cluster``). A task forked by
  ``labkit.distributed.launchers.forkserver`` also names the server (``forkserver``).
- **The result** (``<type>-<index>.json``): metrics, steps, timings, series, resource samples
  and how the task ended (``new_result``, ``seal``). The runtime writes it, then ends the
  process at once: TensorFlow's teardown can stall for seconds after the work is done, and
  nothing after the result matters.

Every file is written whole (a temporary file, then a rename): a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from labkit.core import atomic
from labkit.wire.protocol import ENV_FORKSERVER, RESULT_FORMAT, versions

HELLO_KEYS = ("task", "host", "pid", "versions", "program", "started_epoch", "forkserver")
# What a configuration's result file keeps of the process's (labkit.tasks.configs).
IDENTITY_KEYS = (
    "format",
    "program",
    "task",
    "type",
    "index",
    "address",
    "host",
    "pid",
    "versions",
    "threads",
    "started_epoch",
)


def write_json(path: Path, data: dict, indent: int | None = None) -> None:
    """Write atomically (temporary file + rename): a reader never sees half a file."""
    from labkit.notebook.record import to_jsonable

    atomic.write_text(path, json.dumps(to_jsonable(data), indent=indent) + "\n")


def new_result(program: str, task, args: dict, threads: tuple[int, int], started_epoch: float) -> dict:
    """A task process's result as it starts: who it is, its arguments and threads, and empty
    ``metrics``, ``steps``, ``timings`` and ``series`` for the program to fill."""
    result = {
        "format": RESULT_FORMAT,
        "program": program,
        "task": task.name,
        "type": task.type,
        "index": task.index,
        "address": task.address,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "versions": versions(),
        "args": dict(args),
        "threads": {"intra_op": threads[0], "inter_op": threads[1]},
        "started_epoch": started_epoch,
        "metrics": {},
        "steps": {},
        "timings": {},
        "series": {},
    }
    if os.environ.get(ENV_FORKSERVER):  # forked from labkit.distributed.launchers.forkserver, TensorFlow imported there
        result["forkserver"] = json.loads(os.environ[ENV_FORKSERVER])
    return result


def write_hello(path: Path, result: dict) -> None:
    """The hello: alive, with these versions, and the port was free."""
    write_json(path, {k: result[k] for k in HELLO_KEYS if k in result})


def per_second(result: dict) -> None:
    """``steps["local_per_s"]`` from the local steps and the training time, where both are known."""
    steps, timings = result["steps"], result["timings"]
    if steps.get("local") and timings.get("train_s"):
        steps["local_per_s"] = steps["local"] / timings["train_s"]


def seal(result: dict, sampler, total_s: float) -> None:
    """The result's last entries before it is written: total time, steps per second, the
    resource samples and their summaries (over the whole run, and over ``train start``/``train
    end`` where marked), ``ended_epoch``. A task stopped during its start-up keeps no samples:
    importing pandas for a few would only delay the exit the launcher waits for."""
    result["timings"]["total_s"] = total_s
    per_second(result)
    if sampler is not None and result.get("shutdown") == "terminated" and "pandas" not in sys.modules:
        sampler.stop()
        result["samples_skipped"] = "terminated before start-up finished"
    elif sampler is not None:
        sampler.mark("end")
        sampler.stop()
        result["samples"] = sampler.to_dict()
        result["resources"] = sampler.summary()
        if {"train start", "train end"} <= {m.label for m in sampler.marks}:
            result["resources_train"] = sampler.summary("train start", "train end")
    result["ended_epoch"] = time.time()
