"""Slurm across 3 emulated CloudLab nodes (``labkit.infra.cloudlab_local`` + ``labkit.infra.minislurm``):
slurmctld on node0 and a slurmd on every node, each in its node's namespaces (its own host
name and address, so Debian's slurmd needs no multiple-slurmd build), one munged they share.

The TA is the account ``ta`` on node0 (``LocalCloudLab.sh``, as after ``ssh node0``), with the
kit's checkout in the home every node mounts (``shared_home``: a cluster's NFS home), its
``.venv`` a link to this machine's (the stand-in for ``make setup`` that tests/infra/test_cloudlab_path.py
also uses) and the data from the course mirror. The instructor is root on node0 and grades
from this checkout, which every node sees at the same path.

After the module: no daemon, job, step or task of the Slurm, no process in the nodes, no
namespace, no file (tests/_cloudlab.py checks), even when a test failed.
"""

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from _cloudlab import checkout, cloudlab, why_not
from helpers import wait_until, wait_while
from labkit.infra.minislurm import MiniSlurm, missing
from labkit.measure.sockets import netns_id

pytestmark = [pytest.mark.slurm, pytest.mark.cloudlab, pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NAMES = ["node0", "node1", "node2"]
LR_PARAM_BYTES = (784 + 1) * 10 * 4  # Lab 2's model: 784 x 10 weights and 10 biases, float32
SLURMD_TIMEOUT_S = 10  # a node whose slurmd is silent this long is down (Slurm's default: 300)


@pytest.fixture(scope="module")
def slurm3():
    """3 nodes with Slurm idle on them, and the kit in the account's shared home."""
    mirror = os.environ.get("LABKIT_DATA_MIRROR")
    if missing():
        pytest.skip(f"no Slurm to test with: {missing()}")
    if not mirror:
        pytest.skip("LABKIT_DATA_MIRROR is not set: the nodes fetch the data from it (see README, Data)")
    t0 = time.monotonic()
    with cloudlab(3, "1gbit", shared_home=True) as lab:
        with MiniSlurm(nodes=lab, slurmd_timeout=SLURMD_TIMEOUT_S) as s:
            up = time.monotonic() - t0
            checkout(lab, mirror)
            print(
                f"\n3 emulated nodes with Slurm idle in {up:.1f} s (nodes {lab.up_s:.1f} s, Slurm {s.up_s:.1f} s); "
                f"with the kit and data in the shared home: {time.monotonic() - t0:.1f} s"
            )
            s.mirror = mirror
            yield lab, s
            _queue_drains(s)
        assert not s.step_daemons(), "slurmstepd outlived the Slurm"
        assert not [p for p in _in_nodes(lab) if p.info["name"] in ("slurmctld", "slurmd", "munged")]


def _in_nodes(lab) -> list[psutil.Process]:
    nets = {n.netns for n in lab.network.nodes.values()}
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            if netns_id(p.pid) in nets:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _tasks(lab, node: str | None = None) -> list[psutil.Process]:
    """The kit's task processes in the nodes (or in ``node``)."""
    nets = {n.netns for name, n in lab.network.nodes.items() if node in (None, name)}
    return [
        p for p in _in_nodes(lab) if netns_id(p.pid) in nets and "labkit.tasks." in " ".join(p.info["cmdline"] or [])
    ]


def _salloc(lab, script: str, args: str = "--nodes=3 --ntasks=3") -> subprocess.Popen:
    """``salloc ARGS python -`` by the TA on node0, in the kit's checkout, fed ``script``."""
    run = subprocess.Popen(
        lab.command("node0", f"cd labkit && exec salloc {args} --time=10 .venv/bin/python -"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run.stdin.write(script)
    run.stdin.close()
    run.stdin = None
    return run


def _lines(run: subprocess.Popen) -> queue.Queue:
    """``run``'s stdout, line by line, read in a thread (so a wait for a line can time out)."""
    lines = queue.Queue()

    def read():
        for line in run.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _line(lines: queue.Queue, start: str, timeout: float = 180) -> str:
    """The next line that starts with ``start``, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no line {start!r} within {timeout:.0f} s") from None
        if line is None:
            raise AssertionError(f"the allocation's script ended without a line {start!r}")
        if line.startswith(start):
            return line.strip()


LAB2 = """
import json, os
from labkit.labs.lab2 import experiment as sync_async
run = sync_async.run("sync", "cluster", 50, max_steps=60, eval_every=30, learning_rate=0.5, seed=0, timeout=300,
                     log=None, launcher="slurm", train_limit=2000, test_limit=500, sample_interval=0.25)
print(json.dumps({"ended": [t.ended for t in run.result], "host": {t.name: t.host for t in run.result},
                  "ran_on": {t.name: t.result["host"] for t in run.result}, "global_step": run.global_step(),
                  "local": run.local_steps(), "job": os.environ["SLURM_JOB_ID"],
                  "commands": [t.log_path.read_text().split("\\n", 1)[0] for t in run.result]}))
"""


def _queue_drains(s) -> None:
    """No job or step is left: an ended allocation may still be COMPLETING (Slurm's epilog, its
    processes reaped) for a moment on a loaded machine; past 30 s one is left behind."""
    wait_while(lambda: s.jobs() + s.steps(), 30, 0.2, "the ended jobs to leave Slurm's queue")


def test_a_labs_cluster_runs_as_job_steps_over_the_nodes_each_on_its_own_nic(slurm3):
    """``salloc --nodes=3``, then Lab 2's cluster (1 ps, 2 workers) as one step per task, placed
    as SlurmClusterResolver places them: one per node; the gradients cross every node's lan0."""
    lab, s = slurm3
    before = {n: lab.network.counters(n) for n in NAMES}
    t0 = time.monotonic()
    run = _salloc(lab, LAB2)
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, out[-2000:] + err[-5000:]
    got = json.loads(out.strip().splitlines()[-1])
    print(f"\nLab 2 (sync, 60 steps) in salloc --nodes=3: {time.monotonic() - t0:.1f} s")
    assert got["host"] == {"ps:0": "node0", "worker:0": "node1", "worker:1": "node2"}
    assert got["ran_on"] == got["host"]  # each task's own gethostname(): it ran on its node
    assert all(
        f"srun --jobid={got['job']} --nodes=1 --ntasks=1 --nodelist={node} " in cmd
        for cmd, node in zip(got["commands"], got["host"].values())
    )
    assert got["ended"] == ["done-queue", "exited", "exited"]
    g, local = got["global_step"], got["local"]
    assert g >= 60 and sorted(local) == ["worker:0", "worker:1"] and all(abs(n - g) <= 1 for n in local.values())

    moved = {
        n: {
            nic: (after[0] - before[n].get(nic, (0, 0))[0], after[1] - before[n].get(nic, (0, 0))[1])
            for nic, after in lab.network.counters(n).items()
        }
        for n in NAMES
    }
    print("bytes (sent, received) per node and NIC:", json.dumps(moved))
    for n in ("node1", "node2"):  # each worker pulls the weights and pushes a gradient per step, over its lan0
        sent, received = moved[n]["lan0"]
        assert sent >= local[f"worker:{int(n[-1]) - 1}"] * LR_PARAM_BYTES, (n, moved[n])
        assert received >= local[f"worker:{int(n[-1]) - 1}"] * LR_PARAM_BYTES, (n, moved[n])
        assert sum(moved[n]["lo"]) < 0.01 * sum(moved[n]["lan0"]), (n, moved[n])  # none on the node's loopback
    sent, received = moved["node0"]["lan0"]  # the ps: both workers' traffic
    assert min(sent, received) >= sum(local.values()) * LR_PARAM_BYTES, moved["node0"]
    _queue_drains(s)


def test_make_grade_grades_a_class_as_a_job_array_over_all_nodes(slurm3, tmp_path):
    """The instructor, root on node0, runs ``make grade ... SLURM=debug``: three Lab 1
    submissions (one solved, the released copy, one that raises) as one array, one task per
    node, each in the bubblewrap sandbox (its own network namespace, inside the node's)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from helpers import read_csv, small_rubric
    from labkit.grading.kit.release import release_notebook
    from labkit.grading.run.sandbox import SANDBOXES

    if SANDBOXES["bwrap"].unavailable():
        pytest.skip(f"{SANDBOXES['bwrap'].unavailable()} (.ci/run installs it)")
    lab, s = slurm3
    reference = nbformat.read(REPO / "labkit" / "labs" / "lab1" / "01_single_node_lr.ipynb", as_version=4)
    released, _ = release_notebook(reference, "01_single_node_lr.ipynb")
    raises = new_notebook(cells=[new_code_cell("import labkit\n1 / 0")], metadata=reference.metadata)
    for student, nb in (("alice", reference), ("bob", released), ("carol", raises)):
        (tmp_path / "subs" / student).mkdir(parents=True)
        nbformat.write(nb, str(tmp_path / "subs" / student / "01_single_node_lr.ipynb"))
    out, rubric = tmp_path / "out", small_rubric(tmp_path)  # Lab 1 at test size: what Slurm does is the same
    t0 = time.monotonic()
    grade_args = f"--out {shlex.quote(str(out))} --rubric {shlex.quote(str(rubric))}"
    done = lab.sh(
        "node0",
        f"cd {shlex.quote(str(REPO))} && make grade DATA_MIRROR={shlex.quote(s.mirror)} "
        f"SUBMISSIONS={shlex.quote(str(tmp_path / 'subs'))} SLURM={s.partition} "
        f"SLURM_ARGS=--cpus-per-task=2 LAB=lab1 GRADE_ARGS={shlex.quote(grade_args)}",
        user=False,
        timeout=900,
    )
    print(f"\nmake grade, 3 Lab 1 submissions as a Slurm array on 3 nodes: {time.monotonic() - t0:.1f} s")
    print(done.stdout[-1500:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(
        r"submitted Slurm array \d+: 3 notebook\(s\) of lab1, --mem=\d+M --time=\d+ in partition debug", done.stdout
    ), done.stdout
    ran = {}
    for f in sorted((out / ".grader" / "slurm").glob("batch-0-*.out")):
        said = re.search(r"\[slurm-array\] (\w+)/lab1 on (node\d): (\w+)", f.read_text())
        assert said, f.read_text()
        ran[said.group(1)] = (said.group(2), said.group(3))
    assert sorted(node for node, _ in ran.values()) == NAMES, ran  # --cpus-per-task=2: one notebook per node
    rows = {(r["student"], r["check"]): r for r in read_csv(out / "grades.csv")}
    points = {st: sum(float(r["points"]) for (who, _), r in rows.items() if who == st) for st in ran}
    assert [rows[st, "execution"]["status"] for st in ("alice", "bob", "carol")] == ["ok", "error", "error"], ran
    assert "ZeroDivisionError" in rows["carol", "execution"]["reason"], rows["carol", "execution"]
    assert points["alice"] > max(points["bob"], points["carol"]), points
    _queue_drains(s)


FAULTS = """
from labkit.wire import spec as cluster
from labkit.distributed.launch import Cluster, TaskFailed
for case in ("a step cancelled", "a node's slurmd killed"):
    c = Cluster(cluster.local(ps=1, workers=1), "ps_sgd", {"steps": 10**7, "train_limit": 1000, "test_limit": 200},
                lab="faults", timeout=300)
    c.start()
    print("running", c.run_dir, flush=True)
    try:
        c.wait()
        print("no error", flush=True)
    except TaskFailed as e:
        print("ERROR " + str(e).replace("\\n", " | "), flush=True)
"""


def _step_of(s, task: str, timeout: float = 60) -> str:
    def step():
        return next((line.split()[0] for line in s.steps() if line.endswith(f"-{task}")), None)

    return wait_until(step, timeout, 0.2, lambda: f"a step of {task}: {s.steps()}")


def test_a_cancelled_step_and_a_killed_slurmd_give_clear_errors_and_leave_an_empty_queue(slurm3):
    """Inside one allocation, a cluster of a ps (node0) and a worker (node1), twice: first the
    TA cancels the worker's step; then node1's slurmd is killed mid-run, and Slurm, once the
    node is silent for SlurmdTimeout, declares it down and ends the job. Each error says what
    happened, on which node, and what to do; restarting slurmd as it says stops what the job
    left on node1, and the node returns to service."""
    lab, s = slurm3
    run = _salloc(lab, FAULTS, "--nodes=2 --ntasks=2")
    lines = _lines(run)
    try:
        _line(lines, "running")
        step = _step_of(s, "worker-0")
        assert lab.sh("node0", f"scancel {step}").returncode == 0
        error = _line(lines, "ERROR")
        assert "task worker:0 was killed by SIGKILL on node1" in error, error
        assert f"its step {step} on node1 was cancelled (`scancel`" in error and "still holds its nodes" in error, error

        _line(lines, "running")
        _step_of(s, "worker-0")
        assert _tasks(lab, "node1"), "the worker does not run on node1"
        t0 = time.monotonic()
        os.kill(s.slurmd("node1").pid, signal.SIGKILL)
        error = _line(lines, "ERROR", timeout=SLURMD_TIMEOUT_S + 120)
        print(
            f"\na node's slurmd killed: the run failed {time.monotonic() - t0:.1f} s later (SlurmdTimeout "
            f"{SLURMD_TIMEOUT_S} s): {error}"
        )
        assert "Slurm lost node1 (down*: Not responding): its slurmd stopped answering" in error, error
        assert "On node1, restart slurmd" in error and "--exclude=node1" in error, error
        run.wait(60)
    finally:
        run.kill()
        run.wait()
    _queue_drains(s)
    left = _tasks(lab, "node1")  # the worker, if it still runs: a node without its slurmd cannot stop it
    print(f"left on node1 by the lost node: {[p.info['cmdline'][:4] for p in left]}")
    s.start_slurmd("node1")  # what the error says to do
    wait_while(
        lambda: (
            [p.info["cmdline"][:4] for p in _tasks(lab)]
            or "idle" not in s.run("sinfo", "--noheader", "--nodes=node1", "--format=%t")
        ),
        60,
        0.5,
        "node1's slurmd to stop what was left there and the node to be idle",
    )
    assert s.run("sinfo", "--noheader", "--Node", "--format=%N %t").split() == [w for n in NAMES for w in (n, "idle")]
    _queue_drains(s)


def test_make_cloudlab_local_with_slurm_leaves_nothing_when_killed_with_sigkill(tmp_path):
    """``make cloudlab-local SLURM=1`` is ``python -m labkit cloudlab-local --slurm``: killed with
    SIGKILL while a job runs, its nodes' holders stop slurmctld, the slurmd's, munged, the job's
    step daemon and its task, and remove its folder (the Slurm's configuration and logs)."""
    if why_not() or missing():
        pytest.skip(why_not() or missing())
    before = set(Path(tempfile.gettempdir()).glob("labkit-cloudlab-*"))
    owner = subprocess.Popen(
        [sys.executable, "-m", "labkit", "cloudlab-local", "--nodes", "2", "--slurm"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for line in owner.stdout:
            if "holding the nodes" in line:
                break
        tree = psutil.Process(owner.pid).children(recursive=True)
        names = sorted(p.name() for p in tree if p.name() in ("slurmctld", "slurmd", "munged"))
        assert names == ["munged", "slurmctld", "slurmd", "slurmd"], names
        ctld = next(p for p in tree if p.name() == "slurmctld")
        job = subprocess.run(
            [
                "nsenter",
                f"--target={ctld.pid}",
                "--net",
                "--uts",
                "--mount",
                "--",
                "sbatch",
                "--parsable",
                "--nodelist=node1",
                "--wrap",
                "sleep 600",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert job.returncode == 0, job.stderr
        nets = {netns_id(p.pid) for p in tree} - {netns_id()}
        wait_until(
            lambda: [p for p in psutil.process_iter(["name"]) if p.info["name"] == "sleep" and netns_id(p.pid) in nets],
            60,
            0.2,
            "the job to start",
        )
        inside = [p for p in psutil.process_iter() if netns_id(p.pid) in nets]
    finally:
        owner.kill()
        owner.wait()
    wait_while(lambda: [p.pid for p in inside if _alive(p)], 30, 0.2, "every process in the nodes to end with them")
    assert set(Path(tempfile.gettempdir()).glob("labkit-cloudlab-*")) == before


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
