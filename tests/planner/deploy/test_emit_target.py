"""``planner recommend --emit TARGET DIR`` writes only into a new or empty folder unless
``--force``: an emit into a repository's root replaced its README.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.cli import main
from planner.deploy import check_target_folder, write_bundle
from planner.errors import InvalidInputError

ARGS = [
    "recommend", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--input-len", "512",
    "--output-len", "128", "--concurrency", "4", "--instance", "g6e.xlarge", "--max-nodes", "1",
]  # fmt: skip


@pytest.mark.parametrize("target", ["docker", "k8s", "skypilot"])
def test_an_emit_into_a_folder_that_holds_files_is_refused_before_the_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# my project\n", encoding="utf-8")
    assert main([*ARGS, "--emit", target, str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "searching" not in err  # refused at once
    assert f"--emit DIR='{tmp_path}' is not allowed" in err and "README.md" in err
    assert "--force" in err
    assert readme.read_text(encoding="utf-8") == "# my project\n"


def test_force_writes_into_a_folder_and_a_file_is_never_a_folder(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# mine\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"README\.md"):
        write_bundle({"README.md": "deploy"}, tmp_path)
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == "# mine\n"
    assert write_bundle({"README.md": "deploy"}, tmp_path, force=True)
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == "deploy"
    check_target_folder(tmp_path / "new")  # a new folder is fine
    (tmp_path / "empty").mkdir()
    check_target_folder(tmp_path / "empty")
    with pytest.raises(InvalidInputError, match="a folder"):
        check_target_folder(tmp_path / "README.md", force=True)
