"""Kubernetes manifests of a plan: the replicas, a Service, an autoscaler.

One pod is one replica (the plan's engine command on ``gpus_per_pod`` GPUs; replicas that share
an instance in the plan are pods the scheduler packs on one node); a replica spanning several
instances is a LeaderWorkerSet group (the ``lws`` controller of Kubernetes SIG Apps must be
installed). The manifests need, in the cluster: the NVIDIA device plugin or GPU operator
(``nvidia.com/gpu``; AMD's device plugin for ``amd.com/gpu``), GPU feature discovery for the
``nvidia.com/gpu.product`` label, and, for the autoscaler, Prometheus scraping the pods'
metrics plus prometheus-adapter serving the engine's queue gauge as a pods metric (or KEDA,
with the ScaledObject given instead of the HorizontalPodAutoscaler).

Scaling signal: the requests waiting for a batch slot (vLLM ``vllm:num_requests_waiting``,
SGLang ``sglang:num_queue_reqs``: :mod:`planner.deploy.engines`), the queue depth, not GPU
utilisation, which a decode-bound engine keeps near 100% at any load. An engine without such a
gauge (TensorRT-LLM at the pinned release) scales on the pods' CPU (metrics-server, no adapter:
the HTTP front end's tokenisation grows with the requests in flight), a weaker signal the README
names with its reason. Scale-down waits 10 minutes: a new pod costs a cold start (the estimate
is in the bundle's README).

An engine config file the command names (TensorRT-LLM's LLM API options) is a ConfigMap mounted
at the container's working directory.

Node selection: ``node.kubernetes.io/instance-type`` (set by the cloud on EKS, GKE, AKS and
OKE nodes) pins the planned instance type; ``nvidia.com/gpu.product`` the GPU. Spot plans also
select the provider's spot label: EKS managed node groups ``eks.amazonaws.com/capacityType:
SPOT``, GKE ``cloud.google.com/gke-spot: "true"``, AKS ``kubernetes.azure.com/scalesetpriority:
spot`` (with the taint AKS puts on spot pools tolerated).
"""

from __future__ import annotations

import math
from typing import Any

from planner.deploy.launch import (
    CACHE_DIR,
    CONFIG_DIR,
    config_files,
    engine_args,
    engine_image,
    node_script,
    serving,
)
from planner.deploy.spec import DeploySpec
from planner.errors import InvalidInputError

#: clouds whose managed Kubernetes labels nodes with their instance type
MANAGED_K8S = ("aws", "gcp", "azure", "oci")
SPOT_NODE_LABELS = {
    "aws": ("eks.amazonaws.com/capacityType", "SPOT"),
    "gcp": ("cloud.google.com/gke-spot", "true"),
    "azure": ("kubernetes.azure.com/scalesetpriority", "spot"),
}
SHM_SIZE = "16Gi"  # PyTorch/NCCL shared memory between the ranks of one pod
#: CPU fallback of an engine without a queue gauge: scale out above this many busy cores a pod
CPU_SCALE_OUT_CORES = "2"


def _labels(spec: DeploySpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/part-of": "servewise"}


def _node_selector(spec: DeploySpec) -> dict[str, str]:
    selector: dict[str, str] = {}
    if spec.provider in MANAGED_K8S:
        selector["node.kubernetes.io/instance-type"] = spec.instance
    if spec.gpu_product_label:
        selector["nvidia.com/gpu.product"] = spec.gpu_product_label
    if spec.spot and spec.provider in SPOT_NODE_LABELS:
        key, value = SPOT_NODE_LABELS[spec.provider]
        selector[key] = value
    return selector


def _tolerations(spec: DeploySpec) -> list[dict[str, str]]:
    resource = "nvidia.com/gpu" if spec.vendor == "nvidia" else "amd.com/gpu"
    tolerations = [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}]
    if spec.spot and spec.provider == "azure":
        tolerations.append(
            {
                "key": "kubernetes.azure.com/scalesetpriority",
                "operator": "Equal",
                "value": "spot",
                "effect": "NoSchedule",
            }
        )
    return tolerations


def startup_failure_threshold(spec: DeploySpec, period_s: int = 10) -> int:
    """Probes a pod gets to come up: twice the cold-start estimate plus 10 minutes for the
    engine start, in ``period_s`` steps."""
    return math.ceil((2 * spec.cold_start().first_start_s + 600) / period_s)


def _container(spec: DeploySpec, command: list[str], *, serves: bool) -> dict[str, Any]:
    """The engine container of one pod; ``serves``: it runs the HTTP server (probes, port)."""
    resource = "nvidia.com/gpu" if spec.vendor == "nvidia" else "amd.com/gpu"
    gpus = str(spec.gpus_per_pod)
    container: dict[str, Any] = {
        "name": spec.family,
        "image": engine_image(spec),
        "command": command[:1],
        "args": command[1:],
        "env": [
            {"name": "HF_HOME", "value": CACHE_DIR},
            {
                "name": "HF_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}
                },
            },
        ],
        "resources": {"limits": {resource: gpus}, "requests": {resource: gpus}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "model-cache", "mountPath": CACHE_DIR},
        ],
    }
    if config_files(spec):
        container["workingDir"] = CONFIG_DIR
        container["volumeMounts"].append(
            {"name": "engine-config", "mountPath": CONFIG_DIR, "readOnly": True}
        )
    if serves:
        probe = {"httpGet": {"path": serving(spec).health_path, "port": "http"}}
        container["ports"] = [{"name": "http", "containerPort": spec.port}]
        container["startupProbe"] = {
            **probe,
            "periodSeconds": 10,
            "failureThreshold": startup_failure_threshold(spec),
        }
        container["readinessProbe"] = {**probe, "periodSeconds": 10, "failureThreshold": 3}
        container["livenessProbe"] = {**probe, "periodSeconds": 30, "failureThreshold": 5}
    return container


def _pod_spec(spec: DeploySpec, container: dict[str, Any]) -> dict[str, Any]:
    volumes = _volumes(spec)
    return {
        "containers": [container],
        "nodeSelector": _node_selector(spec),
        "tolerations": _tolerations(spec),
        "terminationGracePeriodSeconds": 60,
        "volumes": volumes,
    }


def _volumes(spec: DeploySpec) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
        {
            # one volume a pod, made and deleted with it: replicas never share a disk
            "name": "model-cache",
            "ephemeral": {
                "volumeClaimTemplate": {
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": f"{spec.disk_gb}Gi"}},
                    }
                }
            },
        },
    ]
    if config_files(spec):
        volumes.append({"name": "engine-config", "configMap": {"name": _config_map_name(spec)}})
    return volumes


def _config_map_name(spec: DeploySpec) -> str:
    return f"{spec.name}-engine-config"


def config_map(spec: DeploySpec) -> dict[str, Any]:
    """The engine config files (TensorRT-LLM's LLM API options) as a ConfigMap."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": _config_map_name(spec), "labels": _labels(spec)},
        "data": config_files(spec),
    }


def _template_metadata(spec: DeploySpec, role: str | None = None) -> dict[str, Any]:
    labels = _labels(spec) | ({"servewise.io/role": role} if role else {})
    metadata: dict[str, Any] = {"labels": labels}
    if role in (None, "leader"):
        metadata["annotations"] = {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(spec.port),
            "prometheus.io/path": serving(spec).metrics_path,
        }
    return metadata


def deployment(spec: DeploySpec) -> dict[str, Any]:
    """The replicas as a Deployment (one pod a replica), or, for a replica spanning several
    instances, as a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, the Kubernetes SIG's API for
    multi-node serving): a group of pods a replica, the leader serving HTTP, scaled and
    restarted as a whole (:func:`planner.deploy.launch.node_script`)."""
    if spec.nodes == 1:
        container = _container(spec, engine_args(spec), serves=True)
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": spec.name, "labels": _labels(spec)},
            "spec": {
                "replicas": spec.replicas,
                "selector": {"matchLabels": {"app.kubernetes.io/name": spec.name}},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
                },
                "template": {
                    "metadata": _template_metadata(spec),
                    "spec": _pod_spec(spec, container),
                },
            },
        }
    script = ["/bin/bash", "-c", node_script(spec, "$LWS_WORKER_INDEX", "$LWS_LEADER_ADDRESS")]
    leader = _container(spec, script, serves=True)
    worker = _container(spec, script, serves=False)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "replicas": spec.replicas,
            "leaderWorkerTemplate": {
                "size": spec.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": _template_metadata(spec, "leader"),
                    "spec": _pod_spec(spec, leader),
                },
                "workerTemplate": {
                    "metadata": _template_metadata(spec, "worker"),
                    "spec": _pod_spec(spec, worker),
                },
            },
        },
    }


def pod_templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a Deployment or LeaderWorkerSet (to validate them as core v1
    PodTemplates: the LeaderWorkerSet itself is a custom resource)."""
    if workload["kind"] == "Deployment":
        return [workload["spec"]["template"]]
    lws = workload["spec"]["leaderWorkerTemplate"]
    return [lws["leaderTemplate"], lws["workerTemplate"]]


def _scale_target(spec: DeploySpec) -> dict[str, str]:
    if spec.nodes == 1:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.name}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": spec.name,
    }


def service(spec: DeploySpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/name": spec.name}
            | ({"servewise.io/role": "leader"} if spec.nodes > 1 else {}),
            "ports": [{"name": "http", "port": spec.port, "targetPort": "http"}],
        },
    }


def horizontal_pod_autoscaler(spec: DeploySpec) -> dict[str, Any]:
    """autoscaling/v2 on the engine's queue gauge (average per pod), or on CPU for an engine
    without one (module docstring)."""
    queue = serving(spec).queue_metric
    if queue is not None:
        metric: dict[str, Any] = {
            "type": "Pods",
            "pods": {
                "metric": {"name": queue},
                "target": {"type": "AverageValue", "averageValue": f"{spec.waiting_target:g}"},
            },
        }
    else:
        metric = {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "AverageValue", "averageValue": CPU_SCALE_OUT_CORES},
            },
        }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "scaleTargetRef": _scale_target(spec),
            "minReplicas": spec.min_replicas,
            "maxReplicas": spec.replicas,
            "metrics": [metric],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0},
                "scaleDown": {"stabilizationWindowSeconds": 600},
            },
        },
    }


def keda_scaled_object(spec: DeploySpec, namespace: str = "default") -> dict[str, Any]:
    """The same scaling with KEDA (keda.sh/v1alpha1), querying Prometheus for the queue gauge
    directly (an engine without one has no ScaledObject)."""
    queue = serving(spec).queue_metric
    if queue is None:
        raise InvalidInputError(
            "plan.engine.engine", spec.plan.engine.engine, "an engine with a queue gauge"
        )
    query = f'sum({queue}{{namespace="{namespace}",pod=~"{spec.name}-.*"}})'
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "scaleTargetRef": _scale_target(spec),
            "minReplicaCount": spec.min_replicas,
            "maxReplicaCount": spec.replicas,
            "cooldownPeriod": 600,
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                        "query": query,
                        "threshold": f"{spec.waiting_target:g}",
                    },
                }
            ],
        },
    }


def workload_file(spec: DeploySpec) -> str:
    return "deployment.yaml" if spec.nodes == 1 else "leaderworkerset.yaml"


def manifests(spec: DeploySpec) -> dict[str, list[dict[str, Any]]]:
    """File name -> the objects it holds."""
    files: dict[str, list[dict[str, Any]]] = {}
    if config_files(spec):
        files["configmap.yaml"] = [config_map(spec)]
    files[workload_file(spec)] = [deployment(spec)]
    files["service.yaml"] = [service(spec)]
    files["hpa.yaml"] = [horizontal_pod_autoscaler(spec)]
    if serving(spec).queue_metric is not None:
        files["keda-scaledobject.yaml"] = [keda_scaled_object(spec)]
    return files
