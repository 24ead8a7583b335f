"""Lab 5: parameter server and ring all-reduce on real 127.0.0.1 clusters of strategy_train tasks.

Two runs of the communication-heavy MLP at N=2 (one per architecture) serve the cluster tests:
bytes per step per task against the analytic model, the same model trained and its loss reduced.
Timings are never asserted: the machine is shared.
"""

import math

import pytest

from labkit.learning import costmodel
from labkit.measure import sockets
from labkit.labs.lab5 import experiment as ring_vs_ps
from labkit.labs.lab5.solution import step_bytes

SS_SAMPLE = """\
ESTAB 0 0 127.0.0.1:50866 127.0.0.1:29301 users:(("python",pid=11,fd=29))
\t bbr wscale:10,10 rto:204 bytes_sent:103 bytes_acked:104 bytes_received:10384 segs_out:25
ESTAB 0 0 127.0.0.1:29301 127.0.0.1:50866 users:(("python",pid=22,fd=7),("python",pid=11,fd=9))
\t cubic rto:204 bytes_acked:5000 segs_out:3
ESTAB 0 0 127.0.0.1:40000 127.0.0.1:40001
\t cubic bytes_sent:7 bytes_received:9
"""


def _ss(*sockets_sent):
    return "".join(
        f'ESTAB 0 0 127.0.0.1:{port} 127.0.0.1:29301 users:(("python",pid=11,fd=9))\n'
        f"\t cubic bytes_sent:{sent} bytes_received:{2 * sent}\n"
        for port, sent in sockets_sent
    )


def test_task_bytes_only_grow_when_sockets_close_and_open(monkeypatch, tmp_path):
    """A socket that closes between two readings takes none of its bytes back; one that opens
    (on ports a closed one used, too) brings all of its own."""
    readings = iter([_ss((1, 100)), _ss((1, 300), (2, 50)), _ss((2, 80)), _ss((2, 80), (1, 10)), None])
    monkeypatch.setattr(sockets, "_ss_text", lambda timeout: next(readings))
    counter = sockets.TaskBytes(tmp_path)
    counter.RETRIES = 0  # socket 1 really closed: no second listing looks for it
    counter._pids = {"worker:0": 11}
    sent = [counter()["worker:0 sent"] for _ in range(4)]
    assert sent == [100, 350, 380, 390]
    assert counter()["worker:0 recv"] == 780  # no ss: what was counted stays


def test_ss_output_is_summed_per_process():
    # a socket shared by two processes counts for both; bytes_acked stands in for a missing bytes_sent;
    # a socket whose process ss cannot name counts for nobody
    assert sockets.parse_ss(SS_SAMPLE) == {11: (5103, 10384), 22: (5000, 0)}
    import os
    import socket

    if sockets.tcp_bytes() is None:
        pytest.skip("ss (iproute2) is not installed")
    # every process's sockets, this one's among them: 60 kB sent and received here shows under our pid
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        conn, _ = server.accept()
        with conn:
            client.sendall(b"x" * 60_000)
            got = 0
            while got < 60_000:
                got += len(conn.recv(65536))
            sent, recv = sockets.tcp_bytes()[os.getpid()]
    assert sent >= 60_000 - 1 and recv >= 60_000, (sent, recv)


def test_own_tcp_bytes_count_this_process_traffic():
    """100 kB over a loopback connection whose both ends are this process: sent and received grow by it."""
    import socket

    if sockets.own_tcp_bytes() is None:
        pytest.skip("ss (iproute2) is not installed")
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        conn, _ = server.accept()
        with conn:
            sent0, recv0 = sockets.own_tcp_bytes()
            client.sendall(b"x" * 100_000)
            got = 0
            while got < 100_000:
                got += len(conn.recv(65536))
            sent1, recv1 = sockets.own_tcp_bytes()
    # (>= the payload less 1: before any data ss shows only bytes_acked, which counts the SYN)
    assert sent1 - sent0 >= 100_000 - 1 and recv1 - recv0 >= 100_000, (sent0, sent1, recv0, recv1)


@pytest.mark.tensorflow  # make_cluster starts the fork server, which imports TensorFlow, even for a dry run
def test_clusters_are_built_for_each_architecture_and_bad_sizes_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path))
    ps = ring_vs_ps.make_cluster("ps", "mlp", 2, n_ps=2, steps=6, batch_size=32, dry_run=True)
    assert ps.spec.num_tasks("ps") == 2 and ps.spec.num_tasks("worker") == 2 and "chief" in ps.spec.jobs
    cmd = dict(ps.commands())["chief:0"]
    assert "--strategy ps" in cmd and "--ps-sync" in cmd and "--task-bytes" in cmd and "--steps-per-epoch 3" in cmd
    assert "LABKIT_INTRA_OP_THREADS=1" in cmd  # one core per worker on 127.0.0.1
    ring = ring_vs_ps.make_cluster("ring", "lenet5", 3, dry_run=True)
    assert ring.spec.jobs == ("worker",) and "--strategy mwms" in dict(ring.commands())["worker:0"]
    with pytest.raises(ValueError, match="train_limit=100"):
        ring_vs_ps.make_cluster("ring", "mlp", 2, steps=10, train_limit=100)
    with pytest.raises(ValueError, match="steps=1 must be at least epochs=2"):
        ring_vs_ps.make_cluster("ring", "mlp", 2, steps=1)
    with pytest.raises(ValueError, match="steps=7 must split evenly over epochs=2, e.g. steps=6"):
        ring_vs_ps.make_cluster("ring", "mlp", 2, steps=7)
    with pytest.raises(ValueError, match="unknown architecture 'allreduce'"):
        ring_vs_ps.make_cluster("allreduce", "mlp", 2)
    with pytest.raises(ValueError, match="workers must be positive"):
        ring_vs_ps.scaling(workers=(0, 2))


def _ps_run(workers: int, ps_sync: bool, m: float = 1000.0, batch: int = 10):
    """A finished PS run as the tasks report it: per loop step, each worker sends and receives
    M per own step and the ps N*M per round, spread over the loop's steps."""
    from pathlib import Path

    from labkit.distributed.launch import ClusterResult, TaskOutcome

    per_loop_step = 1 if ps_sync else 1 / workers  # share of a round one loop step carries
    counters = {f"worker:{i} {side}": m * per_loop_step for i in range(workers) for side in ("sent", "recv")}
    counters.update({f"ps:0 {side}": workers * m * per_loop_step for side in ("sent", "recv")})
    counters.update({"chief:0 sent": 0.0, "chief:0 recv": 0.0})
    train = {
        "per_worker_batch": batch,
        "images_per_step": batch * (workers if ps_sync else 1),
        "model_bytes": m,
        "variables": [{"name": "w", "device": "/job:ps/replica:0/task:0/device:CPU:0", "bytes": m}],
        "ps_sync": ps_sync,
    }
    traffic = {
        "counters_per_step": counters,
        "nics": ["lo"],
        "nic_sent_bytes_per_step": 2 * workers * m * per_loop_step,
    }
    tasks = [
        TaskOutcome(
            name,
            name.split(":")[0],
            0,
            "127.0.0.1",
            "exited",
            0,
            1.0,
            Path("log"),
            {"train": train, "traffic": traffic} if name == "chief:0" else {},
        )
        for name in ["ps:0", "chief:0", *(f"worker:{i}" for i in range(workers))]
    ]
    return ring_vs_ps.Run("ps", "mlp", workers, 1, ClusterResult("strategy_train", Path("."), {}, tasks))


@pytest.mark.parametrize("ps_sync", [True, False])
def test_asynchronous_ps_bytes_are_per_round_of_n_worker_steps(ps_sync):
    """Async PS loops count each worker's batch as a step; per lab step (N x batch images) the
    bytes are those of a synchronous round, so no task is flagged for being async."""
    run = _ps_run(3, ps_sync)
    assert run.loop_steps_per_step() == (1 if ps_sync else 3)
    got = run.task_bytes()
    assert got["ps:0"]["sent"] == pytest.approx(3000) and got["worker:2"]["recv"] == pytest.approx(1000)
    assert run.total_bytes() == pytest.approx(step_bytes("ps", 1000, 3).total) == pytest.approx(6000)
    table = ring_vs_ps.Scaling([run]).task_bytes().set_index("task")
    assert table.loc["ps:0", "sent_over_model"] == pytest.approx(3) and "deviation" not in table  # measured only
    assert table.loc["worker:1", "recv_over_model"] == pytest.approx(1) and table.loc["total", "sent_over_model"] == 6


# ------------------------------------------------------------------------------ real clusters

SETTINGS = dict(batch_size=32, steps=6, epochs=2, test_limit=500, lr=0.05, seed=0, timeout=600)


@pytest.fixture(scope="module")
def two_workers(runs_dir):
    """The MLP on 2 workers under each architecture (PS synchronous), checkpointed: a Scaling of two runs."""
    runs = [
        ring_vs_ps.run_one(arch, "mlp", 2, run=f"mlp-{arch}-w2", checkpoint_dir=runs_dir / f"ckpt-{arch}", **SETTINGS)
        for arch in ("ps", "ring")
    ]
    return ring_vs_ps.Scaling(runs, settings={"cores": 2})


def final_weights(run) -> list:
    """The trainable variables in the last checkpoint of the run's chief (chief-0 or worker-0)."""
    import tensorflow as tf

    tr = run.train
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(tr["checkpoint_dir"]))
    return [
        reader.get_tensor(f"optimizer/_trainable_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE")
        for i in range(len(tr["variables"]))
    ]


@pytest.mark.cluster
@pytest.mark.slow
def test_bytes_per_step_per_task_match_the_analytic_model(two_workers):
    """PS at N=2: each worker sends and receives M per step, the ps 2M; ring: each worker M.
    Every task's own sockets within 25% of the reference model (a probe measured +0-4%)."""
    t = two_workers.task_bytes(expected=step_bytes).set_index(["arch", "task"])
    m = two_workers.runs[0].train["model_bytes"]
    assert t.loc[("ps", "ps:0"), "expected_sent_bytes"] == 2 * m
    assert t.loc[("ring", "worker:1"), "expected_sent_bytes"] == m
    tasks = t.drop(index=[("ps", "chief:0"), ("ps", "total"), ("ring", "total")])
    assert set(tasks["method"]) == {"sockets"} and len(tasks) == 5
    for side in ("sent", "recv"):
        ratio = tasks[f"{side}_bytes"] / tasks[f"expected_{side}_bytes"]
        assert ratio.between(0.75, 1.25).all(), tasks[[f"{side}_bytes", f"expected_{side}_bytes"]]
    assert tasks.loc[("ps", "ps:0"), "sent_over_model"] == pytest.approx(2, rel=0.25)  # N = 2 pulls of M
    # the chief only schedules closures; the synchronous update runs on the ps
    assert t.loc[("ps", "chief:0"), "sent_bytes"] < 0.01 * m
    # lo is system-wide: other programs can add bytes, never remove them
    assert (t.xs("total", level="task")["deviation"] > -0.1).all()
    assert two_workers.bytes_deviation(step_bytes)["max_abs_deviation"] < 0.25
    busiest = two_workers.busiest_task()
    assert busiest["ps"] > 1.5 * busiest["ring"]
    # the critical path Lab 5's comm_terms is checked against: the ps's both directions (4M), a ring worker's one (M)
    critical = two_workers.critical_bytes().set_index("arch")
    assert critical.loc["ps", "measured_task"] == "ps:0" and critical.loc["ring", "measured_task"] == "worker (median)"
    assert critical.loc["ps", "measured_bytes"] == pytest.approx(4 * m, rel=0.25)
    assert critical.loc["ring", "measured_bytes"] == pytest.approx(m, rel=0.25)

    checked = two_workers.check_terms(costmodel.reference_terms())
    assert list(checked["arch"]) == ["ps", "ring"] and (checked["deviation"].abs() < 0.25).all()


@pytest.mark.cluster
@pytest.mark.slow
def test_both_architectures_train_the_same_model_and_reduce_its_loss(two_workers):
    ps, ring = (r.train for r in two_workers.runs)
    assert ps["strategy"] == "ParameterServerStrategy" and ring["strategy"] == "MultiWorkerMirroredStrategy"
    assert [v["name"] for v in ps["variables"]] == [v["name"] for v in ring["variables"]]
    assert ps["params"] == ring["params"] == 5_824_522
    assert all(v["device"].startswith("/job:ps/replica:0/task:0/") for v in ps["variables"])
    for tr in (ps, ring):
        assert tr["images_per_step"] == 2 * SETTINGS["batch_size"] and tr["steps_per_epoch"] == 3
        h = tr["history"]
        assert h[-1]["train_loss"] < h[0]["train_loss"] < math.log(10) + 0.1, h
        assert tr["val_loss"] < math.log(10) and tr["val_accuracy"] > 0.2
    assert ps["ps_sync"] is True
    ends = {t.name: t.ended for t in two_workers.runs[0].result}
    assert ends == {
        "ps:0": "chief-port-closed",
        "chief:0": "exited",
        "worker:0": "chief-port-closed",
        "worker:1": "chief-port-closed",
    }
    table = two_workers.table()
    assert list(table["arch"]) == ["ps", "ring"] and (table["images_per_s"] > 0).all()
    assert two_workers.find(arch="ring") is two_workers.get("ring", "mlp") is two_workers.runs[1]
    assert two_workers.runs[0].chief.name == "chief:0" and two_workers.runs[1].chief.name == "worker:0"
    checked = two_workers.check_terms(costmodel.reference_terms())
    records = two_workers.records(crossover={"net": {"2": 1.0}}, terms_check=checked)
    assert list(records) == [
        "scaling_table",
        "task_bytes",
        "busiest_task_bytes",
        "crossover",
        "terms_check",
        "settings",
    ]
    assert records["terms_check"]["runs"] == 2 and records["terms_check"]["max_abs_deviation"] < 0.25
    assert table["speedup"].isna().all()  # no N=1 run to divide by
    with pytest.raises(ValueError, match="no 1-worker ring run"):
        two_workers.cost_runs()


@pytest.mark.cluster
@pytest.mark.slow
def test_synchronous_ps_is_the_rings_sgd_and_asynchronous_ps_is_not(two_workers, runs_dir):
    """Same seed, data and steps: synchronous PS (one update per step from the mean of one gradient
    per worker over the ring's global batch) ends with the ring's weights and losses; asynchronous
    PS (each worker batch its own update, at the full learning rate) does not."""
    import numpy as np

    ps, ring = two_workers.runs
    asynchronous = ring_vs_ps.run_one(
        "ps", "mlp", 2, ps_sync=False, run="mlp-ps-async-w2", checkpoint_dir=runs_dir / "ckpt-ps-async", **SETTINGS
    )
    assert ps.train["global_batch"] == ring.train["global_batch"] == 2 * SETTINGS["batch_size"]
    assert asynchronous.train["global_batch"] == SETTINGS["batch_size"] and asynchronous.train["ps_sync"] is False
    steps = [sum(h["steps"] for h in r.train["history"]) for r in (ps, ring)]
    assert steps == [SETTINGS["steps"]] * 2
    ring_w, sync_w, async_w = (final_weights(r) for r in (ring, ps, asynchronous))
    moved = max(float(np.abs(w).max()) for w in ring_w)
    for a, b in zip(ring_w, sync_w):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6 * moved)
    assert max(float(np.abs(a - b).max()) for a, b in zip(ring_w, async_w)) > 1e-4
    for key in ("train_loss", "val_loss", "val_accuracy"):
        assert [h[key] for h in ps.train["history"]] == pytest.approx(
            [h[key] for h in ring.train["history"]], rel=1e-5
        ), key
