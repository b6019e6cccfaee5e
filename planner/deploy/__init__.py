"""Deployment files for a plan: launch command, docker run, Kubernetes, SkyPilot (no network).

    from planner.deploy import render, spec_from_recommendation

    spec = spec_from_recommendation(result.best, request, catalog)
    files = render(spec, "k8s")   # {"deployment.yaml": "...", "service.yaml": ..., ...}

Modules: :mod:`~planner.deploy.spec` (the narrow input and the cold-start estimate),
:mod:`~planner.deploy.launch` (engine command, image, ``docker run``),
:mod:`~planner.deploy.kubernetes`, :mod:`~planner.deploy.skypilot`,
:mod:`~planner.deploy.bundle` (files per target, zip).
"""

from planner.deploy.bundle import TARGETS, render, to_yaml, write_bundle, zip_bytes
from planner.deploy.launch import docker_run_command, engine_image, launch_command
from planner.deploy.spec import ColdStart, DeploySpec, cold_start_estimate, spec_from_recommendation

__all__ = [
    "TARGETS",
    "ColdStart",
    "DeploySpec",
    "cold_start_estimate",
    "docker_run_command",
    "engine_image",
    "launch_command",
    "render",
    "spec_from_recommendation",
    "to_yaml",
    "write_bundle",
    "zip_bytes",
]
