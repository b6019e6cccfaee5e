"""The typed plan: one value from the recommendation to run.json and back."""

from __future__ import annotations

import json
from datetime import date

import pytest

from planner.engine import EngineConfig
from planner.engine_command import launch_command
from planner.errors import InvalidInputError
from planner.plan import (
    Load,
    Plan,
    PlanPrice,
    PlanWorkload,
    Slo,
    Verification,
    flat_plan,
    plan_label,
    read_plan,
)
from planner.workload import LengthDistribution

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
PLAN = Plan(
    model=MODEL,
    precision="fp8",
    gpu="H100-SXM",
    instance="p5.48xlarge",
    tp=2,
    replicas=4,
    engine=EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=6000),
    workload=PlanWorkload(
        input_len=LengthDistribution.lognormal(2048, 512),
        output_len=LengthDistribution.uniform(256, 768),
        prefix_share=0.25,
    ),
    load=Load.rate(3.5, 160),
    slo=Slo(ttft_p99_ms=3000, tpot_p99_ms=100),
    price=PlanPrice(
        provider="aws",
        region="us-east-1",
        pricing="on_demand",
        usd_per_hour=55.04,
        source="AWS price list",
        as_of=date(2026, 1, 5),
    ),
    verification=Verification(endpoint="simulated", faults={"error_rate": 0.1}),
)


def test_a_plan_round_trips_through_json() -> None:
    stored = json.loads(json.dumps(PLAN.model_dump(mode="json")))
    assert Plan.model_validate(stored) == PLAN
    assert read_plan(stored) == PLAN
    assert read_plan(None) is None and read_plan({}) is None


def test_a_plan_read_back_states_only_the_engine_settings_it_stated() -> None:
    # an SGLang plan that leaves the memory share to SGLang: read back from its JSON, its
    # command still leaves it (a full dump read back stated every field, and the command then
    # passed --mem-fraction-static 0.9, vLLM's default, where SGLang's own was meant)
    sglang = PLAN.model_copy(update={"engine": EngineConfig(engine="sglang", max_num_seqs=64)})
    back = read_plan(json.loads(json.dumps(sglang.model_dump(mode="json"))))
    assert back is not None and back == sglang
    assert back.engine.model_fields_set == {"engine", "max_num_seqs"}
    command = launch_command(back)
    assert "--mem-fraction-static" not in command and "--max-running-requests 64" in command
    assert back.scenario().gpu_memory_utilization is None  # predicted at SGLang's default
    # a share the plan states (a raised one) is kept through the round trip
    raised = sglang.model_copy(
        update={"engine": EngineConfig(engine="sglang", gpu_memory_utilization=0.93)}
    )
    again = read_plan(json.loads(json.dumps(raised.model_dump(mode="json"))))
    assert again is not None and "--mem-fraction-static 0.93" in launch_command(again)


def test_its_scenario_carries_the_distributions_load_and_engine() -> None:
    scenario = PLAN.scenario(seed=3)
    assert scenario.input_dist == PLAN.workload.input_len  # type: ignore[union-attr]
    assert (scenario.load, scenario.request_rate, scenario.num_requests) == ("rate", 3.5, 160)
    assert (scenario.prefix_share, scenario.seed, scenario.max_model_len) == (0.25, 3, 6000)
    assert scenario.gpus == 2 and scenario.kv_cache_dtype == "auto"
    closed = PLAN.scenario(load=Load.closed_loop(8, 32))
    assert (closed.load, closed.concurrency, closed.request_rate) == ("concurrency", 8, None)
    with pytest.raises(InvalidInputError, match="workload"):
        Plan(model=MODEL, gpu="L4").scenario()


def test_a_flat_plan_of_an_older_run_file_is_read() -> None:
    flat = {"engine": "vllm", "engine_version": "0.10.0", "model": MODEL, "gpu": "L40S",
            "tp": 4, "pp": 1, "num_gpus": 4, "instance": "g6e.12xlarge", "nodes": 1,
            "max_num_seqs": 64, "kv_cache_dtype": "fp8", "enable_prefix_caching": False,
            "label": "g6e.12xlarge TP4 PP1 bf16",
            "verification": {"endpoint": "url", "slowdown": 1.0, "faults": {}}}  # fmt: skip
    plan = read_plan(flat)
    assert plan is not None
    assert (plan.gpu, plan.tp, plan.instance) == ("L40S", 4, "g6e.12xlarge")
    assert (plan.engine.version, plan.engine.max_num_seqs, plan.engine.kv_cache_dtype) == (
        "0.10.0", 64, "fp8",
    )  # fmt: skip
    assert plan.verification is not None and plan.verification.endpoint == "url"


@pytest.mark.parametrize(
    ("stored", "field"),
    [
        ({"model": MODEL, "gpu": "L4", "tp": 0}, "plan.tp"),
        ({"model": MODEL, "gpu": "L4", "gpu_memory_utilization": 2.0}, "plan.engine"),
        ({"model": MODEL}, "plan.gpu"),
        ({"model": MODEL, "gpu": "L4", "engine": {"engine": "vllm"}, "load": {"kind": "rate"}},
         "plan.load"),
    ],
)  # fmt: skip
def test_a_bad_stored_plan_names_the_field(stored: dict, field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        read_plan(stored)
    assert info.value.field.startswith(field)


def test_a_load_names_what_it_lacks() -> None:
    with pytest.raises(ValueError, match="request_rate"):
        Load(kind="rate")
    with pytest.raises(ValueError, match="concurrency"):
        Load(kind="offline_batch")
    assert Load.closed_loop(30, 30).scenario_fields()["load"] == "concurrency"


def test_the_flat_view_of_a_typed_plan() -> None:
    flat = flat_plan(PLAN.model_dump(mode="json"))
    assert flat is not None
    assert (flat["engine"], flat["gpu"], flat["tp"], flat["num_gpus"]) == ("vllm", "H100-SXM", 2, 2)
    assert (flat["max_num_seqs"], flat["max_model_len"]) == (256, 6000)
    assert flat["verification"]["endpoint"] == "simulated"
    old = {"engine": "vllm", "model": MODEL, "gpu": "L4", "usd_per_hour": 4.0}
    assert flat_plan(old) == old and flat_plan(None) is None
    assert plan_label(old) == "L4 TP1 PP1 bf16" == plan_label(Plan(model=MODEL, gpu="L4"))
