"""helpers.lessons.data_pipeline.experiment and views: notebook 02's harness at tiny sizes (structure, never timings).

Rows measured in interleaved rounds over whole worker cycles and divided by the one ceiling, failures as rows,
the profiles and the idle share read from windows in turns, the panel, and the tables and charts of the rows."""
import itertools
import json
import math
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, default_collate
from torchvision.transforms import PILToTensor, RandomCrop

from helpers.lessons.data_pipeline import transforms as pl
from helpers.lessons.data_pipeline import experiment as ex, views
from helpers.measure import compare
from helpers.notebook.results import Results

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "02_data_pipeline.ipynb"


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PERF_RUNS_DIR", str(tmp_path / "runs"))


def tiny_run(variant="crop_first", num_workers=0, steps=2, warmup=0, batch_size=2, train=True, dataset_size=0,
             on_step=None, paths=None, die_at=None, **options):
    """The notebook's ``run`` at tiny sizes: a DataLoader of 32 px crops, a 1 ms stand-in, the same loop shape."""
    if variant == "ceiling":
        batches = itertools.repeat((torch.rand(batch_size, 3, 32, 32), torch.zeros(batch_size, dtype=torch.long)))
    else:
        pl.check_settings(variant, num_workers, batch_size, crop=32, device="cpu")
        ds = pl.ImageDataset(paths or pl.sample_paths(), max(dataset_size, (warmup + steps + 1) * batch_size),
                             pl.Compose([RandomCrop(32), PILToTensor()]), die_at=die_at)
        batches = DataLoader(ds, batch_size=batch_size, num_workers=num_workers, collate_fn=default_collate, **options)
    times, waits, t_prev = [], [], time.perf_counter()
    with pl.worker_errors():
        for x, y in batches:
            t_data = time.perf_counter()
            if train:
                ex.StandIn(1.0)(x, y)
            times.append(1000 * (time.perf_counter() - t_prev))
            waits.append(1000 * (t_data - t_prev))
            t_prev = time.perf_counter()
            if on_step:
                on_step()
            if len(times) == warmup + steps:
                break
    return ex.summarize(times[warmup:], batch_size, times[:warmup], waits[warmup:])


def results(tmp_path):
    return Results("02_data_pipeline", "smoke", root=tmp_path / "results")


def measure(res, rows, rounds=1, **kw):
    ex.measure(res, rows, tiny_run, rounds=rounds, cycles=1, warmup=1, defaults=dict(num_workers=1, batch_size=2, steps=2),
               config=dict(crop=32, stand_in_ms=1.0), **kw)


def row(res, name):
    r = res.get(name)
    assert r is not None, f"no row {name!r}: {[e['name'] for e in res.experiments]}"
    return r


def test_rows_cover_whole_worker_cycles_and_divide_by_the_one_ceiling(tmp_path):
    res = results(tmp_path)
    measure(res, {"ceiling": dict(variant="ceiling", num_workers=0, steps=3)})
    measure(res, {"baseline": dict(variant="crop_first", num_workers=2, steps=3),
                  "pipeline only": dict(variant="crop_first", num_workers=0, steps=3, train=False),
                  "bs 4": dict(variant="crop_first", num_workers=0, batch_size=4)}, rounds=1)
    c, b, p = row(res, "ceiling"), row(res, "baseline"), row(res, "pipeline only")
    assert c["metrics"]["x_ceiling"] == 1.0 and c["metrics"]["ceiling_ms"] == c["metrics"]["step_ms_mean"]
    assert b["config"]["timed_steps"] == 4 and b["config"]["warmup_steps"] == 2 and b["metrics"]["steps_timed"] == 4
    assert b["metrics"]["ceiling_ms"] == c["metrics"]["step_ms_mean"]
    assert b["metrics"]["x_ceiling"] == round(b["metrics"]["step_ms_mean"] / c["metrics"]["step_ms_mean"], 3)
    assert b["config"]["stand_in"] is True and b["config"]["stand_in_ms"] == 1.0 and b["config"]["crop"] == 32
    assert p["config"]["model"] is False and p["config"]["stand_in"] is False and "x_ceiling" not in p["metrics"]
    assert "x_ceiling" not in row(res, "bs 4")["metrics"]          # another batch size: no ceiling of its own
    assert 0 <= b["metrics"]["data_wait_share"] <= 1 and "paths" not in b["config"]
    assert any((tmp_path / "runs" / "02_data_pipeline").glob("baseline-*"))   # logged to TensorBoard


def test_interleaved_rounds_rotate_pool_and_keep_each_round(tmp_path):
    res, order = results(tmp_path), []

    def spy(**kw):
        order.append(kw["variant"])
        if kw["variant"] == "bool_dilation":
            raise RuntimeError("boom")
        return tiny_run(**kw)

    ex.measure(res, {"a": dict(variant="baseline"), "b": dict(variant="crop_first"), "c": dict(variant="bool_dilation")},
               spy, rounds=3, defaults=dict(num_workers=0, batch_size=2, steps=6))
    assert order == ["baseline", "crop_first", "bool_dilation", "crop_first", "baseline", "baseline", "crop_first"]
    assert row(res, "c")["status"] == "failed" and "boom" in row(res, "c")["error"]   # not run again
    m = row(res, "a")["metrics"]
    assert m["steps_timed"] == 6 and m["rounds"] == 3 and len(m["round_means_ms"]) == 3
    assert [len(t) for t in m["round_times_ms"]] == [2, 2, 2] and len(m["round_warmup_ms"]) == 3
    assert m["cycle_ms"] == [round(sum(t) / len(t), 3) for t in m["round_times_ms"]] or len(m["cycle_ms"]) == 6
    assert row(res, "a")["config"]["rounds"] == 3


def test_a_bad_setting_is_a_failed_row_with_its_message(tmp_path):
    res = results(tmp_path)
    measure(res, {"too many": dict(num_workers=10_000), "string": dict(num_workers="2"), "bs 0": dict(batch_size=0)})
    for name, match in (("too many", "CPU cores"), ("string", "whole number"), ("bs 0", "at least 1")):
        assert row(res, name)["status"] == "failed" and match in row(res, name)["error"], name
    assert math.isnan(views.ms(res, "too many"))


def test_compare_rows_by_their_cycles(tmp_path):
    res = results(tmp_path)
    res.add("a", {}, {"cycle_ms": [40.0, 41.0, 39.0, 40.5]})
    res.add("b", {}, {"cycle_ms": [20.0, 21.0, 19.0, 20.5]})
    res.add("failed", {}, status="failed", error="x")
    c = ex.compare(res, "a", "b")
    assert c["verdict"] == "faster" and c["metric"] == "step_ms_mean" and res.comparison("a", "b") == c
    assert ex.compare(res, "a", "failed") is None


def test_a_profile_of_one_process_shows_the_transform_labels(tmp_path):
    prof = ex.profile(tiny_run, tmp_path, wait=0, active=2, device="cpu", variant="crop_first", num_workers=0)
    from helpers.measure import profiling

    assert len(profiling.step_events(prof)) == 2 and profiling.trace_files(tmp_path)
    st = ex.stage_ms(prof, 4)
    assert st["decode JPEG"] > 0 and st["crop"] > 0 and st["to tensor"] > 0


def test_the_profile_runs_with_one_thread_as_a_worker_does(tmp_path):
    """On the H100 the single-process profile ran with 16 intra-op threads while each worker runs 1: the re-profile
    after the dilation fix read -5% for a 50x cheaper dilation. The profiled run now has a worker's one thread."""
    seen, before = [], torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ex.profile(lambda **kw: seen.append(torch.get_num_threads()) or tiny_run(**kw), tmp_path, wait=0, active=1,
                   device="cpu", variant="crop_first", num_workers=0)
        assert seen == [1] and torch.get_num_threads() == 2   # one thread inside, restored after
    finally:
        torch.set_num_threads(before)


def test_bad_inputs_run_whatever_is_left_of_the_budget(tmp_path):
    """The H100 run skipped its bad-input rows for time ("num_workers < 0: OverBudget: skipped"): they cost nothing,
    so the notebook measures them with no budget, and each is a failed row with its own message."""
    from helpers.notebook.budget import Budget

    res, spent = results(tmp_path), Budget(1.0, start=-1e9)
    measure(res, {"expected failure: num_workers < 0": dict(num_workers=-1),
                  "expected failure: batch size 0": dict(batch_size=0)}, budget=None)
    measure(res, {"skipped": {}}, budget=spent)
    errors = {e["name"]: e["error"] for e in res.experiments}
    assert errors["skipped"].startswith("OverBudget") and not any(
        e.startswith("OverBudget") for n, e in errors.items() if n.startswith("expected failure"))
    src = "".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"])
    assert "measure(rows, always=True, quiet=True)" in src and "ex.bad_inputs(RESULTS, measure_bad" in src


def test_idle_shares_take_windows_in_turns_and_pool_them(tmp_path, monkeypatch):
    """Windows per variant, the variants in turns (a burst of other load falls on both), the share pooled over every
    window's steps (not a mean of the windows' shares); a window that cannot run fails the variant."""
    import perf_doctor as traces

    res, order = results(tmp_path), []
    windows = iter([(10.0, 20.0), (1.0, 10.0), (30.0, 40.0), (2.0, 10.0), (20.0, 30.0), (3.0, 30.0)])
    monkeypatch.setattr(ex, "profile", lambda run, tdir, **k: order.append((k["variant"], k["wait"], k["active"])))
    monkeypatch.setattr(ex.profiling, "trace_files", lambda tdir: [tdir])
    monkeypatch.setattr(traces, "load_trace", lambda path: path)
    monkeypatch.setattr(traces, "dataloader_wait_share",
                        lambda trace: (lambda n, s: {"next_ms": n, "step_ms": s, "share": n / s})(*next(windows)))
    got = ex.idle_shares(res, tiny_run, ["baseline", "crop_first"], num_workers=2, windows=3, cycles=4, device="cpu")
    assert order == [("baseline", 2, 8), ("crop_first", 2, 8)] * 3
    assert got["baseline"]["trace_wait_share"] == round(60 / 90, 4) and got["crop_first"]["windows"] == 3
    assert "gpu_idle_share" not in got["baseline"]
    assert row(res, "idle share crop_first")["metrics"]["trace_wait_share"] == round(6 / 50, 4)

    monkeypatch.setattr(ex, "gpu_idle_share", lambda tdir: 0.25)   # on a GPU: HTA's idle share, the windows' mean
    windows = iter([(1.0, 2.0)] * 6)
    calls = iter([None, RuntimeError("worker died")])
    monkeypatch.setattr(ex, "profile", lambda run, tdir, **k: k["variant"] == "crop_first" and (
        (e := next(calls)) and (_ for _ in ()).throw(e)))
    got = ex.idle_shares(res, tiny_run, ["baseline", "crop_first"], num_workers=1, windows=3, cycles=1, device="cuda")
    assert list(got) == ["baseline"] and got["baseline"]["gpu_idle_share"] == 0.25
    assert row(res, "idle share crop_first")["status"] == "failed" and "worker died" in row(res, "idle share crop_first")["error"]


@pytest.mark.parametrize("values,match", [
    (dict(num_workers=10_000), "CPU cores"), (dict(num_workers=-1), "negative"), (dict(batch_size=0), "at least 1"),
    (dict(variant="fastest"), "unknown pipeline variant"), (dict(variant="gpu_decode"), "CUDA"),
    (dict(persistent_workers="yes"), "True or False")])
def test_the_panel_refuses_bad_values(values, match):
    with pytest.raises(ValueError, match=match):
        ex.validate_panel({"variant": "crop_first", "num_workers": 1, "batch_size": 2, "persistent_workers": False,
                           **values}, cores=2, on_gpu=False)


def test_the_panel_runs_the_readers_row_and_turns_a_bad_value_into_a_failed_row(tmp_path):
    res, ran = results(tmp_path), []
    values = dict(variant="crop_first", num_workers=0, batch_size=2, persistent_workers=False)
    t = ex.panel_row(res, lambda name, v: (ran.append(name), measure(res, {name: v})), 2, False, **values)
    assert ran == ["panel crop_first nw=0 bs=2"] and list(t["experiment"]) == ran
    t = ex.panel_row(res, lambda name, v: ran.append(name), 2, False, **{**values, "num_workers": "2"})
    assert len(ran) == 1 and t["status"].tolist() == ["ok", "failed"] and "whole number" in t["error"].iloc[-1]
    panel = ex.panel(res, lambda name, v: measure(res, {name: v}), num_workers=0, batch_size=2, cores=2, on_gpu=False)
    panel.click()
    assert res.get("panel crop_first nw=0 bs=2")["status"] == "ok" and len(res.experiments) == 3
    t = ex.panel_row(res, lambda name, v: (ran.append(name), measure(res, {name: v})), 2, False,
                     **{**values, "num_workers": 1})
    assert t["experiment"].iloc[-1] == "panel crop_first nw=1 bs=2"   # the newest row last, after a failed one
    # the appendix's bad values are expected failures: the reader's table shows the baseline and the reader's rows
    res.add("baseline", {"num_workers": 1, "batch_size": 2, "model": True}, {"step_ms_mean": 30.0})
    t = ex.panel_row(res, lambda name, v: ran.append(name), 2, False, prefix="expected failure: panel",
                     **{**values, "batch_size": True})
    assert not t["experiment"].str.startswith("expected failure").any()
    assert (t["experiment"] == "baseline").sum() == 1
    assert res.experiments[-1]["name"].startswith("expected failure: panel")


# -- the views ---------------------------------------------------------------------------------------
def reported(tmp_path):
    """Rows as the notebook leaves them (no runs): a ceiling of 10 ms, the sweep, variants, their T_batch."""
    res = results(tmp_path)
    res.add("ceiling", {"model": True, "num_workers": 0, "batch_size": 2}, {"step_ms_mean": 10.0})
    for name, nw, ms_ in (("sweep nw=1", 1, 50.0), ("sweep nw=2", 2, 25.0), ("baseline", 2, 40.0),
                          ("crop_first", 2, 20.0), ("pipeline only baseline", 0, 30.0)):
        res.add(name, {"model": "pipeline" not in name, "num_workers": nw, "batch_size": 2},
                {"step_ms_mean": ms_, "samples_per_s": 2000 / ms_, "round_means_ms": [ms_ - 1, ms_ + 1, ms_],
                 "round_times_ms": [[ms_ * 2, 1.0]] * 3, "round_warmup_ms": [[90.0]] * 3, "data_wait_share": 0.5})
    res.add("sweep nw=4", {"model": True, "num_workers": 4, "batch_size": 2}, status="failed", error="OverBudget: x")
    return res


def test_the_sweep_table_and_its_chart(tmp_path):
    res = reported(tmp_path)
    rows = {1: "sweep nw=1", 2: "sweep nw=2", 4: "sweep nw=4"}
    sweep = views.sweep_table(res, rows, "pipeline only baseline", 10.0, 2)
    assert list(sweep["num_workers"]) == [1, 2] and sweep["samples_per_s"].iloc[0] == 40.0   # 4 skipped: no row
    assert sweep["predicted_samples_per_s"].tolist() == [
        pytest.approx(ex.predicted_samples_per_s(n, 30.0, 10.0, 2)) for n in (1, 2)]
    assert sweep["predicted_low"].iloc[0] == pytest.approx(ex.predicted_samples_per_s(1, 31.0, 10.0, 2))
    assert sweep["predicted_high"].iloc[0] == pytest.approx(ex.predicted_samples_per_s(1, 29.0, 10.0, 2))
    assert sweep["measured_over_predicted"].iloc[0] == pytest.approx(40.0 / sweep["predicted_samples_per_s"].iloc[0])
    assert not sweep["beats_prediction"].any()
    views.plot_sweep(res, sweep, rows, 10.0, 2, 2)
    assert (res.dir / "sawtooth_and_sweep.png").stat().st_size > 0
    assert views.one_run(res, "sweep nw=2") == ([90.0], [50.0, 1.0]) and views.one_run(res, "sweep nw=4") == ([], [])


def _sweep_of(tmp_path, t_batch, rounds, ceiling, nw=1):
    res = results(tmp_path)
    res.add("t_batch", {"model": False}, {"step_ms_mean": sum(t_batch) / len(t_batch), "round_means_ms": t_batch})
    res.add("point", {"model": True, "num_workers": nw, "batch_size": 8},
            {"step_ms_mean": sum(rounds) / len(rounds), "samples_per_s": 8000 * len(rounds) / sum(rounds),
             "round_means_ms": rounds})
    return views.sweep_table(res, {nw: "point"}, "t_batch", ceiling, 8)


def test_a_point_beats_its_prediction_only_beyond_the_rounds_noise(tmp_path):
    """A CI run's figures (batch 8): the 1-worker point's mean is faster than T_batch's fastest round allows, but one
    round in five carries it: within the noise, no claim that it beats the bound. A point faster in every round does."""
    t_batch = [94.1, 92.1, 92.8, 83.4, 85.7]
    noisy = _sweep_of(tmp_path, t_batch, [98.3, 67.6, 95.7, 80.6, 84.1], 10.0)
    assert noisy["samples_per_s"].iloc[0] > noisy["predicted_samples_per_s"].iloc[0]   # the mean is above ...
    assert not noisy["beats_prediction"].iloc[0]                                         # ... no claim
    assert _sweep_of(tmp_path, t_batch, [60.2, 61.0, 59.5, 58.8, 60.9], 10.0)["beats_prediction"].iloc[0]


def test_a_point_within_t_batchs_range_does_not_beat_its_prediction(tmp_path):
    """Another run's figures (0 workers, batch 8, a 9.4 ms stand-in step): faster than the prediction beyond its
    rounds' noise (1.05x, interval 1.02-1.11), but not faster than the prediction at T_batch's fastest round."""
    t_batch, rounds = [58.7, 58.6, 56.4, 58.6, 66.1], [66.4, 64.4, 65.6, 66.6, 66.9]
    sweep = _sweep_of(tmp_path, t_batch, rounds, 9.405, nw=0)
    assert compare.compare_times([t + 9.405 for t in t_batch], rounds)["verdict"] == "faster"   # beyond the noise ...
    assert sweep["samples_per_s"].iloc[0] < sweep["predicted_high"].iloc[0]                     # ... within the range
    assert not sweep["beats_prediction"].iloc[0]


def test_the_fixes_summary_and_panel_tables(tmp_path):
    res = reported(tmp_path)
    f = views.fixes_table(res, ["baseline", "crop_first", "gpu_decode"], {"baseline": "pipeline only baseline"}, 2, 10.0, 2)
    assert f["T_batch_ms"].iloc[0] == 30.0 and f["predicted_samples_per_s"].iloc[0] == pytest.approx(
        ex.predicted_samples_per_s(2, 30.0, 10.0, 2))
    assert math.isnan(f["predicted_samples_per_s"].iloc[1]) and len(f) == 2   # gpu_decode never ran: no row
    s = views.summary(res)
    assert "pipeline only baseline" not in set(s["experiment"]) and "sweep nw=4" not in set(s["experiment"])
    assert list(s["experiment"][:2]) == ["ceiling", "sweep nw=1"] and "peak_mem_mb" not in s
    res.add("panel crop_first nw=1 bs=2", {"num_workers": 1, "batch_size": 2, "model": True}, {"step_ms_mean": 20.0})
    assert list(ex.panel_table(res)["experiment"]) == ["baseline", "panel crop_first nw=1 bs=2"]


def test_the_stages_and_variants_charts(tmp_path):
    import pandas as pd

    res = reported(tmp_path)
    views.plot_stages(res, pd.DataFrame({"baseline": {"mask": 2.0, "decode JPEG": 1.0},
                                         "crop_first": {"mask": 0.5, "decode JPEG": 1.0}}).T)
    views.plot_stages(res, pd.DataFrame())   # nothing profiled (skipped): no chart, no error
    res.compare_times("baseline", "crop_first", [40.0, 41.0, 39.0, 40.5], [20.0, 21.0, 19.0, 20.5])
    views.plot_variants(res, [("baseline", "crop_first"), ("baseline", "bool_dilation")])
    assert (res.dir / "stages_per_variant.png").exists() and (res.dir / "variants.png").exists()


def test_the_article_rows_compare_the_articles_pairs(tmp_path):
    from helpers.notebook import reference

    res = reported(tmp_path)
    rows = views.article_rows(res, None, ("sweep nw=1", "sweep nw=2"))
    assert [r["effect"] for r in rows] == [a[0] for a in views.ARTICLE]
    assert all(r["this_run"] is None for r in rows)   # no comparison made yet
    res.compare_times("baseline", "crop_first", [40.0, 41.0, 39.0], [20.0, 21.0, 19.0])
    res.compare_times("sweep nw=1", "sweep nw=2", [50.0, 51.0, 49.0], [25.0, 26.0, 24.0])
    t = reference.article_table(views.article_rows(res, None, ("sweep nw=1", "sweep nw=2"))).set_index("effect")
    assert t.loc["all the article's fixes (baseline -> crop first)", "this run reproduces?"].startswith("yes")
    assert t.loc["4 -> 8 workers", "this run"].startswith("0.50× the time") and "nan" not in t.to_string().lower()

def test_the_sweep_chart_keeps_its_points_readable_under_a_far_ceiling(tmp_path, monkeypatch):
    """Issue 33: a ceiling 4x above the sweep's points squashed them at the bottom of the chart; a far ceiling is
    named in the legend instead of drawn, and the y axis fits the points."""
    res = reported(tmp_path)
    rows = {1: "sweep nw=1", 2: "sweep nw=2"}
    shown = []
    monkeypatch.setattr(views, "_show", lambda fig, results, name: shown.append(fig))
    for ceiling_ms, far in ((0.5, True), (10.0, False)):   # 4,000 samples/s against points of 40 and 80
        views.plot_sweep(res, views.sweep_table(res, rows, "pipeline only baseline", ceiling_ms, 2), rows, ceiling_ms, 2, 2)
        ax = shown[-1].axes[1]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any("above the chart" in t for t in labels) == far, labels
        assert ax.get_ylim()[1] < (200 if far else 2000 / ceiling_ms * 1.2)
