"""The checks, one a mistake of the triage list, in the list's order."""

from __future__ import annotations

from collections.abc import Callable

from planner.diagnosis.checks import (
    cost,
    host,
    kv,
    latency,
    parallelism,
    pools,
    speculation,
    throughput,
)
from planner.diagnosis.checks.per_pool import per_pool
from planner.diagnosis.evidence import RunEvidence
from planner.diagnosis.findings import Finding
from planner.diagnosis.whatif import DiagnosisContext

Check = Callable[[RunEvidence, DiagnosisContext], Finding]

CHECKS: dict[str, Check] = {
    "workload_realism": throughput.check_workload_realism,
    # a disaggregated run: each pool on its own metrics (a prefill pool's batch is prompts)
    "small_batch": per_pool(throughput.check_small_batch, ("decode",)),
    "kv_sizing": per_pool(kv.check),
    "prefix_reuse": throughput.check_prefix_reuse,
    "prefill_stalls": latency.check_prefill_stalls,
    "queueing": per_pool(latency.check_queueing),
    "model_size": cost.check_model_size,
    "parallelism_links": parallelism.check,
    "host_overhead": host.check,
    "accounting": cost.check_accounting,
    "speculation": speculation.check,
    "pool_balance": pools.check,
}

__all__ = ["CHECKS", "Check"]
