"""Hints on a failed task follow from its evidence (no cluster needed)."""

import signal

from labkit.distributed.launchers.ssh import EXIT_NO_KIT, missing_line, remote_failure_hint
from labkit.wire.protocol import grpc_options, log_hint

PY = ".venv/bin/python"
RAN = (
    "# ssh -- 10.10.1.3 sh -c 'cd labkit && ... .venv/bin/python -m labkit.tasks.ps_sgd'\n"
    "[worker:1 10.10.1.3] step 100\nW0000 tensorflow: some file: No such file or directory\n"
)


def test_a_killed_task_is_never_sent_to_install_the_kit():
    hint = remote_failure_hint("10.10.1.3", -signal.SIGKILL, RAN, "labkit", PY, started=True)
    assert "OOM killer" in hint and "not installed" not in hint
    # even before it logged: a signal is a signal
    assert "not installed" not in remote_failure_hint("10.10.1.3", -signal.SIGKILL, RAN, "labkit", PY)


def test_the_kit_is_missing_only_on_the_nodes_own_evidence():
    for missing in ("labkit", PY):
        tail = f"# ssh ...\n{missing_line(missing)}\n"
        assert "not installed on 10.10.1.3" in remote_failure_hint("10.10.1.3", EXIT_NO_KIT, tail, "labkit", PY)
    # an exit 1 whose log happens to hold the words is not a missing kit
    assert remote_failure_hint("10.10.1.3", 1, RAN, "labkit", PY) == ""
    assert remote_failure_hint("10.10.1.3", EXIT_NO_KIT, RAN, "labkit", PY, started=True) == ""


def test_grpc_retries_are_off_in_tasks_unless_the_user_says_otherwise():
    assert grpc_options(None) == "grpc.enable_retries=0"
    assert grpc_options("grpc.keepalive_time_ms=60000") == "grpc.keepalive_time_ms=60000,grpc.enable_retries=0"
    assert grpc_options("grpc.enable_retries=1") == "grpc.enable_retries=1"
    tail = "ABORTED: The same RunGraph (Worker) request was received twice. graph_handle: ..."
    assert "gRPC library sent it again" in log_hint(tail) and log_hint("Killed") == ""


def test_a_task_that_sent_its_started_event_ran_though_it_never_logged(tmp_path):
    """ssh's 255 after the task's ``started`` event (sent before TensorFlow's import) is a session
    that broke, not a host ssh could not reach: a busy node's task may not have logged a line yet."""
    from labkit.wire import spec as cluster, events
    from labkit.distributed.launch import Cluster
    from labkit.distributed.launchers import ssh

    c = Cluster(cluster.local(ps=0, workers=2), "ps_sgd", run_dir=tmp_path, lab="hints")
    tp = next(p for p in c._procs if p.task.name == "worker:1")
    c._tails["worker:1"] = events.Tail(tp.events_path)
    tail = "# ssh -- 10.10.1.2 sh -c '...'\nssh: connect to host 10.10.1.2 port 22: Connection timed out\n"
    assert not ssh._started(tp)
    assert "failed: unreachable host" in remote_failure_hint("10.10.1.2", 255, tail, "labkit", PY)
    started = events.Started(pid=7, host="node1", program="labkit.tasks.ps_sgd")
    events.Channel(str(tp.events_path)).write(events.stamped(started, "worker:1", False, None))
    assert c.events("worker:1", "started") and ssh._started(tp)  # the cluster read it as it came
    hint = remote_failure_hint("10.10.1.2", 255, tail, "labkit", PY, started=ssh._started(tp))
    assert "the ssh connection to 10.10.1.2 ended while the task ran" in hint
