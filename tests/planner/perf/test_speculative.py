"""Speculative decoding in the step model: acceptance arithmetic, a step's cost, the draft's
memory, what each model and engine supports, and ``planner predict``'s speculative columns."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from planner.catalog import Catalog
from planner.cli import main
from planner.errors import InvalidInputError
from planner.perf.deployment import Deployment, resolve_deployment
from planner.perf.model import PerformanceModel
from planner.perf.scenario import Scenario
from planner.perf.speculative import (
    ACCEPTANCE_DEFAULTS,
    AUTO_METHODS,
    NGRAM_ASSUMPTION,
    PUBLISHED_ACCEPTANCE,
    acceptance_defaults,
    acceptance_rate_for,
    auto_methods,
    default_num_spec_tokens,
    mean_accepted_length,
    searched_methods,
    speculation_reason,
    unsupported_reason,
)
from planner.perf.step_time import (
    IDX,
    StepBatch,
    _fill_plain,
    roofline_coefficients,
    step_features,
)

LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
R1 = "deepseek-ai/DeepSeek-R1-0528"
#: EAGLE-3's published per-position rate on Llama (vLLM issue 20780's lengths, median 0.755)
LLAMA_EAGLE3 = ACCEPTANCE_DEFAULTS[("eagle3", "llama")].alpha


def _dep(catalog: Catalog, **values: object) -> Deployment:
    base: dict[str, object] = {
        "model": LLAMA_70B,
        "gpu": "H100-SXM",
        "tp": 4,
        "input_len": 1000,
        "output_len": 500,
        "concurrency": 8,
    }
    return resolve_deployment(Scenario(**{**base, **values}), catalog)  # type: ignore[arg-type]


def test_mean_accepted_length_worked_numbers() -> None:
    # (1 - a^(k+1)) / (1 - a): 1 + 0.8 + 0.64 + 0.512 at k = 3
    assert mean_accepted_length(0.8, 3) == pytest.approx(2.952)
    assert mean_accepted_length(0.85, 1) == pytest.approx(1.85)
    assert mean_accepted_length(0.0, 5) == 1.0
    assert mean_accepted_length(1.0, 4) == 5.0
    # the published EAGLE-3 figure: 2.77 tokens a step at K = 7 is alpha 0.65
    assert acceptance_rate_for(2.77, 7) == pytest.approx(0.65, abs=0.005)
    for alpha, k in ((0.3, 2), (0.66, 3), (0.9, 6)):
        assert acceptance_rate_for(mean_accepted_length(alpha, k), k) == pytest.approx(alpha)
    with pytest.raises(InvalidInputError, match="spec_accept_len"):
        acceptance_rate_for(5.0, 3)


def test_acceptance_defaults_are_the_engines_published_lengths() -> None:
    """Each published mean accepted length gives back its rate at its own draft length, and a
    family's default is the median of its rates: DeepSeek MTP in SGLang 2.18 at k=2 (0.696),
    2.44 and 2.69 at k=3 (0.675, 0.739): 0.696, not the DeepSeek-V3 report's 0.85."""
    for entry in PUBLISHED_ACCEPTANCE:
        assert mean_accepted_length(entry.alpha, entry.num_spec_tokens) == pytest.approx(
            entry.accept_len, abs=1e-6
        )
        assert entry.engine in ("vllm", "sglang", "trtllm") and "20" in entry.source
    deepseek = ACCEPTANCE_DEFAULTS[("mtp", "deepseek")]
    assert deepseek.alpha == pytest.approx(0.696, abs=1e-3)
    assert "2.18 at k=2" in deepseek.source and "2.69 at k=3" in deepseek.source
    # 1 + a + a^2 = 2.36 at k = 2: a = (sqrt(1 + 4 x 1.36) - 1) / 2 = 0.769; the six Llama
    # lengths (k = 2..7) give 0.744-0.769, median 0.755
    assert ACCEPTANCE_DEFAULTS[("eagle3", "llama")].alpha == pytest.approx(0.755, abs=1e-3)
    # a family without a publication takes the median of the families' (llama, minicpm3)
    assert ACCEPTANCE_DEFAULTS[("eagle3", "*")].alpha == pytest.approx(
        (0.755 + 0.612) / 2, abs=2e-3
    )
    # n-gram: one default for every family, vLLM pull request 24344's InstructCoder run (1.95
    # tokens a step over all steps at k = 5: 0.495 a position), its workload named
    ngram = ACCEPTANCE_DEFAULTS[("ngram", "*")]
    assert ngram.alpha == pytest.approx(0.495, abs=1e-3)
    assert "1.95 at k=5" in ngram.source and "InstructCoder" in ngram.source
    assert "24344" in ngram.source and ("ngram", "llama") not in ACCEPTANCE_DEFAULTS
    # without a published n-gram run the stated assumption stays
    others = [e for e in PUBLISHED_ACCEPTANCE if e.method != "ngram"]
    assert acceptance_defaults(others)[("ngram", "*")] == NGRAM_ASSUMPTION
    assert NGRAM_ASSUMPTION.alpha == 0.3 and "assumption" in NGRAM_ASSUMPTION.source


def test_a_deepseek_mtp_plan_uses_the_published_sglang_rate(catalog: Catalog) -> None:
    spec = _dep(
        catalog,
        model=R1,
        gpu="H200",
        tp=8,
        precision="fp8",
        engine="sglang",
        spec_method="mtp",
        num_spec_tokens=3,
    ).speculation
    assert spec is not None
    assert spec.acceptance_rate == pytest.approx(ACCEPTANCE_DEFAULTS[("mtp", "deepseek")].alpha)
    # 1 + 0.696 + 0.696^2 + 0.696^3 = 2.52 tokens a step (2.95 at the 0.85 used before)
    assert spec.mean_accepted_length == pytest.approx(2.52, abs=0.01)


def test_eagle3_draft_constants_of_llama_70b(catalog: Catalog) -> None:
    spec = _dep(catalog, spec_method="eagle3").speculation
    assert spec is not None and spec.draft_model == "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
    # one layer: attention reading 2 x 8192 (64 Q / 8 KV heads x 128) = 234,881,024, MLP
    # 3 x 8192 x 28672 = 704,643,072, fc 3 x 8192^2 = 201,326,592, draft lm_head 32000 x 8192
    # = 262,144,000: 1,402,994,688 BF16 parameters over TP 4
    assert spec.draft_dense_weight_bytes == pytest.approx(1_402_994_688 * 2 / 4)
    assert spec.draft_layers == 1 and spec.draft_moe_layers == 0
    # one layer of 8 KV heads x 128 over TP 4, K and V in BF16
    assert spec.draft_kv_bytes_per_token == pytest.approx(2 * 2 * 128 * 2)
    assert spec.num_spec_tokens == 3  # vLLM requires it; the planner's 3
    assert spec.acceptance_rate == pytest.approx(LLAMA_EAGLE3)
    assert spec.mean_accepted_length == pytest.approx(mean_accepted_length(LLAMA_EAGLE3, 3))


def test_a_speculative_decode_step_is_verify_plus_drafts_over_the_accepted_length(
    catalog: Catalog,
) -> None:
    plain = _dep(catalog)
    spec_dep = _dep(catalog, spec_method="eagle3")
    spec = spec_dep.speculation
    assert spec is not None
    batch = StepBatch.of([1200] * 4)
    x = step_features(batch, spec_dep)
    tau, k = spec.mean_accepted_length, spec.num_spec_tokens
    # weights: the target's once (verification) and the draft's k times, over tau tokens
    expected_weight = (plain.dense_weight_bytes + k * spec.draft_dense_weight_bytes) / tau
    assert x[IDX["weight_read"]] * plain.memory_bw == pytest.approx(expected_weight)
    # GEMMs and lm_heads: 4 sequences x (k + 1) verified tokens, plus k draft tokens each
    expected_gemm = (
        4 * (k + 1) * (plain.gemm_flops_per_token + plain.lm_head_flops_per_seq)
        + k * 4 * (spec.draft_gemm_flops_per_token + spec.draft_lm_head_flops_per_seq)
    ) / tau
    assert x[IDX["gemm"]] * plain.peak_flops == pytest.approx(expected_gemm)
    # the target's KV is read once a step, the draft's one-layer KV once a draft pass
    assert x[IDX["kv_read"]] * tau * plain.memory_bw == pytest.approx(
        4 * 1200 * (plain.kv_bytes_per_token_full + k * spec.draft_kv_bytes_per_token)
    )
    # the step's scheduling is counted once, and the speculation's bookkeeping pass once more
    # (whatever k: 1 ms of the forward pass's unit, the plain step's 1 ms again), beside the
    # GPU's work where vLLM schedules asynchronously (the pinned release, with EAGLE-3 too)
    assert plain.async_scheduling and spec_dep.async_scheduling
    host = IDX["host_overlapped"]
    plain_host = step_features(batch, plain)[host]
    assert plain_host == pytest.approx(1e-3 + 4 * 100e-6)  # a pass and four sequences
    assert x[host] * tau == pytest.approx(plain_host + 1e-3)
    assert x[IDX["forward_passes"]] == x[IDX["sequences"]] == 0.0
    longer = _dep(catalog, spec_method="eagle3", num_spec_tokens=6).speculation
    assert longer is not None
    x6 = step_features(batch, _dep(catalog, spec_method="eagle3", num_spec_tokens=6))
    assert x6[host] * longer.mean_accepted_length == pytest.approx(plain_host + 1e-3)
    # a synchronous scheduler counts the same passes in the forward-pass term
    sync = _dep(catalog, spec_method="eagle3", async_scheduling=False)
    assert not sync.async_scheduling
    assert step_features(batch, sync)[IDX["forward_passes"]] * tau == pytest.approx(2e-3)
    # every term is at least the verification's (the drafts only add)
    verify = _plain(replace(batch, decode_query_tokens=k + 1.0), spec_dep)
    assert np.all(x * tau >= verify - 1e-15)


def test_vllm_launches_each_draft_pass_sglang_one_graph(catalog: Catalog) -> None:
    """vLLM's proposer runs k draft forwards from Python (k x 1 ms of the draft_passes term a
    step, over tau tokens); SGLang replays its k-step draft loop as one graph and n-gram has
    no draft model: none there. A plain step has none either."""
    batch = StepBatch.of([1200] * 4)
    for k in (2, 5):
        dep = _dep(catalog, spec_method="eagle3", num_spec_tokens=k)  # vLLM by default
        assert dep.speculation is not None and dep.family == "vllm"
        x = step_features(batch, dep)
        assert x[IDX["draft_passes"]] * dep.speculation.mean_accepted_length == pytest.approx(
            k * 1e-3
        )
    sglang = _dep(catalog, spec_method="eagle3", num_spec_tokens=5, engine="sglang")
    ngram = _dep(catalog, spec_method="ngram", num_spec_tokens=5)
    for dep in (sglang, ngram, _dep(catalog)):
        assert step_features(batch, dep)[IDX["draft_passes"]] == 0.0


def test_a_prefill_chunk_beside_speculating_decodes_keeps_its_full_cost(catalog: Catalog) -> None:
    spec_dep = _dep(catalog, spec_method="eagle3")
    spec = spec_dep.speculation
    assert spec is not None
    tau = spec.mean_accepted_length
    mixed = StepBatch.of([1200] * 4, [(512, 0)])
    chunk = StepBatch.of((), [(512, 0)])
    decodes = StepBatch.of([1200] * 4)
    c = roofline_coefficients()
    t_mixed = float(c @ step_features(mixed, spec_dep))
    t_chunk = float(c @ step_features(chunk, spec_dep))  # no decodes: a plain step
    q = spec.num_spec_tokens + 1.0
    # the k draft passes: what a decode-only step adds to its verification
    drafts = float(c @ step_features(decodes, spec_dep)) * tau - float(
        c @ _plain(replace(decodes, decode_query_tokens=q), spec_dep)
    )
    assert drafts > 0
    # over tau simulated steps: one verification with the chunk, the drafts, tau - 1 chunks
    together = float(c @ _plain(replace(mixed, decode_query_tokens=q), spec_dep))
    assert t_mixed * tau == pytest.approx(together + drafts + (tau - 1) * t_chunk)


def _plain(batch: StepBatch, dep: Deployment) -> np.ndarray:
    out = np.zeros(len(roofline_coefficients()))
    _fill_plain(out, batch, dep)
    return out


def test_the_gain_falls_with_the_batch_and_turns_into_a_loss(catalog: Catalog) -> None:
    """Verifying k + 1 tokens costs about one decode at batch 1 (weight-bound) and k + 1 times
    one at large batches (compute-bound), so the speed-up per token falls below 1."""
    plain, spec_dep = _dep(catalog), _dep(catalog, spec_method="eagle3")
    c = roofline_coefficients()
    speedups = []
    for batch_size in (8, 64, 256, 1024):
        batch = StepBatch.of([1200] * batch_size)
        per_token_plain = float(c @ step_features(batch, plain))
        per_token_spec = float(c @ step_features(batch, spec_dep))
        speedups.append(per_token_plain / per_token_spec)
    # flat while the step reads weights (batch 8 to 64), then falling once it computes
    assert speedups[0] > 1.8 and speedups[1] == pytest.approx(speedups[0], rel=0.02)
    assert speedups[1] > speedups[2] > speedups[3]
    assert speedups[-1] < 1.0, speedups


def test_the_draft_takes_its_weights_and_kv_from_the_cache(catalog: Catalog) -> None:
    plain = _dep(catalog)
    eagle = _dep(catalog, spec_method="eagle3")
    ngram = _dep(catalog, spec_method="ngram")
    assert ngram.kv_capacity_tokens == plain.kv_capacity_tokens  # n-gram needs no GPU memory
    assert eagle.speculation is not None
    kv = plain.kv_bytes_per_token
    expected = (plain.kv_capacity_tokens * kv - eagle.speculation.draft_resident_bytes) / (
        kv + eagle.speculation.draft_kv_bytes_per_token
    )
    assert eagle.kv_capacity_tokens == int(expected) < plain.kv_capacity_tokens


def test_mtp_comes_from_the_models_config_and_each_engines_defaults(catalog: Catalog) -> None:
    r1 = dict(model=R1, gpu="H200", tp=8, precision="fp8")
    assert catalog.model(R1).architecture.num_mtp_layers == 1
    vllm = _dep(catalog, **r1, spec_method="mtp")
    assert vllm.speculation is not None and vllm.speculation.num_spec_tokens == 1
    assert vllm.speculation.mean_accepted_length == pytest.approx(
        1.696
    )  # 1 + 0.696 (SGLang-published)
    assert vllm.speculation.draft_moe_layers == 1
    sglang = _dep(catalog, **r1, engine="sglang", spec_method="mtp")
    assert sglang.speculation is not None and sglang.speculation.num_spec_tokens == 3
    assert sglang.max_num_seqs == 48  # SGLang caps a speculating server's running requests
    stated = _dep(catalog, **r1, engine="sglang", spec_method="mtp", max_num_seqs=128)
    assert stated.max_num_seqs == 128
    own = _dep(catalog, **r1, spec_method="mtp", num_spec_tokens=3, spec_accept_len=2.5)
    assert own.speculation is not None and own.speculation.mean_accepted_length == pytest.approx(
        2.5
    )
    assert default_num_spec_tokens("trtllm", "eagle3", catalog.model(R1).architecture) == 3


def test_what_is_not_supported_says_why(catalog: Catalog) -> None:
    llama31 = catalog.model("meta-llama/Llama-3.1-70B-Instruct")
    assert "no published EAGLE-3 draft" in (unsupported_reason(llama31, "vllm", "eagle3") or "")
    assert "no MTP layers" in (unsupported_reason(llama31, "vllm", "mtp") or "")
    assert unsupported_reason(llama31, "vllm", "ngram") is None
    glm = catalog.model("zai-org/GLM-4.6")
    assert unsupported_reason(glm, "vllm", "mtp") is None
    assert "DeepSeek-V3 models only" in (unsupported_reason(glm, "trtllm", "mtp") or "")
    assert "pipeline" in (unsupported_reason(llama31, "vllm", "ngram", pp=2) or "")
    r1 = catalog.model(R1)
    assert "DP attention" in (unsupported_reason(r1, "sglang", "ngram", attention_dp=8) or "")
    assert unsupported_reason(r1, "vllm", "ngram", attention_dp=8) is None
    with pytest.raises(InvalidInputError, match="spec_method"):
        _dep(catalog, model="meta-llama/Llama-3.1-70B-Instruct", spec_method="eagle3")
    # a workload's acceptance is unused by a plan that does not speculate
    assert _dep(catalog, spec_accept_len=2.0).speculation is None


def test_speculation_cuts_tpot_at_low_load(model: PerformanceModel) -> None:
    base = Scenario(
        model=LLAMA_70B, gpu="H100-SXM", tp=4, input_len=1000, output_len=500, concurrency=1,
        num_requests=4,
    )  # fmt: skip
    plain = model.predict(base)
    eagle = model.predict(base.model_copy(update={"spec_method": "eagle3"}))
    assert plain.spec_accept_len is None
    assert eagle.spec_accept_len == pytest.approx(mean_accepted_length(LLAMA_EAGLE3, 3))
    assert 1.5 < plain.tpot_ms_mean / eagle.tpot_ms_mean < eagle.spec_accept_len
    assert eagle.ttft_ms_mean == pytest.approx(plain.ttft_ms_mean, rel=0.05)


def test_predict_reads_the_speculative_columns(tmp_path: Path, model: PerformanceModel) -> None:
    source = tmp_path / "in.csv"
    head = "id,model,gpu,tp,input_len,output_len,load,concurrency,spec_method,num_spec_tokens,"
    rows = [
        f"plain,{LLAMA_70B},H100-SXM,4,1000,500,concurrency,4,,,",
        f"eagle,{LLAMA_70B},H100-SXM,4,1000,500,concurrency,4,EAGLE3,,",
        f"stated,{LLAMA_70B},H100-SXM,4,1000,500,concurrency,4,eagle3,4,2.5",
        f"medusa,{LLAMA_70B},H100-SXM,4,1000,500,concurrency,4,medusa,,",
        f"toolong,{LLAMA_70B},H100-SXM,4,1000,500,concurrency,4,eagle3,3,5",
    ]
    source.write_text(head + "spec_accept_len\n" + "\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "out.csv"
    assert main(["predict", "--scenarios", str(source), "--out", str(out), "--public-only"]) == 0
    got = {r["id"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert got["plain"]["pred_spec_accept_len"] == ""
    assert float(got["eagle"]["pred_spec_accept_len"]) == pytest.approx(2.75, abs=0.01)
    assert float(got["stated"]["pred_spec_accept_len"]) == pytest.approx(2.5)
    assert float(got["eagle"]["pred_tpot_ms_p50"]) < float(got["plain"]["pred_tpot_ms_p50"])
    assert "spec_method" in got["medusa"]["pred_error"] and "eagle3" in got["medusa"]["pred_error"]
    assert "spec_accept_len" in got["toolong"]["pred_error"]


def test_the_steady_state_prices_speculation_as_the_simulator_does(
    model: PerformanceModel,
) -> None:
    """One step model for both: at a light load their TPOT agree as they do without it."""
    base = Scenario(
        model=LLAMA_70B, gpu="H100-SXM", tp=4, input_len=2048, output_len=512, load="rate",
        request_rate=0.5, num_requests=300, spec_method="eagle3",
    )  # fmt: skip
    simulated, steady = model.predict(base), model.predict_steady(base)
    assert steady.tpot_ms_p50 == pytest.approx(simulated.tpot_ms_p50, rel=0.15)
    assert steady.spec_accept_len == simulated.spec_accept_len


def test_a_measured_runs_acceptance_prices_the_next_prediction_of_its_plan(
    catalog: Catalog, model: PerformanceModel
) -> None:
    """A run of Llama-3.3-70B with EAGLE-3 k=3 on vLLM whose server reported 3.1 tokens a step
    (above the published 2.75): the next prediction of that model, method and engine
    uses the measured rate (and says where it came from), at its own draft length too; another
    engine, and the same model without the run, keep the published default."""
    from planner.catalog import MeasuredResult
    from planner.perf.speculative import acceptance_rate_for, learn_acceptance

    run = MeasuredResult(
        source="user run r-spec", engine="vllm", model=LLAMA_70B, precision="bf16",
        gpu="H100-SXM", num_gpus=4, tp=4, pp=1, input_len=1000, output_len=500,
        load="concurrency", concurrency=4, output_tok_per_s=300.0, origin="user",
        run_id="r-spec", spec_method="eagle3", num_spec_tokens=3, spec_accept_len=3.1,
    )  # fmt: skip
    learnt = PerformanceModel.from_fit_state(catalog, model.fit_state(), [*catalog.measured, run])
    base = Scenario(
        model=LLAMA_70B, gpu="H100-SXM", tp=4, input_len=1000, output_len=500, concurrency=4,
        num_requests=8, spec_method="eagle3", num_spec_tokens=3,
    )  # fmt: skip
    got = learnt.predict(base)
    assert got.spec_accept_len == pytest.approx(3.1, rel=1e-6)
    assert any("learnt from 1 your measured run of EAGLE-3 on vllm" in n for n in got.notes)
    assert got.tpot_ms_mean < model.predict(base).tpot_ms_mean
    # the steady state (what recommend searches with) prices it too
    assert learnt.predict_steady(base).spec_accept_len == pytest.approx(3.1, rel=1e-6)
    # the per-position rate carries to another draft length
    alpha = acceptance_rate_for(3.1, 3)
    five = learnt.predict(base.model_copy(update={"num_spec_tokens": 5}))
    assert five.spec_accept_len == pytest.approx(mean_accepted_length(alpha, 5), rel=1e-6)
    # other engines and models without runs keep the published default
    sglang = learnt.predict(base.model_copy(update={"engine": "sglang"}))
    assert sglang.spec_accept_len == pytest.approx(mean_accepted_length(LLAMA_EAGLE3, 3))
    assert model.predict(base).spec_accept_len == pytest.approx(
        mean_accepted_length(LLAMA_EAGLE3, 3)
    )
    # a stated acceptance still wins
    stated = learnt.predict(base.model_copy(update={"spec_accept_len": 2.0}))
    assert stated.spec_accept_len == pytest.approx(2.0)
    # the user's own runs come before public rows of the same key
    public = run.model_copy(update={"origin": "public", "spec_accept_len": 1.5, "run_id": None})
    both = learn_acceptance([public, run]).lookup(LLAMA_70B, "eagle3", "vllm")
    assert both is not None and both[0] == pytest.approx(alpha)
    only_public = learn_acceptance([public]).lookup(LLAMA_70B, "eagle3", "vllm")
    assert only_public is not None and "measured public row" in only_public[1]


def test_auto_falls_back_to_n_gram_only_for_a_model_with_neither_mtp_nor_eagle3(
    catalog: Catalog,
) -> None:
    llama31 = catalog.model("meta-llama/Llama-3.1-70B-Instruct")
    assert auto_methods(llama31, "vllm") == ("mtp", "eagle3", "ngram")
    assert searched_methods("auto", llama31, "sglang") == ("mtp", "eagle3", "ngram")
    # a model with MTP layers or a published draft is not searched with n-gram as well
    for model in (R1, LLAMA_70B, "zai-org/GLM-4.6"):
        assert auto_methods(catalog.model(model), "vllm") == AUTO_METHODS, model
    # GLM's MTP layers TensorRT-LLM does not run, and it has no EAGLE-3 draft: n-gram there
    assert "ngram" in auto_methods(catalog.model("zai-org/GLM-4.6"), "trtllm")
    # an architecture without a card: n-gram unless it has MTP layers
    assert "ngram" in auto_methods(llama31.architecture, "vllm")
    assert auto_methods(catalog.model(R1).architecture, "vllm") == AUTO_METHODS
    assert searched_methods("auto") == AUTO_METHODS and searched_methods("off") == ()
    with pytest.raises(InvalidInputError, match="speculative"):
        searched_methods("medusa")


def test_a_speculative_plan_says_why_and_what_its_acceptance_rests_on(catalog: Catalog) -> None:
    llama31 = catalog.model("meta-llama/Llama-3.1-70B-Instruct")
    why = speculation_reason(llama31, "vllm", "ngram", "n-gram k=3, 1.86 tokens/step")
    assert "auto's method for meta-llama/Llama-3.1-70B-Instruct" in why
    assert "workload's own, assumed here (n-gram k=3, 1.86 tokens/step)" in why
    assert "Verify run" in why
    # n-gram asked for on a model with a draft: no fallback claimed
    llama33 = catalog.model(LLAMA_70B)
    assert "auto's method" not in speculation_reason(llama33, "vllm", "ngram", None)
    eagle = speculation_reason(llama33, "vllm", "eagle3", "published")
    assert "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B" in eagle and "(published)" in eagle
    assert speculation_reason(catalog.model(R1), "sglang", "mtp", None).startswith("MTP")
    assert speculation_reason(llama31, "vllm", "none", "x") == ""
