"""One training loop for every strategy the labs use: any Keras 3 model, SGD, cross-entropy.

Keras 3 ``model.fit`` fails under ``MultiWorkerMirroredStrategy`` (keras-team/keras#20585)
and under ``ParameterServerStrategy``, so the labs train with this loop instead, in d2l's
``fit`` / ``fit_epoch`` shape: ``setup`` (the process's role and the batch sizes),
``Trainer`` (model, optimizer, step, checkpoints), ``labkit.learning.epochs`` (one runner per
way of stepping) and ``Validation`` (the chief's test pass). Under MWMS and synchronous PS the
loss is scaled by the global batch, so one step applies the mean gradient; asynchronous PS
applies each worker's batch on its own. Every epoch ends in a checkpoint, so a restarted run
resumes after the last epoch every worker saved; ``train`` returns a plain dict for a JSON file.

TensorFlow is imported inside the functions: the CLI and the launcher import this module's
callers without paying for TensorFlow. More in docs/internals.md, section labkit.learning.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from labkit.core import atomic
from labkit.learning.epochs import RUNNERS, Runner
from labkit.wire.protocol import is_chief
from labkit.measure.sockets import Meter, nic_bytes, traffic

STRATEGY_NAMES = {"single": "default", "mwms": "MultiWorkerMirroredStrategy", "ps": "ParameterServerStrategy"}
SCALARS = ("train_loss", "val_loss", "val_accuracy", "images_per_s", "step_time_s")


def train(
    model: str | Callable,
    data,
    *,
    batch_size: int,
    epochs: int,
    lr: float = 0.05,
    momentum: float = 0.0,
    seed: int = 0,
    strategy=None,
    coordinator=None,
    checkpoint_dir=None,
    tensorboard_dir=None,
    steps_per_epoch: int | None = None,
    eval_batch_size: int = 1000,
    nic: str | None = None,
    log: Callable[[str], None] | None = print,
    on_epoch: Callable[[dict], None] | None = None,
    ps_sync: bool = False,
    counters: Callable[[], dict] | None = None,
    on_step: Callable[[dict], None] | None = None,
    on_resume: Callable[[int, int], None] | None = None,
) -> dict:
    """Train ``model`` on ``data`` with SGD and cross-entropy under ``strategy``; return a result dict.

    model: a name from ``labkit.learning.models`` or a function returning a fresh Keras model (logits out);
      it is built inside ``strategy.scope()``, and once more outside it for validation.
    data: anything with ``x_train, y_train, x_test, y_test`` (``labkit.load_mnist()``).
    batch_size: per worker; the global batch is ``batch_size x workers`` under MWMS and
      synchronous PS.
    epochs: the total to reach; a resumed run trains only the epochs after its checkpoint.
    strategy: None (the default strategy), a ``MultiWorkerMirroredStrategy`` or a
      ``ParameterServerStrategy`` (then ``coordinator`` is made if not given).
    checkpoint_dir: where to checkpoint every epoch and resume from; None: no checkpoints.
    tensorboard_dir: where the chief writes TensorBoard scalars; None: none.
    steps_per_epoch: default one pass over the training set (global batches / PS steps).
    nic: a network interface (``"lo"`` locally) whose byte counters are read around the
      training steps of every epoch, with this process's own sockets (``labkit.measure.sockets.Meter``);
      None: the sockets only.
    on_epoch: called with each epoch's history entry (after ``log``); on_resume: with the epoch a
      restored checkpoint holds and ``epochs``, before the first epoch after it.
    ps_sync: under ParameterServerStrategy, synchronous SGD: a step is one update from the
      mean gradient of one closure per worker over one global batch of ``batch_size x
      workers``, the ring's SGD; default asynchronous (a step is one worker's batch and update).
    counters: a function returning cumulative counters (``{name: number}``, e.g. the per-task
      socket bytes of ``labkit.measure.sockets.TaskBytes``), read around each epoch's training steps
      like ``nic``. Each epoch's reading goes to its history entry (``traffic``), and their sum,
      with every figure per step (``sockets.per_step``), to the result's ``traffic``.
    on_step: synchronous PS only, called after every step with its number, seconds, loss and the
      worker that ran each slice (``labkit.learning.epochs.SyncPSEpochs``): a trace of the coordinator's work.

    Epoch numbers are 1-based; ``history`` holds every epoch up to ``epochs``, including those
    before a resume (from the chief's checkpoint directory). Validation runs on the chief only.
    """
    _check(data, batch_size, epochs, lr, momentum, steps_per_epoch, eval_batch_size)
    plan = setup(strategy, coordinator, int(batch_size), len(data.x_train), steps_per_epoch, ps_sync)
    trainer = Trainer(plan, model, data, lr=lr, momentum=momentum, seed=seed, eval_batch_size=eval_batch_size, log=log)
    trainer.on_step, trainer.on_resume = on_step, on_resume
    if nic is not None:
        nic_bytes(nic)  # an unknown interface: a ValueError that lists those there are
    return trainer.fit(
        epochs,
        checkpoint_dir=checkpoint_dir,
        tensorboard_dir=tensorboard_dir,
        meter=Meter(nics=[nic] if nic else (), counters=counters),
        on_epoch=on_epoch,
    )


def _check(data, batch_size, epochs, lr, momentum, steps_per_epoch, eval_batch_size) -> None:
    for name, value in (("batch_size", batch_size), ("epochs", epochs), ("eval_batch_size", eval_batch_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if steps_per_epoch is not None and (
        isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, (int, np.integer)) or steps_per_epoch < 1
    ):
        raise ValueError(
            f"steps_per_epoch must be a positive integer or None (one pass over the data), got {steps_per_epoch!r}"
        )
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a positive finite number, got {lr!r}; 0.05 trains LeNet well")
    if not isinstance(momentum, (int, float)) or not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    for attr in ("x_train", "y_train", "x_test", "y_test"):
        if not hasattr(data, attr):
            raise ValueError(
                f"data must have x_train, y_train, x_test, y_test (like labkit.load_mnist()); "
                f"{type(data).__name__} lacks {attr}"
            )
    for split in ("train", "test"):
        x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
        if len(x) != len(y):
            raise ValueError(f"x_{split} has {len(x)} rows but y_{split} has {len(y)}")
        if len(x) == 0:
            raise ValueError(f"the {split} set is empty")


# ------------------------------------------------------------------------------ role and strategy


@dataclass(frozen=True)
class Setup:
    """What this process is, and the sizes every part of the loop agrees on."""

    strategy: object
    coordinator: object | None  # the chief's ClusterCoordinator (PS only)
    kind: str  # single | mwms | ps
    task_type: str
    task_id: int
    chief: bool
    workers: int
    ps_tasks: int
    ps_sync: bool  # synchronous PS (False for every other kind)
    batch_size: int  # per worker
    global_batch: int  # images behind one update: B x workers, or B for asynchronous PS
    steps_per_epoch: int

    @property
    def runner(self) -> str:
        """The key of this run's epoch runner in ``RUNNERS``."""
        return "ps_sync" if self.ps_sync else self.kind

    @property
    def images_per_step(self) -> int:
        return self.global_batch


def setup(
    strategy, coordinator, batch_size: int, n_train: int, steps_per_epoch: int | None, ps_sync: bool = False
) -> Setup:
    """The role of this process under ``strategy`` (default: the default strategy) and the
    batch sizes and steps that follow; a ValueError if the training set holds no global batch."""
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    role = _role(strategy)
    if role["kind"] == "ps" and coordinator is None:
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    sync = role["kind"] == "ps" and bool(ps_sync)
    workers = role["workers"]
    global_batch = batch_size if role["kind"] == "ps" and not sync else batch_size * workers
    if n_train < global_batch:
        raise ValueError(
            f"the training set has {n_train} images, fewer than one global batch "
            f"({batch_size} per worker x {workers} workers = {batch_size * workers}); "
            f"use a larger subset or a smaller batch"
        )
    return Setup(
        strategy,
        coordinator,
        role["kind"],
        role["task_type"],
        role["task_id"],
        role["chief"],
        workers,
        role.get("ps", 0),
        sync,
        batch_size,
        global_batch,
        int(steps_per_epoch or n_train // global_batch),
    )


def _role(strategy) -> dict:
    """What this process is: kind (single/mwms/ps), task type and index, worker count, chief or not."""
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        # The PS strategy's public cluster_resolver is None on the coordinator; its extended
        # object holds the counts it placed variables and closures by.
        return {
            "kind": "ps",
            "task_type": "chief",
            "task_id": 0,
            "chief": True,
            "workers": strategy.extended._num_workers,
            "ps": strategy.extended._num_ps,
        }
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        resolver = strategy.cluster_resolver
        spec = resolver.cluster_spec()
        jobs = spec.jobs
        workers = sum(spec.num_tasks(j) for j in ("chief", "worker") if j in jobs)
        task_type, task_id = resolver.task_type or "worker", int(resolver.task_id or 0)
        return {
            "kind": "mwms",
            "task_type": task_type,
            "task_id": task_id,
            "chief": is_chief(task_type, task_id, jobs),
            "workers": workers,
        }
    if strategy.num_replicas_in_sync != 1:
        raise ValueError(
            f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replicas is not "
            f"supported; use the default strategy, MultiWorkerMirroredStrategy or "
            f"ParameterServerStrategy"
        )
    return {"kind": "single", "task_type": "worker", "task_id": 0, "chief": True, "workers": 1}


def _build_model(model_fn, seed: int):
    import keras

    from labkit.learning import models

    if isinstance(model_fn, str):
        return models.build(model_fn, seed=seed)
    if not callable(model_fn):
        raise ValueError(
            f"model must be a model name ({', '.join(models.MODELS)}) "
            f"or a function that builds a Keras model, got {model_fn!r}"
        )
    model = model_fn()
    if not isinstance(model, keras.Model):
        raise ValueError(f"the model function returned {type(model).__name__}, not a keras.Model")
    return model


def _weights_sha256(model) -> str:
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()


# ------------------------------------------------------------------------------ measuring, checkpoints


class _Checkpoints:
    """Per-task checkpoints ``<dir>/<task_type>-<task_id>/ckpt-<epoch>``, plus the chief's history.

    Every MWMS worker saves its own copy (all hold the same weights), so nothing needs a shared
    file system; a restart resumes after the last epoch that *every* worker saved.
    """

    def __init__(self, directory, plan: Setup, checkpoint, epochs: int):
        import tensorflow as tf

        self.dir = Path(directory) / f"{plan.task_type}-{plan.task_id}"
        self.plan, self.epochs = plan, epochs
        self.manager = tf.train.CheckpointManager(checkpoint, str(self.dir), max_to_keep=2)
        self.history_path = self.dir / "history.json"

    def saved_epochs(self) -> list[int]:
        return sorted(int(p.rsplit("-", 1)[1]) for p in self.manager.checkpoints)

    def agreed_epoch(self) -> int:
        """The last epoch every worker has a checkpoint of (0: start afresh)."""
        saved = self.saved_epochs()
        if saved and saved[-1] > self.epochs:
            raise ValueError(
                f"{self.dir} holds a checkpoint of epoch {saved[-1]}, past epochs={self.epochs}; "
                f"train for at least {saved[-1]} epochs or use a fresh checkpoint_dir"
            )
        have = np.zeros(self.epochs + 1, np.float32)
        have[saved] = 1
        if self.plan.kind == "mwms" and self.plan.workers > 1:
            import tensorflow as tf

            strategy = self.plan.strategy

            @tf.function  # eager collectives work too, but warn of their overhead
            def count():
                return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(have)), axis=None)

            counts = count().numpy()
            common = np.flatnonzero(counts >= self.plan.workers - 0.5)
        else:
            common = np.flatnonzero(have)
        return int(common.max()) if len(common) else 0

    def restore(self, checkpoint, epoch: int) -> None:
        path = self.dir / f"ckpt-{epoch}"
        checkpoint.restore(str(path)).assert_existing_objects_matched()

    def save(self, epoch: int, history: list[dict]) -> str:
        path = self.manager.save(checkpoint_number=epoch)
        if self.plan.chief:
            atomic.write_text(self.history_path, json.dumps(history))
        return path

    def history(self, upto: int) -> list[dict]:
        if not self.plan.chief or not self.history_path.exists():
            return []
        return [h for h in json.loads(self.history_path.read_text()) if h["epoch"] <= upto]


class Validation:
    """The chief's validation pass: loss and accuracy of the current weights on the test set,
    computed by a copy of the model outside the strategy (no collectives, no ps round trips)."""

    def __init__(self, model, seed: int, data, eval_batch_size: int, loss_fn):
        import tensorflow as tf

        self.net = _build_model(model, seed)
        self.n = len(data.x_test)
        self.batches = tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test)).batch(int(eval_batch_size))

        @tf.function
        def eval_batch(x, y):
            logits = self.net(x, training=False)
            loss = tf.reduce_sum(loss_fn(y, logits))
            correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1), tf.cast(y, tf.int64)), tf.float32))
            return loss, correct

        self.eval_batch = eval_batch

    def __call__(self, net) -> tuple[float, float]:
        """(mean loss, accuracy) of ``net``'s weights."""
        self.net.set_weights(net.get_weights())
        loss = correct = 0.0
        for x, y in self.batches:
            batch_loss, batch_correct = self.eval_batch(x, y)
            loss, correct = loss + float(batch_loss), correct + float(batch_correct)
        return loss / self.n, correct / self.n


# ------------------------------------------------------------------------------ the trainer


class Trainer:
    """The model, optimizer and validation of one run under ``plan``; ``fit`` trains it."""

    def __init__(
        self,
        plan: Setup,
        model,
        data,
        *,
        lr: float,
        momentum: float,
        seed: int,
        eval_batch_size: int,
        log: Callable[[str], None] | None = print,
    ):
        import keras
        import tensorflow as tf

        self.plan, self.data, self.seed = plan, data, seed
        self.lr, self.momentum = lr, momentum
        self.log = log or (lambda _msg: None)
        with plan.strategy.scope():
            self.net = _build_model(model, seed)
            self.optimizer = keras.optimizers.SGD(learning_rate=lr, momentum=momentum)
            self.optimizer.build(self.net.trainable_variables)  # variables exist before any step traces
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        self.validate = Validation(model, seed, data, eval_batch_size, self.loss_fn)
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.checkpoint = tf.train.Checkpoint(model=self.net, optimizer=self.optimizer, epoch=self.epoch)
        self.runner: Runner | None = None
        self.on_step: Callable[[dict], None] | None = None  # a runner that traces its steps calls it
        self.on_resume: Callable[[int, int], None] | None = None  # told the epoch a checkpoint restored

    # -- the step --------------------------------------------------------------------

    def gradients(self, x, y):
        """This replica's loss and gradients, scaled by the global batch: summed over the
        global batch's slices they are its mean."""
        import tensorflow as tf

        with tf.GradientTape() as tape:
            logits = self.net(x, training=True)
            loss = tf.nn.compute_average_loss(self.loss_fn(y, logits), global_batch_size=self.plan.global_batch)
        return loss, tape.gradient(loss, self.net.trainable_variables)

    def sgd_step(self, x, y):
        """One SGD update from this replica's gradients (all-reduced across MWMS replicas by the optimizer)."""
        loss, grads = self.gradients(x, y)
        self.optimizer.apply_gradients(zip(grads, self.net.trainable_variables))
        return loss

    # -- fit ---------------------------------------------------------------------------

    def fit(
        self,
        epochs: int,
        *,
        checkpoint_dir=None,
        tensorboard_dir=None,
        meter: Meter | None = None,
        on_epoch: Callable[[dict], None] | None = None,
    ) -> dict:
        """Train up to epoch ``epochs`` (resuming from ``checkpoint_dir``); return ``result``."""
        import tensorflow as tf

        meter = meter or Meter(own=False)
        ckpts = _Checkpoints(checkpoint_dir, self.plan, self.checkpoint, epochs) if checkpoint_dir is not None else None
        start, history, restored_sha = self.resume(ckpts, epochs)
        self.runner = RUNNERS[self.plan.runner](self, start, epochs)
        writer = tf.summary.create_file_writer(str(tensorboard_dir)) if tensorboard_dir and self.plan.chief else None
        t_run = time.perf_counter()
        for epoch in range(start + 1, epochs + 1):
            entry = self.fit_epoch(epoch, meter)
            history.append(entry)
            self.end_epoch(entry, epochs, history, ckpts, writer)
            if on_epoch is not None:
                on_epoch(entry)
        run_s = time.perf_counter() - t_run
        if writer is not None:
            writer.close()
        return self.result(history, start, epochs, run_s, restored_sha, ckpts)

    def resume(self, ckpts: _Checkpoints | None, epochs: int) -> tuple[int, list[dict], str | None]:
        """(epochs already done, their history, the restored weights' checksum) from the
        checkpoints every worker has; (0, [], None) for a fresh start."""
        start = ckpts.agreed_epoch() if ckpts else 0
        if not start:
            return 0, [], None
        ckpts.restore(self.checkpoint, start)
        if int(self.epoch.numpy()) != start:
            raise RuntimeError(f"checkpoint ckpt-{start} in {ckpts.dir} holds epoch {int(self.epoch.numpy())}")
        self.log(f"resumed from {ckpts.dir / f'ckpt-{start}'}: {start} of {epochs} epochs done")
        if self.on_resume is not None:
            self.on_resume(start, epochs)
        return start, ckpts.history(start), _weights_sha256(self.net)

    def fit_epoch(self, epoch: int, meter: Meter) -> dict:
        """One epoch's training steps, measured; then the chief's validation. Its history entry."""
        plan = self.plan
        steps, images = plan.steps_per_epoch, plan.steps_per_epoch * plan.images_per_step
        meter.start()
        t0 = time.perf_counter()
        losses = self.runner.run(steps)
        train_s = time.perf_counter() - t0
        measured = meter.stop()
        self.epoch.assign(epoch)
        entry = {
            "epoch": epoch,
            "train_loss": float(np.mean(losses)),
            "steps": steps,
            "images": images,
            "train_seconds": train_s,
            "step_time_s": train_s / steps,
            "images_per_s": images / train_s,
            "traffic": measured,
            "weights_sha256": _weights_sha256(self.net),
        }
        if plan.chief:
            entry["val_loss"], entry["val_accuracy"] = self.validate(self.net)
        entry["seconds"] = time.perf_counter() - t0
        return entry

    def end_epoch(self, entry: dict, epochs: int, history: list[dict], ckpts: _Checkpoints | None, writer) -> None:
        """Checkpoint, TensorBoard scalars and the log line of a finished epoch."""
        import tensorflow as tf

        if ckpts:
            ckpts.save(entry["epoch"], history)
        if writer is not None:
            with writer.as_default(step=entry["epoch"]):
                for key in SCALARS:
                    tf.summary.scalar(key, entry[key])
            writer.flush()
        val_text = f" val_loss {entry['val_loss']:.4f} val_acc {entry['val_accuracy']:.4f}" if self.plan.chief else ""
        self.log(
            f"epoch {entry['epoch']}/{epochs}: train_loss {entry['train_loss']:.4f}{val_text} "
            f"{entry['images_per_s']:.0f} img/s {entry['train_seconds']:.1f} s"
        )

    # -- the result ------------------------------------------------------------------

    def result(
        self,
        history: list[dict],
        start: int,
        epochs: int,
        run_s: float,
        restored_sha: str | None,
        ckpts: _Checkpoints | None,
    ) -> dict:
        """The run as a plain, JSON-able dict: what ran, the history, throughput, bytes, checksums."""
        plan, net = self.plan, self.net
        trained = [h for h in history if h["epoch"] > start]
        result = {
            "strategy": STRATEGY_NAMES[plan.kind],
            "task_type": plan.task_type,
            "task_id": plan.task_id,
            "chief": plan.chief,
            "workers": plan.workers,
            "ps_tasks": plan.ps_tasks,
            "model": net.name,
            "params": int(net.count_params()),
            "model_bytes": int(sum(int(np.prod(v.shape)) * 4 for v in net.trainable_variables)),
            # in creation order, with where each lives (a ps task under ParameterServerStrategy)
            "variables": [
                {"name": v.path, "bytes": int(np.prod(v.shape)) * 4, "device": getattr(v.value, "device", "")}
                for v in net.trainable_variables
            ],
            "per_worker_batch": plan.batch_size,
            "global_batch": plan.global_batch,
            "images_per_step": plan.images_per_step,
            "ps_sync": plan.ps_sync if plan.kind == "ps" else None,
            "lr": float(self.lr),
            "momentum": float(self.momentum),
            "seed": int(self.seed),
            "epochs": int(epochs),
            "steps_per_epoch": plan.steps_per_epoch,
            "train_size": int(len(self.data.x_train)),
            "val_size": int(len(self.data.x_test)),
            "start_epoch": start,
            "resumed": start > 0,
            "restored_weights_sha256": restored_sha,
            "history": history,
            "trained_epochs": len(trained),
            **_throughput(trained, self.runner.first_step_s, plan.images_per_step),
            "run_seconds": run_s,
            "weights_sha256": _weights_sha256(net),
            "checkpoint_dir": str(ckpts.dir) if ckpts else None,
        }
        result["traffic"] = traffic([h["traffic"] for h in trained], sum(h["steps"] for h in trained))
        if history and "val_loss" in history[-1]:
            result["val_loss"], result["val_accuracy"] = history[-1]["val_loss"], history[-1]["val_accuracy"]
        return result


def _throughput(trained: list[dict], first_step_s: float | None, images_per_step: int) -> dict:
    """Training seconds, and images/s and seconds per step without the first step (it traces
    the step function and sets up the collectives)."""
    images = sum(h["images"] for h in trained)
    train_s = sum(h["train_seconds"] for h in trained)
    steady_s, steady_images = train_s, images
    if first_step_s is not None and images > images_per_step:
        steady_s, steady_images = train_s - first_step_s, images - images_per_step
    return {
        "train_seconds": train_s,
        "first_step_s": first_step_s,
        "images_per_s": steady_images / steady_s if steady_s > 0 else None,
        "step_time_s": steady_s / (steady_images / images_per_step) if steady_images else None,
    }
