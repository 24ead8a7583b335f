"""Interrupting a notebook kernel (the stop button: SIGINT to the kernel through jupyter_client)
while a cluster starts or runs leaves no task process and no bound port, and the kernel lives on.

The cells are what a lab notebook runs: a ``labkit.distributed.launch.Cluster`` of ``labkit.tasks.ps_sgd``
under a live view (``labkit.distributed.live``), waiting. The tasks run in their own sessions, so the
interrupt reaches only the kernel, which must stop them itself."""

import json
import queue
from pathlib import Path

import pytest

from helpers import alive, children, wait_until
from labkit.wire import spec as cluster, events
from _kernel import kernel, ok, reply, text

pytestmark = pytest.mark.cluster

SETUP = """
import json, os, threading
from labkit.wire import spec as cluster
from labkit.distributed import live
from labkit.distributed.launch import Cluster
def make(**options):
    args = {"steps": 10_000_000, "train_limit": 1000, "test_limit": 200, "sample_interval": 0.25}
    return Cluster(cluster.local(ps=1, workers=1), "ps_sgd", args, lab="interrupt", timeout=300, **options)
def note(name, c):
    with open(name + ".tmp", "w") as f:
        json.dump({"ports": [t.port for t in c.spec.tasks()], "pids": list(c.pids().values()),
                   "run_dir": str(c.run_dir)}, f)
    os.replace(name + ".tmp", name)
"""

# Each task a process of its own, importing TensorFlow: start() waits seconds for their servers, a window
# the interrupt lands in. Forked from the fork server (the default, c2 below) they are up in a fraction of
# a second, and an interrupt aimed at start() could arrive after it returned.
STARTING = """
c1 = make(launcher_options={"forkserver": False})
note("starting.json", c1)
c1.start()          # interrupted while the tasks import TensorFlow
"""

RUNNING = """
c2 = make()
with c2, live.watch(c2, live=True, refresh=0.5):
    note("running.json", c2)
    c2.wait()       # interrupted while the workers train
"""

AFTER = """
print(json.dumps({"status": [c1.status(), c2.status()],
                  "threads": sorted(t.name for t in threading.enumerate() if t.name.startswith("labkit"))}))
"""


def _interrupt(km, kc, code: str, ready, timeout: float = 240) -> list[int]:
    """Run ``code``, interrupt it once ``ready()`` returns the task pids; return them. A cell
    that ends before (its cluster failed to start, say) fails the test with the cell's error."""
    kc.execute(code)

    def ready_or_ended():
        try:
            msg = kc.get_shell_msg(timeout=0)
        except queue.Empty:
            return ready()
        content = msg["content"]
        raise AssertionError(
            f"the cell ended before the interrupt: {content.get('status')} "
            f"{content.get('ename', '')}: {content.get('evalue', '')}\n"
            + "\n".join(content.get("traceback", []))[-3000:]
        )

    pids = wait_until(ready_or_ended, timeout, 0.1, "the cluster to get to the point of the interrupt")
    km.interrupt_kernel()
    content = reply(kc, timeout=60)
    assert content["status"] == "error" and content["ename"] == "KeyboardInterrupt", content
    return pids


def _gone(kernel_pid: int, pids: list[int], ports: list[int]) -> None:
    survivors = alive(pids)
    assert not survivors, f"task processes survived the interrupt: {survivors}"
    left = children(kernel_pid)
    assert not left, f"the kernel still has children: {[(p.pid, p.cmdline()[:4]) for p in left]}"
    assert all(cluster.port_is_free(p) for p in ports), f"a port of {ports} is still bound"


def test_interrupting_the_kernel_leaves_nothing_running(tmp_path):
    with kernel(tmp_path, LABKIT_RUNS=tmp_path / "runs") as (km, kc):
        kernel_pid = km.provisioner.process.pid
        ok(kc, SETUP)

        def spawned():  # every task process exists (they are still importing TensorFlow)
            if not (tmp_path / "starting.json").exists():
                return None
            kids = [p for p in children(kernel_pid, recursive=False) if "labkit.tasks.ps_sgd" in p.cmdline()]
            return [p.pid for p in kids] if len(kids) >= 2 else None  # the ps and the worker, not another child

        pids = _interrupt(km, kc, STARTING, spawned)
        _gone(kernel_pid, pids, json.loads((tmp_path / "starting.json").read_text())["ports"])

        def training():  # servers up (start() returned), the worker in its loop: its first evaluation's event
            if not (tmp_path / "running.json").exists():
                return None
            running = json.loads((tmp_path / "running.json").read_text())
            said = events.read_all(Path(running["run_dir"]) / "worker-0.events.jsonl")
            return running["pids"] if any(e.kind == "eval" for e in said) else None

        pids = _interrupt(km, kc, RUNNING, training)
        _gone(kernel_pid, pids, json.loads((tmp_path / "running.json").read_text())["ports"])

        after = json.loads(text(ok(kc, AFTER)).strip().splitlines()[-1])  # the kernel lives on
        starting, running = after["status"]
        # an interrupt during start() may land between a task's spawn and its record: that task reads "new",
        # though its process was stopped with the rest (checked above, by pid and port)
        assert set(starting.values()) <= {"terminated", "killed", "new"} and "new" != starting["ps:0"], starting
        assert set(running.values()) <= {"terminated", "killed"}, running
        assert after["threads"] == [], f"live view or sampler threads left running: {after['threads']}"
