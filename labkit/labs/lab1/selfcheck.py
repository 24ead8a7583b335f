"""Lab 1's self-checks: properties each exercise's answer has, tried on the notebook's own cases.

Each function tests one exercise (``sgd_step``, ``initial_test_loss``, ``chance_best_reading``,
``reading_size``, the audit's ``q``) against properties only a right answer has: gradient descent
by finite differences; a loss that grows with the classes and matches simulated starts; the
binomial tail at n = 1, growth with n and q, the limits at levels 0 and 1, and ``lr.batch_readings``'
simulation of the run's own weights; the smallest reading size that prints both of report 000's
figures; the run's own accuracy. None uses the grader's cases, and a failure names the function
and the property, never a value (``labkit.notebook.verdicts``). Each returns the ``Verdict`` it
showed in the cell.
"""

from __future__ import annotations

import math

import numpy as np

from labkit.learning import lr
from labkit.notebook.verdicts import Verdict, verdict

CLASS_COUNTS = (5, 10, 26, 100)  # classes for initial_test_loss: MNIST's 10, and others the notebook could have
LOSS_TOLERANCE = 0.05  # relative: the notebook's own promise for the prediction
LEVELS = (0.935, 0.965)  # the least readings report 000's 94% and 97% print from (the notebook's shows_94, shows_97)
TRIALS = 4000  # simulated curves per case: a share's standard error is at most 0.8 points


def sgd_step(step) -> Verdict:
    """``step`` returns the batch's mean cross-entropy and moves W and b by -learning_rate x its
    gradient, the gradient taken by finite differences (``lr.check_step``; it also asks for the
    tape's ops, and says so when they are missing)."""
    v = Verdict("sgd_step")
    try:
        difference = lr.check_step(step)
    except ValueError as e:  # check_step's own complaint (no loss returned, no tape): it names no value
        v.failed.append(str(e))
        return verdict(v)
    v.expect(
        difference < 1e-4,
        "one step of plain gradient descent: the loss averaged over the batch (a mean, not a sum), "
        "and W and b moved by -learning_rate x its gradient",
    )
    return verdict(v)


def initial_test_loss(fn, measured: float | None = None, x=None, seed: int = 0) -> Verdict:
    """``fn(num_classes)`` is a finite positive loss that grows with the classes, within 5% of the
    mean cross-entropy of weights drawn as ``lr.train_core`` draws them (W ~ N(0, 0.01^2), b = 0) on
    images ``x`` (default: random pixels) at each of ``CLASS_COUNTS``; and, when given, of
    ``measured``, the loss the notebook's own run measured at its start with 10 classes."""
    v = Verdict("initial_test_loss")
    got = v.values(lambda k: fn(k), CLASS_COUNTS)
    if got is None:
        return verdict(v)
    if not v.expect(all(math.isfinite(g) and g > 0 for g in got), "a finite, positive loss for every class count"):
        return verdict(v)
    v.expect(all(a < b for a, b in zip(got, got[1:])), "a loss that grows with the number of classes")
    rng = np.random.default_rng(seed)
    images = rng.random((1000, lr.NUM_FEATURES)) if x is None else np.asarray(x, np.float64).reshape(len(x), -1)
    simulated = [_start_loss(images[:1000], k, rng) for k in CLASS_COUNTS]
    v.expect(
        all(abs(g - s) <= LOSS_TOLERANCE * s for g, s in zip(got, simulated)),
        "the mean cross-entropy of weights drawn near zero as lr.train_core draws them, for each class count "
        "tried (within 5%)",
    )
    if measured is not None:
        v.expect(
            abs(got[CLASS_COUNTS.index(lr.NUM_CLASSES)] - measured) <= LOSS_TOLERANCE * abs(measured),
            "at 10 classes, the test loss your Core run measured before its first step (within 5%)",
        )
    return verdict(v)


def _start_loss(images: np.ndarray, classes: int, rng: np.random.Generator) -> float:
    """The mean cross-entropy of one seeded start with ``classes`` classes, on random labels."""
    W = rng.normal(0.0, lr.INIT_STDDEV, (images.shape[1], classes))
    z = images @ W
    z -= z.max(axis=1, keepdims=True)
    y = rng.integers(0, classes, len(images))
    return float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]))


def chance_best_reading(fn, W, b, x, y, seed: int = 0) -> Verdict:
    """``fn(q, n, batch_size, level)``, on q the accuracy of the weights (W, b) on (x, y) and a few
    others, the notebook's levels and batches of 50 and 20 images: a probability; at n = 1 the
    binomial tail; growing with n and with q; 1 at level 0 and every image right at level 1; and
    close to ``lr.batch_readings``' simulation of those weights read on random batches."""
    v = Verdict("chance_best_reading")
    x, y = np.asarray(x), np.asarray(y)
    right = float(lr.evaluate(W, b, x, y)[0])
    qs = (right, 0.6, 0.9)
    cases = [(q, m, level) for q in qs for m in (50, 20) for level in (*LEVELS, 0.87) if _fractional(level * m)]

    def call(args):
        return float(fn(*args))

    tails = v.values(call, [(q, 1, m, level) for q, m, level in cases])
    if tails is None:
        return verdict(v)
    grid_q = np.linspace(0.5, 0.99, 12)
    by_n = v.values(call, [(q, n, m, level) for q, m, level in cases for n in (1, 2, 5, 20)])
    by_q = v.values(call, [(float(q), 3, 50, LEVELS[1]) for q in grid_q])
    limits = v.values(call, [(q, n, m, level) for q in qs for m in (50, 20) for n in (1, 5) for level in (0.0, 1.0)])
    if None in (by_n, by_q, limits):
        return verdict(v)
    if not v.expect(
        all(-1e-9 <= c <= 1 + 1e-9 for c in tails + by_n + by_q + limits), "a probability: a number from 0 to 1"
    ):
        return verdict(v)
    v.expect(
        all(_near(t, _tail(q, m, level)) for t, (q, m, level) in zip(tails, cases)),
        "at n = 1, one reading's chance: that at least level x batch_size of batch_size images are right, "
        "each right with chance q independently (the binomial tail)",
    )
    rows = [by_n[i : i + 4] for i in range(0, len(by_n), 4)]
    v.expect(
        all(
            all(a <= b + 1e-12 for a, b in zip(row, row[1:])) and (not 1e-6 < row[0] < 1 - 1e-6 or row[-1] > row[0])
            for row in rows
        ),
        "a chance that grows with n, the number of readings (the best of more readings is at least as good)",
    )
    v.expect(all(a <= b + 1e-12 for a, b in zip(by_q, by_q[1:])), "a chance that grows with q")
    at = iter(limits)
    ok0, ok1 = True, True
    for q in qs:
        for m in (50, 20):
            for n in (1, 5):
                zero, one = next(at), next(at)
                ok0 &= _near(zero, 1.0)
                ok1 &= n != 1 or _near(one, q**m)
    v.expect(ok0, "at level 0, a chance of 1 (every reading is at least 0%)")
    v.expect(ok1, "at level 1 and n = 1, the chance that every image of the reading is right")
    v.expect(_simulated(fn, W, b, x, y, seed), "close to lr.batch_readings' simulation of your weights' readings")
    return verdict(v)


def _simulated(fn, W, b, x, y, seed: int) -> bool:
    """``fn`` against the share of simulated curves whose best reading is at least the level: the
    weights read on random batches of the test set (drawn with replacement), at the set's accuracy."""
    q = float(lr.evaluate(W, b, x, y)[0])
    for n, m, level in ((1, 50, LEVELS[0]), (5, 50, LEVELS[1]), (3, 20, 0.87)):
        share = float((lr.batch_readings(W, b, x, y, n, m, TRIALS, seed).max(axis=1) >= level).mean())
        mine = float(fn(q, n, m, level))
        if abs(mine - share) > 4 * math.sqrt(max(share * (1 - share), 1 / TRIALS) / TRIALS) + 0.005:
            return False
    return True


def _tail(q: float, m: int, level: float) -> float:
    """P(at least level x m of m images right), each right with chance q: a sum over the counts."""
    return sum(math.comb(m, k) * q**k * (1 - q) ** (m - k) for k in range(m + 1) if k > level * m - 1e-9)


def _fractional(t: float) -> bool:
    """``level x batch_size`` well away from a whole number: "at least" needs no rounding convention."""
    return abs(t - round(t)) >= 0.05


def _near(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 + 1e-6 * abs(b)


def reading_size(m) -> Verdict:
    """``m`` is a whole number of images, a count of right ones out of ``m`` prints as 94% and another
    as 97% (whole percents, rounded to the nearest, halves up), and no smaller size can print both."""
    v = Verdict("reading_size")
    if not v.expect(isinstance(m, (int, np.integer)) and m >= 1, "a whole number of images, at least 1"):
        return verdict(v)
    v.expect(_prints_both(int(m)), "a size on which one reading prints as 94% and another as 97%")
    v.expect(not any(_prints_both(k) for k in range(1, int(m))), "the smallest size that prints both")
    return verdict(v)


def _prints_both(m: int) -> bool:
    printed = {math.floor(100 * k / m + 0.5) for k in range(m + 1)}
    return {94, 97} <= printed


def audit_accuracy(q, W, b, x, y) -> Verdict:
    """``q`` is the accuracy of the weights (W, b) on the test set (x, y): the audit's model is read
    at the run's own final accuracy (within 0.1 point, as the grader reads it)."""
    v = Verdict("q")
    try:
        value = float(q)
    except (TypeError, ValueError):
        value = math.nan
    v.expect(
        math.isfinite(value) and abs(value - lr.evaluate(W, b, x, y)[0]) <= 0.001,
        "your final Core weights' accuracy on the full test set, as a share from 0 to 1",
    )
    return verdict(v)
