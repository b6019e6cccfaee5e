"""The ecosystem's own validators for the deployment files (test dependencies).

- Kubernetes: ``kubernetes-validate`` checks each object against the OpenAPI schema of a pinned
  Kubernetes version, strictly (unknown fields fail). Custom resources (LeaderWorkerSet, KEDA's
  ScaledObject) have no schema there: their pod templates are validated as core ``v1``
  PodTemplates, the rest of them field by field in the tests.
- Custom resources with a published CRD (NVIDIA Dynamo's DynamoGraphDeployment):
  :func:`validate_custom_resource` checks the object against the CRD's ``openAPIV3Schema``
  (vendored under ``fixtures/``) with ``jsonschema``, as ``kubectl apply --validate=strict``
  does: an object schema that lists its properties and neither preserves unknown fields nor
  states ``additionalProperties`` refuses any other field (the API server would prune it).
- SkyPilot: ``sky.Task.from_yaml`` (SkyPilot's own loader and schema) in a subprocess whose
  ``HOME`` holds a seeded SkyPilot catalog, so that the loader has the ``vms.csv`` files it
  would otherwise download (nothing here may reach the network).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from planner.catalog import Catalog
from planner.catalog.skypilot import SKYPILOT_ACCELERATORS

KUBERNETES_VERSION = "1.34.0"
CUSTOM_KINDS = {"LeaderWorkerSet", "ScaledObject"}
SKYPILOT_CATALOG_VERSION = "v8"  # the catalog layout skypilot 0.14.1 reads
_VMS_COLUMNS = [
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "GpuInfo",
    "Price",
    "SpotPrice",
    "Region",
    "AvailabilityZone",
]


def validate_kubernetes(text: str) -> list[dict[str, Any]]:
    """Every document of a manifest file, validated; returns them."""
    documents = [d for d in yaml.safe_load_all(text) if d is not None]
    for document in documents:
        if document["kind"] in CUSTOM_KINDS:
            templates = _templates(document)
            for template in templates:
                kubernetes_validate.validate(
                    {
                        "apiVersion": "v1",
                        "kind": "PodTemplate",
                        "metadata": {"name": document["metadata"]["name"]},
                        "template": template,
                    },
                    KUBERNETES_VERSION,
                    strict=True,
                )
            continue
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    return documents


def strict_crd_schema(schema: Any) -> Any:
    """A CRD's ``openAPIV3Schema`` as a JSON Schema that refuses unknown fields (see the module
    docstring) and lets ``nullable`` fields be null."""
    if isinstance(schema, list):
        return [strict_crd_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict_crd_schema(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def validate_custom_resource(document: dict[str, Any], schema_path: Path) -> None:
    """``document`` against the vendored ``openAPIV3Schema`` at ``schema_path``, strictly;
    raises ``jsonschema.ValidationError``."""
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    schema.pop("$comment", None)
    jsonschema.Draft7Validator(strict_crd_schema(schema)).validate(document)


def _templates(document: dict[str, Any]) -> list[dict[str, Any]]:
    if document["kind"] != "LeaderWorkerSet":
        return []
    lws = document["spec"]["leaderWorkerTemplate"]
    return [lws["leaderTemplate"], lws["workerTemplate"]]


def _seed_skypilot_catalog(home: Path, catalog: Catalog, instances: set[str]) -> None:
    """SkyPilot-format vms.csv files for the clouds of ``instances`` under ``home/.sky``."""
    reverse: dict[str, str] = {}
    for name, gpu in SKYPILOT_ACCELERATORS.items():
        reverse.setdefault(gpu, name)
    by_cloud: dict[str, list[dict[str, Any]]] = {}
    for price in catalog.prices:
        if price.instance not in instances or price.pricing not in ("on_demand", "spot"):
            continue
        inst = catalog.instance(price.instance)
        rows = by_cloud.setdefault(inst.provider, [])
        rows.append(
            {
                "InstanceType": inst.instance,
                "AcceleratorName": reverse.get(inst.gpu_id, inst.gpu_id),
                "AcceleratorCount": float(inst.gpus),
                "vCPUs": float(inst.vcpus or 8),
                "MemoryGiB": float(inst.ram_gib or 64),
                "GpuInfo": "",
                "Price": price.usd_per_hour if price.pricing == "on_demand" else "",
                "SpotPrice": price.usd_per_hour if price.pricing == "spot" else "",
                "Region": price.region,
                "AvailabilityZone": f"{price.region}-a",
            }
        )
    for cloud, rows in by_cloud.items():
        path = home / ".sky" / "catalogs" / SKYPILOT_CATALOG_VERSION / cloud / "vms.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=_VMS_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)


_LOADER = """
import json, sys
import sky
out = []
for path in sys.argv[1:]:
    task = sky.Task.from_yaml(path)
    (resources,) = list(task.resources)
    service = task.service
    out.append({
        "path": path,
        "cloud": str(resources.cloud).lower(),
        "region": resources.region,
        "instance_type": resources.instance_type,
        "use_spot": resources.use_spot,
        "disk_size": resources.disk_size,
        "num_nodes": task.num_nodes,
        "image_id": next(iter(resources.image_id.values())) if resources.image_id else None,
        "run": task.run,
        "min_replicas": None if service is None else service.min_replicas,
        "max_replicas": None if service is None else service.max_replicas,
        "target_qps": None if service is None else service.target_qps_per_replica,
        "readiness_path": None if service is None else service.readiness_path,
    })
print("RESULT" + json.dumps(out))
"""


def load_skypilot_tasks(
    paths: list[Path], home: Path, catalog: Catalog, instances: set[str]
) -> list[dict[str, Any]]:
    """``sky.Task.from_yaml`` of each file, offline; what SkyPilot understood of each."""
    _seed_skypilot_catalog(home, catalog, instances)
    env = {
        **os.environ,
        "HOME": str(home),
        "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        "SKYPILOT_DEBUG": "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", _LOADER, *map(str, paths)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT"))
    return json.loads(line.removeprefix("RESULT"))
