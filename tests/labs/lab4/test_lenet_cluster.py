"""Lab 4 on real clusters of strategy_train tasks (MWMS, RING) on 127.0.0.1, at tiny sizes.

One small sweep (1 and 2 workers) serves several tests; the fault-tolerance test uses its
2-worker run as the uninterrupted reference.
"""

import json
import math
from pathlib import Path

import psutil
import pytest

from helpers import said

from labkit.labs.lab4 import experiment as lenet_sweep
from labkit.wire.results import ClusterResult

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SETTINGS = dict(epochs=2, train_limit=3000, test_limit=500, lr=0.05, seed=0)
BATCH = 50


@pytest.fixture(scope="module")
def sweep(runs_dir):
    return lenet_sweep.sweep(
        workers=(1, 2), batch_sizes=(BATCH,), idle_s=0.5, progress=False, log=None, timeout=600, **SETTINGS
    )


def test_two_workers_end_with_identical_weights(sweep):
    two = sweep.find(workers=2).result
    assert [t.ended for t in two] == ["finished", "finished"]  # the configuration; its cluster's processes:
    assert [t.ended for t in ClusterResult.load(two.cluster_dir)] == ["exited", "exited"]
    checksums = {t.training["weights_sha256"] for t in two}
    assert len(checksums) == 1, checksums
    assert two["worker:1"].training["history"][-1]["weights_sha256"] in checksums


def test_one_and_two_workers_both_reduce_the_loss(sweep):
    assert sweep.configs() == [{"workers": 1, "batch_size": BATCH}, {"workers": 2, "batch_size": BATCH}]
    for run in sweep.runs:
        tr = run.train
        h = tr["history"]
        assert run.chief.name == "worker:0"
        assert tr["workers"] == run.workers and tr["global_batch"] == BATCH * run.workers
        assert h[-1]["train_loss"] < h[0]["train_loss"], h
        assert h[-1]["val_loss"] < h[0]["val_loss"] < math.log(10) + 0.05, h


def test_ring_all_reduce_equals_one_process_at_the_global_batch(sweep):
    """2 workers x 50 sum their gradients into the mean over the same global batches of 100
    that one process sees: the same training up to float rounding."""
    from labkit.datasets.loaders import load_mnist
    from labkit.learning.train_loop import train

    data = load_mnist(limit=SETTINGS["train_limit"], test_limit=SETTINGS["test_limit"], seed=SETTINGS["seed"])
    one = train(
        "lenet5",
        data,
        batch_size=2 * BATCH,
        epochs=SETTINGS["epochs"],
        lr=SETTINGS["lr"],
        seed=SETTINGS["seed"],
        log=None,
    )
    two = sweep.find(2, BATCH).train
    assert two["val_loss"] == pytest.approx(one["val_loss"], rel=1e-3)
    assert two["history"][0]["train_loss"] == pytest.approx(one["history"][0]["train_loss"], rel=0.1)


def test_sweep_tables_are_complete(sweep):
    table = sweep.table()
    assert list(table.index) == [f"1 x {BATCH}", f"2 x {BATCH}", "Idle"]
    runs = table.drop(index="Idle")
    assert not runs.isna().any().any(), runs
    assert not table.loc["Idle", list(lenet_sweep.RESOURCE_COLUMNS)].isna().any()
    assert (runs["val_accuracy"] > 0.1).all() and (runs["time_s"] > 0).all()
    assert len(sweep.tasks()) == 3
    curves = sweep.curves()
    assert len(curves) == 2 * 2 * SETTINGS["epochs"] and not curves["value"].isna().any()
    tp = sweep.throughput()
    # What each worker's own sockets sent: 2(N-1)/N x model bytes, plus gRPC framing.
    assert tp.loc[f"2 x {BATCH}", "measured_over_analytic"] == pytest.approx(1.0, abs=0.25)
    assert sweep.best()["config"] in runs.index
    records = sweep.records()
    assert list(records) == ["sweep_table", "tasks", "throughput", "best_config", "settings"]
    assert records["sweep_table"]["config"].tolist() == list(table.index)
    assert records["settings"]["workers"] == [1, 2] and records["settings"]["epochs"] == SETTINGS["epochs"]
    with pytest.raises(KeyError, match="no run matches 3; runs: 1 x 50, 2 x 50"):
        sweep.find(3)


def test_kill_after_epoch_1_restart_resumes_at_epoch_2_with_the_checkpointed_weights(sweep):
    ft = lenet_sweep.fault_tolerance(
        workers=2, batch_size=BATCH, kill_after_epoch=1, reference=sweep, log=None, timeout=600, **SETTINGS
    )
    assert ft["reference"]["run_dir"] == str(sweep.find(2, BATCH).result.run_dir)  # the sweep's run, not a new one
    assert ft["failure"]["task"] == "worker:1" and ft["failure"]["returncode"] == -9
    assert said("epoch 1/2") in ft["failure"]["log_tail"]
    # The survivor met TensorFlow's own error (the dead peer's connections were reset), wrote it
    # into its result file and exited by itself, well before the launcher's bound; the launcher
    # reported it as a consequence of the kill.
    peer = ft["peer_failure"]
    survivor = peer["survivors"]["worker:0"]
    assert peer["errors"] == ["UnavailableError"], peer
    assert not survivor["stopped_by_launcher"] and survivor["returncode"] == 1, survivor
    assert 0 <= survivor["error_after_s"] <= survivor["exit_after_s"] + 0.5, survivor
    assert peer["mwms_failure_s"] == survivor["error_after_s"] < lenet_sweep.SURVIVOR_WAIT_S / 2, peer
    assert "worker:0 exited with code 1" in ft["failure"]["message"], ft["failure"]["message"]
    for hello in (Path(ft["run_dir"]) / "interrupted").glob("worker-*.hello.json"):  # nothing left running
        pid = json.loads(hello.read_text())["pid"]
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, hello
    evidence = lenet_sweep.resume_evidence(ft)
    assert evidence["survivor_error"] == "UnavailableError" and evidence["mwms_failure_s"] == peer["mwms_failure_s"]
    resumed = ft["resumed"]
    assert resumed["start_epoch"] == 1 and resumed["first_epoch_trained"] == 2
    assert resumed["restored_checkpointed_weights"], resumed
    assert [h["epoch"] for h in resumed["history"]] == [1, 2]
    # Same seed, same batches, same sums: the resumed run ends where the uninterrupted one did.
    assert abs(ft["accuracy_difference_points"]) < 0.5


def test_the_model_option_reaches_every_task(tmp_path, monkeypatch):
    """Lab 4's model option: LeCun's tanh/average-pool LeNet, same size, named on every task's command line."""
    from labkit.learning import models

    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path / "runs"))
    c = lenet_sweep.make_cluster(2, 50, epochs=1, model="lenet5_tanh_avg")
    assert c.args["model"] == "lenet5_tanh_avg"
    assert models.build("lenet5_tanh_avg").count_params() == models.build("lenet5").count_params() == 61_706
    assert lenet_sweep.make_cluster(1, 50, epochs=1).args["model"] == "lenet5"
