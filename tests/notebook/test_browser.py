"""What a student does, in a real browser: JupyterLab on 127.0.0.1, Lab 1 opened in headless
Chromium (Debian's package, driven by Playwright; no browser download), Run All Cells, wait,
then: every cell ran, none shows an error, the accuracy record is on the page, the progress
bars are live widgets, and the notebook saved from the browser holds the records.
A screenshot goes to out/browser/.

Needs ``chromium`` (``apt-get install -y chromium chromium-driver``; .ci/run installs it) and
the ``playwright`` pip package (requirements-test.txt); skipped with the reason where either is missing.
"""

import json
import os
import re
import secrets
import shutil
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from helpers import WaitTimeout, wait_until
from labkit.wire import spec as cluster
from labkit.core.proc import OwnedProcess, tail
from labkit.notebook.record import read_records

pytestmark = [pytest.mark.browser, pytest.mark.notebook, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("LABKIT_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# small enough for a minute on 2 cores; the notebook's own defaults are the grading size
PARAMETERS = {"epochs": 2, "train_limit": 3000, "test_limit": 1000, "idle_s": 0.2, "open_tensorboard": False}
RUN_TIMEOUT_S = 400
KERNEL_TIMEOUT_S = 240  # JupyterLab's kernel start-up: its imports wait for a core when the machine is busy


def _small_copy(dest: Path) -> Path:
    """Lab 1 with its parameters cell set to PARAMETERS (what a student edits first)."""
    import nbformat

    nb = nbformat.read(REPO / "labkit" / "labs" / "lab1" / "01_single_node_lr.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    lines = cell.source.splitlines()
    for name, value in PARAMETERS.items():
        i = next(i for i, line in enumerate(lines) if re.match(rf"{name}\s*=", line))
        lines[i] = f"{name} = {value!r}"
    cell.source = "\n".join(lines)
    path = dest / "lab1.ipynb"
    nbformat.write(nb, path)
    return path


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except OSError:
        return 0


def _settled_kernel(url: str, token: str, timeout: float = 120) -> None:
    """Wait until the notebook's one session has kept the same idle kernel for 3 s: JupyterLab
    sometimes replaces the first kernel it starts, and cells sent meanwhile are lost."""
    seen = {"kernel": None, "since": 0.0}

    def settled():  # the sessions' (kernel, state), once the one kernel has stayed idle for 3 s
        with urllib.request.urlopen(f"{url}/api/sessions?token={token}", timeout=5) as r:
            sessions = json.load(r)
        now = [(s["kernel"]["id"], s["kernel"]["execution_state"]) for s in sessions]
        if len(now) == 1 and now[0][1] == "idle":
            if now[0][0] != seen["kernel"]:
                seen.update(kernel=now[0][0], since=time.monotonic())
            elif time.monotonic() - seen["since"] >= 3:
                return now
        else:
            seen["kernel"] = None
        seen["now"] = now
        return None

    wait_until(settled, timeout, 0.5, lambda: f"the notebook's kernel to settle (sessions: {seen['now']})")


def _page_shows_idle(page, shot: Path) -> None:
    """The page's kernel indicator says idle; if it does not within a minute of the server saying
    so, the failure shows what the page shows instead (its status, any dialog) and a screenshot."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    indicator = ".jp-Notebook-ExecutionIndicator"
    try:
        page.wait_for_selector(f"{indicator}[data-status='idle']", timeout=60_000)
    except PlaywrightTimeout:
        page.screenshot(path=str(shot))
        found = page.locator(indicator)
        status = found.first.get_attribute("data-status") if found.count() else "no indicator"
        dialogs = page.locator(".jp-Dialog").all_inner_texts()
        raise AssertionError(
            f"the server's kernel is idle, the page's indicator says {status!r}; dialogs {dialogs}; see {shot}"
        ) from None


@pytest.fixture
def jupyterlab(tmp_path):
    """JupyterLab serving tmp_path on 127.0.0.1:<free port> with a token; killed with its kernels."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's browser (apt-get install -y chromium chromium-driver)")
    pytest.importorskip("playwright", reason="pip package playwright is not installed (requirements-test.txt)")
    port, token = cluster.free_ports(1)[0], secrets.token_hex(16)
    home = tmp_path / "jupyter"
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "LABKIT_RUNS": str(tmp_path / "runs"),
    }
    env.pop("LABKIT_LIVE", None)
    # a fresh user's settings, minus what gets in a script's way: the kernel choice dialog, the
    # news prompt, and lazily attached cells (every cell stays in the page, so its prompt can be read)
    for name, settings in (
        ("notebook-extension/tracker", {"autoStartDefaultKernel": True, "windowingMode": "none"}),
        ("apputils-extension/notification", {"fetchNews": "false"}),
    ):
        path = home / "settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={tmp_path}",
        "--LabApp.news_url=",
        "--LabApp.extension_manager=readonly",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if os.geteuid() == 0:  # CI and this machine run as root
        cmd.append("--allow-root")
    before = set(psutil.Process().children(recursive=True))  # e.g. the fork server an earlier cluster test started
    server = OwnedProcess(cmd, tmp_path / "jupyterlab.log", env=env, cwd=tmp_path).start()
    try:

        def answers() -> bool:
            assert server.poll() is None, f"JupyterLab exited:\n{tail(server.log_path)}"
            return _get(f"http://127.0.0.1:{port}/api/status?token={token}") == 200

        wait_until(answers, 120, 0.5, lambda: f"JupyterLab to answer:\n{tail(server.log_path)}")
        yield f"http://127.0.0.1:{port}", token, server
    finally:
        server.kill()
    left = set(psutil.Process().children(recursive=True)) - before
    assert not left, f"JupyterLab or a kernel outlived the test: {left}"


def test_lab1_runs_all_cells_in_jupyterlab_in_chromium(tmp_path, jupyterlab):
    from playwright.sync_api import sync_playwright

    url, token, server = jupyterlab
    notebook = _small_copy(tmp_path)
    shots = REPO / "out" / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(120_000)
            page.goto(f"{url}/lab/tree/{notebook.name}?token={token}")
            page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
            # the kernel is up as the server sees it (a kernel's start-up waits for a core under load), then in the page
            _settled_kernel(url, token, timeout=KERNEL_TIMEOUT_S)
            _page_shows_idle(page, shots / "lab1-kernel.png")

            def read_prompts(cells: str = ".jp-CodeCell") -> list[str]:
                return page.locator(f"{cells} .jp-InputPrompt".strip()).all_inner_texts()

            for _ in range(3):  # Run > Run All Cells, until a cell has started
                page.click(".lm-MenuBar-itemLabel:text-is('Run')")
                page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
                try:
                    wait_until(
                        lambda: any(re.search(r"[*\d]", p) for p in read_prompts("")), 20, 0.5, "a cell to start"
                    )
                    break
                except WaitTimeout:
                    continue
            code_cells = page.locator(".jp-CodeCell")
            n_code = code_cells.count()

            def done():  # the prompts, once no cell waits or runs ("[*]") and the kernel is idle
                prompts = read_prompts()
                busy = any("*" in p for p in prompts)
                idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count() == 1
                return prompts if not busy and idle and any(re.search(r"\d", p) for p in prompts) else None

            try:
                prompts = wait_until(
                    done,
                    RUN_TIMEOUT_S,
                    1.0,
                    lambda: f"Run All to finish; prompts {read_prompts()}\n{tail(server.log_path)}",
                )
            except WaitTimeout:
                page.screenshot(path=str(shots / "lab1-timeout.png"))
                raise

            outputs = "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
            assert errors.count() == 0 and "Traceback (most recent call last)" not in outputs, outputs[-3000:]
            assert all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in prompts) and len(prompts) == n_code, prompts
            accuracy = re.search(r"\[labkit record\] core_test_accuracy = ([\d.]+)", outputs)
            assert accuracy and float(accuracy.group(1)) > 0.5, outputs[-3000:]
            bars = page.locator(".jp-OutputArea-output .widget-hprogress").count()
            assert bars >= 2, f"expected live tqdm widget bars, found {bars}: {outputs[:2000]}"

            page.locator(".jp-CodeCell").filter(has_text="lr.compare(core, keras_run)").scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "lab1.png"))

            before = notebook.stat().st_mtime
            page.keyboard.press("Control+s")  # what the student saves holds what the grader reads
            wait_until(lambda: notebook.stat().st_mtime != before, 30, 0.2, "the notebook to be saved")
        finally:
            browser.close()
    records = read_records(notebook)
    assert records["core_test_accuracy"] == pytest.approx(float(accuracy.group(1)), abs=1e-3)
    assert records["epochs"] == PARAMETERS["epochs"]
    saved = json.loads(notebook.read_text())
    widgets = [
        o
        for c in saved["cells"]
        for o in c.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert len(widgets) >= 2, "in JupyterLab the progress bars are widgets (labkit.measure.progress)"
    assert (tmp_path / "runs" / "lab1").is_dir()  # TensorBoard scalars under the one runs/ root
    shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)
