"""Lab 3: sparse logistic regression at click-through scale: the names its notebook imports (``surface.py`` says how; docs/student-api.md lists them)."""

from labkit.labs.surface import Surface, exports

API = {
    "clickdata": Surface("labkit.datasets.clickdata", "CRITEO_FEATURES ClickSpec describe"),
    "launch": Surface("labkit.distributed.launch", "use"),
    "plots": Surface(
        "labkit.measure.plots",
        "bytes_vs_analytic emulated_dense error_curves fmt_bytes minibatch_sweep op_profile resource_timeline",
    ),
    "scalars": Surface("labkit.measure.scalars", "tensorboard"),
    "units": Surface("labkit.measure.units", "fmt_bytes table"),
    "sparse": Surface("labkit.learning.sparse", "check_gradient"),
    "sparse_lr": Surface("labkit.labs.lab3.experiment", "emulated_dense profile_ops speedups trace_summary train"),
    "costmodel": Surface("labkit.learning.costmodel", "dense_ps_step_bytes"),
    "netem": Surface("labkit.infra.netem", "parse_link"),
    "traces": Surface("labkit.experiments.traces", "argument frame"),
    "load_a9a": "labkit.datasets.loaders:load_a9a",
    "selfcheck": Surface(
        "labkit.labs.lab3.selfcheck",
        "audit_001 expected_distinct_features ps_link_shares sparse_lr_gradient sync_round",
    ),
}

__getattr__, __dir__, __all__ = exports(__name__, API)
