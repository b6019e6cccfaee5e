"""The disaggregated slice: public disaggregated / wide-EP measurements against the model.

    .venv/bin/python benchmarks/disaggregated_validation.py

Every row of ``data/measured_disaggregated.csv`` (SGLang's large-scale EP and GB200 NVL72
posts; sources and caveats in data/README.md) is predicted twice with the model fitted on the
public aggregated results (none of these rows is in the fit: issue 25 item 6 fits them later):

1. **as deployed**: the row as ``planner predict --scenarios`` predicts it, through the same
   code (:func:`planner.commands.predict.predict_rows`): both pools, the link, the closed loop
   of ``concurrency`` requests. Figures per GPU of the pool the source measured
   (``per_gpu_basis``).
2. **tested pool alone**: the published figures are phase-isolated ("unlimited resources for
   the non-tested phase"; the decode pool held full by SGLang's slow-down API), so the pool
   the source measured is also priced on its own: decode at ``concurrency / ranks`` running
   sequences a rank, ``output tok/s a GPU = d / (T(d) x tp)`` and TPOT ``= T(d)``
   (:class:`planner.perf.disaggregated.DecodePool`, ``d`` capped at the rank's KV seats);
   prefill at its saturation rate, ``input tok/s a GPU = rate x input_len / tp``.

Prints each row's predicted and measured figure and the median absolute % error of each way;
TPOT where a source reports one (none of the present rows does).
"""

from __future__ import annotations

import statistics

from planner.catalog import load_catalog
from planner.catalog.loader import load_disaggregated_results
from planner.commands.predict import predict_rows
from planner.errors import PlannerError
from planner.perf.disaggregated import (
    DisaggregatedPrediction,
    disaggregated_model,
    layout_from_row,
)
from planner.perf.model import get_performance_model
from planner.perf.scenario import Scenario


def _float(text: str) -> float | None:
    return float(text) if text else None


def _pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


def main() -> None:
    rows = load_disaggregated_results()
    model = get_performance_model(load_catalog())
    deployed = predict_rows(model, rows)
    errors_deployed: list[float] = []
    errors_pool: list[float] = []
    errors_tpot: list[float] = []
    print(f"{len(rows)} rows of data/measured_disaggregated.csv")
    for line_no, (row, result) in enumerate(zip(rows, deployed, strict=True), start=2):
        label = f"row {line_no}: {row['engine']} {row['model']} {row['precision']} {row['gpu']}"
        phase = row["tested_phase"]
        if isinstance(result, PlannerError):
            print(f"{label}: cannot be predicted: {result}")
            continue
        assert isinstance(result, DisaggregatedPrediction)
        scenario = Scenario.from_row(row)
        layout = layout_from_row(row)
        assert layout is not None
        dm = disaggregated_model(model, scenario, layout)
        pool = layout.decode if phase == "decode" else layout.prefill
        if phase == "prefill":
            measured = _float(row["input_tok_per_s_per_gpu"])
            what = "input tok/s a prefill GPU"
            as_deployed = (
                (result.prediction.output_tok_per_s / scenario.mean_output_len)
                * scenario.mean_input_len
                / layout.prefill.gpus
            )
            alone = dm.prefill_state.saturation_rate() * scenario.mean_input_len / pool.tp
            tpot_alone = None
        else:
            measured = _float(row["output_tok_per_s_per_gpu"])
            what = "output tok/s a decode GPU"
            as_deployed = result.prediction.output_tok_per_s / layout.decode.gpus
            ranks = dm.decode_ranks
            running = min(float(scenario.concurrency or 1.0) / ranks, dm.decode_pool.seats)
            step_s = dm.decode_pool.step_s(running)
            alone = running / step_s / pool.tp
            tpot_alone = step_s * 1e3
        print(f"{label}, {phase} measured ({row['source']})")
        if measured is None:
            print("   no measured throughput")
            continue
        errors_deployed.append(abs(_pct(as_deployed, measured)))
        errors_pool.append(abs(_pct(alone, measured)))
        print(
            f"   {what}: measured {measured:,.0f}; as deployed {as_deployed:,.0f} "
            f"({_pct(as_deployed, measured):+.0f}%, prefill {result.prefill_utilization:.0%} / "
            f"decode {result.decode_utilization:.0%} busy, TPOT "
            f"{result.prediction.tpot_ms_mean:.1f} ms); tested pool alone {alone:,.0f} "
            f"({_pct(alone, measured):+.0f}%"
            + (f", TPOT {tpot_alone:.1f} ms" if tpot_alone is not None else "")
            + ")"
        )
        measured_tpot = _float(row["tpot_ms"])
        if measured_tpot is not None and tpot_alone is not None:
            errors_tpot.append(abs(_pct(tpot_alone, measured_tpot)))
            print(f"   TPOT ({row['tpot_stat']}): measured {measured_tpot:.1f} ms")

    def median(values: list[float]) -> str:
        return f"{statistics.median(values):.0f}% over {len(values)} rows" if values else "no rows"

    print("the disaggregated slice, median absolute % error:")
    print(f"   throughput a GPU, as deployed:      {median(errors_deployed)}")
    print(f"   throughput a GPU, tested pool alone: {median(errors_pool)}")
    print(f"   TPOT:                               {median(errors_tpot)}")


if __name__ == "__main__":
    main()
