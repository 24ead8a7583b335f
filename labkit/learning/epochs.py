"""How one epoch's training steps run under each strategy, each way with its own input pipeline.

``labkit.learning.train_loop.Trainer.fit`` picks the runner of its ``Setup.runner`` from
``RUNNERS``: ``MirroredEpochs`` (the default strategy and MWMS: every worker steps through its
slice of the same global batches), ``AsyncPSEpochs`` (``ParameterServerStrategy``: one closure
and one update per worker batch) and ``SyncPSEpochs`` (``ps_sync``: the ring's synchronous SGD,
with gradient sums beside the variables on the ps, applied once per step after the barrier).

A runner is built from the trainer (its ``plan``, ``data``, ``seed``, ``net``, ``optimizer``,
``gradients`` and ``sgd_step``) and the epochs to run; ``run(steps)`` trains that many steps
and returns their losses. TensorFlow is imported inside the functions.
More in docs/internals.md, section labkit.learning (what crosses the wire in each).
"""

from __future__ import annotations

import time

# Under MWMS and PS, deleting a tf.data iterator can stall 4-15 s (prefetch threads, remote
# iterators). Task programs write their results and then exit with os._exit, so iterators of
# multi-worker runs are parked here and never torn down; single-process runs free theirs.
_PARKED: list = []


# ------------------------------------------------------------------------------ the input pipeline


def _epoch_order(n: int, seed: int, epoch):
    """Epoch ``epoch``'s permutation of ``range(n)``: stateless, seeded by (seed, epoch), the
    same in every process."""
    import tensorflow as tf

    return tf.random.experimental.stateless_shuffle(tf.range(n, dtype=tf.int64), seed=tf.stack([seed, epoch]))


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
        return tf.data.Dataset.from_tensor_slices(_epoch_order(n, seed, e)).batch(batch, drop_remainder=True)

    epochs = tf.data.Dataset.range(first_epoch, (last_epoch + 1) if last_epoch is not None else 2**62)
    return epochs.flat_map(one_epoch).map(lambda idx: (tf.gather(x, idx), tf.gather(y, idx)))


def _per_worker(plan, dataset_fn):
    """An iterator over ``dataset_fn``'s dataset on every PS worker, parked (never torn down)."""
    import tensorflow as tf

    strategy = plan.strategy
    per_worker = plan.coordinator.create_per_worker_dataset(
        tf.function(lambda: strategy.distribute_datasets_from_function(dataset_fn))
    )
    iterator = iter(per_worker)
    _PARKED.append(iterator)
    return iterator


def _sgd_steps(trainer):
    """A tf.function that takes the next batch from a (distributed or per-worker) iterator and
    runs the trainer's SGD step on it under the strategy."""
    import tensorflow as tf

    strategy, step = trainer.plan.strategy, trainer.sgd_step

    @tf.function
    def train_step(iterator):
        x, y = next(iterator)
        return strategy.run(step, args=(x, y))

    return train_step


# ------------------------------------------------------------------------------ epoch runners


class Runner:
    """Runs the training steps of one epoch; ``first_step_s`` times the run's first step
    (it traces the step function and reaches every task)."""

    first_step_s: float | None = None

    def run(self, steps: int) -> list[float]:
        """Train ``steps`` steps; return each step's loss (the mean over its global batch, as
        estimated on the chief's share of it)."""
        raise NotImplementedError


class MirroredEpochs(Runner):
    """Default strategy and MultiWorkerMirroredStrategy: every worker steps through its slice
    of the same global batches; the optimizer's all-reduce sums the gradients."""

    def __init__(self, trainer, start: int, epochs: int):
        import tensorflow as tf

        plan, data = trainer.plan, trainer.data
        self.strategy, self.workers = plan.strategy, plan.workers
        ds = _epoch_dataset(data.x_train, data.y_train, plan.global_batch, trainer.seed, start + 1, epochs)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        self.iterator = iter(plan.strategy.experimental_distribute_dataset(ds.with_options(options).prefetch(2)))
        if plan.kind != "single":
            _PARKED.append(self.iterator)
        self.train_step = _sgd_steps(trainer)

    def run(self, steps: int) -> list[float]:
        t0 = time.perf_counter()
        losses = []
        for _ in range(steps):
            loss = self.train_step(self.iterator)
            # This worker's share of the global-batch mean; no extra collective for logging.
            losses.append(float(self.strategy.experimental_local_results(loss)[0]) * self.workers)
            if self.first_step_s is None:
                self.first_step_s = time.perf_counter() - t0
        return losses


class AsyncPSEpochs(Runner):
    """ParameterServerStrategy, asynchronous: one closure per worker batch, each applying its
    own gradient; worker *i* reads shard *i* of the batches; one barrier at the epoch's end."""

    def __init__(self, trainer, start: int, epochs: int):
        import tensorflow as tf

        plan, data, seed = trainer.plan, trainer.data, trainer.seed
        self.coordinator = plan.coordinator

        def dataset_fn(_context):
            index = tf.distribute.coordinator.experimental_get_current_worker_index()
            ds = _epoch_dataset(data.x_train, data.y_train, plan.batch_size, seed, start + 1, None)
            return ds.shard(plan.workers, index).prefetch(2)  # each worker its own shard of every epoch

        self.iterator = _per_worker(plan, dataset_fn)
        self.train_step = _sgd_steps(trainer)

    def run(self, steps: int) -> list[float]:
        t0 = time.perf_counter()
        remote = []
        if self.first_step_s is None:  # one step alone first: traced on the chief, run on one worker
            remote.append(self.coordinator.schedule(self.train_step, args=(self.iterator,)))
            self.coordinator.join()
            self.first_step_s = time.perf_counter() - t0
        remote += [
            self.coordinator.schedule(self.train_step, args=(self.iterator,)) for _ in range(steps - len(remote))
        ]
        self.coordinator.join()
        return [float(r.fetch()) for r in remote]


class SyncPSEpochs(Runner):
    """ParameterServerStrategy, synchronous: per step, one closure per slice of the ring's
    global batch adds its gradient into sums beside the variables on the ps; after the
    barrier the chief applies the sums (the mean gradient) once, on the ps, and zeroes them.

    Every worker holds the training arrays; a closure gathers its slice by index (data epoch,
    batch within it), so which worker runs which closure does not change the SGD."""

    def __init__(self, trainer, start: int, epochs: int):
        plan, data = trainer.plan, trainer.data
        self.coordinator, self.workers = plan.coordinator, plan.workers
        self.first_epoch = start + 1
        self.per_data_epoch = len(data.x_train) // plan.global_batch  # global batches in one pass
        self.position = 0  # global batches taken since this run started: the ring's stream position
        variables = trainer.net.trainable_variables
        self.sums = self._sums_beside(plan.strategy, variables)
        self.iterator = _per_worker(plan, self._arrays(data))
        self.accumulate = self._accumulate(trainer, self.sums)
        self.apply_mean = self._apply_mean(trainer.optimizer, self.sums, variables)
        self.on_step = trainer.on_step  # called after every step with _traced's dict (None: not traced)

    @staticmethod
    def _sums_beside(strategy, variables) -> list:
        """One zeroed gradient sum per variable, on the ps that holds the variable."""
        import tensorflow as tf

        sums = []
        with strategy.scope():
            for v in variables:
                with strategy.extended.colocate_vars_with(v.value):
                    sums.append(tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name="gradient_sum"))
        return sums

    @staticmethod
    def _arrays(data):
        """The per-worker dataset: the training arrays, once; closures pick their slices by index."""

        def dataset_fn(_context):
            import tensorflow as tf

            return tf.data.Dataset.from_tensors((tf.constant(data.x_train), tf.constant(data.y_train))).repeat()

        return dataset_fn

    @staticmethod
    def _accumulate(trainer, sums):
        """The closure: gradient of slice ``index`` of data epoch ``epoch``'s permutation, added to the sums."""
        import tensorflow as tf

        plan, n, seed = trainer.plan, len(trainer.data.x_train), trainer.seed

        def add_gradient(x, y):
            loss, grads = trainer.gradients(x, y)
            for total, g in zip(sums, grads):
                total.assign_add(g)
            return loss

        @tf.function
        def accumulate(iterator, epoch, index):
            """(loss, the index of the worker that ran it): the coordinator may move a closure to
            another worker (one that failed), which the trace of steps shows."""
            x_all, y_all = next(iterator)
            idx = _epoch_order(n, seed, epoch)[index * plan.batch_size : (index + 1) * plan.batch_size]
            loss = plan.strategy.run(add_gradient, args=(tf.gather(x_all, idx), tf.gather(y_all, idx)))
            return loss, tf.distribute.coordinator.experimental_get_current_worker_index()

        return accumulate

    @staticmethod
    def _apply_mean(optimizer, sums, variables):
        """The update, run from the chief: the optimizer applies the sums and zeroes them, every
        op on the ps that holds them, so no tensor visits the chief."""
        import tensorflow as tf

        by_ps: dict[str, list] = {}
        for total, v in zip(sums, variables):
            by_ps.setdefault(total.device, []).append((total, v))

        @tf.function
        def apply_mean():
            for device, pairs in by_ps.items():
                with tf.device(device):
                    optimizer.apply_gradients([(total.read_value(), v) for total, v in pairs])
                    for total, _ in pairs:
                        total.assign(tf.zeros(total.shape, total.dtype))
            if len(by_ps) > 1:  # one update, however many ps tasks it took
                optimizer.iterations.assign_sub(len(by_ps) - 1)

        return apply_mean

    def _round(self) -> list:
        """One synchronous step: a closure per slice of the next global batch, the barrier, the update."""
        import tensorflow as tf

        epoch = tf.constant(self.first_epoch + self.position // self.per_data_epoch, tf.int64)
        first = (self.position % self.per_data_epoch) * self.workers
        remote = [
            self.coordinator.schedule(self.accumulate, args=(self.iterator, epoch, tf.constant(first + j, tf.int64)))
            for j in range(self.workers)
        ]
        self.coordinator.join()
        self.apply_mean()
        self.position += 1
        return remote

    def run(self, steps: int) -> list[float]:
        t0 = time.perf_counter()
        first_slices = []
        for _ in range(steps):
            t_step = time.perf_counter()
            remote = self._round()
            first_slices.append(remote[0])
            if self.first_step_s is None:
                self.first_step_s = time.perf_counter() - t0
            if self.on_step is not None:
                self.on_step(self._traced(remote, time.perf_counter() - t_step))
        # Slice 0's share of each global-batch mean, scaled up: the ring's estimate on its chief.
        return [float(r.fetch()[0]) * self.workers for r in first_slices]

    def _traced(self, remote: list, seconds: float) -> dict:
        """One step for ``on_step``: its number, seconds, loss and the worker that ran each slice."""
        done = [r.fetch() for r in remote]
        return {
            "step": self.position,
            "seconds": seconds,
            "loss": float(done[0][0]) * self.workers,
            "slices_on": [int(w) for _, w in done],
        }


RUNNERS: dict[str, type[Runner]] = {
    "single": MirroredEpochs,
    "mwms": MirroredEpochs,
    "ps": AsyncPSEpochs,
    "ps_sync": SyncPSEpochs,
}
