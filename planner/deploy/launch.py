"""The processes of a deployment: each replica's engine command, the scripts of a replica that
spans instances, and ``docker run`` lines on the engine's official image.

Every process runs the plan's own command (:func:`planner.engine_command.engine_argv`, listening
on ``0.0.0.0`` and the deployment's port) followed only by what a deployment adds
(:data:`DEPLOY_FLAGS`): the engine's metrics switch (:mod:`planner.deploy.engines`) and, for a
replica across instances, how its nodes find each other:

- vLLM: a Ray cluster (``--distributed-executor-backend ray``): the first node runs the Ray head
  and ``vllm serve`` once every node has joined, the others join it (vLLM's multi-node serving);
- SGLang: every node runs the same command with ``--nnodes``, its ``--node-rank`` and
  ``--dist-init-addr`` (the first node's address); the first node serves HTTP;
- TensorRT-LLM across instances needs MPI (``trtllm-llmapi-launch`` under Slurm or mpirun),
  which these files do not set up: such a plan is refused with the reason.

Replicas sharing an instance (:attr:`~planner.deploy.spec.DeploySpec.replicas_per_instance`)
run on their own GPUs (``CUDA_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES`` on AMD, or docker's
``--gpus device=...``) and ports (the port, the port + 1, ...).

The containers start the command's program explicitly (``--entrypoint``), so nothing depends on
an image's default entrypoint. ROCm containers get ``/dev/kfd`` and ``/dev/dri`` and the
``video`` group instead of ``--gpus`` (ROCm's Docker instructions). An engine config file the
command names (TensorRT-LLM's LLM API options) sits in the command's working directory
(:data:`CONFIG_DIR` in a container, the bundle's folder on a host).
"""

from __future__ import annotations

import shlex

from planner.deploy.engines import EngineServing, engine_serving
from planner.deploy.spec import DeploySpec
from planner.engine_command import engine_argv, engine_config_files
from planner.errors import InvalidInputError

CACHE_DIR = "/root/.cache/huggingface"  # HF_HOME inside the engines' images (root user)
CONFIG_DIR = "/etc/servewise"  # engine config files in a container, and its working directory
RAY_PORT = 6379
SGLANG_DIST_PORT = 5000
LISTEN_HOST = "0.0.0.0"
#: what a deployment may add to the plan's command (nothing else: the plan says the rest)
DEPLOY_FLAGS = (
    "--enable-metrics",
    "--distributed-executor-backend",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
)


def serving(spec: DeploySpec) -> EngineServing:
    return engine_serving(spec.family)


def engine_image(spec: DeploySpec) -> str:
    """The engine's official image at the plan's release (or the pinned one) for its GPU."""
    return serving(spec).image(spec.plan.engine.version, spec.vendor, spec.plan.gpu)


def engine_release(spec: DeploySpec) -> str:
    return serving(spec).release(spec.plan.engine.version)


def config_files(spec: DeploySpec) -> dict[str, str]:
    """The files the command reads from its working directory (:data:`CONFIG_DIR`)."""
    return engine_config_files(spec.plan)


def _check_nodes(spec: DeploySpec) -> None:
    if spec.nodes > 1 and spec.family == "trtllm":
        raise InvalidInputError(
            "plan.nodes",
            spec.nodes,
            "1 for TensorRT-LLM here (a replica across instances runs under MPI: "
            "trtllm-llmapi-launch with Slurm or mpirun)",
        )


def engine_args(spec: DeploySpec, *, slot: int = 0) -> list[str]:
    """The argument vector, program first, of one replica's process on one instance (the
    ``slot``-th replica sharing it listens on the port + ``slot``): the plan's command and the
    engine's metrics switch. A replica across instances adds its node flags
    (:func:`node_script`)."""
    _check_nodes(spec)
    argv = engine_argv(spec.plan, host=LISTEN_HOST, port=spec.port + slot)
    argv += list(serving(spec).serving_flags)
    if spec.nodes > 1 and spec.family == "vllm":
        argv += ["--distributed-executor-backend", "ray"]
    return argv


def launch_command(spec: DeploySpec, *, slot: int = 0) -> str:
    """:func:`engine_args` as a shell line."""
    return shlex.join(engine_args(spec, slot=slot))


_ALIVE_NODES = (
    "python3 -c \"import ray; ray.init(address='auto', logging_level='ERROR'); "
    "print(sum(1 for n in ray.nodes() if n['Alive']))\""
)


def node_script(spec: DeploySpec, rank: str, head: str) -> str:
    """Shell of one node of a replica across instances; ``rank`` and ``head`` are shell
    expressions (``$NODE_RANK``, ``$HEAD_IP``) of the node's rank (0: the first) and the first
    node's address."""
    command = launch_command(spec)
    if spec.family == "sglang":
        return (
            f'exec {command} --nnodes {spec.nodes} --node-rank "{rank}" '
            f'--dist-init-addr "{head}:{SGLANG_DIST_PORT}"\n'
        )
    return (
        f'if [ "{rank}" = 0 ]; then\n'
        f"  ray start --head --port={RAY_PORT} --disable-usage-stats\n"
        f'  until [ "$({_ALIVE_NODES})" -ge {spec.nodes} ]; do sleep 5; done\n'
        f"  exec {command}\n"
        "else\n"
        f'  exec ray start --address="{head}:{RAY_PORT}" --disable-usage-stats --block\n'
        "fi\n"
    )


def gpu_slots(spec: DeploySpec) -> list[str]:
    """The GPU indices (``"0,1"``) of each replica sharing one instance."""
    n = spec.gpus_per_pod
    return [
        ",".join(str(g) for g in range(i * n, (i + 1) * n))
        for i in range(spec.replicas_per_instance)
    ]


def _visible_devices(spec: DeploySpec) -> str:
    return "CUDA_VISIBLE_DEVICES" if spec.vendor == "nvidia" else "HIP_VISIBLE_DEVICES"


def host_script(spec: DeploySpec) -> str:
    """``launch.sh``: the replicas of one instance, where the engine is installed."""
    lines = ['cd "$(dirname "$0")"'] if config_files(spec) else []
    if spec.nodes > 1:
        lines += [
            ': "${NODE_RANK:?set NODE_RANK: 0 on the first node, 1.. on the others}"',
            ': "${HEAD_IP:?set HEAD_IP to the first node\'s address}"',
            node_script(spec, "$NODE_RANK", "$HEAD_IP").rstrip("\n"),
        ]
    elif spec.replicas_per_instance == 1:
        lines.append(f"exec {launch_command(spec)}")
    else:
        variable = _visible_devices(spec)
        for slot, gpus in enumerate(gpu_slots(spec)):
            lines.append(f"{variable}={gpus} {launch_command(spec, slot=slot)} &")
        lines.append("wait")
    return "\n".join(lines) + "\n"


def _docker_words(spec: DeploySpec, name: str, gpus: str | None, port: int) -> list[str]:
    words = ["docker", "run", "-d", "--name", name, "--restart", "unless-stopped"]
    if spec.vendor == "nvidia":
        words += ["--runtime", "nvidia", "--gpus", "all" if gpus is None else f'"device={gpus}"']
    else:
        words += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
        words += ["--security-opt", "seccomp=unconfined"]
        if gpus is not None:
            words += ["-e", f"HIP_VISIBLE_DEVICES={gpus}"]
    words += ["--ipc", "host"]
    words += ["--network", "host"] if spec.nodes > 1 else ["-p", f"{port}:{port}"]
    return words


def _mounts(spec: DeploySpec) -> str:
    # the model cache and the config files on the host ($HOME and $PWD left for the shell),
    # and the working directory where the command finds its config files
    volumes = [f'-v "$HOME/.cache/huggingface:{CACHE_DIR}"']
    for file in config_files(spec):
        volumes.append(f'-v "$PWD/{file}:{CONFIG_DIR}/{file}:ro"')
    if config_files(spec):
        volumes.append(f"-w {CONFIG_DIR}")
    return " ".join(volumes)


def docker_run_command(spec: DeploySpec) -> str:
    """``docker-run.sh``: the replicas of one instance on the engine's official image, run in
    the bundle's folder (the config files beside it).

    A replica across instances runs this on each of them, with ``NODE_RANK`` (0 on the first)
    and ``HEAD_IP`` set.
    """
    image = engine_image(spec)
    volumes = _mounts(spec)
    if spec.nodes > 1:
        script = shlex.quote(node_script(spec, "$NODE_RANK", "$HEAD_IP"))
        words = _docker_words(spec, spec.name, None, spec.port)
        return (
            ': "${NODE_RANK:?set NODE_RANK: 0 on the first node, 1.. on the others}"\n'
            ': "${HEAD_IP:?set HEAD_IP to the first node\'s address}"\n'
            f"{shlex.join(words)} {volumes} -e HF_TOKEN -e NODE_RANK -e HEAD_IP "
            f"--entrypoint /bin/bash {shlex.quote(image)} -c {script}\n"
        )
    lines = []
    slots = gpu_slots(spec)
    for slot, gpus in enumerate(slots):
        name = spec.name if len(slots) == 1 else f"{spec.name}-{slot}"
        words = _docker_words(spec, name, None if len(slots) == 1 else gpus, spec.port + slot)
        argv = engine_args(spec, slot=slot)
        tail = ["-e", "HF_TOKEN", "--entrypoint", argv[0], image, *argv[1:]]
        lines.append(f"{shlex.join(words)} {volumes} {shlex.join(tail)}\n")
    return "".join(lines)
