"""The disaggregated slice: public disaggregated / wide-EP measurements against the model.

    .venv/bin/python benchmarks/disaggregated_validation.py

Every row of ``data/measured_disaggregated.csv`` (SGLang's large-scale EP, GB200 NVL72 and Kimi
K2 posts, vLLM's wide-EP and GB200 posts; sources and caveats in data/README.md) is predicted
with the model fitted on the public aggregated results (none of these rows is in that fit):

1. **tested pool alone, held out by source** (what ``planner validate`` reports as its
   disaggregated slice, :mod:`planner.perf.disaggregated_validation`): the published figures
   are phase-isolated, so the pool the source measured is priced on its own, before the
   pools' step scale is fitted and with the scale fitted on the other sources' rows;
2. **as deployed**: the row as ``planner predict --scenarios`` predicts it
   (:func:`planner.commands.predict.predict_rows`, the shipped scale): both pools, the link,
   the closed loop of ``concurrency`` requests. The non-tested pool as entered is a guess
   (the sources give it what it needs), so this way is far off where that pool binds; it is
   printed to show which pool a deployment as entered would be bound by.

Prints each row's measured and predicted figures and the median absolute % errors.
"""

from __future__ import annotations

import statistics

from planner.catalog import load_catalog
from planner.catalog.loader import load_disaggregated_results
from planner.commands.predict import predict_rows
from planner.errors import PlannerError
from planner.perf.disaggregated import DisaggregatedPrediction, fitted_scales, layout_from_row
from planner.perf.disaggregated_validation import disaggregated_slice, format_slice
from planner.perf.model import get_performance_model
from planner.perf.scenario import Scenario


def main() -> None:
    rows = load_disaggregated_results()
    model = get_performance_model(load_catalog())
    sl = disaggregated_slice(model, rows)
    print(format_slice(sl))
    print(f"\nas deployed (the shipped scale, {fitted_scales().source}):")
    errors: list[float] = []
    for line, (row, result) in enumerate(
        zip(rows, predict_rows(model, rows), strict=True), start=2
    ):
        label = f"row {line}: {row['engine']} {row['model'].split('/')[-1]} {row['gpu']}"
        if isinstance(result, PlannerError):
            print(f"  {label}: cannot be predicted: {result}")
            continue
        assert isinstance(result, DisaggregatedPrediction)
        scenario = Scenario.from_row(row)
        layout = layout_from_row(row)
        assert layout is not None
        if row["tested_phase"] == "prefill":
            measured = float(row["input_tok_per_s_per_gpu"])
            predicted = (
                result.prediction.request_per_s * scenario.mean_input_len / layout.prefill.gpus
            )
        else:
            measured = float(row["output_tok_per_s_per_gpu"])
            predicted = result.prediction.output_tok_per_s / layout.decode.gpus
        errors.append(abs(predicted / measured - 1.0))
        print(
            f"  {label} {row['tested_phase']}: measured {measured:,.0f}, as deployed "
            f"{predicted:,.0f} ({100 * (predicted / measured - 1):+.0f}%; prefill "
            f"{result.prefill_utilization:.0%} / decode {result.decode_utilization:.0%} busy)"
        )
    if errors:
        print(
            f"  median absolute error as deployed: {100 * statistics.median(errors):.0f}% over "
            f"{len(errors)} rows"
        )


if __name__ == "__main__":
    main()
