"""The runtime every task program shares: what a program imports.

A task program is ``python -m labkit.tasks.NAME``, started by ``labkit.distributed.launch.Cluster``
with ``TF_CONFIG`` set. It wraps its work in a ``TaskRuntime``::

    with TaskRuntime("ps_sgd", args=vars(args)) as rt:
        tf = rt.tf()                     # imports TensorFlow with this host's thread limits
        server = rt.server()             # binds the task's port (exit code 98 if it is taken)
        rt.emit(events.Epoch(...))       # for programs; rt.log(...) for people
    # never reached: leaving the block writes the result JSON and ends the process

Each concern has a module of its own (``runtime``, ``threads``, ``files``, ``signals``,
``configs``, ``tf1``, ``ps_shutdown``); resources are sampled while the block runs, so the same
code gives per-node figures on a real cluster. More in docs/internals.md, section labkit.tasks
(what each module does, and why the result ends the process).
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
from labkit.tasks.configs import Configuration, add_configs_option, configurations, mnist_for, parse_with_configs
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
    "parse_with_configs",
    "write_json",
    "TRAINER_JOBS",
    "DoneSignal",
    "shared_queue",
    "TaskRuntime",
    "define_function",
    "run_graph_task",
    "thread_limits",
]
