"""The variance of a prediction from the coefficients' covariance, as a quadratic form built
once per key, against its definition term by term."""

from __future__ import annotations

import numpy as np
import pytest

from planner.perf.calibration import (
    LEVELS,
    N_FITTED,
    TREND_LEVEL,
    CoefficientKey,
    level_keys,
    release_age,
    unseen_term_sd,
)
from planner.perf.model import PerformanceModel


def _by_definition(fitted: object, key: CoefficientKey, shares: np.ndarray) -> float:
    """Var(log prediction) = g' C g, g the shares scattered onto the parameters of every level
    the key names; plus the prior variance of the terms a known key never saw (not the request
    path at a level that never fits one: it is the family's); plus, for a key
    the data never saw, the mean square effect of the deviations of that level's known keys
    (the prior variance when fewer than three are known). The prior variance is the level's,
    a wider one for the layer floor at release x kind, none for a term the level never fits
    (the request path outside the family level, the layer floor outside release x kind). The
    model kind's release-age slope enters g times the release's age."""
    columns, levels = fitted.columns, fitted.levels  # type: ignore[attr-defined]
    covariance = fitted.covariance  # type: ignore[attr-defined]
    g = np.zeros(covariance.shape[0])
    g[:N_FITTED] += shares
    extra = 0.0
    sigma = dict(LEVELS)
    for level, name in level_keys(key).items():
        if name is None:
            continue
        found = columns.get(f"{level}:{name}")
        if found is None:
            deltas = list(levels.get(level, {}).values())
            if len(deltas) < 3:
                sd = unseen_term_sd(level, sigma[level])
                extra += float(((sd * shares) ** 2).sum())
            else:
                extra += float(np.mean([(shares @ d) ** 2 for d in deltas]))
            continue
        unseen = found < 0
        sd = unseen_term_sd(level, sigma[level])
        extra += float(((sd * shares)[unseen] ** 2).sum())
        for term in range(N_FITTED):
            if found[term] >= 0:
                g[found[term]] += shares[term]
    slope = columns.get(f"{TREND_LEVEL}:{key.kind}")
    if slope is not None:
        for term in range(N_FITTED):
            if slope[term] >= 0:
                g[slope[term]] += shares[term] * release_age(key)
    return float(g @ covariance @ g) + extra


@pytest.mark.parametrize(
    "key",
    [
        CoefficientKey("vllm", "H100-SXM", "vllm:0.10", "serve", "dense"),
        CoefficientKey("trtllm", "H200", None, "offline", "moe"),
        CoefficientKey("sglang", "B300", "sglang:99.0", "serve", "moe"),  # unseen GPU, release
        CoefficientKey("vllm", "GH200"),
        # an MoE model measured on the GPU (DeepSeek-V3/R1 on H200), and one never measured
        CoefficientKey("sglang", "H200", None, "serve", "moe", model="671026404352/36625603584"),
        CoefficientKey("sglang", "H200", None, "serve", "moe", model="1/1"),
    ],
)
def test_the_quadratic_form_is_the_definition(model: PerformanceModel, key: CoefficientKey) -> None:
    fitted = model.fitted
    assert fitted is not None
    rng = np.random.default_rng(5)
    for _ in range(20):
        shares = rng.dirichlet(np.ones(N_FITTED))
        expected = _by_definition(fitted, key, shares)
        assert fitted.log_variance(key, shares) == pytest.approx(expected, rel=1e-12)
