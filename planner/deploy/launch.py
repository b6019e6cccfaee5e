"""The engine launch command of a replica group and a ``docker run`` line on the official image.

vLLM only for now: the SGLang launch builder is not in the planner yet; when it lands, its
arguments slot in here next to :func:`engine_args` (the renderers take the argument vector).

Images (Docker Hub): ``vllm/vllm-openai:v<version>`` for NVIDIA GPUs
(docs.vllm.ai "Using Docker"), ``vllm/vllm-openai-rocm:v<version>`` for AMD Instinct GPUs
(the vLLM ROCm image; AMD also publishes ``rocm/vllm``). The containers run ``vllm serve``
explicitly (``--entrypoint vllm``) so the command does not depend on the image's default
entrypoint. ROCm containers get ``/dev/kfd`` and ``/dev/dri`` and the ``video`` group instead
of ``--gpus`` (ROCm's Docker instructions).
"""

from __future__ import annotations

import shlex

from planner.deploy.spec import DeploySpec
from planner.vllm_command import vllm_serve_args

CACHE_DIR = "/root/.cache/huggingface"  # HF_HOME inside the vLLM images (root user)


def engine_image(spec: DeploySpec) -> str:
    repository = "vllm/vllm-openai" if spec.vendor == "nvidia" else "vllm/vllm-openai-rocm"
    return f"{repository}:v{spec.engine_version}"


def engine_args(spec: DeploySpec, *, host: str = "0.0.0.0") -> list[str]:
    """``["vllm", "serve", MODEL, ...]`` of one group: the plan's TP/PP and engine settings,
    its data-parallel replicas (``--data-parallel-size``), listening on ``host:port``."""
    args = ["vllm", *vllm_serve_args(spec.serve)]  # --data-parallel-size from its engine
    if spec.nodes_per_group > 1:
        # pipeline stages on other nodes: vLLM's multi-node serving runs on a Ray cluster
        args += ["--distributed-executor-backend", "ray"]
    args += ["--host", host, "--port", str(spec.port)]
    return args


def launch_command(spec: DeploySpec) -> str:
    """The shell line that starts one group: ``vllm serve MODEL --tensor-parallel-size ...``."""
    return shlex.join(engine_args(spec))


RAY_PORT = 6379
_ALIVE_NODES = (
    "python3 -c \"import ray; ray.init(address='auto', logging_level='ERROR'); "
    "print(sum(1 for n in ray.nodes() if n['Alive']))\""
)


def head_script(spec: DeploySpec) -> str:
    """Shell of the first node of a group: a Ray head, wait for the other nodes, serve.

    A group on one node is just the ``vllm serve`` line."""
    serve = launch_command(spec)
    if spec.nodes_per_group == 1:
        return f"exec {serve}\n"
    return (
        "set -e\n"
        f"ray start --head --port={RAY_PORT} --disable-usage-stats\n"
        f'until [ "$({_ALIVE_NODES})" -ge {spec.nodes_per_group} ]; do sleep 5; done\n'
        f"exec {serve}\n"
    )


def worker_script(head_address: str) -> str:
    """Shell of the other nodes of a group: join the head's Ray cluster and stay."""
    return f"exec ray start --address={head_address}:{RAY_PORT} --disable-usage-stats --block\n"


def docker_run_command(spec: DeploySpec) -> str:
    """``docker run`` of one group's node on the engine's official image (a script).

    A group on several instances runs this on each of them, with ``NODE_RANK`` (0 on the head)
    and ``HEAD_IP`` set: the head starts Ray and ``vllm serve``, the others join it.
    """
    words = ["docker", "run", "-d", "--name", spec.name, "--restart", "unless-stopped"]
    if spec.vendor == "nvidia":
        words += ["--runtime", "nvidia", "--gpus", "all"]
    else:
        words += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
        words += ["--security-opt", "seccomp=unconfined"]
    words += ["--ipc", "host"]
    words += (
        ["--network", "host"] if spec.nodes_per_group > 1 else ["-p", f"{spec.port}:{spec.port}"]
    )
    # the model cache on the host: $HOME is left for the shell to expand
    volume = f'-v "$HOME/.cache/huggingface:{CACHE_DIR}"'
    if spec.nodes_per_group == 1:
        tail = [
            "-e",
            "HF_TOKEN",
            "--entrypoint",
            "vllm",
            engine_image(spec),
            *engine_args(spec)[1:],
        ]
        return f"{shlex.join(words)} {volume} {shlex.join(tail)}\n"
    image = shlex.quote(engine_image(spec))
    head = shlex.quote(head_script(spec))
    worker = shlex.quote(worker_script("$HEAD_IP"))
    return (
        ': "${NODE_RANK:?set NODE_RANK: 0 on the head node, 1.. on the others}"\n'
        ': "${HEAD_IP:?set HEAD_IP to the head node\'s address}"\n'
        f'if [ "$NODE_RANK" = 0 ]; then SCRIPT={head}; else SCRIPT={worker}; fi\n'
        f"{shlex.join(words)} {volume} -e HF_TOKEN -e HEAD_IP --entrypoint /bin/bash "
        f'{image} -c "$SCRIPT"\n'
    )
