"""Lab 5: ring all-reduce against a parameter server: the names its notebook imports (``surface.py`` says how; docs/student-api.md lists them)."""

from labkit.labs.surface import Surface, exports

API = {
    "cluster": Surface("labkit.wire.spec", "build"),
    "costmodel": Surface("labkit.learning.costmodel", "NETWORKS"),
    "launch": Surface("labkit.distributed.launch", "placed use"),
    "plots": Surface(
        "labkit.measure.plots",
        "crossover_map emulated_scaling fault_trace fmt_bytes resource_timeline scaling_curves task_bytes",
    ),
    "scalars": Surface("labkit.measure.scalars", "tensorboard"),
    "units": Surface("labkit.measure.units", "fmt_bytes table"),
    "ring_vs_ps": Surface(
        "labkit.labs.lab5.experiment",
        "emulated lab_workers ps_failure recorded_emulated recorded_failure report_003 scaling",
    ),
    "netem": Surface("labkit.infra.netem", "parse_link"),
    "selfcheck": Surface(
        "labkit.labs.lab5.selfcheck",
        "audit_003 comm_terms dense_model_bytes link_ceiling ps_bytes_per_step ring_bytes_per_worker slice_shares",
    ),
}

__getattr__, __dir__, __all__ = exports(__name__, API)
