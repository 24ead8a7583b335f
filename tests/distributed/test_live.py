"""Live views and progress bars, in a real kernel: a live JupyterLab kernel (LABKIT_LIVE=1, as
Jupyter Server's JPY_SESSION_NAME would make it) redraws a running cluster's per-task view in
place through display_id updates; a headless kernel (papermill's) draws nothing during the run
and one static figure at the end, and its progress bars are text, not widgets."""

import json

import pytest

from helpers import children
from labkit.distributed import live
from labkit.measure import progress
from _kernel import kernel, ok, text

pytestmark = pytest.mark.cluster

LIVE_RUN = """
import os, json, time
os.environ["LABKIT_LIVE"] = "1"
from labkit.wire import spec as cluster
from labkit.distributed import live
from labkit.distributed.launch import Cluster
c = Cluster(cluster.local(ps=1, workers=1), "ps_sgd",
            {"steps": 10_000_000, "train_limit": 1000, "test_limit": 200, "sample_interval": 0.25}, lab="live", timeout=200)
with c, live.watch(c, refresh=0.5) as view:
    c.follow(until=lambda: view.figures >= 2)  # runs until the view has redrawn its figure twice
print(json.dumps({"live": view.live, "updates": view.updates, "figures": view.figures, "errors": view.errors}))
"""

HEADLESS_RUN = """
os.environ["LABKIT_LIVE"] = "0"
c = Cluster(cluster.local(ps=1, workers=1), "ps_sgd",
            {"steps": 150, "train_limit": 1000, "test_limit": 200, "sample_interval": 0.25}, lab="live", timeout=200)
with c, live.watch(c) as view:
    result = c.wait()
print(json.dumps({"live": view.live, "updates": view.updates, "errors": view.errors,
                  "ended": [t.ended for t in result]}))
"""


def _report(msgs) -> dict:
    return json.loads(text(msgs).strip().splitlines()[-1])


def _images(msgs, kind: str) -> list[dict]:
    return [m for m in msgs if m["msg_type"] == kind and "image/png" in m["content"]["data"]]


def test_live_view_redraws_in_place_and_headless_shows_one_figure(tmp_path):
    with kernel(tmp_path, LABKIT_RUNS=tmp_path / "runs") as (km, kc):
        msgs = ok(kc, LIVE_RUN)
        report = _report(msgs)
        assert report["live"] and not report["errors"] and report["figures"] >= 2
        shown = [m for m in msgs if m["msg_type"] == "display_data"]
        ids = {m["content"]["transient"]["display_id"] for m in shown}
        assert len(shown) == 2 and len(ids) == 2, "a live view shows one table and one figure"
        updates = [m for m in msgs if m["msg_type"] == "update_display_data"]
        assert {m["content"]["transient"]["display_id"] for m in updates} == ids  # redrawn in place
        assert len(_images(msgs, "update_display_data")) >= 3  # two while running, the whole run at the end
        assert "worker:0" in updates[-2]["content"]["data"]["text/html"]

        # a sweep's next runs in the same cell redraw the same two outputs
        msgs = ok(kc, "for _ in range(2):\n    with live.watch(c, live=True):\n        pass")
        shown = [m["content"]["transient"]["display_id"] for m in msgs if m["msg_type"] == "display_data"]
        updated = {m["content"]["transient"]["display_id"] for m in msgs if m["msg_type"] == "update_display_data"}
        assert len(shown) == 2 and updated == set(shown)

        # headless: no live outputs during the run, one static figure of the tasks' own samples at the end
        msgs = ok(kc, HEADLESS_RUN)
        assert _report(msgs) == {"live": False, "updates": 0, "errors": [], "ended": ["done-queue", "exited"]}
        assert not [m for m in msgs if m["msg_type"] == "update_display_data"]
        assert len(_images(msgs, "display_data")) == 1

        # Lab 1's bar under papermill: text on stdout that ends at 100%, no widget
        msgs = ok(
            kc,
            "from labkit import load_mnist; from labkit.learning import lr\n"
            "run = lr.train('numpy', load_mnist(limit=1000, test_limit=200), 2)",
        )
        assert "100%" in text(msgs) and "2/2" in text(msgs)
        assert not [m for m in msgs if "application/vnd.jupyter.widget-view+json" in m["content"].get("data", {})]
        kernel_pid = km.provisioner.process.pid
        assert not children(kernel_pid), "tasks left running in the kernel"


def test_progress_chooses_text_bars_unless_live(monkeypatch):
    monkeypatch.delenv("LABKIT_LIVE", raising=False)
    monkeypatch.setenv("JPY_SESSION_NAME", "x.ipynb")
    assert not progress.is_live()  # no kernel here, whatever Jupyter's variable says
    from tqdm.std import tqdm as text_bar

    with progress.tqdm(total=2, disable=True) as bar:
        assert type(bar) is text_bar
    monkeypatch.setenv("LABKIT_LIVE", "1")
    assert progress.is_live()
    monkeypatch.setenv("LABKIT_LIVE", "maybe")
    with pytest.raises(ValueError, match="LABKIT_LIVE"):
        progress.is_live()


def test_log_tail_and_bad_arguments(tmp_path):
    from labkit.distributed.launch import TaskFailed

    err = TaskFailed("worker:1", 1, "line 1\nline 2\nboom", tmp_path / "worker-1.log")
    shown = live.log_tail(err, lines=2)
    assert str(shown).endswith("line 2\nboom") and "worker:1" in shown._repr_html_()
    with pytest.raises(ValueError, match="Cluster, a ClusterResult or a TaskFailed"):
        live.log_tail("worker:1")
    with pytest.raises(ValueError, match="LiveView watches"):
        live.LiveView(object())


class _StoppedCluster:
    """What LiveView reads of a Cluster: its spec, pids, status and each task's log tail."""

    def __init__(self, tmp_path):
        from labkit.wire import spec as cluster

        self.spec = cluster.from_hosts(["127.0.0.1"], ps=1, workers=2, base_port=23000)
        self.module, self.run_dir = "labkit.tasks.ps_sgd", tmp_path

    def local_pids(self):
        return {}

    def status(self):
        return {}

    def log_tail(self, name, lines=30):
        return f"last line of {name}"


@pytest.mark.parametrize(
    "failure, expected",
    [
        ("timeout", ["worker:1"]),  # only the tasks still running
        ("failed", ["ps:0", "worker:0"]),  # the others: the failed task's tail is in its message
        ("other", ["ps:0", "worker:0", "worker:1"]),
    ],
)
def test_a_failed_run_shows_the_log_tails_that_explain_it(tmp_path, monkeypatch, failure, expected):
    import IPython.display
    from labkit.distributed.launch import ClusterTimeout, TaskFailed

    shown = []
    monkeypatch.setattr(live, "_kernel_shell", lambda: object())  # as in a notebook
    monkeypatch.setattr(IPython.display, "display", shown.append)
    exc = {
        "timeout": ClusterTimeout(60, ["worker:1"]),
        "failed": TaskFailed("worker:1", 1, "boom", tmp_path / "worker-1.log"),
        "other": RuntimeError("boom"),
    }[failure]
    live.LiveView(_StoppedCluster(tmp_path), live=False).show_failure(exc)
    (tails,) = shown
    assert [title for title, _ in tails.parts] == expected
    assert all(text == f"last line of {title}" for title, text in tails.parts)
