"""Kubernetes manifests of a plan: a Deployment per replica group, a Service, an autoscaler.

One pod is one replica group (one ``vllm serve`` on all the GPUs of one instance; see
:mod:`planner.deploy.spec`); a group spanning several instances is a LeaderWorkerSet (the
``lws`` controller of Kubernetes SIG Apps must be installed). The manifests need, in the
cluster: the NVIDIA device plugin or GPU operator (``nvidia.com/gpu``; AMD's device plugin
for ``amd.com/gpu``), GPU feature discovery for the ``nvidia.com/gpu.product`` label, and, for
the autoscaler, Prometheus scraping the pods' ``/metrics`` plus prometheus-adapter serving
``vllm:num_requests_waiting`` as a pods metric (or KEDA, with the ScaledObject given instead
of the HorizontalPodAutoscaler).

Scaling signal: waiting requests (``vllm:num_requests_waiting``), the queue depth, not GPU
utilisation, which a decode-bound engine keeps near 100% at any load. Scale-down waits 10
minutes: a new pod costs a cold start (the estimate is in the bundle's README).

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
    engine_args,
    engine_image,
    head_script,
    worker_script,
)
from planner.deploy.spec import DeploySpec

#: clouds whose managed Kubernetes labels nodes with their instance type
MANAGED_K8S = ("aws", "gcp", "azure", "oci")
SPOT_NODE_LABELS = {
    "aws": ("eks.amazonaws.com/capacityType", "SPOT"),
    "gcp": ("cloud.google.com/gke-spot", "true"),
    "azure": ("kubernetes.azure.com/scalesetpriority", "spot"),
}
WAITING_METRIC = "vllm:num_requests_waiting"
SHM_SIZE = "16Gi"  # PyTorch/NCCL shared memory between the ranks of one pod


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
    """The vLLM container of one pod; ``serves``: it runs the HTTP server (probes, port)."""
    resource = "nvidia.com/gpu" if spec.vendor == "nvidia" else "amd.com/gpu"
    gpus = str(spec.gpus_per_node)
    container: dict[str, Any] = {
        "name": "vllm",
        "image": engine_image(spec),
        "command": command[:2],
        "args": command[2:],
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
    if serves:
        probe = {"httpGet": {"path": "/health", "port": "http"}}
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
    return {
        "containers": [container],
        "nodeSelector": _node_selector(spec),
        "tolerations": _tolerations(spec),
        "terminationGracePeriodSeconds": 60,
        "volumes": [
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
        ],
    }


def _template_metadata(spec: DeploySpec, role: str | None = None) -> dict[str, Any]:
    labels = _labels(spec) | ({"servewise.io/role": role} if role else {})
    metadata: dict[str, Any] = {"labels": labels}
    if role in (None, "leader"):
        metadata["annotations"] = {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(spec.port),
            "prometheus.io/path": "/metrics",
        }
    return metadata


def deployment(spec: DeploySpec) -> dict[str, Any]:
    """The groups as a Deployment (one pod a group), or, for a group spanning several
    instances, as a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, the Kubernetes SIG's API for
    multi-node serving): one leader pod running the Ray head and ``vllm serve``, workers
    joining it, scaled and restarted as a whole group."""
    if spec.nodes_per_group == 1:
        container = _container(spec, engine_args(spec), serves=True)
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": spec.name, "labels": _labels(spec)},
            "spec": {
                "replicas": spec.groups,
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
    leader = _container(spec, ["/bin/bash", "-c", head_script(spec)], serves=True)
    worker = _container(
        spec, ["/bin/bash", "-c", worker_script("${LWS_LEADER_ADDRESS}")], serves=False
    )
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "replicas": spec.groups,
            "leaderWorkerTemplate": {
                "size": spec.nodes_per_group,
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
    if spec.nodes_per_group == 1:
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
            | ({"servewise.io/role": "leader"} if spec.nodes_per_group > 1 else {}),
            "ports": [{"name": "http", "port": spec.port, "targetPort": "http"}],
        },
    }


def horizontal_pod_autoscaler(spec: DeploySpec) -> dict[str, Any]:
    """autoscaling/v2 on the pods metric ``vllm:num_requests_waiting`` (average per pod)."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "scaleTargetRef": _scale_target(spec),
            "minReplicas": spec.min_groups,
            "maxReplicas": spec.groups,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": WAITING_METRIC},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": f"{spec.waiting_target:g}",
                        },
                    },
                }
            ],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0},
                "scaleDown": {"stabilizationWindowSeconds": 600},
            },
        },
    }


def keda_scaled_object(spec: DeploySpec, namespace: str = "default") -> dict[str, Any]:
    """The same scaling with KEDA (keda.sh/v1alpha1), querying Prometheus directly."""
    query = f'sum({WAITING_METRIC}{{namespace="{namespace}",pod=~"{spec.name}-.*"}})'
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "scaleTargetRef": _scale_target(spec),
            "minReplicaCount": spec.min_groups,
            "maxReplicaCount": spec.groups,
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


def manifests(spec: DeploySpec) -> dict[str, list[dict[str, Any]]]:
    """File name -> the objects it holds."""
    return {
        ("deployment.yaml" if spec.nodes_per_group == 1 else "leaderworkerset.yaml"): [
            deployment(spec)
        ],
        "service.yaml": [service(spec)],
        "hpa.yaml": [horizontal_pod_autoscaler(spec)],
        "keda-scaledobject.yaml": [keda_scaled_object(spec)],
    }
