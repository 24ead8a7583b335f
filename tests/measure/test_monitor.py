"""The resource sampler sees real processes, real loopback traffic, and writes dstat's layout."""

import csv
import json
import socket
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

from helpers import wait_until
from labkit import cli
from labkit.measure import plots, units
from labkit.measure.dstat import read_dstat_csv
from labkit.measure.monitor import ResourceSampler, idle_baseline
from labkit.measure.summaries import merge_frames, summarize, summarize_tasks
from labkit.core.proc import OwnedProcess

MB = 1_000_000
# Touches ~200 MB (bytes * n writes every page) and spins until killed or 30 s pass.
SPINNER = "import time; b = b'x' * (200 << 20); t = time.time()\nwhile time.time() - t < 30: pass"


def test_sees_a_busy_grandchild_only_when_children_are_included(tmp_path):
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {SPINNER!r}], timeout=60)"
    with OwnedProcess([sys.executable, "-c", parent], tmp_path / "parent.log", timeout=60) as p:
        with (
            ResourceSampler(0.2, pids=[p.pid], children=True) as tree,
            ResourceSampler(0.2, pids=[p.pid], children=False) as alone,
        ):

            def busy():
                return (tree.latest() or {}).get("proc_rss", 0) > 150 * MB and tree.to_frame().proc_cpu.max() > 10

            wait_until(busy, 20, 0.1, lambda: f"the spinner to show: {tree.latest()}")
            time.sleep(0.5)
    t, a = tree.to_frame(), alone.to_frame()
    assert t.proc_rss.max() > 150 * MB and t.nprocs.max() == 2
    assert t.proc_cpu.max() > 10  # the spinner burns CPU (a sleeping process reads ~0)
    assert a.proc_rss.max() < 100 * MB and a.nprocs.max() == 1  # the parent alone just waits
    assert a.proc_cpu.max() < t.proc_cpu.max()
    assert tree.errors == [] and alone.errors == []
    assert 0 <= t.cpu_user.max() <= 100 and (t.cpu_user + t.cpu_system + t.cpu_idle).max() <= 100.5


def test_a_process_that_exits_mid_sampling_is_dropped_cleanly():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:  # left unreaped on purpose: a zombie counts as exited
        with ResourceSampler(0.1, pids=[child.pid]) as s:
            wait_until(lambda: s.exited, 15, 0.1, "the sampler to see the child exit")
            n = len(s.to_frame())
            wait_until(lambda: len(s.to_frame()) >= n + 3, 10, 0.1, "3 more samples of the host")  # still sampling
            assert s.running
    finally:
        child.kill()
        child.wait()
    f = s.to_frame()
    assert [e["pid"] for e in s.exited] == [child.pid]
    assert f.nprocs.iloc[0] == 1 and f.nprocs.iloc[-1] == 0 and f.proc_rss.iloc[-1] == 0
    assert s.errors == []


def test_loopback_traffic_shows_on_lo():
    payload = b"x" * (8 * MB)
    server = socket.create_server(("127.0.0.1", 0))
    with ResourceSampler(0.2, nics=["lo"]) as s, server:
        client = socket.create_connection(server.getsockname())
        conn, _ = server.accept()
        received = []

        def drain():
            while chunk := conn.recv(1 << 20):
                received.append(len(chunk))

        reader = threading.Thread(target=drain)
        reader.start()
        client.sendall(payload)
        client.close()
        reader.join(timeout=20)
        conn.close()
        # a sample taken after the transfer (the last one, on leaving the block, may come within 20 ms of the previous)
        wait_until(
            lambda: s.to_frame().get("net_recv_lo", pd.Series()).sum() >= len(payload),
            10,
            0.05,
            "a sample after the transfer",
        )
    f = s.to_frame()
    assert sum(received) == len(payload)
    assert [c for c in f.columns if c.startswith("net_")] == ["net_recv", "net_sent", "net_recv_lo", "net_sent_lo"]
    assert f.net_recv_lo.sum() >= len(payload)  # plus headers and anyone else's loopback traffic
    assert f.net_recv_lo.sum() == f.net_sent_lo.sum()  # on lo, each byte is sent and received once
    assert s.summary()["net_recv_bytes"] == f.net_recv.sum()


def test_bad_arguments_say_what_to_do():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with pytest.raises(ValueError, match="no such process"):
        ResourceSampler(pids=[gone.pid])
    with pytest.raises(ValueError, match="no interface named"):
        ResourceSampler(nics=["no-such-nic0"])
    with pytest.raises(ValueError, match="interval"):
        ResourceSampler(interval=0)


def test_marks_cut_windows_that_add_up():
    with ResourceSampler(0.1) as s:
        time.sleep(0.25)
        a = s.mark("train start")
        sum(i * i for i in range(300_000))
        time.sleep(0.3)
        b = s.mark("train end")
        time.sleep(0.2)
    f = s.to_frame()
    assert [m.label for m in s.marks] == ["train start", "train end"] and 0 < a.t < b.t < f.t.iloc[-1]
    assert [m["label"] for m in f.attrs["marks"]] == ["train start", "train end"]
    window = summarize(f, "train start", "train end")
    assert window["duration_s"] == pytest.approx(b.t - a.t)
    whole, before, after = s.summary(), s.summary(end=a.t), summarize(f, start="train start")
    assert whole["duration_s"] == pytest.approx(f.t.iloc[-1])
    for key in ("duration_s", "net_recv_bytes", "net_sent_bytes"):
        assert before[key] + after[key] == pytest.approx(whole[key])
    with pytest.raises(ValueError, match="train start"):
        summarize(f, "no such mark")


def test_json_round_trip_and_merging_tasks():
    with ResourceSampler(0.1) as a:
        a.mark("go")
        time.sleep(0.3)
    back = ResourceSampler.from_dict(json.loads(json.dumps(a.to_dict())))
    pd.testing.assert_frame_equal(back.to_frame(), a.to_frame())
    assert back.marks == a.marks and back.summary() == pytest.approx(a.summary(), nan_ok=True)

    with ResourceSampler(0.1) as b:
        time.sleep(0.1)
        b.mark("go")
        time.sleep(0.2)
    merged = merge_frames({"ps0": a.to_dict(), "worker0": b})
    assert list(merged.task.unique()) == ["ps0", "worker0"]
    later = merged[merged.task == "worker0"].t.iloc[0] - b.to_frame().t.iloc[0]
    assert later == pytest.approx(b.start_epoch - a.start_epoch, abs=1e-6)  # one time axis
    assert [(m["task"], m["label"]) for m in merged.attrs["marks"]] == [("ps0", "go"), ("worker0", "go")]
    table = summarize_tasks(merged, start="go")  # each task's own "go" mark
    assert list(table.index) == ["ps0", "worker0"] and set(table.host) == {a.host}
    assert table.loc["worker0", "duration_s"] == pytest.approx(b.to_frame().t.iloc[-1] - b.marks[0].t)
    with pytest.raises(ValueError, match="summarize_tasks"):
        summarize(merged)
    with pytest.raises(ValueError, match="to_dict"):
        ResourceSampler.from_dict({"format": "something else"})


def test_dstat_csv_has_dstat_layout_and_reads_back(tmp_path):
    with ResourceSampler(0.1) as s:
        time.sleep(0.35)
    f = s.to_frame()
    path = s.to_csv(tmp_path / "dstat.csv", dstat=True)
    lines = path.read_text().splitlines()
    assert lines[0] == '"Dstat 0.7.2 CSV output"'
    assert [line.split(",")[0] for line in lines[1:4]] == ['"Author:"', '"Host:"', '"Cmdline:"'] and lines[4] == ""
    rows = list(csv.reader(lines[5:]))
    groups, columns, data = rows[0], rows[1], rows[2:]
    assert [g for g in groups if g] == ["system", "total cpu usage", "memory usage", "dsk/total", "net/total"]
    assert columns == [
        "time",
        "usr",
        "sys",
        "idl",
        "wai",
        "hiq",
        "siq",
        "used",
        "buff",
        "cach",
        "free",
        "read",
        "writ",
        "recv",
        "send",
    ]
    assert len(groups) == len(columns) and len(data) == len(f) and all(len(r) == len(columns) for r in data)
    table = pd.read_csv(path, skiprows=6)  # what dstat plotting scripts do
    assert table["usr"].tolist() == pytest.approx(f.cpu_user.tolist(), abs=1e-3)
    assert table["recv"].tolist() == pytest.approx((f.net_recv / f.dt).tolist(), abs=1e-3)  # bytes per second
    back = read_dstat_csv(path)
    assert back.cpu_user.tolist() == pytest.approx(f.cpu_user.tolist(), abs=1e-3)
    assert back.mem_used.tolist() == pytest.approx(f.mem_used.tolist())

    per_nic = s.to_csv(tmp_path / "nics.csv", dstat=True, per_nic=True)
    nic_groups = [g for g in next(csv.reader(per_nic.read_text().splitlines()[5:6])) if g.startswith("net/")]
    assert nic_groups[0] == "net/total" and "net/lo" in nic_groups


def test_reads_a_real_dstat_file(tmp_path):
    (tmp_path / "real.csv").write_text(
        '"Dstat 0.7.2 CSV output"\n'
        '"Author:","Dag Wieers <dag@wieers.com>",,,,"URL:","http://dag.wieers.com/home-made/dstat/"\n'
        '"Host:","node0",,,,"User:","ta"\n'
        '"Cmdline:","dstat --time -c --top-cpu -dn --top-mem --output run.csv 5",,,,"Date:","01 Oct 2019 10:00:00 UTC"\n'
        "\n"
        '"system","total cpu usage",,,,,,"most expensive","dsk/total",,"net/total",,"most expensive"\n'
        '"time","usr","sys","idl","wai","hiq","siq","cpu process","read","writ","recv","send","memory process"\n'
        "01-10 10:00:00,3.1,1.0,95.0,0.9,0.0,0.0,python / 3%,1000.0,2000.0,10.0,20.0,python / 500000000\n"
        "01-10 10:00:05,60.5,4.5,35.0,0.0,0.0,0.0,python / 60%,0.0,400.0,1000.0,3000.0,python / 510000000\n"
        "01-10 10:00:10,70.0,5.0,25.0,0.0,0.0,0.0,python / 70%,0.0,0.0,2000.0,1000.0,python / 520000000\n"
    )
    f = read_dstat_csv(tmp_path / "real.csv")
    assert f.cpu_user.tolist() == [60.5, 70.0]  # dstat's first row (since boot) is dropped
    assert f.dt.tolist() == [5.0, 5.0] and f.t.tolist() == [5.0, 10.0]
    assert f.net_recv.tolist() == [5000.0, 10000.0]  # 1000 B/s for 5 s
    s = summarize(f)
    assert s["cpu_user_pct"] == pytest.approx(65.25) and s["net_sent_bytes"] == 20000.0


def test_errors_in_a_callback_are_surfaced_not_fatal():
    def broken(row):
        raise RuntimeError("live view broke")

    with pytest.warns(RuntimeWarning, match="on_sample callback failed"):
        with ResourceSampler(0.1, on_sample=broken) as s:
            wait_until(lambda: len(s.to_frame()) >= 3, 10, 0.1, "3 samples")
    assert "live view broke" in s.errors[0] and len(s.errors) >= 3
    assert f"{len(s.errors)} errors" in repr(s)


def test_idle_baseline_samples_the_host_only():
    base = idle_baseline(seconds=0.5, interval=0.1)
    assert base["duration_s"] >= 0.5 and base["samples"] >= 3
    assert base["proc_cpu_pct"] == 0 and base["proc_rss_bytes"] == 0
    assert base["mem_used_bytes"] > 0 and 0 <= base["cpu_user_pct"] <= 100


def test_cli_runs_a_command_and_writes_csv_json_png(tmp_path):
    out = tmp_path / "mon"
    spin = "import time; b = b'x' * (50 << 20); t = time.time()\nwhile time.time() - t < 1: pass"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "labkit",
            "monitor",
            "--interval",
            "0.2",
            "--out",
            str(out),
            "--dstat",
            "--",
            sys.executable,
            "-c",
            spin,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert (out / "monitor.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "monitor.csv").read_text().startswith('"Dstat 0.7.2 CSV output"')
    d = json.loads((out / "monitor.json").read_text())
    assert max(d["columns"]["proc_rss"]) > 40 * MB
    assert [m["label"] for m in d["marks"]] == ["command started", "command ended"]
    assert "wrote" in r.stdout


def test_cli_samples_a_pid_for_a_duration(tmp_path, capsys):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        rc = cli.main(
            ["monitor", "--pid", str(sleeper.pid), "--duration", "0.5", "--interval", "0.1", "--out", str(tmp_path)]
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert rc == 0 and (tmp_path / "monitor.png").exists()
    assert pd.read_csv(tmp_path / "monitor.csv").nprocs.min() == 1
    assert cli.main(["monitor", "--out", str(tmp_path)]) == 2
    assert "either a command" in capsys.readouterr().err


def test_units_write_bytes_and_format_tables_by_column_name():
    assert [units.fmt_bytes(n) for n in (512, 1234, 2_500_000, 3.2e9, float("nan"))] == [
        "512 B",
        "1.2 KB",
        "2.5 MB",
        "3.2 GB",
        "n/a",
    ]
    frame = pd.DataFrame(
        {
            "workers": [1.0, None],
            "mem_used_bytes": [1.2e9, None],
            "bytes_per_step": [2500, 1],
            "net_recv_bytes_per_s": [2e6, 5],
            "cpu_user_pct": [42, 7.25],
            "val_accuracy": [0.9123, 0.5],
            "val_loss": [0.35123, 1],
            "time_s": [0.03123, 1234.5],
            "deviation": [0.031, -0.2],
            "speedup": [1.874, 300],
            "measured_over_analytic": [1.0312, 2],
            "images_per_s": [1234.4, 2],
            "config": ["1 x 50", "Idle"],
            "ratio": [0.5, 0.25],
        }
    )
    cells = {c: [f(v) for v in frame[c]] for c, f in units.formats(frame).items()}
    assert cells == {
        "workers": ["1", "-"],
        "mem_used_bytes": ["1.2 GB", "-"],
        "bytes_per_step": ["2.5 KB", "1 B"],
        "net_recv_bytes_per_s": ["2.0 MB/s", "5 B/s"],
        "cpu_user_pct": ["42.0", "7.2"],
        "val_accuracy": ["91.23%", "50.00%"],
        "val_loss": ["0.3512", "1.0000"],
        "time_s": ["0.0312", "1,234"],
        "deviation": ["+3.1%", "-20.0%"],
        "speedup": ["1.87x", "300x"],
        "measured_over_analytic": ["1.03", "2.00"],
        "images_per_s": ["1,234", "2"],
    }  # "config" is text and "ratio" has no known suffix: left alone
    html = units.table(frame, {"ratio": "{:.0%}"}, hide_index=True).to_html()
    assert "1.2 GB" in html and "25%" in html and "Idle" in html


def test_plots_draw_marks():
    with ResourceSampler(0.1) as a:
        a.mark("start")
        time.sleep(0.3)
    b = ResourceSampler.from_dict(a.to_dict())
    fig = plots.resource_timeline({"w0": a, "w1": b})
    cpu = fig.axes[0]
    assert len(fig.axes) == 4  # cpu, process memory, network + the host memory axis
    assert any(line.get_xdata()[0] == pytest.approx(a.marks[0].t) for line in cpu.lines if line.get_linestyle() == ":")
    assert fig.axes[2].yaxis.get_major_formatter()(2000, 0) == "2 KB/s"
    assert len(plots.resource_timeline({"w0": a, "w1": b}, layout="rows").axes) == 8
    with pytest.raises(ValueError, match="layout"):
        plots.resource_timeline(a.to_frame(), layout="grid")


def test_node_rates_reads_each_node_once_and_keeps_lo_apart():
    """Two tasks on node A see the same counters (read once); node B's link carried the traffic
    A's lo did not: per node, its NICs but lo, over a window."""
    from labkit.measure.summaries import frame, node_rates

    def task(recv_lan, sent_lan, lo):
        rows = [
            {
                "t": t,
                "dt": 1.0,
                "epoch": 1000.0 + t,
                "net_recv_lan0": recv_lan,
                "net_sent_lan0": sent_lan,
                "net_recv_lo": lo,
                "net_sent_lo": lo,
                "net_recv": recv_lan + lo,
                "net_sent": sent_lan + lo,
            }
            for t in (1.0, 2.0, 3.0, 4.0)
        ]
        return frame(rows, [{"label": "go", "t": 2.0, "epoch": 1002.0}], "box", 1000.0, 1.0)

    merged = merge_frames({"ps:0": task(100, 300, 50), "worker:0": task(100, 300, 50), "worker:1": task(300, 100, 0)})
    nodes = {"ps:0": "node0", "worker:0": "node0", "worker:1": "node1"}
    rates = node_rates(merged, nodes)
    assert list(rates.index) == ["node0", "node1"] and rates.loc["node0", "tasks"] == "ps:0, worker:0"
    assert rates.loc["node0", "recv_bytes_per_s"] == pytest.approx(100)  # not 200: one node, one NIC
    assert rates.loc["node0", "sent_bytes_per_s"] == pytest.approx(300)
    assert rates.loc["node0", "lo_bytes_per_s"] == pytest.approx(50) and rates.loc["node1", "lo_bytes_per_s"] == 0
    assert rates.loc["node1", "bytes_per_s"] == pytest.approx(400) and rates.loc["node1", "nics"] == "lan0"
    assert node_rates(merged, nodes, start=2.5)["duration_s"].tolist() == pytest.approx([1.5, 1.5])
    assert node_rates(merged, nodes, start="go")["duration_s"].tolist() == pytest.approx([2.0, 2.0])
    assert list(node_rates(merged).index) == ["box"]  # by the frame's host column: one machine
    with pytest.raises(ValueError, match="worker:1"):
        node_rates(merged, {"ps:0": "node0", "worker:0": "node0"})
