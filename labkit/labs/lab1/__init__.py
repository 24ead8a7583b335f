"""Lab 1: single-node logistic regression: the names its notebook imports (``surface.py`` says how; docs/student-api.md lists them)."""

from labkit.labs.surface import Surface, exports

API = {
    "lr": Surface("labkit.learning.lr", "compare epoch_readings evaluate_weights histories train_core train_keras"),
    "plots": Surface("labkit.measure.plots", "best_readings learning_curves"),
    "scalars": Surface("labkit.measure.scalars", "tensorboard"),
    "selfcheck": Surface(
        "labkit.labs.lab1.selfcheck", "audit_accuracy chance_best_reading initial_test_loss reading_size sgd_step"
    ),
}

__getattr__, __dir__, __all__ = exports(__name__, API)
