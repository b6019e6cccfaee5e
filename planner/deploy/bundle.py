"""The files of each deployment target, as text, and a zip of them.

``render(spec, target)`` returns ``{file name: text}`` for ``docker`` (the launch script and
``docker run`` lines), ``k8s`` (Deployment or LeaderWorkerSet, Service, HorizontalPodAutoscaler,
the KEDA alternative where the engine has a queue gauge, a ConfigMap of the engine's config
files) or ``skypilot`` (a task for ``sky launch`` and the same task with its SkyServe
``service:`` section for ``sky serve up``), for a plan on any engine. The engine's config files
(TensorRT-LLM's LLM API options) are files of the docker bundle too. Every target also gets a
README with what the files assume, how they scale and why, and the cold-start estimate.
A disaggregated plan renders to :data:`~planner.deploy.disaggregated.DISAGG_TARGETS` instead
(:mod:`planner.deploy.disaggregated`: the pools' launch commands and router, Dynamo, llm-d).
Nothing here writes outside the directory given to
:func:`write_bundle`, or touches the network.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import yaml

from planner.deploy import kubernetes, skypilot
from planner.deploy.disaggregated import DISAGG_TARGETS, render_disaggregated
from planner.deploy.launch import (
    config_files,
    docker_run_command,
    engine_image,
    engine_release,
    host_script,
    serving,
)
from planner.deploy.spec import DeploySpec
from planner.errors import InvalidInputError

TARGETS = ("docker", "k8s", "skypilot")
#: every target: an aggregated plan's (:data:`TARGETS`) and a disaggregated plan's
ALL_TARGETS = TARGETS + DISAGG_TARGETS


def targets_of(spec: DeploySpec) -> tuple[str, ...]:
    """The targets the plan of ``spec`` renders to."""
    return DISAGG_TARGETS if spec.plan.disaggregated else TARGETS


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
    plan = spec.plan
    engine = serving(spec)
    scaling = (
        f"{spec.min_replicas} to {spec.replicas} replicas"
        if spec.min_replicas < spec.replicas
        else f"{spec.replicas} replica{'s' if spec.replicas > 1 else ''} (fixed: no demand curve)"
    )
    where = (
        f"{spec.nodes} x {spec.instance} a replica"
        if spec.nodes > 1
        else f"{spec.replicas_per_instance} a {spec.instance}"
        if spec.replicas_per_instance > 1
        else f"one {spec.instance} a replica"
    )
    return (
        f"{plan.model} ({plan.precision}), {plan.label}: {plan.gpus_per_replica} x {plan.gpu} a "
        f"replica ({where}), {scaling}, {spec.instances} instance"
        f"{'s' if spec.instances > 1 else ''} at the peak; {spec.provider} {spec.region} "
        f"{spec.pricing.replace('_', ' ')}; {engine.display_name} {engine_release(spec)} "
        f"({engine_image(spec)})."
    )


def _release_note(spec: DeploySpec) -> list[str]:
    if spec.plan.engine.version is not None:
        return []
    engine = serving(spec)
    return [
        "",
        f"The plan names no {engine.display_name} release: the files pin "
        f"{engine.pinned_release} ({engine.pin_reason}); the engine settings are the plan's, "
        "stated in full in the command.",
    ]


def _scaling_note(spec: DeploySpec) -> list[str]:
    engine = serving(spec)
    if engine.queue_metric is not None:
        return [
            "",
            f"Scaling: on `{engine.queue_metric}` ({engine.display_name}'s requests waiting for "
            f"a batch slot, from `{engine.metrics_path}`): a replica is added when more than "
            f"{spec.waiting_target:g} requests wait per replica on average.",
        ]
    return [
        "",
        f"Scaling: {engine.display_name} has no queue gauge to scale on here: "
        f"{engine.no_queue_metric_reason}. The autoscaler falls back to the pods' CPU (more "
        f"than {kubernetes.CPU_SCALE_OUT_CORES} cores busy a pod on average: the HTTP front "
        "end's tokenisation grows with the requests in flight), a weaker signal than the "
        "queue; there is no KEDA ScaledObject.",
    ]


def _readme(spec: DeploySpec, target: str, files: list[str]) -> str:
    engine = serving(spec)
    lines = [
        f"# Deploy {spec.name} ({target})",
        "",
        _summary(spec),
        "",
        f"Cold start: {spec.cold_start().describe()}",
        "",
        "Files: " + ", ".join(f"`{f}`" for f in files) + ".",
        *_release_note(spec),
    ]
    if target == "k8s":
        workload = kubernetes.workload_file(spec)
        configs = " -f configmap.yaml" if config_files(spec) else ""
        keda = (
            " (or, with KEDA installed, `keda-scaledobject.yaml` instead of `hpa.yaml`)"
            if engine.queue_metric is not None
            else ""
        )
        adapter = (
            f"Prometheus scraping the pods plus prometheus-adapter serving `{engine.queue_metric}` "
            "as a pods metric"
            if engine.queue_metric is not None
            else "metrics-server (CPU)"
        )
        lines += [
            "",
            f"Apply: `kubectl apply{configs} -f {workload} -f service.yaml -f hpa.yaml`{keda}. "
            "The Hugging Face token, when the model needs one: `kubectl create secret generic "
            "hf-token --from-literal=token=$HF_TOKEN`.",
            "",
            "The cluster needs the GPU device plugin (`nvidia.com/gpu` / `amd.com/gpu`), GPU "
            "feature discovery for `nvidia.com/gpu.product`, nodes of the planned instance type, "
            f"and for `hpa.yaml` {adapter}.",
            *_scaling_note(spec),
        ]
        if spec.nodes > 1:
            lines += [
                "",
                f"A replica is {spec.nodes} pods on {spec.nodes} instances: the "
                "LeaderWorkerSet controller (kubernetes-sigs/lws) must be installed.",
            ]
        if spec.replicas_per_instance > 1:
            lines += [
                "",
                f"{spec.replicas_per_instance} replicas share one {spec.instance} "
                f"({spec.gpus_per_pod} GPUs a pod): the scheduler packs their pods on a node.",
            ]
    elif target == "skypilot":
        lines += [
            "",
            f"One instance: `sky launch -c {spec.name} task.yaml --secret HF_TOKEN`. As a "
            "service: `sky serve up service.yaml --secret HF_TOKEN` (one SkyServe replica = one "
            "replica of the plan).",
        ]
        if spec.replicas_per_instance > 1:
            lines += [
                "",
                f"The plan packs {spec.replicas_per_instance} replicas on one {spec.instance}: "
                f"`task.yaml` runs them all (ports {spec.port} to "
                f"{spec.port + spec.replicas_per_instance - 1}), but SkyServe's load balancer "
                "reaches one port of a replica, so under `service.yaml` each instance carries "
                f"one replica ({spec.replicas} instances instead of {spec.instances}). To pay the "
                "plan's price as a service, deploy the Kubernetes files (the scheduler packs "
                "the pods) or put your own balancer in front of `task.yaml`'s ports.",
            ]
    else:
        ports = (
            f"ports {spec.port} to {spec.port + spec.replicas_per_instance - 1}"
            if spec.replicas_per_instance > 1
            else f"port {spec.port}"
        )
        lines += [
            "",
            (
                "On the instance"
                if spec.instances == 1
                else f"On each of the {spec.instances} instances"
            )
            + ", in this folder: `sh docker-run.sh` "
            f"(or `sh launch.sh` where {engine.display_name} {engine_release(spec)} is "
            f"installed); put a load balancer in front of the instances' {ports}."
            + (
                f" A replica is {spec.nodes} instances: set `NODE_RANK` (0 on the first) and "
                "`HEAD_IP` (the first's address) on each."
                if spec.nodes > 1
                else ""
            ),
        ]
    return "\n".join(lines) + "\n"


def render(spec: DeploySpec, target: str) -> dict[str, str]:
    """``{file name: text}`` of ``target`` (one of :data:`TARGETS`)."""
    if spec.plan.disaggregated:
        return render_disaggregated(spec, target)
    if target not in TARGETS:
        raise InvalidInputError("target", target, f"one of {', '.join(TARGETS)}")
    files: dict[str, str] = {}
    if target == "docker":
        files["launch.sh"] = "#!/bin/sh\n" + host_script(spec)
        files["docker-run.sh"] = "#!/bin/sh\n" + docker_run_command(spec)
        files.update(config_files(spec))
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


def check_target_folder(directory: Path, *, force: bool = False) -> None:
    """``directory`` is new or empty, or ``force`` says its files may be written over: an
    emit into a folder that holds a project (``--emit docker .`` in a repository) would
    replace its README.md and others of the same names."""
    if directory.exists() and not directory.is_dir():
        raise InvalidInputError("--emit DIR", str(directory), "a folder (this is a file)")
    if force or not directory.exists():
        return
    try:
        held = sorted(p.name for p in directory.iterdir())
    except OSError as exc:
        raise InvalidInputError(
            "--emit DIR", str(directory), f"a readable folder ({exc.strerror})"
        ) from None
    if held:
        shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
        raise InvalidInputError(
            "--emit DIR",
            str(directory),
            f"a new or empty folder (it holds {shown}); --force writes into it anyway",
        )


def write_bundle(files: dict[str, str], directory: Path, *, force: bool = False) -> list[Path]:
    """Write the files into ``directory`` (created; one that holds anything only with
    ``force``, see :func:`check_target_folder`); returns their paths."""
    check_target_folder(directory, force=force)
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
