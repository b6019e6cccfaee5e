"""Every model of the embedded catalog plans and predicts through the CLI (issue 28), and the 2026
models have feasible layouts exactly on the GPUs whose memory can hold them.

One small scenario a model: ``python -m planner recommend`` restricted to one 8 x B200 instance
at FP8 (the one instance type that holds every catalog model, Kimi-K2's 1T parameters
included, on one node), then ``python -m planner predict`` of the layout it recommends. Both run
in-process on the session's fitted model (the ``model`` fixture), never fitting per test.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from planner.catalog import Catalog
from planner.cli import main
from planner.engine import EngineConfig
from planner.layouts import enumerate_layouts
from planner.memory import weight_bytes
from planner.perf.model import PerformanceModel

MODELS_DIR = Path(__file__).resolve().parents[3] / "data" / "models"
CATALOG_MODELS = sorted(
    json.loads(path.read_text(encoding="utf-8"))["_servewise"]["hf_id"]
    for path in MODELS_DIR.glob("*.json")
)
PLAN_INSTANCE = "p6-b200.48xlarge"
PREDICT_HEADER = (
    "model,engine,precision,gpu,num_gpus,tp,pp,data_parallel_size,enable_expert_parallel,"
    "input_len,output_len,load,concurrency,instance,nodes"
)

MODELS_2026 = (
    "moonshotai/Kimi-K2-Instruct",
    "moonshotai/Kimi-K2.5",
    "zai-org/GLM-5",
    "MiniMaxAI/MiniMax-M2.5",
    "Qwen/Qwen3.5-397B-A17B",
    "Qwen/Qwen3-Next-80B-A3B-Thinking",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "nvidia/DeepSeek-V3.1-NVFP4",
)


def test_the_catalog_models_are_listed_from_the_files() -> None:
    assert len(CATALOG_MODELS) >= 39 and set(MODELS_2026) <= set(CATALOG_MODELS)


@pytest.mark.parametrize("hf_id", CATALOG_MODELS)
def test_every_catalog_model_plans_and_its_plan_predicts(
    hf_id: str,
    model: PerformanceModel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["recommend", "--model", hf_id, "--input-len", "1000", "--output-len", "200"]
    argv += ["--rate", "0.5", "--instance", PLAN_INSTANCE, "--precision", "fp8"]
    assert main([*argv, "--max-nodes", "1", "--top", "1", "--json"]) == 0
    ranked = json.loads(capsys.readouterr().out)["ranked"]
    assert ranked, f"no configuration for {hf_id} on {PLAN_INSTANCE}"
    best = ranked[0]
    assert best["vllm_command"].startswith(f"vllm serve {hf_id} ")
    assert best["pred_tpot_ms_p99"] > 0

    gpus = best["tp"] * best["pp"] * best["attention_dp"]
    row = [hf_id, "vllm", "fp8", best["gpu"], gpus, best["tp"], best["pp"], best["attention_dp"]]
    row += [str(best["expert_parallel"]).lower(), 1000, 200, "concurrency", 4, PLAN_INSTANCE, 1]
    source, out = tmp_path / "in.csv", tmp_path / "out.csv"
    source.write_text(PREDICT_HEADER + "\n" + ",".join(map(str, row)) + "\n", encoding="utf-8")
    assert main(["predict", "--scenarios", str(source), "--out", str(out), "--public-only"]) == 0
    (predicted,) = csv.DictReader(out.open(encoding="utf-8"))
    assert predicted["pred_error"] == ""
    assert float(predicted["pred_output_tok_per_s"]) > 0
    assert float(predicted["pred_ttft_ms_p50"]) > 0


def _largest_instance_per_gpu(catalog: Catalog) -> dict[str, str]:
    """For each GPU, an instance with the most of it, one that states its network bandwidth
    between instances (a layout over two needs it) before one that does not, then by name."""
    best: dict[str, str] = {}
    for name in sorted(catalog.instances):
        instance = catalog.instances[name]
        held = best.get(instance.gpu_id)
        key = (instance.gpus, instance.network_gbps is not None)
        if held is None or key > (
            catalog.instances[held].gpus,
            catalog.instances[held].network_gbps is not None,
        ):
            best[instance.gpu_id] = name
    return best


@pytest.mark.parametrize("hf_id", MODELS_2026)
def test_2026_models_fit_exactly_where_their_weights_fit(catalog: Catalog, hf_id: str) -> None:
    """At BF16 on one or two of each GPU's largest instance (one where the catalog has no
    network figure to span two), an 8k context: a feasible layout exists wherever the weights
    take under 70% of those GPUs' memory and none where they take more than all of it."""
    card = catalog.model(hf_id)
    weights = weight_bytes(card, "bf16")
    engine = EngineConfig(max_model_len=8192)
    judged = {True: 0, False: 0}
    for gpu_id, name in _largest_instance_per_gpu(catalog).items():
        instance, gpu = catalog.instances[name], catalog.gpu(gpu_id)
        nodes = [1, 2] if instance.network_gbps is not None else [1]
        memory = len(nodes) * instance.gpus * gpu.memory_gb * 1e9
        if 0.7 * memory > weights or weights > memory:
            layouts = enumerate_layouts(
                catalog, card, instances=[name], nodes=nodes, precisions=["bf16"], engine=engine
            )
            feasible = any(c.feasible for c in layouts)
            assert feasible == (weights < memory), (gpu_id, name, weights / memory)
            judged[feasible] += 1
    assert judged[True] >= 1 and judged[False] >= 1  # neither holds nowhere nor everywhere
