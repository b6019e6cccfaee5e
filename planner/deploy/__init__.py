"""Deployment files for a typed plan, on its engine: launch command, docker run, Kubernetes,
SkyPilot (no network).

    from planner.deploy import render, spec_from_plan

    spec = spec_from_plan(result.best.plan, catalog)
    files = render(spec, "k8s")   # {"deployment.yaml": "...", "service.yaml": ..., ...}

Modules: :mod:`~planner.deploy.spec` (what the files need beyond the plan, the cold-start
estimate), :mod:`~planner.deploy.engines` (each engine's image, health path, metrics and queue
gauge), :mod:`~planner.deploy.launch` (the processes: the plan's command, multi-node scripts,
``docker run``), :mod:`~planner.deploy.kubernetes`, :mod:`~planner.deploy.skypilot`,
:mod:`~planner.deploy.bundle` (files per target, zip).
"""

from planner.deploy.bundle import (
    ALL_TARGETS,
    TARGETS,
    check_target_folder,
    render,
    targets_of,
    to_yaml,
    write_bundle,
    zip_bytes,
)
from planner.deploy.disaggregated import DISAGG_TARGETS
from planner.deploy.engines import ENGINES, EngineServing, engine_serving
from planner.deploy.launch import docker_run_command, engine_args, engine_image, launch_command
from planner.deploy.spec import ColdStart, DeploySpec, cold_start_estimate, spec_from_plan

__all__ = [
    "ALL_TARGETS",
    "DISAGG_TARGETS",
    "ENGINES",
    "TARGETS",
    "ColdStart",
    "DeploySpec",
    "EngineServing",
    "check_target_folder",
    "cold_start_estimate",
    "docker_run_command",
    "engine_args",
    "engine_image",
    "engine_serving",
    "launch_command",
    "render",
    "spec_from_plan",
    "targets_of",
    "to_yaml",
    "write_bundle",
    "zip_bytes",
]
