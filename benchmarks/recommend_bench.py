"""Recommendation speed and the steady state's agreement with the simulator, three scenarios.

    .venv/bin/python benchmarks/recommend_bench.py [--scenario plan|brief|trace] [--no-before]
        [--cli-repeats 5] [--cli-only]
    .venv/bin/python benchmarks/recommend_bench.py --disaggregation

First the brief's command, ``python -m planner recommend`` for Llama-3.1-70B, 2,048/512,
2 req/s, AWS, p99 TTFT 3 s, TPOT 100 ms: side by side (in turn, median of ``--cli-repeats``)
the first call of a fresh install (a new, empty user data directory: the fit shipped in
``data/perf_fit.npz`` serves) and fresh processes with the fit in the user's cache; one with no
fit at hand (it fits first, as a fresh install did before the fit shipped); and in one process
the first search, the same search again (warm) and the simulation-only search.

Scenarios, each over every provider of the embedded catalog:

- ``plan``: the Plan page's default (Llama-3.1-70B, 2,048 in / 512 out, 16 requests in
  flight on average and 32 at peak, p99 TTFT 3 s and TPOT 100 ms; one instance a replica);
- ``brief``: the brief's scenario in rate mode (the same model and lengths, 2 req/s, p99 TTFT
  3 s, TPOT 100 ms, up to two instances a replica, the default engine grid);
- ``trace``: a Mooncake-format trace (2,000 requests, lognormal lengths, written here with a
  fixed seed) replayed as its length distributions at 1 req/s average, 2 at peak.

For each it prints, with wall and CPU seconds (the machine is shared: CPU time is what the
search itself costs):

1. cold process start to first ranking: a new Python process that imports the planner, loads
   the catalog and the fitted model from the disk cache and ranks; the same with no fit
   cache; side by side, the figure before the fit cache and the steady state: the fit cache
   off and every bisection step simulated;
2. in one process: the first ranking, then re-ranks after a workload change (512 -> 448
   output tokens), an SLO change (TPOT 100 -> 80 ms) and a price change (spot instead of on
   demand); the same with the simulation-only search for the ratios;
3. the agreement of the steady state with the simulator on the shortlist (the top 12): each
   candidate's capacity from the steady state and from the simulation-only search, and at the
   steady-state capacity the p99 TTFT and TPOT from the steady state and from simulations of
   160 requests (what the search simulates) and of 1,000 (long enough for steady state);
4. the ranking of the steady-state search next to the simulation-only search's, each
   difference with the capacities that explain it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.catalog import Catalog, load_catalog  # noqa: E402
from planner.perf import fit_cache  # noqa: E402
from planner.perf.model import (  # noqa: E402
    PerformanceModel,
    get_performance_model,
    results_fingerprint,
)
from planner.recommend import (  # noqa: E402
    CapacityCache,
    Demand,
    RecommendationResult,
    RecommendRequest,
    SearchSpace,
    Slo,
    capacity,
    perf_predictor,
    recommend,
)
from planner.recommend.capacity import replica_capacity  # noqa: E402
from planner.workload import load_trace  # noqa: E402

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
SLO = Slo(ttft_p99_ms=3000, tpot_p99_ms=100)


def write_trace(path: Path, requests: int = 2000, seed: int = 7) -> Path:
    """A Mooncake-format trace with lognormal lengths (prompt ~1,500, answer ~300 tokens)."""
    rng = random.Random(seed)
    t = 0.0
    with path.open("w", encoding="utf-8") as handle:
        for _ in range(requests):
            t += rng.expovariate(1.0) * 1000.0
            row = {
                "timestamp": round(t),
                "input_length": max(16, round(rng.lognormvariate(math.log(1300), 0.55))),
                "output_length": max(4, round(rng.lognormvariate(math.log(260), 0.5))),
                "hash_ids": [],
            }
            handle.write(json.dumps(row) + "\n")
    return path


def scenario_request(name: str, trace_path: Path) -> RecommendRequest:
    if name == "plan":
        # pages.common.planning.recommend_request of the sidebar's defaults
        return RecommendRequest(
            model=LLAMA_70B,
            input_len=2048,
            output_len=512,
            demand=Demand(concurrency=32),
            slo=SLO,
            search=SearchSpace(
                precisions=("bf16", "fp8"),
                max_nodes=1,
                max_num_seqs=(256,),
                max_num_batched_tokens=(8192,),
            ),
        )
    if name == "brief":
        return RecommendRequest(
            model=LLAMA_70B,
            input_len=2048,
            output_len=512,
            demand=Demand(avg_rate_rps=2.0),
            slo=SLO,
            search=SearchSpace(),
        )
    workload = load_trace(trace_path, "mooncake")
    return RecommendRequest(
        model=LLAMA_70B,
        input_len=max(1, round(workload.input_len.mean())),
        output_len=max(1, round(workload.output_len.mean())),
        input_dist=workload.input_len,
        output_dist=workload.output_len,
        demand=Demand(avg_rate_rps=1.0, peak_rate_rps=2.0),
        slo=SLO,
        search=SearchSpace(),
    )


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def line(label: str, wall: float, cpu: float, extra: str = "") -> None:
    print(f"  {label:<54} {wall:7.2f} s wall {cpu:7.2f} s CPU  {extra}", flush=True)


# ----- 1. cold process start to first ranking -------------------------------------------------
CHILD = """
import sys, time, json
started = time.perf_counter()
sys.path.insert(0, {root!r})
sys.argv = ["bench"]
from benchmarks.recommend_bench import scenario_request
from pathlib import Path
from planner.catalog import load_catalog
from planner.perf.model import get_performance_model
from planner.recommend import perf_predictor, recommend
request = scenario_request({name!r}, Path({trace!r}))
catalog = load_catalog()
result = recommend(catalog, request, perf_predictor(catalog, request, steady={steady!r}))
print(json.dumps({{"best": result.best.label if result.best else None,
                   "wall": time.perf_counter() - started, "cpu": time.process_time()}}))
"""


def cold_start(name: str, trace: Path, *, steady: bool, fit_cache: bool, cache_dir: Path) -> dict:
    env = dict(os.environ, SERVEWISE_CACHE_DIR=str(cache_dir))
    env["SERVEWISE_FIT_CACHE"] = "1" if fit_cache else "0"
    code = CHILD.format(root=str(ROOT), name=name, trace=str(trace), steady=steady)
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["spawn_wall"] = time.perf_counter() - start
    return report


# ----- 3. agreement on the shortlist ----------------------------------------------------------
def agreement(
    catalog: Catalog,
    request: RecommendRequest,
    perf: PerformanceModel,
    result: RecommendationResult,
    reference_requests: int = 0,
) -> list[dict[str, float]]:
    """Per shortlisted candidate: capacity from the steady state and from the simulation-only
    search (and, with ``reference_requests`` in rate mode, from that search with runs of that
    many requests), and the p99s at the steady-state capacity."""
    from planner.layouts import enumerate_layouts
    from planner.recommend.search import SHORTLIST
    from planner.recommend.startup import at_startup_memory

    kind = "concurrency" if request.demand.concurrency is not None else "rate"
    steady = perf_predictor(catalog, request, perf)
    simulated = perf_predictor(catalog, request, perf, steady=False)
    card = catalog.model(request.model)
    rows = []
    # judged as the search judges them: at the request's engine and context, each at the
    # memory share its engine starts with (a layout the default share does not start, an
    # owned MI355X's TP 4 among them, ranks at a raised one)
    engine = request.engine.model_copy(update={"max_model_len": request.max_model_len})
    for rec in result.ranked[:SHORTLIST]:
        candidates = enumerate_layouts(
            catalog,
            card,
            instances=[rec.instance],
            max_nodes=request.search.max_nodes,
            precisions=(rec.precision,),
            kv_cache_dtypes=(rec.kv_cache_dtype,),
            engine=engine,
        )
        layout = next(
            layout
            for layout in at_startup_memory(catalog, card, candidates, engine)
            if (layout.tp, layout.pp, layout.attention_dp) == (rec.tp, rec.pp, rec.attention_dp)
            and layout.feasible
        )
        settings = rec.engine_settings
        saturated = None
        if kind == "rate":
            from planner.recommend.capacity import saturated_capacity

            saturated = saturated_capacity(simulated, layout, settings)
        est = steady.steady_capacity(layout, settings, request, kind)
        sim = replica_capacity(simulated, layout, settings, request, kind, saturated)  # type: ignore[arg-type]
        cap_long = float("nan")
        if reference_requests and kind == "rate":
            held = capacity.RATE_SEARCH_REQUESTS
            capacity.RATE_SEARCH_REQUESTS = reference_requests
            try:
                cap_long = replica_capacity(
                    simulated,
                    layout,
                    settings,
                    request,
                    kind,  # type: ignore[arg-type]
                    saturated,
                ).max_load
            finally:
                capacity.RATE_SEARCH_REQUESTS = held
        load = est.max_load
        scenario = steady.scenario(layout, settings, kind, load)
        long = scenario.model_copy(update={"num_requests": max(1000, 4 * int(load))})
        at_160 = perf.predict(scenario)
        at_long = perf.predict(long)
        state = est.prediction
        assert state is not None
        rows.append(
            {
                "label": f"{rec.label} {settings.label}",
                "cap_steady": load,
                "cap_sim": sim.max_load,
                "cap_long": cap_long,
                "ttft_steady": state.ttft_ms_p99,
                "ttft_160": at_160.ttft_ms_p99,
                "ttft_long": at_long.ttft_ms_p99,
                "tpot_steady": state.tpot_ms_p99,
                "tpot_160": at_160.tpot_ms_p99,
                "tpot_long": at_long.tpot_ms_p99,
                "limit": est.limited_by,
            }
        )
    return rows


def print_agreement(rows: list[dict[str, float]], kind: str) -> None:
    unit = "req/s" if kind == "rate" else "in flight"
    print(f"  shortlist: capacity ({unit}) steady vs simulation-only search; p99 at the steady")
    print(
        "  capacity: steady state / simulation-only search (/ the same with long runs); p99:"
        " steady / simulated 160 requests / simulated >= 1,000 requests"
    )
    print(f"  {'candidate':<58} {'capacity':>17} {'p99 TTFT ms':>22} {'p99 TPOT ms':>20}")
    for r in rows:
        print(
            f"  {r['label'][:58]:<58} {r['cap_steady']:7.3g} {r['cap_sim']:7.3g}"
            + (f"/{r['cap_long']:<6.3g}" if math.isfinite(r["cap_long"]) else " ")
            + " "
            f"{r['ttft_steady']:6.0f}/{r['ttft_160']:6.0f}/{r['ttft_long']:6.0f} "
            f"{r['tpot_steady']:5.1f}/{r['tpot_160']:5.1f}/{r['tpot_long']:5.1f}  [{r['limit']}]"
        )

    def within(a: str, b: str, tolerance: float = 0.10) -> str:
        pairs = [(r[a], r[b]) for r in rows if r[b] > 0 and math.isfinite(r[a])]
        good = sum(1 for x, y in pairs if abs(x / y - 1) <= tolerance)
        errors = [abs(x / y - 1) for x, y in pairs]
        median = statistics.median(errors) if errors else float("nan")
        return f"{good}/{len(pairs)} within 10% (median |error| {median:.1%})"

    print(f"  capacity, steady vs simulation-only search: {within('cap_steady', 'cap_sim')}")
    if any(math.isfinite(r["cap_long"]) for r in rows):
        print(f"    (with long runs: {within('cap_steady', 'cap_long')})")
    print(f"  p99 TTFT, steady vs 160 requests:  {within('ttft_steady', 'ttft_160')}")
    print(f"  p99 TTFT, steady vs long run:      {within('ttft_steady', 'ttft_long')}")
    print(f"  p99 TPOT, steady vs 160 requests:  {within('tpot_steady', 'tpot_160')}")
    print(f"  p99 TPOT, steady vs long run:      {within('tpot_steady', 'tpot_long')}")


# ----- 4. rankings side by side ---------------------------------------------------------------
def _cell(rec: Any) -> str:
    if rec is None:
        return ""
    return f"{rec.label} x{rec.instances_total} ${rec.usd_per_million_output_tokens:.2f}"


def print_rankings(steady: RecommendationResult, simulated: RecommendationResult) -> None:
    def key(r: Any) -> tuple[str, int, int, str]:
        return (r.instance, r.tp, r.pp, r.precision)

    sim_rank = {key(r): r for r in simulated.ranked}
    steady_rank = {key(r): r for r in steady.ranked}
    print(f"  {'#':>2} {'steady-state search':<46} {'simulation-only search':<46}")
    same = 0
    for i in range(min(10, max(len(steady.ranked), len(simulated.ranked)))):
        a = steady.ranked[i] if i < len(steady.ranked) else None
        b = simulated.ranked[i] if i < len(simulated.ranked) else None
        mark = "" if a and b and key(a) == key(b) else "  <- differs"
        same += not mark
        print(f"  {i + 1:>2} {_cell(a):<46} {_cell(b):<46}{mark}")
    top_steady, top_sim = list(steady_rank)[:10], list(sim_rank)[:10]
    shared = len(set(top_steady) & set(top_sim))
    print(
        f"  top 10: {same} of 10 positions hold the same configuration; {shared} of 10 "
        "configurations are in both top 10s"
    )
    position = {k: i + 1 for i, k in enumerate(steady_rank)}
    sim_position = {k: i + 1 for i, k in enumerate(sim_rank)}
    for k in top_steady:
        a, b = steady_rank[k], sim_rank.get(k)
        if b is None:
            print(f"    {a.label}: not ranked by the simulation-only search")
        elif a.instances_total != b.instances_total:
            print(
                f"    {a.label}: {a.instances_total} instances vs {b.instances_total}: capacity "
                f"{a.max_rps_per_replica:.3g} vs {b.max_rps_per_replica:.3g} req/s a replica"
            )
    for k in top_sim:
        if k in top_steady:
            continue
        b, a = sim_rank[k], steady_rank.get(k)
        where = f"#{position[k]} in the steady-state search" if a else "not ranked there"
        capacity_note = (
            f", capacity {a.max_rps_per_replica:.3g} vs {b.max_rps_per_replica:.3g} a replica"
            if a
            else ""
        )
        print(
            f"    {b.label}: #{sim_position[k]} in the simulation-only search, {where}"
            f"{capacity_note}"
        )


def run_scenario(
    name: str,
    trace: Path,
    catalog: Catalog,
    perf: PerformanceModel,
    before: bool,
    reference_requests: int = 0,
) -> None:
    request = scenario_request(name, trace)
    kind = "concurrency" if request.demand.concurrency is not None else "rate"
    demand = request.demand
    load = f"{demand.concurrency} in flight" if kind == "concurrency" else f"{demand.peak} req/s"
    print(
        f"\n== {name}: {request.model}, {request.input_len}/{request.output_len} tokens, "
        f"{load} at peak, SLO p99 TTFT {SLO.ttft_p99_ms:g} ms / TPOT {SLO.tpot_p99_ms:g} ms"
    )
    with tempfile.TemporaryDirectory(prefix="servewise-bench-cache-") as cache:
        # the fit on disk, as any earlier process leaves it
        key = fit_cache.cache_key(results_fingerprint(catalog, catalog.measured))
        fit_cache.save(Path(cache), key, perf.fit_state())
        new = cold_start(name, trace, steady=True, fit_cache=True, cache_dir=Path(cache))
        line("cold process start to first ranking", new["spawn_wall"], new["cpu"],
             f"best {new['best']}")  # fmt: skip
        fits = cold_start(name, trace, steady=True, fit_cache=False, cache_dir=Path(cache))
        line("  the same with no fit cache (it fits first)", fits["spawn_wall"], fits["cpu"],
             f"best {fits['best']}")  # fmt: skip
        if before:
            old = cold_start(name, trace, steady=False, fit_cache=False, cache_dir=Path(cache))
            ratio = f"{old['spawn_wall'] / new['spawn_wall']:.1f}x wall"
            ratio += f", {old['cpu'] / new['cpu']:.1f}x CPU"
            line("  before: fit in the process, every step simulated", old["spawn_wall"],
                 old["cpu"], f"best {old['best']}; {ratio}")  # fmt: skip

    changes = {
        "re-rank after a workload change (output x 7/8)": {
            "output_len": max(1, round(request.output_len * 0.875)),
            "output_dist": None,
        },
        "re-rank after an SLO change (TPOT 100 -> 80 ms)": {
            "slo": SLO.model_copy(update={"tpot_p99_ms": 80.0})
        },
        "re-rank after a price change (spot)": {
            "search": request.search.model_copy(update={"pricing": "spot"})
        },
    }
    results: dict[bool, RecommendationResult] = {}
    for steady in (True, False) if before else (True,):
        cache = CapacityCache()
        predictor = perf_predictor(catalog, request, perf, steady=steady)
        label = "steady state" if steady else "simulation only"
        result, wall, cpu = timed(
            lambda p=predictor, c=cache: recommend(catalog, request, p, cache=c)  # type: ignore[misc]
        )
        results[steady] = result
        best = result.best.label if result.best else None
        line(f"[{label}] first ranking in this process", wall, cpu,
             f"{len(result.ranked)} ranked, best {best}")  # fmt: skip
        for what, update in changes.items():
            varied = request.model_copy(update=update)
            same = "price" in what  # prices are not predicted: the same predictor
            again_predictor = (
                predictor if same else perf_predictor(catalog, varied, perf, steady=steady)
            )
            again, wall, cpu = timed(
                lambda v=varied, p=again_predictor, c=cache: recommend(catalog, v, p, cache=c)  # type: ignore[misc]
            )
            line(f"[{label}] {what}", wall, cpu, f"{again.evaluations} new capacity searches")
    print("  -- steady state against the simulator")
    print_agreement(agreement(catalog, request, perf, results[True], reference_requests), kind)
    if before:
        print("  -- rankings")
        print_rankings(results[True], results[False])
    if reference_requests and kind == "rate":
        # the simulation-only search again, each rate judged by a run long enough to reach
        # its steady state (the search's own 160-request runs start from an empty engine)
        held = capacity.RATE_SEARCH_REQUESTS
        capacity.RATE_SEARCH_REQUESTS = reference_requests
        try:
            predictor = perf_predictor(catalog, request, perf, steady=False)
            reference, wall, cpu = timed(
                lambda: recommend(catalog, request, predictor, cache=CapacityCache())
            )
        finally:
            capacity.RATE_SEARCH_REQUESTS = held
        line(f"[simulation only, {reference_requests:,}-request runs] first ranking", wall, cpu)
        print(f"  -- rankings: steady state / simulation only, {reference_requests:,}-request runs")
        print_rankings(results[True], reference)


# ----- 0. the command line ----------------------------------------------------------------------
CLI = [
    "-m", "planner", "recommend", "--model", LLAMA_70B, "--input-len", "2048",
    "--output-len", "512", "--rate", "2", "--provider", "aws", "--slo-ttft-p99-ms", "3000",
    "--slo-tpot-p99-ms", "100", "--top", "3",
]  # fmt: skip


def cli_seconds(env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system) of one ``python -m planner recommend`` process,
    and its best line. On a shared machine the CPU seconds are what the command costs: its
    wall time on an idle one."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, *CLI], env=env, capture_output=True, text=True, check=True, cwd=ROOT
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    best = next((row.strip() for row in out.stdout.splitlines() if row.strip()[:3] == "1. "), "")
    return wall, cpu, best


def cli_figures(catalog: Catalog, perf: PerformanceModel, repeats: int, before: bool) -> None:
    """The brief's command: Llama-3.1-70B, 2,048/512, 2 req/s, AWS, p99 TTFT 3 s, TPOT 100 ms."""
    print(f"\n== python -m planner recommend {' '.join(CLI[3:])}")
    with tempfile.TemporaryDirectory(prefix="servewise-bench-user-") as tmp:
        user = Path(tmp) / "cached"
        key = fit_cache.cache_key(results_fingerprint(catalog, catalog.measured))
        fit_cache.save(user / "cache", key, perf.fit_state())
        env = dict(os.environ, SERVEWISE_USER_DATA_DIR=str(user))
        env.pop("SERVEWISE_CACHE_DIR", None)
        env.pop("SERVEWISE_FIT_CACHE", None)
        # side by side, in turn: a first call on a fresh install (a user data directory that
        # does not exist yet: the shipped fit serves), and a call with the fit in the cache
        fresh: list[tuple[float, float, str]] = []
        cached: list[tuple[float, float, str]] = []
        for i in range(repeats):
            fresh.append(cli_seconds(dict(env, SERVEWISE_USER_DATA_DIR=str(Path(tmp) / f"new{i}"))))
            cached.append(cli_seconds(env))
        for label, runs in (
            ("first call, fresh install (the shipped fit)", fresh),
            ("fresh process, the fit cached in the user dir", cached),
        ):
            wall = statistics.median(t for t, _, _ in runs)
            cpu = statistics.median(c for _, c, _ in runs)
            print(
                f"  {label}: median {wall:6.2f} s wall, {cpu:.2f} s CPU (wall min "
                f"{min(t for t, _, _ in runs):.2f}, max {max(t for t, _, _ in runs):.2f}, "
                f"n={repeats}); best: {runs[0][2]}"
            )
        cold = statistics.median(t for t, _, _ in fresh)
        off, off_cpu, _ = cli_seconds(dict(env, SERVEWISE_FIT_CACHE="0"))
        print(
            f"  fresh process, no fit at hand (SERVEWISE_FIT_CACHE=0: it fits first, as a fresh "
            f"install did before the fit shipped): {off:6.2f} s wall, {off_cpu:.2f} s CPU "
            f"({off / cold:.1f}x the fresh install's wall)"
        )
        one, five, _ = os.getloadavg()
        print(f"  load average {one:.2f} / {five:.2f} (1 / 5 min) after these")
    request = RecommendRequest(
        model=LLAMA_70B,
        input_len=2048,
        output_len=512,
        demand=Demand(avg_rate_rps=2.0),
        slo=SLO,
        search=SearchSpace(providers=("aws",)),
    )
    first, wall, cpu = timed(
        lambda: recommend(catalog, request, perf_predictor(catalog, request, perf))
    )
    line(
        "in this process: the first search",
        wall,
        cpu,
        f"best {first.best.label if first.best else None}",
    )
    _, wall, cpu = timed(
        lambda: recommend(catalog, request, perf_predictor(catalog, request, perf))
    )
    line("in this process: the same search again (warm)", wall, cpu)
    if before:
        simulated = perf_predictor(catalog, request, perf, steady=False)
        old, wall_old, cpu_old = timed(
            lambda: recommend(catalog, request, simulated, cache=CapacityCache())
        )
        line("  simulation-only search (every bisection step simulated)", wall_old, cpu_old,
             f"best {old.best.label if old.best else None}")  # fmt: skip


def disaggregation_figures(catalog: Catalog, perf: PerformanceModel) -> None:
    """In one process, the search with disaggregation off (today's), auto (both kinds) and on
    (pools only), each from an empty capacity cache, then again warm: DeepSeek-R1-0528 FP8 at
    100 req/s under p99 TTFT 2 s / TPOT 30 ms (issue 25's check), and the brief's Llama-3.1-70B
    at 2 req/s (a dense model under 8 GPUs a replica: the dimension only says why not)."""
    requests = {
        "DeepSeek-R1-0528 fp8, 2048/512, 100 req/s, 2 s / 30 ms": RecommendRequest(
            model="deepseek-ai/DeepSeek-R1-0528",
            input_len=2048,
            output_len=512,
            demand=Demand(avg_rate_rps=100.0),
            slo=Slo(ttft_p99_ms=2000, tpot_p99_ms=30),
            search=SearchSpace(precisions=("fp8",)),
        ),
        "brief (Llama-3.1-70B, 2 req/s)": scenario_request("brief", Path()),
    }
    for title, request in requests.items():
        print(f"\n== disaggregation: {title}")
        for mode in ("off", "auto", "on"):
            asked = request.model_copy(update={"disaggregation": mode})
            predictor = perf_predictor(catalog, asked, perf)
            search = functools.partial(recommend, catalog, asked, predictor, cache=CapacityCache())
            result, wall, cpu = timed(search)
            pools = sum(rec.disaggregated for rec in result.ranked)
            best = result.best.label if result.best else None
            line(f"  {mode}: first search", wall, cpu,
                 f"{len(result.ranked)} ranked ({pools} disaggregated), best {best}")  # fmt: skip
            _, wall, cpu = timed(search)
            line(f"  {mode}: again (warm cache)", wall, cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=["plan", "brief", "trace"])
    parser.add_argument(
        "--disaggregation",
        action="store_true",
        help="only the disaggregation figures: off / auto / on searches, cold and warm",
    )
    parser.add_argument("--no-before", action="store_true", help="skip the simulation-only runs")
    parser.add_argument("--cli-repeats", type=int, default=5, help="command-line runs (0: none)")
    parser.add_argument(
        "--reference-requests",
        type=int,
        default=0,
        help="rate scenarios: also rank by a simulation-only search whose runs have this many "
        "requests (e.g. 1000, long enough for steady state; minutes)",
    )
    parser.add_argument(
        "--cli-only", action="store_true", help="only the command line's figures (no scenarios)"
    )
    args = parser.parse_args()
    one, five, fifteen = os.getloadavg()
    print(f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min, 2 cores)")
    catalog = load_catalog()
    perf, wall, cpu = timed(lambda: get_performance_model(catalog))
    line("performance model (fitted, cached or shipped)", wall, cpu)
    if args.disaggregation:
        disaggregation_figures(catalog, perf)
        return 0
    if args.cli_repeats:
        cli_figures(catalog, perf, args.cli_repeats, before=not args.no_before)
    if args.cli_only:
        return 0
    with tempfile.TemporaryDirectory(prefix="servewise-trace-") as tmp:
        trace = write_trace(Path(tmp) / "trace.jsonl")
        for name in args.scenario or ["plan", "brief", "trace"]:
            run_scenario(name, trace, catalog, perf, not args.no_before, args.reference_requests)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
