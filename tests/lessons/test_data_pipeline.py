"""helpers.lessons.data_pipeline: the dilations agree, transforms keep shapes/dtypes, bad input is refused clearly."""
import numpy as np
import pytest
import torch
from PIL import Image

from helpers.lessons import data_pipeline as pl
from helpers.lessons.data_pipeline import checks, loop


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("ratio", [0.0, 0.05, 0.25, 0.6, 1.0])
@pytest.mark.parametrize("shape", [(1, 1), (7, 5), (64, 64), (33, 80)])
def test_dilations_give_identical_masks(seed, ratio, shape):
    mask = np.random.default_rng(seed).random(shape) < ratio
    a, b = pl.dilate_convolve(mask), pl.dilate_shift(mask)
    assert a.dtype == b.dtype == np.bool_
    np.testing.assert_array_equal(a, b)


def test_dilation_is_a_cross():
    m = np.zeros((5, 5), bool)
    m[2, 2] = True
    d = pl.dilate_shift(m)
    assert d.sum() == 5 and d[1, 2] and d[3, 2] and d[2, 1] and d[2, 3] and not d[1, 1]


@pytest.fixture
def pil_image():
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (53, 80, 3), dtype=np.uint8), "RGB")


def test_each_transform_shape_and_dtype(pil_image):
    from torchvision.transforms import PILToTensor, RandomCrop

    t = PILToTensor()(pil_image)
    assert t.shape == (3, 53, 80) and t.dtype == torch.uint8
    c = RandomCrop(32)(t)
    assert c.shape == (3, 32, 32) and c.dtype == torch.uint8
    m = pl.RandomMask(0.25, "bool_shift")(c)
    assert m.shape == c.shape and m.dtype == torch.uint8
    assert ((m == 0) | (m == c)).all()
    y = pl.ConvertColor()(m)
    assert y.shape == c.shape and y.dtype == torch.float32
    s = pl.Scale()(y)
    assert s.dtype == torch.float32
    assert pl.PILRandomCrop(32)(pil_image).size == (32, 32)


def test_color_conversion_matches_the_formula_and_batches():
    x = torch.randint(0, 256, (2, 3, 4, 5), dtype=torch.uint8)
    out = pl.ConvertColor()(x)
    r, g, b = x.float().unbind(1)
    np.testing.assert_allclose(out[:, 0], 0.299 * r + 0.587 * g + 0.114 * b, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(out[:, 1], -0.168736 * r - 0.331264 * g + 0.5 * b + 128, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(pl.ConvertColor()(x[0]), out[0])
    white = torch.full((3, 1, 1), 255, dtype=torch.uint8)
    torch.testing.assert_close(pl.ConvertColor()(white).flatten(), torch.tensor([255.0, 128.0, 128.0]), atol=0.01, rtol=0)


def test_compose_labels_each_transform(pil_image):
    from torch.profiler import profile

    tf = pl.build_transform("baseline", 32)
    with profile() as prof:
        tf(pil_image)
    names = {e.key for e in prof.key_averages()}
    assert {"PILToTensor", "RandomCrop", "RandomMask", "ConvertColor", "Scale"} <= names


def test_toy_cnn_output_and_size_check():
    model = pl.toy_cnn(32)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 10)
    with pytest.raises(ValueError, match="power of two"):
        pl.toy_cnn(48)


def test_sample_images_exist():
    paths = pl.sample_paths()
    assert paths and all(p.stat().st_size > 10_000 for p in paths)
    assert pl.load_image(paths[0]).size == (800, 533)


def test_missing_and_corrupt_images_give_clear_errors(tmp_path):
    with pytest.raises(pl.ImageLoadError, match="does not exist.*make_sample_images"):
        pl.load_image(tmp_path / "nope.jpg")
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 truncated" * 5)
    with pytest.raises(pl.ImageLoadError, match="could not be decoded"):
        pl.load_image(bad)
    with pytest.raises(FileNotFoundError, match="make_sample_images"):
        pl.sample_paths(tmp_path / "empty")


def test_corrupt_image_in_a_worker_gives_a_readable_error(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not a jpeg at all")
    with pytest.raises(RuntimeError, match="worker process 0.*could not be decoded"):
        pl.run_variant("crop_first", 1, 2, 1, warmup=0, crop=32, paths=[bad], max_workers=1)


def test_a_failed_workers_loader_is_shut_down_when_the_row_fails(tmp_path):
    """The worker is gone when run_variant raises, before any garbage collection: the failure's frames no longer
    hold the iterator (left to the collector, its workers each waited out the DataLoader's 5 s timeout)."""
    import gc

    import psutil

    bad = tmp_path / "corrupt.jpg"
    bad.write_bytes(pl.sample_paths()[0].read_bytes()[:2000])
    gc.disable()
    try:
        with pytest.raises(RuntimeError, match="could not be decoded") as info:
            pl.run_variant("crop_first", 1, 2, 2, warmup=0, crop=32, paths=[bad], max_workers=1)
        alive = [p for p in psutil.Process().children() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        gc.enable()
    assert not alive, f"the failed row left its DataLoader worker running: {alive}"
    tb = info.value.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code.co_name == "run_variant" and info.value.__context__ is None   # raised there, no chain


def test_dying_worker_is_reported():
    with pytest.raises(RuntimeError, match="worker died"):
        pl.run_variant("crop_first", 1, 2, 2, warmup=0, crop=32, die_at=1, max_workers=1)


def first_batch(variant, batch_size=4, crop=64):
    """One batch of a variant as the model sees it (in the main process): ``(x, y)`` on the CPU."""
    loader = pl.make_loader(variant, 0, batch_size, crop=crop, length=batch_size)
    return pl.to_device(next(iter(loader)), variant, "cpu", crop)


@pytest.mark.parametrize("variant", [v for v in pl.VARIANTS if v != "gpu_decode"])
def test_variants_give_batches_of_the_same_shape_and_dtype(variant):
    x, y = first_batch(variant, batch_size=3, crop=32)
    assert x.shape == (3, 3, 32, 32) and x.dtype == torch.float32
    assert y.shape == (3,) and y.dtype == torch.int64
    assert float(x.min()) >= -1.0 and float(x.max()) <= 1.5  # YUV / 255 with the (0, 128, 128) offset


def test_run_variant_metrics():
    m = pl.run_variant("uint8_device", 0, 2, 2, warmup=1, crop=32)
    assert m["steps_timed"] == 2 and len(m["warmup_ms"]) == 1
    assert m["samples_per_s"] > 0 and 0 <= m["data_wait_share"] <= 1
    assert m["x_shape"] == [2, 3, 32, 32]
    for key in ("step_ms_mean", "step_ms_median", "step_ms_p25", "step_ms_p75", "first_step_ms"):
        assert m[key] > 0
    # samples/s is over the whole timed window (the mean), not batch / median
    assert m["samples_per_s"] == pytest.approx(2 * 1000.0 / m["step_ms_mean"], rel=1e-2, abs=0.01)


@pytest.mark.parametrize("nw,bs,match", [(-1, 4, "negative"), (10_000, 4, "CPU cores"), (0, 0, "at least 1"),
                                         (1.5, 4, "whole number"), (0, True, "whole number")])
def test_bad_num_workers_or_batch_size_refused(nw, bs, match):
    with pytest.raises(ValueError, match=match):
        pl.run_variant("baseline", nw, bs, 1)


def test_unknown_variant_and_gpu_decode_on_cpu_refused():
    with pytest.raises(ValueError, match="unknown pipeline variant"):
        pl.check_config("fastest", 0, 4)
    with pytest.raises(ValueError, match="CUDA"):
        pl.check_config("gpu_decode", 0, 4, "cpu")


def test_pipeline_only_mode_skips_the_model():
    m = pl.run_variant("crop_first", 0, 2, 2, warmup=1, crop=32, train=False)
    assert m["steps_timed"] == 2 and m["x_shape"] == [2, 3, 32, 32] and m["data_wait_share"] > 0.5


# -- the comparison sees the stall (issue 10: "the median hides the stall") --------------------------
def test_mean_comparison_sees_the_stall_that_the_median_hides():
    """4 workers: batches arrive in waves, one long step then three short ones, for 3 full cycles."""
    stalled = [40.0, 1.0, 1.0, 1.0] * 3      # input-bound: waits 40 ms every 4th step
    steady = [5.0] * 12                       # a fixed pipeline: every step 5 ms
    a, b = pl.summarize(stalled, 8), pl.summarize(steady, 8)
    assert a["step_ms_median"] < b["step_ms_median"]          # the median says the stalled loop is faster...
    assert pl.comparison_ms(a) > pl.comparison_ms(b)          # ...the comparison does not
    assert pl.comparison_ms(a) / pl.comparison_ms(b) == pytest.approx(10.75 / 5.0)
    assert a["step_ms_mean"] == pytest.approx(10.75) and a["step_ms_max"] == 40.0
    assert a["samples_per_s"] < b["samples_per_s"]
    assert a["samples_per_s"] == pytest.approx(8 * 12 / (129 / 1000.0), rel=1e-4)


def test_cycle_steps_cover_whole_worker_cycles():
    assert pl.cycle_steps(4, 3) == 12
    assert pl.cycle_steps(16, 3, at_least=15) == 48      # today's 15 steps with 16 workers: not one cycle's wait
    assert pl.cycle_steps(4, 3, at_least=13) == 16       # rounded up to whole cycles
    assert pl.cycle_steps(0, 3, at_least=5) == 5
    assert pl.cycle_steps(2, 2, at_least=1) == 4


def test_predicted_throughput_is_the_min_of_workers_and_device():
    # T_batch 100 ms, T_step 20 ms, batch 8: 1 worker -> 80/s, 4 workers -> 320/s, 8 workers -> device bound 400/s
    assert pl.predicted_samples_per_s(1, 100, 20, 8) == pytest.approx(80)
    assert pl.predicted_samples_per_s(4, 100, 20, 8) == pytest.approx(320)
    assert pl.predicted_samples_per_s(8, 100, 20, 8) == pytest.approx(400)
    assert pl.predicted_samples_per_s(0, 100, 20, 8) == pytest.approx(8000 / 120)
    with pytest.raises(ValueError):
        pl.predicted_samples_per_s(2, 0, 20, 8)


# -- the stand-in for the accelerator ------------------------------------------------------------------
def test_stand_in_takes_its_time_without_using_the_cpu():
    import time

    s = pl.StandIn(50)
    w0, c0 = time.perf_counter(), time.process_time()
    s(None, None)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    assert wall >= 0.05
    assert cpu < 0.02, f"the stand-in used {cpu * 1000:.1f} ms of CPU"
    for bad in (0, -1, "10", True, None):
        with pytest.raises(ValueError, match="stand-in"):
            pl.StandIn(bad)
    assert isinstance(pl.make_step(32, "cpu", stand_in_ms=5), pl.StandIn)


def test_run_variant_with_the_stand_in_and_workers():
    m = pl.run_variant("crop_first", 1, 2, 4, warmup=1, crop=32, stand_in_ms=5, max_workers=1)
    assert m["steps_timed"] == 4 and m["step_ms_mean"] >= 5.0 and m["step_ms_median"] >= 5.0


# -- one clock for every row ----------------------------------------------------------------------------
def test_ceiling_and_variants_are_timed_by_the_same_loop(monkeypatch):
    calls = []
    real = pl.timed_loop

    def spy(*a, **k):
        calls.append(k["variant"])
        return real(*a, **k)

    monkeypatch.setattr(loop, "timed_loop", spy)
    c = pl.ceiling(2, 32, steps=3, warmup=1, stand_in_ms=2)
    m = pl.run_variant("crop_first", 0, 2, 3, warmup=1, crop=32, stand_in_ms=2)
    assert calls == ["ceiling", "crop_first"]
    assert set(c) >= {"step_ms_mean", "step_ms_median", "samples_per_s"} and c["steps_timed"] == 3
    assert c["step_ms_mean"] >= 2.0 and m["step_ms_mean"] >= c["step_ms_mean"] * 0.5


def test_peak_memory_is_reset_for_every_row(monkeypatch):
    events = []
    monkeypatch.setattr(loop.dv, "reset_peak_memory", lambda dev=None: events.append("reset"))
    real = pl.timed_loop
    monkeypatch.setattr(loop, "timed_loop", lambda *a, **k: (events.append("loop"), real(*a, **k))[1])
    pl.run_variant("crop_first", 0, 2, 1, warmup=0, crop=32, stand_in_ms=1)
    pl.ceiling(2, 32, steps=1, warmup=0, stand_in_ms=1)
    assert events == ["reset", "loop", "reset", "loop"]


def test_overlapped_copy_needs_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        pl.run_variant("crop_first", 0, 2, 1, warmup=0, crop=32, stand_in_ms=1, overlap_copy=True)


# -- hidden syncs: ConvertColor's constants are copied to a device once ------------------------------
def test_convert_color_copies_its_constants_once_per_device():
    from torch.overrides import TorchFunctionMode

    class Copies(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("to", "cuda", "copy_"):
                self.n += 1
            return func(*args, **(kwargs or {}))

    x = torch.zeros(2, 3, 4, 4, dtype=torch.uint8, device="meta")   # a non-CPU device, no GPU needed
    pl.ConvertColor()(x)                                              # first batch: copies the constants
    with Copies() as c:
        for _ in range(3):
            out = pl.ConvertColor()(x)
    assert c.n == 0, f"{c.n} copies of the constants for 3 batches"
    assert out.device.type == "meta" and out.dtype == torch.float32
    m1, _ = pl.yuv_constants("meta")
    m2, _ = pl.yuv_constants(torch.device("meta"))
    assert m1 is m2 and m1.device.type == "meta"


# -- shared memory ----------------------------------------------------------------------------------------
def test_shared_memory_check_says_what_to_do():
    need = pl.shm_needed_mb(4, 256, 256)                       # the article's size, float32, prefetch 2
    assert need == pytest.approx(4 * 2 * 256 * 3 * 256 * 256 * 4 / 2**20)
    assert pl.shm_needed_mb(4, 256, 256, bytes_per_value=1) == pytest.approx(need / 4)
    assert pl.shm_needed_mb(0, 256, 256) == 0
    with pytest.raises(pl.SharedMemoryTooSmall, match="64 MiB free.*--shm-size"):
        pl.check_shm(need, free_mb=64)
    assert "enough" in pl.check_shm(10, free_mb=64)


def test_workers_are_refused_before_starting_when_shm_is_too_small(monkeypatch):
    monkeypatch.setattr(checks, "shm_free_mb", lambda path=pl.SHM_PATH: 1.0)
    with pytest.raises(pl.SharedMemoryTooSmall, match="shm"):
        pl.run_variant("crop_first", 1, 64, 1, warmup=0, crop=64, stand_in_ms=1, max_workers=1)
    pl.run_variant("crop_first", 0, 2, 1, warmup=0, crop=32, stand_in_ms=1)   # no workers: no shm needed


# -- the GPU decode is checked against the CPU decode ----------------------------------------------------
@pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")
def test_decode_check_accepts_an_equivalent_decoder_and_refuses_a_wrong_one():
    from torchvision.io import decode_jpeg

    paths = pl.sample_paths()[:2]
    r = pl.check_decode(paths, "cpu")                                 # libjpeg-turbo (torchvision) vs PIL
    assert r["mean_abs"] <= 3.0
    bgr = lambda datas, dev: [d.flip(0) for d in decode_jpeg(datas, device=dev)]  # noqa: E731
    with pytest.raises(pl.DecodeMismatch, match="differs from the CPU decode"):
        pl.check_decode(paths, "cpu", decode=bgr)
    half = lambda datas, dev: [d[:, ::2] for d in decode_jpeg(datas, device=dev)]  # noqa: E731
    with pytest.raises(pl.DecodeMismatch, match="shape"):
        pl.check_decode(paths, "cpu", decode=half)


# -- the pipeline profile: window, sort, stages ---------------------------------------------------------
def test_profile_window_covers_two_worker_cycles_after_the_first(tmp_path):
    from helpers.measure import profiling

    prof = pl.profile_loop("crop_first", 2, 2, crop=32, trace_dir=tmp_path, stand_in_ms=1, active=1)
    steps = profiling.step_events(prof)
    assert len(steps) == 4 == prof.steps_recorded                     # 2 cycles of 2 workers
    assert profiling.trace_files(tmp_path)


def test_profile_table_sorts_by_cpu_time_even_with_a_device_and_fits_the_output(monkeypatch):
    from torch.profiler import ProfilerActivity

    from helpers.measure import profiling

    seen = {}

    class Averages:
        def table(self, **kw):
            seen.update(kw)
            return ""

    monkeypatch.setattr(profiling, "host_averages", lambda prof, *a: Averages())

    class FakeGpuProf:
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    pl.profile_table(FakeGpuProf())
    assert seen["sort_by"] == "cpu_time_total" and seen["max_name_column_width"] == 32
    assert profiling.sort_key(FakeGpuProf.activities) != seen["sort_by"]   # the default would sort by device time


def test_the_cpu_profile_table_fits_a_notebook_output_area(tmp_path):
    prof = pl.profile_loop("crop_first", 0, 2, crop=32, trace_dir=tmp_path, stand_in_ms=1, active=1)
    assert max(len(line) for line in pl.profile_table(prof).splitlines()) <= 124


def test_stage_ms_groups_labels_per_sample():
    st = pl.stage_ms({"load_image": 80.0, "RandomMask": 40.0, "ConvertColor": 4.0, "ConvertColor(batch)": 4.0}, 8)
    assert st["decode JPEG"] == 10.0 and st["mask"] == 5.0 and st["colour"] == 1.0 and st["crop"] == 0.0


def test_interleaved_runs_rotate_and_pool(monkeypatch):
    order = []
    real = pl.run_variant

    def spy(**kw):
        order.append(kw["variant"])
        if kw["variant"] == "bool_dilation":
            raise RuntimeError("boom")
        return real(**kw)

    monkeypatch.setattr(loop, "run_variant", spy)
    out = pl.run_interleaved({"a": {"variant": "baseline"}, "b": {"variant": "crop_first"},
                              "c": {"variant": "bool_dilation"}}, 3,
                             num_workers=0, batch_size=2, steps=2, warmup=1, crop=32, stand_in_ms=1)
    assert order == ["baseline", "crop_first", "bool_dilation", "crop_first", "baseline", "baseline", "crop_first"]
    assert isinstance(out["c"], RuntimeError)
    assert out["a"]["steps_timed"] == 6 and out["a"]["rounds"] == 3 and len(out["a"]["round_means_ms"]) == 3
    # each round is one loader run, kept apart for the sawtooth (never joined)
    assert [len(t) for t in out["a"]["round_times_ms"]] == [2, 2, 2] and len(out["a"]["round_warmup_ms"]) == 3
    assert 0 <= out["b"]["data_wait_share"] <= 1 and out["b"]["step_ms_mean"] >= 1.0


def test_main_process_runs_the_pipeline_with_one_thread_like_a_worker(monkeypatch):
    seen = []
    monkeypatch.setattr(loop, "make_step", lambda *a, **k: (lambda x, y: seen.append(torch.get_num_threads())))
    before = torch.get_num_threads()
    pl.run_variant("crop_first", 0, 2, 2, warmup=0, crop=32, stand_in_ms=1)
    assert seen == [1, 1] and torch.get_num_threads() == before


@pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")
def test_the_gpu_decode_data_path_runs_with_workers(monkeypatch):
    """gpu_decode's workers ship JPEG bytes; decode_jpeg also runs on the CPU, so its data path is tested here
    (only the refusal of gpu_decode on a CPU is bypassed)."""
    monkeypatch.setattr(loop, "check_config", lambda *a, **k: None)
    m = pl.run_variant("gpu_decode", 1, 2, 2, warmup=1, crop=32, device="cpu", stand_in_ms=1, max_workers=1)
    assert m["x_shape"] == [2, 3, 32, 32] and m["x_dtype"] == "torch.float32"
    assert m["decode_vs_cpu_mean_abs"] <= 3.0


def test_shared_memory_advice_holds_what_is_needed():
    # the notebook's sweep at 16 workers needs ~6 GiB at full scale: "--shm-size=2g" would not do
    need = pl.shm_needed_mb(16, 256, 256)
    with pytest.raises(pl.SharedMemoryTooSmall) as exc:
        pl.check_shm(need, free_mb=64)
    size = int(str(exc.value).split("--shm-size=")[1].split("g")[0])
    assert size * 1024 >= need
    assert pl.shm_advice(10) == "1g"


def test_profiled_workers_are_refused_before_starting_when_shm_is_too_small(monkeypatch, tmp_path):
    monkeypatch.setattr(checks, "shm_free_mb", lambda path=pl.SHM_PATH: 1.0)
    with pytest.raises(pl.SharedMemoryTooSmall, match="shm"):
        pl.profile_loop("crop_first", 1, 64, crop=64, trace_dir=tmp_path, stand_in_ms=1)


def test_the_bound_of_a_gpu_decode_pipeline_is_the_ceiling_not_the_cpu_decode_bound():
    # full scale on a GPU: ceiling 40 ms, CPU decode bound 96 ms; gpu_decode at 100 ms is 2.5x its own bound
    assert pl.bound_ms("gpu_decode", 40.0, 96.0) == 40.0
    assert not 100.0 <= 1.5 * pl.bound_ms("gpu_decode", 40.0, 96.0)
    # a CPU decoder cannot beat either: "within 1.5x of the ceiling or of the decode bound" = 1.5x the larger
    assert pl.bound_ms("uint8_device", 40.0, 96.0) == 96.0
    assert pl.bound_ms("crop_first", 120.0, 96.0) == 120.0
    with pytest.raises(ValueError):
        pl.bound_ms("crop_first", 0.0, 96.0)


def test_the_stand_in_keeps_the_baseline_input_bound_at_any_worker_count():
    batch_ms = 400.0                               # one process prepares a baseline batch in 400 ms
    for nw in (1, 2, 4, 8):                        # 2, 4, 8, 16+ cores: NUM_WORKERS = half the cores
        stand_in = pl.stand_in_step_ms(batch_ms, nw, 0.5)
        baseline_step = batch_ms / nw              # what nw workers deliver per batch
        assert baseline_step >= 1.5 * stand_in    # the notebook's check: input-bound
    assert pl.stand_in_step_ms(400.0, 0, 0.5) == 200.0
    with pytest.raises(ValueError):
        pl.stand_in_step_ms(0.0, 4)


def test_gpu_idle_share_reads_a_real_gpu_trace_quietly(tmp_path, capfd):
    # a real A100 training trace (Holistic Trace Analysis' test data, MIT): HTA called directly prints its parse
    # timings ("Parsed ... time = ...", "leaving parse_traces ...") into the notebook's output
    import shutil

    from tests.shared_data import gpu_trace

    src = gpu_trace("hta_alexnet.json.gz")
    shutil.copy(src, tmp_path / src.name)
    capfd.readouterr()
    share = pl.gpu_idle_share(tmp_path)
    out, err = capfd.readouterr()
    assert 0.9 < share <= 1.0                       # that run's GPU is idle 99.5% of its kernel span
    assert "Parsed" not in out + err and "parse" not in out + err


def test_gpu_idle_share_is_none_for_a_cpu_trace(tmp_path):
    doc = {"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 10, "pid": 1, "tid": 1, "cat": "user_annotation"}]}
    import json
    (tmp_path / "t.pt.trace.json").write_text(json.dumps(doc))
    assert pl.gpu_idle_share(tmp_path) is None


def test_unpinned_batches_held_by_the_loop_count_in_shared_memory(monkeypatch):
    # the article's size, 4 workers, prefetch 2: 8 batches of 192 MiB in the workers' hands; without pinning the
    # loop's batch (and the previous one while next() waits) stay in /dev/shm too: 10 batches, 1920 MiB
    assert pl.shm_needed_mb(4, 256, 256) == pytest.approx(8 * 192)
    assert pl.shm_needed_mb(4, 256, 256, pinned=False) == pytest.approx(10 * 192)
    seen = []
    monkeypatch.setattr(loop, "check_shm", lambda need, *a, **k: seen.append(need) or "ok")
    pl.run_variant("crop_first", 1, 2, 1, warmup=0, crop=32, stand_in_ms=1)          # CPU: nothing pinned
    assert seen[-1] == pytest.approx(pl.shm_needed_mb(1, 2, 32, pinned=False))


def test_overlapped_copy_runs_on_a_side_stream_beside_the_step(monkeypatch):
    """Fake CUDA streams: batch k+1 is copied on the side stream after step k is queued and before the step's
    synchronisation; the step's stream waits for the side stream first and records its use of x and y."""
    import contextlib

    log, state = [], {}

    class FakeStream:
        def __init__(self, name):
            self.name = name

        def wait_stream(self, other):
            log.append(("wait", self.name, other.name))

    main, side = FakeStream("main"), FakeStream("side")
    state["cur"] = main

    @contextlib.contextmanager
    def on(stream):
        prev, state["cur"] = state["cur"], stream
        try:
            yield
        finally:
            state["cur"] = prev

    class T:
        def __init__(self, n):
            self.n, self.recorded = n, []

        def record_stream(self, s):
            self.recorded.append(s.name)

    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: side)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: state["cur"])
    monkeypatch.setattr(torch.cuda, "stream", on)
    monkeypatch.setattr(loop, "to_device", lambda b, v, d, c: (log.append(("copy", b, state["cur"].name)), (T(b), T(b)))[1])
    monkeypatch.setattr(loop.dv, "synchronize", lambda dev=None: log.append(("sync",)))
    xs = []

    def step(x, y):
        xs.append(x)
        log.append(("step", x.n, state["cur"].name))

    times, waits, warm, _ = pl.timed_loop(iter(range(10)), step, "cuda", variant="crop_first", crop=32,
                                          steps=3, warmup=1, overlap_copy=True)
    assert len(times) == 3 and len(warm) == 1
    assert [e for e in log if e[0] == "copy"] == [("copy", k, "side") for k in range(4)]   # no copy of a 5th batch
    assert [e for e in log if e[0] == "step"] == [("step", k, "main") for k in range(4)]
    for k in range(4):
        i = log.index(("step", k, "main"))
        assert log[i - 1] == ("wait", "main", "side")          # the step waits for its batch's copy
        if k < 3:
            assert log[i + 1] == ("copy", k + 1, "side")        # the next copy is queued beside this step ...
            assert log[i + 2] == ("sync",)                      # ... before the step is waited for
    assert all(x.recorded == ["main"] for x in xs)


@pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")
def test_gpu_decode_decodes_a_greyscale_jpeg_as_rgb_like_the_cpu_path(monkeypatch, tmp_path):
    # the CPU variants convert every image to RGB (PIL); decode_jpeg's default keeps one channel for a grey JPEG,
    # so the decode check failed on the shape and the colour conversion could not run
    rng = np.random.default_rng(0)
    grey = tmp_path / "grey.jpg"
    Image.fromarray(rng.integers(0, 256, (48, 64), dtype=np.uint8), "L").save(grey, quality=95)
    monkeypatch.setattr(loop, "check_config", lambda *a, **k: None)    # decode_jpeg also runs on the CPU
    m = pl.run_variant("gpu_decode", 0, 2, 1, warmup=0, crop=32, device="cpu", paths=[grey], stand_in_ms=1)
    assert m["x_shape"] == [2, 3, 32, 32]


def test_gpu_decode_waits_for_the_callers_stream_before_nvjpeg_writes(monkeypatch):
    import torchvision.io

    order = []

    class FakeStream:
        def synchronize(self):
            order.append("sync")

    class Stop(Exception):
        pass

    def fake_decode(datas, device=None, mode=None):
        order.append("decode")
        raise Stop

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream())
    monkeypatch.setattr(torchvision.io, "decode_jpeg", fake_decode)
    batch = ([torch.zeros(4, dtype=torch.uint8)], torch.zeros(1, 2, dtype=torch.long),
             torch.zeros(1, 8, 8, dtype=torch.bool), torch.zeros(1, dtype=torch.long))
    with pytest.raises(Stop):
        pl.to_device(batch, "gpu_decode", "cuda", crop=8)
    assert order == ["sync", "decode"]


def test_the_ceiling_runs_in_the_same_rounds_as_the_variants(monkeypatch):
    order = []
    real_ceiling = loop.ceiling

    def spy(*a, **kw):
        order.append("ceiling")
        return real_ceiling(*a, **kw)

    monkeypatch.setattr(loop, "ceiling", spy)
    out = pl.run_interleaved({"c": {"variant": "ceiling", "num_workers": 0}, "a": {"variant": "baseline"}}, 2,
                             num_workers=0, batch_size=2, steps=2, warmup=1, crop=32, stand_in_ms=1)
    assert order == ["ceiling", "ceiling"] and out["c"]["rounds"] == 2 and out["c"]["steps_timed"] == 4
    assert "data_wait_share" not in out["c"] and out["c"]["step_ms_mean"] >= 1.0


def test_cycle_means_average_whole_worker_cycles():
    assert pl.cycle_means([90.0, 10.0, 80.0, 20.0, 70.0], 2) == [50.0, 50.0]   # the incomplete last cycle is left out
    assert pl.cycle_means([5.0, 6.0], 0) == [5.0, 6.0]                          # 0 workers: a cycle is one step
    assert pl.cycle_means([5.0, 6.0, 7.0], 3) == [6.0]
