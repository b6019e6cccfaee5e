"""Deployment files of a disaggregated plan (:attr:`planner.plan.Plan.prefill` and
``decode``): each pool's engine command with its KV-transfer flags and the router in front of
them, NVIDIA Dynamo's DynamoGraphDeployment, and llm-d's Helm values.

Targets (:data:`DISAGG_TARGETS`), for a plan whose pools are set:

- ``pd``: ``prefill.sh`` and ``decode.sh`` (one pool replica, run on each of its instances;
  one spanning several takes ``NODE_RANK`` and ``HEAD_IP``: :func:`_pool_script`) and
  ``router.sh`` (the proxy that sends a request's prompt to a prefill server and streams its
  answer from a decode server), on the plan's engine:

  * SGLang 0.5.19 (the pinned release, :mod:`planner.deploy.engines`): ``python3 -m
    sglang.launch_server ... --disaggregation-mode prefill|decode
    --disaggregation-transfer-backend mooncake|nixl`` with ``--disaggregation-bootstrap-port``
    on the prefill servers and ``--disaggregation-ib-device`` over InfiniBand/RoCE (flags of
    ``python -m sglang.launch_server --help`` of SGLang 0.5.9, quoted on the MetaX developer
    forum: ``--disaggregation-mode {null,prefill,decode}``,
    ``--disaggregation-transfer-backend {mooncake,nixl,ascend,fake,mori}``,
    ``--disaggregation-bootstrap-port``, ``--disaggregation-ib-device``; docs.sglang.io
    "PD Disaggregation": Mooncake and NIXL are the transfer engines). Mooncake over
    InfiniBand/RoCE/NVLink, NIXL over EFA (Mooncake's transfer engine needs RDMA verbs,
    NIXL reaches EFA through libfabric). The router is ``python3 -m
    sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT ...
    --decode URL ...`` (sgl-router ``py_src/sglang_router/router_args.py``: ``prefill_urls``
    are ``(url, bootstrap_port)`` pairs, ``decode_urls`` URLs).
  * vLLM 0.27.1: ``vllm serve ... --kv-transfer-config
    '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`` on both pools (docs.vllm.ai,
    "NixlConnector Usage Guide": both instances run the connector as ``kv_both``, the proxy
    decides which one prefills), ``VLLM_NIXL_SIDE_CHANNEL_PORT`` set; the router is vLLM's
    proxy ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` @030ea52 (flags
    ``--host --port --prefiller-hosts --prefiller-ports --decoder-hosts --decoder-ports``),
    which is not in the wheel: the README says where to get it.
  * a pool whose expert-parallel group is larger than one 8-GPU board runs DeepEP's all-to-all,
    as the performance model prices it (:mod:`planner.perf.disaggregated`): SGLang
    ``--moe-a2a-backend deepep --deepep-mode normal`` (prefill) or ``low_latency`` (decode),
    vLLM ``--all2all-backend deepep_high_throughput`` or ``deepep_low_latency``; and one whose
    group leaves its NVLink domain (over the network) overlaps the all-to-all with compute:
    SGLang ``--enable-two-batch-overlap``, vLLM ``--enable-dbo`` (the SGLang team's 96-H100
    deployment, lmsys.org 2025-05-05: normal dispatch for prefill, low-latency for decode, two-
    batch overlap; vLLM's wide-EP post, blog.vllm.ai 2025-12-17: DeepEP kernels and ``--enable-
    dbo``). Every flag and choice as the pinned releases define them: SGLang 0.5.19
    ``sglang/srt/server_args.py`` (``disaggregation_mode`` null/prefill/decode,
    ``DISAGG_TRANSFER_BACKEND_CHOICES`` mooncake/nixl/ascend/fake/mori/mooncake_tcp,
    ``disaggregation_bootstrap_port`` default 8998, ``disaggregation_ib_device``,
    ``moe_a2a_backend`` none/deepep/..., ``deepep_mode`` auto/normal/low_latency,
    ``enable_two_batch_overlap``), vLLM 0.27.1 ``vllm/engine/arg_utils.py``
    (``--data-parallel-size -local -address -rpc-port -start-rank``, ``--all2all-backend``
    with ``vllm/config/parallel.py``'s ``All2AllBackend``, ``--enable-dbo``,
    ``--kv-transfer-config``; ``--headless`` in ``entrypoints/openai/cli_args.py``; the
    ``NixlConnector`` registered in ``distributed/kv_transfer/kv_connector/factory.py``,
    ``kv_both`` a role of ``config/kv_transfer.py``), both read from the releases' wheels on
    PyPI (retrieved 2026-12-02).

- ``dynamo``: ``dynamographdeployment.yaml``, one ``nvidia.com/v1alpha1``
  ``DynamoGraphDeployment`` with a ``Frontend`` (componentType ``frontend``) and a prefill and a
  decode worker (componentType ``worker``, subComponentType ``prefill``/``decode``), each with
  its replicas, ``resources.limits.gpu`` (GPUs a node) and ``multinode.nodeCount`` for a pool
  spanning instances, running ``python3 -m dynamo.vllm`` (``--is-prefill-worker`` /
  ``--is-decode-worker``) or ``python3 -m dynamo.sglang`` (``--disaggregation-mode``) with the
  pool's engine arguments, on ``nvcr.io/nvidia/ai-dynamo/{vllm,sglang}-runtime:1.0.0``
  (ai-dynamo/dynamo ``examples/backends/vllm/deploy/disagg.yaml`` @0044eb9; the multinode
  section and the 1.0.0 runtime image from Dynamo's multinode deployment guide), validated in
  the tests against the ``openAPIV3Schema`` of Dynamo 1.0.0's own CRD
  (``deploy/operator/config/crd/bases/nvidia.com_dynamographdeployments.yaml`` @db88c95,
  vendored with its descriptions trimmed), strictly.

- ``llm-d``: ``values.yaml`` for the ``llm-d-modelservice`` Helm chart (v0.4.12,
  llm-d-incubation/llm-d-modelservice @3051935): ``modelArtifacts``, ``routing`` (the routing
  sidecar's ``nixlv2`` connector), and ``prefill``/``decode`` sections with replicas,
  ``parallelism`` (tensor, data, dataLocal, workers) and one ``vllm`` container started by the
  chart (``modelCommand: vllmServe``: the chart adds ``vllm serve MODEL --port
  --tensor-parallel-size --data-parallel-size --served-model-name`` and the GPUs, tensor x
  dataLocal, to the container's limits), validated against the chart's ``values.schema.json``
  in the tests. The chart starts vLLM only, so an SGLang plan has no llm-d values.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from planner.deploy.launch import (
    LISTEN_HOST,
    SGLANG_DIST_PORT,
    engine_image,
    engine_release,
    serving,
)
from planner.deploy.spec import DEFAULT_PORT, DeploySpec
from planner.engine_command import engine_argv
from planner.errors import InvalidInputError
from planner.plan import Plan, PlanPool

DISAGG_TARGETS = ("pd", "dynamo", "llm-d")
DYNAMO_RELEASE = "1.0.0"
DYNAMO_API_VERSION = "nvidia.com/v1alpha1"
LLMD_CHART_VERSION = "v0.4.12"
#: ports of the ``pd`` target: vLLM's proxy defaults (prefill 8100, decode 8200), SGLang's
#: bootstrap server default (8998), the NIXL side channel of vLLM's usage guide (5600)
PREFILL_PORT = 8100
DECODE_PORT = 8200
SGLANG_BOOTSTRAP_PORT = 8998
NIXL_SIDE_CHANNEL_PORT = 5600
#: vLLM's data parallel RPC port across instances (the value of vLLM's own examples)
VLLM_DP_RPC_PORT = 13345
VLLM_KV_TRANSFER_CONFIG = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
#: the SGLang transfer backend of each KV link (module docstring)
SGLANG_TRANSFER_BACKEND = {
    "nvlink": "mooncake",
    "infiniband": "mooncake",
    "roce": "mooncake",
    "efa": "nixl",
}
RDMA_LINKS = ("infiniband", "roce")
#: where vLLM's proxy lives in its repository (it is not installed with the wheel)
VLLM_PROXY_PATH = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"
VLLM_PROXY_COMMIT = "030ea52"


def _pools(plan: Plan) -> tuple[PlanPool, PlanPool, str]:
    if plan.prefill is None or plan.decode is None or plan.kv_link is None:
        raise InvalidInputError(
            "plan.prefill", None, "a disaggregated plan (prefill and decode pools and kv_link)"
        )
    if plan.prefill.engine.family != plan.decode.engine.family:
        raise InvalidInputError(
            "plan.prefill.engine.engine",
            plan.prefill.engine.engine,
            f"the decode pool's engine ({plan.decode.engine.engine}): one router serves both",
        )
    family = plan.decode.engine.family
    if family not in ("vllm", "sglang"):
        raise InvalidInputError(
            "plan.decode.engine.engine", plan.decode.engine.engine, "vllm or sglang"
        )
    return plan.prefill, plan.decode, plan.kv_link


def pool_plan(plan: Plan, pool: PlanPool) -> Plan:
    """The aggregated plan of one pool replica (its layout and engine settings)."""
    return plan.model_copy(
        update={
            "tp": pool.tp,
            "pp": 1,
            "gpu": pool.gpu,
            "instance": pool.instance,
            "nodes": pool.nodes,
            "replicas": pool.replicas,
            "engine": pool.engine,
            "prefill": None,
            "decode": None,
            "kv_link": None,
        }
    )


#: GPUs of one HGX board: a larger expert-parallel group runs DeepEP's all-to-all
#: (planner.perf.disaggregated.BOARD_GPUS)
BOARD_GPUS = 8
#: the NVLink domain of a GB200/GB300 NVL72 rack
NVL72_GPUS = 72


def _crosses_nvlink_domain(pool: PlanPool) -> bool:
    """The pool's expert-parallel group spans instances that no NVLink domain joins."""
    if pool.gpu.upper().startswith("GB"):
        return pool.ep > NVL72_GPUS
    return pool.nodes > 1 and pool.ep > pool.gpus_per_replica // pool.nodes


def large_ep_flags(pool: PlanPool, role: str) -> list[str]:
    """DeepEP's all-to-all for an expert-parallel group beyond one board (normal kernels for
    prefill, low-latency for decode) and the compute/communication overlap for one over the
    network (module docstring); nothing for smaller pools."""
    if pool.ep <= BOARD_GPUS:
        return []
    overlap = _crosses_nvlink_domain(pool)
    if pool.engine.family == "vllm":
        kernels = "deepep_high_throughput" if role == "prefill" else "deepep_low_latency"
        return ["--all2all-backend", kernels] + (["--enable-dbo"] if overlap else [])
    mode = "normal" if role == "prefill" else "low_latency"
    flags = ["--moe-a2a-backend", "deepep", "--deepep-mode", mode]
    return flags + (["--enable-two-batch-overlap"] if overlap else [])


def pd_flags(plan: Plan, role: str) -> list[str]:
    """The flags a pool server adds to the plan's command (module docstring)."""
    prefill, decode, link = _pools(plan)
    pool = prefill if role == "prefill" else decode
    if decode.engine.family == "vllm":
        return [
            "--kv-transfer-config",
            json.dumps(VLLM_KV_TRANSFER_CONFIG, separators=(",", ":")),
            *large_ep_flags(pool, role),
        ]
    flags = [*large_ep_flags(pool, role), "--disaggregation-mode", role]
    flags += ["--disaggregation-transfer-backend", SGLANG_TRANSFER_BACKEND.get(link, "mooncake")]
    if role == "prefill":
        flags += ["--disaggregation-bootstrap-port", str(SGLANG_BOOTSTRAP_PORT)]
    return flags


def pool_argv(plan: Plan, role: str, *, port: int | None = None) -> list[str]:
    """One server of the ``role`` pool: the pool's command (program first), the engine's
    metrics switch and the PD flags; ``--disaggregation-ib-device`` is added by the script
    (the RDMA devices are the host's)."""
    prefill, decode, _ = _pools(plan)
    pool = prefill if role == "prefill" else decode
    default = PREFILL_PORT if role == "prefill" else DECODE_PORT
    argv = engine_argv(pool_plan(plan, pool), host=LISTEN_HOST, port=port or default)
    if pool.engine.family == "sglang":
        argv.append("--enable-metrics")
    return argv + pd_flags(plan, role)


def _pool_script(plan: Plan, role: str) -> str:
    """One server of the pool on this host. A pool replica over several instances runs it on
    each with ``NODE_RANK`` (0 on the first) and ``HEAD_IP`` set: SGLang with ``--nnodes
    --node-rank --dist-init-addr`` (as :func:`planner.deploy.launch.node_script`); vLLM's data
    parallel ranks split evenly over the instances, the first serving HTTP with
    ``--data-parallel-size-local --data-parallel-address --data-parallel-rpc-port``, the others
    ``--headless`` from ``--data-parallel-start-rank`` (docs.vllm.ai, "Data Parallel
    Deployment"; the multi-instance example of v0.9.1 gives the same flags)."""
    prefill, decode, link = _pools(plan)
    pool = prefill if role == "prefill" else decode
    line = shlex.join(pool_argv(plan, role))
    lines = ["#!/bin/sh", "set -eu"]
    if pool.nodes > 1:
        lines += [
            ': "${NODE_RANK:?set NODE_RANK: 0 on the first node, 1.. on the others}"',
            ': "${HEAD_IP:?set HEAD_IP to the first node\'s address}"',
        ]
    if pool.engine.family == "vllm":
        lines.append(f"export VLLM_NIXL_SIDE_CHANNEL_PORT={NIXL_SIDE_CHANNEL_PORT}")
        if pool.nodes == 1:
            lines.append(f"exec {line}")
            return "\n".join(lines) + "\n"
        if pool.attention_dp % pool.nodes:
            raise InvalidInputError(
                f"plan.{role}.attention_dp",
                pool.attention_dp,
                f"a multiple of the pool's {pool.nodes} instances (vLLM's data parallel ranks "
                "a node)",
            )
        local = pool.attention_dp // pool.nodes
        shared = (
            f'--data-parallel-size-local {local} --data-parallel-address "$HEAD_IP" '
            f"--data-parallel-rpc-port {VLLM_DP_RPC_PORT}"
        )
        lines += [
            'if [ "$NODE_RANK" = 0 ]; then',
            f"  exec {line} {shared}",
            "fi",
            f'exec {line} --headless --data-parallel-start-rank "$((NODE_RANK * {local}))" '
            + shared,
        ]
        return "\n".join(lines) + "\n"
    if pool.nodes > 1:
        line += (
            f' --nnodes {pool.nodes} --node-rank "$NODE_RANK" '
            f'--dist-init-addr "$HEAD_IP:{SGLANG_DIST_PORT}"'
        )
    if link in RDMA_LINKS:
        lines.append(
            ': "${IB_DEVICE:?set IB_DEVICE to the RDMA devices of this host, e.g. mlx5_0,mlx5_1}"'
        )
        line += ' --disaggregation-ib-device "$IB_DEVICE"'
    lines.append(f"exec {line}")
    return "\n".join(lines) + "\n"


def router_script(plan: Plan, spec: DeploySpec) -> str:
    """``router.sh``: the proxy over the pools' servers, their addresses from ``PREFILL_HOSTS``
    and ``DECODE_HOSTS`` (space-separated), listening on the spec's port."""
    return _router_script(plan, spec.port)


def pd_launch_scripts(plan: Plan, port: int = DEFAULT_PORT) -> dict[str, str]:
    """The PD target's three launch scripts of a disaggregated ``plan`` without a deployment
    spec (the Verify page's command box): ``router.sh`` (listening on ``port``),
    ``prefill.sh`` and ``decode.sh``, the very text ``render_disaggregated(spec, "pd")``
    writes. Raises InvalidInputError naming the field of a plan that cannot be launched."""
    return {
        "router.sh": _router_script(plan, port),
        "prefill.sh": _pool_script(plan, "prefill"),
        "decode.sh": _pool_script(plan, "decode"),
    }


def _router_script(plan: Plan, port: int) -> str:
    _, decode, _ = _pools(plan)
    head = [
        "#!/bin/sh",
        "set -eu",
        ': "${PREFILL_HOSTS:?set PREFILL_HOSTS to the prefill instances, space-separated}"',
        ': "${DECODE_HOSTS:?set DECODE_HOSTS to the decode instances, space-separated}"',
        "set --",
    ]
    if decode.engine.family == "sglang":
        body = [
            "for host in $PREFILL_HOSTS; do",
            f'  set -- "$@" --prefill "http://$host:{PREFILL_PORT}" {SGLANG_BOOTSTRAP_PORT}',
            "done",
            "for host in $DECODE_HOSTS; do",
            f'  set -- "$@" --decode "http://$host:{DECODE_PORT}"',
            "done",
            'exec python3 -m sglang_router.launch_router --pd-disaggregation "$@" '
            f"--host {LISTEN_HOST} --port {port}",
        ]
    else:
        body = [
            "ports() { for _ in $1; do printf '%s ' \"$2\"; done; }",
            "# word splitting of the host lists is intended: one argument a host",
            f"exec python3 {VLLM_PROXY_PATH.rsplit('/', 1)[-1]} --host {LISTEN_HOST} "
            f"--port {port} --prefiller-hosts $PREFILL_HOSTS "
            f'--prefiller-ports $(ports "$PREFILL_HOSTS" {PREFILL_PORT}) '
            "--decoder-hosts $DECODE_HOSTS "
            f'--decoder-ports $(ports "$DECODE_HOSTS" {DECODE_PORT})',
        ]
    return "\n".join(head + body) + "\n"


def _dynamo_worker(plan: Plan, spec: DeploySpec, role: str) -> dict[str, Any]:
    prefill, decode, link = _pools(plan)
    pool = prefill if role == "prefill" else decode
    argv = engine_argv(pool_plan(plan, pool))
    family = pool.engine.family
    if family == "vllm":
        # dynamo.vllm takes vLLM's engine arguments: `serve MODEL` becomes `--model MODEL`
        args = ["--model", plan.model, *argv[3:], *large_ep_flags(pool, role)]
        args.append(f"--is-{role}-worker")
    else:
        args = [*argv[3:], *large_ep_flags(pool, role), "--disaggregation-mode", role]
        args += ["--disaggregation-transfer-backend", SGLANG_TRANSFER_BACKEND.get(link, "nixl")]
    gpus_per_node = pool.gpus_per_replica // pool.nodes
    worker: dict[str, Any] = {
        "componentType": "worker",
        "subComponentType": role,
        "replicas": pool.replicas,
        "envFromSecret": "hf-token-secret",
        "resources": {"limits": {"gpu": str(gpus_per_node)}},
        "extraPodSpec": {
            "mainContainer": {
                "image": _dynamo_image(family),
                "command": ["python3", "-m", f"dynamo.{family}"],
                "args": args,
            }
        },
    }
    if pool.nodes > 1:
        worker["multinode"] = {"nodeCount": pool.nodes}
    return worker


def _dynamo_image(family: str) -> str:
    return f"nvcr.io/nvidia/ai-dynamo/{family}-runtime:{DYNAMO_RELEASE}"


def dynamo_graph_deployment(plan: Plan, spec: DeploySpec) -> dict[str, Any]:
    """The DynamoGraphDeployment of the plan (module docstring)."""
    _, decode, _ = _pools(plan)
    family = decode.engine.family
    prefix = "Vllm" if family == "vllm" else "Sglang"
    return {
        "apiVersion": DYNAMO_API_VERSION,
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": spec.name, "labels": {"app.kubernetes.io/part-of": "servewise"}},
        "spec": {
            "backendFramework": family,
            "services": {
                "Frontend": {
                    "componentType": "frontend",
                    "replicas": 1,
                    "extraPodSpec": {"mainContainer": {"image": _dynamo_image(family)}},
                },
                f"{prefix}PrefillWorker": _dynamo_worker(plan, spec, "prefill"),
                f"{prefix}DecodeWorker": _dynamo_worker(plan, spec, "decode"),
            },
        },
    }


#: vLLM flags the llm-d chart writes itself from ``parallelism`` and ``routing``
_CHART_FLAGS = ("--tensor-parallel-size", "--data-parallel-size", "--host", "--port")


def _llmd_pool(plan: Plan, spec: DeploySpec, role: str) -> dict[str, Any]:
    prefill, decode, _ = _pools(plan)
    pool = prefill if role == "prefill" else decode
    argv = engine_argv(pool_plan(plan, pool))[3:]  # after `vllm serve MODEL`
    args: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word in _CHART_FLAGS:
            skip = True
            continue
        args.append(word)
    args += pd_flags(plan, role)
    if pool.attention_dp % pool.nodes:
        raise InvalidInputError(
            f"plan.{role}.attention_dp",
            pool.attention_dp,
            f"a multiple of the pool's {pool.nodes} instances (llm-d's dataLocal)",
        )
    resource = "nvidia.com/gpu" if spec.vendor == "nvidia" else "amd.com/gpu"
    gpus = str(pool.tp * pool.attention_dp // pool.nodes)
    return {
        "create": True,
        "replicas": pool.replicas,
        "parallelism": {
            "tensor": pool.tp,
            "data": pool.attention_dp,
            "dataLocal": pool.attention_dp // pool.nodes,
            "workers": pool.nodes,
        },
        "containers": [
            {
                "name": "vllm",
                "image": engine_image(spec),
                "modelCommand": "vllmServe",
                "args": args,
                "env": [
                    {
                        "name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
                        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                    },
                    {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(NIXL_SIDE_CHANNEL_PORT)},
                ],
                "ports": [{"containerPort": NIXL_SIDE_CHANNEL_PORT, "protocol": "TCP"}],
                "resources": {"limits": {resource: gpus}, "requests": {resource: gpus}},
                "mountModelVolume": True,
            }
        ],
    }


def llmd_values(plan: Plan, spec: DeploySpec) -> dict[str, Any]:
    """Values of the llm-d-modelservice chart for the plan's pools (vLLM only)."""
    prefill, decode, _ = _pools(plan)
    if decode.engine.family != "vllm":
        raise InvalidInputError(
            "plan.decode.engine.engine",
            decode.engine.engine,
            "vllm for llm-d (its modelservice chart starts vLLM; use the pd or dynamo target)",
        )
    return {
        "multinode": prefill.nodes > 1 or decode.nodes > 1,
        "modelArtifacts": {
            "name": plan.model,
            "uri": f"hf://{plan.model}",
            "size": f"{spec.disk_gb}Gi",
        },
        "routing": {"servicePort": spec.port, "proxy": {"connector": "nixlv2"}},
        "prefill": _llmd_pool(plan, spec, "prefill"),
        "decode": _llmd_pool(plan, spec, "decode"),
    }


def _readme(plan: Plan, spec: DeploySpec, target: str, files: list[str]) -> str:
    prefill, decode, link = _pools(plan)
    engine = serving(spec)
    lines = [
        f"# {plan.model}: disaggregated prefill/decode ({target})",
        "",
        f"Prefill pool: {prefill.label}; decode pool: {decode.label}; the KV cache crosses "
        f"{link}. Engine: {engine.display_name} {engine_release(spec)}.",
        "",
        "Files: " + ", ".join(f"`{name}`" for name in files) + ".",
        "",
    ]
    if target == "pd":
        lines.append(
            f"On each of the {prefill.replicas} prefill instances `sh prefill.sh` (port "
            f"{PREFILL_PORT}), on each of the {decode.replicas} decode instances `sh decode.sh` "
            f"(port {DECODE_PORT}), then on one host `PREFILL_HOSTS='a b' DECODE_HOSTS='c d' sh "
            f"router.sh` (port {spec.port}, OpenAI-compatible)."
        )
        multi = [p for p in (prefill, decode) if p.nodes > 1]
        if multi:
            lines.append(
                "A pool replica over several instances runs its script on each of them with "
                "`NODE_RANK` (0 on the first) and `HEAD_IP` (the first's address) set; the "
                "router takes the first instance of each replica."
            )
        if decode.engine.family == "vllm":
            lines.append(
                f"`router.sh` runs vLLM's proxy `{VLLM_PROXY_PATH}` (vllm-project/vllm "
                f"@{VLLM_PROXY_COMMIT}), which is not installed with vLLM: put it beside "
                "`router.sh`. The servers need NIXL (`pip install nixl`)."
            )
        elif link in RDMA_LINKS:
            lines.append("Set `IB_DEVICE` to the host's RDMA devices before the pool scripts.")
    elif target == "dynamo":
        lines.append(
            "`kubectl apply -f dynamographdeployment.yaml` on a cluster with the Dynamo "
            f"platform {DYNAMO_RELEASE} installed (its operator and CRDs) and the secret "
            "`hf-token-secret` holding HF_TOKEN; a pool over several instances needs Grove or "
            "LeaderWorkerSet."
        )
    else:
        lines.append(
            f"`helm install {spec.name} llm-d-modelservice/llm-d-modelservice --version "
            f"{LLMD_CHART_VERSION} -f values.yaml`, with llm-d's gateway and inference "
            "scheduler (the llm-d-infra and GAIE charts) in front."
        )
    return "\n".join(lines) + "\n"


def render_disaggregated(spec: DeploySpec, target: str) -> dict[str, str]:
    """``{file name: text}`` of ``target`` (one of :data:`DISAGG_TARGETS`) for the
    disaggregated plan of ``spec``."""
    from planner.deploy.bundle import to_yaml  # bundle imports this module

    plan = spec.plan
    _pools(plan)
    if target not in DISAGG_TARGETS:
        raise InvalidInputError(
            "target", target, f"one of {', '.join(DISAGG_TARGETS)} for a disaggregated plan"
        )
    files: dict[str, str] = {}
    if target == "pd":
        files["prefill.sh"] = _pool_script(plan, "prefill")
        files["decode.sh"] = _pool_script(plan, "decode")
        files["router.sh"] = router_script(plan, spec)
    elif target == "dynamo":
        files["dynamographdeployment.yaml"] = to_yaml([dynamo_graph_deployment(plan, spec)])
    else:
        files["values.yaml"] = to_yaml([llmd_values(plan, spec)])
    files["README.md"] = _readme(plan, spec, target, sorted(files))
    return files


__all__ = [
    "DISAGG_TARGETS",
    "dynamo_graph_deployment",
    "large_ep_flags",
    "llmd_values",
    "pd_launch_scripts",
    "pool_argv",
    "pool_plan",
    "render_disaggregated",
    "router_script",
]
