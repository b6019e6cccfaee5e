"""The load vocabulary: the one set of names for how requests are offered to a deployment, used
by the performance model, the measured results, the plan, the dashboard and the load generator.
"""

from __future__ import annotations

from typing import Literal, get_args

#: How requests are offered to a deployment:
#:
#: - ``concurrency``: a closed loop of N requests in flight (``vllm bench serve
#:   --max-concurrency``), each client sending its next request when the previous one ends;
#: - ``rate``: requests arriving per second (Poisson, or gamma gaps with a burstiness);
#: - ``offline_batch``: N requests submitted at once (``vllm bench throughput``), which is a
#:   closed loop of N with N requests;
#: - ``max_throughput``: every request queued at the start (``trtllm-bench``);
#: - ``trace``: recorded arrivals replayed.
LoadKind = Literal["concurrency", "rate", "offline_batch", "max_throughput", "trace"]
LOAD_KINDS: tuple[LoadKind, ...] = get_args(LoadKind)
#: The loads a plan is sized for, the sidebar offers and a verification run drives.
PlanLoadKind = Literal["concurrency", "rate"]
PLAN_LOAD_KINDS: tuple[PlanLoadKind, ...] = get_args(PlanLoadKind)
#: The loads a published or measured result can state.
MeasuredLoadKind = Literal["max_throughput", "concurrency", "offline_batch", "rate"]
#: The loads the load generator drives (``benchmarks_runner``).
RunLoadKind = Literal["concurrency", "rate", "trace"]
#: Requests in flight when nothing says otherwise (the sidebar's default peak concurrency).
DEFAULT_CONCURRENCY = 32
