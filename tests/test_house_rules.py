"""The repository's own rules for readers: the README stays a user guide, every hand-written
source file stays small enough to read as one job, and the product states rules and reasons
instead of referring to a tracker the reader cannot see."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAX_SOURCE_LINES = 800
README_MAX_LINES, README_MAX_WIDTH = 250, 120
# a numbered tracker entry means nothing to a reader of the tree
TRACKER = re.compile(r"issue [0-9]+|item [0-9]+ of", re.IGNORECASE)


def tracked(*paths: str) -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", *paths], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [REPO / p for p in out.splitlines() if (REPO / p).is_file()]


def test_readme_is_a_short_user_guide():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    wide = [i + 1 for i, line in enumerate(lines) if len(line) > README_MAX_WIDTH]
    assert not wide, f"README.md lines over {README_MAX_WIDTH} characters: {wide}"


def test_hand_written_sources_stay_under_the_line_limit():
    over = {}
    for p in tracked("src", "csrc"):
        if p.suffix not in {".py", ".c", ".h", ".S", ".s"}:
            continue
        n = len(p.read_bytes().splitlines())
        if n > MAX_SOURCE_LINES:
            over[str(p.relative_to(REPO))] = n
    assert not over, f"files over {MAX_SOURCE_LINES} lines (split them by job): {over}"


def test_no_tracker_references_in_the_product():
    hits = []
    for p in tracked("README.md", "docs", "src", "csrc", "tests", "benchmarks", "scripts"):
        if p.suffix in {".json", ".png", ".bin", ".gguf"}:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for i, line in enumerate(text.splitlines()):
            if TRACKER.search(line):
                hits.append(f"{p.relative_to(REPO)}:{i + 1}")
    assert not hits, f"state the rule or the reason instead: {hits[:20]}"


def test_license_files_travel_with_the_code_and_the_model():
    assert "MIT License" in (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "MIT License" in (REPO / "models/stories260K/LICENSE").read_text(encoding="utf-8")
