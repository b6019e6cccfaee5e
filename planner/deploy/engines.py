"""What each engine's server exposes to a deployment: its image, health path, metrics and queue
gauge, and the flags a deployment adds to the plan's own command.

Checked against each engine's documentation and source (2026-12-01):

- vLLM: ``GET /health``; Prometheus metrics on ``/metrics`` with the waiting-queue gauge
  ``vllm:num_requests_waiting`` (docs.vllm.ai, "Production Metrics"). Images on Docker Hub:
  ``vllm/vllm-openai:v<release>`` for NVIDIA, ``vllm/vllm-openai-rocm:v<release>`` for AMD
  Instinct (docs.vllm.ai, "Using Docker").
- SGLang: ``GET /health``; Prometheus metrics on ``/metrics`` only when started with
  ``--enable-metrics``, the waiting queue as the gauge ``sglang:num_queue_reqs`` (docs.sglang.io,
  "Production Metrics"; the Gateway API inference extension's model-server protocol lists it as
  SGLang's queued-requests gauge, next to vLLM's ``vllm:num_requests_waiting``). Images on Docker
  Hub ``lmsysorg/sglang``: ``v<release>-cu129`` (CUDA 12) up to 0.5.19, the last CUDA 12 tag
  (SGLang's installation guide: later releases ship CUDA 13 only, tag ``v<release>``), and
  ``v<release>-rocm700-mi30x`` / ``-mi35x`` for MI300X/MI325X and MI355X.
- TensorRT-LLM: ``trtllm-serve`` serves ``GET /health`` and ``/metrics`` (JSON iteration
  statistics, not Prometheus; the ``trtllm-serve`` reference). Its Prometheus endpoint is
  ``/prometheus/metrics``; the waiting-requests gauge ``trtllm_num_requests_waiting`` needs
  TensorRT-LLM 1.3.0rc12 or newer (NVIDIA/TensorRT-LLM pull request 12545) started with
  ``return_perf_metrics: true`` and ``enable_iter_perf_stats: true``; earlier releases (1.2.1
  included) expose request-lifecycle histograms only (llm-d's "Model Servers" guide, its
  model-server protocol table). The pinned release (1.0.0) has no queue gauge, so the files
  scale TensorRT-LLM on CPU and say why. Image: ``nvcr.io/nvidia/tensorrt-llm/release:<release>``
  (NGC; NVIDIA GPUs only).

The pinned release of each engine (what an image tag says when the plan names no release):
vLLM 0.27.1, the optional ``vllm`` extra (requirements-vllm.txt); SGLang 0.5.19, the last
0.5.x release with CUDA 12 images (the planner's SGLang defaults are 0.5.x's); TensorRT-LLM
1.0.0, the release of the measured TensorRT-LLM rows (data/measured_results.csv).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import InvalidInputError

VLLM_RELEASE = "0.27.1"  # requirements-vllm.txt
SGLANG_RELEASE = "0.5.19"
TRTLLM_RELEASE = "1.0.0"
#: the last SGLang release with CUDA 12 images (``-cu129``)
SGLANG_LAST_CUDA12 = (0, 5, 19)
#: SGLang's ROCm images by GPU generation
SGLANG_ROCM_SUFFIX = {"MI300X": "mi30x", "MI325X": "mi30x", "MI355X": "mi35x"}


@dataclass(frozen=True)
class EngineServing:
    """What a deployment needs to know about an engine's server (module docstring)."""

    family: str
    display_name: str
    pinned_release: str
    #: why that release (shown in the bundle's README when the plan names none)
    pin_reason: str
    health_path: str
    metrics_path: str
    #: the Prometheus gauge of requests waiting for a batch slot; None: the engine has none
    queue_metric: str | None
    #: why there is no queue gauge (shown in the bundle's README), "" when there is one
    no_queue_metric_reason: str
    #: flags the deployment adds to the plan's command (the metrics the autoscaler reads)
    serving_flags: tuple[str, ...]
    #: what the pip-installable engine is called on PyPI (None: run from its image only)
    pip_package: str | None

    def release(self, version: str | None) -> str:
        """The plan's release (``v`` dropped), or the pinned one when it names none."""
        return (version or self.pinned_release).strip().lstrip("v")

    def image(self, version: str | None, vendor: str, gpu: str) -> str:
        """The engine's official image for the release and the GPU."""
        release = self.release(version)
        if self.family == "vllm":
            repository = "vllm/vllm-openai" if vendor == "nvidia" else "vllm/vllm-openai-rocm"
            return f"{repository}:v{release}"
        if self.family == "sglang":
            if vendor == "amd":
                suffix = SGLANG_ROCM_SUFFIX.get(gpu)
                if suffix is None:
                    known = ", ".join(SGLANG_ROCM_SUFFIX)
                    raise InvalidInputError(
                        "plan.gpu", gpu, f"an AMD GPU SGLang builds for: {known}"
                    )
                return f"lmsysorg/sglang:v{release}-rocm700-{suffix}"
            cuda12 = _release_tuple(release) <= SGLANG_LAST_CUDA12
            return f"lmsysorg/sglang:v{release}" + ("-cu129" if cuda12 else "")
        if vendor != "nvidia":
            raise InvalidInputError(
                "plan.gpu", gpu, "an NVIDIA GPU (TensorRT-LLM runs on no other)"
            )
        return f"nvcr.io/nvidia/tensorrt-llm/release:{release}"


def _release_tuple(release: str) -> tuple[int, ...]:
    parts = []
    for part in release.split("."):
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


ENGINES: dict[str, EngineServing] = {
    "vllm": EngineServing(
        family="vllm",
        display_name="vLLM",
        pinned_release=VLLM_RELEASE,
        pin_reason="the release of Servewise's optional vllm extra",
        health_path="/health",
        metrics_path="/metrics",
        queue_metric="vllm:num_requests_waiting",
        no_queue_metric_reason="",
        serving_flags=(),
        pip_package="vllm",
    ),
    "sglang": EngineServing(
        family="sglang",
        display_name="SGLang",
        pinned_release=SGLANG_RELEASE,
        pin_reason="the last 0.5.x release with CUDA 12 images; the planner's SGLang defaults "
        "are 0.5.x's",
        health_path="/health",
        metrics_path="/metrics",
        queue_metric="sglang:num_queue_reqs",
        no_queue_metric_reason="",
        serving_flags=("--enable-metrics",),
        pip_package=None,
    ),
    "trtllm": EngineServing(
        family="trtllm",
        display_name="TensorRT-LLM",
        pinned_release=TRTLLM_RELEASE,
        pin_reason="the release the planner's TensorRT-LLM measurements were taken on",
        health_path="/health",
        metrics_path="/prometheus/metrics",
        queue_metric=None,
        no_queue_metric_reason=(
            "trtllm-serve before 1.3.0rc12 publishes no Prometheus gauge of waiting requests "
            "(its /metrics is JSON iteration statistics, its /prometheus/metrics request "
            "latency histograms); from 1.3.0rc12, started with return_perf_metrics and "
            "enable_iter_perf_stats, it serves trtllm_num_requests_waiting on "
            "/prometheus/metrics (NVIDIA/TensorRT-LLM pull request 12545), which a newer "
            "image can scale on instead"
        ),
        serving_flags=(),
        pip_package=None,
    ),
}


def engine_serving(family: str) -> EngineServing:
    """The serving facts of an engine family."""
    serving = ENGINES.get(family)
    if serving is None:
        raise InvalidInputError("plan.engine.engine", family, f"one of {', '.join(ENGINES)}")
    return serving


__all__ = ["ENGINES", "EngineServing", "engine_serving"]
