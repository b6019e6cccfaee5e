"""The plan a run measured, named on the command line: a plan file, a recommendation, or flags.

A plan (:class:`planner.plan.Plan`: the deployment and engine settings a benchmark measured:
model, GPU, TP x PP, precision, instance, engine settings, as the Verify page writes it into
run.json) is what makes a run a calibration point. ``--plan`` takes:

- ``FILE``: a JSON object of a plan (a typed ``Plan``, or the flat ``model``, ``gpu``, ``tp``,
  ``pp``, ``max_num_seqs``, ... of older files);
- ``FILE#N``: the recommendation ranked ``N`` in a saved ``python -m planner recommend --json``
  (its ``plan``; in files saved before plans were typed, its GPU, instance, layout, precision
  and the engine settings of its ``vllm serve`` line).

``plan_from_flags`` builds one from ``--gpu --tp --pp --precision --engine ...``. A plan is
checked against the catalog (model, GPU, instance, layout) before a run is written: an unknown
name or a layout that does not fit is one line naming the field.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from benchmarks_runner.errors import ConfigError
from planner.catalog import Catalog
from planner.engine import EngineConfig
from planner.errors import PlannerError, RunFilesError
from planner.perf.deployment import resolve_deployment
from planner.plan import Load, Plan, PlanWorkload, read_plan
from planner.run_files import MAX_JSON_FILE_BYTES, loads_json, read_regular_bytes

#: ``vllm serve`` flag -> (plan key, how its value reads)
_SERVE_FLAGS: dict[str, tuple[str, Any]] = {
    "--tensor-parallel-size": ("tp", int),
    "--pipeline-parallel-size": ("pp", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
}


def _read_json(path: Path, what: str) -> Any:
    """A regular file's JSON (a FIFO or a device is refused unread, a large file too)."""
    try:
        return loads_json(read_regular_bytes(path, MAX_JSON_FILE_BYTES), "the JSON")
    except (OSError, ValueError, RunFilesError) as exc:
        raise ConfigError(f"{what} {path}: not a readable JSON file ({exc})") from None


def _from_recommendation(row: dict[str, Any], where: str) -> dict[str, Any]:
    missing = [k for k in ("gpu", "tp", "pp", "precision") if row.get(k) in (None, "")]
    if missing:
        raise ConfigError(f"--plan {where}: the recommendation has no {', '.join(missing)}")
    plan: dict[str, Any] = {
        "engine": "vllm",
        "gpu": row["gpu"],
        "tp": int(row["tp"]),
        "pp": int(row["pp"]),
        "precision": row["precision"],
        "instance": row.get("instance"),
        "kv_cache_dtype": row.get("kv_cache_dtype"),
    }
    words = shlex.split(str(row.get("vllm_command") or ""))
    if "serve" in words and words.index("serve") + 1 < len(words):
        plan["model"] = words[words.index("serve") + 1]
    for i, word in enumerate(words[:-1]):
        if word in _SERVE_FLAGS:
            key, kind = _SERVE_FLAGS[word]
            plan[key] = kind(words[i + 1])
    if "--enable-prefix-caching" in words:
        plan["enable_prefix_caching"] = True
    if "--no-enable-chunked-prefill" in words:
        plan["enable_chunked_prefill"] = False
    plan["num_gpus"] = plan["tp"] * plan["pp"]
    return {k: v for k, v in plan.items() if v is not None}


def _typed(obj: dict[str, Any], where: str, model: str | None) -> Plan:
    """A stored plan, typed (its model ``model`` when it names none); ConfigError if not."""
    if model and not obj.get("model"):
        obj = {**obj, "model": model}
    try:
        plan = read_plan(obj)
    except PlannerError as exc:
        raise ConfigError(f"--plan {where}: {exc}") from None
    if plan is None:
        raise ConfigError(f"--plan {where}: an empty plan")
    return plan


def load_plan(reference: str | Path, model: str | None = None) -> Plan:
    """The plan ``reference`` names (``FILE`` or ``FILE#RANK``), its model ``model`` when it
    names none; ConfigError saying why not."""
    text = str(reference)
    path_text, _, rank_text = text.partition("#")
    data = _read_json(Path(path_text), "--plan")
    if rank_text:
        ranked = data.get("ranked") if isinstance(data, dict) else None
        if not isinstance(ranked, list):
            raise ConfigError(
                f"--plan {text}: {path_text} is not a 'python -m planner recommend --json' "
                "output (no 'ranked' list)"
            )
        try:
            rank = int(rank_text)
        except ValueError:
            raise ConfigError(f"--plan {text}: '#{rank_text}' is not a rank number") from None
        rows = [r for r in ranked if isinstance(r, dict) and r.get("rank") == rank]
        if not rows:
            known = [r.get("rank") for r in ranked if isinstance(r, dict)]
            raise ConfigError(f"--plan {text}: no recommendation ranked {rank}; ranks {known}")
        row = rows[0]
        stored = row["plan"] if isinstance(row.get("plan"), dict) else None
        return _typed(stored or _from_recommendation(row, text), text, model)
    if not isinstance(data, dict):
        raise ConfigError(f"--plan {text}: must hold a JSON object (a plan)")
    if isinstance(data.get("ranked"), list):
        raise ConfigError(
            f"--plan {text}: a recommendation list; name one with {text}#RANK (e.g. #1)"
        )
    return _typed(data, text, model)


def plan_from_flags(
    *,
    model: str,
    gpu: str,
    tp: int = 1,
    pp: int = 1,
    precision: str = "bf16",
    engine: str = "vllm",
    engine_version: str | None = None,
    instance: str | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    kv_cache_dtype: str | None = None,
) -> Plan:
    """A plan from ``--gpu --tp --pp --precision --engine ...`` (as the Verify page's custom
    plan; the engine settings left out are the engine's own)."""
    stated = {
        "version": engine_version,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "kv_cache_dtype": kv_cache_dtype,
    }
    try:
        config = EngineConfig.of(engine=engine, **{k: v for k, v in stated.items() if v})
    except PlannerError as exc:
        raise ConfigError(f"--plan: {exc}") from None
    return Plan(
        model=model or "?",
        gpu=gpu,
        tp=tp,
        pp=pp,
        precision=precision,
        instance=instance,
        engine=config,
    )


def checked_plan(plan: Plan, catalog: Catalog, *, model: str | None = None) -> Plan:
    """``plan`` (its model ``model`` when it names none, its engine settings resolved for its
    GPU) once it resolves against ``catalog`` as a deployment; ConfigError naming the field if
    not."""
    if plan.model in ("", "?"):
        if not model:
            raise ConfigError("--plan: names no model, and the imported file none either")
        plan = plan.model_copy(update={"model": model})
    try:
        gpu = catalog.gpu(plan.gpu)
        plan = plan.model_copy(update={"engine": plan.engine.resolved(gpu)})
        scenario = plan.scenario(workload=PlanWorkload.of(1024, 256), load=Load.closed_loop(1))
        resolve_deployment(scenario, catalog)
    except PlannerError as exc:
        raise ConfigError(f"--plan: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--plan: {str(exc).splitlines()[0]}") from None
    return plan
