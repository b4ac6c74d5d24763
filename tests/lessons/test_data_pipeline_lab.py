"""helpers.lessons.data_pipeline.lab / report: notebook 02's harness at tiny sizes (structure, never timings).

One ceiling per batch size, rows planned over whole worker cycles, failures as rows, the GPU branches (the decode
check, HTA's idle share) driven on a CPU by monkeypatching, and the tables and charts read from results rows."""
import math

import pytest

from helpers.lessons import data_pipeline as pl
from helpers.lessons.data_pipeline import checks, lab as lab_mod, loop
from helpers.measure import compare
from helpers.measure.validate import InvalidValue
from helpers.notebook.results import Results

TINY = dict(scale="smoke", crop=32, batch_size=2, num_workers=1, dataset_size=8, steps=2, warmup=1, cycles=1, rounds=2,
            pipe_steps=2, ceiling_steps=2, profile_steps=1, profile_cycles=1, stand_in=True, stand_in_ms=1.0,
            stand_in_ratio=0.35, seed=0)


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PERF_RUNS_DIR", str(tmp_path / "runs"))


def make_lab(tmp_path, **kw):
    return pl.Lab("cpu", **{**TINY, "results": Results("02_data_pipeline", "smoke", root=tmp_path / "results"), **kw})


def row(lab, name):
    r = lab.results.get(name)
    assert r is not None, f"no row {name!r}: {[e['name'] for e in lab.results.experiments]}"
    return r


# -- the stand-in ----------------------------------------------------------------------------------
def test_the_stand_in_is_calibrated_once_from_the_pipeline_alone(tmp_path):
    lab = make_lab(tmp_path, stand_in_ms=None, num_workers=2)
    ms = lab.calibrate_stand_in()
    r = row(lab, "stand-in calibration")
    assert r["status"] == "ok" and r["config"]["model"] is False and r["config"]["num_workers"] == 0
    assert r["config"]["stand_in_ratio"] == 0.35
    # from the fastest batch: other programs only lengthen batches, and a longer stand-in would let the baseline
    # drift towards the ceiling once they stop
    assert ms == lab.stand_in_ms == round(0.35 * min(r["metrics"]["times_ms"]) / 2, 1)
    assert lab.calibrate_stand_in() == ms and len(lab.results.experiments) == 1   # never measured twice
    assert lab.step_kind.startswith(f"stand-in device step: {ms:g} ms") and "not a GPU" in lab.step_kind


def test_no_calibration_with_a_given_step_or_without_a_stand_in(tmp_path):
    assert make_lab(tmp_path, stand_in_ms=5.0).calibrate_stand_in() == 5.0
    real = make_lab(tmp_path, stand_in=False, stand_in_ms=5.0)   # a GPU: the real model, no stand-in step
    assert real.calibrate_stand_in() is None and real.stand_in_ms is None
    assert real.step_kind.startswith("toy CNN on ")


def test_a_failed_calibration_stops_with_its_reason(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise OSError("no images")
    monkeypatch.setattr(loop, "run_variant", boom)
    lab = make_lab(tmp_path, stand_in_ms=None)
    with pytest.raises(RuntimeError, match="could not be calibrated: OSError: no images"):
        lab.calibrate_stand_in()
    assert row(lab, "stand-in calibration")["status"] == "failed"


# -- the one ceiling and the rows ------------------------------------------------------------------
def test_one_ceiling_per_batch_size_and_the_remeasure_apart(tmp_path):
    lab = make_lab(tmp_path)
    c = lab.ceiling_ms()
    assert lab.ceiling_ms() == c and lab.ceiling_ms(2) == c
    assert [e["name"] for e in lab.results.experiments] == ["ceiling"]
    assert row(lab, "ceiling")["metrics"]["x_ceiling"] == 1.0 and row(lab, "ceiling")["config"]["stand_in_ms"] == 1.0
    lab.ceiling_ms(3)
    assert row(lab, "ceiling bs=3")["config"]["batch_size"] == 3
    again = lab.remeasure_ceiling()
    r = row(lab, "ceiling (re-measured)")
    assert again == r["metrics"]["step_ms_mean"] and "x_ceiling" not in r["metrics"]
    assert lab.ceilings == {2: c, 3: lab.ceilings[3]}   # every row keeps dividing by the first measurement


def test_a_failed_ceiling_stops_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "ceiling", lambda *a, **k: (_ for _ in ()).throw(OSError("no device")))
    with pytest.raises(RuntimeError, match="ceiling could not be measured: OSError: no device"):
        make_lab(tmp_path).ceiling_ms()


def test_plan_covers_whole_worker_cycles_and_keeps_the_config_small(tmp_path):
    lab = make_lab(tmp_path, num_workers=4, steps=5, warmup=1, cycles=3)
    kw, cfg = lab.plan("crop_first", paths=["x.jpg"], die_at=1, prefetch_factor=4)
    assert kw["steps"] == 12 and kw["warmup"] == 4 and kw["paths"] == ["x.jpg"] and kw["die_at"] == 1
    assert cfg["timed_steps"] == 12 and cfg["warmup_steps"] == 4 and cfg["prefetch_factor"] == 4
    assert "paths" not in cfg and "die_at" not in cfg
    assert cfg["stand_in"] is True and cfg["stand_in_ms"] == kw["stand_in_ms"] == 1.0 and cfg["model"] is True
    kw, cfg = lab.plan("baseline", num_workers=0, steps=2, train=False)   # the pipeline alone: no device step
    # ... and no worker cycles to cover: its steps as asked (with a device step, 0 workers still take `cycles` steps)
    assert kw["stand_in_ms"] is None and cfg["stand_in"] is False and cfg["model"] is False and kw["steps"] == 2
    assert lab.plan("baseline", num_workers=0, steps=2)[0]["steps"] == 3
    kw, cfg = lab.plan("uint8_device", dataset_size=0)   # 0: the loader holds just the batches the run takes
    assert kw["dataset_size"] == 0 and cfg["dataset_size"] == 0 and "dataset_size" not in lab.plan("baseline")[1]
    kw, cfg = lab.plan("baseline", num_workers=-1)   # bad values pass through: run_variant refuses them (a row)
    assert kw["num_workers"] == -1 and kw["steps"] == 5 and kw["warmup"] == 1
    kw, _ = lab.plan("baseline", num_workers=True)
    assert kw["steps"] == 5 and kw["warmup"] == 1


def test_measure_divides_by_the_one_ceiling_and_logs_to_tensorboard(tmp_path):
    lab = make_lab(tmp_path, num_workers=0)
    r = lab.measure("baseline nw=0", "baseline")
    m = r["metrics"]
    assert r["status"] == "ok" and m["ceiling_ms"] == lab.ceiling_ms()
    assert m["x_ceiling"] == round(m["step_ms_mean"] / m["ceiling_ms"], 3)
    assert lab.ms("baseline nw=0") == m["step_ms_mean"] and lab.ms("baseline nw=0", "samples_per_s") > 0
    assert any((tmp_path / "runs" / "02_data_pipeline").glob("baseline_nw_0-*"))
    alone = lab.measure("pipeline only", "baseline", num_workers=0, train=False)["metrics"]
    assert "x_ceiling" not in alone


def test_a_failed_row_is_a_row_and_its_metrics_read_as_nan(tmp_path):
    lab = make_lab(tmp_path)
    r = lab.measure("bad", "crop_first", num_workers=-1)
    assert r["status"] == "failed" and "negative" in r["error"]
    assert math.isnan(lab.ms("bad")) and math.isnan(lab.ms("no such row"))
    assert all(math.isnan(v) for v in lab.metrics("bad", ("step_ms_mean", "x_ceiling")).values())


def test_interleaved_rows_split_the_steps_over_the_rounds(tmp_path, monkeypatch):
    lab = make_lab(tmp_path, num_workers=0, steps=4, rounds=2)
    seen = {}
    real = loop.run_interleaved

    def spy(configs, rounds, **common):
        seen.update(configs=configs, rounds=rounds)
        return real({**configs, "broken": {**configs["broken"], "batch_size": 0}}, rounds, **common)

    monkeypatch.setattr(loop, "run_interleaved", spy)
    lab.measure_interleaved({"a": dict(variant="baseline"), "broken": dict(variant="crop_first", steps=6)})
    assert seen["rounds"] == 2 and seen["configs"]["a"]["steps"] == 2 and seen["configs"]["broken"]["steps"] == 3
    a = row(lab, "a")
    assert a["status"] == "ok" and a["config"]["rounds"] == 2 and a["metrics"]["rounds"] == 2
    assert a["metrics"]["ceiling_ms"] == lab.ceiling_ms()
    assert row(lab, "broken")["status"] == "failed" and "at least 1" in row(lab, "broken")["error"]


# -- shared memory, profiles, the GPU branches -----------------------------------------------------
def test_the_shared_memory_line_says_enough_or_what_will_fail(tmp_path, monkeypatch):
    lab = make_lab(tmp_path, batch_size=256, crop=256)   # the article's size: about 1.5 GB in flight with 2 workers
    monkeypatch.setattr(checks, "shm_free_mb", lambda path=pl.SHM_PATH: 64_000.0)
    assert lab.check_shared_memory(2).startswith("the largest setting here (2 workers in the sweep): /dev/shm")
    monkeypatch.setattr(checks, "shm_free_mb", lambda path=pl.SHM_PATH: 64.0)
    line = lab.check_shared_memory(2)
    assert line.startswith("NOT ENOUGH SHARED MEMORY") and "--shm-size" in line


def test_reprofile_keeps_the_stages_and_a_row(tmp_path):
    lab = make_lab(tmp_path)
    lab.reprofile("baseline")
    lab.reprofile("bool_dilation")
    assert set(lab.stages) == {"baseline", "bool_dilation"} and lab.stages["baseline"]["mask"] > 0
    r = row(lab, "profile baseline nw=0")
    assert r["config"]["num_workers"] == 0 and r["metrics"]["slowest_stage"] in set(pl.STAGES.values())
    assert r["metrics"]["decode_JPEG_ms_per_sample"] > 0
    assert lab.moved("baseline", "bool_dilation", "mask").startswith("mask: ") and "→ **" in lab.moved(
        "baseline", "bool_dilation", "mask")


def test_gpu_decode_is_checked_first_and_a_mismatch_is_a_failed_row(tmp_path, monkeypatch, capsys):
    lab = make_lab(tmp_path)
    assert lab.gpu_decode() == [] and "no CUDA device" in capsys.readouterr().out and not lab.results.experiments
    lab.on_gpu = True   # the GPU branch, driven on a CPU
    monkeypatch.setattr(lab_mod, "check_decode", lambda paths, dev: (_ for _ in ()).throw(
        pl.DecodeMismatch("GPU decode differs from the CPU decode")))
    assert lab.gpu_decode() == []
    r = row(lab, "gpu_decode")
    assert r["status"] == "failed" and "differs" in r["error"] and r["config"]["stand_in"] is False
    profiled = []
    monkeypatch.setattr(lab_mod, "check_decode", lambda paths, dev: {"mean_abs": 0.5, "p99_abs": 2.0})
    monkeypatch.setattr(lab, "reprofile", profiled.append)
    assert lab.gpu_decode() == ["gpu_decode"] and profiled == ["gpu_decode"]


def test_idle_shares_read_the_trace_and_on_a_gpu_hta(tmp_path, monkeypatch, capsys):
    lab = make_lab(tmp_path, num_workers=0)
    lab.measure("baseline", "baseline")
    idle = lab.idle_shares(["baseline"])
    assert 0 <= idle["baseline"]["share"] <= 1 and "gpu_idle_share" not in idle["baseline"]
    m = row(lab, "idle share baseline")["metrics"]
    assert m["timed_wait_share"] == lab.ms("baseline", "data_wait_share") and "gpu_idle_share" not in m
    lab.on_gpu = True   # HTA's share where there is a GPU; an analysis that fails leaves the CPU-side share
    monkeypatch.setattr(loop, "gpu_idle_share", lambda tdir: 0.25)
    assert lab.idle_shares(["baseline"])["baseline"]["gpu_idle_share"] == 0.25
    assert row(lab, "idle share baseline")["metrics"]["gpu_idle_share"] == 0.25
    monkeypatch.setattr(loop, "gpu_idle_share", lambda tdir: (_ for _ in ()).throw(ValueError("no rank")))
    assert "gpu_idle_share" not in lab.idle_shares(["baseline"])["baseline"]
    assert "HTA could not analyse" in capsys.readouterr().out
    monkeypatch.setattr(loop, "profile_loop", lambda *a, **k: (_ for _ in ()).throw(
        pl.SharedMemoryTooSmall("/dev/shm has 1 MiB free")))
    assert lab.idle_shares(["crop_first"]) == {}
    assert row(lab, "idle share crop_first")["status"] == "failed"


def test_the_decode_bound_row(tmp_path):
    lab = make_lab(tmp_path)
    lab.ceilings[2] = 10.0
    lab.results.add("best", {"model": True}, {"step_ms_mean": 30.0})
    m = lab.decode_bound_row("best", 2.0, 20.0)["metrics"]
    assert m == {"decode_ms_per_image": 2.0, "bound_step_ms": 20.0, "best_variant": "best", "best_over_bound": 1.5,
                 "best_over_ceiling": 3.0, "best_bound_ms": 20.0}
    lab.results.add("gpu_decode", {"model": True}, {"step_ms_mean": 12.0})   # decodes on the GPU: bound = ceiling
    assert lab.decode_bound_row("gpu_decode", 2.0, 20.0)["metrics"]["best_bound_ms"] == 10.0


# -- bad input and the panel -----------------------------------------------------------------------
def test_every_bad_input_is_a_failed_row_with_a_message(tmp_path):
    lab = make_lab(tmp_path, cores=2)
    rows = lab.bad_inputs(tmp_path)
    names = [r["name"] for r in rows]
    assert len(rows) == 7 and all(n.startswith("expected failure: ") for n in names)
    assert all(r["status"] == "failed" and r["error"] and "\n" not in r["error"] for r in rows)
    errors = {n.split(": ", 1)[1]: r["error"] for n, r in zip(names, rows)}
    assert "more than this machine's 2 CPU cores" in errors["num_workers > cores"]
    assert "could not be decoded" in errors["corrupt image"] and "does not exist" in errors["missing image"]
    assert "worker died" in errors["a worker dies"]
    assert "die_at" not in row(lab, "expected failure: a worker dies")["config"]
    table = lab.rows_table(rows)
    assert list(table.columns) == ["status", "error"] and len(table) == 7


@pytest.mark.parametrize("values,match", [
    (dict(num_workers=3, batch_size=2, variant="baseline"), "CPU cores"),
    (dict(num_workers=-1, batch_size=2, variant="baseline"), "negative"),
    (dict(num_workers=0, batch_size=0, variant="baseline"), "at least 1"),
    (dict(num_workers=0, batch_size=2000, variant="baseline"), "limit of 1024"),
    (dict(num_workers=0, batch_size=2, variant="nope"), "unknown pipeline variant"),
    (dict(num_workers=0, batch_size=2, variant="gpu_decode"), "needs a CUDA device"),
    (dict(num_workers=0, batch_size=2, variant="baseline", persistent_workers="yes"), "True or False"),
    (dict(num_workers="2", batch_size=2, variant="baseline"), "whole number"),
    (dict(num_workers=0, batch_size=True, variant="baseline"), "whole number"),
])
def test_the_panel_refuses_bad_values(tmp_path, values, match):
    with pytest.raises(InvalidValue, match=match):
        make_lab(tmp_path, cores=2).validate_panel(dict(values))


def test_the_panel_runs_the_same_measure_and_shows_its_rows(tmp_path):
    lab = make_lab(tmp_path, num_workers=0, cores=2)
    assert lab.validate_panel(dict(num_workers=1, batch_size=2, variant="crop_first"))["num_workers"] == 1
    table = lab.panel_row("crop_first", 0, 2)
    assert row(lab, "panel crop_first nw=0 bs=2")["status"] == "ok"
    assert "panel crop_first nw=0 bs=2" in set(table["experiment"])
    lab.panel_row("crop_first", 0, 2, persistent_workers=True)
    assert row(lab, "panel crop_first nw=0 bs=2 persistent")["config"]["persistent_workers"] is True
    panel = lab.panel()
    assert hasattr(panel, "click") and any(getattr(c, "description", "") == "num_workers" for c in panel.children)


# -- the report ------------------------------------------------------------------------------------
def reported_lab(tmp_path):
    """A lab whose rows were added by hand (no timing): the ceiling, two sweep points, the variants."""
    lab = make_lab(tmp_path, num_workers=1)
    r = lab.results
    lab.ceilings[2] = 10.0
    r.add("ceiling", {"model": True, "num_workers": 0, "stand_in": True, "batch_size": 2},
          {"step_ms_mean": 10.0, "samples_per_s": 200.0, "x_ceiling": 1.0})
    for n, mean in ((1, 50.0), (2, 25.0)):
        r.add(f"sweep nw={n}", {"model": True, "num_workers": n, "stand_in": True, "batch_size": 2},
              {"step_ms_mean": mean, "samples_per_s": 2000 / mean, "x_ceiling": mean / 10, "warmup_ms": [50.0],
               "times_ms": [60.0, 20.0, 40.0]})
    for v, mean in (("baseline", 40.0), ("bool_dilation", 30.0), ("crop_first", 20.0), ("batch_collate", 22.0)):
        r.add(v, {"model": True, "num_workers": 1, "stand_in": True, "batch_size": 2},
              {"step_ms_mean": mean, "samples_per_s": 2000 / mean, "x_ceiling": mean / 10, "first_step_ms": 90.0,
               "data_wait_share": 0.5})
    r.add("crop_first prefetch_factor=4", {"model": True, "num_workers": 1}, {"step_ms_mean": 21.0})
    r.add("crop_first persistent_workers", {"model": True, "num_workers": 1}, status="failed", error="x")
    r.add("ceiling (re-measured)", {"model": True, "num_workers": 0}, {"step_ms_mean": 11.0})
    r.add("failed one", {"model": True, "num_workers": 1}, status="failed", error="x")
    lab.stages = {"baseline": {"mask": 2.0, "decode JPEG": 1.0, "scale": 0.0},
                  "bool_dilation": {"mask": 0.2, "decode JPEG": 1.0, "scale": 0.0}}
    return lab


@pytest.mark.parametrize("bad,match", [(dict(num_workers="2"), "whole number"), (dict(batch_size=True), "whole number"),
                                       (dict(persistent_workers="yes"), "True or False"), (dict(num_workers=9), "cores")])
def test_the_panel_function_turns_a_bad_value_into_a_failed_row(tmp_path, bad, match):
    lab = make_lab(tmp_path, cores=2)
    table = lab.panel_row(**bad)   # no traceback: a failed row with the refusal's message, shown in the table
    failed = [e for e in lab.results.experiments if e["status"] == "failed"]
    assert len(failed) == 1 and match in failed[0]["error"] and failed[0]["name"].startswith("panel ")
    assert "ceiling" not in {e["name"] for e in lab.results.experiments}   # refused before anything ran
    assert (table["status"] == "failed").sum() == 1


def test_the_sweep_table_and_its_chart(tmp_path):
    lab = reported_lab(tmp_path)
    sweep = lab.sweep_table({1: "sweep nw=1", 2: "sweep nw=2", 4: "sweep nw=4"}, t_batch_ms=30.0)
    assert list(sweep["num_workers"]) == [1, 2, 4] and sweep["samples_per_s"].iloc[0] == 40.0
    assert math.isnan(sweep["samples_per_s"].iloc[2])
    assert sweep["predicted_samples_per_s"].tolist() == [
        pytest.approx(loop.predicted_samples_per_s(n, 30.0, 10.0, 2)) for n in (1, 2, 4)]
    assert sweep["measured_over_predicted"].iloc[0] == pytest.approx(40.0 / sweep["predicted_samples_per_s"].iloc[0])
    ranged = lab.sweep_table({1: "sweep nw=1", 2: "sweep nw=2"}, t_batch_ms=30.0, t_batch_rounds=[25.0, 40.0])
    assert ranged["predicted_low"].iloc[0] == pytest.approx(loop.predicted_samples_per_s(1, 40.0, 10.0, 2))
    assert ranged["predicted_high"].iloc[0] == pytest.approx(loop.predicted_samples_per_s(1, 25.0, 10.0, 2))
    lab.plot_sweep(ranged, {1: "sweep nw=1", 2: "sweep nw=2", 4: "sweep nw=4"})
    assert (lab.results.dir / "sawtooth_and_sweep.png").stat().st_size > 0


def test_the_bound_sentence_says_which_points_beat_the_prediction(tmp_path):
    lab = reported_lab(tmp_path)
    below = lab.sweep_table({1: "sweep nw=1"}, t_batch_ms=10.0, t_batch_rounds=[9.0, 11.0])   # 40 vs 100 samples/s
    assert "Every point is at or below its prediction" in lab.bound_sentence(below)
    above = lab.sweep_table({1: "sweep nw=1", 2: "sweep nw=2"}, t_batch_ms=200.0, t_batch_rounds=[190.0, 210.0])
    text = lab.bound_sentence(above)   # 40 and 80 samples/s against a prediction of 10 and 20
    assert "1, 2 worker(s) beat the prediction" in text and "not a bound" in text
    assert above["beats_prediction"].tolist() == [True, True] and not below["beats_prediction"].any()


def test_a_point_beats_its_prediction_only_beyond_the_rounds_noise(tmp_path):
    """A CI run's figures (batch 8): T_batch's rounds against the 1-worker point's. Its mean is faster than T_batch's
    fastest round allows, but one round in five carries it: within the noise, so no claim that it beats the bound."""
    lab = make_lab(tmp_path, num_workers=1)
    lab.batch_size = 8
    lab.ceilings[8] = 10.0
    lab.results.add("ceiling", {"model": True, "num_workers": 0, "stand_in": True, "batch_size": 8},
                    {"step_ms_mean": 10.0})
    t_batch = [94.1, 92.1, 92.8, 83.4, 85.7]
    for name, rounds in (("noisy", [98.3, 67.6, 95.7, 80.6, 84.1]), ("fast", [60.2, 61.0, 59.5, 58.8, 60.9])):
        lab.results.add(name, {"model": True, "num_workers": 1, "batch_size": 8},
                        {"step_ms_mean": sum(rounds) / 5, "samples_per_s": 8000 * 5 / sum(rounds),
                         "round_means_ms": rounds})
    noisy = lab.sweep_table({1: "noisy"}, sum(t_batch) / 5, t_batch)
    assert noisy["samples_per_s"].iloc[0] > noisy["predicted_samples_per_s"].iloc[0]   # the mean is above
    assert not noisy["beats_prediction"].iloc[0] and "Every point is at or below" in lab.bound_sentence(noisy)
    fast = lab.sweep_table({1: "fast"}, sum(t_batch) / 5, t_batch)
    assert fast["beats_prediction"].iloc[0]
    assert "beyond this run's noise" in lab.bound_sentence(fast) and "not a bound" in lab.bound_sentence(fast)


def test_a_point_within_t_batchs_range_does_not_beat_its_prediction(tmp_path):
    """Another run's figures (0 workers, batch 8, a 9.4 ms stand-in step): the point is faster than the prediction
    beyond its rounds' noise (1.05x, interval 1.02-1.11), but not faster than the prediction at T_batch's fastest
    round: no claim that it beats the bound."""
    lab = make_lab(tmp_path, num_workers=2)
    lab.batch_size = 8
    lab.ceilings[8] = 9.405
    t_batch = [58.7, 58.6, 56.4, 58.6, 66.1]
    rounds = [66.4, 64.4, 65.6, 66.6, 66.9]
    lab.results.add("nw0", {"model": True, "num_workers": 0, "batch_size": 8},
                    {"step_ms_mean": 65.994, "samples_per_s": 121.22, "round_means_ms": rounds})
    sweep = lab.sweep_table({0: "nw0"}, sum(t_batch) / 5, t_batch)
    implied = [t + 9.405 for t in t_batch]
    assert compare.compare_times(implied, rounds)["verdict"] == "faster"   # beyond the noise ...
    assert sweep["samples_per_s"].iloc[0] < sweep["predicted_high"].iloc[0]   # ... but within T_batch's range
    assert not sweep["beats_prediction"].iloc[0] and "Every point is at or below" in lab.bound_sentence(sweep)


def test_one_run_per_sawtooth_and_the_waves_in_words(tmp_path):
    lab = reported_lab(tmp_path)
    lab.results.add("sweep nw=3", {"model": True, "num_workers": 3, "batch_size": 2},
                    {"step_ms_mean": 30.0, "round_means_ms": [40.0, 20.0, 30.0], "times_ms": [1.0] * 9,
                     "round_times_ms": [[90.0, 5.0, 5.0], [50.0, 5.0, 5.0], [80.0, 5.0, 5.0]],
                     "round_warmup_ms": [[100.0], [101.0], [102.0]]})
    assert lab.one_run("sweep nw=3") == ([102.0], [80.0, 5.0, 5.0])   # the round with the median mean, not all joined
    assert lab.one_run("sweep nw=1") == ([50.0], [60.0, 20.0, 40.0])   # a row of one run: its own steps
    three = lab.waves_sentence("sweep nw=3", 3)
    assert "**1 long**" in three and "median is a short step" in three
    lab.results.add("sweep two", {"model": True, "num_workers": 2, "batch_size": 2},
                    {"step_ms_mean": 30.0, "times_ms": [50.0, 5.0, 52.0, 6.0]})
    assert "median falls between the two kinds" in lab.waves_sentence("sweep two", 2)


def test_the_stages_chart_and_the_slowest_stage_per_variant(tmp_path):
    lab = reported_lab(tmp_path)
    assert list(lab.stages_table().columns) == ["mask", "decode JPEG"]   # stages that cost nothing left out
    lab.plot_stages()
    assert (lab.results.dir / "stages_per_variant.png").exists()
    assert lab.slowest_stages() == {"baseline": "mask", "bool_dilation": "decode JPEG"}
    assert lab.results.notes["slowest_stage_per_variant"] == {"baseline": "mask", "bool_dilation": "decode JPEG"}


def test_the_fixes_and_options_tables(tmp_path):
    lab = reported_lab(tmp_path)
    fixes = lab.fixes_table(["baseline", "crop_first", "gpu_decode"], {"baseline": 30.0, "crop_first": 15.0,
                                                                       "gpu_decode": 5.0})
    assert fixes.loc["crop_first", "predicted_samples_per_s"] == pytest.approx(
        loop.predicted_samples_per_s(1, 15.0, 10.0, 2))
    assert math.isnan(fixes.loc["gpu_decode", "predicted_samples_per_s"])   # its decode is not in the workers
    assert "x_ceiling" not in fixes and fixes.loc["crop_first", "measured_over_predicted"] == pytest.approx(
        100.0 / loop.predicted_samples_per_s(1, 15.0, 10.0, 2))
    opts = lab.options_table("crop_first")
    assert list(opts.index) == ["crop_first prefetch_factor=4"]   # the failed option is left out


def test_the_idle_table(tmp_path):
    lab = reported_lab(tmp_path)
    t = lab.idle_table({"baseline": {"share": 0.6}, "crop_first": {"share": 0.2, "gpu_idle_share": 0.3}})
    t = t.set_index("variant")
    assert t.loc["baseline", "timed_wait_pct"] == 50.0 and math.isnan(t.loc["baseline", "gpu_idle_hta_pct"])
    assert t.loc["crop_first", "gpu_idle_hta_pct"] == pytest.approx(30.0)
    cpu = lab.idle_table({"baseline": {"share": 0.6}})   # no GPU: no idle-GPU column of dashes
    assert list(cpu.columns) == ["variant", "trace_wait_pct", "timed_wait_pct"]


def test_the_summary_puts_the_ceiling_and_the_plan_first(tmp_path):
    lab = reported_lab(tmp_path)
    s = lab.summary(["baseline", "crop_first", "bool_dilation", "uint8_device"])
    assert list(s.index[:4]) == ["ceiling", "baseline", "crop_first", "bool_dilation"]
    assert "ceiling (re-measured)" not in s.index and "failed one" not in s.index
    assert {"num_workers", "step_ms_mean", "samples_per_s"} <= set(s.columns)
    # no ratio to the ceiling without an interval, no constant stand-in column, no column without a value here
    assert not {"x_ceiling", "stand_in", "peak_mem_mb", "step_ms_p25", "data_wait_share"} & set(s.columns)
    assert s.loc["baseline", "data_wait_pct"] == 50.0   # a share as a percentage
    lab.plot_variants(["baseline", "crop_first"])   # no comparison yet: an empty chart, no error
    lab.results.compare("baseline", "crop_first", [40.0, 41.0, 39.0], [20.0, 21.0, 19.0])
    lab.plot_variants(["baseline", "crop_first", "bool_dilation"])
    assert (lab.results.dir / "variants.png").exists()


def test_compare_rows_and_the_fix_lines(tmp_path, capsys):
    lab = reported_lab(tmp_path)
    for name, times in (("v0", [40.0, 42.0, 38.0, 41.0]), ("v1", [20.0, 21.0, 19.0, 20.0]), ("v2", [40.5, 39.0, 41.0, 40.0])):
        lab.results.add(name, {"model": True}, {"step_ms_mean": sum(times) / 4, "times_ms": times})
        lab.results.add(f"pipe {name}", {"model": False}, {"step_ms_mean": {"v0": 30.0, "v1": 10.0, "v2": 12.0}[name]})
    c = lab.compare("v0", "v1")
    assert c["verdict"] == "faster" and lab.results.comparisons == [c] and c["metric"] == "step_ms_mean"
    assert lab.compare("v0", "failed one") is None and "failed" in capsys.readouterr().out
    nil = lab.compare("v0", "v2")
    assert nil["verdict"] == "no difference"
    lab.stages = {"v0": {"mask": 2.0, "scale": 1.0}, "v1": {"mask": 0.5, "scale": 1.2}, "v2": {"mask": 0.5, "scale": 0.9}}
    lab.profile_steps = 3
    changed = lab.changed("v0", "v1", ["mask", "scale"])
    assert "mask: 2.00 → **0.50 ms**" in changed and "scale: 1.00 → **1.20 ms**" in changed   # a stage that grew ...
    assert "the whole pipeline 3.00 → **1.70 ms** (-43%)" in changed                       # ... beside the total
    lines = lab.fix_lines(["v0", "v1", "v2"], {v: f"pipe {v}" for v in ("v0", "v1", "v2")}, against="v0").splitlines()
    assert len(lines) == 2 and "T_batch 30 → 10 ms" in lines[0] and "ms per step saved" in lines[0]
    assert "disagree in direction" in lines[1]          # profile 1.70 -> 1.40 while T_batch 10 -> 12
    assert "does not resolve a difference, so no ms saved" in lines[1]
    lab.stages["gpu_decode"] = {"mask": 0.1}   # a variant with no T_batch row (its decode is in the main process)
    assert len(lab.fix_lines(["v0", "v1", "gpu_decode"], {"v0": "pipe v0", "v1": "pipe v1"}).splitlines()) == 1


def test_the_article_table_compares_each_column_with_its_own_baseline(tmp_path):
    lab = reported_lab(tmp_path)
    t = lab.article_table({1: "sweep nw=1", 2: "sweep nw=2"})
    assert list(t.index) == list(pl.ARTICLE_STEP_S) and t.index.name == "step"
    assert t.loc["crop first", "article_ratio"] == pytest.approx(0.72 / 1.3)
    assert t.loc["crop first", "this_run_ratio"] == pytest.approx(20.0 / 40.0)
    assert t.loc["8 workers", "this_run_ratio"] == pytest.approx(25.0 / 50.0)   # sweep nw=2 against sweep nw=1
    assert t["this_run_verdict"].isna().all()      # no comparison made yet: no verdict, shown as "–"
    lab.results.compare("baseline", "crop_first", [40.0, 41.0, 39.0], [20.0, 21.0, 19.0])
    assert lab.article_table({1: "sweep nw=1"}).loc["crop first", "this_run_verdict"] == "faster"
    no_2x = lab.article_table({1: "sweep nw=1"})   # no point at twice the workers: no figure, not a wrong one
    assert math.isnan(no_2x.loc["8 workers", "this_run_step_ms"])


def test_the_panel_table_shows_the_baseline_and_the_panel_rows(tmp_path):
    lab = reported_lab(tmp_path)
    lab.results.add("panel crop_first nw=1 bs=2", {"num_workers": 1, "batch_size": 2, "model": True},
                    {"step_ms_mean": 20.0})
    t = lab.panel_table()
    assert list(t["experiment"]) == ["baseline", "panel crop_first nw=1 bs=2"]


def test_idle_shares_take_windows_in_turns_and_pool_them(tmp_path, monkeypatch):
    """profile_rounds windows per variant, the variants in turns (a burst of other load falls on both), the share
    pooled over every window's steps (not a mean of the windows' shares); a window that cannot run fails the variant."""
    from helpers.lessons.data_pipeline import idle as idle_mod
    lab = make_lab(tmp_path, num_workers=0)
    lab.profile_rounds, lab.profile_cycles = 3, 4
    order, windows = [], iter([(10.0, 20.0), (1.0, 10.0), (30.0, 40.0), (2.0, 10.0), (20.0, 30.0), (3.0, 30.0)])
    monkeypatch.setattr(loop, "profile_loop", lambda variant, *a, **k: order.append((variant, k["cycles"])))
    monkeypatch.setattr(idle_mod.profiling, "trace_files", lambda tdir: [tdir])
    monkeypatch.setattr(idle_mod, "load_trace", lambda path: path)
    monkeypatch.setattr(idle_mod, "dataloader_wait_share",
                        lambda trace: (lambda n, s: {"next_ms": n, "step_ms": s, "share": n / s})(*next(windows)))
    got = lab.idle_shares(["baseline", "crop_first"])
    assert order == [("baseline", 4), ("crop_first", 4)] * 3
    assert got["baseline"]["share"] == pytest.approx(60 / 90) and got["crop_first"]["share"] == pytest.approx(6 / 50)
    assert got["baseline"]["windows"] == 3 and got["baseline"]["window_shares"] == [0.5, 0.75, 20 / 30]
    m = row(lab, "idle share crop_first")["metrics"]
    assert m["trace_wait_share"] == round(6 / 50, 4) and m["profiled_windows"] == 3 and m["cycles_per_window"] == 4

    calls = iter([None, RuntimeError("worker died")])   # crop_first's first window runs, its second does not
    def flaky(variant, *a, **k):
        if variant == "crop_first":
            err = next(calls)
            if err:
                raise err
    monkeypatch.setattr(loop, "profile_loop", flaky)
    windows = iter([(1.0, 2.0)] * 6)
    monkeypatch.setattr(idle_mod, "dataloader_wait_share",
                        lambda trace: (lambda n, s: {"next_ms": n, "step_ms": s, "share": n / s})(*next(windows)))
    got = lab.idle_shares(["baseline", "crop_first"])
    assert list(got) == ["baseline"] and got["baseline"]["windows"] == 3
    assert row(lab, "idle share crop_first")["status"] == "failed"
