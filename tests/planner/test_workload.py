"""Workloads: length distributions, arrivals, shared prefixes and the public trace formats."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InvalidInputError
from planner.workload import ArrivalProcess, LengthDistribution, Workload, load_trace


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ----- length distributions ------------------------------------------------------------------


def test_fixed_is_exact() -> None:
    d = LengthDistribution.fixed(2048)
    assert d.sample(5, rng()).tolist() == [2048] * 5
    assert d.mean() == 2048 and d.quantile(0.99) == 2048 and d.max() == 2048


def test_uniform_mean_and_quantiles() -> None:
    d = LengthDistribution.uniform(100, 199)
    assert d.mean() == pytest.approx(149.5)
    assert d.quantile(0.5) == 149 and d.quantile(0.99) == 198 and d.quantile(1.0) == 199
    draws = d.sample(20_000, rng())
    assert draws.min() >= 100 and draws.max() <= 199
    assert draws.mean() == pytest.approx(149.5, rel=0.01)


def test_normal_quantile_is_the_rounded_normal_quantile() -> None:
    d = LengthDistribution.normal(1000, 200)
    expected = 1000 + 200 * NormalDist().inv_cdf(0.99)  # 1465.3
    assert d.quantile(0.99) == round(expected)
    assert d.mean() == pytest.approx(1000, abs=0.5)
    assert np.quantile(d.sample(100_000, rng()), 0.99) == pytest.approx(expected, rel=0.01)


def test_lognormal_is_parameterised_by_the_lengths_mean_and_std() -> None:
    d = LengthDistribution.lognormal(500, 400)
    draws = d.sample(200_000, rng(1))
    assert draws.mean() == pytest.approx(500, rel=0.02)
    assert draws.std() == pytest.approx(400, rel=0.05)
    assert d.mean() == pytest.approx(500, rel=0.01)
    # the tail is what sizes the KV cache: p99 is far above the mean
    assert d.quantile(0.99) > 3.5 * d.quantile(0.5)


def test_empirical_histogram_weights() -> None:
    d = LengthDistribution.empirical([100, 1000, 10_000], [70, 29, 1])
    assert d.mean() == pytest.approx(0.7 * 100 + 0.29 * 1000 + 0.01 * 10_000)
    assert d.quantile(0.5) == 100 and d.quantile(0.98) == 1000 and d.quantile(0.995) == 10_000
    assert set(d.sample(1000, rng()).tolist()) <= {100, 1000, 10_000}


def test_clipping_keeps_lengths_positive_and_bounded() -> None:
    d = LengthDistribution.normal(10, 50, max_tokens=40)
    draws = d.sample(10_000, rng())
    assert draws.min() >= 1 and draws.max() <= 40
    assert d.max() == 40


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: LengthDistribution.fixed(-5), "value"),
        (lambda: LengthDistribution.fixed(0), "value"),
        (lambda: LengthDistribution.uniform(10, 5), "high"),
        (lambda: LengthDistribution.normal(100, -1), "std"),
        (lambda: LengthDistribution.lognormal(-100, 10), "mean"),
        (lambda: LengthDistribution.empirical([]), "values"),
        (lambda: LengthDistribution.empirical([5, -2]), "values"),
        (lambda: LengthDistribution.empirical([5, 6], [1.0]), "weights"),
    ],
)
def test_invalid_lengths_name_the_field(build: object, field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        build()  # type: ignore[operator]
    assert info.value.field == field
    assert field in str(info.value) and "not allowed" in str(info.value)


def test_quantile_outside_0_1_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="quantile"):
        LengthDistribution.fixed(3).quantile(1.5)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["fixed", "uniform", "normal", "lognormal", "empirical"]),
    a=st.integers(1, 50_000),
    b=st.integers(0, 50_000),
    seed=st.integers(0, 2**16),
)
def test_samples_are_always_positive_integers(kind: str, a: int, b: int, seed: int) -> None:
    d = {
        "fixed": lambda: LengthDistribution.fixed(a),
        "uniform": lambda: LengthDistribution.uniform(a, a + b),
        "normal": lambda: LengthDistribution.normal(a, b),
        "lognormal": lambda: LengthDistribution.lognormal(a, b),
        "empirical": lambda: LengthDistribution.empirical([a, a + b + 1], [1, 2]),
    }[kind]()
    draws = d.sample(200, rng(seed))
    assert draws.dtype.kind == "i" and draws.min() >= 1
    assert d.quantile(0.0) <= d.quantile(0.5) <= d.quantile(0.99) <= d.quantile(1.0)


def test_json_round_trip_uses_mean_alias() -> None:
    d = LengthDistribution.model_validate({"kind": "normal", "mean": 300, "std": 20})
    assert d.mean_tokens == 300
    assert LengthDistribution.model_validate_json(d.model_dump_json()) == d


# ----- arrivals ------------------------------------------------------------------------------


def test_poisson_gaps_average_one_over_rate() -> None:
    times = ArrivalProcess.poisson(4.0).sample_arrivals_s(40_001, rng())
    assert times is not None and times[0] == 0
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(0.25, rel=0.02)
    assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_burstiness_sets_the_squared_coefficient_of_variation(burstiness: float) -> None:
    times = ArrivalProcess.gamma(2.0, burstiness).sample_arrivals_s(60_001, rng(3))
    assert times is not None
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(0.5, rel=0.03)
    assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1 / burstiness, rel=0.08)


def test_closed_loop_has_no_timestamps_and_trace_replays() -> None:
    assert ArrivalProcess.closed_loop(8).sample_arrivals_s(5, rng()) is None
    trace = ArrivalProcess.trace([10.0, 11.0, 13.0])
    times = trace.sample_arrivals_s(5, rng())
    assert times is not None and times[:3].tolist() == [0.0, 1.0, 3.0]
    assert list(times) == sorted(times)
    assert trace.mean_rate() == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: ArrivalProcess.closed_loop(0), "concurrency"),
        (lambda: ArrivalProcess.poisson(-1.0), "rate"),
        (lambda: ArrivalProcess.gamma(1.0, 0.0), "burstiness"),
        (lambda: ArrivalProcess.trace([]), "timestamps"),
        (lambda: ArrivalProcess.trace([2.0, 1.0]), "timestamps"),
    ],
)
def test_invalid_arrivals_name_the_field(build: object, field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        build()  # type: ignore[operator]
    assert info.value.field == field


# ----- workloads -----------------------------------------------------------------------------


def test_sampled_requests_share_the_common_prefix_and_are_reproducible() -> None:
    w = Workload(
        input_len=LengthDistribution.uniform(1000, 3000),
        output_len=LengthDistribution.fixed(200),
        arrival=ArrivalProcess.poisson(5.0),
        prefix_share=0.25,
    )
    first = w.sample_requests(50, seed=7)
    assert first == w.sample_requests(50, seed=7)
    assert first != w.sample_requests(50, seed=8)
    assert all(r.prefix_group == 0 and r.prefix_len == w.shared_prefix_len for r in first)
    assert w.shared_prefix_len == 500
    arrivals = [r.arrival_s for r in first]
    assert arrivals[0] == 0 and arrivals == sorted(arrivals)  # type: ignore[type-var]


def test_context_quantile_sums_input_and_output() -> None:
    assert Workload.fixed(2048, 512).context_quantile(0.99) == 2560
    w = Workload(
        input_len=LengthDistribution.empirical([1000, 8000], [99, 1]),
        output_len=LengthDistribution.fixed(100),
    )
    assert w.context_quantile(0.5) == 1100
    assert w.context_quantile(0.999) == 8100
    assert w.max_context() == 8100


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prefix_share": 1.0}, "prefix_share"),
        ({"prefix_share": -0.1}, "prefix_share"),
        ({"avg_rate": 5.0, "peak_rate": 2.0}, "peak_rate"),
        ({"avg_rate": 0.0}, "avg_rate"),
    ],
)
def test_invalid_workloads_name_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        Workload(
            input_len=LengthDistribution.fixed(10),
            output_len=LengthDistribution.fixed(10),
            **kwargs,
        )
    assert info.value.field == field


def test_negative_lengths_in_a_fixed_workload_are_refused() -> None:
    with pytest.raises(InvalidInputError) as info:
        Workload.fixed(-1, 10)
    assert info.value.field == "input_len"


# ----- traces --------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_mooncake_hash_ids_become_shared_prefixes(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [1, 2, 3]},
        {"timestamp": 500, "input_length": 1200, "output_length": 20, "hash_ids": [1, 2, 4]},
        {"timestamp": 1500, "input_length": 700, "output_length": 30, "hash_ids": [5, 6]},
        {"timestamp": 2000, "input_length": 600, "output_length": 5, "hash_ids": [1, 7]},
    ]
    path = write(tmp_path / "mooncake.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    w = load_trace(path)
    assert w.num_requests == 4 and w.trace is not None
    prefixes = [r.prefix_len for r in w.trace]
    assert prefixes == [0, 1024, 0, 512]  # two shared 512-token blocks, none, one
    assert [r.prefix_group for r in w.trace] == [None, 1, None, 1]
    assert w.avg_rate == pytest.approx(3 / 2.0)
    requests = w.sample_requests(6)
    assert [r.input_len for r in requests[:4]] == [1500, 1200, 700, 600]
    assert requests[4].input_len == 1500 and requests[4].arrival_s > requests[3].arrival_s  # type: ignore[operator]
    assert w.prefix_share == pytest.approx(1536 / 4000)
    assert w.context_quantile(1.0) == 1510


def test_burstgpt_skips_failed_rows(tmp_path: Path) -> None:
    path = write(
        tmp_path / "burst.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "65,GPT-4,417,208,625,API log\n",
    )
    w = load_trace(path)
    assert w.num_requests == 2
    assert w.input_len.mean() == pytest.approx((472 + 417) / 2)
    assert w.source == "burstgpt trace burst.csv"


def test_azure_trace_parses_seven_digit_timestamps(tmp_path: Path) -> None:
    path = write(
        tmp_path / "AzureLLMInferenceTrace_conv.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:15:51.0000000,879,59\n",
    )
    w = load_trace(path, "azure")
    assert w.trace is not None
    gaps = np.diff([r.timestamp_s for r in w.trace])
    assert gaps[0] == pytest.approx(4.314579, abs=1e-5)
    assert w.output_len.quantile(1.0) == 109


def test_plain_csv_and_peak_rate(tmp_path: Path) -> None:
    lines = ["timestamp,input_tokens,output_tokens"]
    # 10 requests in the first second, then one a minute for 5 minutes
    lines += [f"{i / 10},100,10" for i in range(10)]
    lines += [f"{60 * (k + 1)},200,20" for k in range(5)]
    w = load_trace(write(tmp_path / "plain.csv", "\n".join(lines) + "\n"))
    assert w.avg_rate == pytest.approx(14 / 300)
    assert w.peak_rate == pytest.approx(11 / 60)  # the busiest minute holds 11
    assert w.mean_rate() == w.avg_rate


def test_empty_and_malformed_traces_name_the_file_and_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"empty\.csv: rows"):
        load_trace(write(tmp_path / "empty.csv", ""))
    with pytest.raises(InvalidInputError, match=r"header\.csv: rows"):
        load_trace(write(tmp_path / "header.csv", "timestamp,input_tokens,output_tokens\n"))
    with pytest.raises(InvalidInputError, match=r"bad\.csv: row 3 'input_tokens'"):
        load_trace(
            write(
                tmp_path / "bad.csv",
                "timestamp,input_tokens,output_tokens\n1,10,10\n2,ten,10\n",
            )
        )
    with pytest.raises(InvalidInputError, match=r"odd\.csv: header"):
        load_trace(write(tmp_path / "odd.csv", "a,b,c\n1,2,3\n"))
    with pytest.raises(InvalidInputError, match=r"m\.jsonl: line 2"):
        first = '{"timestamp": 0, "input_length": 5, "output_length": 1}'
        load_trace(write(tmp_path / "m.jsonl", first + "\nnope\n"))
    with pytest.raises(InvalidInputError, match="output_length"):
        load_trace(write(tmp_path / "n.jsonl", '{"timestamp": 0, "input_length": 5}\n'))
    with pytest.raises(InvalidInputError, match="trace"):
        load_trace(tmp_path / "missing.csv")
    with pytest.raises(InvalidInputError, match="format"):
        load_trace(tmp_path / "plain.csv", "parquet")  # type: ignore[arg-type]


def test_mean_and_spread_mean_one_thing_for_every_shape() -> None:
    """The sidebar's and the runner's (``--input-spread``) reading of a spread."""
    make = LengthDistribution.from_mean_spread
    assert make("lognormal", 100, 0) == LengthDistribution.fixed(100)
    assert make("uniform", 100, 30) == LengthDistribution.uniform(70, 130)
    assert make("uniform", 10, 30) == LengthDistribution.uniform(1, 40)
    assert make("normal", 100, 30) == LengthDistribution.normal(100, 30)
    lognormal = make("lognormal", 1000, 500)
    assert lognormal == LengthDistribution.lognormal(1000, 500)
    draws = lognormal.sample(20_000, np.random.default_rng(0))
    assert draws.std() == pytest.approx(500, rel=0.05)  # a standard deviation in tokens
    with pytest.raises(InvalidInputError, match="shape"):
        make("zipf", 100, 1)
    with pytest.raises(InvalidInputError, match="spread"):
        make("normal", 100, -1)


def test_an_empirical_distribution_memoises_without_changing_what_it_says() -> None:
    """What a trace's distribution derives (sorted values, CDF, digest) is memoised on the
    object: the figures are those a fresh equal object gives, the memo cannot be written to,
    and equality, copies and pickles are as without it."""
    import pickle

    values = [900, 12, 4000, 12, 77, 1500, 300]
    weights = [1.0, 2.0, 0.5, 1.0, 3.0, 1.0, 1.5]
    used = LengthDistribution.empirical(values, weights)
    for q in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
        used.quantile(q)
    used.mean()
    fresh = LengthDistribution.empirical(values, weights)
    assert [used.quantile(q) for q in (0.05, 0.5, 0.95, 1.0)] == [
        fresh.quantile(q) for q in (0.05, 0.5, 0.95, 1.0)
    ]
    assert used.mean() == fresh.mean()
    assert used.key() == fresh.key()
    assert used.key() != LengthDistribution.empirical(values).key()
    sorted_values, probabilities = used._empirical()
    with pytest.raises(ValueError):
        sorted_values[0] = 1
    with pytest.raises(ValueError):
        probabilities[0] = 0.0
    assert used == fresh and hash(used) == hash(fresh)
    assert pickle.loads(pickle.dumps(used)) == fresh
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    assert (used.sample(50, rng_a) == fresh.sample(50, rng_b)).all()
