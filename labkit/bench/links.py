"""Emulated links (``labkit.infra.netem``): the rate a shaped link carries against the rate it was given.

Two nodes on one shaped switch, one TCP stream between them, in rounds: the payload rate over
the configured rate (goal: within 10% in the best round; headers cap it at 0.956) and what the
labs' ``lan0`` counters read. Then the cost model (``labkit.learning.costmodel``) on that link:
Lab 5's MLP, ps and ring at N = 1, 2, on emulated 1 Gbit/s nodes and on 127.0.0.1, predicted
from a micro-benchmarked link plus the hosts' time per byte (gamma, fitted on loopback runs
only); goal: median error below 0.25 on the emulated link. Last, report 003's CIFAR-scale CNN
at N = 1, 2, 3 on 100 Mbit/s links: the PS levels off at its link's ceiling (N=3 / N=2 at most
1.15) while the ring keeps rising (at N=3 at least twice the PS's images/s).

More in docs/internals.md, section labkit.bench (how each figure is measured and predicted,
and what one run saw).
"""

from __future__ import annotations

import os
import statistics
import tempfile

from labkit.bench import entry, ratio

RATES = ("100mbit", "1gbit")
LINK = "1gbit"
CONTENDERS = (("ring", 1), ("ps", 2), ("ring", 2))  # Lab 5's MLP: compute baseline, then N=2 both ways
CEILING = 1448 / 1514  # TCP payload per Ethernet frame (MSS with timestamps / frame): what a shaped link can carry
CIFAR_LINK = "100mbit"  # report 003 measured: the CNN's M moves in about half a second, several times its compute


def _one_rate(link: str, nbytes: int, rounds: int) -> dict:
    from labkit.infra import netem

    payload, counted = [], []
    with netem.EmulatedNetwork(2, link) as net:
        for _ in range(rounds):
            before = net.counters("node0")["lan0"][1]
            rate = netem.throughput(net, "node1", "node0", nbytes)
            # the warm-up and the timed transfer both crossed lan0: its bytes per payload byte
            counted.append(rate * (net.counters("node0")["lan0"][1] - before) / (2 * nbytes))
            payload.append(rate)
    configured = netem.parse_link(link).bytes_per_s
    return {
        "link": link,
        "configured MB/s": configured / 1e6,
        "payload MB/s": statistics.median(payload) / 1e6,
        "lan0 counter MB/s": statistics.median(counted) / 1e6,
        "payload / rate": statistics.median(payload) / configured,
        "best round / rate": max(payload) / configured,
        "payload / ceiling": statistics.median(payload) / configured / CEILING,
    }


def _cost_model(rounds: int, steps: int) -> tuple[list[dict], dict]:
    """Step times and the cost model's errors, emulated vs loopback, with and without gamma (see
    the module docstring)."""
    import pandas as pd

    from labkit.learning import costmodel
    from labkit.infra import netem
    from labkit.labs.lab5 import experiment as ring_vs_ps
    from labkit.distributed.launchers.netns import cluster_args
    from labkit.core.proc import usable_cores

    links = {"emulated": netem.measure_link(LINK), "loopback": costmodel.measure_loopback_link()}
    cores = usable_cores()
    keys = [(where, arch, n) for where in links for arch, n in CONTENDERS if n > 1]
    found: dict = {k: {"step_s": [], "link only": [], "link + gamma": []} for k in keys}
    loop_runs, hosts = [], []

    def errors(where: str, what: str, pred) -> None:
        """Each N=2 setting's |rel_error| in ``pred`` (one row per arch and N) into ``found``."""
        pred = pred.set_index(["arch", "workers"])
        for _, arch, n in (k for k in keys if k[0] == where):
            found[(where, arch, n)][what].append(abs(float(pred.loc[(arch, n), "rel_error"])))
            if what == "link only":
                found[(where, arch, n)]["step_s"].append(float(pred.loc[(arch, n), "step_s"]))

    with tempfile.TemporaryDirectory(prefix="labkit-bench-netem-") as runs_dir:
        os.environ["LABKIT_RUNS"] = runs_dir
        for r in range(rounds):
            sweeps = {}
            for where in links:
                runs = [
                    ring_vs_ps.run_one(
                        arch,
                        "mlp",
                        n,
                        batch_size=64,
                        steps=steps,
                        epochs=2,
                        test_limit=500,
                        run=f"{where}-{arch}-w{n}-{r}",
                        timeout=900,
                        **(cluster_args(LINK, n + 1) if where == "emulated" else {}),
                    )
                    for arch, n in CONTENDERS
                ]
                sweeps[where] = ring_vs_ps.Scaling(runs, settings={"cores": cores})
            loop_runs.append(sweeps["loopback"].cost_runs())
            hosts.append(costmodel.fit_host_cost(loop_runs[-1], links["loopback"], cores=cores))
            for where, sweep in sweeps.items():
                predictions = {"link only": sweep.predict(links[where])}
                if where == "emulated":  # loopback with gamma: from the other rounds, below
                    predictions["link + gamma"] = sweep.predict(links[where], host=hosts[-1])
                for what, pred in predictions.items():
                    errors(where, what, pred)
        for r in range(rounds if rounds > 1 else 0):  # loopback with gamma fitted to the other rounds' runs
            others = pd.concat([f for i, f in enumerate(loop_runs) if i != r], ignore_index=True)
            host = costmodel.fit_host_cost(others, links["loopback"], cores=cores)
            errors(
                "loopback",
                "link + gamma",
                costmodel.predict_runs(loop_runs[r], links["loopback"], cores=cores, host=host),
            )

    def med(v: list) -> float:
        return statistics.median(v) if v else float("nan")

    rows = [
        {
            "network": f"{where} ({LINK})" if where == "emulated" else "127.0.0.1",
            "setup": f"{arch} N={n}",
            "step ms": 1e3 * med(v["step_s"]),
            "|error| link only": med(v["link only"]),
            "|error| link + gamma": med(v["link + gamma"]),
        }
        for (where, arch, n), v in found.items()
    ]
    err = {
        (where, arch, what): med(v[what])
        for (where, arch, n), v in found.items()
        for what in ("link only", "link + gamma")
    }
    gamma = {arch: med([getattr(h, arch) for h in hosts]) for arch in costmodel.ARCHS}
    return rows, {"links": links, "err": err, "gamma": gamma}


def _report_003(steps: int, gamma: dict) -> tuple[list[dict], list[dict]]:
    """Lab 5's CIFAR-scale CNN on emulated 100 Mbit/s links: (rows, ratios); see the module docstring."""
    from labkit.learning import costmodel
    from labkit.labs.lab5 import experiment as ring_vs_ps

    with tempfile.TemporaryDirectory(prefix="labkit-bench-report003-") as runs_dir:
        os.environ["LABKIT_RUNS"] = runs_dir
        em = ring_vs_ps.emulated(CIFAR_LINK, "cifar_cnn", (1, 2, 3), steps=steps, progress=False, log=None)
    host = costmodel.HostCost(gamma["ps"], gamma["ring"], "the loopback runs above")
    pred = em.predict(host).set_index(["arch", "workers"])
    table = em.table().set_index(["arch", "workers"])
    rows = [
        {
            "network": f"emulated ({CIFAR_LINK})",
            "setup": f"cifar_cnn {arch} N={n}",
            "step ms": 1e3 * table.loc[(arch, n), "step_s"],
            "images/s": table.loc[(arch, n), "images_per_s"],
            "predicted images/s": pred.loc[(arch, n), "predicted_images_per_s"]
            if (arch, n) in pred.index
            else table.loc[(arch, n), "images_per_s"],
        }
        for arch, n in table.index
    ]
    growth, fit = em.growth(host), em.fit_error(host)
    curves = em.curves(host).query("where == 'a core per node'").set_index(["arch", "workers"])["speedup"]
    ratios = [
        ratio("report 003 measured: PS images/s, N=3 / N=2 (levels off)", growth["ps"]["measured"], "<= 1.15"),
        ratio("the same, cost model", growth["ps"]["predicted"], ""),
        ratio("ring images/s, N=3 / N=2, measured", growth["ring"]["measured"], ""),
        ratio("the same, cost model", growth["ring"]["predicted"], ""),
        ratio(
            "ring / PS images/s at N=3, measured",
            table.loc[("ring", 3), "images_per_s"] / table.loc[("ps", 3), "images_per_s"],
            ">= 2",
        ),
        ratio("cost model |predicted / measured - 1|, median, PS (link + gamma)", fit["ps"], "<= 0.25"),
        ratio("the same, ring", fit["ring"], ""),
        ratio(
            "cost model on a core per node: ring speed-up N=6 / N=3 (still rising)",
            curves[("ring", 6)] / curves[("ring", 3)],
            "",
        ),
        ratio(
            "cost model on a core per node: PS speed-up N=6 / N=3 (levelled off)",
            curves[("ps", 6)] / curves[("ps", 3)],
            "",
        ),
    ]
    return rows, ratios


def run(quick: bool = False) -> dict:
    from labkit.infra import netem

    mode, why = netem.availability("1gbit")
    if mode is None:
        return {
            "title": "Emulated links: achieved vs configured rate",
            "rows": [],
            "ratios": [],
            "notes": [f"skipped: {why}"],
        }
    rounds = 2 if quick else 5
    rows = [_one_rate(link, 12_500_000 if link == "1gbit" else 2_500_000, rounds) for link in RATES]
    link = netem.measure_link("1gbit", repeats=2 if quick else 3)
    ratios = []
    for r in rows:  # the goal on the best round: what the link carries when the stream has a core
        ratios.append(
            ratio(
                f"{r['link']}: TCP payload / configured rate, best round (ceiling {CEILING:.3f}: headers)",
                r["best round / rate"],
                ">= 0.9",
            )
        )
        ratios.append(
            ratio(f"{r['link']}: TCP payload / configured rate, best round, at most", r["best round / rate"], "<= 1.1")
        )
        ratios.append(ratio(f"{r['link']}: TCP payload / configured rate, median of rounds", r["payload / rate"], ""))
    ratios.append(ratio("1gbit: cost model's B (micro-benchmark) / configured rate", link.bandwidth / 125e6, ""))
    cost_rounds, steps = (1, 8) if quick else (2, 16)
    cost_rows, cost = _cost_model(cost_rounds, steps)
    err, gamma = cost["err"], cost["gamma"]
    errors = [  # (where, model, the row's name, goal); gamma on loopback is fitted on the other rounds
        (
            "emulated",
            "link + gamma",
            "cost model |predicted / measured - 1| on emulated {link}, {arch} N=2 (link + gamma from loopback runs)",
            "<= 0.25",
        ),
        ("emulated", "link only", "the same, link only (no gamma), {arch} N=2", ""),
        ("loopback", "link only", "the same on 127.0.0.1, link only (loopback micro-benchmark), {arch} N=2", ""),
    ]
    if cost_rounds > 1:
        errors.append(
            (
                "loopback",
                "link + gamma",
                "the same on 127.0.0.1, link + gamma from the other rounds' loopback runs, {arch} N=2",
                "",
            )
        )
    for where, model, name, goal in errors:
        for arch in ("ps", "ring"):
            ratios.append(ratio(name.format(link=LINK, arch=arch), err[(where, arch, model)], goal))
    ratios.append(
        ratio(
            f"cost model error, emulated {LINK} (link + gamma) / 127.0.0.1 (link only), ps N=2",
            err[("emulated", "ps", "link + gamma")] / max(err[("loopback", "ps", "link only")], 1e-9),
            "",
        )
    )
    loop = cost["links"]["loopback"]
    report_rows, report_ratios = _report_003(8 if quick else 16, gamma)
    ratios += report_ratios
    return {
        "title": "Emulated links: achieved vs configured rate, the cost model on them, report 003 measured",
        "rows": rows + cost_rows + report_rows,
        "ratios": ratios,
        "notes": [
            f"{mode} mode; one TCP stream node1 -> node0, median of {rounds} rounds "
            f"(each: a warm-up transfer, then the timed one)",
            f"1gbit link for the cost model: alpha {link.alpha_s * 1e6:.0f} us, "
            f"B {link.bandwidth / 1e6:.1f} MB/s (fit error {link.rel_error:.3f}); loopback: alpha "
            f"{loop.alpha_s * 1e6:.0f} us, B {loop.bandwidth / 1e6:,.0f} MB/s",
            f"cost model: MLP (M = 23.3 MB), per-worker batch 64, {steps} steps per run over 2 epochs, one "
            f"intra-op thread per task; median of {cost_rounds} round(s), each emulated and loopback in turn; "
            f"compute per image from each round's ring N=1; the nodes share this machine's cores",
            f"gamma (host time per critical-path byte, from each round's loopback runs; median): ps "
            f"{gamma['ps'] * 1e9:.2f} ns/B, ring {gamma['ring'] * 1e9:.2f} ns/B"
            + ("" if cost_rounds > 1 else "; loopback with gamma needs a second round to hold out (nan)"),
        ],
    }


if __name__ == "__main__":
    entry(run)
