"""Lab 4: LeNet, batch size x workers: the names its notebook imports (``surface.py`` says how; docs/student-api.md lists them)."""

from labkit.labs.surface import Surface, exports

API = {
    "cluster": Surface("labkit.wire.spec", "build"),
    "launch": Surface("labkit.distributed.launch", "placed use"),
    "models": Surface("labkit.learning.models", "build model_bytes"),
    "plots": Surface("labkit.measure.plots", "bytes_vs_analytic learning_curves sweep_curves sweep_throughput"),
    "scalars": Surface("labkit.measure.scalars", "tensorboard"),
    "units": Surface("labkit.measure.units", "fmt_bytes table"),
    "lenet_sweep": Surface(
        "labkit.labs.lab4.experiment",
        "describe_peer_failure fault_curves fault_tolerance report_000 resume_evidence send_rate_audit sweep",
    ),
    "idle_baseline": "labkit.measure.monitor:idle_baseline",
    "collectives": Surface("labkit.labs.lab4.collective", "self_check shard_gradients table per_worker plot"),
    "selfcheck": Surface("labkit.labs.lab4.selfcheck", "identical_pairs ring_allreduce"),
}

__getattr__, __dir__, __all__ = exports(__name__, API)
