"""Deployment files of disaggregated plans: each pool's command, the router, Dynamo, llm-d.

Plans written by hand in the shape the disaggregated search gives (the decode pool repeated at
the top level): DeepSeek-R1-0528 FP8 on SGLang, 2 prefill x DEP8 and 1 decode DEP16 over two
p5en.48xlarge (EFA), the same over InfiniBand, and Llama-3.1-70B on vLLM, 2 prefill x TP4 and
1 decode TP8 on p5.48xlarge. Neither engine can run here (no GPU): the commands are checked
against each engine's documented flags (the lists of the existing command tests plus the PD
flags cited in :mod:`planner.deploy.disaggregated`), parsed back with
:mod:`planner.serve_flags`, and the scripts are run by a real ``sh`` with stand-in ``python3``
and ``vllm`` programs that print the arguments they get. llm-d's values are validated with the
chart's own ``values.schema.json`` (vendored, ``fixtures/SOURCES.md``); Dynamo's
DynamoGraphDeployment against the ``openAPIV3Schema`` of Dynamo 1.0.0's own CRD (vendored,
descriptions trimmed), strictly, and its containers as core v1 containers (kubernetes-validate).
"""

from __future__ import annotations

import argparse
import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from planner.catalog import Catalog
from planner.cli import main
from planner.deploy import (
    DISAGG_TARGETS,
    TARGETS,
    DeploySpec,
    render,
    spec_from_plan,
    targets_of,
)
from planner.deploy.disaggregated import (
    DECODE_PORT,
    NIXL_SIDE_CHANNEL_PORT,
    PREFILL_PORT,
    SGLANG_BOOTSTRAP_PORT,
    pool_argv,
)
from planner.engine import EngineConfig
from planner.errors import InvalidInputError
from planner.plan import Plan, PlanPool, PlanPrice
from planner.serve_flags import parse_serve_command
from tests.planner.deploy.validators import KUBERNETES_VERSION, validate_custom_resource
from tests.planner.test_sglang_command import SGLANG_DOCUMENTED_FLAGS
from tests.planner.test_vllm_command import DOCUMENTED_FLAGS_0_27_1, FRONTEND_FLAGS

FIXTURES = Path(__file__).parent / "fixtures"
LLMD_SCHEMA = FIXTURES / "llm-d-modelservice-v0.4.12.values.schema.json"
DYNAMO_SCHEMA = FIXTURES / "dynamo-1.0.0-dynamographdeployment.schema.json"
#: SGLang 0.5.19's server flags and choices (the pinned release's server_args.py, vendored:
#: fixtures/SOURCES.md)
SGLANG_0_5_19 = json.loads((FIXTURES / "sglang-0.5.19-server-flags.json").read_text())
SGLANG_RELEASE_FLAGS = set(SGLANG_0_5_19["flags"])
#: the PD and large-EP flags of planner.deploy.disaggregated (its module docstring)
SGLANG_PD_FLAGS = {
    "--disaggregation-mode",
    "--disaggregation-transfer-backend",
    "--disaggregation-bootstrap-port",
    "--disaggregation-ib-device",
    "--moe-a2a-backend",
    "--deepep-mode",
    "--enable-two-batch-overlap",
}
SGLANG_TRANSFER_BACKENDS = set(SGLANG_0_5_19["disaggregation_transfer_backend_choices"])
#: vLLM 0.27.1's MoE layout flags (vllm_command), its KV connector flag and the large-EP ones
#: (vllm/engine/arg_utils.py of the 0.27.1 wheel: --all2all-backend, --enable-dbo)
VLLM_PD_FLAGS = {
    "--data-parallel-size",
    "--enable-expert-parallel",
    "--kv-transfer-config",
    "--all2all-backend",
    "--enable-dbo",
}
#: vllm/config/parallel.py's All2AllBackend of vLLM 0.27.1
VLLM_ALL2ALL_BACKENDS = {
    "naive",
    "pplx",
    "deepep_high_throughput",
    "deepep_low_latency",
    "deepep_v2",
    "mori_high_throughput",
    "mori_low_latency",
    "nixl_ep",
    "allgather_reducescatter",
    "flashinfer_all2allv",
    "flashinfer_nvlink_two_sided",
    "flashinfer_nvlink_one_sided",
}
#: vLLM's multi-node data parallel flags (docs.vllm.ai, "Data Parallel Deployment")
VLLM_DP_NODE_FLAGS = {
    "--data-parallel-size-local",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
    "--data-parallel-start-rank",
    "--headless",
}
PRICE = PlanPrice(
    provider="aws",
    region="us-east-1",
    pricing="on_demand",
    usd_per_hour=60.0,
    source="test",
    as_of="2026-12-01",
)


def _dep(replicas: int, dp: int, nodes: int = 1) -> PlanPool:
    return PlanPool(
        replicas=replicas,
        tp=1,
        ep=dp,
        attention_dp=dp,
        gpu="H200",
        instance="p5en.48xlarge",
        nodes=nodes,
        engine=EngineConfig(
            engine="sglang",
            data_parallel_size=dp,
            enable_expert_parallel=True,
            max_num_seqs=64,
            kv_cache_dtype="fp8",
        ),
    )


def _sglang_plan(link: str) -> Plan:
    decode = _dep(1, 16, nodes=2)
    return Plan(
        model="deepseek-ai/DeepSeek-R1-0528",
        precision="fp8",
        gpu="H200",
        instance="p5en.48xlarge",
        tp=1,
        nodes=2,
        replicas=1,
        engine=decode.engine,
        price=PRICE,
        prefill=_dep(2, 8),
        decode=decode,
        kv_link=link,
    )


def _vllm_pool(replicas: int, tp: int) -> PlanPool:
    return PlanPool(
        replicas=replicas,
        tp=tp,
        gpu="H100-SXM",
        instance="p5.48xlarge",
        engine=EngineConfig(max_num_seqs=128, max_num_batched_tokens=8192),
    )


def _vllm_plan() -> Plan:
    decode = _vllm_pool(1, 8)
    return Plan(
        model="meta-llama/Llama-3.1-70B-Instruct",
        gpu="H100-SXM",
        instance="p5.48xlarge",
        tp=8,
        engine=decode.engine,
        price=PRICE,
        prefill=_vllm_pool(2, 4),
        decode=decode,
        kv_link="infiniband",
    )


def _vllm_wide_plan() -> Plan:
    """The shape the search gives DeepSeek-R1 on vLLM: decode DEP16 over two instances."""
    sglang = _sglang_plan("efa")
    engine = EngineConfig(data_parallel_size=16, enable_expert_parallel=True, max_num_seqs=256)
    decode = _dep(1, 16, nodes=2).model_copy(update={"engine": engine})
    prefill = _dep(2, 8).model_copy(
        update={"engine": engine.model_copy(update={"data_parallel_size": 8})}
    )
    return sglang.model_copy(
        update={"engine": engine, "prefill": prefill, "decode": decode, "precision": "fp8"}
    )


@pytest.fixture(scope="module")
def specs(catalog: Catalog) -> dict[str, DeploySpec]:
    return {
        "sglang-efa": spec_from_plan(_sglang_plan("efa"), catalog),
        "sglang-ib": spec_from_plan(_sglang_plan("infiniband"), catalog),
        "vllm": spec_from_plan(_vllm_plan(), catalog),
        "vllm-wide": spec_from_plan(_vllm_wide_plan(), catalog),
    }


def _flags(argv: list[str]) -> set[str]:
    return {a for a in argv if a.startswith("--")}


def _pool(plan: Plan, role: str) -> PlanPool:
    pool = plan.prefill if role == "prefill" else plan.decode
    assert pool is not None
    return pool


@pytest.mark.parametrize("role", ["prefill", "decode"])
@pytest.mark.parametrize("name", ["sglang-efa", "sglang-ib", "vllm", "vllm-wide"])
def test_each_pool_runs_its_own_layout_with_documented_pd_flags(
    specs: dict[str, DeploySpec], name: str, role: str
) -> None:
    plan = specs[name].plan
    pool = _pool(plan, role)
    argv = pool_argv(plan, role)
    parsed = parse_serve_command(" ".join(json.dumps(a) for a in argv))
    assert (parsed.tp, parsed.attention_dp) == (pool.tp, pool.attention_dp)
    assert parsed.ep_size == pool.ep
    port = PREFILL_PORT if role == "prefill" else DECODE_PORT
    assert argv[argv.index("--port") + 1] == str(port)
    # an expert-parallel group beyond one board runs DeepEP; over the network, overlapped
    large, spans = pool.ep > 8, pool.nodes > 1 and pool.ep > 8
    if name.startswith("vllm"):
        assert _flags(argv) <= DOCUMENTED_FLAGS_0_27_1 | FRONTEND_FLAGS | VLLM_PD_FLAGS
        config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        assert ("--all2all-backend" in argv) == large
        if large:
            kernels = argv[argv.index("--all2all-backend") + 1]
            assert kernels in VLLM_ALL2ALL_BACKENDS
            assert kernels == (
                "deepep_high_throughput" if role == "prefill" else "deepep_low_latency"
            )
        assert ("--enable-dbo" in argv) == spans
    else:
        documented = SGLANG_DOCUMENTED_FLAGS | SGLANG_PD_FLAGS | {"--enable-metrics"}
        assert _flags(argv) <= documented
        # every flag as SGLang 0.5.19, the pinned release, defines it
        assert _flags(argv) <= SGLANG_RELEASE_FLAGS
        assert ("--moe-a2a-backend" in argv) == large
        if large:
            assert argv[argv.index("--moe-a2a-backend") + 1] == "deepep"
            mode = argv[argv.index("--deepep-mode") + 1]
            assert mode in SGLANG_0_5_19["deepep_mode_choices"]
            assert mode == ("normal" if role == "prefill" else "low_latency")
        assert ("--enable-two-batch-overlap" in argv) == spans
        assert argv[argv.index("--disaggregation-mode") + 1] == role
        backend = argv[argv.index("--disaggregation-transfer-backend") + 1]
        assert backend in SGLANG_TRANSFER_BACKENDS
        assert backend == ("nixl" if plan.kv_link == "efa" else "mooncake")
        assert ("--disaggregation-bootstrap-port" in argv) == (role == "prefill")
        assert argv[argv.index("--max-running-requests") + 1] == str(64 * pool.attention_dp)


def _stand_ins(tmp_path: Path) -> Path:
    """``python3`` and ``vllm`` that print their arguments as one JSON line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for program in ("python3", "vllm"):
        path = bin_dir / program
        code = f"import json, sys; print(json.dumps([{program!r}, *sys.argv[1:]]))"
        path.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{code}" "$@"\n')
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _run(script: str, tmp_path: Path, env: dict[str, str]) -> list[str]:
    path = tmp_path / "script.sh"
    path.write_text(script)
    done = subprocess.run(
        ["sh", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": f"{_stand_ins(tmp_path)}:/usr/bin:/bin", **env},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sglang_scripts_run_the_pools_and_the_pd_router(
    specs: dict[str, DeploySpec], tmp_path: Path
) -> None:
    spec = specs["sglang-ib"]
    files = render(spec, "pd")
    assert sorted(files) == ["README.md", "decode.sh", "prefill.sh", "router.sh"]
    device = "mlx5_0,mlx5_1; touch /tmp/pwned"  # a metacharacter stays one argument
    prefill = _run(files["prefill.sh"], tmp_path, {"IB_DEVICE": device})
    assert prefill == [*pool_argv(spec.plan, "prefill"), "--disaggregation-ib-device", device]
    # the decode replica spans two instances: each runs decode.sh with its rank
    decode = _run(
        files["decode.sh"],
        tmp_path,
        {"IB_DEVICE": "mlx5_0", "NODE_RANK": "1", "HEAD_IP": "10.0.1.1"},
    )
    assert decode == [
        *pool_argv(spec.plan, "decode"),
        *("--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.1.1:5000"),
        *("--disaggregation-ib-device", "mlx5_0"),
    ]
    router = _run(
        files["router.sh"],
        tmp_path,
        {"PREFILL_HOSTS": "10.0.0.1 10.0.0.2", "DECODE_HOSTS": "10.0.1.1"},
    )
    bootstrap = str(SGLANG_BOOTSTRAP_PORT)
    assert router == [
        "python3",
        "-m",
        "sglang_router.launch_router",
        "--pd-disaggregation",
        "--prefill",
        f"http://10.0.0.1:{PREFILL_PORT}",
        bootstrap,
        "--prefill",
        f"http://10.0.0.2:{PREFILL_PORT}",
        bootstrap,
        "--decode",
        f"http://10.0.1.1:{DECODE_PORT}",
        "--host",
        "0.0.0.0",
        "--port",
        str(spec.port),
    ]
    # no IB device on an EFA plan, and a missing one is named, not guessed
    efa = render(specs["sglang-efa"], "pd")
    assert "--disaggregation-ib-device" not in efa["prefill.sh"]
    path = tmp_path / "p.sh"
    path.write_text(files["prefill.sh"])
    done = subprocess.run(["sh", str(path)], capture_output=True, text=True, env={}, check=False)
    assert done.returncode != 0 and "IB_DEVICE" in done.stderr


def _vllm_proxy_args(argv: list[str]) -> argparse.Namespace:
    """The arguments of vLLM's toy_proxy_server.py @030ea52 (its parse_args)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", type=str, default="127.0.0.1")
    parser.add_argument("--prefiller-hosts", type=str, nargs="+")
    parser.add_argument("--prefiller-ports", type=int, nargs="+")
    parser.add_argument("--decoder-hosts", type=str, nargs="+")
    parser.add_argument("--decoder-ports", type=int, nargs="+")
    return parser.parse_args(argv)


def test_vllm_scripts_run_the_pools_and_the_nixl_proxy(
    specs: dict[str, DeploySpec], tmp_path: Path
) -> None:
    spec = specs["vllm"]
    files = render(spec, "pd")
    decode = _run(files["decode.sh"], tmp_path, {})
    assert decode == pool_argv(spec.plan, "decode")
    assert f"VLLM_NIXL_SIDE_CHANNEL_PORT={NIXL_SIDE_CHANNEL_PORT}" in files["decode.sh"]
    router = _run(
        files["router.sh"],
        tmp_path,
        {"PREFILL_HOSTS": "p0 p1", "DECODE_HOSTS": "d0"},
    )
    assert router[:2] == ["python3", "toy_proxy_server.py"]
    args = _vllm_proxy_args(router[2:])
    assert args.prefiller_hosts == ["p0", "p1"]
    assert args.prefiller_ports == [PREFILL_PORT, PREFILL_PORT]
    assert (args.decoder_hosts, args.decoder_ports) == (["d0"], [DECODE_PORT])
    assert (args.host, args.port) == ("0.0.0.0", spec.port)
    assert "toy_proxy_server.py" in files["README.md"]


def test_a_vllm_pool_over_two_instances_splits_its_data_parallel_ranks(
    specs: dict[str, DeploySpec], tmp_path: Path
) -> None:
    spec = specs["vllm-wide"]
    script = render(spec, "pd")["decode.sh"]
    own = pool_argv(spec.plan, "decode")
    shared = [
        *("--data-parallel-size-local", "8", "--data-parallel-address", "10.0.1.1"),
        *("--data-parallel-rpc-port", "13345"),
    ]
    head = _run(script, tmp_path, {"NODE_RANK": "0", "HEAD_IP": "10.0.1.1"})
    assert head == [*own, *shared]
    other = _run(script, tmp_path, {"NODE_RANK": "1", "HEAD_IP": "10.0.1.1"})
    assert other == [*own, "--headless", "--data-parallel-start-rank", "8", *shared]
    assert other[other.index("--data-parallel-size") + 1] == "16"
    assert _flags(other) <= (
        DOCUMENTED_FLAGS_0_27_1 | FRONTEND_FLAGS | VLLM_PD_FLAGS | VLLM_DP_NODE_FLAGS
    )


def _container_validates(container: dict[str, Any]) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(
        {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "check"},
            "template": {"spec": {"containers": [{"name": "main", **container}]}},
        },
        KUBERNETES_VERSION,
        strict=True,
    )


def test_dynamo_schema_refuses_what_the_crd_does(specs: dict[str, DeploySpec]) -> None:
    """The vendored CRD schema can fail: a misspelt field, a GPU count as a number (the CRD
    types it a string) and a one-node ``multinode`` (its minimum is 2) are refused."""
    text = render(specs["vllm-wide"], "dynamo")["dynamographdeployment.yaml"]
    (document,) = list(yaml.safe_load_all(text))
    validate_custom_resource(document, DYNAMO_SCHEMA)
    worker = document["spec"]["services"]["VllmDecodeWorker"]
    assert worker["multinode"] == {"nodeCount": 2}
    for change in (
        lambda w: w.update(subComponentTyp="decode"),
        lambda w: w["resources"]["limits"].update(gpu=8),
        lambda w: w.update(multinode={"nodeCount": 1}),
        lambda w: w["extraPodSpec"]["mainContainer"].update(imagePullPolicyy="Always"),
    ):
        bad = json.loads(json.dumps(document))
        change(bad["spec"]["services"]["VllmDecodeWorker"])
        with pytest.raises(jsonschema.ValidationError):
            validate_custom_resource(bad, DYNAMO_SCHEMA)


@pytest.mark.parametrize("name", ["sglang-efa", "sglang-ib", "vllm", "vllm-wide"])
def test_dynamo_graph_deployment_has_the_pools(specs: dict[str, DeploySpec], name: str) -> None:
    spec = specs[name]
    plan = spec.plan
    (document,) = list(yaml.safe_load_all(render(spec, "dynamo")["dynamographdeployment.yaml"]))
    validate_custom_resource(document, DYNAMO_SCHEMA)
    assert document["apiVersion"] == "nvidia.com/v1alpha1"
    assert document["kind"] == "DynamoGraphDeployment"
    services = document["spec"]["services"]
    prefix = "Vllm" if name.startswith("vllm") else "Sglang"
    assert sorted(services) == sorted(
        ["Frontend", f"{prefix}PrefillWorker", f"{prefix}DecodeWorker"]
    )
    assert services["Frontend"]["componentType"] == "frontend"
    for role in ("prefill", "decode"):
        pool = _pool(plan, role)
        worker = services[f"{prefix}{role.capitalize()}Worker"]
        assert (worker["componentType"], worker["subComponentType"]) == ("worker", role)
        assert worker["replicas"] == pool.replicas
        nodes = worker.get("multinode", {}).get("nodeCount", 1)
        assert nodes == pool.nodes
        assert int(worker["resources"]["limits"]["gpu"]) * nodes == pool.gpus_per_replica
        container = worker["extraPodSpec"]["mainContainer"]
        _container_validates(container)
        family = "vllm" if name.startswith("vllm") else "sglang"
        assert container["command"] == ["python3", "-m", f"dynamo.{family}"]
        assert container["image"].startswith(f"nvcr.io/nvidia/ai-dynamo/{family}-runtime:")
        args = container["args"]
        program = "vllm serve" if family == "vllm" else "python3 -m sglang.launch_server"
        words = [w for w in args if w != "--model"]
        parsed = parse_serve_command(program + " " + " ".join(json.dumps(w) for w in words))
        if family == "sglang":  # the engine arguments dynamo.sglang passes to SGLang 0.5.19
            assert _flags(args) <= SGLANG_RELEASE_FLAGS
            backend = args[args.index("--disaggregation-transfer-backend") + 1]
            assert backend in SGLANG_TRANSFER_BACKENDS
        else:
            flags = _flags(args) - {"--model", f"--is-{role}-worker"}
            assert flags <= DOCUMENTED_FLAGS_0_27_1 | FRONTEND_FLAGS | VLLM_PD_FLAGS
        assert (parsed.tp, parsed.attention_dp, parsed.ep_size) == (
            pool.tp,
            pool.attention_dp,
            pool.ep,
        )
        if family == "vllm":
            assert args[:2] == ["--model", plan.model]
            assert args[-1] == f"--is-{role}-worker"
        else:
            assert args[args.index("--disaggregation-mode") + 1] == role


def _chart_command(values: dict[str, Any], role: str) -> list[str]:
    """What llm-d-modelservice's ``vllmServeModelCommand`` template writes (its _helpers.tpl
    @3051935): ``vllm serve MODEL --port P``, TP and DP when above 1, the served name, then
    the container's args."""
    section = values[role]
    parallelism = section["parallelism"]
    argv = ["vllm", "serve", values["modelArtifacts"]["name"], "--port", "8200"]
    if parallelism["tensor"] > 1:
        argv += ["--tensor-parallel-size", str(parallelism["tensor"])]
    if parallelism["data"] > 1:
        argv += ["--data-parallel-size", str(parallelism["data"])]
    if parallelism["dataLocal"] > 1:
        argv += ["--data-parallel-size-local", str(parallelism["dataLocal"])]
    argv += ["--served-model-name", values["modelArtifacts"]["name"]]
    return argv + section["containers"][0]["args"]


@pytest.mark.parametrize("name", ["vllm", "vllm-wide"])
def test_llmd_values_validate_against_the_charts_schema(
    specs: dict[str, DeploySpec], name: str
) -> None:
    spec = specs[name]
    (values,) = list(yaml.safe_load_all(render(spec, "llm-d")["values.yaml"]))
    schema = json.loads(LLMD_SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(values)
    for role in ("prefill", "decode"):
        pool = _pool(spec.plan, role)
        section = values[role]
        assert section["replicas"] == pool.replicas
        assert section["parallelism"]["tensor"] == pool.tp
        container = section["containers"][0]
        assert container["modelCommand"] == "vllmServe"
        gpus = int(container["resources"]["limits"]["nvidia.com/gpu"])
        assert gpus * section["parallelism"]["workers"] == pool.gpus_per_replica
        assert values["multinode"] == (spec.plan.decode.nodes > 1)
        argv = _chart_command(values, role)
        parsed = parse_serve_command(" ".join(json.dumps(a) for a in argv))
        assert (parsed.tp, parsed.attention_dp) == (pool.tp, pool.attention_dp)
        assert argv.count("--tensor-parallel-size") <= 1  # the chart's only, not twice
        flags = _flags(argv) - {"--served-model-name"}
        assert (
            flags <= DOCUMENTED_FLAGS_0_27_1 | FRONTEND_FLAGS | VLLM_PD_FLAGS | VLLM_DP_NODE_FLAGS
        )
    # the schema can fail: a misspelt parallelism key is refused
    bad = {**values, "decode": {**values["decode"], "parallelism": {"tensors": 8}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate(bad)


def test_llmd_refuses_an_sglang_plan_in_one_line(specs: dict[str, DeploySpec]) -> None:
    with pytest.raises(InvalidInputError) as error:
        render(specs["sglang-efa"], "llm-d")
    assert error.value.field == "plan.decode.engine.engine"


def test_a_plans_kind_decides_its_targets(specs: dict[str, DeploySpec], catalog: Catalog) -> None:
    spec = specs["vllm"]
    assert targets_of(spec) == DISAGG_TARGETS
    with pytest.raises(InvalidInputError) as error:
        render(spec, "k8s")  # the top level alone would deploy the decode pool only
    assert error.value.field == "target"
    aggregated = spec_from_plan(
        spec.plan.model_copy(update={"prefill": None, "decode": None, "kv_link": None}),
        catalog,
    )
    assert targets_of(aggregated) == TARGETS
    assert "deployment.yaml" in render(aggregated, "k8s")
    with pytest.raises(InvalidInputError):
        render(aggregated, "dynamo")


def test_every_target_renders_with_a_readme(specs: dict[str, DeploySpec]) -> None:
    for name, spec in specs.items():
        for target in DISAGG_TARGETS:
            if not name.startswith("vllm") and target == "llm-d":
                continue
            files = render(spec, target)
            readme = files["README.md"]
            assert spec.plan.model in readme and "decode pool" in readme, (name, target)
            for file, text in files.items():
                if file.endswith(".yaml"):
                    assert list(yaml.safe_load_all(text)), (name, target, file)


def test_the_searchs_best_disaggregated_plan_emits_files_that_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's scenario (DeepSeek-R1-0528 FP8, 2,048 in / 512 out, 100 req/s, p99 TTFT 2 s
    and TPOT 30 ms), pools only, narrowed to p5en.48xlarge so it runs in seconds."""
    args = [
        "recommend",
        *("--model", "deepseek-ai/DeepSeek-R1-0528", "--precision", "fp8"),
        *("--input-len", "2048", "--output-len", "512", "--rate", "100"),
        *("--slo-ttft-p99-ms", "2000", "--slo-tpot-p99-ms", "30"),
        *("--instance", "p5en.48xlarge", "--disaggregation", "on"),
    ]
    schema = json.loads(LLMD_SCHEMA.read_text())
    assert main([*args, "--emit", "llm-d", str(tmp_path / "llmd")]) == 0
    (values,) = list(yaml.safe_load_all((tmp_path / "llmd" / "values.yaml").read_text()))
    jsonschema.Draft7Validator(schema).validate(values)
    assert values["prefill"]["replicas"] >= 1 and values["decode"]["replicas"] >= 1
    assert main([*args, "--emit", "dynamo", str(tmp_path / "dyn")]) == 0
    text = (tmp_path / "dyn" / "dynamographdeployment.yaml").read_text()
    (document,) = list(yaml.safe_load_all(text))
    validate_custom_resource(document, DYNAMO_SCHEMA)
    for service in document["spec"]["services"].values():
        _container_validates(service["extraPodSpec"]["mainContainer"])
    assert main([*args, "--engine", "sglang", "--emit", "pd", str(tmp_path / "pd")]) == 0
    assert (tmp_path / "pd" / "router.sh").read_text().count("sglang_router") == 1
    assert "Wrote" in capsys.readouterr().out
    # a disaggregated best plan refuses an aggregated target in one line
    assert main([*args, "--emit", "k8s", str(tmp_path / "k8s")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (
        "error: --emit TARGET='k8s' is not allowed: one of pd, dynamo, llm-d (a disaggregated plan)"
    )
