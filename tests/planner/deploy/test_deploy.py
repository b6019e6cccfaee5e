"""Deployment files rendered from the typed plans of real recommendations, on every engine,
checked by the ecosystem's validators.

Scenarios: the brief's (Llama-3.1-70B, 2,048 in / 512 out, 2 req/s average, 4 at peak, p99 TTFT
3 s and TPOT 100 ms) on AWS instances, where its best plan pipelines over two p5.4xlarge; the
same on RunPod and g7e (one instance a replica); a multi-replica spot plan (Llama-3.1-8B at 10
to 30 req/s); an AMD MI355X plan; an SGLang MoE plan (Qwen3-235B-A22B, attention data
parallelism over 4 ranks and expert parallelism on p5en.48xlarge) and a TensorRT-LLM plan of the
brief's scenario. The searches are narrowed to a few instance types so the module runs in
seconds; the full-catalog check is ``python -m planner recommend ... --emit``.
"""

from __future__ import annotations

import shlex
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.catalog import Catalog
from planner.cli import main
from planner.deploy import (
    TARGETS,
    DeploySpec,
    cold_start_estimate,
    engine_serving,
    render,
    spec_from_plan,
    write_bundle,
    zip_bytes,
)
from planner.deploy.engines import VLLM_RELEASE
from planner.deploy.kubernetes import MANAGED_K8S
from planner.deploy.launch import DEPLOY_FLAGS, LISTEN_HOST, engine_image
from planner.engine import EngineConfig
from planner.engine_command import engine_argv, engine_config_files, launch_command
from planner.errors import InvalidInputError
from planner.plan import Plan
from planner.recommend import (
    Demand,
    RecommendRequest,
    SearchSpace,
    Slo,
    perf_predictor,
    recommend,
)
from planner.serve_flags import parse_serve_command
from planner.trtllm_command import EXTRA_OPTIONS_FILE
from tests.planner.deploy.validators import load_skypilot_tasks, validate_kubernetes

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
BRIEF: dict[str, Any] = {
    "model": LLAMA_70B,
    "input_len": 2048,
    "output_len": 512,
    "demand": Demand(avg_rate_rps=2, peak_rate_rps=4),
    "slo": Slo(ttft_p99_ms=3000, tpot_p99_ms=100),
}
PROGRAMS = {"vllm": "vllm", "sglang": "python3", "trtllm": "trtllm-serve"}


def _plan(catalog: Catalog, request: RecommendRequest) -> Plan:
    result = recommend(catalog, request, perf_predictor(catalog, request))
    assert result.best is not None, [r.reason for r in result.rejected[:5]]
    assert result.best.launch_command == launch_command(result.best.plan)
    return result.best.plan


#: attention data parallelism over 4 ranks and expert parallelism (an MoE layout)
MOE_LAYOUT: dict[str, Any] = {"data_parallel_size": 4, "enable_expert_parallel": True}


def _moe_request(engine: EngineConfig) -> RecommendRequest:
    return RecommendRequest(
        model="Qwen/Qwen3-235B-A22B",
        input_len=2048,
        output_len=512,
        demand=Demand(avg_rate_rps=2, peak_rate_rps=4),
        slo=Slo(ttft_p99_ms=3000, tpot_p99_ms=100),
        search=SearchSpace(instances=("p5en.48xlarge",), max_nodes=1, precisions=("fp8",)),
        engine=engine,
    )


@pytest.fixture(scope="module")
def plans(catalog: Catalog) -> dict[str, Plan]:
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
        "sglang-moe": _moe_request(EngineConfig(engine="sglang", **MOE_LAYOUT)),
        "vllm-moe": _moe_request(EngineConfig(**MOE_LAYOUT)),
        "trtllm": RecommendRequest(
            **BRIEF,
            search=SearchSpace(instances=("p5.48xlarge", "g6e.12xlarge"), max_nodes=1),
            engine=EngineConfig(engine="tensorrt-llm"),
        ),
    }
    plans = {name: _plan(catalog, request) for name, request in requests.items()}
    # the brief's top plan on SGLang (a replica across two instances), and a TensorRT-LLM plan
    # whose settings need the LLM API options file (prefix caching: KV block reuse)
    plans["sglang-two-nodes"] = plans["brief-aws"].model_copy(
        update={"engine": plans["brief-aws"].engine.model_copy(update={"engine": "sglang"})}
    )
    plans["trtllm-options"] = plans["trtllm"].model_copy(
        update={"engine": plans["trtllm"].engine.model_copy(update={"enable_prefix_caching": True})}
    )
    return plans


@pytest.fixture(scope="module")
def specs(plans: dict[str, Plan], catalog: Catalog) -> dict[str, DeploySpec]:
    return {name: spec_from_plan(plan, catalog) for name, plan in plans.items()}


def test_the_spec_reads_the_plan(plans: dict[str, Plan], specs: dict[str, DeploySpec]) -> None:
    spec = specs["brief-aws"]
    plan = plans["brief-aws"]
    assert (spec.instance, spec.nodes, spec.replicas) == (plan.instance, plan.nodes, plan.replicas)
    assert spec.nodes == 2  # this plan pipelines over two instances a replica
    assert plan.cost is not None and spec.instances == plan.cost.instances_total
    # the demand curve (2 req/s average, 4 at peak) sizes the minimum below the planned replicas
    assert 1 <= spec.min_replicas < spec.replicas
    spot = specs["spot-8b"]
    assert spot.spot and spot.replicas >= 3 and spot.min_replicas < spot.replicas
    assert spot.request_rate_per_replica == pytest.approx(
        plans["spot-8b"].prediction.request_per_s  # type: ignore[union-attr]
    )
    # 70B parameters in a bf16 checkpoint (fp8 is quantised at load): ~141 GB to download
    assert spec.checkpoint_bytes == pytest.approx(141e9, rel=0.01)
    moe = specs["sglang-moe"]
    assert (moe.family, moe.gpus_per_pod, moe.replicas_per_instance) == ("sglang", 4, 2)
    # nothing the plan carries is restated: the spec holds the plan and the catalog's facts
    assert set(DeploySpec.model_fields) == {
        "plan",
        "name",
        "vendor",
        "gpus_per_node",
        "checkpoint_bytes",
        "network_gbps",
        "port",
        "waiting_target",
    }


def _k8s_objects(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {
        d["kind"]: d
        for text in files.values()
        if text.startswith("apiVersion")
        for d in validate_kubernetes(text)
    }


def _templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    if workload["kind"] == "Deployment":
        return [workload["spec"]["template"]]
    lws = workload["spec"]["leaderWorkerTemplate"]
    return [lws["leaderTemplate"], lws["workerTemplate"]]


@pytest.mark.parametrize(
    "name",
    [
        "brief-aws",
        "brief-one-instance",
        "spot-8b",
        "mi355x",
        "sglang-moe",
        "sglang-two-nodes",
        "vllm-moe",
        "trtllm",
        "trtllm-options",
    ],
)
def test_kubernetes_manifests_validate_and_scale_on_the_engines_queue(
    specs: dict[str, DeploySpec], name: str
) -> None:
    spec = specs[name]
    engine = engine_serving(spec.family)
    files = render(spec, "k8s")
    objects = _k8s_objects(files)
    workload = objects["Deployment" if spec.nodes == 1 else "LeaderWorkerSet"]
    assert workload["spec"]["replicas"] == spec.replicas
    hpa = objects["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"]["kind"] == workload["kind"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (spec.min_replicas, spec.replicas)
    (metric,) = hpa["metrics"]
    if spec.family == "trtllm":  # no queue gauge at the pinned release: CPU, and why
        assert metric["resource"]["name"] == "cpu"
        assert "ScaledObject" not in objects
        assert "no queue gauge" in files["README.md"] and "1.3.0rc12" in files["README.md"]
    else:
        queue = {"vllm": "vllm:num_requests_waiting", "sglang": "sglang:num_queue_reqs"}
        assert metric["pods"]["metric"]["name"] == engine.queue_metric == queue[spec.family]
        keda = objects["ScaledObject"]["spec"]
        assert queue[spec.family] in keda["triggers"][0]["metadata"]["query"]
        assert keda["scaleTargetRef"] == hpa["scaleTargetRef"]
    templates = _templates(workload)
    serving = templates[0]
    container = serving["spec"]["containers"][0]
    assert container["image"] == engine_image(spec)
    assert serving["metadata"]["annotations"]["prometheus.io/path"] == engine.metrics_path
    resource = "nvidia.com/gpu" if spec.vendor == "nvidia" else "amd.com/gpu"
    assert container["resources"]["limits"][resource] == str(spec.gpus_per_pod)
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] == "/health" == engine.health_path
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/dev/shm", "/root/.cache/huggingface"} <= mounts
    selector = serving["spec"]["nodeSelector"]
    if spec.provider in MANAGED_K8S:
        assert selector["node.kubernetes.io/instance-type"] == spec.instance
    else:  # RunPod: no managed Kubernetes naming its instances; the GPU still selects nodes
        assert selector["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert objects["Service"]["spec"]["ports"][0]["port"] == spec.port
    if engine_config_files(spec.plan):  # the options file as a ConfigMap, mounted where it runs
        data = objects["ConfigMap"]["data"]
        assert data == engine_config_files(spec.plan)
        options = data[EXTRA_OPTIONS_FILE]
        # TensorRT-LLM's server chunks prompts only when asked: a plan simulated with chunked
        # prefill asks in the options file, as one with prefix caching asks for block reuse
        assert spec.plan.engine.enable_chunked_prefill == (
            "enable_chunked_prefill: true" in options
        )
        if spec.plan.engine.enable_prefix_caching:
            assert "kv_cache_config:\n  enable_block_reuse: true\n" in options
        assert container["workingDir"] in mounts
    else:
        assert "ConfigMap" not in objects


def test_spot_and_gpu_selection_and_images(specs: dict[str, DeploySpec]) -> None:
    deployment = yaml.safe_load(render(specs["spot-8b"], "k8s")["deployment.yaml"])
    selector = deployment["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["eks.amazonaws.com/capacityType"] == "SPOT"
    assert "nvidia.com/gpu.product" in selector
    amd = yaml.safe_load(render(specs["mi355x"], "k8s")["deployment.yaml"])
    container = amd["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "vllm/vllm-openai-rocm:v0.27.1"
    assert "nvidia.com/gpu.product" not in amd["spec"]["template"]["spec"]["nodeSelector"]
    # each engine's official image at its pinned release, or at the release the plan names
    assert engine_image(specs["sglang-moe"]) == "lmsysorg/sglang:v0.5.19-cu129"
    assert engine_image(specs["trtllm"]) == "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"
    sglang = engine_serving("sglang")
    assert sglang.image(None, "amd", "MI355X") == "lmsysorg/sglang:v0.5.19-rocm700-mi35x"
    assert sglang.image("0.5.21", "nvidia", "H200") == "lmsysorg/sglang:v0.5.21"
    with pytest.raises(InvalidInputError, match="an NVIDIA GPU"):
        engine_serving("trtllm").image(None, "amd", "MI355X")


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
        assert task["num_nodes"] == spec.nodes
        assert PROGRAMS[spec.family] in task["run"]
        in_image = spec.family != "vllm" or spec.vendor == "amd"
        assert (task["image_id"] == f"docker:{engine_image(spec)}") is in_image
        if file == "service.yaml":
            assert task["readiness_path"] == "/health"
            assert task["min_replicas"] == spec.min_replicas
            if spec.min_replicas < spec.replicas:
                assert task["max_replicas"] == spec.replicas
                assert task["target_qps"] == pytest.approx(spec.request_rate_per_replica, rel=1e-3)
        else:
            assert task["min_replicas"] is None  # plain task: no service
    assert len(loaded) == 2 * len(specs)


# ----- one builder: the command in every file is the plan's -------------------------------------
def _shell_commands(script: str, program: str) -> list[list[str]]:
    """Each invocation of ``program`` in a shell script, as its words from the program on."""
    found = []
    for line in script.splitlines():
        if program not in line:
            continue
        words = shlex.split(line.strip().rstrip("&"))
        if program in words:
            found.append(words[words.index(program) :])
    return found


def _commands(spec: DeploySpec, files: dict[str, str]) -> list[list[str]]:
    """Every engine command the files start (docker: the words after the image)."""
    program = PROGRAMS[spec.family]
    image = engine_image(spec)
    commands: list[list[str]] = []
    for name, text in files.items():
        document = yaml.safe_load(text) if name.endswith(".yaml") else None
        if name == "launch.sh":
            commands += _shell_commands(text, program)
        elif isinstance(document, dict) and "run" in document:  # a SkyPilot task
            commands += _shell_commands(document["run"], program)
        elif name == "docker-run.sh":  # a container's script may span lines: split by run
            tokens = shlex.split(text, comments=True)
            starts = [i for i, t in enumerate(tokens) if tokens[i : i + 2] == ["docker", "run"]]
            for start, end in zip(starts, [*starts[1:], len(tokens)], strict=True):
                words = tokens[start:end]
                after = words[words.index(image) + 1 :]
                if words[words.index("--entrypoint") + 1] == "/bin/bash":
                    commands += _shell_commands(after[1], program)  # -c SCRIPT
                else:
                    commands.append([words[words.index("--entrypoint") + 1], *after])
        elif name in ("deployment.yaml", "leaderworkerset.yaml"):
            for template in _templates(yaml.safe_load(text)):
                container = template["spec"]["containers"][0]
                argv = container["command"] + container["args"]
                if argv[0] == "/bin/bash":
                    commands += _shell_commands(argv[2], program)
                else:
                    commands.append(argv)
    return commands


@pytest.mark.parametrize("target", TARGETS)
def test_every_file_runs_the_plans_own_command(specs: dict[str, DeploySpec], target: str) -> None:
    """The engine command in every file is the plan's (one builder), listening on the
    deployment's port, followed only by what a deployment adds (the metrics switch, the nodes
    of a replica across instances)."""
    for name, spec in specs.items():
        files = render(spec, target)
        commands = _commands(spec, files)
        assert commands, (name, target)
        ports = {spec.port + slot for slot in range(spec.replicas_per_instance)}
        for argv in commands:
            port = int(argv[argv.index("--port") + 1])
            assert port in ports, (name, target, argv)
            base = engine_argv(spec.plan, host=LISTEN_HOST, port=port)
            assert argv[: len(base)] == base, (name, target)
            extra = argv[len(base) :]
            flags = [word for word in extra if word.startswith("--")]
            assert set(flags) <= set(DEPLOY_FLAGS), (name, target, flags)


def test_a_renderer_states_only_what_the_plan_carries(
    specs: dict[str, DeploySpec], catalog: Catalog
) -> None:
    """A plan whose engine leaves its batch limits to the engine gets no limit in any file, and
    the settings it does set reach every file as it set them: no renderer fills in a default."""
    base = specs["brief-one-instance"].plan
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        loose = base.model_copy(
            update={"engine": EngineConfig(engine=engine, max_model_len=3000, version="0.9.9")}
        )
        spec = spec_from_plan(loose, catalog)
        for target in TARGETS:
            for argv in _commands(spec, render(spec, target)):
                parsed = parse_serve_command(shlex.join(argv))
                assert (parsed.tp, parsed.pp, parsed.max_model_len) == (base.tp, base.pp, 3000)
                assert parsed.max_num_seqs is None and parsed.max_num_batched_tokens is None
                assert parsed.gpu_memory_utilization is None or engine == "vllm"
        assert "0.9.9" in engine_image(spec)  # the plan's release, not the pinned one
    # every setting of a resolved plan, as the plan says, in the k8s and docker files
    tight = base.model_copy(
        update={
            "engine": base.engine.model_copy(
                update={"max_num_seqs": 37, "gpu_memory_utilization": 0.77}
            )
        }
    )
    spec = spec_from_plan(tight, catalog)
    for target in ("k8s", "docker"):
        for argv in _commands(spec, render(spec, target)):
            parsed = parse_serve_command(shlex.join(argv))
            assert (parsed.max_num_seqs, parsed.gpu_memory_utilization) == (37, 0.77)
            assert parsed.max_num_batched_tokens == base.engine.max_num_batched_tokens


def test_moe_and_multi_node_flags_are_the_plans(specs: dict[str, DeploySpec]) -> None:
    moe = render(specs["sglang-moe"], "docker")["docker-run.sh"]
    assert "--tp-size 4 --dp-size 4 --enable-dp-attention --ep-size 4" in moe
    assert "--enable-metrics" in moe and '"device=4,5,6,7"' in moe  # two replicas an instance
    vllm_moe = render(specs["vllm-moe"], "k8s")["deployment.yaml"]
    assert "- --data-parallel-size\n        - '4'\n        - --enable-expert-parallel" in vllm_moe
    two = render(specs["sglang-two-nodes"], "k8s")["leaderworkerset.yaml"]
    assert '--node-rank "$LWS_WORKER_INDEX"' in two and "--nnodes 2" in two
    vllm = render(specs["brief-aws"], "docker")
    assert "--distributed-executor-backend ray" in vllm["launch.sh"]
    assert "NODE_RANK" in vllm["docker-run.sh"] and "--network host" in vllm["docker-run.sh"]
    amd = render(specs["mi355x"], "docker")["docker-run.sh"]
    assert "--device /dev/kfd" in amd and "--gpus" not in amd
    one = render(specs["brief-one-instance"], "docker")
    words = shlex.split(one["launch.sh"].splitlines()[1].removeprefix("exec "))
    assert words[:3] == ["vllm", "serve", LLAMA_70B]
    assert words[words.index("--max-model-len") + 1] == "2560"
    docker = one["docker-run.sh"]
    assert "--gpus all" in docker and "vllm/vllm-openai:v0.27.1" in docker
    assert '"$HOME/.cache/huggingface:/root/.cache/huggingface"' in docker


def test_the_trtllm_options_file_travels_with_every_target(specs: dict[str, DeploySpec]) -> None:
    spec = specs["trtllm-options"]
    options = engine_config_files(spec.plan)[EXTRA_OPTIONS_FILE]
    docker = render(spec, "docker")
    assert docker[EXTRA_OPTIONS_FILE] == options
    assert f"--extra_llm_api_options {EXTRA_OPTIONS_FILE}" in docker["docker-run.sh"]
    assert "-w /etc/servewise" in docker["docker-run.sh"]
    run = yaml.safe_load(render(spec, "skypilot")["task.yaml"])["run"]
    assert f"cat > {EXTRA_OPTIONS_FILE}" in run and options in run
    with pytest.raises(InvalidInputError, match="MPI"):
        two_nodes = specs["brief-aws"].plan.model_copy(
            update={"engine": EngineConfig(engine="tensorrt-llm")}
        )
        render(spec.model_copy(update={"plan": two_nodes}), "k8s")


def test_every_target_has_a_readme_with_the_engine_and_the_cold_start(
    specs: dict[str, DeploySpec],
) -> None:
    for name in ("brief-one-instance", "sglang-moe", "trtllm-options"):
        spec = specs[name]
        engine = engine_serving(spec.family)
        for target in TARGETS:
            files = render(spec, target)
            readme = files["README.md"]
            assert "Cold start: " in readme and engine.display_name in readme
            assert engine_image(spec) in readme
            archive = zipfile.ZipFile(BytesIO(zip_bytes(files, f"deploy-{target}")))
            assert sorted(archive.namelist()) == sorted(f"deploy-{target}/{f}" for f in files)
    assert (
        "Cold start: 141 GB of weights" in render(specs["brief-one-instance"], "k8s")["README.md"]
    )
    packed = render(specs["sglang-moe"], "skypilot")["README.md"]
    assert "packs 2 replicas on one p5en.48xlarge" in packed
    with pytest.raises(InvalidInputError, match="target='helm'"):
        render(specs["brief-one-instance"], "helm")


def test_the_pinned_vllm_release_is_the_optional_extras() -> None:
    pins = Path("requirements-vllm.txt").read_text(encoding="utf-8").splitlines()
    assert f"vllm=={VLLM_RELEASE}" in pins
    assert engine_serving("vllm").image(None, "nvidia", "H100-SXM").endswith(f":v{VLLM_RELEASE}")


def test_cold_start_is_weights_over_bandwidth() -> None:
    estimate = cold_start_estimate(140e9, 100.0, disk_read_gb_per_s=2.0)
    assert estimate.download_s == pytest.approx(140e9 / 12.5e9)  # 100 Gbit/s = 12.5 GB/s
    assert estimate.load_s == pytest.approx(70.0)
    assert estimate.first_start_s == pytest.approx(11.2 + 70.0)
    assumed = cold_start_estimate(10e9, None)
    assert assumed.network_assumed and assumed.network_gbps == 10.0
    with pytest.raises(InvalidInputError, match="checkpoint_bytes"):
        cold_start_estimate(0, 10.0)


def test_a_plan_that_cannot_be_deployed_is_refused(
    specs: dict[str, DeploySpec], catalog: Catalog
) -> None:
    plan = specs["brief-one-instance"].plan
    with pytest.raises(InvalidInputError, match=r"plan\.price"):
        spec_from_plan(plan.model_copy(update={"price": None}), catalog)
    with pytest.raises(InvalidInputError, match=r"plan\.instance"):
        spec_from_plan(plan.model_copy(update={"instance": None}), catalog)
    with pytest.raises(InvalidInputError, match=r"plan\.nodes"):  # 3 GPUs do not split 2
        spec_from_plan(plan.model_copy(update={"tp": 3}), catalog)


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
    metric = documents[0]["spec"]["metrics"][0]["pods"]["metric"]["name"]
    assert metric == "vllm:num_requests_waiting"
    assert {p.name for p in out.iterdir()} >= {"deployment.yaml", "service.yaml", "README.md"}
    assert main([*args, "--engine", "sglang", "--emit", "docker", str(tmp_path / "dk")]) == 0
    script = (tmp_path / "dk" / "docker-run.sh").read_text()
    assert script.startswith("#!/bin/sh") and "lmsysorg/sglang:v0.5.19-cu129" in script
    assert "python3 -m sglang.launch_server" in capsys.readouterr().out  # the best command
    assert main([*args, "--engine", "tensorrt-llm", "--emit", "k8s", str(tmp_path / "t")]) == 0
    hpa = validate_kubernetes((tmp_path / "t" / "hpa.yaml").read_text(encoding="utf-8"))
    assert hpa[0]["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert write_bundle({"a.txt": "x"}, tmp_path / "plain") == [tmp_path / "plain" / "a.txt"]
    capsys.readouterr()
    assert main([*args, "--engine", "tgi"]) == 2
    assert "--engine='tgi'" in capsys.readouterr().err
    # an aggregated best plan has no pools: a disaggregated target is refused in one line
    assert main([*args, "--emit", "dynamo", str(tmp_path / "dyn")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "error: --emit TARGET='dynamo' is not allowed: one of docker, k8s, skypilot "
        "(an aggregated plan)"
    )
    assert not (tmp_path / "dyn").exists()
