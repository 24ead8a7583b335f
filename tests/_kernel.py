"""A real Jupyter kernel for tests that need one: cells run as a notebook would run them,
every iopub message is kept, and the kernel (with whatever it started) is gone afterwards."""

from __future__ import annotations

import contextlib
import os
import queue
import time

from jupyter_client import KernelManager


@contextlib.contextmanager
def kernel(cwd, **env):
    """``(km, kc)``: a python3 kernel running in ``cwd`` with this process's environment plus
    ``env`` (Jupyter Server's ``JPY_SESSION_NAME`` removed: a headless kernel unless a test sets it)."""
    full = {k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"}
    full.update({k: str(v) for k, v in env.items()})
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(cwd), env=full)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run(kc, code: str, timeout: float = 240) -> tuple[dict, list[dict]]:
    """Execute ``code``; return its execute_reply content and every iopub message of it."""
    msgs: list[dict] = []
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=msgs.append, allow_stdin=False)
    return reply["content"], msgs


def ok(kc, code: str, timeout: float = 240) -> list[dict]:
    """``run`` and assert the cell did not raise (the traceback is the failure message).
    Right after an error the kernel aborts requests for a moment: those are sent again."""
    for _ in range(20):
        content, msgs = run(kc, code, timeout)
        if content["status"] != "aborted":
            break
        time.sleep(0.25)
    assert content["status"] == "ok", f"{content}\n{text(msgs)}"
    return msgs


def text(msgs: list[dict]) -> str:
    """Everything the cell printed (stdout and stderr)."""
    return "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")


def reply(kc, timeout: float) -> dict:
    """The next execute_reply on the shell channel."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"no execute_reply within {timeout} s") from None
        if msg["msg_type"] == "execute_reply":
            return msg["content"]
