"""Lab 2: synchronous and asynchronous SGD on a parameter server: the names its notebook imports (``surface.py`` says how; docs/student-api.md lists them)."""

from labkit.labs.surface import Surface, exports

API = {
    "cluster": Surface("labkit.wire.spec", "MODES build"),
    "launch": Surface("labkit.distributed.launch", "placed use"),
    "lr": Surface("labkit.learning.lr", "target_sweep train_to_target"),
    "plots": Surface(
        "labkit.measure.plots", "bytes_vs_analytic iterations_bars resource_timeline sync_async_curves worker_shares"
    ),
    "scalars": Surface("labkit.measure.scalars", "tensorboard"),
    "units": Surface("labkit.measure.units", "table"),
    "sync_async": Surface(
        "labkit.labs.lab2.experiment",
        "MODEL_BYTES check_sync_round emulated_shares kill_windows killed_async late_start modern_async sweep write_graphs",
    ),
    "netem": Surface("labkit.infra.netem", "parse_link"),
    "traces": Surface("labkit.experiments.traces", "frame"),
    "selfcheck": Surface(
        "labkit.labs.lab2.selfcheck", "audit_000 audit_sync global_step others_per_step sync_round worker0_share"
    ),
}

__getattr__, __dir__, __all__ = exports(__name__, API)
