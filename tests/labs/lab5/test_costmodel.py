"""The cost model: calibration, the loopback benchmark, crossover; the reference bytes per task and
communication terms (labkit.labs.lab5.solution, Lab 5's exercise), and that the student kit has neither."""

import numpy as np
import pandas as pd
import pytest

from labkit.learning import costmodel as cm
from labkit.learning.costmodel import CostModel, Link
from labkit.labs.lab5.solution import step_bytes

LENET_BYTES = 61_706 * 4  # labkit.learning.models.lenet5 in float32 (test_train_loop checks the count): M = 246.8 KB


# --- bytes on the wire: the reference model -------------------------------------------------


def test_ps_bytes_per_task_by_hand():
    sb = step_bytes("ps", 1000, workers=3, n_ps=1)
    assert (sb.worker_sent, sb.worker_recv) == (1000, 1000)
    assert sb.ps_sent == (3000,) and sb.ps_recv == (3000,)
    assert sb.total == 6000  # 2*N*M
    table = sb.per_task()
    assert list(table["task"]) == ["worker:0", "worker:1", "worker:2", "ps:0"]
    assert table["sent"].sum() == sb.total


def test_ring_bytes_per_task_by_hand():
    sb = step_bytes("ring", 900, workers=3)
    assert sb.worker_sent == sb.worker_recv == pytest.approx(1200)  # 2*(3-1)/3*900
    assert sb.total == pytest.approx(3600)  # 2*(N-1)*M
    assert sb.ps_sent == ()
    assert step_bytes("ring", 900, workers=1).total == 0


def test_bytes_match_the_measured_lenet_table():
    # LeNet's bytes per step: PS 2M per worker step, ring 2(N-1)M in all
    assert step_bytes("ps", LENET_BYTES, 1).total / 1e3 == pytest.approx(493.6, abs=0.1)
    assert step_bytes("ring", LENET_BYTES, 2).total == pytest.approx(2 * LENET_BYTES)
    assert step_bytes("ring", LENET_BYTES, 3).total == pytest.approx(3 * 4 * LENET_BYTES / 3)


def test_shards_even_round_robin_and_uneven_load():
    assert cm.even_shards(100, 4) == (25, 25, 25, 25)
    assert cm.round_robin_shards([10, 1, 20, 2, 5], 2) == (35, 3)
    sb = step_bytes("ps", 38, workers=2, n_ps=2, shards=(35, 3))
    assert sb.ps_sent == (70, 6)
    assert cm.comm_terms("ps", 38, 2, 2, shards=(35, 3)) == (2, 140)


def test_the_student_kit_has_no_model_of_the_bytes_nor_the_exercise(monkeypatch):
    """Without the labs' solutions (make release leaves them out), the kit has neither the reference
    comm_terms nor the bytes per task it would be one call from: asking says what to
    pass instead. What other labs need of those bytes (Lab 3's dense PS step) stays."""
    import importlib

    from labkit.core.reference import NotInStudentKit

    real = importlib.import_module

    def without_solutions(name, *args, **kwargs):
        if name.startswith("labkit.labs.") and name.endswith(".solution"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", without_solutions)
    for name, instead in (("comm_terms", "your function"), ("step_bytes", "measured bytes per task")):
        with pytest.raises(NotInStudentKit, match=instead):
            getattr(cm, name)
    assert not hasattr(cm, "StepBytes") and "busiest_task" not in vars(cm)
    with pytest.raises(NotInStudentKit):
        cm.critical_path("ring", 1e6, 3)  # the terms are the student's to give
    assert cm.dense_ps_step_bytes(1000) == 8000


def test_comm_terms_by_hand():
    m = 1e6
    assert cm.comm_terms("ps", m, 4, n_ps=2) == (2, pytest.approx(4 * m))  # 2*N*M/k
    assert cm.comm_terms("ps", m, 2, n_ps=8) == (2, pytest.approx(2 * m))  # worker link bound
    msgs, nbytes = cm.comm_terms("ring", m, 4)
    assert msgs == 6 and nbytes == pytest.approx(1.5 * m)
    assert cm.comm_terms("ring", m, 1) == (0, 0)


def measured_rows(m=23_298_088, workers=(1, 2, 3), framing=1.03):
    """What Lab 5's runs measure on the critical path (ring: a worker's bytes sent; PS: the ps's sent +
    received), from the reference bytes with a little framing, as Scaling.critical_bytes gives it."""
    rows = []
    for n in workers:
        ps = step_bytes("ps", m, n)
        rows.append(
            {
                "arch": "ps",
                "workers": n,
                "n_ps": 1,
                "shards": (m,),
                "model_bytes": m,
                "measured_bytes": framing * (ps.ps_sent[0] + ps.ps_recv[0]),
            }
        )
        if n > 1:
            rows.append(
                {
                    "arch": "ring",
                    "workers": n,
                    "n_ps": 0,
                    "shards": None,
                    "model_bytes": m,
                    "measured_bytes": framing * step_bytes("ring", m, n).worker_sent,
                }
            )
    return pd.DataFrame(rows)


def test_check_terms_passes_the_reference_and_says_what_is_wrong():
    ref = cm.reference_terms()
    checked = cm.check_terms(ref, measured_rows())
    assert len(checked) == 5 and (checked["deviation"].abs() < 0.05).all()

    def both_ways_ring(arch, M, N, n_ps=1, shards=None):  # counts the ring's two directions
        msgs, nbytes = ref(arch, M, N, n_ps, shards)
        return msgs, 2 * nbytes if arch == "ring" else nbytes

    def one_way_ps(arch, M, N, n_ps=1, shards=None):  # the ps's sends only
        msgs, nbytes = ref(arch, M, N, n_ps, shards)
        return msgs, nbytes / 2 if arch == "ps" else nbytes

    def even_only(arch, M, N, n_ps=1, shards=None):  # ignores an uneven split
        return ref(arch, M, N, n_ps, None)

    def no_tuple(arch, M, N, n_ps=1, shards=None):
        return None

    def lonely_ring(arch, M, N, n_ps=1, shards=None):
        return (2 * N, 2 * M) if arch == "ring" else ref(arch, M, N, n_ps, shards)

    for fn, match in (
        (both_ways_ring, "ring N=2: your bytes .*\\+94%"),
        (one_way_ps, "ps N=1: your bytes .*-51%"),
        (even_only, "900 KB, 100 KB"),
        (no_tuple, "return \\(messages, bytes\\)"),
        (lonely_ring, "nobody to talk to"),
    ):
        with pytest.raises(ValueError, match=match):
            cm.check_terms(fn, measured_rows())


def test_the_cost_model_uses_the_terms_it_is_given():
    ref = cm.reference_terms()

    def doubled(arch, M, N, n_ps=1, shards=None):
        msgs, nbytes = ref(arch, M, N, n_ps, shards)
        return msgs, 2 * nbytes

    link = Link(1e-4, 1e8)
    assert CostModel(1e-3, link, terms=doubled).t_comm("ring", 1e8, 4) == pytest.approx(6e-4 + 3.0)
    assert cm.crossover_model_bytes(3, link, terms=doubled) == pytest.approx(cm.crossover_model_bytes(3, link) / 2)
    assert cm.critical_path("ring", 1e6, 3, n_ps=0) == (4, pytest.approx(4e6 / 3))  # a ring run has no ps
    with pytest.raises(ValueError, match="one per ps task"):
        cm.critical_path("ps", 10, 2, n_ps=3, shards=(5, 5))


def test_step_time_and_throughput_by_hand():
    model = CostModel(per_sample_s=1e-3, link=Link(1e-4, 1e8))
    t = model.t_step("ring", 1e8, workers=4, batch=32)
    assert t == pytest.approx(0.032 + 6 * 1e-4 + 1.5)
    assert model.images_per_s("ring", 1e8, 4, 32) == pytest.approx(128 / t)
    assert model.t_step("ps", 1e8, workers=4, batch=32) == pytest.approx(0.032 + 2e-4 + 8.0)
    stretched = CostModel(1e-3, Link(1e-4, 1e8), cores=2)
    assert stretched.t_compute(32, workers=4) == pytest.approx(0.064)
    assert stretched.t_compute(32, workers=2) == pytest.approx(0.032)


def test_predict_speedup_baselines():
    model = CostModel(1e-3, Link(1e-4, 1e8))
    own = model.predict("ps", 1e7, [1, 2, 4], batch=32)
    assert list(own.columns) == ["arch", "workers", "t_compute", "t_comm", "step_s", "images_per_s", "speedup"]
    assert own["speedup"].iloc[0] == pytest.approx(1.0)
    single = model.predict("ps", 1e7, [1], batch=32, baseline="single")
    assert single["speedup"].iloc[0] == pytest.approx(0.032 / (0.032 + 2e-4 + 0.2))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: step_bytes("allreduce", 1, 2), "ring"),
        (lambda: step_bytes("ps", 1, 0), "workers"),
        (lambda: step_bytes("ps", -5, 2), "model_bytes"),
        (lambda: step_bytes("ps", 100, 2, 2, shards=(10, 10)), "whole model"),
        (lambda: Link(-1e-6, 1e9), "alpha"),
        (lambda: CostModel(0, Link(0, 1)), "per_sample_s"),
        (lambda: CostModel(1e-3, Link(0, 1)).predict("ps", 1, [1], 32, baseline="x"), "baseline"),
        (lambda: cm.fit_link([5, 5, 5], [1, 2, 3]), "two different"),
        (lambda: cm.fit_link_to_runs(pd.DataFrame({"arch": ["ps"]})), "lack column"),
    ],
)
def test_bad_input_says_what_to_do(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- calibration ----------------------------------------------------------------------------


def test_fit_link_recovers_alpha_and_bandwidth_from_noisy_timings():
    rng = np.random.default_rng(0)
    alpha, bw = 50e-6, 1.2e9
    sizes = np.repeat(2.0 ** np.arange(10, 27), 5)
    times = (alpha + sizes / bw) * rng.lognormal(0, 0.03, sizes.size)
    link = cm.fit_link(sizes, times)
    assert link.alpha_s == pytest.approx(alpha, rel=0.15)
    assert link.bandwidth == pytest.approx(bw, rel=0.1)
    assert link.rel_error < 0.05


def test_fit_link_keeps_alpha_non_negative():
    sizes = np.array([1e3, 1e6, 1e7])
    link = cm.fit_link(sizes, sizes / 1e9 * np.array([0.5, 1.0, 1.0]))  # the small one is "too fast"
    assert link.alpha_s == 0 and link.bandwidth > 0


def test_fit_link_with_alpha_given_fits_the_bandwidth_of_a_shaped_link():
    """A token bucket passes small messages at once: through all sizes one line misses B (the
    small ones pull it up); with alpha from the small ones, the large ones give the rate."""
    alpha, bw = 1e-4, 12.2e6
    small = np.array([1024.0, 4096.0])
    large = 2.0 ** np.arange(20, 26)
    times = np.concatenate([np.full(2, alpha), alpha + large / bw])
    together = cm.fit_link(np.concatenate([small, large]), times)
    assert together.bandwidth > 1.3 * bw  # the bias measure_link avoids
    apart = cm.fit_link(large, alpha + large / bw, alpha_s=float(np.median(times[:2])))
    assert apart.alpha_s == alpha and apart.bandwidth == pytest.approx(bw, rel=1e-6) and apart.rel_error < 1e-6
    assert cm.fit_link([2.0**20], [alpha + 2**20 / bw], alpha_s=alpha).bandwidth == pytest.approx(bw)
    with pytest.raises(ValueError, match="alpha_s"):
        cm.fit_link(large, alpha + large / bw, alpha_s=-1.0)


def synthetic_runs(link, per_sample, noise, rng, cores=None):
    rows = []
    for name, m, c in [("lenet", 246_824, per_sample[0]), ("mlp", 23e6, per_sample[1])]:
        for arch in cm.ARCHS:
            for n in (1, 2, 3):
                t = CostModel(c, link, cores=cores).t_step(arch, m, n, 64)
                rows.append(
                    {
                        "model": name,
                        "arch": arch,
                        "workers": n,
                        "batch": 64,
                        "model_bytes": m,
                        "per_sample_s": c,
                        "step_s": t * rng.lognormal(0, noise),
                    }
                )
    return pd.DataFrame(rows)


def test_fit_link_to_runs_recovers_the_link_and_predicts_the_runs():
    rng = np.random.default_rng(1)
    truth = Link(2e-3, 4e8)
    runs = synthetic_runs(truth, (2e-4, 5e-4), 0.03, rng, cores=2)
    link, overhead = cm.fit_link_to_runs(runs, cores=2)
    assert overhead == 0
    assert link.bandwidth == pytest.approx(truth.bandwidth, rel=0.15)
    assert link.alpha_s == pytest.approx(truth.alpha_s, rel=0.5)
    pred = cm.predict_runs(runs, link, cores=2)
    assert pred["rel_error"].abs().max() < 0.15
    assert link.rel_error == pytest.approx(pred["rel_error"].abs().median())


def test_fit_link_to_runs_can_fit_a_per_step_overhead():
    runs = synthetic_runs(Link(1e-3, 5e8), (2e-4, 5e-4), 0.0, np.random.default_rng(2))
    runs["step_s"] += 0.02  # a fixed framework cost per step, in every run
    link, overhead = cm.fit_link_to_runs(runs, fit_overhead=True)
    assert overhead == pytest.approx(0.02, rel=0.01)
    assert link.bandwidth == pytest.approx(5e8, rel=0.01) and link.rel_error < 1e-6


def test_fit_link_to_runs_uses_each_runs_real_ps_shards():
    """Two ps tasks holding 90% / 10% of the weights (whole variables placed round-robin): the
    busiest ps moves 2*N*0.9M, not 2*N*M/2. With the shards given, the link is recovered exactly."""
    truth, m = Link(1e-3, 5e8), 23e6
    shards = (0.9 * m, 0.1 * m)
    rows = [
        {
            "arch": "ps",
            "workers": n,
            "batch": 64,
            "model_bytes": m,
            "per_sample_s": 5e-4,
            "n_ps": 2,
            "shards": shards,
            "step_s": CostModel(5e-4, truth).t_step("ps", m, n, 64, 2, shards),
        }
        for n in (1, 2, 3)
    ]
    runs = pd.DataFrame(rows)
    link, _ = cm.fit_link_to_runs(runs)
    assert link.bandwidth == pytest.approx(truth.bandwidth, rel=1e-6) and link.alpha_s == pytest.approx(1e-3, rel=1e-6)
    even, _ = cm.fit_link_to_runs(runs.drop(columns="shards"))  # assuming even shards misreads the link
    assert even.bandwidth < 0.8 * truth.bandwidth


def test_fit_link_to_runs_with_a_given_alpha_needs_one_run_with_communication():
    truth = Link(2e-3, 4e8)
    runs = synthetic_runs(truth, (2e-4, 5e-4), 0.0, np.random.default_rng(3))
    one = runs[(runs["model"] == "mlp") & (runs["arch"] == "ring") & (runs["workers"] <= 2)]
    with pytest.raises(ValueError, match="no bandwidth"):
        cm.fit_link_to_runs(one)  # one row cannot separate alpha from B: NNLS puts it all on alpha
    link, _ = cm.fit_link_to_runs(one, alpha_s=2e-3)
    assert link.alpha_s == 2e-3 and link.bandwidth == pytest.approx(4e8, rel=1e-6)


def test_from_single_worker_sets_compute_per_sample():
    model = CostModel.from_single_worker(0.064, 32, Link(0, 1e9))
    assert model.per_sample_s == pytest.approx(0.002)


def test_loopback_benchmark_is_plausible():
    rows = cm.loopback_transfers(sizes=(1024, 65536, 1 << 20, 4 << 20), repeats=3)
    assert rows["bytes"].value_counts().to_dict() == {1024: 3, 65536: 3, 1 << 20: 3, 4 << 20: 3}
    assert (rows["seconds"] > 0).all()
    median = rows.groupby("bytes")["seconds"].median()
    assert median[4 << 20] > median[1024], median  # the same round trip, and 4096 times the bytes to copy
    link = cm.measure_loopback_link(sizes=(1024, 65536, 1 << 20, 4 << 20), repeats=3)
    assert 0 <= link.alpha_s < 0.05  # under 50 ms per message, even on a busy machine
    assert 1e7 < link.bandwidth < 1e12  # between 10 MB/s and 1 TB/s


# --- gamma: the hosts' time per byte (HostCost) --------------------------------------------


def test_host_cost_adds_gamma_per_critical_path_byte_to_the_link():
    link, host = Link(1e-4, 1e8), cm.HostCost(ps=1e-9, ring=4e-9)
    plain, with_host = CostModel(1e-3, link), CostModel(1e-3, link, host=host)
    for arch, n in (("ps", 3), ("ring", 3)):
        _, nbytes = cm.critical_path(arch, 1e8, n)
        extra = with_host.t_step(arch, 1e8, n, 32) - plain.t_step(arch, 1e8, n, 32)
        assert extra == pytest.approx(getattr(host, arch) * nbytes)
    assert with_host.t_comm("ring", 1e8, 4) == pytest.approx(6e-4 + 1.5e8 * (1 / 1e8 + 4e-9))
    assert with_host.t_step("ring", 1e8, 1, 32) == plain.t_step("ring", 1e8, 1, 32)  # no bytes, no host cost
    assert CostModel(1e-3, link, host=cm.HostCost()).t_step("ps", 1e8, 2, 32) == plain.t_step("ps", 1e8, 2, 32)


def gamma_runs(host, per_sample=2.8e-4, cores=2, noise=0.0, rng=None, m=23.3e6):
    """Lab 5's MLP as ring N=1, ps N=2 and ring N=2 on 127.0.0.1, with a host cost per byte."""
    rows = []
    for arch, n in (("ring", 1), ("ps", 2), ("ring", 2)):
        t = CostModel(per_sample, LOOPBACK, cores=cores, host=host).t_step(arch, m, n, 64)
        rows.append(
            {
                "model": "mlp",
                "arch": arch,
                "workers": n,
                "batch": 64,
                "model_bytes": m,
                "per_sample_s": per_sample,
                "step_s": t * (rng.lognormal(0, noise) if rng else 1.0),
            }
        )
    return pd.DataFrame(rows)


LOOPBACK = Link(30e-6, 5e9)


def test_fit_host_cost_recovers_a_known_gamma_per_architecture():
    truth = cm.HostCost(ps=0.6e-9, ring=3.5e-9)
    host = cm.fit_host_cost(gamma_runs(truth), LOOPBACK, cores=2)
    assert host.ps == pytest.approx(truth.ps, rel=1e-6) and host.ring == pytest.approx(truth.ring, rel=1e-6)
    assert host.rel_error == pytest.approx(0, abs=1e-9)
    # with noise, several rounds of runs still recover it closely
    rng = np.random.default_rng(4)
    noisy = pd.concat([gamma_runs(truth, noise=0.03, rng=rng) for _ in range(5)], ignore_index=True)
    host = cm.fit_host_cost(noisy, LOOPBACK, cores=2)
    assert host.ps == pytest.approx(truth.ps, rel=0.3) and host.ring == pytest.approx(truth.ring, rel=0.15)
    # the link's wire time is taken out first: a slower link leaves less of the step to gamma
    slow = Link(30e-6, 1e9)
    assert cm.fit_host_cost(gamma_runs(truth), slow, cores=2).ring < truth.ring - 0.5 / slow.bandwidth


def test_gamma_from_loopback_runs_predicts_a_slower_links_runs():
    """The issue's case: gamma calibrated where the wire is nearly free, carried to a 1 Gbit/s link
    between the same hosts. Without it the ring's prediction falls short by the host time."""
    truth = cm.HostCost(ps=0.6e-9, ring=3.5e-9)
    host = cm.fit_host_cost(gamma_runs(truth), LOOPBACK, cores=2)
    wire = Link(1e-4, 124.7e6)
    emulated = pd.DataFrame(
        [
            {
                **r,
                "step_s": CostModel(r["per_sample_s"], wire, cores=2, host=truth).t_step(
                    r["arch"], r["model_bytes"], r["workers"], 64
                ),
            }
            for r in gamma_runs(truth).to_dict("records")
        ]
    )
    with_gamma = cm.predict_runs(emulated, wire, cores=2, host=host)
    link_only = cm.predict_runs(emulated, wire, cores=2)
    assert with_gamma["rel_error"].abs().max() < 1e-9
    ring2 = (link_only["arch"] == "ring") & (link_only["workers"] == 2)
    assert link_only.loc[ring2, "rel_error"].item() < -0.2  # the host's 3.5 ns/B on M: ~80 ms of ~290


def test_fit_host_cost_clips_at_zero_and_marks_an_architecture_without_bytes():
    fast = gamma_runs(cm.HostCost())
    fast["step_s"] *= 0.9  # faster than compute + wire: no negative host time
    assert cm.fit_host_cost(fast, LOOPBACK, cores=2).ring == 0
    ring_only = gamma_runs(cm.HostCost(ring=2e-9))
    ring_only = ring_only[ring_only["arch"] == "ring"]
    host = cm.fit_host_cost(ring_only, LOOPBACK, cores=2)
    assert np.isnan(host.ps) and host.ring == pytest.approx(2e-9)
    with pytest.raises(ValueError, match="no host cost.*'ps'"):
        CostModel(1e-3, LOOPBACK, host=host).t_step("ps", 1e6, 2, 32)


def test_lab5_carries_gamma_from_its_loopback_calibration_to_other_runs(monkeypatch):
    """ring_vs_ps: Calibration.host_cost fits gamma to the calibrated (loopback) runs with the loopback
    micro-benchmark's link; Scaling.predict adds it to another link, fitting nothing to those runs."""
    from labkit.labs.lab5 import experiment as ring_vs_ps

    truth, wire = cm.HostCost(ps=0.6e-9, ring=3.5e-9), Link(1e-4, 124.7e6)
    loop = ring_vs_ps.Calibration(gamma_runs(truth), {}, None, LOOPBACK, cores=2)
    host = loop.host_cost()
    assert (host.ps, host.ring) == (pytest.approx(truth.ps), pytest.approx(truth.ring))
    measured = gamma_runs(truth)
    measured["step_s"] = [
        CostModel(r.per_sample_s, wire, cores=2, host=truth).t_step(r.arch, r.model_bytes, r.workers, 64)
        for r in measured.itertuples()
    ]
    emulated = ring_vs_ps.Scaling(settings={"cores": 2})
    monkeypatch.setattr(
        ring_vs_ps.Scaling,
        "cost_runs",
        lambda self: measured.assign(n_ps=1, shards=None, images_per_s=measured["workers"] * 64 / measured["step_s"]),
    )
    with_gamma, link_only = emulated.predict(wire, host=host), emulated.predict(wire)
    assert list(with_gamma.columns) == [
        "model",
        "arch",
        "workers",
        "n_ps",
        "step_s",
        "predicted_step_s",
        "images_per_s",
        "predicted_images_per_s",
        "rel_error",
    ]
    assert with_gamma["rel_error"].abs().max() < 1e-9 and link_only["rel_error"].min() < -0.2


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: cm.HostCost(ps=-1e-9), "HostCost.ps must be >= 0"),
        (lambda: cm.HostCost(ring=float("inf")), "HostCost.ring must be >= 0"),
        (lambda: cm.HostCost(ring="fast"), "HostCost.ring"),
        (lambda: cm.HostCost().seconds("allreduce", 1), "unknown architecture"),
        (lambda: cm.fit_host_cost(gamma_runs(cm.HostCost()).iloc[:1], LOOPBACK), "N >= 2"),
        (lambda: cm.fit_host_cost(gamma_runs(cm.HostCost()).iloc[:0], LOOPBACK), "needs runs"),
        (lambda: cm.fit_host_cost(pd.DataFrame({"arch": ["ps"]}), LOOPBACK), "lack column"),
    ],
)
def test_host_cost_bad_input_says_what_to_do(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- crossover ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_crossover_bytes_by_hand(n):
    link = Link(1e-4, cm.gbit(1))
    ab = link.alpha_s * link.bandwidth
    # one ps: 2a + 2NM/B = 2(N-1)a + 2(N-1)/N M/B  =>  M* = (N-2) a B N / (N^2 - N + 1)
    assert cm.crossover_model_bytes(n, link) == pytest.approx((n - 2) * ab * n / (n * n - n + 1))
    # N shards: 2a + 2M/B = 2(N-1)a + 2(N-1)/N M/B  =>  M* = N (N-2) a B
    assert cm.crossover_model_bytes(n, link, n_ps=n) == pytest.approx(n * (n - 2) * ab)


def test_ring_wins_for_large_models_many_workers_and_slow_links():
    slow, fast = Link(1e-4, cm.gbit(1)), Link(1e-4, cm.gbit(10))
    big = 500 * cm.MIB
    grid = cm.crossover_map([1e3, big], [2, 6], [slow, fast], per_sample_s=1 / 35.4)
    at = grid.set_index(["bandwidth", "workers", "model_bytes"])["ring_speedup"]
    assert at[(slow.bandwidth, 6, big)] > 4  # ~ 2NM vs 2M bytes
    assert at[(slow.bandwidth, 6, big)] > at[(slow.bandwidth, 2, big)]  # grows with N
    assert at[(slow.bandwidth, 6, big)] > at[(fast.bandwidth, 6, big)]  # and with slower links (compute shares)
    tiny = cm.crossover_map([1e3], [6], [slow])
    assert tiny["winner"].item() == "ps"  # 1 KB: latency-bound, PS pays 2 alphas, the ring 10
    assert cm.crossover_workers(big, slow, max_workers=64) == 64  # the ring stays ahead
    assert cm.crossover_workers(1e3, slow) == 2  # same 2 latencies at N=2, more for the ring after
    assert cm.crossover_workers(5e4, slow, n_ps=4) == 3  # 4 shards: M* = 0, 37.5 KB, then 100 KB


def test_ps_with_one_shard_per_worker_moves_ring_order_bytes():
    m = 100 * cm.MIB
    for n in range(2, 9):
        ps = step_bytes("ps", m, n, n_ps=n)
        ring = step_bytes("ring", m, n)
        per_node = (ps.ps_sent[0] + ps.ps_recv[0]) / (ring.worker_sent + ring.worker_recv)  # 2M vs 4(N-1)/N M
        assert per_node == pytest.approx(n / (2 * (n - 1)))
        critical = cm.comm_terms("ps", m, n, n)[1] / cm.comm_terms("ring", m, n)[1]  # 2M vs 2(N-1)/N M
        assert critical == pytest.approx(n / (n - 1))
        assert 0.5 <= per_node <= 1 < critical <= 2
    assert cm.crossover_model_bytes(2, Link(1e-4, 1e8), n_ps=2) == 0  # same latency, fewer bytes


# --- report 003 -----------------------------------------------------------------------------


def test_report_003_models_match_its_table_3_1():
    sizes = {k: v.size_mib for k, v in cm.REPORT_003_MODELS.items()}
    assert sizes == {"AlexNet": 233, "VGG16": 528, "VGG19": 548, "ResNet50": 98, "ResNet152": 230}
    assert cm.REPORT_003_MODELS["VGG19"].k80_images_per_s < cm.REPORT_003_MODELS["VGG16"].k80_images_per_s


def test_report_003_curves_show_its_findings():
    curves = cm.report_003_curves()
    assert len(curves) == 2 * 5 * 2 * 6
    r50 = curves[(curves.model == "ResNet50") & (curves.network == "10 Gb/s")].set_index(["arch", "workers"])
    ps, ring = r50.loc["ps", "speedup"], r50.loc["ring", "speedup"]
    assert ring[6] > ps[6]  # ring scales better
    gains = np.diff(ps.values)
    assert (gains[1:] < gains[:-1]).all()  # PS gains shrink with each worker: it levels off
    assert ring[6] / ring[2] > 2.5  # ring close to proportional from N=2 on (6/2 = 3)


def test_report_003_curves_barely_depend_on_alpha():
    base = cm.report_003_curves()
    ten_times = {k: Link(10 * v.alpha_s, v.bandwidth, k) for k, v in cm.NETWORKS.items()}
    slow = cm.report_003_curves(networks=ten_times)
    assert (slow["images_per_s"] / base["images_per_s"] - 1).abs().max() < 0.03


# --- plots (labkit.measure.plots, Lab 5 section) ----------------------------------------------------


def test_plots_draw_predictions_measurements_and_the_crossover():
    from labkit.measure import plots

    curves = cm.report_003_curves(networks={"1 Gb/s": cm.NETWORKS["1 Gb/s"]})
    measured = curves[curves.workers.isin([1, 3])].assign(images_per_s=lambda d: d.images_per_s * 1.1)
    fig = plots.scaling_curves(curves, measured)
    axes = fig.get_axes()
    assert len(axes) == 4 and axes[0].get_yscale() == "log"  # AlexNet vs VGG: > 30x apart
    assert any("(measured)" in t.get_text() for t in fig.legends[0].get_texts())
    with pytest.raises(ValueError, match="no column 'model'"):
        plots.scaling_curves(curves.drop(columns="model"))

    grid = cm.crossover_map(np.logspace(3, 9, 20), range(2, 9), cm.NETWORKS.values())
    fig = plots.crossover_map(grid, marks={k: v.model_bytes for k, v in cm.REPORT_003_MODELS.items()})
    first = fig.get_axes()[0]
    assert [type(c).__name__ for c in first.collections] == ["QuadMesh", "QuadContourSet"]  # map + crossover line
    labels = [t.get_text() for t in first.texts]
    assert "ResNet152, AlexNet" in labels  # 230 and 233 MiB share one mark

    frame = pd.DataFrame({"run": ["ps N=2", "ring N=3"], "measured": [1.0e6, 1.4e6], "analytic": [9.9e5, 9.9e5]})
    flagged = [t.get_text() for t in plots.bytes_vs_analytic(frame, label="run").get_axes()[0].texts]
    assert flagged == ["+1%", "+41% !"]

    tasks = pd.DataFrame(
        {
            "run": ["ps N=2"] * 3,
            "task": ["ps:0", "worker:0", "total"],
            "sent_over_model": [2.0, 1.0, 4.0],
            "recv_over_model": [2.0, 1.0, None],
        }
    )
    ax = plots.task_bytes(tasks).get_axes()[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ps N=2 ps:0", "ps N=2 worker:0"]  # no total
    assert [b.get_height() for b in ax.patches] == [2.0, 1.0, 2.0, 1.0]


def test_plots_draw_report_003_measured_and_say_when_skipped():
    from labkit.measure import plots

    measured = pd.DataFrame(
        {
            "arch": ["ps"] * 3 + ["ring"] * 3,
            "workers": [1, 2, 3] * 2,
            "images_per_s": [50, 55, 56, 500, 150, 170],
            "speedup": [1, 1.1, 1.12, 1, 0.3, 0.34],
        }
    )
    cm_ = CostModel(3e-3, Link(5e-5, 1.3e7), cores=2)
    predicted = pd.concat(
        [
            cm_.predict(a, 6.9e6, range(1, 7), 32).assign(where=w)
            for a in ("ps", "ring")
            for w in ("these nodes", "a core per node")
        ]
    )
    nodes = pd.DataFrame(
        {
            "arch": ["ps", "ps", "ring"],
            "workers": [2, 2, 2],
            "node": ["node0", "node1", "node0"],
            "tasks": ["ps:0, chief:0", "worker:0", "worker:0"],
            "bytes_per_step": [2.8e7, 1.4e7, 1.4e7],
        }
    )
    fig = plots.emulated_scaling(measured, predicted, nodes)
    images, speedup, traffic = fig.get_axes()[:3]
    assert len(images.lines) == 6 and len(traffic.lines) == 3  # per arch: points and two model curves; node lines
    assert "Figs 4.3, 4.4" in speedup.get_title()
    fig, ax = plots.subplots(1, 1)
    plots.skipped(ax, "emulated links: skipped (see above)")
    assert not ax.axison and ax.texts[0].get_text() == "emulated links: skipped (see above)"
