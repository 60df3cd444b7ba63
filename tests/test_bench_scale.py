"""benchmarks/scale.py's results rendered: the table on each machine's results page (every
figure, isaforge / llama.cpp), the README block (the largest thread count), the command that
regenerates them, and which file the README's block comes from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from isaforge.bench.results import load, readme_source, update_pages
from isaforge.bench.scale import bench_tests, readme_scale_block, regen_command, scale_table

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def summary(k: float) -> dict:
    pair = lambda i, lc: {"isaforge": i, "llama.cpp": lc, "ratio": None}  # noqa: E731
    return {"start_warm_first_token_s": pair(2.5 * k, 1.25),
            "start_peak_rss_mib": pair(2000.4, 1000),
            "pp_tps_1t": pair(100.0, 50.0), "pp_tps_2t": pair(190.0, 95.0),
            "tg_tps_1t": pair(10.0, 8.0), "tg_tps_2t": pair(20.0, 16.0),
            "depth_tg_tps_2t": pair(12.5, None),
            "tg_fraction_of_bandwidth_1t": {"isaforge": 1.0, "llama.cpp": 0.4},
            "tg_fraction_of_bandwidth_2t": {"isaforge": 0.8, "llama.cpp": 0.32}}


def doc(created: str = "2026-01-01T00:00:00+00:00") -> dict:
    rows = [{"size": "1b", "model": "Llama-3.2-1B shapes", "type": t, "threads": [1, 2],
             "reps": 3, "weight_bytes_per_token": {"isaforge": 1.5e9, "llama.cpp": 1e9},
             "stream_gbps": {"1": [14.0, 15.0], "2": [30.0]}, "summary": summary(k)}
            for t, k in (("q4_k_m", 4), ("q8_0", 1))]
    return {"provenance": {"command": "python3 benchmarks/scale.py --sizes 1b --reps 3 "
                           "--conditions 'a shared VM' --out /tmp/x.json", "created": created,
                           "conditions": "a shared VM"},
            "machine": {"cpu": "Some CPU", "logical_cores": 2},
            "method": {"speed": "pp256 and tg64 from an empty context; at the largest thread "
                                "count tg64 after a 2048-token context"},
            "rows": rows}


def test_the_docs_table_has_every_figure_of_a_row():
    lines = scale_table(doc())
    assert lines[0] == ("| model | type | start to first token s | peak RSS MiB | pp256 t/s, 1 thr "
                        "| pp256 t/s, 2 thr | tg64 t/s, 1 thr | tg64 t/s, 2 thr | tg64 t/s at "
                        "2048, 2 thr | decode GB/s (% of read bw), 1 thr | decode GB/s (% of "
                        "read bw), 2 thr |")
    # decode GB/s = t/s x each engine's own bytes per token: 10 x 1.5 GB, 8 x 1 GB at 1 thread
    assert lines[3] == ("| Llama-3.2-1B | Q8_0 | 2.50 / 1.25 | 2000 / 1000 | 100.0 / 50.0 | "
                        "190.0 / 95.0 | 10.00 / 8.00 | 20.00 / 16.00 | 12.50 / - | "
                        "15.0 (100%) / 8.0 (40%) | 30.0 (80%) / 16.0 (32%) |")
    assert lines[2].startswith("| Llama-3.2-1B | Q4_K_M | 10.00 / 1.25 |")


def test_the_readme_block_shows_the_largest_thread_count_and_the_command():
    text = readme_scale_block("m-avx", doc(), 110)
    assert "| Llama-3.2-1B | Q8_0 | 2.50 / 1.25 | 2000 / 1000 | 190.0 / 95.0 | 20.00 / 16.00 | " \
           "12.50 / - | 80 / 32 |" in text
    assert "`m-avx` (Some CPU, 2 cores; a shared VM, timings noisy), 2 threads" in " ".join(
        text.split())
    assert "benchmarks/results/m-avx/scale.json" in text
    assert "`python3 benchmarks/scale.py --sizes 1b --reps 3`, then `isaforge bench report " \
           "--update-readme`" in " ".join(text.split())
    assert all(len(line) <= 120 for line in text.splitlines())


def test_regen_command_and_tests_come_from_the_file():
    assert regen_command(doc()) == "python3 benchmarks/scale.py --sizes 1b --reps 3"
    assert bench_tests(doc()) == ("pp256", "tg64", 2048)
    assert bench_tests({"rows": []}) == ("pp512", "tg128", 4096)


def tree(tmp_path: Path, with_scale: bool) -> Path:
    (tmp_path / "docs").mkdir(parents=True)
    (tmp_path / "README.md").write_text("<!-- bench:begin -->\n<!-- bench:end -->\n")
    (tmp_path / "docs" / "performance.md").write_text(
        "<!-- results:begin -->\n<!-- results:end -->\n")
    shutil.copytree(RESULTS, tmp_path / "benchmarks" / "results")
    for f in (tmp_path / "benchmarks" / "results").glob("*/scale.json"):
        f.unlink()
    if with_scale:
        d = tmp_path / "benchmarks" / "results" / "zz-new"
        d.mkdir()
        (d / "scale.json").write_text(json.dumps(doc("2099-01-01T00:00:00+00:00")))
    return tmp_path


def test_the_readme_block_comes_from_scale_results_where_a_machine_has_them(tmp_path):
    root = tree(tmp_path / "a", with_scale=True)


    assert readme_source(load(root / "benchmarks" / "results")) == ("zz-new", "scale")
    update_pages(root)
    readme = (root / "README.md").read_text()
    assert "benchmarks/results/zz-new/scale.json" in readme and "SmolLM2" not in readme
    page = (root / "docs" / "performance.md").read_text()
    # the README's machine first in the list of machine pages
    assert page.index("[zz-new](results/zz-new.md)") < page.index("[zen")
    machine = (root / "docs" / "results" / "zz-new.md").read_text()
    assert "## zz-new: Llama 3 sizes against llama.cpp" in machine
    # without any scale.json: the newest e2e.json, as before
    root = tree(tmp_path / "b", with_scale=False)
    src = readme_source(load(root / "benchmarks" / "results"))
    assert src is not None and src[1] == "e2e"
    update_pages(root)
    assert f"benchmarks/results/{src[0]}/e2e.json" in (root / "README.md").read_text()


def test_regen_command_lists_each_rows_command_once():
    """A file keeps rows of earlier runs: the regenerate line names every command that made a
    row, in row order, once each, and the file's last command for rows that name none."""
    d = doc()
    base = d["rows"][0]
    d["rows"] = [dict(base, command="python3 benchmarks/scale.py --sizes 1b --reps 2"),
                 dict(base, command="python3 benchmarks/scale.py --sizes 1b --reps 2"),
                 dict(base, command="python3 benchmarks/scale.py --sizes 8b --only-start "
                                    "--conditions quiet"),
                 dict(base)]
    assert regen_command(d) == ("python3 benchmarks/scale.py --sizes 1b --reps 2; "
                                "python3 benchmarks/scale.py --sizes 8b --only-start; "
                                "python3 benchmarks/scale.py --sizes 1b --reps 3")


def test_regen_command_keeps_disabled_features_and_names_a_second_results_file():
    """A tier-proxy run (features switched off, results in their own file) regenerates with the
    same features off, into the same file name in the machine's folder; --conditions and the
    recorded --out drop out, in either option spelling."""
    d = doc()
    base = d["rows"][0]
    d["rows"] = [dict(base, command="ISAFORGE_DISABLE_FEATURES=avx512f,avx_vnni python3 "
                                    "benchmarks/scale.py --sizes 1b --out "
                                    "benchmarks/results/m/scale_avx2_tier.json --conditions 'a b'"),
                 dict(base, command="python3 benchmarks/scale.py --sizes 3b "
                                    "--out=/tmp/s.json --conditions=quiet")]
    assert regen_command(d, "scale_avx2_tier") == (
        "ISAFORGE_DISABLE_FEATURES=avx512f,avx_vnni python3 benchmarks/scale.py --sizes 1b "
        "--out scale_avx2_tier.json; python3 benchmarks/scale.py --sizes 3b "
        "--out scale_avx2_tier.json")
    assert regen_command(d) == (
        "ISAFORGE_DISABLE_FEATURES=avx512f,avx_vnni python3 benchmarks/scale.py --sizes 1b; "
        "python3 benchmarks/scale.py --sizes 3b")
