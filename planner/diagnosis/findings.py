"""What a diagnosis says: findings, their evidence, the fix and its predicted effect.

A :class:`Finding` is one of the ways a deployment wastes money (:data:`MISTAKES`), judged
against one run or one live scrape. Its ``status`` is ``found`` (the run shows it), ``clear``
(the run was checked and does not show it) or ``cannot_judge`` (the run lacks what the check
needs; ``missing`` says what). A found finding carries the evidence in numbers, a chart of
the series behind them, a severity, the fix in the engine's own flags (vLLM, and SGLang where
it has the same knob) and the performance model's what-if: the same deployment with the fix,
before and after.

Findings rank by ``usd_per_hour_at_stake``: the share of the deployment's hourly price the
fix would save or recover (each check's docstring gives its formula), then by severity.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal["found", "clear", "cannot_judge"]
Severity = Literal["high", "medium", "low"]
SEVERITY_RANK: dict[str, int] = {"high": 0, "medium": 1, "low": 2}


class Mistake(BaseModel):
    """One entry of the triage list: what it is and where it sits in the quick triage."""

    model_config = ConfigDict(frozen=True)

    key: str
    number: int  # position in the ten-mistakes list
    title: str
    branch: str  # key of the triage branch it lights


class Branch(BaseModel):
    """A question of the quick triage and the mistakes that answer it."""

    model_config = ConfigDict(frozen=True)

    key: str
    question: str
    mistakes: tuple[str, ...]


#: The quick triage (a slow or costly endpoint: which question does the run answer "yes" to?).
BRANCHES: tuple[Branch, ...] = (
    Branch(key="gaps", question="GPU timeline has gaps?", mistakes=("host_overhead",)),
    Branch(key="preemptions", question="Lots of preemptions?", mistakes=("kv_sizing",)),
    Branch(
        key="tpot",
        question="Time per token above its SLO, or speculation on?",
        mistakes=("speculation",),
    ),
    Branch(
        key="tail",
        question="p99 spikes, p50 fine?",
        mistakes=("prefill_stalls", "queueing"),
    ),
    Branch(
        key="low_throughput",
        question="Low tokens/s per GPU?",
        mistakes=("workload_realism", "small_batch", "prefix_reuse"),
    ),
    Branch(key="scaling", question="Multi-GPU scaling poor?", mistakes=("parallelism_links",)),
    Branch(
        key="cost",
        question="Cost high, quality fine?",
        mistakes=("model_size", "accounting"),
    ),
    Branch(
        key="pools",
        question="Disaggregated: one pool (or the KV link) the bottleneck?",
        mistakes=("pool_balance",),
    ),
)

MISTAKES: tuple[Mistake, ...] = (
    Mistake(
        key="workload_realism",
        number=1,
        title="Benchmarking a workload you do not have",
        branch="low_throughput",
    ),
    Mistake(
        key="small_batch",
        number=2,
        title="A batch too small to use the GPU",
        branch="low_throughput",
    ),
    Mistake(
        key="kv_sizing",
        number=3,
        title="KV cache sized for the weights, not the traffic",
        branch="preemptions",
    ),
    Mistake(
        key="prefix_reuse",
        number=4,
        title="Recomputing prefixes already seen",
        branch="low_throughput",
    ),
    Mistake(
        key="prefill_stalls",
        number=5,
        title="Long prefills stalling every stream",
        branch="tail",
    ),
    Mistake(key="queueing", number=6, title="A queue hidden behind averages", branch="tail"),
    Mistake(
        key="model_size",
        number=7,
        title="A bigger model or higher precision than the task needs",
        branch="cost",
    ),
    Mistake(
        key="parallelism_links",
        number=8,
        title="Parallelism that fights the interconnect",
        branch="scaling",
    ),
    Mistake(key="host_overhead", number=9, title="The host starving the GPU", branch="gaps"),
    Mistake(
        key="speculation",
        number=11,
        title="Speculative decoding where it loses, or missing where it would meet the SLO",
        branch="tpot",
    ),
    Mistake(
        key="accounting",
        number=10,
        title="Paying GPU-hours instead of tokens",
        branch="cost",
    ),
    Mistake(
        key="pool_balance",
        number=12,
        title="Prefill and decode pools out of balance",
        branch="pools",
    ),
)
MISTAKES_BY_KEY: dict[str, Mistake] = {m.key: m for m in MISTAKES}


class Evidence(BaseModel):
    """One number behind a finding, with what it is compared against."""

    model_config = ConfigDict(frozen=True)

    name: str
    value: float | None
    unit: str = ""
    limit: float | None = None  # the threshold the check compares ``value`` with
    note: str = ""

    def text(self) -> str:
        if self.value is None:
            shown = "n/a"
        elif abs(self.value) >= 100 or float(self.value).is_integer():
            shown = f"{self.value:,.0f}"
        else:
            shown = f"{self.value:,.3g}"
        unit = f" {self.unit}" if self.unit else ""
        limit = f" (limit {self.limit:,.3g}{unit})" if self.limit is not None else ""
        note = f"; {self.note}" if self.note else ""
        return f"{self.name}: {shown}{unit}{limit}{note}"


class Series(BaseModel):
    """One line, set of markers or bars of a finding's chart."""

    model_config = ConfigDict(frozen=True)

    name: str
    x: list[float] | list[str]
    y: list[float]
    kind: Literal["line", "markers", "bar", "step"] = "line"
    axis: Literal["y", "y2"] = "y"


class Chart(BaseModel):
    """A chart as data (the page draws it; the CLI's JSON carries it)."""

    model_config = ConfigDict(frozen=True)

    title: str
    x_label: str
    y_label: str
    y2_label: str | None = None
    series: list[Series] = Field(default_factory=list)
    #: horizontal reference lines: (label, y value)
    thresholds: list[tuple[str, float]] = Field(default_factory=list)


class Outcome(BaseModel):
    """Predicted figures of one deployment under the run's load."""

    model_config = ConfigDict(frozen=True)

    output_tok_per_s: float
    total_tok_per_s: float
    ttft_ms_p99: float
    itl_ms_p99: float
    itl_ms_max: float
    tpot_ms_p50: float
    usd_per_hour: float | None = None
    usd_per_million_output_tokens: float | None = None
    gpus: int = 1


class WhatIf(BaseModel):
    """The performance model's prediction of the deployment before and after a fix."""

    model_config = ConfigDict(frozen=True)

    description: str
    before: Outcome
    after: Outcome
    notes: list[str] = Field(default_factory=list)

    def change_pct(self, metric: str) -> float | None:
        b, a = getattr(self.before, metric), getattr(self.after, metric)
        if b is None or a is None or b == 0:
            return None
        return (a - b) / b * 100.0


class FlagChange(BaseModel):
    """One engine setting changed by a fix, as the engines spell it."""

    model_config = ConfigDict(frozen=True)

    setting: str  # the Scenario / engine-config field (vLLM's name without dashes)
    before: Any = None
    after: Any = None
    vllm: str  # the `vllm serve` argument(s) after the change, e.g. "--max-num-seqs 64"
    sglang: str | None = None  # the SGLang `launch_server` argument(s), where it has the knob


class Fix(BaseModel):
    """What to change: engine flags, the deployment (layout, replicas), or elsewhere, and the
    performance model's prediction of the deployment with the change."""

    model_config = ConfigDict(frozen=True)

    summary: str
    changes: list[FlagChange] = Field(default_factory=list)
    #: changes to the scenario the what-if predicts (Scenario field -> value; ``replicas``
    #: multiplies the GPUs)
    scenario_changes: dict[str, Any] = Field(default_factory=dict)
    actions: list[str] = Field(default_factory=list)  # what no flag does (routing, prompts)
    what_if: WhatIf | None = None

    @property
    def vllm_args(self) -> str:
        return " ".join(c.vllm for c in self.changes if c.vllm)

    @property
    def sglang_args(self) -> str:
        return " ".join(c.sglang for c in self.changes if c.sglang)


class Finding(BaseModel):
    """One mistake judged against one run."""

    model_config = ConfigDict(frozen=True)

    key: str
    title: str
    number: int
    branch: str
    status: Status
    severity: Severity | None = None
    headline: str = ""  # one sentence: what was seen (or why it is clear)
    evidence: list[Evidence] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)  # what the check needed and did not get
    chart: Chart | None = None
    fix: Fix | None = None
    alternatives: list[Fix] = Field(default_factory=list)
    usd_per_hour_at_stake: float | None = None
    notes: list[str] = Field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.status == "found"

    @property
    def what_if(self) -> WhatIf | None:
        return self.fix.what_if if self.fix is not None else None


class BranchState(BaseModel):
    """A triage branch: lit when one of its mistakes is found."""

    model_config = ConfigDict(frozen=True)

    key: str
    question: str
    lit: bool
    found: list[str]
    cannot_judge: list[str]
    mistakes: list[str]


class Diagnosis(BaseModel):
    """Every mistake judged against one run (or live scrape), ranked by the money at stake."""

    model_config = ConfigDict(frozen=True)

    source: str
    run_id: str | None = None
    deployment: str | None = None  # the plan as one line, when known
    duration_s: float | None = None
    usd_per_hour: float | None = None
    price_source: str | None = None
    summary: dict[str, float | None] = Field(default_factory=dict)
    findings: list[Finding]
    branches: list[BranchState]
    cannot_judge: list[str] = Field(default_factory=list)  # what the run lacks, in words
    plan: dict[str, Any] | None = None

    @property
    def found(self) -> list[Finding]:
        return [f for f in self.findings if f.found]

    def finding(self, key: str) -> Finding:
        for f in self.findings:
            if f.key == key:
                return f
        raise KeyError(key)


def rank_key(finding: Finding) -> tuple[int, float, int, int]:
    """Found first, then by money at stake (largest first), severity, triage order."""
    status = {"found": 0, "cannot_judge": 1, "clear": 2}[finding.status]
    money = -(finding.usd_per_hour_at_stake or 0.0)
    severity = SEVERITY_RANK.get(finding.severity or "", 3)
    return status, money, severity, finding.number


def branch_states(findings: list[Finding]) -> list[BranchState]:
    by_key = {f.key: f for f in findings}
    states = []
    for branch in BRANCHES:
        present = [by_key[k] for k in branch.mistakes if k in by_key]
        states.append(
            BranchState(
                key=branch.key,
                question=branch.question,
                lit=any(f.found for f in present),
                found=[f.key for f in present if f.found],
                cannot_judge=[f.key for f in present if f.status == "cannot_judge"],
                mistakes=list(branch.mistakes),
            )
        )
    return states
