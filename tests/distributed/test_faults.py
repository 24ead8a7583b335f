"""Faults injected into a running cluster (labkit.wire.faults, Cluster.kill(expected=True)) and what
TensorFlow's ClusterCoordinator does about them (Lab 5's failure demo, ring_vs_ps.ps_failure).

The parsing and the summary are checked on made-up traces; the launcher's expected kill on a
real async PS cluster (its workers carry on alone); the demo itself on a real synchronous PS
cluster of three workers, which must show TensorFlow's own behaviour: the lost worker's
closures run on the others and training goes on; the lost ps stops the chief with
UnavailableError."""

import pytest

from labkit.wire import spec as cluster, events, faults
from labkit.distributed.launch import Cluster
from labkit.wire.protocol import TaskFailed


def test_a_traced_step_is_an_event_and_a_line_for_people():
    step = {"step": 12, "seconds": 0.1234, "loss": 1.5, "slices_on": [0, 2, 0]}
    assert faults.step_line(step) == "step 12: 0.123 s, loss 1.5000, slices on workers 0 2 0"
    e = events.parse(events.stamped(events.Step(**step), "chief:0", True, None).to_json())
    assert (e.step, e.seconds, e.loss, e.slices_on, e.chief) == (12, 0.1234, 1.5, [0, 2, 0], True)


def _step(n, t, on=(0, 1, 2), seconds=0.1):
    return {"step": n, "seconds": seconds, "loss": 1.0, "slices_on": list(on), "t": t}


def test_summary_says_per_kill_what_the_coordinator_reported_and_what_ran_after():
    trace = faults.Trace(
        steps=[
            _step(1, 1.0),
            _step(2, 2.0),
            _step(3, 3.5, (0, 1, 0), 0.5),
            _step(4, 4.0, (2, 0, 0)),
            _step(5, 5.0, (0, 2, 2)),
        ],  # step 3 was in flight: its slice 1 ran before worker 1 died
        kills=[{"task": "worker:1", "after_step": 2, "t": 2.5}, {"task": "ps:0", "after_step": 5, "t": 5.5}],
        events=[
            {"t": 2.8, "message": "Worker /job:worker/replica:0/task:1 failed with UnavailableError():Socket closed"},
            {
                "t": 5.7,
                "message": "Remote function on worker /job:worker/replica:0/task:0 failed with "
                "UnavailableError():Socket closed",
            },
        ],
        failure={
            "task": "chief:0",
            "returncode": 1,
            "error": "UnavailableError",
            "message": "task chief:0 exited",
            "log_tail": "",
            "t": 6.0,
        },
    )
    worker, ps = trace.summary()
    assert worker["task"] == "worker:1" and worker["error_s"] == pytest.approx(0.3) and worker["error_names_task"]
    assert worker["steps_after"] == 3 and worker["slices_on_after"] == [0, 2] and worker["slices_per_step_after"] == [3]
    assert worker["first_step_after_s"] == 0.5 and worker["step_s_before"] == 0.1 and worker["step_s_after"] == 0.1
    assert worker["run_failed"] is None
    # a lost ps shows first as a worker's closure failing, then as the chief's own failure
    assert ps["error_s"] == pytest.approx(0.2) and not ps["error_names_task"] and ps["steps_after"] == 0
    assert ps["run_failed_s"] == pytest.approx(0.5) and ps["run_failed"] == "chief:0: UnavailableError"


class FakeCluster:
    """Replays the chief's events through follow(on_event, until); kill() records its calls; then fails."""

    def __init__(self, replay, fail: bool):
        self.replay, self.fail, self.killed, self.result = replay, fail, [], None

    def follow(self, on_event, until):
        for e in self.replay:
            on_event(e)
            on_event(events.Step(task="worker:0", step=99, seconds=0.1, loss=1.0, slices_on=[0]))  # not the chief's
            assert until() is False
        if self.fail:
            raise TaskFailed("chief:0", 1, "a log tail, for people\n")
        return "finished"

    def kill(self, name, expected=False):
        assert expected
        self.killed.append(name)


def test_inject_kills_after_the_given_steps_and_keeps_the_failure():
    chief = dict(task="chief:0", chief=True)
    replay = [events.Step(**chief, step=i, seconds=0.1, loss=1.0, slices_on=[0, 1]) for i in range(1, 8)]
    replay.insert(
        4, events.TfError(**chief, message="Worker /job:worker/replica:0/task:1 failed with UnavailableError():x")
    )
    replay.append(events.PeerFailure(**chief, t=123.0, error="UnavailableError", message="the ps is gone"))
    fake = FakeCluster(replay, fail=True)
    trace = faults.inject(fake, [(5, "ps:0"), (2, "worker:1")])
    assert fake.killed == ["worker:1", "ps:0"]
    assert [k["after_step"] for k in trace.kills] == [2, 5] and len(trace.steps) == 7
    assert trace.events[0]["message"].startswith("Worker /job:worker/replica:0/task:1 failed")
    assert trace.failure["task"] == "chief:0" and trace.failure["error"] == "UnavailableError"
    assert trace.failure["t"] == 123.0  # when TensorFlow stopped it, by its own event
    assert faults.inject(FakeCluster(replay, fail=False), []).result == "finished"


# ------------------------------------------------------------------------------ real clusters

SURVIVOR_PROGRAM = """
import socket, time
from labkit.wire import events
from labkit.tasks.common import TaskRuntime

with TaskRuntime("survivor") as rt:  # worker:1 runs until killed; worker:0 logs for a few seconds, then ends well
    server = socket.create_server(("0.0.0.0", rt.task.port))  # up, as the launcher sees a server
    for i in range(30 if rt.task.index == 0 else 10**6):
        rt.emit(events.Step(step=i, seconds=0.1, loss=0.0))
        time.sleep(0.1)
"""


@pytest.mark.cluster
def test_an_expected_kill_lets_the_cluster_run_on(tmp_path, monkeypatch):
    """A task killed as the experiment's own fault is no failure of the cluster: follow() goes on
    reading the others' events, the survivor ends on its own, and the killed one's outcome says so."""
    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path / "runs"))
    (tmp_path / "survivor").mkdir()
    (tmp_path / "survivor" / "__init__.py").write_text("")
    (tmp_path / "survivor" / "task.py").write_text(SURVIVOR_PROGRAM)
    c = Cluster(
        cluster.local(ps=0, workers=2), "survivor.task", lab="test", env={"PYTHONPATH": str(tmp_path)}, timeout=60
    )
    ticks = []
    with c:  # started, every task up
        c.follow(until=lambda: len(c.events("worker:0", "step")) > 3)
        c.kill("worker:1", expected=True)
        result = c.follow(lambda e: ticks.append(e.step) if (e.task, e.kind) == ("worker:0", "step") else None)
    assert 29 in ticks, "follow() stopped reading when the expected kill landed"
    ended = {t.name: (t.ended, t.returncode) for t in result}
    assert ended == {"worker:0": ("exited", 0), "worker:1": ("killed", -9)}, ended


def test_fault_trace_draws_steps_slices_and_kills():
    from labkit.measure import plots

    steps = [_step(n, float(n), (0, 1, 2) if n < 4 else (0, 2, 0)) for n in range(1, 8)]
    fig = plots.fault_trace(steps, [{"task": "worker:1", "after_step": 3}])
    top, bottom = fig.get_axes()[:2]
    assert [t.get_text() for t in top.texts] == ["worker:1 killed"]
    grid = bottom.collections[0].get_array().reshape(3, 7)
    assert list(grid[1, :3]) == [1, 1, 1] and 1 not in list(grid[:, 3:].ravel())  # worker 1's slices move
    empty = plots.fault_trace([], [])
    assert any("no step" in t.get_text() for ax in empty.get_axes() for t in ax.texts)
