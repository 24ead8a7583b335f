"""Per-task bytes that do not depend on the run: a socket a listing skips, and whose window counts a task.

Lab 5 once measured a ring worker's bytes at N = 3 as 1.11 M per step against 4/3 M: one worker of
three had lost half of its bytes (an epoch's window), and the mean over workers carried a third of
that. These tests hold the measurement to the three fixes: a listing that misses a live task's
socket is made again, a socket that comes back is not counted twice, a trainer counts itself over
its own steps, and a worker's bytes are the median over the workers.
"""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest

from labkit.measure import sockets
from labkit.labs.lab5 import experiment as ring_vs_ps


def _ss(pid, *sockets_sent):
    return "".join(
        f'ESTAB 0 0 127.0.0.1:{port} 127.0.0.1:29301 users:(("python",pid={pid},fd=9))\n'
        f"\t cubic bytes_sent:{sent} bytes_received:{sent}\n"
        for port, sent in sockets_sent
    )


def _counter(monkeypatch, tmp_path, listings, pid):
    it = iter(listings)
    calls = []

    def ss_text(timeout):
        calls.append(1)
        return next(it)

    monkeypatch.setattr(sockets, "_ss_text", ss_text)
    counter = sockets.TaskBytes(tmp_path)
    counter._pids = {"worker:0": pid}
    return counter, calls


def test_a_skipped_socket_of_a_live_task_is_listed_again(monkeypatch, tmp_path):
    pid = os.getpid()  # alive: its socket cannot have closed with it
    listings = [
        _ss(pid, (1, 100), (2, 100)),
        _ss(pid, (2, 500)),  # the dump skipped socket 1 ...
        _ss(pid, (1, 700), (2, 500)),
    ]  # ... the second listing has it
    counter, calls = _counter(monkeypatch, tmp_path, listings, pid)
    assert counter()["worker:0 sent"] == 200
    assert counter()["worker:0 sent"] == 1200  # 600 + 400: nothing of socket 1's window lost
    assert len(calls) == 3


def test_a_socket_missing_from_every_listing_keeps_its_count_and_is_not_counted_twice(monkeypatch, tmp_path):
    pid = os.getpid()
    listings = [
        _ss(pid, (1, 100), (2, 100)),
        _ss(pid, (2, 300)),
        _ss(pid, (2, 300)),
        _ss(pid, (2, 300)),  # socket 1 missed three times
        _ss(pid, (1, 900), (2, 400)),
    ]  # back, at 900
    counter, _ = _counter(monkeypatch, tmp_path, listings, pid)
    assert counter()["worker:0 sent"] == 200
    assert counter()["worker:0 sent"] == 400
    # only the 800 it moved since it was last seen, not its whole 900 again
    assert counter()["worker:0 sent"] == 400 + 800 + 100


def _run(readings: dict, chief: str = "worker:0", workers: int = 3):
    """A ring Run whose tasks read per-task counters per step: {reader: {task: sent}}."""
    tasks = []
    for name in [f"worker:{i}" for i in range(workers)]:
        per = readings.get(name, {})
        traffic = (
            {
                "counters_per_step": {
                    **{f"{t} sent": v for t, v in per.items()},
                    **{f"{t} recv": v for t, v in per.items()},
                }
            }
            if per
            else {}
        )
        tasks.append(SimpleNamespace(name=name, traffic=traffic))
    train = {"per_worker_batch": 64, "images_per_step": 64 * workers, "model_bytes": 3.0}
    run = ring_vs_ps.Run.__new__(ring_vs_ps.Run)
    run.arch, run.model, run.workers, run.n_ps = "ring", "mlp", workers, 0
    run.result = _Result(tasks, chief, train)
    return run


class _Result(list):
    def __init__(self, tasks, chief, train):
        super().__init__(tasks)
        self._chief = next(t for t in tasks if t.name == chief)
        self._chief.training = train

    def chief(self):
        return self._chief


def test_each_trainer_counts_itself_and_a_worker_is_the_median():
    # worker:2's window missed half of worker:1's and of its own bytes; worker:1 read itself right
    readings = {
        "worker:0": {"worker:0": 4.0, "worker:1": 4.0, "worker:2": 2.0},
        "worker:1": {"worker:0": 4.0, "worker:1": 4.0, "worker:2": 4.0},
        "worker:2": {"worker:0": 4.0, "worker:1": 2.0, "worker:2": 2.0},
    }
    run = _run(readings)
    got = {t: v["sent"] for t, v in run.task_bytes().items()}
    assert got == {"worker:0": 4.0, "worker:1": 4.0, "worker:2": 2.0}  # each its own, never the last reader's
    sweep = ring_vs_ps.Scaling([run], settings={"workers": [3]})
    wb = sweep.worker_bytes("ring", "mlp", 3)
    assert wb["sent_per_step"] == 4.0 and wb["per_worker"]["worker:2"]["sent"] == 2.0
    assert not math.isclose(sum(got.values()) / 3, 4.0)  # the mean would have missed


def test_a_task_that_only_serves_is_counted_by_the_chief():
    readings = {
        "worker:0": {"worker:0": 4.0, "worker:1": 3.0},
        "worker:1": {"worker:0": 1.0, "worker:1": 4.0, "worker:2": 9.0},
    }
    got = {t: v["sent"] for t, v in _run(readings).task_bytes().items()}
    assert got["worker:0"] == 4.0 and got["worker:1"] == 4.0
    assert got["worker:2"] == 9.0  # nobody better read it


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
