"""The GitHub workflows that regenerate the numbers on real hardware (.github/workflows/) pass
two linters from PyPI: check-jsonschema against its vendored GitHub workflow schema, and
zizmor (offline) for the usual workflow mistakes; and they run what the README says they run.
They have not run on GitHub yet: this is all that can be checked here."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return path


def _schema(path) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("check-jsonschema"), "--builtin-schema",
                           "vendor.github-workflows", str(path)], capture_output=True, text=True)


def test_there_are_workflows():
    assert [p.name for p in WORKFLOWS] == ["hardware.yml"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_githubs_schema(path):
    r = _schema(path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_has_no_zizmor_findings(path):
    r = subprocess.run([_tool("zizmor"), "--offline", str(path)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_linters_catch_a_broken_workflow(tmp_path):
    """A workflow with a misspelled key fails the schema, and one that checks out with
    persisted credentials and an unpinned action gets zizmor findings: the checks can fail."""
    text = (REPO / ".github" / "workflows" / "hardware.yml").read_text()
    bad = tmp_path / "bad.yml"
    bad.write_text(text.replace("runs-on:", "runs_on:"))
    assert _schema(bad).returncode != 0
    risky = tmp_path / "risky.yml"
    risky.write_text(text.replace("persist-credentials: false", "persist-credentials: true")
                     .replace("actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683",
                              "actions/checkout@main"))
    r = subprocess.run([_tool("zizmor"), "--offline", str(risky)], capture_output=True,
                       text=True)
    assert r.returncode != 0


def test_the_hardware_workflow_runs_tests_and_benchmarks_on_arm64_macos_and_x86():
    text = (REPO / ".github" / "workflows" / "hardware.yml").read_text()
    for runner in ("ubuntu-24.04-arm", "macos-14", "ubuntu-24.04"):
        assert f"os: {runner}\n" in text, runner
    for step in ("bash scripts/setup.sh", "python3 -m pytest -q", "isaforge bench kernels",
                 "isaforge bench -p 512 -n 128", "actions/upload-artifact@"):
        assert step in text, step
