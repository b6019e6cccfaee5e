"""The embedded catalog loads and validates; broken files fail naming file, row and field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from planner.catalog import EMBEDDED_DATA_DIR, Catalog, load_catalog, model_card_from_config
from planner.errors import CatalogError, UnknownEntityError

REQUIRED_GPUS = [
    "A10G",
    "L4",
    "L40S",
    "A100-40GB-SXM",
    "A100-80GB-SXM",
    "A100-80GB-PCIe",
    "H100-SXM",
    "H100-PCIe",
    "H200",
    "GH200",
    "B200",
    "GB200",
    "MI300X",
    "MI325X",
    "MI355X",
    "RTXPRO6000",
    "B300",
    "GB300",
]
REQUIRED_MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-405B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
    "mistralai/Mistral-7B-v0.1",
    "mistralai/Mixtral-8x7B-v0.1",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "deepseek-ai/DeepSeek-V3",
    "openai/gpt-oss-20b",
    "openai/gpt-oss-120b",
]


def test_every_required_gpu_and_model_is_present(catalog: Catalog) -> None:
    assert set(REQUIRED_GPUS) <= set(catalog.gpus)
    for hf_id in REQUIRED_MODELS:
        assert catalog.model(hf_id).hf_id.lower() == hf_id.lower()


def test_every_row_has_source_and_date(catalog: Catalog) -> None:
    for record in [*catalog.gpus.values(), *catalog.instances.values(), *catalog.prices]:
        assert record.source.strip()
        assert record.as_of.year >= 2023
    for card in catalog.models.values():
        assert card.source.strip() and card.as_of.year >= 2023


def test_every_scale_up_gpu_states_its_link_bandwidth(catalog: Catalog) -> None:
    """A GPU on NVLink or Infinity Fabric without its bandwidth would be planned at a fallback
    (600 GB/s) that no datasheet gave it: the MI325X was, until its MI300X link rate was
    entered (data/gpus.csv notes why)."""
    for gpu in catalog.gpus.values():
        if gpu.interconnect in ("nvlink", "infinity_fabric"):
            assert gpu.interconnect_bw_gbps, gpu.gpu_id
    mi325x, mi300x = catalog.gpus["MI325X"], catalog.gpus["MI300X"]
    assert mi325x.interconnect_bw_gbps == mi300x.interconnect_bw_gbps


def test_required_instance_families_have_prices(catalog: Catalog) -> None:
    families = ["g5.", "g6.", "g6e.", "p4d.", "p4de.", "p5.", "p5e.", "p5en.", "p6-b200."]
    for family in families:
        names = [n for n in catalog.instances if n.startswith(family)]
        assert names, family
        assert any(catalog.prices_for(n) for n in names), family
    providers = {i.provider for i in catalog.instances.values()}
    assert {"aws", "gcp", "azure"} <= providers
    assert len(providers - {"aws", "gcp", "azure"}) >= 2


def test_figure_one_prices_are_the_aws_list_prices(catalog: Catalog) -> None:
    assert catalog.price("g6e.2xlarge", "us-east-1").usd_per_hour == pytest.approx(2.24208)
    assert catalog.price("g5.2xlarge", "us-east-1").usd_per_hour == pytest.approx(1.212)
    assert catalog.price("g6.2xlarge", "us-east-1").usd_per_hour == pytest.approx(0.9776)


def test_an_instances_prices_follow_the_price_list(catalog: Catalog) -> None:
    """``prices_for`` reads an index by instance: a price added to the list, or a list put in
    its place, is seen at once."""
    own = Catalog(gpus=catalog.gpus, instances=catalog.instances, prices=list(catalog.prices))
    listed = own.prices_for("g6e.2xlarge", region="us-east-1", pricing="on_demand")
    assert [p.usd_per_hour for p in listed] == pytest.approx([2.24208])
    own.prices.append(listed[0].model_copy(update={"region": "eu-north-1"}))
    assert {p.region for p in own.prices_for("g6e.2xlarge", pricing="on_demand")} >= {
        "us-east-1",
        "eu-north-1",
    }
    own.prices = [p for p in own.prices if p.instance != "g6e.2xlarge"]
    assert own.prices_for("g6e.2xlarge") == []
    every = [p for p in catalog.prices if p.instance == "p5.48xlarge" and p.pricing == "spot"]
    assert catalog.prices_for("p5.48xlarge", pricing="spot") == every


def test_measured_results_are_copied_with_sources(catalog: Catalog) -> None:
    # 526 rows of measured_results.csv, then Scicom's 124 vLLM runs (measured_benchmaq.csv),
    # CloudRift's 44 (measured_cloudrift.csv), 5 vLLM
    # runs from vllm-project GitHub pages
    # (measured_github_vllm.csv), GPUStack's 200 (measured_gpustack.csv), the 281
    # of four more publishers (measured_holdout2.csv), 20 MLPerf Inference v4.0 / v4.1 / v5.0
    # results (measured_mlperf.csv), 15 AMD Instinct runs (measured_rocm.csv)
    # and the SGLang cookbook's 57
    # (measured_sglang_cookbook.csv: 17 from sglang's docs_new pages, 40 from the sgl-cookbook
    # repository's pages), then 29 speculative-decoding rows
    # (measured_speculative.csv: GPUStack's 4 runs, the AMD MTP blog's 5 pairs, SGLang PR
    # 10281's pair, vLLM issue 20780's six EAGLE-3 runs and their baseline, TensorRT-LLM tech
    # blog 1's MTP sweep: 5 runs and their baseline), tenstorrent/tt-inference-server issue
    # 356's 12 DeepSeek-R1-0528 runs on H100 (measured_tenstorrent.csv), then GPUStack's
    # 21 tuning runs (measured_tuning_gpustack.csv), dstack's 18
    # vLLM Llama-3.1-405B runs on H100 (measured_vllm_dstack.csv) and the 43 Tandemn runs its
    # reference table had not converted (measured_vllm_tandemn.csv)
    assert len(catalog.measured) == 1395
    assert all(m.source for m in catalog.measured)
    assert all(
        m.source.startswith("Scicom-AI-Enterprise-Organization/llm-benchmaq ")
        for m in catalog.measured[526:650]
    )
    assert all(m.source.startswith("cloudrift-ai/") for m in catalog.measured[650:694])
    gpustack = [
        m
        for m in catalog.measured
        if m.source.startswith("gpustack/gpustack") and m.spec_method is None
    ]
    assert catalog.measured[699:899] == gpustack[:200]
    assert len(gpustack) == 221 and catalog.measured[1313:1334] == gpustack[200:]
    holdout2 = catalog.measured[899:1180]
    publishers = {m.source.split()[0] for m in holdout2}
    assert publishers == {
        "dstackai/benchmarks",
        "datacrunch-research/h200-benchmarks",
        "NVIDIA/TensorRT-LLM",
        "ROCm/rocm-blogs",
    }
    assert all("reference table" in (m.source_ref or "") for m in holdout2)
    assert sum(1 for m in holdout2 if m.ttft_ms) == 64
    mlperf = catalog.measured[1180:1200]
    assert {m.source.split()[0] for m in mlperf} == {
        "mlcommons/inference_results_v4.0",
        "mlcommons/inference_results_v4.1",
        "ntuhpc/mlperf_inference_results_v5.0",
    }
    rocm = catalog.measured[1200:1215]
    assert {m.gpu for m in rocm} == {"MI300X", "MI355X"}
    cookbook = catalog.measured[1215:1272]
    speculative = catalog.measured[1272:1301]
    assert [m.spec_method for m in speculative[:4]] == ["mtp", "mtp", "mtp", "eagle3"]
    # the AMD post's and SGLang PR 10281's rows: each baseline, then its MTP run
    assert [m.spec_method for m in speculative[4:16]] == [None, "mtp"] * 6
    # vLLM issue 20780: one baseline, then EAGLE-3 at 2-7 draft tokens
    assert [m.spec_method for m in speculative[16:23]] == [None] + ["eagle3"] * 6
    assert [m.num_spec_tokens for m in speculative[17:23]] == [2, 3, 4, 5, 6, 7]
    # TensorRT-LLM's tech blog 1: DeepSeek-R1 on 8 x B200 without MTP, then 1-5 MTP steps
    trtllm = speculative[23:]
    assert {m.engine for m in trtllm} == {"tensorrt-llm"} and {m.gpu for m in trtllm} == {"B200"}
    assert [m.spec_method for m in trtllm] == [None] + ["mtp"] * 5
    assert [m.num_spec_tokens for m in trtllm[1:]] == [1, 2, 3, 4, 5]
    assert all(m.source.startswith("sgl-project/sgl") and m.engine == "sglang" for m in cookbook)
    assert {m.gpu for m in cookbook} == {"B200", "H100-SXM", "MI300X", "GB300"}
    # every cookbook row carries bench_serving's P99 TTFT and P99 TPOT but the MiniMax-M2.7
    # page's GB300 pair, whose blocks print none
    assert all(m.ttft_p99_ms and m.tpot_p99_ms for m in cookbook if m.gpu != "GB300")
    assert [m.source.split()[0] for m in catalog.measured[694:699]] == ["vllm-project/recipes"] + [
        "vllm-project/vllm"
    ] * 4
    assert {m.source for m in catalog.measured[1301:1313]} == {
        "tenstorrent/tt-inference-server issue 356"
    }
    assert sum(1 for m in gpustack[:200] if catalog.model(m.model).architecture.is_moe) == 143
    brief = [
        m
        for m in catalog.measured
        if m.instance == "g6e.12xlarge"
        and m.tp == 4
        and m.input_len == 2048
        and m.output_len == 512
        and m.total_tok_per_s
        and abs(m.total_tok_per_s - 531.86) < 0.01
    ]
    assert len(brief) == 1


def test_unknown_names_raise_typed_errors_that_list_what_is_allowed(catalog: Catalog) -> None:
    with pytest.raises(UnknownEntityError, match="gpu='H300' is not allowed: one of"):
        catalog.gpu("H300")
    with pytest.raises(UnknownEntityError, match="model="):
        catalog.model("acme/none")
    assert catalog.model("META-LLAMA/llama-3.1-70b-instruct").hf_id == (
        "meta-llama/Llama-3.1-70B-Instruct"
    )


def _copy_data(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(EMBEDDED_DATA_DIR, target)
    return target


def _rewrite(path: Path, transform) -> None:  # type: ignore[no-untyped-def]
    lines = path.read_text().splitlines()
    path.write_text("\n".join(transform(lines)) + "\n")


def test_missing_column_names_file_and_field(tmp_path: Path) -> None:
    data = _copy_data(tmp_path)

    def drop_bandwidth(lines: list[str]) -> list[str]:
        header = lines[0].split(",")
        idx = header.index("memory_bw_gbps")
        import csv
        import io

        out = []
        for row in csv.reader(io.StringIO("\n".join(lines))):
            del row[idx]
            buf = io.StringIO()
            csv.writer(buf).writerow(row)
            out.append(buf.getvalue().rstrip("\r\n"))
        return out

    _rewrite(data / "gpus.csv", drop_bandwidth)
    with pytest.raises(CatalogError, match=r"gpus.csv, row 1, field 'memory_bw_gbps'"):
        load_catalog(data)


def test_negative_price_names_file_row_and_field(tmp_path: Path) -> None:
    data = _copy_data(tmp_path)
    prices = (data / "prices.csv").read_text().splitlines()
    header = prices[0].split(",")
    assert header[:5] == ["provider", "instance", "region", "pricing", "usd_per_hour"]
    cells = prices[3].split(",")
    cells[4] = "-1.5"
    prices[3] = ",".join(cells)
    (data / "prices.csv").write_text("\n".join(prices) + "\n")
    with pytest.raises(CatalogError) as err:
        load_catalog(data)
    message = str(err.value)
    assert "prices.csv, row 4, field 'usd_per_hour'" in message
    assert "-1.5" in message


def test_instance_with_unknown_gpu_names_file_row_and_field(tmp_path: Path) -> None:
    data = _copy_data(tmp_path)
    lines = (data / "instances.csv").read_text().splitlines()
    header = lines[0].split(",")
    idx = header.index("gpu_id")
    cells = lines[1].split(",")
    cells[idx] = "TPU-v9"
    lines[1] = ",".join(cells)
    (data / "instances.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(
        CatalogError, match=r"instances.csv, row 2, field 'gpu_id': unknown GPU 'TPU-v9'"
    ):
        load_catalog(data)


def test_user_files_override_and_extend_the_embedded_catalog(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "prices.csv").write_text(
        "provider,instance,region,pricing,usd_per_hour,source,as_of,notes\n"
        "aws,g6e.2xlarge,us-east-1,on_demand,1.5,our negotiated rate,2026-11-01,\n"
    )
    catalog = load_catalog(user_dir=user)
    assert catalog.price("g6e.2xlarge", "us-east-1").usd_per_hour == 1.5


def test_user_config_json_becomes_a_model(tmp_path: Path) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
        "_name_or_path": "acme/tiny-llama",
    }
    card = model_card_from_config(config)
    assert card.hf_id == "acme/tiny-llama" and card.origin == "user"
    assert card.architecture.total_params == pytest.approx(1.236e9, rel=0.01)
    with pytest.raises(CatalogError, match="'num_hidden_layers'"):
        model_card_from_config({**config, "num_hidden_layers": "many"})


def test_broken_model_json_names_the_file(tmp_path: Path) -> None:
    data = _copy_data(tmp_path)
    (data / "models" / "acme__broken.json").write_text('{"hidden_size": 4096,')
    with pytest.raises(CatalogError, match=r"acme__broken\.json"):
        load_catalog(data)
    (data / "models" / "acme__broken.json").write_text(json.dumps({"hidden_size": 4096}))
    with pytest.raises(
        CatalogError, match=r"acme__broken\.json: config\.json field 'num_hidden_layers'"
    ):
        load_catalog(data)


PUBLISHED_PARAMS_B = {
    # hf_id: (total, active or None for dense models), as the model cards state them
    "meta-llama/Llama-3.1-70B-Instruct": (70.6, None),
    "mistralai/Mixtral-8x7B-v0.1": (46.7, 12.9),
    "Qwen/Qwen3-235B-A22B": (235.0, 22.0),
    "openai/gpt-oss-120b": (117.0, 5.1),
    "deepseek-ai/DeepSeek-V3": (671.0, 37.0),
    # the model cards' active counts take the embeddings in differently; totals only
    "Qwen/Qwen3-30B-A3B": (30.5, None),
    # Llama 4: MoE every second layer with one shared expert, dense layers in between
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": (400.0, None),
}


@pytest.mark.parametrize("hf_id", sorted(PUBLISHED_PARAMS_B))
def test_computed_parameter_counts_match_published_within_two_percent(
    catalog: Catalog, hf_id: str
) -> None:
    card = catalog.model(hf_id)
    total, active = PUBLISHED_PARAMS_B[hf_id]
    assert card.published_total_params_b == pytest.approx(total, rel=0.01)
    assert card.architecture.total_params / 1e9 == pytest.approx(total, rel=0.02)
    if active is not None:
        assert card.architecture.active_params / 1e9 == pytest.approx(active, rel=0.02)
