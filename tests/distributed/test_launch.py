"""The launcher, with real processes and real TensorFlow servers on 127.0.0.1 at tiny sizes.

After every test: no process of ours is left, and every port the test's clusters used
can be bound again (only our own processes and ports are checked: other programs run
TensorFlow on this machine too).
"""

import _thread
import os
import random
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from helpers import alive, children, kill_and_expect_task_failed, said, wait_until, wait_while
from labkit.wire import spec as cluster
from labkit.wire.spec import ClusterSpec
from labkit.distributed.launch import (
    Cluster,
    ClusterResult,
    ClusterTimeout,
    PortInUse,
    TaskFailed,
    VersionSkew,
    check_versions,
)

pytestmark = pytest.mark.cluster

# The ps_sgd arguments every test uses: small and quick.
TINY = dict(train_limit=2000, test_limit=500, sample_interval=0.25)
LONG = dict(TINY, steps=10_000_000)  # runs until stopped


@pytest.fixture
def clusters(tmp_path, monkeypatch):
    """Clusters made by the test (run directories under tmp_path); checked for leftovers after it."""
    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path / "runs"))
    made: list[Cluster] = []
    yield made
    for c in made:
        c.stop()
    wait_while(children, 5, 0.05, "every process of the test (but its fork server) to end")
    for c in made:
        for t in c.spec.tasks():
            assert cluster.port_is_free(t.port), f"port {t.port} of {t.name} cannot be bound again"


def make(clusters, spec, args=None, **options) -> Cluster:
    c = Cluster(spec, "ps_sgd", args, lab="test", **options)
    clusters.append(c)
    return c


def test_run_to_completion_gathers_every_task(clusters):
    spec = cluster.local(ps=1, workers=2)
    with make(clusters, spec, {**TINY, "steps": 150, "eval_every": 50}) as c:
        assert c.startup_s > 0 and all(cluster.port_is_free(t.port) is False for t in c.spec.tasks())
        result = c.wait(timeout=240)
    assert [t.ended for t in result] == ["done-queue", "exited", "exited"]
    assert all(t.returncode == 0 for t in result)
    ps, w0, w1 = result["ps:0"], result["worker:0"], result["worker:1"]
    # async: every global step is one trainer's step, so the local steps add up to it
    assert w0.steps["local"] + w1.steps["local"] == ps.steps["global_final"] >= 150
    assert w0.metrics["test_accuracy"] > 0.7 and w0.result["series"]["eval"]
    # the ps leaves after the trainers, so that none finds it gone when it signals done
    assert w0.result["done_signal"] == w1.result["done_signal"] == "delivered"
    assert ps.result["ended_epoch"] > max(w0.result["ended_epoch"], w1.result["ended_epoch"])
    for t in result:
        assert t.result["status"] == "ok" and t.result["versions"]["labkit"]
        assert t.result["samples"]["columns"]["t"], f"{t.name} has no resource samples"
        assert t.result["resources"]["proc_rss_bytes"] > 100e6  # a TensorFlow process
        assert t.log_path.exists()
    table = result.table()
    assert list(table.index) == ["ps:0", "worker:0", "worker:1"]
    assert {"ended", "local_steps", "global_step", "cpu_user_pct", "net_recv_bytes", "test_accuracy"} <= set(
        table.columns
    )
    samples = result.samples()
    assert set(samples["task"]) == {"ps:0", "worker:0", "worker:1"}
    assert result.teardown_s is not None and result.teardown_s < 10
    again = ClusterResult.load(result.run_dir)
    assert [t.ended for t in again] == [t.ended for t in result] and again["worker:0"].metrics == w0.metrics
    check_versions(c.hellos())
    assert c.wait() is result and c.status()["ps:0"] == "done-queue"


def test_killed_worker_raises_task_failed_promptly(clusters):
    c = make(clusters, cluster.local(ps=1, workers=2), LONG).start()
    wait_until(
        lambda: c.events("worker:0", "eval"), 120, 0.05, "the cluster to train (the chief's first evaluation, an event)"
    )
    failed, elapsed = kill_and_expect_task_failed(c, "worker:1")
    assert "SIGKILL" in str(failed) and "worker:1" in failed.log_tail
    # noticed, not waited out: far under the wait's timeout, by a margin that holds with both cores busy
    assert elapsed < 45, f"TaskFailed took {elapsed:.1f} s"
    status = c.status()
    assert status["worker:1"] == "failed" and status["ps:0"] in ("terminated", "killed")


def test_failing_program_reports_its_log_tail(clusters):
    # program_argv goes to the task as given (args= and keywords are checked before anything starts)
    c = make(clusters, cluster.local(ps=1, workers=1), program_argv=["--steps", "-1"])
    with pytest.raises(TaskFailed, match="--steps must be positive") as info:
        c.run(timeout=60)
    assert info.value.returncode == 2
    # the command line stays in the log, to rerun the task by hand, but not in the tail
    assert info.value.log_path.read_text().startswith("# cd ") and "# cd " not in info.value.log_tail


def test_global_timeout_names_running_tasks(clusters):
    c = make(clusters, cluster.local(ps=1, workers=1), LONG, timeout=2.0).start(wait_ready=False)
    t0 = time.monotonic()
    with pytest.raises(ClusterTimeout) as info:
        c.wait()
    assert sorted(info.value.running) == ["ps:0", "worker:0"] and "ps:0, worker:0" in str(info.value)
    assert time.monotonic() - t0 < 2.0 + c.term_grace + 3
    assert set(c.status().values()) <= {"terminated", "killed"}


def test_keyboard_interrupt_during_wait_stops_everything(clusters):
    c = make(clusters, cluster.local(ps=1, workers=1), LONG).start(wait_ready=False)
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            c.wait(timeout=60)
    finally:
        timer.cancel()
    assert not alive(c.pids().values())


def test_a_start_interrupted_before_a_child_is_recorded_leaves_nothing(clusters, monkeypatch):
    """Ctrl-C may land after a task's process exists but before the Cluster has recorded it
    (a loaded machine deschedules the kernel there); stop() finds it by its command line."""
    from labkit.distributed.launchers.local import LocalLauncher

    real = LocalLauncher.spawn

    def interrupted(self, tp):
        real(self, tp)
        raise KeyboardInterrupt

    monkeypatch.setattr(LocalLauncher, "spawn", interrupted)
    c = make(clusters, cluster.local(ps=1, workers=1), LONG)
    with pytest.raises(KeyboardInterrupt):
        c.start()
    assert c.status() == {"ps:0": "new", "worker:0": "new"}  # the clusters fixture checks no process is left


ORPHAN_LAUNCHER = """
import sys, time
from labkit.wire import spec as cluster
from labkit.distributed.launch import Cluster
c = Cluster(cluster.local(ps=1, workers=1), "ps_sgd", {"steps": 10**7}, lab="test").start(wait_ready=False)
while not all((c.run_dir / f).exists() for f in ("ps-0.hello.json", "worker-0.hello.json")):
    time.sleep(0.05)
print(*c.pids().values(), flush=True)
time.sleep(600)
"""


def test_tasks_do_not_outlive_a_killed_launcher(clusters):
    """A notebook kernel killed with SIGKILL runs no cleanup; the tasks still go."""
    launcher = subprocess.Popen([sys.executable, "-c", ORPHAN_LAUNCHER], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in launcher.stdout.readline().split()]
        assert len(pids) == 2
    finally:
        launcher.kill()
        launcher.wait()
    wait_while(lambda: [p for p in pids if psutil.pid_exists(p)], 20, 0.1, "the tasks to end with their launcher")


def _listen(port: int) -> socket.socket:
    s = socket.socket()
    s.bind(("0.0.0.0", port))
    s.listen()
    return s


def test_taken_port_in_an_explicit_spec_is_a_clear_error(clusters):
    a, b = cluster.free_ports(2)
    spec = ClusterSpec({"ps": [f"127.0.0.1:{a}"], "worker": [f"127.0.0.1:{b}"]})
    with _listen(a):
        with pytest.raises(PortInUse, match=f"ps:0 \\(127.0.0.1:{a}\\) is in use"):
            make(clusters, spec, TINY).start()
    assert not children(recursive=False)


def test_taken_port_in_a_local_spec_is_avoided(clusters):
    spec = cluster.local(ps=1, workers=1)
    taken = spec.task("worker", 0).port
    with _listen(taken):
        c = make(clusters, spec, LONG).start(wait_ready=False)
        assert taken not in [t.port for t in c.spec.tasks()]
        c.stop()


def test_port_lost_in_a_race_is_retried(clusters, monkeypatch):
    """Another process binds the port after the launcher checked it: the task exits with
    code 98 and the launcher restarts the cluster on other ports."""
    import labkit.distributed.launchers.local

    spec = cluster.local(ps=1, workers=1)
    taken = spec.task("ps", 0).port
    monkeypatch.setattr(
        labkit.distributed.launchers.local, "port_is_free", lambda port: True
    )  # the check misses the thief
    with _listen(taken):
        c = make(clusters, spec, LONG).start()
        assert taken not in [t.port for t in c.spec.tasks()] and set(c.status().values()) == {"running"}
        c.stop()


WATCH_PROGRAM = """
import socket, sys, time
from labkit.tasks.common import TaskRuntime

with TaskRuntime("watch") as rt:
    server = socket.create_server(("0.0.0.0", rt.task.port))  # stands in for a TF server
    if rt.task.type == "chief":
        time.sleep(float(sys.argv[1]))
        rt.steps["local"] = 1
    else:
        rt.exit_when_port_closes(rt.spec.task("chief", 0).address)
        time.sleep(600)
"""


def test_tf2_pattern_tasks_exit_when_the_chief_port_closes(clusters, tmp_path):
    """TF2 ParameterServerStrategy tasks never exit by themselves; the runtime's port watch
    ends them once the chief is gone (a stand-in program: no TensorFlow needed)."""
    (tmp_path / "watchprog").mkdir()
    (tmp_path / "watchprog" / "__init__.py").write_text("")
    (tmp_path / "watchprog" / "task.py").write_text(WATCH_PROGRAM)
    spec = cluster.local(ps=1, workers=1, chief=True)
    c = Cluster(spec, "watchprog.task", lab="test", env={"PYTHONPATH": str(tmp_path)}, program_argv=["1.5"])
    clusters.append(c)
    result = c.run(timeout=60)
    assert {t.name: t.ended for t in result} == {
        "ps:0": "chief-port-closed",
        "chief:0": "exited",
        "worker:0": "chief-port-closed",
    }
    assert result["worker:0"].result["status"] == "ok" and result.teardown_s < 5


PEERS_PROGRAM = """
import socket, sys, time
from labkit.tasks.common import TaskRuntime

with TaskRuntime("peers") as rt:  # two workers joined like all-reduce peers: one fails, so does the other
    server = socket.create_server(("0.0.0.0", rt.task.port))
    if rt.task.index == 1:
        conn, _ = server.accept()
        if sys.argv[1] == "error":
            raise RuntimeError("worker:1 fails on its own")
        time.sleep(600)  # until killed
    peer = rt.spec.task("worker", 1)
    while True:
        try:
            link = socket.create_connection((peer.host, peer.port))
            break
        except OSError:
            time.sleep(0.05)
    rt.mark("connected")  # an event (labkit.wire.events) the test waits for
    link.recv(1)  # b'' once worker:1 is gone
    raise ConnectionError("lost worker:1")
"""


def _waitable(pid: int) -> bool:
    """Whether our child ``pid`` has ended and can be reaped, without reaping it (its status may
    say zombie a little earlier, while its other threads still exit)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


@pytest.mark.parametrize("how", ["sigkill", "kill", "error"])
def test_task_failed_names_the_task_that_failed_first(clusters, tmp_path, how):
    """worker:1 dies (SIGKILL from outside, Cluster.kill, or an error of its own) and worker:0,
    its peer, fails within milliseconds because of it; the launcher may see both exits in one
    poll. TaskFailed must name worker:1, never the peer listed first."""
    (tmp_path / "peers").mkdir()
    (tmp_path / "peers" / "__init__.py").write_text("")
    (tmp_path / "peers" / "task.py").write_text(PEERS_PROGRAM)
    c = Cluster(
        cluster.local(ps=0, workers=2),
        "peers.task",
        lab="test",
        env={"PYTHONPATH": str(tmp_path)},
        program_argv=[how],
        timeout=60,
    )
    clusters.append(c)
    c.start(wait_ready=how != "error")  # forked, worker:1 can fail before start() would return: wait() sees it
    pids = c.pids()
    if how != "error":
        assert c.follow(until=lambda: any(e.label == "connected" for e in c.events("worker:0", "mark"))) is None
        c.kill("worker:1") if how == "kill" else os.kill(pids["worker:1"], signal.SIGKILL)
    # the launcher looks only now: one poll sees both ended
    wait_until(lambda: all(map(_waitable, pids.values())), 30, 0.02, "worker:0 to fail after losing its peer")
    with pytest.raises(TaskFailed) as info:
        c.wait()
    failed = info.value
    assert failed.task == "worker:1", str(failed)
    if how == "error":
        assert failed.returncode == 1 and "fails on its own" in failed.log_tail
    else:
        assert failed.returncode == -signal.SIGKILL and "was killed by SIGKILL" in str(failed)
    assert failed.consequences["worker:0"].startswith("exited with code 1 after ")
    assert "then worker:0 exited with code 1" in str(failed) and "lost worker:1" not in failed.log_tail
    assert c.status() == {"worker:0": "failed", "worker:1": "failed"}


FAKE_SSH = """#!/bin/sh
# A stand-in for ssh: drop the options and the host, run the command here with bash. Like a
# careful ssh user, it insists on '--' before the host (a host never reads as an option).
while [ $# -gt 0 ]; do case "$1" in -o) shift 2 ;; --) shift; break ;; -*) shift ;;
    *) echo "fake ssh: no -- before the host $1" >&2; exit 255 ;; esac; done
shift
exec bash -c "$1"
"""


def fake_ssh(tmp_path: Path) -> Path:
    path = tmp_path / "fake-ssh"
    path.write_text(FAKE_SSH)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_remote_hosts_over_fake_ssh(clusters, tmp_path):
    """ps and worker 1 on "another host" (127.0.0.2, reached over the fake ssh), worker 0 local."""
    ports = cluster.free_ports(3)
    spec = ClusterSpec({"ps": [f"127.0.0.2:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.2:{ports[2]}"]})
    remote_dir = tmp_path / "remote home" / "labkit"
    remote_dir.mkdir(parents=True)
    c = make(
        clusters,
        spec,
        {**TINY, "steps": 100},
        launcher_options={
            "ssh": [str(fake_ssh(tmp_path)), "-o", "BatchMode=yes"],
            "remote_dir": str(remote_dir),
            "remote_python": sys.executable,
        },
    )
    cmds = dict(c.commands())
    assert cmds["ps:0"].startswith(
        f"{tmp_path}/fake-ssh -o ServerAliveInterval=5 -o ServerAliveCountMax=3 -o ConnectTimeout=10 -o BatchMode=yes -- 127.0.0.2 "
    )  # the user's ssh command, with the kit's liveness options kept
    assert "TF_CONFIG=" in cmds["ps:0"] and "-m labkit.tasks.ps_sgd" in cmds["ps:0"] and "ssh" not in cmds["worker:0"]
    result = c.run(timeout=240)
    assert [t.ended for t in result] == ["done-queue", "exited", "exited"]
    for name in ("ps:0", "worker:1"):  # copied back from the "remote" run directory
        assert result[name].result is not None and result[name].result["address"].startswith("127.0.0.2:")
        assert said("server up") in result[name].log_tail()  # streamed back through ssh
    assert (remote_dir / c.remote_run / "ps-0.json").exists()
    assert result["worker:0"].steps["local"] + result["worker:1"].steps["local"] == result["ps:0"].steps["global_final"]
    assert set(c.hellos()) == {"ps:0", "worker:0", "worker:1"}


BAD_HELLO_PROGRAM = """
import os, socket, time
from labkit.wire.spec import from_tf_config

spec, task = from_tf_config()  # a program from another kit: its hello is not the launcher's JSON
run = os.environ["LABKIT_RUN_DIR"]
with open(os.path.join(run, f"{task.type}-{task.index}.hello.json"), "w") as f:
    f.write("hello from labkit 0.0.1\\n")
server = socket.create_server(("0.0.0.0", task.port))
time.sleep(600)
"""


def test_a_malformed_remote_hello_is_a_clear_error(clusters, tmp_path):
    (tmp_path / "oldkit").mkdir()
    (tmp_path / "oldkit" / "__init__.py").write_text("")
    (tmp_path / "oldkit" / "task.py").write_text(BAD_HELLO_PROGRAM)
    port = cluster.free_ports(1)[0]
    c = Cluster(
        ClusterSpec({"worker": [f"127.0.0.2:{port}"]}),
        "oldkit.task",
        lab="test",
        launcher_options={
            "ssh": [str(fake_ssh(tmp_path))],
            "remote_dir": str(tmp_path),
            "remote_python": sys.executable,
        },
        env={"PYTHONPATH": str(tmp_path)},
    )
    clusters.append(c)
    with pytest.raises(
        VersionSkew,
        match=r"a task on 127\.0\.0\.2 wrote a hello the launcher cannot read \(it is not "
        r"JSON.*'hello from labkit 0\.0\.1'.*make cluster-setup",
    ):
        c.start()
    assert c.status() == {"worker:0": "terminated"}


def test_stopping_remote_tasks_signals_them_on_their_host(clusters, tmp_path):
    port = cluster.free_ports(2)
    spec = ClusterSpec({"ps": [f"127.0.0.2:{port[0]}"], "worker": [f"127.0.0.2:{port[1]}"]})
    remote_dir = tmp_path / "r"
    remote_dir.mkdir()
    c = make(
        clusters,
        spec,
        LONG,
        launcher_options={
            "ssh": [str(fake_ssh(tmp_path))],
            "remote_dir": str(remote_dir),
            "remote_python": sys.executable,
        },
    ).start(wait_ready=False)
    run = remote_dir / c.remote_run
    wait_until(
        lambda: all((run / f).exists() for f in ("ps-0.hello.json", "worker-0.hello.json")),
        60,
        0.05,
        "the remote tasks to start",
    )
    pids = {name: int((run / f"{name}.pid").read_text()) for name in ("ps-0", "worker-0")}
    c.stop()
    assert not any(psutil.pid_exists(p) for p in pids.values())
    assert set(c.status().values()) == {"terminated"}
    assert c.result["worker:0"].result["shutdown"] == "terminated"  # the task wrote its result on SIGTERM


def test_dry_run_and_cli_print_exact_commands(tmp_path, capsys):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.10.1.1 node0\n10.10.1.2 node1\n10.10.1.3 node2\n")
    spec = cluster.mode("cluster2", hosts=hosts)
    c = Cluster(spec, "ps_sgd", args={"steps": 100}, dry_run=True, launcher_options={"remote_dir": "labkit"})
    c.start()
    out = capsys.readouterr().out
    assert (
        out.count("# ") == 4
        and "ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=5 -o ServerAliveCountMax=3 -- 10.10.1.2 "
        in out
    )
    assert "--steps 100" in out and '"task": {"type": "worker", "index": 1}' in out.replace("\\", "")
    with pytest.raises(RuntimeError, match="dry run"):
        c.wait()
    assert not children(recursive=False)
    cli = subprocess.run(
        [sys.executable, "-m", "labkit", "cluster", "--mode", "cluster2", "--hosts", str(hosts), "--print-commands"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert "worker:2" in cli.stdout and "10.10.1.3:2222" in cli.stdout and "TF_CONFIG" in cli.stdout


def test_each_run_of_a_sweep_has_its_own_remote_directory(tmp_path, monkeypatch):
    """Two sweeps' w2-b50 runs must not share a folder on the nodes: a killed task writes no
    result, and the other sweep's would be copied back as its own."""
    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path / "runs"))
    spec = cluster.mode("cluster", hosts=["10.10.1.1", "10.10.1.2"])
    runs = [Cluster(spec, "strategy_train", lab="lab4", run=f"sweep-{i}/w2-b50", dry_run=True) for i in (1, 2)]
    assert [c.remote_run for c in runs] == ["runs/lab4/sweep-1/w2-b50", "runs/lab4/sweep-2/w2-b50"]
    outside = Cluster(spec, "ps_sgd", lab="lab2", run_dir=tmp_path / "elsewhere" / "r1", dry_run=True)
    assert outside.remote_run == f"runs/lab2/{outside.run_name}"


def test_version_skew_is_refused():
    ok = {"python": "3.11.9", "tensorflow": "2.21.0", "keras": "3.15.1", "labkit": "0.1.0"}
    check_versions({"ps:0": {"versions": ok, "host": "node0"}}, reference=dict(ok, python="3.11.2"))
    with pytest.raises(VersionSkew, match=r"(?s)worker:1 \(node1\): tensorflow 2\.20\.0.*make setup"):
        check_versions(
            {
                "ps:0": {"versions": ok, "host": "node0"},
                "worker:1": {"versions": dict(ok, tensorflow="2.20.0"), "host": "node1"},
            },
            reference=ok,
        )


def test_the_launcher_and_the_tasks_share_one_protocol():
    """launch imports no task runtime: of ``labkit.tasks`` only the package, whose ``PROGRAMS``
    registry names the programs and imports none of them; and there is one PortInUse, a TaskFailed
    with its fields."""
    import ast

    import labkit.distributed.launch
    import labkit.wire.protocol
    import labkit.tasks.common

    tree = ast.parse(Path(labkit.distributed.launch.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert not [m for m in imported if m and m.startswith("labkit.tasks.")], imported
    loads = "import sys, labkit.distributed.launch; print([m for m in sys.modules if m.startswith('labkit.tasks.')])"
    assert subprocess.run([sys.executable, "-c", loads], capture_output=True, text=True).stdout.strip() == "[]"
    assert PortInUse is labkit.wire.protocol.PortInUse is labkit.tasks.common.PortInUse
    err = PortInUse("ps:0", "127.0.0.1:2222", " (held by pid 7: x)", returncode=98, log_tail="bind failed")
    assert isinstance(err, TaskFailed) and (err.task, err.returncode, err.log_tail) == ("ps:0", 98, "bind failed")
    assert str(err).startswith("port of task ps:0 (127.0.0.1:2222) is in use (held by pid 7: x)")


def test_bad_launcher_arguments():
    spec = cluster.local(ps=1, workers=1)
    with pytest.raises(ValueError, match="module name"):
        Cluster(spec, "ps sgd")
    with pytest.raises(ValueError, match="timeout must be a positive"):
        Cluster(spec, "ps_sgd", timeout=0)
    with pytest.raises(ValueError, match="ClusterSpec"):
        Cluster({"worker": ["a:1"]}, "ps_sgd")


@pytest.mark.slow
def test_twenty_start_stop_cycles_leave_nothing(clusters):
    """Stop at random moments (during interpreter start-up, TensorFlow's import, serving);
    every tenth cycle waits until all servers are up first."""
    rng = random.Random(0)
    stops = []
    for i in range(20):
        c = make(clusters, cluster.local(ps=1, workers=1), LONG, term_grace=3.0)
        c.start(wait_ready=(i % 10 == 9))
        time.sleep(rng.uniform(0, 1.0))
        pids = list(c.pids().values())
        t0 = time.monotonic()
        c.stop()
        stops.append(time.monotonic() - t0)
        survivors = alive(pids)
        assert not survivors, f"cycle {i}: {survivors} survived stop()"
        assert not children(), f"cycle {i}: children left"
        assert all(cluster.port_is_free(t.port) for t in c.spec.tasks()), f"cycle {i}: a port is still bound"
    print(f"stop() took {min(stops):.2f}-{max(stops):.2f} s, median {sorted(stops)[10]:.2f} s")


def test_tasks_killed_after_the_grace_have_freed_their_ports_when_stop_returns(clusters):
    """A forked task is no child of this process: killed with its stand-in, it ends itself a
    moment later. stop() waits for that, so the next cluster can bind the same ports at once."""
    for _ in range(3):
        c = make(clusters, cluster.local(ps=1, workers=1), LONG, term_grace=0.001)
        c.start(wait_ready=True)
        c.stop()
        assert [t.name for t in c.spec.tasks() if not cluster.port_is_free(t.port)] == []


def test_what_its_owner_left_running_is_stopped_at_interpreter_exit(tmp_path):
    """``proc.StopAtExit`` (the registry of running Clusters and emulated networks): an object
    still in it when the interpreter exits is stopped; one its owner discarded is not."""
    code = f"""
from pathlib import Path
from labkit.core.proc import StopAtExit

class Thing:
    def __init__(self, name):
        self.name = name
    def stop(self):
        Path({str(tmp_path)!r}, self.name).write_text("stopped")

live = StopAtExit()
left, done = Thing("left"), Thing("done")
live.add(left)
live.add(done)
live.discard(done)
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert (tmp_path / "left").read_text() == "stopped" and not (tmp_path / "done").exists()
