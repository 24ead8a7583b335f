"""Programs that run as one TensorFlow cluster task each: ``python -m labkit.tasks.NAME``.

The launcher (``labkit.distributed.launch.Cluster``) starts one process per task with ``TF_CONFIG``
set; each program builds its task runtime with ``labkit.tasks.common.TaskRuntime``,
which applies thread limits, samples resources and writes the task's result JSON.
Programs report through that file and, as they go, through typed events (``labkit.wire.events``);
their log is for people, and nothing reads it to learn what happened.

- ``ps_sgd``: softmax regression on MNIST on TensorFlow's parameter-server runtime
  (``tf.compat.v1`` graph mode, ``replica_device_setter``), async SGD or sync
  (``SyncReplicasOptimizer``), stopping at a step count or a target test loss (Lab 2).
- ``sparse_lr``: sparse logistic regression (a9a or synthetic click data) with the weights on
  one ps, sync (sparse accumulator + token queues) or async (scatter updates), bytes per
  step O(unique features); several runs per cluster (Lab 3).
- ``strategy_train``: a Keras model (LeNet-5, the MLP ...) on MNIST through ``labkit.learning.train_loop``
  under a ``tf.distribute`` strategy: ``MultiWorkerMirroredStrategy`` (RING all-reduce),
  ``ParameterServerStrategy`` or none, with per-epoch checkpoints a restarted task resumes
  from: Lab 4's batch sweep and kill/resume, Lab 5's ring vs PS scaling, Lab 2's modern-API
  comparison.

``common`` is the runtime they share (its concerns in ``runtime``, ``threads``, ``files``,
``signals``, ``configs``, ``tf1`` and ``ps_shutdown``).
"""
