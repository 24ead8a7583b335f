"""Lab 2: sync and async SGD on real parameter-server clusters of ps_sgd tasks on 127.0.0.1, at tiny sizes.

One sync run (1 ps + 3 workers, stopped by the target loss, with the notebook's sync_round sent as
source) and one async run (1 ps + 2 workers, each stopping after 150 steps of its own) serve most
tests; one more cluster is killed mid-run. The round itself is checked in one process
(check_sync_round), against right and wrong rounds.
"""

import time

import pytest

from helpers import alive, kill_and_expect_task_failed, wait_until
from labkit.labs.lab2 import experiment as sync_async
from labkit.tasks import ps_sgd

SETTINGS = dict(train_limit=3000, test_limit=1000, learning_rate=0.5, seed=0, sample_interval=0.25, timeout=300)
TARGET = 0.42


def sync_round(tf, grads_and_vars, global_step, learning_rate, num_workers, shared):
    """The notebook's round, as a student would write it (sent to the tasks as source)."""
    pushes = []
    for accumulator, (grad, _) in zip(shared.accumulators, grads_and_vars):
        pushes.append(accumulator.apply_grad(grad, local_step=global_step))
    with tf.control_dependencies(pushes):
        worker_op = shared.tokens[shared.worker].dequeue()
    updates = []
    for accumulator, (_, var) in zip(shared.accumulators, grads_and_vars):
        updates.append(var.assign_sub(learning_rate * accumulator.take_grad(num_workers)))
    with tf.control_dependencies(updates):
        step = global_step.assign_add(1)
    return worker_op, tf.group([q.enqueue(step) for q in shared.tokens])


@pytest.fixture(scope="module")
def study(runs_dir):
    sync = sync_async.run(
        "sync",
        "cluster2",
        50,
        target_loss=TARGET,
        max_steps=400,
        eval_every=25,
        sync_round=sync_round,
        log=None,
        **SETTINGS,
    )
    asyn = sync_async.run("async", "cluster", 50, local_steps=150, eval_every=100, log=None, **SETTINGS)
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
    assert local == {"worker:0": 150, "worker:1": 150} and run.global_step() == 300, (local, run.global_step())
    assert {t.result["stop"]["reason"] for t in run.workers} == {"local_steps"}
    assert run.chief.metrics["test_accuracy"] >= 0.85, run.chief.metrics


@pytest.mark.cluster
@pytest.mark.slow
def test_tables_for_the_notebook(study):
    summary = study.summary()
    assert list(summary.index) == [("sync", "cluster2", 50), ("async", "cluster", 50)]
    assert (
        summary.loc[("sync", "cluster2", 50), "iterations"] == 3 * summary.loc[("sync", "cluster2", 50), "global_step"]
    )
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
    assert b.loc["sync", "bytes_per_global_step"] == pytest.approx(3 * b.loc["sync", "bytes_per_worker_step"], rel=0.01)

    marks = study.find("sync").training_marks()
    assert {m["label"] for m in marks} == {"train start", "train end"} and len(marks) == 8  # 3 workers + the ps
    rec = study.records("cluster2", 50)
    assert rec["accuracy"] == {"sync": summary.loc[("sync", "cluster2", 50), "test_accuracy"]}
    assert len(rec["table_1_2_1"]) == 4 and len(rec["summary"]) == 2 and len(rec["iterations"]) == 5
    assert study.configs() == [
        {"mode": "sync", "deploy": "cluster2", "batch_size": 50},
        {"mode": "async", "deploy": "cluster", "batch_size": 50},
    ]


@pytest.mark.cluster
@pytest.mark.slow
def test_killed_sync_worker_raises_task_failed_not_a_hang(runs_dir):
    """Sync workers block on the token queue without the dead worker's gradients; the launcher
    still notices the death and stops everyone."""
    c = sync_async.make_cluster("sync", "cluster", 50, max_steps=10**7, eval_every=50, **SETTINGS)
    with c:

        def trained():  # the chief's evaluation at global step 50 (an event); until then, every task runs
            done = [e for e in c.events("worker:0", "eval") if e.global_step >= 50]
            assert done or all(s == "running" for s in c.status().values()), c.status()
            return done

        wait_until(trained, 240, 0.1, lambda: f"global step 50:\n{c.log_tail('worker:0')}")
        _, elapsed = kill_and_expect_task_failed(c, "worker:1")
    # noticed, not waited out: far under the wait's timeout, by a margin that holds with both cores busy
    assert elapsed < 45, f"TaskFailed took {elapsed:.1f} s"
    assert not alive(c.pids().values())


@pytest.mark.cluster
@pytest.mark.slow
def test_late_start_leaves_the_workers_idle_while_the_chief_trains_alone(runs_dir):
    """Report 002's Table 4 in small: no barrier, a chief that opens its session last, workers that
    sleep recovery_wait_secs when they find the variables uninitialized (5 s here, TensorFlow's 30 in
    the lab): the chief makes every step, the others wake to a finished run and make none."""
    run, table = sync_async.late_start(5, "cluster", 50, max_steps=150, eval_every=150, log=None, **SETTINGS)
    assert run.global_step() == 150 and table.loc["worker:0", "iterations"] == 150, table
    assert table.loc["worker:1", "iterations"] == 0 and table.loc["worker:1", "share"] == 0, table
    assert table.loc["worker:1", "waited_s"] >= 5 > table.loc["worker:0", "waited_s"] - 2, table  # the chief: its 2 s
    assert run.result["worker:1"].result["stop"]["before_first_step"] is True


# ------------------------------------------------------------------ no cluster needed

WRONG_ROUNDS = {  # body lines after the pushes, and the message check_sync_round gives
    "sum": (
        """\
    with tf.control_dependencies([a.apply_grad(g, local_step=global_step) for a, (g, _) in zip(shared.accumulators, grads_and_vars)]):
        worker_op = shared.tokens[shared.worker].dequeue()
    ups = [v.assign_sub(learning_rate * num_workers * a.take_grad(num_workers)) for a, (_, v) in zip(shared.accumulators, grads_and_vars)]
    with tf.control_dependencies(ups):
        step = global_step.assign_add(1)
    return worker_op, tf.group([q.enqueue(step) for q in shared.tokens])""",
        r"the mean \(not the sum\)",
    ),
    "untagged": (
        """\
    with tf.control_dependencies([a.apply_grad(g) for a, (g, _) in zip(shared.accumulators, grads_and_vars)]):
        worker_op = shared.tokens[shared.worker].dequeue()
    ups = [v.assign_sub(learning_rate * a.take_grad(num_workers)) for a, (_, v) in zip(shared.accumulators, grads_and_vars)]
    with tf.control_dependencies(ups):
        step = global_step.assign_add(1)
    return worker_op, tf.group([q.enqueue(step) for q in shared.tokens])""",
        "dropped as stale|drops a gradient",
    ),
    "early_release": (
        """\
    with tf.control_dependencies([a.apply_grad(g, local_step=global_step) for a, (g, _) in zip(shared.accumulators, grads_and_vars)]):
        worker_op = shared.tokens[shared.worker].dequeue()
    means = [a.take_grad(num_workers) for a in shared.accumulators]
    with tf.control_dependencies(means):
        release = tf.group([q.enqueue(global_step.read_value() + 1) for q in shared.tokens])
    with tf.control_dependencies([release]):
        step = global_step.assign_add(1)
    with tf.control_dependencies([step]):
        ups = [v.assign_sub(learning_rate * m) for m, (_, v) in zip(means, grads_and_vars)]
    return worker_op, tf.group(ups)""",
        "returned at global step|the weights are off|accumulators hold",
    ),
    "syncreplicas": (
        """\
    opt = tf.compat.v1.train.SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(learning_rate),
                                                   replicas_to_aggregate=num_workers)
    return opt.apply_gradients(grads_and_vars, global_step), opt.get_chief_queue_runner().enqueue_ops[0]""",
        "created 3 queue.s. or accumulator.s. of its own",
    ),
    "one_value": (
        """\
    return tf.no_op()""",
        "must return \\(worker_op, chief_op\\)",
    ),
}


def _round_from(body: str, folder, name: str):
    """A module file defining sync_round with ``body`` (the kit reads a round's source, to send it)."""
    import importlib.util

    path = folder / f"round_{name}.py"
    path.write_text(
        "import tensorflow as tf\n\n\ndef sync_round(tf, grads_and_vars, global_step, learning_rate, "
        f"num_workers, shared):\n{body}\n"
    )
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.sync_round


@pytest.mark.tensorflow
def test_check_sync_round_accepts_a_round_and_says_what_is_wrong_with_others(tmp_path):
    """In one process, against NumPy: a correct round passes; a sum, untagged (stale) gradients,
    a release before the update, SyncReplicasOptimizer's own queues each fail with what to fix."""
    from labkit.labs.lab2 import solution as lab2

    for fn in (sync_round, lab2.sync_round):
        done = sync_async.check_sync_round(fn)  # the first also pays for TensorFlow's first session here
        assert done["global_step"] == 3 and done["largest_error"] < 1e-4, done
    for name, (body, message) in WRONG_ROUNDS.items():
        t = time.monotonic()
        with pytest.raises(ValueError, match=message):
            sync_async.check_sync_round(_round_from(body, tmp_path, name), timeout=6)
        assert time.monotonic() - t < 30, name  # a blocked round gives up, once
    with pytest.raises(ValueError, match="named sync_round"):
        sync_async.round_source(lambda *a: None)


def test_emulated_shares_without_links_is_an_empty_table_and_a_panel_that_says_so(capsys):
    from labkit.measure import plots

    frame = sync_async.emulated_shares([])
    assert "skipped: no emulated link given" in capsys.readouterr().out
    assert len(frame) == 0 and {"link", "worker", "share", "link_ms_per_step"} <= set(frame.columns)
    fig = plots.worker_shares(frame)
    assert [t.get_text() for t in fig.axes[0].texts] == ["emulated links: skipped (see above)"]


def test_round_source_round_trips_through_the_task():
    fn = ps_sgd.load_round(sync_async.round_source(sync_round))
    assert fn is not sync_round and fn.__name__ == "sync_round"
    from labkit.labs.lab2 import solution as lab2

    assert ps_sgd.load_round(None) is lab2.sync_round  # the kit's reference
    with pytest.raises(ValueError, match="must define a function sync_round"):
        ps_sgd.load_round("x = 1")


def test_task_arguments_and_stop_step():
    args = ps_sgd.parse_args(["--mode", "sync", "--epochs", "2", "--train-limit", "3000", "--batch-size", "50"])
    assert ps_sgd.last_step(args, 3) == 40  # 2 x 3000 images / (3 workers x 50) per global step
    args.mode = "async"
    assert ps_sgd.last_step(args, 3) == 120  # one batch per global step
    assert ps_sgd.last_step(ps_sgd.parse_args(["--steps", "77"]), 3) == 77
    assert ps_sgd.last_step(ps_sgd.parse_args(["--local-steps", "5"]), 3) == ps_sgd.NO_STOP  # each stops by itself
    for argv in (
        ["--target-loss", "0.3", "--eval-every", "0"],
        ["--target-loss", "-1"],
        ["--epochs", "0"],
        ["--local-steps", "0"],
        ["--local-steps", "5", "--target-loss", "0.3"],
    ):
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
    """Report 000's Figures 1.2.1-1.2.2: the sync graph holds the round's accumulators and token
    queues; the async graph applies its gradients directly."""
    import tensorflow as tf

    root = sync_async.write_graphs(sync_round, "cluster2", logdir=tmp_path / "graphs")
    nodes = {}
    for mode in ("sync", "async"):
        (events,) = (root / mode).glob("events.out.tfevents.*")
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            if event.graph_def:
                graph = tf.compat.v1.GraphDef.FromString(event.graph_def)
                nodes[mode] = {n.name for n in graph.node}
    assert {"labkit_round_weights", "labkit_round_bias", "labkit_round_tokens_2"} <= nodes["sync"]
    assert not any("labkit_round" in n for n in nodes["async"]) and "weights" in nodes["async"]
    with pytest.raises(ValueError, match="deploy mode 'cluster9'"):
        sync_async.write_graphs(deploy="cluster9", logdir=tmp_path)


def test_emulated_shares_run_in_the_student_kit(monkeypatch):
    """The kit a student gets has no lab's solution: the emulated-link table needs none of it
    (a worker step moves 2 x MODEL_BYTES: a pull of the weights, a push of the gradients). The
    clusters are stood in for; the rows' arithmetic is the real one."""
    import importlib
    from types import SimpleNamespace

    from labkit.infra import netem
    from labkit.distributed.launchers import netns as netem_launcher

    real = importlib.import_module

    def without_solutions(name, *args, **kwargs):
        if name.startswith("labkit.labs.") and name.endswith(".solution"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args, **kwargs)

    workers = [SimpleNamespace(name=f"worker:{i}", steps={"local_per_s": 10.0 * (i + 1)}) for i in range(2)]
    done = SimpleNamespace(workers=workers, result={}, local_steps=lambda: {"worker:0": 30, "worker:1": 10})
    monkeypatch.setattr(importlib, "import_module", without_solutions)
    monkeypatch.setattr(netem, "usable", lambda links: True)
    monkeypatch.setattr(netem_launcher, "cluster_args", lambda link, nodes: {})
    monkeypatch.setattr(netem_launcher, "task_nodes", lambda result: {"worker:0": "node0", "worker:1": "node1"})
    monkeypatch.setattr(sync_async, "run", lambda *args, **kwargs: done)
    frame = sync_async.emulated_shares(["10mbit"], max_steps=40)
    assert list(frame["share"]) == [0.75, 0.25] and list(frame["node"]) == ["node0", "node1"]
    assert (
        frame["link_ms_per_step"].tolist()
        == [2 * sync_async.MODEL_BYTES / netem.parse_link("10mbit").bytes_per_s * 1e3] * 2
    )
