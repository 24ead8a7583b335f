"""One training loop for every strategy the labs use: any Keras 3 model, SGD, cross-entropy.

Keras 3 ``model.fit`` fails under ``MultiWorkerMirroredStrategy`` (keras-team/keras#20585)
and under ``ParameterServerStrategy``, so the labs train with this loop instead:

- **default strategy** (one process, no cluster) and **MultiWorkerMirroredStrategy**:
  ``strategy.run`` over ``strategy.experimental_distribute_dataset``. The global batch is
  the per-worker batch x the number of workers, shuffled with the same seed everywhere and
  split with ``AutoShardPolicy.DATA``, so worker *i* gets the *i*-th slice of every global
  batch. The gradient all-reduce is the one Keras 3's TF optimizer does inside
  ``apply_gradients`` (``replica_context.all_reduce(SUM)``: a ring all-reduce under
  MWMS with ``RING``); the loss is scaled by the global batch, so the sum is the mean gradient.
- **ParameterServerStrategy** (Lab 5): the chief's ``ClusterCoordinator`` schedules one
  step function per per-worker batch on per-worker datasets; variables live on the ps tasks.
  Workers step asynchronously (a step is one worker's batch), unless ``ps_sync``: then
  every step is a round of one closure per worker closed by a barrier (``join``), the
  traffic pattern of a synchronous PS (each worker pulls M and pushes M per step).

Every epoch is one pass over the training set (or ``steps_per_epoch`` steps), then a checkpoint (``tf.train.CheckpointManager``,
with the epoch counter inside) and, on the chief, a validation pass and TensorBoard scalars.
A restarted run resumes after the last epoch that every worker checkpointed. ``train`` returns
a plain dict (history, throughput, bytes on the wire, weight checksums) ready for a JSON file.

TensorFlow is imported inside the functions: the CLI and the launcher import this module's
callers without paying for TensorFlow.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

# Under MWMS and PS, deleting a tf.data iterator can stall 4-15 s (prefetch threads, remote
# iterators). Task programs write their results and then exit with os._exit, so iterators of
# multi-worker runs are parked here and never torn down; single-process runs free theirs.
_PARKED: list = []


def _check(data, batch_size, epochs, lr, momentum, steps_per_epoch, eval_batch_size) -> None:
    for name, value in (("batch_size", batch_size), ("epochs", epochs), ("eval_batch_size", eval_batch_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if steps_per_epoch is not None and (isinstance(steps_per_epoch, bool) or not isinstance(
            steps_per_epoch, (int, np.integer)) or steps_per_epoch < 1):
        raise ValueError(f"steps_per_epoch must be a positive integer or None (one pass over the data), "
                         f"got {steps_per_epoch!r}")
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a positive finite number, got {lr!r}; 0.05 trains LeNet well")
    if not isinstance(momentum, (int, float)) or not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    for attr in ("x_train", "y_train", "x_test", "y_test"):
        if not hasattr(data, attr):
            raise ValueError(f"data must have x_train, y_train, x_test, y_test (like labkit.load_mnist()); "
                             f"{type(data).__name__} lacks {attr}")
    for split in ("train", "test"):
        x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
        if len(x) != len(y):
            raise ValueError(f"x_{split} has {len(x)} rows but y_{split} has {len(y)}")
        if len(x) == 0:
            raise ValueError(f"the {split} set is empty")


def _role(strategy) -> dict:
    """What this process is: kind (single/mwms/ps), task type and index, worker count, chief or not."""
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        # The PS strategy's public cluster_resolver is None on the coordinator; its extended
        # object holds the counts it placed variables and closures by.
        return {"kind": "ps", "task_type": "chief", "task_id": 0, "chief": True,
                "workers": strategy.extended._num_workers, "ps": strategy.extended._num_ps}
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        resolver = strategy.cluster_resolver
        spec = resolver.cluster_spec()
        jobs = spec.jobs
        workers = sum(spec.num_tasks(j) for j in ("chief", "worker") if j in jobs)
        task_type, task_id = resolver.task_type or "worker", int(resolver.task_id or 0)
        chief = task_type == "chief" or (task_type == "worker" and task_id == 0 and "chief" not in jobs)
        return {"kind": "mwms", "task_type": task_type, "task_id": task_id, "chief": chief,
                "workers": workers, "replicas": strategy.num_replicas_in_sync}
    if strategy.num_replicas_in_sync != 1:
        raise ValueError(f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replicas is not "
                         f"supported; use the default strategy, MultiWorkerMirroredStrategy or "
                         f"ParameterServerStrategy")
    return {"kind": "single", "task_type": "worker", "task_id": 0, "chief": True, "workers": 1}


def _weights_sha256(model) -> str:
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()


def _net_bytes(nic: str | None) -> tuple[int, int]:
    if nic is None:
        return 0, 0
    import psutil

    c = psutil.net_io_counters(pernic=True).get(nic)
    if c is None:
        raise ValueError(f"network interface {nic!r} not found; known: {', '.join(psutil.net_io_counters(pernic=True))}")
    return c.bytes_sent, c.bytes_recv


def _epoch_dataset(x, y, batch: int, seed: int, first_epoch: int, last_epoch: int | None):
    """Batches of epochs ``first_epoch..last_epoch`` (None: forever) back to back.

    Epoch e is a stateless permutation seeded by (seed, e), so a resumed run sees the same
    batches as an uninterrupted one, and every worker builds the same global batches.
    Batches gather from the arrays by index: no shuffle buffer holds a second copy of the data.
    """
    import tensorflow as tf

    n = len(x)
    x, y = tf.constant(x), tf.constant(y)

    def one_epoch(e):
        order = tf.random.experimental.stateless_shuffle(tf.range(n, dtype=tf.int64), seed=tf.stack([seed, e]))
        return tf.data.Dataset.from_tensor_slices(order).batch(batch, drop_remainder=True)

    epochs = tf.data.Dataset.range(first_epoch, (last_epoch + 1) if last_epoch is not None else 2 ** 62)
    return epochs.flat_map(one_epoch).map(lambda idx: (tf.gather(x, idx), tf.gather(y, idx)))


def _build_model(model_fn, seed: int):
    import keras

    from labkit import models

    if isinstance(model_fn, str):
        return models.build(model_fn, seed=seed)
    if not callable(model_fn):
        raise ValueError(f"model must be a model name ({', '.join(models.MODELS)}) "
                         f"or a function that builds a Keras model, got {model_fn!r}")
    model = model_fn()
    if not isinstance(model, keras.Model):
        raise ValueError(f"the model function returned {type(model).__name__}, not a keras.Model")
    return model


class _Checkpoints:
    """Per-task checkpoints ``<dir>/<task_type>-<task_id>/ckpt-<epoch>``, plus the chief's history.

    Every MWMS worker saves its own copy (all hold the same weights), so nothing needs a shared
    file system; a restart resumes after the last epoch that *every* worker saved.
    """

    def __init__(self, directory, role, checkpoint, epochs: int):
        import tensorflow as tf

        self.dir = Path(directory) / f"{role['task_type']}-{role['task_id']}"
        self.role, self.epochs = role, epochs
        self.manager = tf.train.CheckpointManager(checkpoint, str(self.dir), max_to_keep=2)
        self.history_path = self.dir / "history.json"

    def saved_epochs(self) -> list[int]:
        return sorted(int(p.rsplit("-", 1)[1]) for p in self.manager.checkpoints)

    def agreed_epoch(self, strategy) -> int:
        """The last epoch every worker has a checkpoint of (0: start afresh)."""
        saved = self.saved_epochs()
        if saved and saved[-1] > self.epochs:
            raise ValueError(f"{self.dir} holds a checkpoint of epoch {saved[-1]}, past epochs={self.epochs}; "
                             f"train for at least {saved[-1]} epochs or use a fresh checkpoint_dir")
        have = np.zeros(self.epochs + 1, np.float32)
        have[saved] = 1
        if self.role["kind"] == "mwms" and self.role["workers"] > 1:
            import tensorflow as tf

            @tf.function  # eager collectives work too, but warn of their overhead
            def count():
                return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(have)), axis=None)

            counts = count().numpy()
            common = np.flatnonzero(counts >= self.role["workers"] - 0.5)
        else:
            common = np.flatnonzero(have)
        return int(common.max()) if len(common) else 0

    def restore(self, checkpoint, epoch: int) -> None:
        path = self.dir / f"ckpt-{epoch}"
        checkpoint.restore(str(path)).assert_existing_objects_matched()

    def save(self, epoch: int, history: list[dict]) -> str:
        path = self.manager.save(checkpoint_number=epoch)
        if self.role["chief"]:
            tmp = self.history_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(history))
            os.replace(tmp, self.history_path)
        return path

    def history(self, upto: int) -> list[dict]:
        if not self.role["chief"] or not self.history_path.exists():
            return []
        return [h for h in json.loads(self.history_path.read_text()) if h["epoch"] <= upto]


def train(model: str | Callable, data, *, batch_size: int, epochs: int, lr: float = 0.05,
          momentum: float = 0.0, seed: int = 0, strategy=None, coordinator=None,
          checkpoint_dir=None, tensorboard_dir=None, steps_per_epoch: int | None = None,
          eval_batch_size: int = 1000, nic: str | None = None, log: Callable[[str], None] | None = print,
          on_epoch: Callable[[dict], None] | None = None, ps_sync: bool = False,
          counters: Callable[[], dict] | None = None) -> dict:
    """Train ``model`` on ``data`` with SGD and cross-entropy under ``strategy``; return a result dict.

    model: a name from ``labkit.models`` or a function returning a fresh Keras model (logits out);
      it is built inside ``strategy.scope()``, and once more outside it for validation.
    data: anything with ``x_train, y_train, x_test, y_test`` (``labkit.load_mnist()``).
    batch_size: per worker; the global batch is ``batch_size x workers`` under MWMS.
    epochs: the total to reach; a resumed run trains only the epochs after its checkpoint.
    strategy: None (the default strategy), a ``MultiWorkerMirroredStrategy`` or a
      ``ParameterServerStrategy`` (then ``coordinator`` is made if not given).
    checkpoint_dir: where to checkpoint every epoch and resume from; None: no checkpoints.
    tensorboard_dir: where the chief writes TensorBoard scalars; None: none.
    steps_per_epoch: default one pass over the training set (global batches / PS steps).
    nic: a network interface (``"lo"`` locally) whose byte counters are read around the
      training steps of every epoch; None: not measured.
    on_epoch: called with each epoch's history entry (after ``log``).
    ps_sync: under ParameterServerStrategy, a step is a round of one closure per worker and a
      barrier (images per step = batch_size x workers); default one closure (asynchronous).
    counters: a function returning cumulative counters (``{name: number}``, e.g. the per-task
      socket bytes of ``labkit.sockets.TaskBytes``), read around each epoch's training steps
      like ``nic``; their changes go to each history entry and, per step, to the result.

    Epoch numbers are 1-based; ``history`` holds every epoch up to ``epochs``, including those
    before a resume (from the chief's checkpoint directory). Validation runs on the chief only.
    """
    _check(data, batch_size, epochs, lr, momentum, steps_per_epoch, eval_batch_size)
    import keras
    import tensorflow as tf

    log = log or (lambda _msg: None)
    strategy = strategy or tf.distribute.get_strategy()
    role = _role(strategy)
    if role["kind"] == "ps" and coordinator is None:
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    batch_size, n_train = int(batch_size), len(data.x_train)
    global_batch = batch_size * (role["workers"] if role["kind"] != "ps" else 1)
    closures_per_step = role["workers"] if role["kind"] == "ps" and ps_sync else 1
    images_per_step = global_batch * closures_per_step
    if n_train < images_per_step:
        raise ValueError(f"the training set has {n_train} images, fewer than one global batch "
                         f"({batch_size} per worker x {role['workers']} workers = {batch_size * role['workers']}); "
                         f"use a larger subset or a smaller batch")
    steps = int(steps_per_epoch or n_train // images_per_step)

    with strategy.scope():
        net = _build_model(model, seed)
        optimizer = keras.optimizers.SGD(learning_rate=lr, momentum=momentum)
        optimizer.build(net.trainable_variables)  # variables exist before any step traces
    eval_net = _build_model(model, seed)
    epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    checkpoint = tf.train.Checkpoint(model=net, optimizer=optimizer, epoch=epoch_var)
    ckpts = _Checkpoints(checkpoint_dir, role, checkpoint, epochs) if checkpoint_dir is not None else None

    start = ckpts.agreed_epoch(strategy) if ckpts else 0
    history, restored_sha = [], None
    if start:
        ckpts.restore(checkpoint, start)
        if int(epoch_var.numpy()) != start:
            raise RuntimeError(f"checkpoint ckpt-{start} in {ckpts.dir} holds epoch {int(epoch_var.numpy())}")
        restored_sha = _weights_sha256(net)
        history = ckpts.history(start)
        log(f"resumed from {ckpts.dir / f'ckpt-{start}'}: {start} of {epochs} epochs done")

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def step_fn(x, y):
        with tf.GradientTape() as tape:
            logits = net(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))  # all-reduces (SUM) across replicas
        return loss

    @tf.function
    def train_step(iterator):
        x, y = next(iterator)
        return strategy.run(step_fn, args=(x, y))

    x_train, y_train = data.x_train, data.y_train
    if role["kind"] == "ps":
        n_workers = role["workers"]

        def dataset_fn(_context):
            index = tf.distribute.coordinator.experimental_get_current_worker_index()
            ds = _epoch_dataset(x_train, y_train, batch_size, seed, start + 1, None)
            # Each worker reads its own shard of every epoch's batches.
            return ds.shard(n_workers, index).prefetch(2)

        per_worker = coordinator.create_per_worker_dataset(
            tf.function(lambda: strategy.distribute_datasets_from_function(dataset_fn)))
        iterator = iter(per_worker)
    else:
        ds = _epoch_dataset(x_train, y_train, global_batch, seed, start + 1, epochs)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        ds = ds.with_options(options).prefetch(2)
        iterator = iter(strategy.experimental_distribute_dataset(ds))
    if role["kind"] != "single":
        _PARKED.append(iterator)

    val = tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test)).batch(int(eval_batch_size))

    @tf.function
    def eval_batch(x, y):
        logits = eval_net(x, training=False)
        loss = tf.reduce_sum(loss_fn(y, logits))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1), tf.cast(y, tf.int64)), tf.float32))
        return loss, correct

    def validate() -> tuple[float, float]:
        eval_net.set_weights(net.get_weights())
        loss = correct = 0.0
        for x, y in val:
            batch_loss, batch_correct = eval_batch(x, y)
            loss, correct = loss + float(batch_loss), correct + float(batch_correct)
        n = len(data.x_test)
        return loss / n, correct / n

    writer = tf.summary.create_file_writer(str(tensorboard_dir)) if tensorboard_dir and role["chief"] else None
    first_step_s = None
    t_run = time.perf_counter()
    for epoch in range(start + 1, epochs + 1):
        sent0, recv0 = _net_bytes(nic)
        counts0 = counters() if counters is not None else None
        t0 = time.perf_counter()
        if role["kind"] == "ps":
            remote = []
            if first_step_s is None:  # one step alone first: it traces and reaches every task
                remote += [coordinator.schedule(train_step, args=(iterator,)) for _ in range(closures_per_step)]
                coordinator.join()
                first_step_s = time.perf_counter() - t0
            left = steps * closures_per_step - len(remote)
            # ps_sync: a barrier (join) after every step's closures; else all at once, one join
            for n in ([closures_per_step] * (left // closures_per_step) if ps_sync else [left]):
                remote += [coordinator.schedule(train_step, args=(iterator,)) for _ in range(n)]
                coordinator.join()
            losses = [float(r.fetch()) for r in remote]
        else:
            losses = []
            for i in range(steps):
                loss = train_step(iterator)
                # This worker's share of the global-batch mean; no extra collective for logging.
                losses.append(float(strategy.experimental_local_results(loss)[0]) * role["workers"])
                if first_step_s is None:
                    first_step_s = time.perf_counter() - t0
        train_s = time.perf_counter() - t0
        sent1, recv1 = _net_bytes(nic)
        counts1 = counters() if counters is not None else None
        epoch_var.assign(epoch)
        entry = {"epoch": epoch, "train_loss": float(np.mean(losses)), "steps": steps,
                 "images": steps * images_per_step, "train_seconds": train_s, "step_time_s": train_s / steps,
                 "images_per_s": steps * images_per_step / train_s}
        if nic is not None:
            entry.update(net_bytes_sent=sent1 - sent0, net_bytes_recv=recv1 - recv0)
        if counters is not None:
            entry["counters"] = {k: v - counts0.get(k, 0) for k, v in counts1.items()}
        entry["weights_sha256"] = _weights_sha256(net)
        if role["chief"]:
            entry["val_loss"], entry["val_accuracy"] = validate()
        entry["seconds"] = time.perf_counter() - t0
        history.append(entry)
        if ckpts:
            ckpts.save(epoch, history)
        if writer is not None:
            with writer.as_default(step=epoch):
                for key in ("train_loss", "val_loss", "val_accuracy", "images_per_s", "step_time_s"):
                    tf.summary.scalar(key, entry[key])
            writer.flush()
        val_text = f" val_loss {entry['val_loss']:.4f} val_acc {entry['val_accuracy']:.4f}" if role["chief"] else ""
        log(f"epoch {epoch}/{epochs}: train_loss {entry['train_loss']:.4f}{val_text} "
            f"{entry['images_per_s']:.0f} img/s {train_s:.1f} s")
        if on_epoch is not None:
            on_epoch(entry)
    run_s = time.perf_counter() - t_run
    if writer is not None:
        writer.close()

    trained = [h for h in history if h["epoch"] > start]
    images = sum(h["images"] for h in trained)
    train_s = sum(h["train_seconds"] for h in trained)
    # The first step traces the function and sets up the collectives: leave it out of the rate.
    steady_s, steady_images = train_s, images
    if first_step_s is not None and images > images_per_step:
        steady_s, steady_images = train_s - first_step_s, images - images_per_step
    result = {
        "strategy": {"single": "default", "mwms": "MultiWorkerMirroredStrategy",
                     "ps": "ParameterServerStrategy"}[role["kind"]],
        "task_type": role["task_type"], "task_id": role["task_id"], "chief": role["chief"],
        "workers": role["workers"], "ps_tasks": role.get("ps", 0),
        "model": net.name, "params": int(net.count_params()),
        "model_bytes": int(sum(int(np.prod(v.shape)) * 4 for v in net.trainable_variables)),
        # in creation order, with where each lives (a ps task under ParameterServerStrategy)
        "variables": [{"name": v.path, "bytes": int(np.prod(v.shape)) * 4,
                       "device": getattr(v.value, "device", "")} for v in net.trainable_variables],
        "per_worker_batch": batch_size, "global_batch": global_batch, "images_per_step": images_per_step,
        "ps_sync": bool(ps_sync) if role["kind"] == "ps" else None, "lr": float(lr),
        "momentum": float(momentum), "seed": int(seed), "epochs": int(epochs), "steps_per_epoch": steps,
        "train_size": int(n_train), "val_size": int(len(data.x_test)),
        "start_epoch": start, "resumed": start > 0, "restored_weights_sha256": restored_sha,
        "history": history, "trained_epochs": len(trained), "train_seconds": train_s, "run_seconds": run_s,
        "first_step_s": first_step_s,
        "images_per_s": steady_images / steady_s if steady_s > 0 else None,
        "step_time_s": steady_s / (steady_images / images_per_step) if steady_images else None,
        "weights_sha256": _weights_sha256(net),
        "checkpoint_dir": str(ckpts.dir) if ckpts else None,
    }
    if nic is not None:
        sent = sum(h["net_bytes_sent"] for h in trained)
        result.update(nic=nic, net_bytes_sent=sent, net_bytes_recv=sum(h["net_bytes_recv"] for h in trained),
                      bytes_per_step=sent / max(1, sum(h["steps"] for h in trained)))
    if counters is not None and trained:
        total_steps = max(1, sum(h["steps"] for h in trained))
        keys = dict.fromkeys(k for h in trained for k in h["counters"])
        result["counters_per_step"] = {k: sum(h["counters"].get(k, 0) for h in trained) / total_steps for k in keys}
    if history and "val_loss" in history[-1]:
        result["val_loss"], result["val_accuracy"] = history[-1]["val_loss"], history[-1]["val_accuracy"]
    return result
