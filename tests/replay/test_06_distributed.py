"""Replay: notebook 06's readings on the H100 reference run's results (its CPU fallback: 2 gloo ranks at smoke
sizes on the one-GPU machine)."""
from __future__ import annotations

from helpers.lessons.distributed import views
from helpers.notebook import reference, sizes

from .conftest import h100

NB = "06_distributed"


def test_a_super_linear_speedup_is_flagged():
    """06-2: "2.11× (1.93–2.44)" from 2 ranks went unexplained: more than 2 ranks can give (the means, 91.9 vs
    43.5 ms, are pulled up by the single process's slow steps). The H100's entry predates the samples, so the
    medians cannot be read back from it: flagged, median None."""
    c = h100(NB).comparison("single process", "DDP 2 ranks")
    s = views.speedup(c, 2)
    assert s["super_linear"] and round(s["mean_ratio"], 2) == 2.11 and s["median_ratio"] is None


def test_the_speedup_reads_the_medians_and_counts_the_slow_steps():
    """With samples like the H100's (single: median 84.8 ms, mean 91.9 ms from a few slow steps; DDP: 42.5 / 43.5)
    the median ratio is 2.0× and the slow steps are counted."""
    single = [84.8] * 20 + [130.0, 125.0, 120.0, 121.0]
    ddp = [42.5] * 22 + [50.0, 55.0]
    s = views.speedup({"ratio": sum(single) / len(single) / (sum(ddp) / len(ddp)), "samples": {"a": single, "b": ddp}},
                      2)
    assert s["super_linear"] and round(s["median_ratio"], 2) == 2.0 and s["slow_steps"] == 4 and s["n"] == 24


def test_the_gradients_fit_one_25_mb_bucket():
    """06-3: "2% with 25 MB": the H100 ran the smoke model, whose 2.5 MB of gradients fit in one 25 MB bucket, so
    its one all-reduce can only start when the backward has ended."""
    mb = views.grad_mb(sizes.DISTRIBUTED["smoke"])
    sweep = h100(NB).doc["notes"]["bucket_sweep"]
    assert 2.4 < mb < 2.7 and mb < sweep[-1]["bucket_cap_mb"]
    assert sweep[-1]["all-reduces per step"] == 1 and sweep[-1]["overlap share"] < 0.05


def test_the_effects_table_shows_the_h100_beside_this_run():
    t = views.effects_table({}, h100(NB), 2, 8)
    assert list(t.columns) == reference.ARTICLE_COLUMNS
    by = t.set_index("article")
    assert by.loc["2× at best (2 ranks)", "H100 reference"].startswith("0.47× the time [0.41, 0.52]: faster")
    no_sync = by.loc["8 → 1 all-reduces per optimizer step; faster", "H100 reference"]
    assert no_sync.startswith("8 → 1 all-reduces; 0.47× the time")
    assert by.loc["smaller buckets overlap more", "H100 reference"] == "0.25 MB: 76%, 25 MB: 2%"
    assert by["H100 reproduces?"].tolist() == ["yes", "yes", "yes", "yes"]
    assert set(t["this run"]) == {reference.NOT_MEASURED} and "nan" not in t.to_string().lower()
