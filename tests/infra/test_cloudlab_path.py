"""The TA's path of docs/cluster.md, word for word, on 4 emulated CloudLab nodes with real sshd
(``labkit.infra.cloudlab_local``), and its faults.

The TA is the account ``ta`` logged in on node0 (``LocalCloudLab.sh``, as after ``ssh node0``),
with the kit's checkout in ``~/labkit`` there (this checkout's files, as ``git clone`` gives them)
and its ``.venv``. Two stand-ins, both said where they happen: ``make setup`` on a node is
``ln -s`` of this machine's ``.venv`` (a full TensorFlow install per node would take minutes and
gigabytes; ``tests/infra/test_cloudlab_profile.py`` runs the real install path), and the data comes
from the course mirror ``LABKIT_DATA_MIRROR`` (the nodes reach no internet here).

Afterwards nothing is left: no process in any node, no namespace, no mount, no account, no file.
"""

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from _cloudlab import checkout, cloudlab
from helpers import data_mirror, wait_until, wait_while
from labkit.measure.dstat import DSTAT_VERSION
from labkit.notebook.record import read_records

pytestmark = [pytest.mark.cloudlab, pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
VENV = sys.prefix
NAMES = ["node0", "node1", "node2", "node3"]
# the test's `make setup` (module docstring); written for CLUSTER_ARGS="..." in the TA's shell, so the
# node's shell gets the venv's path in double quotes (the checkout's path may have a space)
INSTALL = f"--install 'ln -sfn \\\"{VENV}\\\" .venv'"
TINY = "--steps 100000 --train-limit 1000 --test-limit 200 --sample-interval 0.25"


@pytest.fixture(scope="module")
def lab():
    """4 nodes; node0's account has the kit's checkout in ~/labkit, with its .venv and data."""
    mirror = data_mirror()
    t0 = time.monotonic()
    with cloudlab(4, "1gbit") as lab:
        up = time.monotonic() - t0
        checkout(lab, mirror)
        lab.mirror, lab.up_with_checkout = mirror, time.monotonic() - t0
        print(f"\n4 emulated nodes up in {up:.1f} s (checkout and data on node0: {lab.up_with_checkout:.1f} s)")
        yield lab
    assert not _tasks(lab), "tasks outlived the nodes"


GUIDE = REPO / "docs" / "cluster.md"


def guide(section: int, starting: str) -> list[str]:
    """The command lines of the guide's section ``section`` (its ```bash blocks) that start with
    ``starting``, word for word: the test runs what the TA reads, and fails when the guide changes."""
    text = GUIDE.read_text()
    body = re.split(r"^## ", text, flags=re.M)
    part = next(b for b in body if b.startswith(f"{section}. "))
    lines = [ln for block in re.findall(r"```bash\n(.*?)```", part, flags=re.S) for ln in block.splitlines()]
    found = [ln for ln in lines if ln.startswith(starting)]
    assert found, f"section {section} of {GUIDE.name} has no command starting {starting!r}"
    return found


def ta(lab, command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """A command of the guide, as written, run by the TA on node0 in the kit's checkout (~/labkit)."""
    return lab.sh("node0", f"cd labkit && {command}", timeout=timeout)


def _tasks(lab) -> list[psutil.Process]:
    """The kit's task processes running in any node."""
    mine = {n.netns for n in lab.network.nodes.values()} if lab.network.nodes else set()
    from labkit.measure.sockets import netns_id

    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if "labkit.tasks." in " ".join(p.info["cmdline"] or []) and netns_id(p.pid) in mine:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _no_tasks_left(lab, within: float = 40) -> None:
    wait_while(lambda: _tasks(lab), within, 0.2, "every task on the nodes to end")


def test_the_guide_on_four_nodes(lab):
    # 1. a hosts file from CloudLab's node list, and the host keys (sections 1-2)
    done = ta(lab, "getent hosts node0 node1 node2 node3 > ~/hosts.txt && cat ~/hosts.txt")
    assert [ln.split()[0] for ln in done.stdout.splitlines()] == ["10.10.1.1", "10.10.1.2", "10.10.1.3", "10.10.1.4"]
    done = ta(
        lab,
        "ssh-keyscan -H $(awk '{print $1}' ~/hosts.txt) >> ~/.ssh/known_hosts 2>/dev/null && "
        'for h in $(awk \'{print $1}\' ~/hosts.txt); do ssh -o BatchMode=yes "$h" true && echo "$h ok"; done',
    )
    assert done.stdout.split() == [w for a in ("10.10.1.1", "10.10.1.2", "10.10.1.3", "10.10.1.4") for w in (a, "ok")]
    # what will run where (section 1's command, as written)
    (where,) = guide(1, "cd ~/labkit && ")
    done = ta(lab, where)
    assert done.returncode == 0, done.stdout + done.stderr
    for host in ("10.10.1.1", "10.10.1.2", "10.10.1.3"):
        assert host in done.stdout, done.stdout
    # 2. make cluster-setup (section 3), 3. nodes check
    t0 = time.monotonic()
    done = ta(
        lab, f'make cluster-setup HOSTS=~/hosts.txt DATA_MIRROR={shlex.quote(lab.mirror)} CLUSTER_ARGS="{INSTALL}"'
    )
    assert done.returncode == 0, done.stdout + done.stderr
    print(f"\nmake cluster-setup on 3 nodes: {time.monotonic() - t0:.1f} s")
    assert "[10.10.1.1] this machine" in done.stdout
    for host in ("10.10.1.2", "10.10.1.3", "10.10.1.4"):
        assert f"[{host}] copied the kit" in done.stdout and f"[{host}] ok: node" in done.stdout
        assert (lab.home(f"node{int(host[-1]) - 1}") / "labkit/data/mnist").is_dir()
    done = ta(lab, ".venv/bin/python -m labkit nodes check --hosts ~/hosts.txt")
    assert done.returncode == 0 and done.stdout.count("ok:") == 3, done.stdout + done.stderr
    assert [ln.split()[2] for ln in done.stdout.splitlines() if "ok:" in ln] == ["node1,", "node2,", "node3,"]

    # 4. Labs 2, 3 and 5 with hosts_file, their headline comparison
    script = (REPO / "tests" / "_cloudlab_labs.py").read_text()
    t0 = time.monotonic()
    done = subprocess.run(
        lab.command("node0", "cd labkit && .venv/bin/python - ~/hosts.txt"),
        input=script,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    labs = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"Labs 2, 3 and 5 on the emulated LAN in {time.monotonic() - t0:.0f} s: {json.dumps(labs, indent=1)}")
    assert labs["lab2_hosts"] == {
        "ps:0": "10.10.1.1:2222",
        "worker:0": "10.10.1.1:2223",
        "worker:1": "10.10.1.2:2222",
        "worker:2": "10.10.1.3:2222",
    }
    sync, async_ = labs["lab2"]["sync"], labs["lab2"]["async"]
    assert sync["iterations"] >= 3 * 150 - 3 and async_["iterations"] >= 150, labs["lab2"]
    assert {r["mode"] for r in labs["lab3"]} == {"sync", "async"}
    assert set(labs["lab5"]) == {"ps", "ring"} and all(v["bytes"] > 0 for v in labs["lab5"].values())

    # 5. one program from the command line (section 6, as written), its per-task table at the end
    (program,) = guide(6, ".venv/bin/python -m labkit run ")
    done = ta(lab, program)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for task, host in (("ps:0", "10.10.1.1"), ("worker:1", "10.10.1.2")):
        assert any(task in ln and host in ln for ln in done.stdout.splitlines()), done.stdout[-3000:]

    # 6. one resource CSV per task, named by its node, plain and in dstat's layout (section 7, as
    # written, with Lab 2's run for <run>)
    run = labs["lab2_run"]
    firsts = []
    for command in guide(7, ".venv/bin/python -m labkit nodes csv "):  # its comment ends the line: then a newline
        command = command.replace("notebooks/runs/lab2/<run>", shlex.quote(run))
        done = ta(lab, f"set -e; {command}\nls out/nodes\nhead -n 1 out/nodes/10.10.1.2_worker-1.csv")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "10.10.1.2_worker-1.csv" in done.stdout.split() and "10.10.1.1_ps-0.csv" in done.stdout.split()
        firsts.append(done.stdout.splitlines()[-1])
    assert not firsts[0].startswith('"Dstat') and firsts[1].startswith(f'"Dstat {DSTAT_VERSION} CSV output"'), firsts
    _no_tasks_left(lab)


# The size of the guide's headless run here, appended to its line (each adds a parameter; lists go in -y,
# as papermill's -p passes them as text): Lab 4 at its defaults is 9 sweep runs of 5 epochs, minutes of
# TensorFlow on each node, for what two runs and the kill-and-resume demo already show (each task on its
# node, the notebook's records on node0).
LAB4_SMALL = "-y '{workers: [1, 2], batch_sizes: [50]}' -p epochs 3 -p test_limit 200 -p idle_s 0.5"


def test_the_guides_headless_notebook_runs_on_the_nodes(lab):
    if not (lab.home("node1") / "labkit/.venv").exists():
        pytest.skip("needs the nodes set up by test_the_guide_on_four_nodes")
    (mkdir,) = guide(6, "cd ~/labkit && mkdir -p out")
    (papermill,) = guide(6, ".venv/bin/python -m labkit papermill ")
    done = ta(lab, f"{mkdir} && {papermill} {LAB4_SMALL}", timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    out = lab.home("node0") / "labkit" / papermill.split()[5]  # the line's output notebook
    rec = read_records(nbformat.read(out, as_version=4))
    assert rec["settings"]["hosts"] and rec["settings"]["workers"] == [1, 2], rec["settings"]
    # the kill-and-resume demo across nodes: worker:1, on node1, killed over ssh once every worker saved
    # epoch 1; the cluster resumed from the last checkpoint every worker saved: epoch 1's, or epoch 2's
    # where the kill, a new ssh connection on a busy machine, landed after the next save (3 epochs in all)
    ev = rec["resume_evidence"]
    assert ev["failed_task"] == "worker:1" and ev["kill_after_epoch"] == 1, ev
    assert ev["start_epoch"] in (1, 2), ev
    assert ev["restored_checkpointed_weights"] == 1, ev
    # worker:1 of the 2-worker runs ran on node1, its run folders in its own home's checkout
    assert list((lab.home("node1") / "labkit/runs/lab4").rglob("worker-1.*")), "no task of Lab 4 ran on node1"
    _no_tasks_left(lab)


def _run_in_background(lab, args: str) -> subprocess.Popen:
    """``python -m labkit run ps_sgd ...`` by the TA on node0, left running (``earlier``: the run
    folders already there, whose files belong to the runs before it)."""
    cmd = f"cd labkit && exec .venv/bin/python -m labkit run ps_sgd --hosts ~/hosts.txt --lab faults {args}"
    folders = [lab.home(node) / "labkit/runs/faults" for node in lab.names]  # a run's folder has one name on all
    earlier = {p.name for runs in folders if runs.exists() for p in runs.iterdir()}
    run = subprocess.Popen(lab.command("node0", cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run.earlier = earlier
    return run


def _remote_pid(lab, run: subprocess.Popen, node: str, task: str, timeout: float = 120) -> int:
    """The pid of ``task`` (e.g. worker-2) of ``run`` on ``node``, once it runs."""
    runs = lab.home(node) / "labkit/runs/faults"

    def hello():
        found = [p for p in runs.glob(f"*/{task}.hello.json") if p.parent.name not in run.earlier]
        return found[0] if found else None

    found = wait_until(hello, timeout, 0.2, f"{task} to start on {node}")
    return int((found.parent / f"{task}.pid").read_text())


def test_faults_give_the_guides_errors_and_leave_nothing(lab):
    if not (lab.home("node1") / "labkit/.venv").exists():
        pytest.skip("needs the nodes set up by test_the_guide_on_four_nodes")
    args = f"--ps 1 --workers 3 --args {shlex.quote(TINY)}"

    # a remote task killed (the OOM killer, or a person on node3): killed by SIGKILL there, no install hint
    run = _run_in_background(lab, args)
    pid = _remote_pid(lab, run, "node2", "worker-2")
    lab.sh("node2", f"kill -KILL {pid}", user=False)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 1 and "task worker:2 was killed by SIGKILL on node2 (10.10.1.3)" in err, err[-3000:]
    assert "not installed" not in err and "OOM killer" in err
    _no_tasks_left(lab)

    # a node's link goes down mid-run: the ssh session breaks, named as such
    run = _run_in_background(lab, args)
    _remote_pid(lab, run, "node1", "worker-1")
    lab.set_link("node1", False)
    try:
        out, err = run.communicate(timeout=120)
    finally:
        lab.set_link("node1", True)
    assert run.returncode == 1 and "the ssh connection to node1 (10.10.1.2) ended while the task ran" in err, err[
        -3000:
    ]
    _no_tasks_left(lab)  # once the link is back, node1's sshd sees the session gone and the wrapper stops its task

    # the launcher killed with SIGKILL (a notebook kernel): every remote task stops by itself
    run = _run_in_background(lab, args)
    pids = {n: _remote_pid(lab, run, n, t) for n, t in (("node1", "worker-1"), ("node2", "worker-2"))}
    run.kill()
    run.wait()
    _no_tasks_left(lab)
    for node, task in (("node1", "worker-1"), ("node2", "worker-2")):
        result = next(
            iter(
                sorted((lab.home(node) / "labkit/runs/faults").glob(f"*/{task}.json"), key=lambda p: p.stat().st_mtime)[
                    -1:
                ]
            ),
            None,
        )
        assert result and json.loads(result.read_text())["shutdown"] == "terminated", (node, pids)

    # a node unreachable at setup: the guide's ssh error, naming it
    lab.set_link("node3", False)
    try:
        done = ta(
            lab, f'make cluster-setup HOSTS=~/hosts.txt DATA_MIRROR={shlex.quote(lab.mirror)} CLUSTER_ARGS="{INSTALL}"'
        )
    finally:
        lab.set_link("node3", True)
    assert (
        done.returncode != 0
        and "node3 (10.10.1.4): connect failed (exit 255); ssh to node3 (10.10.1.4) failed: unreachable host"
        in done.stderr
    ), done.stdout[-2000:] + done.stderr[-2000:]

    # a firewall on node2 that drops the task ports (the LAN rule forgotten): named as soon as the other servers
    # are up (within seconds); the start timeout only has to outlast their start on a loaded machine (25 s did not)
    fw = "iptables -A INPUT -p tcp --dport 2222:2239 -i lo -j ACCEPT && iptables -A INPUT -p tcp --dport 2222:2239 -j DROP"
    if lab.sh("node2", "command -v iptables", user=False).returncode != 0:
        pytest.skip("no iptables (Debian's package; .ci/run installs it)")
    assert lab.sh("node2", fw, user=False).returncode == 0
    firewall = (
        "from labkit.wire import spec as cluster; from labkit.distributed.launch import Cluster, ClusterTimeout\n"
        "spec = cluster.build(hosts='/home/ta/hosts.txt', ps=1, workers=3)\n"
        "try:\n    Cluster(spec, 'ps_sgd', {'steps': 10}, lab='faults', start_timeout=90).run()\n    print('no timeout')\n"
        "except ClusterTimeout as e:\n    print(e)\n"
    )
    done = subprocess.run(
        lab.command("node0", "cd labkit && .venv/bin/python -"),
        input=firewall,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (
        "worker:2 on 10.10.1.3:2222 (node2 (10.10.1.3), port 2222) listens on its node, but this machine cannot connect"
        in done.stdout
    ), done.stdout + done.stderr[-3000:]
    assert lab.sh("node2", "iptables -F INPUT", user=False).returncode == 0
    _no_tasks_left(lab)

    # a node whose .venv was made with another Python minor version
    other = sorted(Path("/root/.pyenv/versions").glob("3.1[02]*/bin/python3"))
    if not other:
        pytest.skip("no second Python minor version here to make a node's .venv with")
    assert lab.sh("node3", f"cd labkit && rm .venv && {other[0]} -m venv --without-pip .venv").returncode == 0
    try:
        done = ta(lab, ".venv/bin/python -m labkit nodes check --hosts ~/hosts.txt")
    finally:
        lab.sh("node3", f"cd labkit && rm -rf .venv && ln -s {shlex.quote(VENV)} .venv")
    minor = re.search(r"3\.1\d", str(other[0])).group(0)
    assert done.returncode == 1 and "run different versions" in done.stderr, done.stdout + done.stderr
    assert re.search(rf"10\.10\.1\.4 \(node3\): .*python {minor}", done.stderr), done.stderr
