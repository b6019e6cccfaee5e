"""Diagnose's speculation finding: it fires on a run whose acceptance and batch make
speculative decoding a loss, stays quiet on a healthy one, and proposes it for a run whose
TPOT SLO it would meet; each with the flag change and the model's what-if."""

from __future__ import annotations

from typing import Any

import pytest

from planner.catalog import Catalog
from planner.diagnosis import diagnose, evidence_from_run
from planner.diagnosis.findings import Finding
from planner.perf.model import PerformanceModel
from tests.planner.test_diagnosis import run_files, steady_requests

PLAN: dict[str, Any] = {
    "engine": "vllm",
    "model": "meta-llama/Llama-3.3-70B-Instruct",
    "precision": "bf16",
    "gpu": "H100-SXM",
    "tp": 4,
    "pp": 1,
    "max_num_seqs": 256,
}


@pytest.fixture(scope="module")
def prior(catalog: Catalog) -> PerformanceModel:
    """An unfitted model (spec-sheet prior coefficients): the what-ifs without a fit."""
    return PerformanceModel(catalog)


def _finding(
    prior: PerformanceModel, plan: dict[str, Any], concurrency: int, gap: float, **summary: Any
) -> Finding:
    requests = steady_requests(n=2 * concurrency, concurrency=concurrency, gap=gap, out=64)
    run = run_files(
        requests,
        plan=plan,
        config={"load": "concurrency", "concurrency": concurrency},
        summary=summary,
    )
    d = diagnose(evidence_from_run(run), model=prior)
    (found,) = [f for f in d.findings if f.key == "speculation"]
    return found


def test_speculation_that_loses_at_a_large_batch_and_low_acceptance_is_found(
    prior: PerformanceModel,
) -> None:
    plan = {**PLAN, "spec_method": "eagle3", "num_spec_tokens": 4}
    lost = _finding(prior, plan, 256, 0.1, server_spec_accept_len=1.3)
    assert lost.status == "found"
    assert lost.fix is not None and lost.fix.changes[0].vllm == "(drop --speculative-config)"
    w = lost.fix.what_if
    assert w is not None and w.after.output_tok_per_s > w.before.output_tok_per_s
    assert any(e.name == "mean accepted tokens a step" and e.value == 1.3 for e in lost.evidence)
    healthy = _finding(prior, plan, 1, 0.01, server_spec_accept_len=2.8)
    assert healthy.status == "clear" and "pays" in healthy.headline


def test_a_tpot_slo_speculation_would_meet_gets_the_flag(prior: PerformanceModel) -> None:
    plan = {**PLAN, "slo_tpot_p99_ms": 30}
    missed = _finding(prior, plan, 1, 0.05)  # 50 ms a token at concurrency 1
    assert missed.status == "found" and "EAGLE-3" in missed.headline
    assert missed.fix is not None and '"method":"eagle3"' in missed.fix.changes[0].vllm
    assert missed.fix.what_if is not None
    assert missed.fix.what_if.after.tpot_ms_p50 < 30
    met = _finding(prior, plan, 1, 0.02)
    assert met.status == "clear"


def test_a_model_without_mtp_or_a_draft_gets_auto_s_n_gram(prior: PerformanceModel) -> None:
    """Llama-3.1-70B has no MTP layers and no published EAGLE-3 draft: as the search's auto
    does, Diagnose tries n-gram for it, and says why the other two are not offered."""
    plan = {**PLAN, "model": "meta-llama/Llama-3.1-70B-Instruct", "slo_tpot_p99_ms": 30}
    missed = _finding(prior, plan, 1, 0.05)
    names = [e.name for e in missed.evidence]
    assert "predicted p99 TPOT with n-gram" in names
    assert not any("EAGLE-3" in name or "MTP" in name for name in names)
    assert missed.status == "found" and "n-gram" in missed.headline, missed.headline
    assert missed.fix is not None and '"method":"ngram"' in missed.fix.changes[0].vllm
