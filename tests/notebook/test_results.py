import json
import os

import pytest

from helpers.notebook import display, results


def test_record_ok_and_failed_rows_and_atomic_save(tmp_path, capsys):
    r = results.Results("nb", "smoke", {"python": "3", "torch": "t", "device": "cpu", "cpu_count": 2}, root=tmp_path)
    r.record("good", {"bs": 2}, lambda: {"step_ms_median": 1.5})

    def boom():
        raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")

    row = r.record("bad", {"bs": 4096}, boom)
    assert row["status"] == "failed" and row["error"].startswith("out of memory")
    assert "[failed] bad" in capsys.readouterr().out
    r.record("after", {}, lambda: {"x": 1})  # the run goes on
    r.check("claim_holds", 1 == 1, "one equals one")
    with pytest.raises(ValueError, match="id"):
        r.check("a sentence, not an id", True)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["checks"] == {"claim_holds": True} and doc["claims"] == {"claim_holds": "one equals one"}
    assert [e["name"] for e in doc["experiments"]] == ["good", "bad", "after"]
    assert results.validate(doc) == []
    assert not list(tmp_path.glob(".*.tmp"))
    t = r.table()
    assert list(t["status"]) == ["ok", "failed", "ok"]


def test_validate_finds_problems():
    assert "the document lacks 'checks'" in results.validate({"notebook": 1, "scale": "smoke", "env": {}, "experiments": []})
    doc = {"notebook": "n", "scale": "tiny", "env": {}, "experiments": [{"name": "a", "config": {}, "metrics": {},
           "status": "failed", "error": None}], "checks": {"c": "yes"}}
    probs = results.validate(doc)
    assert any("scale" in p for p in probs)
    assert any("without an error" in p for p in probs)
    assert any("not a boolean" in p for p in probs)
    assert any("not an id" in p for p in results.validate({**doc, "checks": {"A claim": True}}))
    assert any("has no claim" in p for p in results.validate({**doc, "checks": {"an_id": True}}))
    assert any("env lacks" in p for p in probs)


def test_bad_status_refused(tmp_path):
    r = results.Results("nb", "smoke", root=tmp_path)
    with pytest.raises(ValueError):
        r.add("x", {}, status="maybe")


def test_load_missing_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="make run"):
        results.load("nope", root=tmp_path)


def test_nan_and_tensors_serialise(tmp_path):
    import torch

    r = results.Results("nb", "smoke", root=tmp_path)
    r.add("x", {"t": torch.tensor(2)}, {"nan": float("nan"), "v": torch.tensor(1.5)})
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["experiments"][0]["metrics"] == {"nan": None, "v": 1.5}
    assert doc["experiments"][0]["config"] == {"t": 2}


def test_readable_table_integers_units_and_failed_rows_last():
    import pandas as pd

    df = pd.DataFrame([
        {"experiment": "a", "num_workers": 1.0, "batch_size": 8.0, "step_ms_median": 3.25, "samples_per_s": 100.5,
         "peak_mem_mb": None, "status": "failed", "error": "boom"},
        {"experiment": "b", "num_workers": None, "batch_size": 16.0, "step_ms_median": 2.0, "samples_per_s": 200.0,
         "peak_mem_mb": 12.5, "status": "ok", "error": ""},
    ])
    out = display.readable(df)
    assert list(out["experiment"]) == ["b", "a"]  # failed rows after the others
    assert str(out["num workers"].dtype) == "Int64" and out["batch size"].tolist() == [16, 8]
    assert "step median (ms)" in out and "samples/s" in out and "peak mem (MB)" in out
    assert out["step median (ms)"].tolist() == [2.0, 3.25]  # non-integer floats stay floats
    assert "error" in out  # kept: one row has a message
    assert "error" not in display.readable(df[df["status"] == "ok"])
    assert list(df.columns)[3] == "step_ms_median"  # the input is untouched
    assert display.header("step_ms_p25") == "step p25 (ms)" and display.header("compile_s") == "compile (s)"


def test_comparisons_are_kept_in_results_json(tmp_path):
    r = results.Results("nb", "smoke", {"python": "3", "torch": "2", "device": "cpu", "cpu_count": 2}, root=tmp_path)
    r.add("x", {}, {"step_ms_median": 1.0})
    c = r.compare_times("eager", "compiled", [10, 11, 10, 11, 10], [8, 8.5, 8, 8.5, 8])
    assert c["verdict"] == "faster" and r.comparison("eager", "compiled") == c
    r.compare_times("eager", "compiled", [10, 11, 10, 11, 10], [8, 8.5, 8, 8.5, 8.1])   # measured again: replaces
    import json

    doc = json.loads((tmp_path / "results.json").read_text())
    assert len(doc["comparisons"]) == 1 and not results.validate(doc)
    doc["comparisons"][0]["verdict"] = "quicker"
    assert any("verdict" in p for p in results.validate(doc))
    doc["comparisons"][0].update(verdict="faster", ratio=9.0)
    assert any("outside its interval" in p for p in results.validate(doc))
    doc["comparisons"][0].update(ratio=1.2, samples={"a": [10, 11], "b": [8]})
    assert any("samples kept" in p for p in results.validate(doc))
    del doc["comparisons"][0]["samples"], doc["comparisons"][0]["floor_from"]
    assert any("keeps no samples" in p for p in results.validate(doc))
    assert any("noise floor" in p for p in results.validate(doc))
    table = r.comparisons_table()   # one convention: b takes (b / a)x a's figure
    assert list(table.columns) == ["b", "a", "metric", "b / a", "interval", "floor", "verdict"]
    assert table["b / a"].iloc[0] == round(1 / r.comparisons[0]["ratio"], 3)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_writes_follow_the_umask(tmp_path, umask):
    """results.json (and run.json, the executed copies) get 0666 less the umask, as open() would: not mkstemp's 0600."""
    old = os.umask(umask)
    try:
        results.atomic_write_text(tmp_path / "a.json", "{}\n")
        assert results.current_umask() == umask
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "a.json").read_text() == "{}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]  # no temporary file left


def test_ok_line_shows_the_mean_the_verdicts_use(tmp_path, capsys):
    """Issue 33: the `[ok]` line printed the median beside verdicts on means."""
    r = results.Results("nb", "smoke", root=tmp_path)
    r.record("good", {}, lambda: {"step_ms_mean": 12.345, "step_ms_median": 9.0})
    r.record("plain", {}, lambda: {"x": 1})
    out = capsys.readouterr().out
    assert "[ok] good (mean step 12.35 ms)" in out and "median" not in out and "[ok] plain\n" in out
