"""Refitting the verifier: the logistic regression learns a separable rule, and the
threshold sits above every trap's score so no training trap would be served."""

import numpy as np

from cache.fit_verifier import fit, fit_logistic
from cache.verifier import PairSignals


def test_logistic_regression_separates_a_simple_rule():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 2))
    y = x[:, 0] - 0.5 * x[:, 1] > 0
    coef, intercept = fit_logistic(x, y, l2=0.01)
    pred = (x @ coef + intercept) > 0
    assert (pred == y).mean() > 0.95 and coef[0] > 0 > coef[1]


def test_fit_puts_the_threshold_above_every_trap():
    rng = np.random.default_rng(1)
    signals, labels = [], []
    for i in range(40):
        same = i % 2 == 0
        n = int(rng.integers(1, 4))
        aligned = rng.uniform(0.35, 0.7) if same else rng.uniform(0.15, 0.45)
        signals.append(PairSignals(float(rng.uniform(0.5, 0.75)), "a", "b", ("x",) * n, (),
                                   aligned=float(aligned)))
        labels.append(same)
    verifier, report = fit(signals, np.array(labels), relief=0.15)
    scores = [verifier.score(s) for s in signals]
    assert max(s for s, same in zip(scores, labels, strict=True) if not same) \
        < verifier.threshold
    assert report["loo_trap_passes"] == 0 and report["traps"] == 20
    assert verifier.relief == 0.15
