"""A disaggregated run's checks judged pool by pool.

A run against a prefill and a decode pool records each pool's ``/metrics`` with a ``pool``
label (:attr:`planner.diagnosis.evidence.MetricTable.pools`); the run-wide table adds the two
pools' gauges, which mixes their meanings: a KV usage of 0.5 on each pool reads as a full
cache, the prefill pool's waiting prompts and the decode pool's running answers as one queue
and one batch. :func:`per_pool` runs a check on each pool's own table instead (the requests
stay the client's: the whole route), and reports:

- found on a pool: that pool's finding, its headline and evidence named after the pool, the
  other pool's evidence beside it; the fix is the check's own (engine settings of that pool)
  without its what-if: the what-ifs price one aggregated replica, not a pool
  (``pool_balance`` prices the P:D ratio);
- found on none: clear, each pool's headline in one sentence;
- neither judged: the first pool's cannot-judge.

A run without pools is the check's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from planner.diagnosis.evidence import RunEvidence
from planner.diagnosis.findings import Finding
from planner.diagnosis.whatif import DiagnosisContext

Check = Callable[[RunEvidence, DiagnosisContext], Finding]
#: pools in the order a request meets them
POOL_ORDER = ("prefill", "decode")
SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}


def pool_views(ev: RunEvidence, pools: Sequence[str] = POOL_ORDER) -> list[tuple[str, RunEvidence]]:
    """``ev`` as each of ``pools`` sees it (its own metric table), for a run with pools; empty
    for one without."""
    tables = ev.metrics.pools if ev.metrics is not None else {}
    return [
        (name, dataclasses.replace(ev, metrics=tables[name])) for name in pools if name in tables
    ]


def per_pool(check: Check, pools: Sequence[str] = POOL_ORDER) -> Check:
    """``check`` judged on each of ``pools`` of a disaggregated run (module docstring)."""

    def judged(ev: RunEvidence, ctx: DiagnosisContext) -> Finding:
        views = pool_views(ev, pools)
        if not views:
            return check(ev, ctx)
        results = [(name, check(view, ctx)) for name, view in views]
        evidence = [
            e.model_copy(update={"name": f"{name} pool: {e.name}"})
            for name, f in results
            for e in f.evidence
        ]
        found = [(name, f) for name, f in results if f.status == "found"]
        if found:
            name, f = min(found, key=lambda nf: SEVERITY_RANK.get(nf[1].severity or "low", 2))
            fixes = [x.model_copy(update={"what_if": None}) for x in (f.fix, *f.alternatives) if x]
            return f.model_copy(
                update={
                    "headline": f"{name} pool: {f.headline}",
                    "evidence": evidence,
                    "fix": fixes[0] if fixes else None,
                    "alternatives": fixes[1:],
                    "usd_per_hour_at_stake": None,
                    "notes": [
                        *f.notes,
                        f"judged on the {name} pool's own metrics; the fix's what-if is left "
                        "out (the model prices one aggregated replica, not a pool; "
                        "pool_balance prices the P:D ratio)",
                    ],
                }
            )
        judged_ones = [(name, f) for name, f in results if f.status != "cannot_judge"]
        if not judged_ones:
            return results[0][1]
        first = judged_ones[0][1]
        headline = " ".join(f"{name} pool: {f.headline}" for name, f in judged_ones)
        return first.model_copy(update={"headline": headline, "evidence": evidence})

    judged.__name__ = getattr(check, "__name__", "check")
    judged.__doc__ = check.__doc__
    return judged


__all__ = ["POOL_ORDER", "per_pool", "pool_views"]
