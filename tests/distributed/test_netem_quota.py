"""A CPU quota per emulated node (``labkit.infra.cpuquota``): a node's tasks run in a control group of
its own, capped at its share of the cores, so N nodes have N times one node's compute; the groups
go with the run. Where quotas cannot be set, the reason says what happens instead.
A stand-in task program (no TensorFlow) keeps it cheap."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.wire import spec as cluster
from labkit.core import cgroups
from labkit.infra import cpuquota, netem
from labkit.distributed.launch import Cluster
from labkit.distributed.launchers.netns import described, netem_nodes

# Spins for 1.5 s and says what share of a core it got, and which control group it ran in.
PROGRAM = """
import os, socket, time
from labkit.tasks.common import TaskRuntime

with TaskRuntime("quota-probe") as rt:
    server = socket.create_server(("0.0.0.0", rt.task.port))
    t0, c0 = time.monotonic(), time.process_time()
    while time.monotonic() - t0 < 1.5:
        pass
    rt.metrics["share"] = (time.process_time() - c0) / (time.monotonic() - t0)
    rt.metrics["cgroup"] = [l for l in open("/proc/self/cgroup").read().splitlines() if "labkit-" in l]
"""


def test_a_wrapped_command_runs_in_its_node_group_under_its_cap():
    if cpuquota.availability()[0] is None:
        pytest.skip(cpuquota.availability()[1])
    q = cpuquota.NodeQuotas(["a", "b"], 0.2).start()
    try:
        code = (
            "import time\nt,c=time.monotonic(),time.process_time()\nwhile time.monotonic()-t<1.5: pass\n"
            "print((time.process_time()-c)/(time.monotonic()-t)); print(open('/proc/self/cgroup').read())"
        )
        out = subprocess.run(q.wrap("b", [sys.executable, "-c", code]), capture_output=True, text=True, timeout=30)
        share, groups = out.stdout.split("\n", 1)
        assert float(share) < 0.3, share  # the cap, with the period's rounding
        assert f"{q.group.name}/b" in groups
    finally:
        group = q.group
        assert q.stop() == [] and not group.exists()


def test_without_a_writable_cgroup_the_reason_says_what_happens(monkeypatch, tmp_path):
    monkeypatch.setattr(cgroups, "PROC", tmp_path)  # no cgroup mounted here
    version, why = cpuquota.availability()
    assert version is None and "share the machine's cores" in why and "Delegate=yes" in why
    with pytest.raises(ValueError, match="cores each node"):
        cpuquota.NodeQuotas(["a"], 0)


def test_stale_groups_of_a_dead_owner_are_swept(tmp_path):
    dead = tmp_path / "labkit-999999999-abcdef"
    (dead / "node0").mkdir(parents=True)
    alive = tmp_path / f"labkit-{os.getpid()}-abcdef"
    alive.mkdir()
    assert cpuquota.sweep_stale(tmp_path) == [str(dead)] and not dead.exists()
    assert alive.exists()


@pytest.fixture
def probe(tmp_path, monkeypatch):
    mode, why = netem.availability("100mbit")
    if mode is None:
        pytest.skip(f"links cannot be emulated here: {why}")
    if cpuquota.availability()[0] is None:
        pytest.skip(cpuquota.availability()[1])
    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path / "runs"))
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "__init__.py").write_text("")
    (tmp_path / "probe" / "task.py").write_text(PROGRAM)
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}


def test_each_node_of_a_cluster_gets_its_quota(probe):
    spec = cluster.from_hosts(netem_nodes(2), ps=0, workers=2)
    c = Cluster(
        spec,
        "probe.task",
        lab="test",
        launcher="netem",
        launcher_options={"link": "100mbit", "cpus": 0.25, "forkserver": False},
        env=probe,
        timeout=120,
    )
    with c:
        result = c.wait()
    groups = {t.name: t.metrics["cgroup"] for t in result}
    assert all(len(g) == 1 for g in groups.values()), groups
    assert groups["worker:0"][0].endswith("/node0") and groups["worker:1"][0].endswith("/node1")
    assert all(t.metrics["share"] < 0.35 for t in result), {t.name: t.metrics["share"] for t in result}
    saved = described(c.run_dir)["cpu_quota"]
    assert saved["cpus_per_node"] == 0.25 and saved["cgroup"] in ("v1", "v2")
    assert not Path(saved["group"]).exists()  # the groups went with the run
