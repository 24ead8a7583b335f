"""The runtime every task program shares: what a program imports.

A task program is ``python -m labkit.tasks.NAME``, started by ``labkit.distributed.launch.Cluster``
with ``TF_CONFIG`` set. It wraps its work in a ``TaskRuntime``::

    with TaskRuntime("ps_sgd", args=vars(args)) as rt:
        tf = rt.tf()                     # imports TensorFlow with this host's thread limits
        server = rt.server()             # binds the task's port (exit code 98 if it is taken)
        with rt.timed("train"):
            ...
            rt.emit(events.Epoch(...))   # for programs: typed events (labkit.wire.events)
            rt.log("epoch 1/3: ...")     # for people: the task's log
        rt.steps["local"] = n
        rt.metrics["accuracy"] = acc
    # never reached: leaving the block writes the result JSON and ends the process

Each concern has a module of its own:

- ``runtime``: ``TaskRuntime``, who the task is, its result, its log and events, its end;
- ``threads``: TensorFlow's thread pools sized for the host before TensorFlow starts;
- ``files``: the hello (versions, pid, written first) and the result (written last, then
  ``os._exit``: TensorFlow's teardown can stall for seconds after the work is done);
- ``signals``: SIGTERM writes the result and exits 143, even inside a TensorFlow call;
- ``configs``: several configurations in one process (``--configs``), TensorFlow started once;
- ``tf1``: graph-mode sessions (device filters, a prompt worker session creator);
- ``ps_shutdown``: how a parameter server leaves, which TensorFlow does not provide.

Resource samples of the process and its host (``labkit.measure.monitor``) run while the block does, so
the same code gives per-node CPU, memory and network on a real cluster.
"""

from labkit.wire.protocol import (
    ENV_INTER_OP,
    ENV_INTRA_OP,
    ENV_RUN_DIR,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_PORT_IN_USE,
    EXIT_TERMINATED,
    RESULT_FORMAT,
    PortInUse,
    task_file,
    versions,
)
from labkit.tasks.configs import Configuration, add_configs_option, configurations, mnist_for
from labkit.tasks.files import write_json
from labkit.tasks.ps_shutdown import TRAINER_JOBS, DoneSignal, shared_queue
from labkit.tasks.runtime import TaskRuntime
from labkit.tasks.tf1 import define_function, run_graph_task
from labkit.tasks.threads import thread_limits

__all__ = [
    "ENV_INTER_OP",
    "ENV_INTRA_OP",
    "ENV_RUN_DIR",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_PORT_IN_USE",
    "EXIT_TERMINATED",
    "RESULT_FORMAT",
    "PortInUse",
    "task_file",
    "versions",
    "Configuration",
    "add_configs_option",
    "configurations",
    "mnist_for",
    "write_json",
    "TRAINER_JOBS",
    "DoneSignal",
    "shared_queue",
    "TaskRuntime",
    "define_function",
    "run_graph_task",
    "thread_limits",
]
