"""``TaskRuntime``: one task process, from its first line to its result file (see ``labkit.tasks.common``).

The runtime knows who the task is (``TF_CONFIG``), keeps its result, says what happens twice,
in words for people (``log``, the task's log) and as typed events for programs (``emit``,
``labkit.wire.events``), marks moments in its resource samples, and ends the process once the
result is written. Its other concerns live in modules of their own, which its methods call:
thread limits (``threads``), the hello and result files (``files``), SIGTERM (``signals``),
configurations (``configs``), TF1 sessions (``tf1``) and the ps shutdown (``ps_shutdown``).
This module imports TensorFlow only inside ``TaskRuntime.tf()``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import psutil

from labkit.wire import events
from labkit.wire.spec import from_tf_config, port_is_free
from labkit.wire.protocol import (
    ENV_RUN_DIR,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_PORT_IN_USE,
    EXIT_TERMINATED,
    PortInUse,
    is_chief,
    task_file,
)
from labkit.tasks import configs, files, ps_shutdown, signals, threads, tf1


def own_tmp_dir(path: Path) -> Path:
    """Make ``path`` this process's temporary folder (``TMPDIR``, for it and what it starts): the
    files TensorFlow's autograph and others write there stay in the task's run, and go with the
    task (``finish``), not in /tmp, which a killed task would otherwise leave them in."""
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    return path


class TaskRuntime:
    """One task's runtime (see the module docstring). Leaving the ``with`` block ends the
    process after writing the result; so does SIGTERM (exit 143, ``shutdown: "terminated"``,
    even while the main thread is inside a TensorFlow call); an exception writes its traceback
    into the result and the log and exits 1."""

    def __init__(self, program: str, args: dict | None = None, sample_interval: float = 0.5):
        self.started_epoch = psutil.Process().create_time()  # counts interpreter start-up too
        self.spec, self.task = from_tf_config()
        self.run_dir = Path(os.environ.get(ENV_RUN_DIR, ".")).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir = own_tmp_dir(self.path(".tmp"))
        self.intra_op, self.inter_op = threads.thread_limits(self.spec, self.task)
        threads.export(self.intra_op, self.inter_op)
        self.sample_interval = sample_interval
        self.process_result = files.new_result(
            program, self.task, args or {}, (self.intra_op, self.inter_op), self.started_epoch
        )
        self.bind(self.process_result)
        self.config: configs.Configuration | None = None  # the configuration running, if several
        self.sampler = None
        self._tf = None
        self._finishing = threading.Lock()
        self._warming = False
        self._events = events.channel_for(self.run_dir, self.task.type, self.task.index)
        signals.on_sigterm(self._terminated)  # from now on, SIGTERM ends in a result file
        if not port_is_free(self.task.port):  # fail in a second, not after TensorFlow's import
            self.finish(PortInUse(self.task.name, self.task.address, " (found before importing TensorFlow)"))
        # The hello says: alive, these versions, and my port was free (what the launcher's readiness needs:
        # another process that took the port would answer on it)
        files.write_hello(self.path(".hello.json"), self.result)
        self.emit(events.Started(pid=os.getpid(), host=self.result["host"], program=program))

    def bind(self, result: dict) -> None:
        """Make ``result`` (the process's, or a configuration's) the one ``metrics``, ``steps``,
        ``timings`` and ``series`` fill."""
        self.result = result
        self.metrics, self.steps, self.timings, self.series = (
            result["metrics"],
            result["steps"],
            result["timings"],
            result["series"],
        )

    # ------------------------------------------------------------------ who, where
    def path(self, suffix: str) -> Path:
        return self.run_dir / task_file(self.task.type, self.task.index, suffix)

    @property
    def is_chief(self) -> bool:
        """Whether this task leads the training (``protocol.chief_of``)."""
        return is_chief(self.task.type, self.task.index, self.spec.jobs)

    @property
    def num_trainers(self) -> int:
        """Tasks that train (chief + workers); the ps waits for this many done signals."""
        return sum(self.spec.num_tasks(j) for j in ps_shutdown.TRAINER_JOBS)

    @property
    def trainer_rank(self) -> int:
        """0 for the chief, then the workers in order: which shard of the data this task reads."""
        if self.task.type == "chief":
            return 0
        return self.task.index + self.spec.num_tasks("chief")

    def since_start(self) -> float:
        return time.time() - self.started_epoch

    # ------------------------------------------------------------------ saying what happens
    def log(self, *parts) -> None:
        """A line for people in this task's log, with the time since the process started. A log
        that is gone (a remote task's ssh session closed) loses the line, never the task."""
        try:
            print(f"[{self.task.name} {self.since_start():7.2f}s]", *parts, flush=True)
        except OSError:  # BrokenPipeError, EIO: nobody reads this output any more
            pass

    def emit(self, event: events.Event) -> None:
        """An event for programs (``labkit.wire.events``), stamped with this task, now and the
        configuration running."""
        self._events.write(
            events.stamped(event, self.task.name, self.is_chief, self.config.name if self.config else None)
        )

    def mark(self, label: str) -> None:
        """Mark this moment in the samples (inside a configuration, as ``"<name>: <label>"``) and
        in the events (``mark``)."""
        if self.sampler is not None:
            self.sampler.mark(f"{self.config.name}: {label}" if self.config is not None else label)
        self.emit(events.Mark(label=label))

    def first_step(self) -> None:
        """Note that training begins (once per process): ``first_step_epoch`` in the result and
        ``timings["first_step_s"]`` since the process started, TensorFlow's start-up."""
        if "first_step_epoch" not in self.process_result:
            self.process_result["first_step_epoch"] = time.time()
            self.process_result["timings"]["first_step_s"] = self.since_start()

    @contextlib.contextmanager
    def timed(self, name: str):
        """Time a phase into ``timings[name + "_s"]`` and mark its start and end in the samples."""
        self.mark(f"{name} start")
        t = time.monotonic()
        try:
            yield
        finally:
            self.timings[f"{name}_s"] = time.monotonic() - t
            self.mark(f"{name} end")

    def configuration(self, config: configs.Configuration):
        """Run one configuration of several in this process (``labkit.tasks.configs``)."""
        return configs.scope(self, config)

    # ------------------------------------------------------------------ TensorFlow
    def tf(self):
        """``import tensorflow``, with this task's thread limits applied before any op."""
        if self._tf is None:
            self._tf, self.timings["import_tf_s"] = threads.import_tf(self.intra_op, self.inter_op)
        return self._tf

    def server(self):
        """Start this task's ``tf.distribute.Server`` on its TF_CONFIG address.

        TensorFlow 2.21's gRPC server listens on 0.0.0.0:PORT whatever host the spec
        names; a taken port raises ``PortInUse`` (exit code 98)."""
        tf = self.tf()
        try:
            server = tf.distribute.Server(
                tf.train.ClusterSpec(self.spec.as_dict()),
                job_name=self.task.type,
                task_index=self.task.index,
                config=self.session_config(),
                start=True,
            )
        except tf.errors.UnknownError as e:
            if "Could not start" in str(e):
                raise PortInUse(
                    self.task.name, self.task.address, ": TensorFlow's server could not listen on it"
                ) from e
            raise
        self.timings["server_up_s"] = self.since_start()
        self.mark("server up")
        self.log(f"server up at {self.task.address} ({self.timings['server_up_s']:.1f} s after process start)")
        self.warm_up()
        return server

    def warm_up(self) -> None:
        """Import what writing the result needs (pandas, for the samples) on a thread, so that the
        exit stays prompt. ``server()`` calls it; a program that starts its servers another way (a
        ``tf.distribute`` strategy) calls it once they are up, while it waits on its peers."""
        if "pandas" in sys.modules or self._warming:
            return
        self._warming = True
        threading.Thread(target=lambda: __import__("pandas"), name="labkit-warm-up", daemon=True).start()

    def session_config(self, device_filters=None):
        return tf1.session_config(self, device_filters)

    def session_creator(self, server, scaffold=None, max_wait_secs: float = 300, recovery_wait_secs: float = 0.2):
        return tf1.session_creator(self, server, scaffold, max_wait_secs, recovery_wait_secs)

    # ------------------------------------------------------------------ parameter-server shutdown
    def serve_until_done(
        self, server, done: ps_shutdown.DoneSignal, fetches=None, linger: float = 5.0, last: bool = True
    ):
        return ps_shutdown.serve_until_done(self, server, done, fetches, linger, last)

    def signal_done(self, target: str, done: ps_shutdown.DoneSignal) -> None:
        ps_shutdown.signal_done(self, target, done)

    def exit_when_port_closes(self, address: str, poll: float = 0.25) -> threading.Thread:
        return ps_shutdown.exit_when_port_closes(self, address, poll)

    # ------------------------------------------------------------------ the end
    def __enter__(self) -> "TaskRuntime":
        from labkit.measure.monitor import ResourceSampler

        self.sampler = ResourceSampler(interval=self.sample_interval).start()
        self.mark("start")
        return self

    def __exit__(self, exc_type, exc, tb):
        self.finish(exc)

    def finish(self, exc: BaseException | None = None, shutdown: str | None = None, code: int | None = None):
        """Write the result file, emit ``ended`` and end the process. Runs once; a second caller
        (a signal during the first) waits for the exit."""
        self._finishing.acquire()
        try:
            if self.config is not None:  # ended inside a configuration: the process's own result is written
                self.process_result["configuration_running"] = self.config.name
                self.config = None
                self.bind(self.process_result)
            result = self.result
            if shutdown is not None:
                result["shutdown"] = shutdown
            result.setdefault("shutdown", "finished")
            if isinstance(exc, SystemExit) and exc.code in (None, 0):
                exc = None  # sys.exit() / sys.exit(0) inside the block: a normal end
            if exc is not None:
                text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                signals.say(text)
                result.update(status="error", error=text)
                code = EXIT_PORT_IN_USE if isinstance(exc, PortInUse) else EXIT_ERROR
            else:
                result["status"] = "terminated" if result["shutdown"] == "terminated" else "ok"
                code = EXIT_OK if code is None else code
            files.seal(result, self.sampler, self.since_start())
            files.write_json(self.path(".json"), result)
            self.emit(events.Ended(status=result["status"], shutdown=result["shutdown"], code=code))
        except BaseException:  # the process ends either way; say why the result is missing
            signals.say("labkit: could not write the task result:\n" + traceback.format_exc())
            code = EXIT_ERROR
        finally:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):  # a closed or broken log must not keep the process alive
                    pass
            os._exit(code if code is not None else EXIT_ERROR)

    def _terminated(self) -> None:
        """SIGTERM: the result, then the exit (``labkit.tasks.signals``)."""
        try:
            self.log("SIGTERM: writing the result and exiting")
        finally:  # whatever happens, this thread ends the process: it is the only one that acts on SIGTERM
            self.finish(shutdown="terminated", code=EXIT_TERMINATED)
