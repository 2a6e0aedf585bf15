"""bench/bench10.py render: the 1e10/1e8 ratio and its base's repeats."""

import importlib.util
import json
import os
from conftest import REPO


def _script(name: str):
    """The script bench/<name>.py, loaded as a module."""
    path = os.path.join(REPO, "bench", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bench10():
    return _script("bench10")


def _run(ns: float) -> dict:
    return {"machine": {"cpu": "Test CPU (family 6 model 1)", "cores": 2, "numpy": "2.4.6",
                        "numpy_simd": {"baseline": ["X86_V2"], "found": ["X86_V3"],
                                       "not_found": []}},
            "params": {"batch": 10, "run_format": 1}, "verified": True, "store_s": 1.0,
            "offered": 100, "bytes_read": 0, "bytes_written": 800, "disk_bytes_per_key": 8.0,
            "peak_rss_bytes": 2**30, "batches": [], "ns_per_key": {"store_total": ns}}


def _save(logs, name, r):
    with open(os.path.join(logs, name + ".json"), "w") as f:
        json.dump(r, f)
    with open(os.path.join(logs, name + ".txt"), "w") as f:
        f.write(f"log of {name}\n")


def test_the_ratio_takes_the_median_of_the_base_and_its_repeats(tmp_path):
    b10 = _bench10()
    logs = str(tmp_path)
    _save(logs, "bench10-1e8", _run(30.0))
    _save(logs, "bench10-1e10", _run(54.0))
    _save(logs, "bench10rep-1e8-1", _run(25.0))
    _save(logs, "bench10rep-1e8-2", _run(27.0))
    text = b10.render(logs)
    assert "30.0, 25.0, 27.0 ns/key" in text and "median 27.0" in text
    assert "**2.00x**" in text and "1.80x, 2.16x, 2.00x" in text
    assert "log of bench10rep" not in text  # repeats are summed up, not printed whole
    assert text.count("Machine: Test CPU (family 6 model 1), 2 cores; numpy 2.4.6") == 1


def test_without_repeats_the_ratio_is_against_the_one_base_run(tmp_path):
    b10 = _bench10()
    logs = str(tmp_path)
    _save(logs, "bench10-1e8", _run(25.0))
    _save(logs, "bench10-1e10", _run(60.0))
    assert "**2.40x**" in b10.render(logs)


def test_splice_replaces_only_its_own_section(tmp_path):
    """bench/splice.py (run_all.sh's sections): the text between a section's markers is
    replaced, every other line kept; a section without markers is appended; and
    bench10.py's splice goes through it."""
    results = tmp_path / "RESULTS.md"
    results.write_text("# t\n\n<!-- a -->\nold a\n<!-- /a -->\n\nby hand\n\n"
                       "<!-- b -->\nold b\n<!-- /b -->\n")
    section = tmp_path / "s.md"
    section.write_text("new a\nline 2\n")
    mod = _script("splice")
    mod.splice("a", str(section), str(results))
    assert results.read_text() == ("# t\n\n<!-- a -->\nnew a\nline 2\n<!-- /a -->\n\nby hand\n\n"
                                   "<!-- b -->\nold b\n<!-- /b -->\n")
    section.write_text("ten\n")
    _bench10().splice(str(section), str(results))
    assert results.read_text().endswith("<!-- /b -->\n\n<!-- bench10 -->\nten\n<!-- /bench10 -->\n")
    assert "by hand" in results.read_text() and "new a" in results.read_text()
