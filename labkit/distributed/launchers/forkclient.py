"""The stand-in of a task that the fork server starts (``labkit.distributed.launchers.forkserver``).

The launcher runs it as the task's interpreter (``forkclient.py PYTHON SOCKET -m MODULE ARGS``);
it hands its arguments, environment, working directory, standard streams and network namespace
to the server, which forks the task (in that namespace: a stand-in started inside an emulated
node gets a task on that node). Then it stands for the task: the signals it gets go to the
task, and it exits as the task did (a task killed by signal N kills it with N). It holds one
end of a pipe the task watches: however this process ends, SIGKILL included, the task kills
itself at once. If the server ends first, the task gets SIGTERM and time to write its result
(``wind_down``).

If the server cannot be reached (someone reruns the command a task log starts with), it runs the
task in ``PYTHON`` itself. Standard library only, run with ``python -I -S``: it starts in
milliseconds.
"""

import json
import os
import select
import signal
import socket
import struct
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
STOP_GRACE_S = 10.0  # a task whose server is gone: SIGTERM, then SIGKILL after this


def read_message(stream) -> dict | None:
    """One length-prefixed JSON message, None at the end of the stream."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    body = stream.read(struct.unpack("!I", head)[0])
    return json.loads(body) if body else None


def wind_down(task: int, forward, grace: float = STOP_GRACE_S) -> str:
    """End a task whose server is gone as its launcher would: SIGTERM (it writes its result), then
    SIGKILL if it is still there after ``grace`` seconds. It is no child of this process: a pidfd
    says when it has ended. Returns what it took."""
    try:
        done = os.pidfd_open(task)
    except ProcessLookupError:
        return "gone already"
    forward(signal.SIGTERM, None)
    if select.select([done], [], [], grace)[0]:
        return "stopped (SIGTERM)"
    forward(signal.SIGKILL, None)
    return f"killed (SIGKILL, {grace:g} s after SIGTERM)"


def main(argv: list[str]) -> None:
    python, path, args = argv[1], argv[2], argv[3:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        os.execv(python, [python, *args])  # no server: run the task as its own interpreter
    task, pending = None, []

    def forward(signum, _frame):
        if task is None:
            pending.append(signum)
            return
        try:
            os.kill(task, signum)
        except ProcessLookupError:
            pass

    for s in FORWARDED:
        signal.signal(s, forward)
    lifeline, keep = os.pipe()  # ``keep`` stays open as long as this process lives
    fds = [0, 1, 2, lifeline]
    try:  # the network this stand-in was started in (an emulated node's), and the user namespace that
        # owns it (an unprivileged user's emulated node): the task joins both
        fds.append(os.open("/proc/self/ns/net", os.O_RDONLY))
        fds.append(os.open("/proc/self/ns/user", os.O_RDONLY))
    except OSError:
        pass
    payload = json.dumps({"argv": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(sock, [struct.pack("!I", len(payload)) + payload], fds)
    for fd in fds[3:]:
        os.close(fd)
    stream = sock.makefile("rb")
    started = read_message(stream)
    if not started or "pid" not in started:
        print(
            f"labkit fork server: could not start the task: {(started or {}).get('error', 'no answer')}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(1)
    task = started["pid"]
    for s in pending:
        forward(s, None)
    ended = read_message(stream)
    if ended is None:  # the server is gone (it dies with its owner), and the task's status with it
        how = wind_down(task, forward)
        print(
            f"labkit fork server: the server ended while the task ran; the task was {how}", file=sys.stderr, flush=True
        )
        sys.exit(1)
    status = ended["status"]
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main(sys.argv)
