"""Deployment files rendered from real recommendations, checked by the ecosystem's validators.

Scenarios: the brief's (Llama-3.1-70B, 2,048 in / 512 out, 2 req/s average, 4 at peak, p99 TTFT
3 s and TPOT 100 ms) on AWS instances where its best plan pipelines over two p5.4xlarge; the
same on RunPod and g7e (one instance a group); a multi-replica spot plan (Llama-3.1-8B at 10 to
30 req/s); and an AMD MI355X plan. The searches are narrowed to a few instance types so the
module runs in seconds; the full-catalog check is ``python -m planner recommend ... --emit``.
"""

from __future__ import annotations

import shlex
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from planner.catalog import Catalog
from planner.cli import main
from planner.deploy import (
    TARGETS,
    DeploySpec,
    cold_start_estimate,
    render,
    spec_from_recommendation,
    write_bundle,
    zip_bytes,
)
from planner.deploy.kubernetes import MANAGED_K8S, WAITING_METRIC
from planner.errors import InvalidInputError
from planner.recommend import (
    Demand,
    Recommendation,
    RecommendRequest,
    SearchSpace,
    Slo,
    perf_predictor,
    recommend,
)
from tests.planner.deploy.validators import load_skypilot_tasks, validate_kubernetes

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
BRIEF = {
    "model": LLAMA_70B,
    "input_len": 2048,
    "output_len": 512,
    "demand": Demand(avg_rate_rps=2, peak_rate_rps=4),
    "slo": Slo(ttft_p99_ms=3000, tpot_p99_ms=100),
}


def _plan(catalog: Catalog, request: RecommendRequest) -> Recommendation:
    result = recommend(catalog, request, perf_predictor(catalog, request))
    assert result.best is not None, [r.reason for r in result.rejected[:5]]
    return result.best


@pytest.fixture(scope="module")
def plans(catalog: Catalog) -> dict[str, tuple[Recommendation, RecommendRequest]]:
    requests = {
        "brief-aws": RecommendRequest(
            **BRIEF,
            search=SearchSpace(instances=("p5.4xlarge", "g6e.12xlarge", "g6e.48xlarge")),
        ),
        "brief-one-instance": RecommendRequest(
            **BRIEF,
            search=SearchSpace(
                instances=("2x_H100-SXM_SECURE", "g7e.24xlarge", "g7e.12xlarge"), max_nodes=1
            ),
        ),
        "spot-8b": RecommendRequest(
            model="meta-llama/Llama-3.1-8B-Instruct",
            input_len=1024,
            output_len=256,
            demand=Demand(avg_rate_rps=10, peak_rate_rps=30),
            slo=Slo(ttft_p99_ms=2000, tpot_p99_ms=60),
            search=SearchSpace(
                instances=("g6e.xlarge", "g6.xlarge", "g7e.2xlarge"), pricing="spot", max_nodes=1
            ),
        ),
        "mi355x": RecommendRequest(
            **BRIEF, search=SearchSpace(instances=("BM.GPU.MI355X.8",), max_nodes=1)
        ),
    }
    return {name: (_plan(catalog, request), request) for name, request in requests.items()}


@pytest.fixture(scope="module")
def specs(
    plans: dict[str, tuple[Recommendation, RecommendRequest]], catalog: Catalog
) -> dict[str, DeploySpec]:
    return {
        name: spec_from_recommendation(rec, request, catalog)
        for name, (rec, request) in plans.items()
    }


def test_the_spec_carries_the_plan(
    plans: dict[str, tuple[Recommendation, RecommendRequest]], specs: dict[str, DeploySpec]
) -> None:
    rec, _ = plans["brief-aws"]
    spec = specs["brief-aws"]
    assert (spec.instance, spec.nodes_per_group) == (rec.instance, rec.nodes)
    assert spec.nodes_per_group == 2  # this plan pipelines over two instances a group
    assert spec.groups * spec.nodes_per_group == rec.instances_total
    # the demand curve (2 req/s average, 4 at peak) sizes the minimum below the planned groups
    assert 1 <= spec.min_groups < spec.groups
    spot = specs["spot-8b"]
    assert spot.spot and spot.groups >= 3 and spot.min_groups < spot.groups
    assert spot.group_rps == pytest.approx(plans["spot-8b"][0].max_rps_per_replica)
    # 70B parameters in a bf16 checkpoint (fp8 is quantised at load): ~141 GB to download
    assert spec.checkpoint_bytes == pytest.approx(141e9, rel=0.01)


@pytest.mark.parametrize("name", ["brief-aws", "brief-one-instance", "spot-8b", "mi355x"])
def test_kubernetes_manifests_validate_and_scale_on_waiting_requests(
    specs: dict[str, DeploySpec], name: str
) -> None:
    spec = specs[name]
    files = render(spec, "k8s")
    objects = {
        d["kind"]: d
        for text in files.values()
        if text.startswith("apiVersion")
        for d in validate_kubernetes(text)
    }
    workload = objects["Deployment" if spec.nodes_per_group == 1 else "LeaderWorkerSet"]
    assert workload["spec"]["replicas"] == spec.groups
    hpa = objects["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"]["kind"] == workload["kind"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (spec.min_groups, spec.groups)
    (metric,) = hpa["metrics"]
    assert metric["pods"]["metric"]["name"] == WAITING_METRIC == "vllm:num_requests_waiting"
    keda = objects["ScaledObject"]["spec"]
    assert WAITING_METRIC in keda["triggers"][0]["metadata"]["query"]
    assert keda["scaleTargetRef"] == hpa["scaleTargetRef"]
    templates = (
        [workload["spec"]["template"]]
        if spec.nodes_per_group == 1
        else [
            workload["spec"]["leaderWorkerTemplate"][k]
            for k in ("leaderTemplate", "workerTemplate")
        ]
    )
    serving = templates[0]["spec"]
    container = serving["containers"][0]
    resource = "nvidia.com/gpu" if spec.vendor == "nvidia" else "amd.com/gpu"
    assert container["resources"]["limits"][resource] == str(spec.gpus_per_node)
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/dev/shm", "/root/.cache/huggingface"} <= mounts
    selector = serving["nodeSelector"]
    if spec.provider in MANAGED_K8S:
        assert selector["node.kubernetes.io/instance-type"] == spec.instance
    else:  # RunPod: no managed Kubernetes naming its instances; the GPU still selects nodes
        assert selector["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    command = " ".join(container["command"] + container["args"])
    assert f"--tensor-parallel-size {spec.serve.tensor_parallel_size}" in command
    assert objects["Service"]["spec"]["ports"][0]["port"] == spec.port


def test_spot_and_gpu_selection_in_kubernetes(specs: dict[str, DeploySpec]) -> None:
    deployment = yaml.safe_load(render(specs["spot-8b"], "k8s")["deployment.yaml"])
    selector = deployment["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["eks.amazonaws.com/capacityType"] == "SPOT"
    assert "nvidia.com/gpu.product" in selector
    amd = yaml.safe_load(render(specs["mi355x"], "k8s")["deployment.yaml"])
    container = amd["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "vllm/vllm-openai-rocm:v0.27.1"
    assert "nvidia.com/gpu.product" not in amd["spec"]["template"]["spec"]["nodeSelector"]


def test_skypilot_task_and_service_load_with_skypilot(
    specs: dict[str, DeploySpec], catalog: Catalog, tmp_path: Path
) -> None:
    paths, expected = [], {}
    for name, spec in specs.items():
        files = render(spec, "skypilot")
        for file in ("task.yaml", "service.yaml"):
            path = tmp_path / name / file
            path.parent.mkdir(exist_ok=True)
            path.write_text(files[file], encoding="utf-8")
            paths.append(path)
            expected[str(path)] = (spec, file)
    loaded = load_skypilot_tasks(
        paths, tmp_path / "home", catalog, {s.instance for s in specs.values()}
    )
    for task in loaded:
        spec, file = expected[task["path"]]
        assert task["cloud"] == {"runpod": "runpod", "aws": "aws", "oci": "oci"}[spec.provider]
        assert (task["region"], task["instance_type"]) == (spec.region, spec.instance)
        assert task["use_spot"] is spec.spot
        assert task["disk_size"] == spec.disk_gb
        assert task["num_nodes"] == spec.nodes_per_group
        assert "vllm serve" in task["run"]
        if file == "service.yaml":
            assert task["readiness_path"] == "/health"
            assert task["min_replicas"] == spec.min_groups
            if spec.min_groups < spec.groups:
                assert task["max_replicas"] == spec.groups
                assert task["target_qps"] == pytest.approx(spec.group_rps, rel=1e-3)
        else:
            assert task["min_replicas"] is None  # plain task: no service
    assert len(loaded) == 2 * len(specs)


def test_launch_command_and_docker_run(specs: dict[str, DeploySpec]) -> None:
    one = render(specs["brief-one-instance"], "docker")
    spec = specs["brief-one-instance"]
    launch = one["launch.sh"].splitlines()[1]
    words = shlex.split(launch)
    assert words[:3] == ["vllm", "serve", LLAMA_70B]
    assert words[words.index("--tensor-parallel-size") + 1] == str(spec.serve.tensor_parallel_size)
    assert words[words.index("--max-model-len") + 1] == "2560"
    docker = one["docker-run.sh"]
    assert "--gpus all" in docker and "vllm/vllm-openai:v0.27.1" in docker
    assert '"$HOME/.cache/huggingface:/root/.cache/huggingface"' in docker
    assert shlex.split(docker.splitlines()[1].replace('"$HOME', '"/home/u'))[0] == "docker"
    multi = render(specs["brief-aws"], "docker")
    assert "--distributed-executor-backend ray" in multi["launch.sh"]
    assert "NODE_RANK" in multi["docker-run.sh"] and "--network host" in multi["docker-run.sh"]
    amd = render(specs["mi355x"], "docker")["docker-run.sh"]
    assert "--device /dev/kfd" in amd and "--gpus" not in amd
    assert "--data-parallel-size 2" in amd  # two replicas of TP2 x PP2 on the 8 GPUs


def test_every_target_has_a_readme_with_the_cold_start(specs: dict[str, DeploySpec]) -> None:
    spec = specs["brief-one-instance"]
    for target in TARGETS:
        files = render(spec, target)
        assert "Cold start: 141 GB of weights" in files["README.md"]
        archive = zipfile.ZipFile(BytesIO(zip_bytes(files, f"deploy-{target}")))
        assert sorted(archive.namelist()) == sorted(f"deploy-{target}/{f}" for f in files)
    with pytest.raises(InvalidInputError, match="target='helm'"):
        render(spec, "helm")


def test_cold_start_is_weights_over_bandwidth() -> None:
    estimate = cold_start_estimate(140e9, 100.0, disk_read_gb_per_s=2.0)
    assert estimate.download_s == pytest.approx(140e9 / 12.5e9)  # 100 Gbit/s = 12.5 GB/s
    assert estimate.load_s == pytest.approx(70.0)
    assert estimate.first_start_s == pytest.approx(11.2 + 70.0)
    assumed = cold_start_estimate(10e9, None)
    assert assumed.network_assumed and assumed.network_gbps == 10.0
    with pytest.raises(InvalidInputError, match="checkpoint_bytes"):
        cold_start_estimate(0, 10.0)


def test_a_group_that_does_not_add_up_is_refused(specs: dict[str, DeploySpec]) -> None:
    values: dict[str, Any] = specs["brief-one-instance"].model_dump()
    values["serve"]["engine"]["data_parallel_size"] = 3
    with pytest.raises(ValidationError, match="TP x PP x DP = the 2 GPUs of a group"):
        DeploySpec.model_validate(values)


def test_recommend_emit_writes_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "recommend",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--input-len",
        "1024",
        "--output-len",
        "256",
        "--rate",
        "10",
        "--peak-rate",
        "30",
        "--slo-ttft-p99-ms",
        "2000",
        "--slo-tpot-p99-ms",
        "60",
        "--instance",
        "g6e.xlarge",
        "--pricing",
        "spot",
        "--max-nodes",
        "1",
    ]
    out = tmp_path / "k8s"
    assert main([*args, "--emit", "k8s", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"Wrote {out}" in printed and "Cold start:" in printed
    documents = validate_kubernetes((out / "hpa.yaml").read_text(encoding="utf-8"))
    assert documents[0]["spec"]["metrics"][0]["pods"]["metric"]["name"] == WAITING_METRIC
    assert {p.name for p in out.iterdir()} >= {"deployment.yaml", "service.yaml", "README.md"}
    assert main([*args, "--emit", "docker", str(tmp_path / "docker")]) == 0
    assert (tmp_path / "docker" / "docker-run.sh").read_text().startswith("#!/bin/sh")
    assert write_bundle({"a.txt": "x"}, tmp_path / "plain") == [tmp_path / "plain" / "a.txt"]
