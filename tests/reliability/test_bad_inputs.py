"""Bad input at every entry point: one line naming the field, the value and what is allowed;
never a traceback on a command line, never an exception or an error box on a page.

The inputs are of each class the reliability issue found (malformed numbers, NaN and infinity,
out-of-range values, unknown names, bad URLs, corrupt files, oversized files and configs), but
fresh values of them. Command lines run in-process through their ``main`` (a few as real
processes, to see the entry points themselves); pages run under AppTest.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from benchmarks_runner import cli as runner_cli
from benchmarks_runner.errors import TraceFormatError
from benchmarks_runner.simulated import cli as simulated_cli
from benchmarks_runner.workload import load_trace as runner_load_trace
from planner import cli as planner_cli
from planner.catalog import PRECISIONS
from planner.errors import InvalidInputError
from planner.workload import load_trace
from tests.reliability.conftest import no_traceback, run_cli

ROOT = Path(__file__).resolve().parents[2]
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_CONFIG = json.loads((ROOT / "data/models/meta-llama__Llama-3.1-8B-Instruct.json").read_text())
DEAD = "http://127.0.0.1:9"  # nothing listens there


def config_file(tmp_path: Path, name: str, **fields: object) -> str:
    config = {k: v for k, v in LLAMA_CONFIG.items() if k != "_servewise"} | fields
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def in_a_thread(main: Callable[[list[str]], int], argv: list[str]) -> int:
    """``main(argv)`` in a thread of its own: a command line owns its event loop, and the
    browser tests' Playwright keeps one running in the main thread of the test session."""
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(main(argv)))
    worker.start()
    worker.join(timeout=120)
    assert result, f"{argv} did not return"
    return result[0]


def check_one_line(capsys: pytest.CaptureFixture[str], code: int, needles: tuple[str, ...]) -> str:
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code != 0 and lines and lines[-1].startswith("error: "), (code, out, err)
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


# ----- python -m planner -----------------------------------------------------------------------
FIT = ["fit", "--model", LLAMA_8B, "--instance", "g6e.12xlarge"]
RECOMMEND = ["recommend", "--model", LLAMA_8B, "--input-len", "512", "--output-len", "64"]
PLANNER_CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "negative tp": ([*FIT, "--tp", "-3"], ("--tp=-3", "from 1 to 1,024")),
    "fractional pp": ([*FIT, "--pp", "1.5"], ("--pp=1.5", "whole number")),
    "nodes in exponent form": ([*FIT, "--nodes", "1e9"], ("--nodes=1e9", "from 1 to 64")),
    "negative memory share": ([*FIT, "--gpu-memory-utilization", "-0.2"], ("-0.2", "<= 1")),
    "infinite quantile": ([*FIT, "--quantile", "inf"], ("--quantile=inf",)),
    "zero max-model-len": ([*FIT, "--max-model-len", "0"], ("--max-model-len=0",)),
    "NaN concurrency": ([*FIT, "--concurrency", "nan"], ("--concurrency=nan",)),
    "unknown instance": (
        ["fit", "--model", LLAMA_8B, "--instance", "p5.nope"],
        ("p5.nope", "one of"),
    ),
    "unknown model": (["fit", "--model", "nobody/x", "--instance", "g6e.xlarge"], ("nobody/x",)),
    "missing value": ([*FIT, "--tp"], ("--tp", "expected one argument")),
    "unknown sub-command": (["plan-it"], ("plan-it", "invalid choice")),
    "negative TPOT SLO": ([*RECOMMEND, "--rate", "1", "--slo-tpot-p99-ms", "-1"], ("-1",)),
    "NaN E2E SLO": ([*RECOMMEND, "--rate", "1", "--slo-e2e-p99-ms", "nan"], ("nan", "finite")),
    "zero rate": ([*RECOMMEND, "--rate", "0"], ("--rate=0", "> 0")),
    "infinite peak rate": ([*RECOMMEND, "--rate", "1", "--peak-rate", "inf"], ("inf",)),
    "zero concurrency": ([*RECOMMEND, "--concurrency", "0"], ("--concurrency=0",)),
    "utilisation over 1": ([*RECOMMEND, "--rate", "1", "--utilisation", "1.5"], ("1.5",)),
    "prefix share of 1": ([*RECOMMEND, "--rate", "1", "--prefix-share", "1"], ("below 1",)),
    "too many nodes": ([*RECOMMEND, "--rate", "1", "--max-nodes", "17"], ("--max-nodes=17",)),
    "negative spares": ([*RECOMMEND, "--rate", "1", "--spare-replicas", "-1"], ("-1",)),
    # a GPU name that means two catalog GPUs (the wrong case alone is taken: h100-sxm is H100-SXM)
    "GPU of two form factors": (
        [*RECOMMEND, "--rate", "1", "--gpu", "h100"],
        ("--gpu='h100'", "did you mean H100-SXM or H100-PCIe"),
    ),
    "unknown region": (
        [*RECOMMEND, "--rate", "1", "--region", "us-east-9"],
        ("--region='us-east-9'", "one of"),
    ),
    "unknown provider": ([*RECOMMEND, "--rate", "1", "--provider", "awz"], ("awz", "aws")),
    "unknown precision": ([*RECOMMEND, "--rate", "1", "--precision", "fp3"], ("fp3", "bf16")),
    "prompt past any context": (
        ["recommend", "--model", LLAMA_8B, "--input-len", "200000000", "--output-len", "1"],
        ("--input-len=200000000", "134,217,728"),
    ),
    "predict: no such file": (
        ["predict", "--scenarios", "/nonexistent/s.csv", "--out", "/tmp/o.csv"],
        ("--scenarios",),
    ),
    "validate: unknown scheme": (["validate", "--scheme", "leave-none-out"], ("leave-none-out",)),
    "catalog: unknown table": (["catalog", "tpus"], ("tpus",)),
}


@pytest.mark.parametrize("case", list(PLANNER_CASES))
def test_planner_command_line(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv, needles = PLANNER_CASES[case]
    check_one_line(capsys, in_a_thread(planner_cli.main, argv), needles)


CONFIG_CASES: dict[str, tuple[dict[str, object], tuple[str, ...]]] = {
    "a 5,000,000-layer model": ({"num_hidden_layers": 5_000_000}, ("num_hidden_layers", "1,024")),
    "a hidden size in quotes": ({"hidden_size": "4096"}, ("hidden_size", "'4096'")),
    "a million experts": (
        {"num_local_experts": 1_000_000, "num_experts_per_tok": 2},
        ("num_local_experts", "4,096"),
    ),
    "a list for a head count": ({"num_key_value_heads": [8]}, ("num_key_value_heads", "[8]")),
    "more KV heads than heads": ({"num_key_value_heads": 64}, ("num_key_value_heads", "64")),
    "an infinite context": ({"max_position_embeddings": 1e400}, ("max_position_embeddings",)),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_a_model_config_beyond_published_models_is_refused_at_once(
    case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fields, needles = CONFIG_CASES[case]
    path = config_file(tmp_path, "config.json", **fields)
    code = in_a_thread(planner_cli.main, ["fit", "--model", path, "--instance", "g6e.12xlarge"])
    check_one_line(capsys, code, needles)


def test_a_config_json_that_is_not_text_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "weights.json"
    path.write_bytes(b"\xff\xfe\x00binary")
    argv = ["fit", "--model", str(path), "--instance", "g6e.12xlarge"]
    code = in_a_thread(planner_cli.main, argv)
    check_one_line(capsys, code, ("--model", "UTF-8"))


# ----- traces ----------------------------------------------------------------------------------
TRACE_CASES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "NaN timestamp": ("t.csv", "timestamp,input_tokens,output_tokens\nnan,10,5\n", ("row 2",)),
    "a trillion tokens": ("t.csv", "timestamp,input_tokens,output_tokens\n1,1e12,5\n", ("1e12",)),
    "hash ids of text": (
        "t.jsonl",
        '{"timestamp": 1, "input_length": 9, "output_length": 2, "hash_ids": ["a"]}\n',
        ("hash_ids",),
    ),
    "a row too short": ("t.csv", "timestamp,input_tokens,output_tokens\n1,2\n", ("row 2",)),
}


@pytest.mark.parametrize("case", list(TRACE_CASES))
def test_a_bad_trace_names_the_file_row_and_field(case: str, tmp_path: Path) -> None:
    name, text, needles = TRACE_CASES[case]
    path = tmp_path / "upload-7f3a"
    path.write_text(text)
    with pytest.raises(InvalidInputError) as caught:
        load_trace(path, "mooncake" if name.endswith(".jsonl") else "csv", name=name)
    message = str(caught.value)
    assert name in message and "upload-7f3a" not in message  # the user's file, not where saved
    for needle in needles:
        assert needle in message


def test_a_trace_larger_than_the_setting_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n" + "1,2,3\n" * 200_000)
    with pytest.raises(InvalidInputError, match="SERVEWISE_MAX_TRACE_MB"):
        load_trace(path, max_mb=1.0)
    assert load_trace(path).num_requests == 200_000  # the default limit reads it, streamed


def test_the_runner_streams_only_the_requests_it_sends(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"  # three good rows, then garbage that is never read
    path.write_text("timestamp,input_tokens,output_tokens\n0,8,2\n1,8,2\n2,8,2\nabc,x,y\n")
    assert len(runner_load_trace(path, "csv", max_requests=3)) == 3
    with pytest.raises(TraceFormatError, match="row"):
        runner_load_trace(path, "csv")


# ----- python -m benchmarks_runner --------------------------------------------------------------
RUN = ["run", "--model", "m", "--input-len", "8", "--output-len", "4", "--num-requests", "4"]
RUNNER_CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "port out of range": (
        [*RUN, "--base-url", "http://[::1]:99999", "--concurrency", "1"],
        ("99999",),
    ),
    "not http": ([*RUN, "--base-url", "ftp://host", "--concurrency", "1"], ("ftp://host",)),
    "no host": ([*RUN, "--base-url", "http://:8000", "--concurrency", "1"], ("host is missing",)),
    "a space in the host": (
        [*RUN, "--base-url", "http://ho st", "--concurrency", "1"],
        ("no spaces",),
    ),
    "negative concurrency": (
        [*RUN, "--base-url", DEAD, "--concurrency", "-2"],
        ("--concurrency=-2",),
    ),
    "NaN rate": ([*RUN, "--base-url", DEAD, "--request-rate", "nan"], ("--request-rate=nan",)),
    "zero burstiness": (
        [*RUN, "--base-url", DEAD, "--request-rate", "1", "--burstiness", "0"],
        ("--burstiness=0",),
    ),
    "negative warm-up": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--warmup", "-1"],
        ("--warmup=-1",),
    ),
    "infinite duration": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--duration-s", "inf"],
        ("--duration-s=inf",),
    ),
    "temperature 11": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--temperature", "11"],
        ("--temperature=11",),
    ),
    "a percentile of text": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--percentiles", "50,abc"],
        ("--percentiles", "50,abc"),
    ),
    "the 100th percentile": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--percentiles", "100"],
        ("percentiles=100",),
    ),
    "a negative SLO": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--goodput", "ttft:-5"],
        ("--goodput=ttft:-5",),
    ),
    "an unknown SLO": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--goodput", "latency:10"],
        ("--goodput=latency:10", "ttft, tpot, e2el"),
    ),
    "a body that is not JSON": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--extra-body", "{bad"],
        ("--extra-body",),
    ),
    "a header without a value": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--header", "NOEQUALS"],
        ("--header", "NOEQUALS"),
    ),
    "zero requests": (
        [
            "run",
            "--base-url",
            DEAD,
            "--model",
            "m",
            "--input-len",
            "8",
            "--output-len",
            "4",
            "--num-requests",
            "0",
            "--concurrency",
            "1",
        ],
        ("--num-requests=0",),
    ),
    "a fractional output length": (
        [
            "run",
            "--base-url",
            DEAD,
            "--model",
            "m",
            "--input-len",
            "8",
            "--output-len",
            "1.5",
            "--num-requests",
            "2",
            "--concurrency",
            "1",
        ],
        ("--output-len=1.5",),
    ),
    "a negative spread": (
        [
            *RUN,
            "--base-url",
            DEAD,
            "--concurrency",
            "1",
            "--input-dist",
            "normal",
            "--input-spread",
            "-3",
        ],
        ("--input-spread", "-3"),
    ),
    "a failed share over 1": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--max-failed-share", "1.01"],
        ("--max-failed-share=1.01",),
    ),
    "an unset key variable": (
        [*RUN, "--base-url", DEAD, "--concurrency", "1", "--api-key-env", "SW_NO_SUCH_VAR"],
        ("SW_NO_SUCH_VAR", "unset"),
    ),
    "URL credentials and a key": (
        [
            *RUN,
            "--base-url",
            "http://u:pw@127.0.0.1:9",
            "--concurrency",
            "1",
            "--api-key-env",
            "HOME",
        ],
        ("--base-url", "only one"),
    ),
    "sweep of text": (
        [
            "sweep",
            "--base-url",
            DEAD,
            "--model",
            "m",
            "--input-len",
            "8",
            "--output-len",
            "4",
            "--num-requests",
            "2",
            "--sweep-concurrency",
            "1,x",
        ],
        ("--sweep-concurrency", "1,x"),
    ),
    "search attainment of 2": (
        [
            "search",
            "--base-url",
            DEAD,
            "--model",
            "m",
            "--input-len",
            "8",
            "--output-len",
            "4",
            "--num-requests",
            "2",
            "--goodput",
            "ttft:100",
            "--attainment",
            "2",
        ],
        ("--attainment=2",),
    ),
    "import of a missing file": (
        ["import", "--format", "vllm", "/nonexistent/r.json"],
        ("r.json",),
    ),
    "diagnose a bad URL": (["diagnose", "--base-url", "http//host"], ("--base-url", "http//host")),
    "diagnose a negative duration": (
        ["diagnose", "--base-url", DEAD, "--duration", "-5"],
        ("--duration=-5",),
    ),
}


@pytest.mark.parametrize("case", list(RUNNER_CASES))
def test_runner_command_line(
    case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SW_NO_SUCH_VAR", raising=False)
    argv, needles = RUNNER_CASES[case]
    if argv[0] in ("run", "sweep", "search", "import"):
        argv = [*argv, "--runs-dir", str(tmp_path / "runs")]
    check_one_line(capsys, in_a_thread(runner_cli.main, argv), needles)


GARBAGE_IMPORTS: dict[str, tuple[str, bytes]] = {
    "vllm: a count in words": ("vllm", json.dumps({"completed": "ten", "duration": 12.0}).encode()),
    "vllm: a negative duration": (
        "vllm",
        json.dumps({"completed": 3, "num_prompts": 3, "duration": -3.0}).encode(),
    ),
    "vllm: cut off mid-file": ("vllm", b'{"completed": 3, "duration": 1.5, "ttfts": [0.1, 0.'),
    "guidellm: a negative duration": (
        "guidellm",
        json.dumps({"benchmarks": [{"duration": -1}]}).encode(),
    ),
    "guidellm: binary": ("guidellm", bytes(range(256)) * 4),
    "aiperf: a list": ("aiperf", json.dumps(["not", "an", "object"]).encode()),
}


@pytest.mark.parametrize("case", list(GARBAGE_IMPORTS))
def test_a_garbage_result_file_is_not_imported(
    case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fmt, content = GARBAGE_IMPORTS[case]
    path = tmp_path / f"{fmt}.json"
    path.write_bytes(content)
    runs = tmp_path / "runs"
    argv = ["import", "--format", fmt, str(path), "--runs-dir", str(runs)]
    code = in_a_thread(runner_cli.main, argv)
    check_one_line(capsys, code, (f"{fmt}.json",))
    assert not any((d / "run.json").is_file() for d in runs.glob("*"))  # no garbage run


def test_the_endpoint_is_checked_before_a_trace_is_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = tmp_path / "huge.csv"  # would be refused as malformed if it were read first
    trace.write_text("timestamp,input_tokens,output_tokens\n" + "x,y,z\n" * 1000)
    argv = ["run", "--base-url", DEAD, "--model", "m", "--concurrency", "1", "--trace",
            str(trace), "--trace-format", "csv", "--runs-dir", str(tmp_path / "runs")]  # fmt: skip
    code = in_a_thread(runner_cli.main, argv)
    line = check_one_line(capsys, code, ("cannot reach", "127.0.0.1:9"))
    assert "huge.csv" not in line


SIMULATED_CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "port 70000": (["--port", "70000"], ("--port=70000", "65,535")),
    "error rate of 2": (["--error-rate", "2"], ("--error-rate=2",)),
    "negative time to first token": (["--ttft-ms", "-5"], ("--ttft-ms=-5",)),
    "status 200 as an error": (["--error-status", "200"], ("--error-status=200", "400 to 599")),
    "zero tokens a chunk": (["--tokens-per-chunk", "0"], ("--tokens-per-chunk=0",)),
    "TP of 0": (["--gpu", "H100-SXM", "--tp", "0"], ("--tp=0",)),
    "an unknown precision": (["--precision", "fp2"], ("fp2",)),
    "an unknown GPU": (["--gpu", "TPU-v5", "--model", LLAMA_8B], ("TPU-v5", "one of")),
    "an address that is no host": (["--host", "300.1.2.3"], ("--host 300.1.2.3",)),
}


@pytest.mark.parametrize("case", list(SIMULATED_CASES))
def test_simulated_server_command_line(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv, needles = SIMULATED_CASES[case]
    check_one_line(capsys, in_a_thread(simulated_cli.main, argv), needles)


def test_the_simulated_servers_precisions_are_the_catalogs() -> None:
    assert simulated_cli.PRECISIONS == PRECISIONS


@pytest.mark.parametrize(
    ("module", "argv", "needle"),
    [
        (
            "planner",
            ["fit", "--model", LLAMA_8B, "--instance", "g6e.12xlarge", "--tp", "x"],
            "--tp=x",
        ),
        ("benchmarks_runner", ["run", "--base-url", "http://[::1", "--model", "m"], "[::1"),
        ("benchmarks_runner.simulated", ["--stall-rate", "-1"], "--stall-rate=-1"),
    ],
)
def test_the_entry_points_themselves(module: str, argv: list[str], needle: str) -> None:
    proc = run_cli(module, *argv, timeout_s=120)
    no_traceback(proc)
    assert proc.returncode == 2 and needle in proc.stderr


# ----- pages -------------------------------------------------------------------------------------
#: Sidebar parameters of a link, each invalid in its own way, and what the notice must name.
BAD_LINK = {
    "model": "acme/not-a-model",
    "in_shape": "cauchy",
    "in_mean": "0",
    "out_spread": "-64",
    "load": "burst",
    "avg_concurrency": "nan",
    "peak_concurrency": "-3",
    "ttft_ms": "soon",
    "tpot_ms": "99999999",
    "precision": ["bf16", "fp3"],
    "providers": ["awz"],
    "pricing": "free",
    "util_manual": "maybe",
    "util": "7000",
}


def notices(at: AppTest) -> str:
    """The page's warnings as read: a quoted value is shown as text (``md_text`` puts a
    backslash before what Markdown would turn into a link or markup), here without them."""
    return " ".join(w.value for w in at.warning).replace("\\", "")


def test_a_link_with_bad_values_says_what_it_used_instead(app: Callable[..., AppTest]) -> None:
    at = app("pages/data.py", **BAD_LINK)  # the sidebar is the same on every page
    assert not at.exception and not at.error, [e.value for e in at.error]
    shown = notices(at)
    for param, value in BAD_LINK.items():
        sent = ",".join(value) if isinstance(value, list) else value
        assert f"URL parameter {param}={sent} is not allowed" in shown, (param, shown)
    assert "using meta-llama/Llama-3.1-70B-Instruct instead" in shown
    at.run()  # the notices stay while the values they name are the ones used
    assert notices(at) == shown
    at.number_input(key="in_mean").set_value(1024).run()
    assert "in_mean" not in notices(at) and "out_spread" in notices(at)


def test_the_verify_pages_bad_link_and_fields(app: Callable[..., AppTest]) -> None:
    link = {
        "model": LLAMA_8B,
        "vf_source": "Custom",
        "vf_gpu": "TPU-v5",
        "vf_tp": "0",
        "vf_precision": "fp3",
        "vf_load": "burst",
        "vf_c": "-1",
        "vf_n": "abc",
        "vf_endpoint": "URL",
        "vf_url": "http://[::1",
    }
    at = app("pages/verify.py", **link)
    assert not at.exception and not at.error, [e.value for e in at.error]
    shown = notices(at)
    for param in ("vf_gpu", "vf_tp", "vf_precision", "vf_load", "vf_c", "vf_n"):
        assert f"URL parameter {param}={link[param]} is not allowed" in shown, (param, shown)
    assert "Base URL='http://[::1' is not allowed" in shown and at.button(key="vf_run").disabled
    at.text_input(key="vf_url").set_value("localhost:8000").run()
    assert "Base URL='localhost:8000' is not allowed" in notices(at)
    assert at.button(key="vf_run").disabled and not at.error


UPLOADS = {
    "a 3,000,000-layer config": (
        "deep.json",
        json.dumps({**LLAMA_CONFIG, "num_hidden_layers": 3_000_000}).encode(),
        ("num_hidden_layers", "3,000,000", "at most 1,024"),
    ),
    "a config of the wrong encoding": (
        "config.json",
        "{}".encode("utf-16"),
        ("config.json",),
    ),
    "a config larger than the setting": (
        "config.json",
        b'{"pad": "' + b"x" * 5_100_000 + b'"}',
        ("SERVEWISE_MAX_UPLOAD_MB",),
    ),
}


@pytest.mark.parametrize("case", list(UPLOADS))
def test_a_bad_config_upload_is_a_notice(app: Callable[..., AppTest], case: str) -> None:
    name, data, needles = UPLOADS[case]
    at = app("pages/data.py")  # the sidebar's uploader, on the page that computes least
    at.file_uploader(key="model_upload").upload(name, data, "application/json")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    shown = notices(at)
    for needle in needles:
        assert needle in shown, (needle, shown)


def test_a_catalog_csv_larger_than_the_setting_is_refused(app: Callable[..., AppTest]) -> None:
    at = app("pages/data.py")
    rows = "".join(f"aws,x{i}.large,us-east-1,on_demand,1.0,me,2026-01-01\n" for i in range(95_000))
    data = ("provider,instance,region,pricing,usd_per_hour,source,as_of\n" + rows).encode()
    assert len(data) > 5e6
    at.selectbox(key="data_table").set_value("prices").run()
    at.file_uploader(key="csv_upload").upload("prices.csv", data, "text/csv")
    at.run()
    assert not at.exception and not at.error
    assert "SERVEWISE_MAX_UPLOAD_MB" in notices(at)
    assert not any("replaced" in s.value for s in at.success)


def _poison(runs: Path) -> list[str]:
    """Three bad runs next to good ones: a non-number, a run.json that is no JSON, binary junk."""
    bad = []
    for i, (name, content) in enumerate(
        [
            ("requests.jsonl", b'{"request_id": "r", "request_index": 0, "start_s": "abc"}\n'),
            ("run.json", b"{not json"),
            ("requests.jsonl", base64.b64decode("AAECAwQFBgcICQ==") * 50),
        ]
    ):
        run_dir = runs / f"20261201T00000{i}Z-bad{i:03d}"
        run_dir.mkdir(parents=True)
        if name != "run.json":
            (run_dir / "run.json").write_text(
                json.dumps({"run_id": run_dir.name, "status": "completed"})
            )
        (run_dir / name).write_bytes(content)
        bad.append(run_dir.name)
    return bad


def test_a_poisoned_runs_folder_leaves_every_page_working_and_lists_the_bad_runs(
    app: Callable[..., AppTest], _isolated_user_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _poison(_isolated_user_dir / "runs")
    code = in_a_thread(planner_cli.main, ["store", "check"])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err
    for name in bad:
        assert name in out, (name, out)
    at = app()
    for page in ("plan", "gpu_economics", "kv_cache", "cost", "benchmarks", "verify", "data"):
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception and not at.error, (page, [e.value for e in at.error])
        if page in ("benchmarks", "data"):
            listed = " ".join(str(d.value.to_dict()) for d in at.dataframe) + notices(at)
            assert all(name in listed for name in bad), (page, bad)


def test_the_diagnose_pages_endpoint_field(app: Callable[..., AppTest]) -> None:
    link = {"dg_source": "Endpoint", "dg_url": "http://diag-user:diagPASS-3b@127.0.0.1:9"}
    at = app("pages/diagnose.py", **link)
    assert at.text_input(key="dg_url").value == "http://127.0.0.1:9"  # user info dropped
    assert "diagPASS-3b" not in str(at.query_params)
    at.text_input(key="dg_url").set_value("http://h:0").run()
    assert "Base URL='http://h:0' is not allowed" in notices(at)
    assert at.button(key="dg_watch").disabled and not at.error and not at.exception
    at.text_input(key="dg_url").set_value("http://diag-user:diagPASS-3b@127.0.0.1:9").run()
    assert "diagPASS-3b" not in str(at.query_params)
    at.button(key="dg_watch").click().run()  # nothing listens: a notice, not an error box
    assert any("Cannot watch http://127.0.0.1:9" in w for w in notices(at).split("\n"))
    assert not at.error and not at.exception and "diagPASS-3b" not in notices(at)
