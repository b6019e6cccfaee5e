"""A SkyPilot task of a plan and its SkyServe ``service:`` section.

The task asks for the planned instance type in the planned cloud and region (``infra:
<cloud>/<region>``, SkyPilot's resource spelling since 0.10), spot when the plan is priced
spot, a disk sized for the weights; ``run`` starts the plan's engine command. vLLM on NVIDIA
GPUs is installed by ``setup`` (``pip install vllm==<release>``); SGLang, TensorRT-LLM and any
engine on AMD GPUs run in their official image (``image_id: docker:...``: SGLang's and
TensorRT-LLM's images are how their projects ship them; vLLM's ROCm build is not on PyPI). The
Hugging Face token is a SkyPilot secret (``--secret HF_TOKEN``). A replica spanning several
instances becomes ``num_nodes`` nodes (:func:`planner.deploy.launch.node_script`: the first
node's address is the first of ``SKYPILOT_NODE_IPS``). An engine config file the command
names is written by ``run`` before it starts the engine.

SkyServe: one SkyServe replica is one instance (or the instances one replica spans) and its
load balancer reaches one port of it. The readiness probe is ``GET <health path>`` after the
cold-start estimate; with a demand curve (the plan's utilisation below one) the replica policy
scales between the replicas the average load keeps busy and the planned replicas at
``target_qps_per_replica`` = the requests per second one replica was predicted to serve at the
plan's load, otherwise the planned replicas are fixed. A plan that packs several replicas on one
instance (``replicas_per_instance`` > 1) runs them all in ``task.yaml`` (``sky launch``: their
ports are opened), but under SkyServe each instance carries one: the README says what that
costs and points to the Kubernetes files, whose scheduler packs them.
"""

from __future__ import annotations

import math
from typing import Any

from planner.deploy.launch import (
    config_files,
    engine_image,
    engine_release,
    gpu_slots,
    launch_command,
    node_script,
    serving,
)
from planner.deploy.spec import DeploySpec


def _indent(script: str) -> str:
    return "".join(f"  {line}\n" for line in script.splitlines())


def _config_lines(spec: DeploySpec) -> str:
    """Shell that writes the engine config files into the working directory."""
    text = ""
    for name, content in config_files(spec).items():
        text += f"cat > {name} <<'SERVEWISE_EOF'\n{content}SERVEWISE_EOF\n"
    return text


def _run_script(spec: DeploySpec, *, with_service: bool) -> str:
    script = _config_lines(spec)
    if spec.nodes > 1:
        return (
            script
            + 'HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
            + node_script(spec, "$SKYPILOT_NODE_RANK", "$HEAD_IP")
        )
    slots = gpu_slots(spec)
    variable = "CUDA_VISIBLE_DEVICES" if spec.vendor == "nvidia" else "HIP_VISIBLE_DEVICES"
    if len(slots) == 1:
        return script + f"exec {launch_command(spec)}\n"
    if with_service:  # one engine an instance: SkyServe reaches one port of a replica
        return script + f"export {variable}={slots[0]}\nexec {launch_command(spec)}\n"
    for slot, gpus in enumerate(slots):
        script += f"{variable}={gpus} {launch_command(spec, slot=slot)} &\n"
    return script + "wait\n"


def service_section(spec: DeploySpec) -> dict[str, Any]:
    delay = int(math.ceil((spec.cold_start().first_start_s + 600) / 60) * 60)
    section: dict[str, Any] = {
        "readiness_probe": {"path": serving(spec).health_path, "initial_delay_seconds": delay},
    }
    rate = spec.request_rate_per_replica
    if spec.min_replicas < spec.replicas and rate:
        section["replica_policy"] = {
            "min_replicas": spec.min_replicas,
            "max_replicas": spec.replicas,
            "target_qps_per_replica": round(rate, 3),
        }
    else:
        section["replicas"] = spec.replicas
    return section


def task(spec: DeploySpec, *, with_service: bool) -> dict[str, Any]:
    packed = spec.nodes == 1 and not with_service and spec.replicas_per_instance > 1
    ports: int | list[int] = spec.port
    if packed:
        ports = [spec.port + slot for slot in range(spec.replicas_per_instance)]
    resources: dict[str, Any] = {
        "infra": f"{spec.provider}/{spec.region}",
        "instance_type": spec.instance,
        "use_spot": spec.spot,
        "disk_size": spec.disk_gb,
        "ports": ports,
    }
    body: dict[str, Any] = {"name": spec.name, "resources": resources}
    if spec.nodes > 1:
        body["num_nodes"] = spec.nodes
    body["envs"] = {"MODEL": spec.plan.model}
    body["secrets"] = {"HF_TOKEN": None}
    package = serving(spec).pip_package
    if spec.vendor == "nvidia" and package is not None:
        body["setup"] = f"pip install {package}=={engine_release(spec)}\n"
    else:
        resources["image_id"] = f"docker:{engine_image(spec)}"
    body["run"] = _run_script(spec, with_service=with_service)
    if with_service:
        body["service"] = service_section(spec)
    return body
