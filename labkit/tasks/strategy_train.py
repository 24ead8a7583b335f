"""Train a Keras model on MNIST (or synthetic images) under a ``tf.distribute`` strategy, one task per process.

``python -m labkit.tasks.strategy_train --strategy mwms --model lenet5 --batch-size 50 --epochs 3``
as every task of a cluster; the loop is ``labkit.learning.train_loop.train`` (Keras 3 ``fit`` fails
under both multi-worker strategies). ``--strategy`` is ``mwms`` (ring all-reduce; created before
any other op, as collectives must be), ``ps`` (a chief drives a ``ClusterCoordinator``; variables
placed whole, round-robin; ``--ps-sync`` for synchronous SGD) or ``default`` (the one-worker
baseline). Checkpoints every epoch let a restarted task resume.

Several configurations (``--configs``) run one after the other under the process's one strategy:
the strategy is made once, everything else afresh per configuration, so each trains to the same
weights as in a fresh process.

More in docs/internals.md, section labkit.tasks (why variables are not sharded, what is made
once and what per configuration, the result file).
"""

from __future__ import annotations

import argparse
import gc
import time

from labkit.wire import events
from labkit.tasks.common import TaskRuntime, mnist_for, parse_with_configs

STRATEGIES = ("mwms", "ps", "default")
# What a configuration may set; the strategy, the NIC and the byte counters are the cluster's.
VARYING = (
    "model",
    "batch_size",
    "epochs",
    "lr",
    "momentum",
    "train_limit",
    "test_limit",
    "steps_per_epoch",
    "seed",
    "checkpoint_dir",
    "tensorboard_dir",
    "ps_sync",
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m labkit.tasks.strategy_train", description=__doc__.splitlines()[0])
    p.add_argument("--strategy", choices=STRATEGIES, default="mwms")
    p.add_argument(
        "--model",
        default="lenet5",
        help="a labkit.learning.models name (lenet5, mlp, softmax_regression, cifar_cnn: on synthetic 32x32x3 images)",
    )
    p.add_argument("--batch-size", type=int, default=50, help="examples per worker per step")
    p.add_argument("--epochs", type=int, default=3, help="epochs to reach (a resumed run trains the rest)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument(
        "--train-limit", type=int, default=None, help="MNIST training images (stratified subset); default all 60,000"
    )
    p.add_argument("--test-limit", type=int, default=None, help="MNIST test images for validation; default all")
    p.add_argument("--steps-per-epoch", type=int, default=None, help="default: one pass over the training set")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-dir", default=None, help="checkpoint every epoch here and resume from it")
    p.add_argument("--tensorboard-dir", default=None, help="the chief's TensorBoard scalars")
    p.add_argument(
        "--nic",
        default="auto",
        help="interface whose bytes are counted around the training steps: "
        "auto (lo for 127.0.0.1, else the task's own), a name, or none",
    )
    p.add_argument("--sample-interval", type=float, default=0.5, help="seconds between resource samples")
    p.add_argument(
        "--ps-sync",
        action="store_true",
        help="ps: synchronous SGD, one update per step from the mean "
        "gradient of one closure per worker; default asynchronous",
    )
    p.add_argument(
        "--collective-timeout",
        type=float,
        default=None,
        help="mwms: seconds one collective may wait for its peers before it fails with "
        "DeadlineExceededError (CommunicationOptions.timeout_seconds); default: no limit",
    )
    p.add_argument(
        "--task-bytes",
        action="store_true",
        help="count each local task's TCP bytes around the training steps (labkit.measure.sockets, needs `ss`)",
    )
    p.add_argument(
        "--trace-steps",
        action="store_true",
        help="ps with --ps-sync: a step event per step, with the "
        "worker that ran each slice, and one per error "
        "TensorFlow logs (a fault demo follows them)",
    )
    return parse_with_configs(p, argv, VARYING, check_args)


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The command line's (or a configuration's) sizes are positive."""
    for name in ("batch_size", "epochs", "train_limit", "test_limit", "steps_per_epoch"):
        value = getattr(args, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            p.error(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
    timeout = getattr(args, "collective_timeout", None)
    if timeout is not None and not timeout > 0:
        p.error(f"--collective-timeout must be a positive number of seconds, got {timeout!r}")


def make_strategy(tf, rt: TaskRuntime, kind: str, collective_timeout: float | None = None):
    """The strategy of ``kind``; under MWMS ``collective_timeout`` bounds how long a collective
    waits for a peer (a peer that hangs, or whose host vanished without closing its connections)."""
    if kind == "mwms":
        if "ps" in rt.spec.jobs:
            raise ValueError("--strategy mwms needs a cluster of workers only (cluster.local(ps=0, workers=N))")
        ring = tf.distribute.experimental.CommunicationImplementation.RING
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=ring, timeout_seconds=collective_timeout
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if kind == "ps":
        if "ps" not in rt.spec.jobs or "chief" not in rt.spec.jobs:
            raise ValueError(
                "--strategy ps needs ps, chief and worker jobs (cluster.local(ps=1, workers=N, chief=True))"
            )
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.experimental.ParameterServerStrategy(resolver)
    if rt.spec.num_tasks("worker") != 1 or len(rt.spec.jobs) != 1:
        raise ValueError(
            "--strategy default runs one process: use a cluster of one worker (cluster.local(ps=0, workers=1))"
        )
    return None


def fresh_start(tf, rt: TaskRuntime, strategy) -> None:
    """Before a configuration: what the ones before it left in this process is released, and
    Keras's global state is reset (its layer-name counters: the same names as in a fresh
    process); under ParameterServerStrategy with several ps tasks, throwaway scalars move the
    strategy's round-robin placement (a counter that lives as long as the strategy) back to
    ps 0, so the model's variables land where a fresh process puts them."""
    import keras

    keras.backend.clear_session(free_memory=True)
    n_ps = rt.spec.num_tasks("ps")
    if strategy is None or n_ps < 2 or not isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return
    with strategy.scope():
        probe = tf.Variable(0.0, trainable=False, name="placement_probe")
        landed = int(probe.device.split("/task:")[1].split("/")[0])
        _ = [tf.Variable(0.0, trainable=False, name="placement_probe") for _ in range(n_ps - 1 - landed)]
    gc.collect()


def train_configuration(rt: TaskRuntime, args, strategy, coordinator, data, nic, counters) -> None:
    """Train one configuration with ``labkit.learning.train_loop.train``; its results go to ``rt``."""
    from labkit.learning.train_loop import train

    import tensorflow as tf

    rt.first_step()
    try:
        with rt.timed("train"):
            result = train(
                args.model,
                data,
                batch_size=args.batch_size,
                epochs=args.epochs,
                lr=args.lr,
                momentum=args.momentum,
                seed=args.seed,
                strategy=strategy,
                coordinator=coordinator,
                checkpoint_dir=args.checkpoint_dir,
                tensorboard_dir=args.tensorboard_dir,
                steps_per_epoch=args.steps_per_epoch,
                nic=nic,
                log=rt.log,
                ps_sync=args.ps_sync,
                counters=counters,
                on_step=step_tracer(rt) if args.trace_steps else None,
                on_epoch=lambda entry: rt.emit(epoch_event(entry, args.epochs)),
                on_resume=lambda start, epochs: rt.emit(events.Resumed(start_epoch=start, epochs=epochs)),
            )
    except tf.errors.OpError as e:  # a peer lost (Unavailable), a collective timed out (DeadlineExceeded), ...
        met = rt.result["peer_failure"] = peer_failure(e)
        rt.emit(events.PeerFailure(error=met["error"], message=met["message"]))
        rt.log(f"training stopped by TensorFlow's {type(e).__name__}")
        raise
    trained_steps = sum(h["steps"] for h in result["history"] if h["epoch"] > result["start_epoch"])
    rt.steps["local"] = trained_steps
    rt.result["traffic"] = result["traffic"]  # where every program keeps it (labkit.measure.sockets.traffic)
    rt.result["train"] = result
    rt.series["history"] = result["history"]
    rt.metrics.update({k: result[k] for k in ("val_loss", "val_accuracy") if k in result})
    rt.metrics.update(
        images_per_s=result["images_per_s"],
        step_time_s=result["step_time_s"],
        start_epoch=result["start_epoch"],
        weights_sha256=result["weights_sha256"],
    )


def epoch_event(entry: dict, epochs: int) -> events.Epoch:
    """The ``epoch`` event of a history entry of ``train_loop.train`` (after its checkpoint)."""
    return events.Epoch(
        epoch=entry["epoch"],
        epochs=epochs,
        train_loss=entry["train_loss"],
        images_per_s=entry["images_per_s"],
        seconds=entry["train_seconds"],
        val_loss=entry.get("val_loss"),
        val_accuracy=entry.get("val_accuracy"),
    )


def step_tracer(rt: TaskRuntime):
    """``on_step`` for ``--trace-steps``: a ``step`` event per step, which ``labkit.wire.faults``
    follows, and a line for people."""
    from labkit.wire.faults import step_line

    def on_step(step: dict) -> None:
        rt.emit(
            events.Step(
                step=step["step"], seconds=step["seconds"], loss=step["loss"], slices_on=list(step["slices_on"])
            )
        )
        rt.log(step_line(step))

    return on_step


def report_tf_errors(rt: TaskRuntime) -> None:
    """Every error TensorFlow logs (its ``ClusterCoordinator`` reports a lost worker's closure, and
    runs it elsewhere) becomes a ``tf_error`` event, beside its line in the log."""
    import logging

    class ToEvents(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            rt.emit(events.TfError(message=record.getMessage()))

    logging.getLogger("tensorflow").addHandler(ToEvents(level=logging.ERROR))


def data_for(args, cache: dict):
    """The model's data: MNIST for the 28x28 models; for one with an input shape of its own
    (``labkit.learning.models.INPUT_SHAPES``: the CIFAR-scale CNN), synthetic images of that shape,
    ``train_limit`` and ``test_limit`` of them (default 10,000 and 1,000)."""
    from labkit.learning.models import INPUT_SHAPES

    shape = INPUT_SHAPES.get(args.model)
    if shape is None:
        return mnist_for(args, cache)
    key = (shape, args.train_limit, args.test_limit, args.seed)
    if key not in cache:
        from labkit.datasets.loaders import synthetic_images

        cache[key] = synthetic_images(shape, args.train_limit or 10_000, args.test_limit or 1_000, args.seed)
    return cache[key]


def peer_failure(e) -> dict:
    """What TensorFlow raised when training stopped, for the result file: the error's class
    (``UnavailableError``, ``DeadlineExceededError``, ...), its message without the op's
    Python stack, and when (``failed_epoch``, this host's clock)."""
    paragraphs = [p.strip() for p in str(e.message).split("\n\n")]
    said = [p for p in paragraphs if p and not p.startswith(("File ", "Detected at node", "Graph execution error"))]
    return {
        "error": type(e).__name__,
        "message": "\n".join(said) or str(e.message).strip(),
        "failed_epoch": time.time(),
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    with TaskRuntime(
        "strategy_train",
        args={k: v for k, v in vars(args).items() if k != "plan"},
        sample_interval=args.sample_interval,
    ) as rt:
        tf = rt.tf()
        if args.strategy == "ps" and rt.task.type != "chief":
            server = rt.server()  # a ps holds variables, a worker runs the chief's closures
            rt.exit_when_port_closes(rt.spec.task("chief", 0).address)
            server.join()
        strategy = make_strategy(tf, rt, args.strategy, args.collective_timeout)  # MWMS: before any other op
        if args.strategy == "mwms":
            rt.mark("server up")
            rt.log(f"MultiWorkerMirroredStrategy (RING) up: {strategy.num_replicas_in_sync} replicas")
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy) if args.strategy == "ps" else None
        if args.trace_steps:
            report_tf_errors(rt)

        from labkit.measure.sockets import pick_nic

        nic = pick_nic(args.nic, rt.task.host)
        counters = None
        if args.task_bytes:
            from labkit.measure.sockets import TaskBytes

            counters = TaskBytes(rt.run_dir)
        loaded: dict = {}
        for config in args.plan:
            if config.name is not None:
                fresh_start(tf, rt, strategy)
            with rt.configuration(config):
                train_configuration(
                    rt, config.args, strategy, coordinator, data_for(config.args, loaded), nic, counters
                )


if __name__ == "__main__":
    main()
