"""The performance model: step time, continuous-batching simulation, calibration, uncertainty.

    from planner.perf import Scenario, get_performance_model

    model = get_performance_model(catalog)               # fitted on the measured results
    p = model.predict(Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="L40S", tp=4,
                               instance="g6e.12xlarge", input_len=2048, output_len=512,
                               load="concurrency", concurrency=30, num_requests=30))
    p.total_tok_per_s, p.output_tok_per_s_low, p.output_tok_per_s_high, p.confidence

Modules: :mod:`~planner.perf.step_time` (terms and ``step_time_s``), :mod:`~planner.perf.simulator`
(vLLM V1 and TensorRT-LLM schedulers, loads), :mod:`~planner.perf.calibration` (the fit),
:mod:`~planner.perf.uncertainty` (intervals, distance to data), :mod:`~planner.perf.model`
(``PerformanceModel``), :mod:`~planner.perf.validation` (cross-validation). The highest rate
meeting an SLO is :func:`planner.recommend.capacity.max_rate_meeting_slo`.
"""

from planner.perf.deployment import Deployment, resolve_deployment
from planner.perf.model import PerformanceModel, get_performance_model
from planner.perf.scenario import Prediction, Scenario, TraceRequest
from planner.perf.simulator import SimTrace, simulate
from planner.perf.step_time import FEATURES, StepBatch, step_features, step_time_s

__all__ = [
    "FEATURES",
    "Deployment",
    "PerformanceModel",
    "Prediction",
    "Scenario",
    "SimTrace",
    "StepBatch",
    "TraceRequest",
    "get_performance_model",
    "resolve_deployment",
    "simulate",
    "step_features",
    "step_time_s",
]
