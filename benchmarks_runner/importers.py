"""Import results of other benchmark tools into Servewise run files.

Formats (looked up in the tools' own code and docs):

- ``vllm``: the JSON of ``vllm bench serve --save-result`` (vllm-project/vllm
  ``vllm/benchmarks/serve.py``: ``benchmark()`` result dict and ``main_async()``). With
  ``--save-detailed`` it holds per-request ``start_times``, ``ttfts``, ``itls``,
  ``latencies``, ``input_lens``, ``output_lens``, ``errors`` (seconds, perf_counter clock);
  without it only aggregates, and the imported run has a summary but no request rows.
- ``guidellm``: ``benchmarks.json`` of ``guidellm benchmark`` (vllm-project/guidellm
  ``GenerativeBenchmarksReport``: ``{"args", "benchmarks": [{"config", "scheduler_metrics",
  "metrics", "requests": {"successful", "incomplete", "errored"}}]}``; each request is a
  ``GenerativeRequestStats`` with ``info.timings`` (``request_start``,
  ``first_token_iteration``, ``first_output_token_iteration``, ``last_token_iteration``,
  ``token_iterations``, ``request_end``; Unix seconds) and ``input_metrics`` /
  ``output_metrics`` (``total_tokens``). Older files carry flat ``start_time``,
  ``first_token_time``, ``last_token_time``, ``end_time``, ``prompt_tokens``,
  ``output_tokens``. GuideLLM keeps no per-chunk times: chunk times are interpolated evenly
  between the first and last token iteration (as GuideLLM itself does), flagged in
  ``config.imported_from.chunk_times_interpolated``. One run per benchmark.
- ``aiperf``: ``profile_export.jsonl`` of AIPerf (ai-dynamo/aiperf
  ``docs/tutorials/working-with-profile-exports.md``): one record a line with ``metadata``
  (``request_start_ns``, ``request_end_ns``, ``benchmark_phase``, ``x_request_id``,
  ``session_num``), ``metrics`` (``{"value", "unit"}``: ``time_to_first_token``,
  ``inter_chunk_latency`` (list: our ITL), ``request_latency``, ``input_sequence_length``,
  ``output_token_count`` / ``output_sequence_length``) and ``error`` (``code``, ``type``,
  ``message``). A sibling ``profile_export_aiperf.json`` is read for the model name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks_runner.errors import ImportFormatError
from benchmarks_runner.metrics import DETAILED_KEYS, build_vllm_result, compute_summary
from planner.run_files import RequestRecord, RunWriter, utc_now_iso

FORMATS = ("vllm", "guidellm", "aiperf")


def _load_json(path: Path, fmt: str) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise ImportFormatError(f"{path}: not a readable {fmt} JSON file ({exc})") from None


def _record(
    index: int,
    *,
    request_id: str,
    start: float,
    chunks: Sequence[float],
    end: float | None,
    prompt: int | None,
    output: int | None,
    ok: bool,
    error: str | None,
    warmup: bool = False,
    first_content: float | None = None,
    http_status: int | None = None,
) -> RequestRecord:
    chunk_list = [round(float(t), 6) for t in chunks]
    return RequestRecord(
        request_id=request_id,
        request_index=index,
        warmup=warmup,
        start_s=round(start, 6),
        first_chunk_s=chunk_list[0] if chunk_list else None,
        first_content_s=round(first_content, 6)
        if first_content is not None
        else (chunk_list[0] if chunk_list else None),
        end_s=round(end, 6) if end is not None else None,
        chunk_times_s=chunk_list,
        chunk_tokens=[1] * len(chunk_list),
        prompt_tokens=prompt,
        output_tokens=output if output else None,
        input_len_target=prompt or 0,
        output_len_target=output or 0,
        status="ok" if ok else "error",
        http_status=http_status if http_status is not None else (200 if ok else None),
        error=None if ok else (error or "failed"),
    )


def _write_run(
    runs_dir: Path,
    *,
    rows: list[RequestRecord],
    summary: dict[str, Any],
    result: dict[str, Any],
    model: str | None,
    api: str | None,
    base_url: str | None,
    config: dict[str, Any],
    started_at: str | None,
    status: str = "completed",
) -> Path:
    writer = RunWriter(Path(runs_dir))
    try:
        writer.write_meta(
            started_at=started_at or utc_now_iso(),
            model=model,
            endpoint={
                "base_url": base_url,
                "api": api,
                "server_version": None,
                "server_flags": None,
            },
            config=config,
            tokenizer={"tokenizer": "as reported by the imported tool"},
        )
        writer.append_requests(rows)
        writer.write_result(result)
        writer.write_meta(status=status, finished_at=utc_now_iso(), summary=summary, self_checks=[])
    finally:
        writer.close()
    return writer.dir


def _summary_and_result(
    rows: list[RequestRecord],
    duration: float,
    model: str | None,
    backend: str,
    extra: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    summary = compute_summary(rows, duration, percentiles=[50, 90, 95, 99])
    result = build_vllm_result(
        rows,
        summary,
        date=datetime.now(UTC).strftime("%Y%m%d-%H%M%S"),
        backend=backend,
        label=str(extra.get("label")) if extra.get("label") else None,
        model_id=model or "",
        num_prompts=len(rows),
        request_rate=extra.get("request_rate"),
        burstiness=float(extra.get("burstiness") or 1.0),
        max_concurrency=extra.get("max_concurrency"),
    )
    return summary, result


# ---------------------------------------------------------------------------------- vllm


def import_vllm(path: Path, runs_dir: Path) -> list[Path]:
    data = _load_json(path, "vllm bench serve")
    if not isinstance(data, dict) or "duration" not in data or "completed" not in data:
        raise ImportFormatError(
            f"{path}: not a vllm bench serve --save-result file (needs 'duration' and 'completed')"
        )
    backend = str(data.get("backend") or data.get("endpoint_type") or "openai")
    api = "chat" if "chat" in backend else "completions"
    rows: list[RequestRecord] = []
    detailed = all(
        isinstance(data.get(k), list) for k in ("ttfts", "itls", "latencies", "start_times")
    )
    if detailed:
        starts = [float(x) for x in data["start_times"]]
        t0 = min(starts) if starts else 0.0
        errors = data.get("errors") or [""] * len(starts)
        in_lens = data.get("input_lens") or [None] * len(starts)
        out_lens = data.get("output_lens") or [None] * len(starts)
        for i, st in enumerate(starts):
            err = str(errors[i] or "")
            lat = float(data["latencies"][i] or 0.0)
            ok = not err and lat > 0
            start = st - t0
            chunks: list[float] = []
            if ok:
                t = start + float(data["ttfts"][i])
                chunks.append(t)
                for gap in data["itls"][i] or []:
                    t += float(gap)
                    chunks.append(t)
            rows.append(
                _record(
                    i,
                    request_id=f"vllm-{i}",
                    start=start,
                    chunks=chunks,
                    end=start + lat if ok else None,
                    prompt=in_lens[i],
                    output=out_lens[i],
                    ok=ok,
                    error=err.strip().splitlines()[-1] if err.strip() else None,
                )
            )
    scalar = {k: v for k, v in data.items() if k not in DETAILED_KEYS}
    if detailed:
        summary = compute_summary(rows, float(data["duration"]), percentiles=[50, 90, 95, 99])
        # the file's own aggregates use the same definitions and its own clock: keep them
        summary.update(
            {k: v for k, v in scalar.items() if k in summary and isinstance(v, int | float)}
        )
    else:
        summary = dict(scalar)
    rate = data.get("request_rate")
    started = _vllm_date(data.get("date"))
    config = {
        "imported_from": {
            "tool": "vllm bench serve",
            "file": str(path),
            "detailed": detailed,
            "date_timezone": "unknown (taken as UTC)",
        },
        "load": "rate" if rate not in (None, "inf") else "concurrency",
        "request_rate": None if rate in (None, "inf") else rate,
        "burstiness": data.get("burstiness"),
        "concurrency": data.get("max_concurrency"),
        "num_requests": data.get("num_prompts"),
    }
    return [
        _write_run(
            runs_dir,
            rows=rows,
            summary=summary,
            result=data,
            model=data.get("model_id"),
            api=api,
            base_url=None,
            config=config,
            started_at=started,
        )
    ]


def _vllm_date(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    try:
        dt = datetime.strptime(text, "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    return dt.isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------------------------- guidellm


def _g_request(r: Mapping[str, Any]) -> dict[str, Any]:
    """Normalise one GuideLLM request record (new nested or old flat schema)."""
    info = r.get("info") or {}
    tim = info.get("timings") or {}
    im = r.get("input_metrics") or {}
    om = r.get("output_metrics") or {}

    def f(*vals: Any) -> float | None:
        for v in vals:
            if v is not None:
                return float(v)
        return None

    return {
        "id": str(r.get("request_id") or info.get("request_id") or ""),
        "start": f(tim.get("request_start"), r.get("start_time"), tim.get("resolve_start")),
        "first": f(tim.get("first_token_iteration"), r.get("first_token_time")),
        "first_content": f(tim.get("first_output_token_iteration")),
        "last": f(tim.get("last_token_iteration"), r.get("last_token_time")),
        "end": f(tim.get("request_end"), r.get("end_time"), tim.get("resolve_end")),
        "iterations": int(tim.get("token_iterations") or 0),
        "prompt": im.get("total_tokens", im.get("text_tokens", r.get("prompt_tokens"))),
        "output": om.get("total_tokens", om.get("text_tokens", r.get("output_tokens"))),
        "error": info.get("error") or r.get("error"),
    }


def import_guidellm(path: Path, runs_dir: Path) -> list[Path]:
    data = _load_json(path, "GuideLLM")
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ImportFormatError(f"{path}: not a GuideLLM benchmarks.json (no 'benchmarks' list)")
    args = data.get("args") or {}
    model = args.get("model") if isinstance(args, dict) else None
    target = args.get("target") if isinstance(args, dict) else None
    out: list[Path] = []
    for b_index, bench in enumerate(data["benchmarks"]):
        reqs = bench.get("requests") if isinstance(bench, dict) else None
        if not isinstance(reqs, dict):
            raise ImportFormatError(f"{path}: benchmark {b_index} has no 'requests' breakdown")
        flat: list[tuple[dict[str, Any], bool, str]] = []
        for status in ("successful", "errored", "incomplete"):
            for r in reqs.get(status) or []:
                flat.append((_g_request(r), status == "successful", status))
        starts = [g["start"] for g, _, _ in flat if g["start"] is not None]
        sched = bench.get("scheduler_metrics") or {}
        t0 = float(sched.get("measure_start_time") or (min(starts) if starts else 0.0))
        flat.sort(key=lambda x: x[0]["start"] or 0.0)
        rows = []
        for i, (g, ok, status) in enumerate(flat):
            start = (g["start"] or t0) - t0
            chunks: list[float] = []
            if ok and g["first"] is not None:
                last = g["last"] if g["last"] is not None else g["first"]
                n = max(1, g["iterations"])
                chunks = [float(x) - t0 for x in np.linspace(g["first"], last, n)]
            ok_row = ok and bool(chunks)
            err = g["error"] or (
                "incomplete (cancelled at the end of the benchmark)"
                if status == "incomplete"
                else "errored"
            )
            rows.append(
                _record(
                    i,
                    request_id=g["id"] or f"guidellm-{b_index}-{i}",
                    start=start,
                    chunks=chunks,
                    end=(g["end"] - t0) if g["end"] is not None else None,
                    prompt=g["prompt"],
                    output=g["output"],
                    ok=ok_row,
                    error=None if ok_row else str(err),
                    first_content=(g["first_content"] - t0)
                    if g["first_content"] is not None
                    else None,
                )
            )
        if "duration" in bench:
            duration = float(bench["duration"])
        elif sched.get("measure_end_time") is not None:
            duration = float(sched["measure_end_time"]) - t0
        else:
            ends = [r.end_s for r in rows if r.end_s is not None]
            duration = max(ends) if ends else 0.0
        strategy = (
            ((bench.get("config") or {}).get("strategy") or {})
            if isinstance(bench.get("config"), dict)
            else {}
        )
        extra = {
            "request_rate": strategy.get("rate"),
            "max_concurrency": strategy.get("streams") or strategy.get("max_concurrency"),
        }
        summary, result = _summary_and_result(rows, duration, model, "openai", extra)
        config = {
            "imported_from": {
                "tool": "guidellm",
                "file": str(path),
                "benchmark_index": b_index,
                "benchmark_id": bench.get("id_"),
                "chunk_times_interpolated": True,
                "note": "GuideLLM may sample requests (--sample-requests)",
            },
            "load": strategy.get("type_"),
            "strategy": strategy,
            "request_rate": extra["request_rate"],
            "concurrency": extra["max_concurrency"],
            "num_requests": len(rows),
        }
        started = datetime.fromtimestamp(t0, UTC).isoformat().replace("+00:00", "Z") if t0 else None
        out.append(
            _write_run(
                runs_dir,
                rows=rows,
                summary=summary,
                result=result,
                model=model,
                api=None,
                base_url=target,
                config=config,
                started_at=started,
            )
        )
    return out


# ---------------------------------------------------------------------------------- aiperf

_UNIT_S = {"ms": 1e-3, "ns": 1e-9, "us": 1e-6, "s": 1.0, "sec": 1.0}


def _metric(metrics: Mapping[str, Any], name: str) -> Any:
    m = metrics.get(name)
    return m.get("value") if isinstance(m, dict) else m


def _metric_s(metrics: Mapping[str, Any], name: str) -> Any:
    m = metrics.get(name)
    if not isinstance(m, dict) or m.get("value") is None:
        return None
    scale = _UNIT_S.get(str(m.get("unit", "ms")).lower(), 1e-3)
    v = m["value"]
    return [float(x) * scale for x in v] if isinstance(v, list) else float(v) * scale


def import_aiperf(path: Path, runs_dir: Path) -> list[Path]:
    jsonl = path / "profile_export.jsonl" if path.is_dir() else path
    if not jsonl.is_file():
        raise ImportFormatError(f"{path}: no AIPerf profile_export.jsonl found")
    records: list[dict[str, Any]] = []
    with jsonl.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                raise ImportFormatError(f"{jsonl}:{lineno}: not JSON") from None
            if not isinstance(rec, dict) or "metadata" not in rec:
                raise ImportFormatError(
                    f"{jsonl}:{lineno}: not an AIPerf record (needs 'metadata', 'metrics')"
                )
            records.append(rec)
    if not records:
        raise ImportFormatError(f"{jsonl}: no records")
    starts_ns = [int(r["metadata"]["request_start_ns"]) for r in records]
    t0_ns = min(starts_ns)
    rows = []
    order = sorted(range(len(records)), key=lambda i: starts_ns[i])
    for i, k in enumerate(order):
        rec = records[k]
        md = rec["metadata"]
        metrics = rec.get("metrics") or {}
        err = rec.get("error")
        start = (int(md["request_start_ns"]) - t0_ns) / 1e9
        end_ns = md.get("request_end_ns")
        end = (int(end_ns) - t0_ns) / 1e9 if end_ns is not None else None
        ttft = _metric_s(metrics, "time_to_first_token")
        icl = _metric_s(metrics, "inter_chunk_latency") or []
        chunks: list[float] = []
        if err is None and ttft is not None:
            t = start + ttft
            chunks.append(t)
            for gap in icl:
                t += gap
                chunks.append(t)
        lat = _metric_s(metrics, "request_latency")
        if err is None and lat is not None:
            end = start + lat
        out_tok = _metric(metrics, "output_token_count") or _metric(
            metrics, "output_sequence_length"
        )
        in_tok = _metric(metrics, "input_sequence_length") or _metric(metrics, "error_isl")
        ok = err is None and bool(chunks)
        msg = None
        code = None
        if isinstance(err, dict):
            code = err.get("code")
            msg = f"{err.get('type') or 'error'}: {err.get('message') or ''}".strip()
        rows.append(
            _record(
                i,
                request_id=str(md.get("x_request_id") or f"aiperf-{i}"),
                start=start,
                chunks=chunks,
                end=end,
                prompt=int(in_tok) if in_tok is not None else None,
                output=int(out_tok) if out_tok is not None else None,
                ok=ok,
                error=msg,
                warmup=str(md.get("benchmark_phase", "profiling")) == "warmup",
                http_status=int(code) if isinstance(code, int) else None,
            )
        )
    measured = [r for r in rows if not r.warmup]
    m_start = min((r.start_s for r in measured), default=0.0)
    m_end = max((r.end_s for r in measured if r.end_s is not None), default=m_start)
    duration = m_end - m_start
    model = None
    aggregate = jsonl.parent / "profile_export_aiperf.json"
    if aggregate.is_file():
        agg = _load_json(aggregate, "AIPerf aggregate")
        cfg = agg.get("input_config") if isinstance(agg, dict) else None
        names = (
            ((cfg or {}).get("endpoint") or {}).get("model_names")
            if isinstance(cfg, dict)
            else None
        )
        if isinstance(names, list) and names:
            model = str(names[0])
    summary, result = _summary_and_result(rows, duration, model, "openai", {})
    config = {
        "imported_from": {"tool": "aiperf", "file": str(jsonl)},
        "num_requests": len(measured),
    }
    started = datetime.fromtimestamp(t0_ns / 1e9, UTC).isoformat().replace("+00:00", "Z")
    return [
        _write_run(
            runs_dir,
            rows=rows,
            summary=summary,
            result=result,
            model=model,
            api=None,
            base_url=None,
            config=config,
            started_at=started,
        )
    ]


def import_file(fmt: str, path: Path, runs_dir: Path) -> list[Path]:
    """Import ``path`` of format ``fmt`` (vllm, guidellm, aiperf); returns the run dirs."""
    path = Path(path)
    if not path.exists():
        raise ImportFormatError(f"{path} does not exist")
    if fmt == "vllm":
        return import_vllm(path, runs_dir)
    if fmt == "guidellm":
        return import_guidellm(path, runs_dir)
    if fmt == "aiperf":
        return import_aiperf(path, runs_dir)
    raise ImportFormatError(f"format {fmt!r} is not registered; available: {FORMATS}")
