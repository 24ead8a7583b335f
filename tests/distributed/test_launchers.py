"""The launchers' registry: which way each task starts, and a new way added without touching
``launch.Cluster`` (what the namespaces launcher does), run for real with a stand-in
task program (no TensorFlow)."""

import os
import shlex
import sys

import pytest

from labkit.wire import spec as cluster
from labkit.distributed import launchers
from labkit.wire.spec import ClusterSpec
from labkit.distributed.launch import Cluster, TaskFailed
from labkit.distributed.launchers.local import LocalLauncher

HERE = frozenset({"127.0.0.1", "localhost", "vm"})


def _spec(*hosts: str) -> ClusterSpec:
    return ClusterSpec({"worker": [f"{h}:{2300 + i}" for i, h in enumerate(hosts)]})


def test_each_task_by_its_host_unless_told():
    assert launchers.choose(None, _spec("127.0.0.1", "node1"), HERE, environ={}) == {
        "worker:0": "local",
        "worker:1": "ssh",
    }
    assert launchers.choose("", _spec("127.0.0.1"), HERE, environ={}) == {"worker:0": "local"}
    assert launchers.choose("ssh", _spec("127.0.0.1"), HERE, environ={}) == {"worker:0": "ssh"}
    # $LABKIT_LAUNCHER when the argument is empty; the argument wins over it
    assert launchers.choose(None, _spec("127.0.0.1"), HERE, environ={"LABKIT_LAUNCHER": "ssh"}) == {"worker:0": "ssh"}
    assert launchers.choose("local", _spec("127.0.0.1"), HERE, environ={"LABKIT_LAUNCHER": "ssh"}) == {
        "worker:0": "local"
    }


def test_inside_a_slurm_allocation_tasks_go_through_slurm_unless_a_hosts_file_is_given():
    inside = {"SLURM_JOB_ID": "42"}
    assert launchers.choose(None, _spec("127.0.0.1", "localhost"), HERE, environ=inside) == {
        "worker:0": "srun",
        "worker:1": "srun",
    }
    # the names the launchers had before still choose them
    assert launchers.choose("slurm", _spec("127.0.0.1"), HERE, environ={}) == {"worker:0": "srun"}
    assert launchers.choose(None, _spec("127.0.0.1"), HERE, environ={"LABKIT_LAUNCHER": "netem"}) == {
        "worker:0": "netns"
    }
    assert launchers.choose(None, _spec("127.0.0.1", "node1"), HERE, environ=inside) == {
        "worker:0": "local",
        "worker:1": "ssh",
    }
    assert launchers.choose(None, _spec("127.0.0.1"), HERE, environ={**inside, "LABKIT_LAUNCHER": "local"}) == {
        "worker:0": "local"
    }


def test_bad_choices_say_what_to_do():
    with pytest.raises(ValueError, match=r"unknown launcher 'sge'; choose one of local, netns, srun, ssh"):
        launchers.choose("sge", _spec("127.0.0.1"), HERE, environ={})
    with pytest.raises(ValueError, match=r"runs tasks on this machine only, but worker:1 is on node1"):
        launchers.choose("local", _spec("127.0.0.1", "node1"), HERE, environ={})
    with pytest.raises(ValueError, match="Launcher subclass with a name"):
        launchers.register(dict)


PROGRAM = """
import os
from labkit.tasks.common import TaskRuntime

with TaskRuntime("via") as rt:
    rt.metrics["via"] = os.environ.get("VIA_WRAPPER", "")
    if rt.task.index == 1 and os.environ.get("VIA_FAIL"):
        raise RuntimeError("worker:1 fails")
"""


class WrappedLauncher(LocalLauncher):
    """Local tasks started through a wrapper command (as ``ip netns exec NS`` would be)."""

    name = "test-wrapped"

    def command(self, task, env, argv_tail):
        argv, text = super().command(task, env, argv_tail)
        wrapper = ["env", f"VIA_WRAPPER={task.name}"]
        return [*wrapper, *argv], f"{shlex.join(wrapper)} {text}"

    def where(self, tp):
        return f" in wrapper {tp.task.name}"


@pytest.fixture
def wrapped(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setitem(launchers.LAUNCHERS, WrappedLauncher.name, WrappedLauncher)
    (tmp_path / "via").mkdir()
    (tmp_path / "via" / "__init__.py").write_text("")
    (tmp_path / "via" / "task.py").write_text(PROGRAM)
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}


def test_a_registered_launcher_runs_every_task_its_way(wrapped):
    alone = {"forkserver": False}  # a stand-in program without TensorFlow: no fork server to import it
    c = Cluster(
        cluster.local(ps=0, workers=2),
        "via.task",
        lab="test",
        launcher="test-wrapped",
        env=wrapped,
        timeout=60,
        launcher_options=alone,
    )
    assert all(cmd.startswith("env VIA_WRAPPER=") for _, cmd in c.commands())
    result = c.run()
    assert {t.name: t.metrics["via"] for t in result} == {"worker:0": "worker:0", "worker:1": "worker:1"}
    assert [t.ended for t in result] == ["exited", "exited"]

    failing = Cluster(
        cluster.local(ps=0, workers=2),
        "via.task",
        lab="test",
        launcher="test-wrapped",
        env={**wrapped, "VIA_FAIL": "1"},
        timeout=60,
        launcher_options=alone,
    )
    with pytest.raises(TaskFailed, match=r"task worker:1 exited with code 1 in wrapper worker:1 after") as info:
        failing.run()
    assert "worker:1 fails" in info.value.log_tail


def test_a_notebooks_launcher_parameter(monkeypatch):
    """``launch.use(launcher)``: the notebook's parameter becomes every later cluster's choice;
    empty leaves it be; a typo is an error at once. ``placed`` is the spec as it will run."""
    from labkit.distributed import launch

    monkeypatch.setenv("LABKIT_LAUNCHER", "")  # so that monkeypatch restores what launch.use sets below
    monkeypatch.delenv("LABKIT_LAUNCHER")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    launch.use("")
    assert "LABKIT_LAUNCHER" not in os.environ
    with pytest.raises(ValueError, match="unknown launcher 'slrum'"):
        launch.use("slrum")
    launch.use("ssh")
    assert os.environ["LABKIT_LAUNCHER"] == "ssh"
    c = Cluster(cluster.local(ps=0, workers=1), "ps_sgd", dry_run=True, launcher_options={"remote_dir": "kit"})
    assert c.commands()[0][1].startswith("ssh ")
    spec = cluster.local(ps=1, workers=2)
    assert launch.placed(spec) == spec  # outside an allocation nothing moves
