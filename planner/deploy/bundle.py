"""The files of each deployment target, as text, and a zip of them.

``render(spec, target)`` returns ``{file name: text}`` for ``docker`` (the launch command and a
``docker run`` line), ``k8s`` (Deployment, Service, HorizontalPodAutoscaler, the KEDA
alternative) or ``skypilot`` (a task for ``sky launch`` and the same task with its SkyServe
``service:`` section for ``sky serve up``). Every target also gets a README with what the
files assume and the cold-start estimate. Nothing here writes outside the directory given to
:func:`write_bundle`, or touches the network.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import yaml

from planner.deploy import kubernetes, skypilot
from planner.deploy.launch import (
    docker_run_command,
    engine_image,
    head_script,
    launch_command,
    worker_script,
)
from planner.deploy.spec import DeploySpec
from planner.errors import InvalidInputError

TARGETS = ("docker", "k8s", "skypilot")


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the order written, multi-line strings as ``|`` blocks, no
    anchors (a reader should not have to resolve ``*id001``)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(documents: list[dict[str, Any]]) -> str:
    """YAML of one or more documents (``---`` between them)."""
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def _summary(spec: DeploySpec) -> str:
    serve = spec.serve
    shape = f"TP{serve.tensor_parallel_size} x PP{serve.pipeline_parallel_size}"
    if spec.data_parallel_size > 1:
        shape += f" x DP{spec.data_parallel_size}"
    scaling = (
        f"{spec.min_groups} to {spec.groups} groups"
        if spec.min_groups < spec.groups
        else f"{spec.groups} groups (fixed: no demand curve)"
    )
    return (
        f"{spec.model} ({serve.precision}) on {spec.nodes_per_group} x {spec.instance} "
        f"({spec.gpus_per_group} x {spec.gpu_id}, {shape}) a group, {scaling}, "
        f"{spec.provider} {spec.region} {spec.pricing.replace('_', ' ')}; "
        f"vLLM {spec.engine_version} ({engine_image(spec)})."
    )


def _readme(spec: DeploySpec, target: str, files: list[str]) -> str:
    lines = [
        f"# Deploy {spec.name} ({target})",
        "",
        _summary(spec),
        "",
        f"Cold start: {spec.cold_start().describe()}",
        "",
        "Files: " + ", ".join(f"`{f}`" for f in files) + ".",
        "",
    ]
    if target == "k8s":
        workload = next(f for f in files if f in ("deployment.yaml", "leaderworkerset.yaml"))
        lines += [
            f"Apply: `kubectl apply -f {workload} -f service.yaml -f hpa.yaml` (or, with "
            "KEDA installed, `keda-scaledobject.yaml` instead of `hpa.yaml`). The Hugging Face "
            "token, when the model needs one: `kubectl create secret generic hf-token "
            "--from-literal=token=$HF_TOKEN`.",
            "",
            "The cluster needs the GPU device plugin (`nvidia.com/gpu` / `amd.com/gpu`), GPU "
            "feature discovery for `nvidia.com/gpu.product`, nodes of the planned instance type, "
            "and for `hpa.yaml` Prometheus scraping the pods plus prometheus-adapter serving "
            f"`{kubernetes.WAITING_METRIC}` as a pods metric. The autoscaler adds a group when "
            f"more than {spec.waiting_target:g} requests wait per group on average.",
        ]
        if spec.nodes_per_group > 1:
            lines += [
                "",
                f"A group is {spec.nodes_per_group} pods on {spec.nodes_per_group} instances "
                "(pipeline stages across instances): the LeaderWorkerSet controller "
                "(kubernetes-sigs/lws) must be installed.",
            ]
    elif target == "skypilot":
        lines += [
            "One group: `sky launch -c "
            f"{spec.name} task.yaml --secret HF_TOKEN`. As a service: `sky serve up service.yaml "
            "--secret HF_TOKEN` (one SkyServe replica = one group).",
        ]
    else:
        lines += [
            f"On each of the {spec.groups * spec.nodes_per_group} instances: `sh docker-run.sh` "
            f"(or `sh launch.sh` where vLLM {spec.engine_version} is installed); put a load "
            "balancer in front of the groups' port "
            f"{spec.port}."
            + (
                f" A group is {spec.nodes_per_group} instances: set `NODE_RANK` (0 on the "
                "head) and `HEAD_IP` (the head's address) on each."
                if spec.nodes_per_group > 1
                else ""
            ),
        ]
    return "\n".join(lines) + "\n"


def _launch_script(spec: DeploySpec) -> str:
    if spec.nodes_per_group == 1:
        return launch_command(spec) + "\n"
    return (
        ': "${NODE_RANK:?set NODE_RANK: 0 on the head node, 1.. on the others}"\n'
        'if [ "$NODE_RANK" = 0 ]; then\n'
        + "".join(f"  {line}\n" for line in head_script(spec).splitlines())
        + "else\n"
        + f"  {worker_script('$HEAD_IP')}"
        + "fi\n"
    )


def render(spec: DeploySpec, target: str) -> dict[str, str]:
    """``{file name: text}`` of ``target`` (one of :data:`TARGETS`)."""
    if target not in TARGETS:
        raise InvalidInputError("target", target, f"one of {', '.join(TARGETS)}")
    files: dict[str, str] = {}
    if target == "docker":
        files["launch.sh"] = "#!/bin/sh\n" + _launch_script(spec)
        files["docker-run.sh"] = "#!/bin/sh\n" + docker_run_command(spec)
    elif target == "k8s":
        for name, objects in kubernetes.manifests(spec).items():
            files[name] = to_yaml(objects)
    else:
        files["task.yaml"] = to_yaml([skypilot.task(spec, with_service=False)])
        files["service.yaml"] = to_yaml([skypilot.task(spec, with_service=True)])
    files["README.md"] = _readme(spec, target, sorted(files))
    return files


def zip_bytes(files: dict[str, str], folder: str) -> bytes:
    """The files in a zip, under ``folder/``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(f"{folder}/{name}", text)
    return buffer.getvalue()


def write_bundle(files: dict[str, str], directory: Path) -> list[Path]:
    """Write the files into ``directory`` (created); returns their paths."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, text in files.items():
            path = directory / name
            path.write_text(text, encoding="utf-8")
            paths.append(path)
    except OSError as exc:
        raise InvalidInputError(
            "--emit DIR", str(directory), f"a writable folder ({exc.strerror})"
        ) from None
    return paths
