"""The netem launcher: a cluster's tasks on emulated nodes (``labkit.distributed.launchers.netns``), placed as
the spec places them, each node a network namespace on a shaped link; nothing left after the run,
nor after the launcher dies by SIGKILL. A stand-in task program (no TensorFlow) keeps it cheap."""

import json
import os
import subprocess
import sys

import pytest

from helpers import alive, wait_while
from labkit.wire import spec as cluster
from labkit.infra import netem
from labkit.distributed.launch import Cluster, TaskFailed
from labkit.distributed.launchers.netns import described, netem_nodes
from labkit.core.proc import usable_cores

RATE = "200mbit"

# Listens on its port (the launcher's readiness check), says which namespace it runs in and what
# it can reach; worker:1 sends worker:0 2 MB across the link, worker:0 times them.
PROGRAM = """
import os, socket, time
from labkit.tasks.common import TaskRuntime

with TaskRuntime("netem-probe") as rt:
    server = socket.create_server(("0.0.0.0", rt.task.port))
    rt.metrics["netns"] = os.stat("/proc/self/ns/net").st_ino
    rt.metrics["pid"] = os.getpid()
    if os.environ.get("PROBE_HANG"):
        time.sleep(600)
    if rt.task.name == "worker:0":
        conn, _ = server.accept()
        got, t0 = 0, None
        while True:
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            t0 = t0 or time.monotonic()
            got += len(chunk)
        rt.metrics["received"], rt.metrics["seconds"] = got, time.monotonic() - t0
        conn.close()
    elif rt.task.name == "worker:1":
        host, port = rt.spec.task("worker", 0).host, rt.spec.task("worker", 0).port
        deadline = time.monotonic() + 60
        while True:  # worker:0 may not listen yet: the tasks start together
            try:
                c = socket.create_connection((host, port), timeout=30)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        with c:
            c.sendall(b"x" * 2_000_000)
            c.shutdown(socket.SHUT_WR)
            c.recv(1)  # worker:0 closes once it has it all: the bytes have crossed before this task ends
"""


@pytest.fixture
def probe(tmp_path, monkeypatch):
    mode, why = netem.availability(RATE)
    if mode is None:
        pytest.skip(f"links cannot be emulated here: {why}")
    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path / "runs"))
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "__init__.py").write_text("")
    (tmp_path / "probe" / "task.py").write_text(PROGRAM)
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}


@pytest.mark.parametrize(
    "forked",
    [False, pytest.param(True, marks=pytest.mark.cluster)],  # the fork server: TensorFlow
    ids=["own-interpreter", "forked"],
)
def test_tasks_run_on_their_nodes_across_a_shaped_link(probe, forked):
    """cs744's placement on node0..1: ps:0 and worker:0 share node0's namespace, worker:1 has
    node1's; the bytes worker:1 sends cross the link at its rate; the network goes with the run.
    The same for tasks forked from this process's fork server: each joins its stand-in's node."""
    spec = cluster.from_hosts(netem_nodes(2), ps=1, workers=2)
    c = Cluster(
        spec,
        "probe.task",
        lab="test",
        launcher="netem",
        launcher_options={"link": RATE, "forkserver": forked},
        env=probe,
        timeout=120,
    )
    net = c._launchers["ps:0"].network
    hosts = {t.name: t.host for t in c.spec.tasks()}
    assert hosts == {"ps:0": net.address("node0"), "worker:0": net.address("node0"), "worker:1": net.address("node1")}
    assert all(cmd.startswith("nsenter ") for _, cmd in c.commands())
    with c:
        pids = c.local_pids()
        result = c.wait()
    ns = {t.name: t.metrics["netns"] for t in result}
    assert ns["ps:0"] == ns["worker:0"] != ns["worker:1"]
    assert os.stat("/proc/self/ns/net").st_ino not in ns.values()
    assert {t.name: t.metrics["pid"] for t in result} == pids  # what the live view samples is the task
    assert all(bool(t.result.get("forkserver")) == forked for t in result)
    w0 = result["worker:0"].metrics
    rate = w0["received"] / w0["seconds"]
    assert w0["received"] == 2_000_000 and rate < 1.1 * netem.parse_link(RATE).bytes_per_s
    saved = described(c.run_dir)  # what the verdicts read: the link, the nodes, the cores they shared
    assert saved["link"] == RATE and saved["nodes"] == {"node0": hosts["ps:0"], "node1": hosts["worker:1"]}
    assert saved["cores"] == usable_cores() and described(c.run_dir / "network") is None
    # worker:1's bytes crossed node1's lan0; worker:0's samples count node0's, the ps's traffic too
    sent = sum(result["worker:1"].result["samples"]["columns"]["net_sent_lan0"])
    assert sent > 2_000_000
    assert net.leftovers() == [] and not net.running


def test_a_failed_task_names_its_node(probe):
    c = Cluster(
        cluster.from_hosts(netem_nodes(2), ps=0, workers=2),
        "probe.task",
        lab="test",
        launcher="netem",
        launcher_options={"link": RATE, "forkserver": False},
        env={**probe, "PYTHONPATH": "/nonexistent"},
        timeout=60,
    )
    with pytest.raises(TaskFailed, match=r"exited with code 1 on emulated node node[01] after"):
        c.run()
    assert c._launchers["worker:0"].network.leftovers() == []


def test_bad_options_say_what_to_do(probe):
    spec = cluster.from_hosts(netem_nodes(2), ps=0, workers=2)
    with pytest.raises(ValueError, match="needs a link"):
        Cluster(spec, "probe.task", launcher="netem")
    with pytest.raises(ValueError, match="cannot read the rate"):
        Cluster(spec, "probe.task", launcher="netem", launcher_options={"link": "fast"})
    with pytest.raises(ValueError, match="not the netns launcher's"):
        Cluster(spec, "probe.task", launcher="netem", launcher_options={"link": "1gbit", "rate": 1})


DRIVER = """
import json, sys, time
from labkit.wire import spec as cluster
from labkit.distributed.launch import Cluster
from labkit.distributed.launchers.netns import netem_nodes
from labkit.distributed.launchers import forkserver
c = Cluster(cluster.from_hosts(netem_nodes(2), ps=1, workers=1), "probe.task", lab="test", launcher="netem",
            launcher_options={"link": "100mbit", "grace": 2, "forkserver": False}, env={"PROBE_HANG": "1"}).start()
net = c._launchers["ps:0"].network
print(json.dumps({"tasks": list(c.local_pids().values()), "holders": [n.pid for n in net._all_nodes().values()],
                  "netns": [list(n.netns) for n in net._all_nodes().values()], "link": net.driver_link}), flush=True)
time.sleep(600)
"""


def test_nothing_outlives_a_launcher_killed_with_sigkill(probe, tmp_path):
    """The kernel gives the tasks SIGTERM (they write their results), the holders stop whatever
    is left in their namespaces and exit, and the kernel frees namespaces, links and qdiscs."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, env={**os.environ, **probe}
    )
    try:
        made = json.loads(driver.stdout.readline())
        assert len(alive(made["tasks"])) == 2
    finally:
        driver.kill()
        driver.wait()
    wanted = {tuple(ns) for ns in made["netns"]}

    def left():
        inside = [pid for pid, ns in netem._netns_of_all().items() if ns in wanted]
        link = made["link"] and os.path.exists(f"/sys/class/net/{made['link']}")
        return inside + alive(made["tasks"] + made["holders"]) + ([made["link"]] if link else [])

    wait_while(left, 30, 0.1, "the driver's namespaces, tasks, holders and link to go with it")
    run = next((tmp_path / "runs" / "test").iterdir())
    assert {json.loads(p.read_text())["shutdown"] for p in run.glob("*-0.json")} == {"terminated"}
