"""Lab 2: sync and async SGD on real parameter-server clusters of ps_sgd tasks on 127.0.0.1, at tiny sizes.

One sync run (1 ps + 3 workers, stopped by the target loss, with the optimizer sent as source) and
one async run (1 ps + 2 workers, stopped by the step count) serve most tests; one more cluster is
killed mid-run.
"""

import pytest

from helpers import alive, kill_and_expect_task_failed, logged, wait_until
from labkit.experiments import sync_async
from labkit.tasks import ps_sgd

SETTINGS = dict(train_limit=3000, test_limit=1000, learning_rate=0.5, seed=0, sample_interval=0.25, timeout=300)
TARGET = 0.42


def make_optimizer(tf, mode, learning_rate, num_workers):
    """The notebook's function, as a student would write it (sent to the tasks as source)."""
    sgd = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
    if mode == "async":
        return sgd
    return tf.compat.v1.train.SyncReplicasOptimizer(sgd, replicas_to_aggregate=num_workers,
                                                    total_num_replicas=num_workers)


@pytest.fixture(scope="module")
def study(runs_dir):
    sync = sync_async.run("sync", "cluster2", 50, target_loss=TARGET, max_steps=400, eval_every=25,
                          optimizer=make_optimizer, log=None, **SETTINGS)
    asyn = sync_async.run("async", "cluster", 50, max_steps=300, eval_every=100, log=None, **SETTINGS)
    return sync_async.Study([sync, asyn])


@pytest.mark.cluster
@pytest.mark.slow
def test_sync_every_worker_makes_every_global_step(study):
    run = study.find("sync")
    assert [t.ended for t in run.result] == ["done-queue", "exited", "exited", "exited"]
    g = run.global_step()
    local = run.local_steps()
    assert len(local) == 3 and all(abs(n - g) <= 1 for n in local.values()), (local, g)
    # each update aggregated one gradient from each worker, none dropped as stale
    assert sum(local.values()) == 3 * g
    assert all(t.steps["global_at_exit"] == g for t in run.workers)
    assert {t.result["mode"] for t in run.workers} == {"sync"}


@pytest.mark.cluster
@pytest.mark.slow
def test_sync_stops_at_the_target_loss(study):
    run = study.find("sync")
    stop = run.chief.result["stop"]
    assert stop["reason"] == "target" and stop["test_loss"] <= TARGET, stop
    assert run.global_step() == stop["at_global_step"] == stop["reached_at_global_step"] + 1 < 400
    assert all(t.result["stop"]["reason"] == "target" for t in run.workers)
    assert run.chief.metrics["test_accuracy"] >= 0.85, run.chief.metrics
    evals = run.chief.result["series"]["eval"]
    assert [e["global_step"] for e in evals[:3]] == [25, 50, 75] and evals[-1]["global_step"] == run.global_step()


@pytest.mark.cluster
@pytest.mark.slow
def test_async_local_steps_add_up_to_the_global_step(study):
    run = study.find("async")
    local = run.local_steps()
    assert sum(local.values()) == run.global_step() >= 300, (local, run.global_step())
    assert all(n > 0 for n in local.values())
    assert run.chief.result["stop"]["reason"] == "steps"
    assert run.chief.metrics["test_accuracy"] >= 0.85, run.chief.metrics


@pytest.mark.cluster
@pytest.mark.slow
def test_tables_for_the_notebook(study):
    summary = study.summary()
    assert list(summary.index) == [("sync", "cluster2", 50), ("async", "cluster", 50)]
    assert summary.loc[("sync", "cluster2", 50), "iterations"] == 3 * summary.loc[("sync", "cluster2", 50),
                                                                                 "global_step"]
    it = study.iterations()
    assert len(it) == 5 and set(it["worker"]) == {"worker:0", "worker:1", "worker:2"}
    assert it[it["mode"] == "async"]["share"].sum() == pytest.approx(1.0)

    table = study.tasks("cluster2", 50)  # Table 1.2.1 has a row per task, from the sync run here
    assert list(table.index) == [("sync", "ps:0"), ("sync", "worker:0"), ("sync", "worker:1"), ("sync", "worker:2")]
    assert (table["proc_rss_bytes"] > 100e6).all() and (table["cpu_user_pct"] > 0).all()
    assert table.loc[("sync", "worker:0"), "test_accuracy"] >= 0.85

    curves = study.curves("cluster2", 50)
    assert set(curves["mode"]) == {"sync"} and curves["global_step"].is_monotonic_increasing

    b = study.bytes_per_step().set_index("mode")
    # a worker step pulls the model and pushes a gradient: 2 x 31.4 KB, plus a few KB of RPC overhead
    for mode in ("sync", "async"):
        assert b.loc[mode, "analytic_bytes_per_worker_step"] == 2 * sync_async.MODEL_BYTES
        low = 0.95 if b.loc[mode, "method"] == "sockets" else 0.9  # host counters only add others' traffic
        assert low <= b.loc[mode, "measured_over_analytic"] < 1.6, b.loc[mode].to_dict()
    assert b.loc["sync", "bytes_per_global_step"] == pytest.approx(3 * b.loc["sync", "bytes_per_worker_step"],
                                                                   rel=0.01)

    marks = study.find("sync").training_marks()
    assert {m["label"] for m in marks} == {"train start", "train end"} and len(marks) == 8  # 3 workers + the ps
    rec = study.records("cluster2", 50)
    assert rec["accuracy"] == {"sync": summary.loc[("sync", "cluster2", 50), "test_accuracy"]}
    assert len(rec["table_1_2_1"]) == 4 and len(rec["summary"]) == 2 and len(rec["iterations"]) == 5
    assert study.configs() == [{"mode": "sync", "deploy": "cluster2", "batch_size": 50},
                               {"mode": "async", "deploy": "cluster", "batch_size": 50}]


@pytest.mark.cluster
@pytest.mark.slow
def test_killed_sync_worker_raises_task_failed_not_a_hang(runs_dir):
    """Sync workers block on the token queue without the dead worker's gradients; the launcher
    still notices the death and stops everyone."""
    c = sync_async.make_cluster("sync", "cluster", 50, max_steps=10 ** 7, eval_every=50, **SETTINGS)
    with c:
        def trained():  # the chief's test loss at global step 50; until then, every task runs
            line = logged(c.run_dir / "worker-0.log", "global step 50:")()
            assert line or all(s == "running" for s in c.status().values()), c.status()
            return line

        wait_until(trained, 240, 0.1, lambda: f"global step 50:\n{c.log_tail('worker:0')}")
        _, elapsed = kill_and_expect_task_failed(c, "worker:1")
    assert elapsed < 15, f"TaskFailed took {elapsed:.1f} s"
    assert not alive(c.pids().values())


# ------------------------------------------------------------------ no cluster needed

def _plain():
    def make_optimizer(tf, mode, learning_rate, num_workers):
        return tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
    return make_optimizer


def _too_few():
    def make_optimizer(tf, mode, learning_rate, num_workers):
        sgd = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
        return sgd if mode == "async" else tf.compat.v1.train.SyncReplicasOptimizer(sgd, replicas_to_aggregate=1,
                                                                                    total_num_replicas=1)
    return make_optimizer


def _always_sync():
    def make_optimizer(tf, mode, learning_rate, num_workers):
        sgd = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
        return tf.compat.v1.train.SyncReplicasOptimizer(sgd, replicas_to_aggregate=num_workers,
                                                        total_num_replicas=num_workers)
    return make_optimizer


def _wrong_rate():
    def make_optimizer(tf, mode, learning_rate, num_workers):
        return tf.compat.v1.train.GradientDescentOptimizer(10 * learning_rate)
    return make_optimizer


@pytest.mark.tensorflow
def test_check_optimizer_accepts_the_reference_and_says_what_is_wrong():
    assert sync_async.check_optimizer(make_optimizer, workers=3) == {"async": "GradientDescentOptimizer",
                                                                      "sync": "SyncReplicasOptimizer"}
    assert "make_optimizer(tf, mode" in sync_async.optimizer_source(make_optimizer)
    for factory, message in ((_plain, "sync mode needs tf.compat.v1.train.SyncReplicasOptimizer"),
                             (_too_few, "must both be 3, got 1 and 1"),
                             (_always_sync, "async mode must not wrap"),
                             (_wrong_rate, "learning rate is 5.0, expected 0.5")):
        with pytest.raises(ValueError, match=message):
            sync_async.check_optimizer(factory(), workers=3, learning_rate=0.5)
    with pytest.raises(ValueError, match="named make_optimizer"):
        sync_async.optimizer_source(lambda tf, mode, lr, n: None)

    def helper():  # named otherwise: the tasks would find no make_optimizer in its source
        pass
    helper.__name__ = "make_optimizer"
    with pytest.raises(ValueError, match="must define a function make_optimizer"):
        sync_async.optimizer_source(helper)


def test_optimizer_source_round_trips_through_the_task():
    fn = ps_sgd.load_optimizer_factory(sync_async.optimizer_source(make_optimizer))
    assert fn is not make_optimizer and fn.__name__ == "make_optimizer"
    from labkit.solutions import lab2

    assert ps_sgd.load_optimizer_factory(None) is lab2.make_optimizer  # the kit's reference
    with pytest.raises(ValueError, match="must define a function make_optimizer"):
        ps_sgd.load_optimizer_factory("x = 1")


def test_task_arguments_and_stop_step():
    args = ps_sgd.parse_args(["--mode", "sync", "--epochs", "2", "--train-limit", "3000", "--batch-size", "50"])
    assert ps_sgd.last_step(args, 3) == 40  # 2 x 3000 images / (3 workers x 50) per global step
    args.mode = "async"
    assert ps_sgd.last_step(args, 3) == 120  # one batch per global step
    assert ps_sgd.last_step(ps_sgd.parse_args(["--steps", "77"]), 3) == 77
    for argv in (["--target-loss", "0.3", "--eval-every", "0"], ["--target-loss", "-1"], ["--epochs", "0"]):
        with pytest.raises(SystemExit):
            ps_sgd.parse_args(argv)


def test_bad_experiment_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="mode 'sgd'"):
        sync_async.make_cluster("sgd")
    with pytest.raises(ValueError, match="deploy mode 'huge'"):
        sync_async.make_cluster("sync", "huge")
    with pytest.raises(ValueError, match="fewer than batch 600"):
        sync_async.sweep(("sync",), ("cluster2",), (600,), train_limit=1000, progress=False)
    with pytest.raises(ValueError, match="is not one of"):
        sync_async.sweep(("sync", "bsp"), progress=False)


@pytest.mark.tensorflow
def test_write_graphs_gives_tensorboard_the_graph_each_mode_builds(tmp_path):
    """Report 000's Figures 1.2.1-1.2.2: the sync graph holds SyncReplicasOptimizer's accumulators
    and token queue; the async graph applies its gradients directly."""
    import tensorflow as tf

    root = sync_async.write_graphs(make_optimizer, "cluster2", logdir=tmp_path / "graphs")
    nodes = {}
    for mode in ("sync", "async"):
        (events,) = (root / mode).glob("events.out.tfevents.*")
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            if event.graph_def:
                graph = tf.compat.v1.GraphDef.FromString(event.graph_def)
                nodes[mode] = {n.name for n in graph.node}
    assert any("conditional_accumulator" in n for n in nodes["sync"])
    assert any("sync_token_q" in n for n in nodes["sync"])
    assert not any("sync_replicas" in n for n in nodes["async"]) and "weights" in nodes["async"]
    with pytest.raises(ValueError, match="deploy mode 'cluster9'"):
        sync_async.write_graphs(deploy="cluster9", logdir=tmp_path)
