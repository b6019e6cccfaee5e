"""GPU, model and engine names as people write them (``planner.catalog.names``): one meaning
resolves to the catalog's id, two or none are refused with the likely ones named."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pytest

from planner.catalog import EMBEDDED_DATA_DIR, Catalog, load_catalog
from planner.catalog.names import NVIDIA_SMI_NAMES, close_names, gpu_candidates
from planner.cli import build_parser
from planner.commands.recommend import build_request, canonical_request
from planner.engine import canonical_engine, check_engine
from planner.errors import CatalogError, InvalidInputError, UnknownEntityError
from planner.perf.calibration import version_key
from planner.perf.scenario import Scenario

#: how GPUs are named in benchmark write-ups, nvidia-smi and vendor pages -> catalog id
WRITTEN_GPUS = {
    "h200": "H200",
    "H200-SXM": "H200",
    "H200 SXM 141GB": "H200",
    "NVIDIA H200": "H200",
    "H100 SXM5": "H100-SXM",
    "NVIDIA H100 80GB HBM3": "H100-SXM",
    "NVIDIA H100 PCIe": "H100-PCIe",
    "NVIDIA A100-SXM4-80GB": "A100-80GB-SXM",
    "A100 80GB PCIe": "A100-80GB-PCIe",
    "HGX B200": "B200",
    "B200-SXM": "B200",
    "NVIDIA B300 SXM6 AC": "B300",
    "AMD Instinct MI300X": "MI300X",
    "MI300X OAM": "MI300X",
    "mi355x": "MI355X",
    "RTX PRO 6000": "RTXPRO6000",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "RTXPRO6000",
}


@pytest.mark.parametrize(("written", "gpu_id"), sorted(WRITTEN_GPUS.items()))
def test_a_gpu_name_that_means_one_gpu_resolves(
    catalog: Catalog, written: str, gpu_id: str
) -> None:
    assert catalog.gpu(written).gpu_id == gpu_id


def test_every_nvidia_smi_name_resolves_to_its_own_gpu(catalog: Catalog) -> None:
    for gpu_id, name in NVIDIA_SMI_NAMES.items():
        assert catalog.gpu(name).gpu_id == gpu_id
        assert catalog.gpu(name.replace(" ", "-")).gpu_id == gpu_id  # the k8s label form


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("H100", {"H100-SXM", "H100-PCIe"}),  # the PCIe card has 60% of the SXM's bandwidth
        ("A100 80GB", {"A100-80GB-SXM", "A100-80GB-PCIe"}),
        ("A100", {"A100-40GB-SXM", "A100-80GB-SXM", "A100-80GB-PCIe"}),
    ],
)
def test_a_name_that_could_mean_two_gpus_is_refused_naming_both(
    catalog: Catalog, written: str, meant: set[str]
) -> None:
    assert set(gpu_candidates(written, catalog.gpus)) == meant
    with pytest.raises(UnknownEntityError) as refused:
        catalog.gpu(written)
    message = str(refused.value)
    assert message.startswith(f"gpu={written!r} is not allowed: one of ")
    assert "did you mean" in message and all(gpu in message for gpu in meant)


@pytest.mark.parametrize("written", ["H200 PCIe", "H100 94GB", "MI300X PCIe", "H100 HBM2e SXM"])
def test_a_stated_form_factor_or_memory_must_agree_with_the_catalog(
    catalog: Catalog, written: str
) -> None:
    # an H200 NVL or an H100 NVL is another card than the catalog's SXM ones
    assert gpu_candidates(written, catalog.gpus) == []
    with pytest.raises(UnknownEntityError) as refused:
        catalog.gpu(written)
    # the product's own cards are offered, whatever the name said of them
    product = written.split()[0]
    assert f"did you mean {product}" in str(refused.value)


def test_an_unknown_gpu_names_the_closest_spellings(catalog: Catalog) -> None:
    with pytest.raises(UnknownEntityError, match=r"did you mean L40S or L4\?"):
        catalog.gpu("L40")
    assert close_names("MI325", catalog.gpus)[0] == "MI325X"
    assert close_names("Z9000", catalog.gpus) == []


def test_a_model_resolves_by_its_hugging_face_id_or_its_last_part(catalog: Catalog) -> None:
    full = "deepseek-ai/DeepSeek-R1-0528"
    assert catalog.model("DeepSeek-R1-0528").hf_id == full
    assert catalog.model("deepseek-r1-0528").hf_id == full
    assert catalog.model("DEEPSEEK-AI/deepseek-r1-0528").hf_id == full
    # another organisation's id is not matched by its last part
    with pytest.raises(UnknownEntityError, match=r"did you mean deepseek-ai/DeepSeek-R1-0528"):
        catalog.model("someone/DeepSeek-R1-0528")
    with pytest.raises(UnknownEntityError, match=r"meta-llama/Llama-3\.1-70B-Instruct"):
        catalog.model("Llama-3.1-70B")


def test_tensorrt_llm_is_accepted_under_its_short_names() -> None:
    for written in ("trt", "TRT-LLM", "trtllm", "TensorRT-LLM", "tensorrt_llm"):
        assert check_engine(written) == "trtllm"
        # the same engine and release as "tensorrt-llm", not a packaged variant of its own
        scenario = Scenario(
            engine=written, engine_version="1.0.0", model="m", gpu="g", input_len=1, output_len=1,
            concurrency=1,
        )  # fmt: skip
        assert version_key(scenario) == "trtllm:1.0"
    assert canonical_engine(" NIM ") == "nim-tensorrt-llm"
    with pytest.raises(InvalidInputError, match="engine='tgi'"):
        check_engine("tgi")


def _recommend_args(*gpus: str) -> argparse.Namespace:
    argv = ["recommend", "--model", "Llama-3.1-70B-Instruct", "--input-len", "1024"]
    argv += ["--output-len", "256", "--concurrency", "8", "--slo-ttft-p99-ms", "5000"]
    argv += ["--slo-tpot-p99-ms", "200"]
    for gpu in gpus:
        argv += ["--gpu", gpu]
    return build_parser("recommend").parse_args(argv)


def test_recommend_takes_gpu_and_model_names_as_people_write_them(catalog: Catalog) -> None:
    written = _recommend_args("NVIDIA H200", "h200", "NVIDIA A100-SXM4-80GB")
    request = canonical_request(build_request(written), catalog)
    assert request.model == "meta-llama/Llama-3.1-70B-Instruct"
    assert request.search.gpus == ("H200", "A100-80GB-SXM")
    with pytest.raises(InvalidInputError) as refused:
        canonical_request(build_request(_recommend_args("H100")), catalog)
    assert refused.value.field == "--gpu"
    assert "did you mean H100-SXM or H100-PCIe" in str(refused.value)


def _user_instance(tmp_path: Path, gpu_id: str) -> Path:
    """A user catalog folder with one instance row (a copy of the first embedded row under a
    new name) whose gpu_id cell is ``gpu_id``."""
    embedded = (EMBEDDED_DATA_DIR / "instances.csv").read_text(encoding="utf-8").splitlines()
    header = embedded[0].split(",")
    row = next(csv.reader([embedded[1]]))
    row[header.index("instance")] = "our-rack-1"
    row[header.index("gpu_id")] = gpu_id
    user = tmp_path / "user"
    user.mkdir(parents=True)
    with (user / "instances.csv").open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([header, row])
    return user


def test_a_user_instance_may_name_its_gpu_as_nvidia_smi_does(tmp_path: Path) -> None:
    catalog = load_catalog(user_dir=_user_instance(tmp_path, "NVIDIA H100 80GB HBM3"))
    assert catalog.instance("our-rack-1").gpu_id == "H100-SXM"
    with pytest.raises(CatalogError) as refused:
        load_catalog(user_dir=_user_instance(tmp_path / "two", "H100"))
    message = str(refused.value)
    assert message.startswith("instances.csv, row 2, field 'gpu_id': unknown GPU 'H100'")
    assert "did you mean H100-SXM or H100-PCIe?" in message
