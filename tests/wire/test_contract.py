"""The task contract, without TensorFlow: typed events (their schema, their channel, how a
Cluster hands them on), the one registry idiom, the one chief rule, the one naming rule, the
one bytes meter, and launcher options each launcher reads."""

import json
import os
import threading
from datetime import datetime
from pathlib import Path

import pytest

from labkit.wire import events, protocol
from labkit.core import paths
from labkit.measure import sockets
from labkit.core.registry import Registry, UnknownName


def test_an_event_survives_its_line_and_a_newer_kind_is_kept_not_lost():
    epoch = events.stamped(
        events.Epoch(
            epoch=2, epochs=3, train_loss=0.5, images_per_s=900.0, seconds=1.5, val_loss=0.4, val_accuracy=0.9
        ),
        "worker:0",
        True,
        "w2-b50",
    )
    line = epoch.to_json()
    assert json.loads(line)["v"] == events.VERSION and json.loads(line)["kind"] == "epoch"
    assert events.parse(line) == epoch and epoch.task == "worker:0" and epoch.chief and epoch.config == "w2-b50"
    newer = events.parse(
        json.dumps({"v": events.VERSION, "kind": "gradient_norm", "task": "worker:1", "t": 5.0, "norm": 3.2})
    )
    assert newer.kind == "gradient_norm" and newer.task == "worker:1" and newer.data == {"norm": 3.2}
    with pytest.raises(ValueError, match="event format 99"):
        events.parse(json.dumps({"v": 99, "kind": "epoch"}))
    with pytest.raises(ValueError, match="without its fields"):
        events.parse(json.dumps({"v": events.VERSION, "kind": "epoch", "epoch": 1}))


def test_a_channel_and_its_tail_pass_whole_lines_only_from_many_threads(tmp_path):
    path = tmp_path / "worker-0.events.jsonl"
    channel = events.channel_for(tmp_path, "worker", 0, environ={})
    tail = events.Tail(path)
    assert tail.read() == []  # nothing written yet
    writers = [
        threading.Thread(
            target=lambda i=i: [
                channel.write(events.stamped(events.Mark(label=f"{i}-{k}"), "worker:0", False, None))
                for k in range(200)
            ]
        )
        for i in range(4)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    with open(path, "a") as f:
        f.write('{"v": 1, "kind": "mark", "task": "worker:0", "label": "half')  # a line being written
    got = tail.read()
    assert (
        len(got) == 800
        and tail.bad == 0
        and {e.label for e in got} == {f"{i}-{k}" for i in range(4) for k in range(200)}
    )
    with open(path, "a") as f:
        f.write(' done"}\nnot json\n')
    rest = tail.read()
    assert [e.label for e in rest] == ["half done"] and tail.bad == 1 and "not JSON" in tail.problem


def test_a_channel_named_by_the_launcher_is_a_descriptor(tmp_path):
    read, write = os.pipe()
    channel = events.channel_for(tmp_path, "worker", 1, environ={events.ENV: f"fd:{write}"})
    channel.write(events.stamped(events.Started(pid=1, host="h", program="p"), "worker:1", False, None))
    os.close(write)
    assert events.parse(os.read(read, 4096).decode()).kind == "started"
    assert not (tmp_path / "worker-1.events.jsonl").exists()
    channel.write(events.Mark(label="after the reader left"))  # a closed channel drops events, never the task
    os.close(read)


def test_a_registry_is_filled_by_decorator_or_by_reference_and_lists_what_it_has():
    reg = Registry("widget", builtin={"joiner": "os.path:join"})
    assert "joiner" in reg and reg["joiner"] is os.path.join and reg.reference("joiner") == "os.path:join"

    @reg.register("twice")
    def twice(x):
        return 2 * x

    assert reg["twice"](2) == 4 and list(reg) == ["joiner", "twice"]
    with pytest.raises(UnknownName, match="unknown widget 'thrice'; choose one of joiner, twice"):
        reg["thrice"]
    with pytest.raises(KeyError):
        reg["thrice"]
    assert reg.get("thrice") is None


def test_one_chief_rule():
    assert protocol.chief_of({"chief", "worker", "ps"}) == "chief:0"
    assert protocol.chief_of(("ps", "worker")) == "worker:0"
    assert protocol.is_chief("worker", 0, ("worker",)) and not protocol.is_chief("worker", 0, ("chief", "worker"))


def test_run_names_made_in_the_same_second_differ(monkeypatch):
    names = {paths.run_name("sweep") for _ in range(50)}
    assert len(names) == 50 and all(n.startswith("sweep-") for n in names)
    assert paths.run_dir("lab4", prefix="fault").name.startswith("fault-")
    drawn = iter(["abcdef", "abcdef", "012345"])  # the same suffix twice in one second
    monkeypatch.setattr(paths.secrets, "token_hex", lambda n: next(drawn))
    monkeypatch.setattr(paths, "datetime", type("Frozen", (), {"now": staticmethod(lambda: datetime(2026, 1, 1))}))
    assert [paths.run_name("again") for _ in range(2)] == [
        "again-20260101-000000-abcdef",
        "again-20260101-000000-012345",
    ]


def test_the_meter_leaves_out_what_it_is_told_to(monkeypatch):
    counts = {"worker:0 sent": 0}
    nic = [100, 100]
    monkeypatch.setattr(sockets, "nic_counters", lambda nics: {"lo": tuple(nic)})
    meter = sockets.Meter(nics=["lo"], counters=lambda: dict(counts), own=False)
    meter.start()
    counts["worker:0 sent"] += 10
    nic[0] += 10
    meter.pause()  # an evaluation: not a training step's bytes
    counts["worker:0 sent"] += 1000
    nic[0] += 1000
    meter.resume()
    counts["worker:0 sent"] += 5
    nic[0] += 5
    nic[1] += 7
    reading = meter.stop()
    assert reading["counters"] == {"worker:0 sent": 15} and reading["nic_sent_bytes"] == 15
    assert reading["nic_recv_bytes"] == 7 and reading["nics"] == ["lo"] and "sent_bytes" not in reading
    steps = sockets.per_step(reading, 5)
    assert steps["nic_sent_bytes_per_step"] == 3 and steps["counters_per_step"] == {"worker:0 sent": 3}
    meter.pause()  # no window open: nothing happens
    meter.resume()
    assert sockets.step_bytes({"sent_bytes_per_step": 2.0, "recv_bytes_per_step": 3.0}) == 5.0
    assert sockets.step_bytes({"sent_bytes_per_step": None, "recv_bytes_per_step": None}) is None


def test_launcher_options_are_each_launchers_own(tmp_path, monkeypatch):
    from labkit.wire import spec as cluster
    from labkit.distributed.launch import Cluster

    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path))
    spec = cluster.local(ps=0, workers=1)
    with pytest.raises(
        ValueError,
        match=r"launcher_options \['rate'\] are not the local launcher's; it takes "
        r"forkserver",
    ):
        Cluster(spec, "ps_sgd", dry_run=True, launcher_options={"rate": 1})
    # another launcher's settings (how to reach nodes over ssh) are left unread where no task needs them
    c = Cluster(spec, "ps_sgd", dry_run=True, launcher_options={"remote_dir": "kit", "forkserver": False})
    assert c.chief == "worker:0" and Path(c.run_dir).name.startswith("ps_sgd-")
    remote = Cluster(
        cluster.from_hosts(["10.0.0.9"], ps=0, workers=1),
        "ps_sgd",
        dry_run=True,
        launcher_options={"ssh": "ssh -i key", "remote_dir": "kit", "remote_python": "py"},
    )
    ((_, command),) = remote.commands()
    # the user's ssh command, with the kit's own liveness options kept (a cut link is noticed)
    assert command.startswith(
        "ssh -o ServerAliveInterval=5 -o ServerAliveCountMax=3 -o ConnectTimeout=10 -i key -- 10.0.0.9 "
    )
    assert "LABKIT_EVENTS=fd:3" in command and "kit" in command
