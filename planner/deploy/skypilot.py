"""A SkyPilot task of a plan and its SkyServe ``service:`` section.

The task asks for the planned instance type in the planned cloud and region (``infra:
<cloud>/<region>``, SkyPilot's resource spelling since 0.10), spot when the plan is priced
spot, a disk sized for the weights; ``setup`` installs the pinned vLLM, ``run`` starts the
group's ``vllm serve``. The Hugging Face token is a SkyPilot secret (``--secret HF_TOKEN``).
A group spanning several instances (pipeline stages across nodes) becomes ``num_nodes``
nodes joined in a Ray cluster, vLLM's multi-node serving.

SkyServe: one replica is one group. The readiness probe is ``GET /health`` after the
cold-start estimate; with a demand curve (average below peak) the replica policy scales between
the groups the average needs and the planned groups at ``target_qps_per_replica`` = the
requests per second a group sustains inside the SLO (the plan's own capacity), otherwise the
planned groups are fixed. AMD plans run on vLLM's ROCm image (``image_id: docker:...``): vLLM's
ROCm build is not on PyPI.
"""

from __future__ import annotations

import math
from typing import Any

from planner.deploy.launch import engine_image, head_script, worker_script
from planner.deploy.spec import DeploySpec


def _run_script(spec: DeploySpec) -> str:
    if spec.nodes_per_group == 1:
        return head_script(spec)
    return (
        'HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
        'if [ "$SKYPILOT_NODE_RANK" = "0" ]; then\n'
        + _indent(head_script(spec))
        + "else\n"
        + _indent(worker_script("$HEAD_IP"))
        + "fi\n"
    )


def _indent(script: str) -> str:
    return "".join(f"  {line}\n" for line in script.splitlines())


def service_section(spec: DeploySpec) -> dict[str, Any]:
    delay = int(math.ceil((spec.cold_start().first_start_s + 600) / 60) * 60)
    section: dict[str, Any] = {
        "readiness_probe": {"path": "/health", "initial_delay_seconds": delay},
    }
    if spec.min_groups < spec.groups and spec.group_rps:
        section["replica_policy"] = {
            "min_replicas": spec.min_groups,
            "max_replicas": spec.groups,
            "target_qps_per_replica": round(spec.group_rps, 3),
        }
    else:
        section["replicas"] = spec.groups
    return section


def task(spec: DeploySpec, *, with_service: bool) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "infra": f"{spec.provider}/{spec.region}",
        "instance_type": spec.instance,
        "use_spot": spec.spot,
        "disk_size": spec.disk_gb,
        "ports": spec.port,
    }
    body: dict[str, Any] = {"name": spec.name, "resources": resources}
    if spec.nodes_per_group > 1:
        body["num_nodes"] = spec.nodes_per_group
    body["envs"] = {"MODEL": spec.model}
    body["secrets"] = {"HF_TOKEN": None}
    if spec.vendor == "amd":
        resources["image_id"] = f"docker:{engine_image(spec)}"
        body["setup"] = "vllm --version\n"
    else:
        body["setup"] = f"pip install vllm=={spec.engine_version}\n"
    body["run"] = _run_script(spec)
    if with_service:
        body["service"] = service_section(spec)
    return body
