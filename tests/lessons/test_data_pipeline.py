"""helpers.lessons.data_pipeline.transforms and the arithmetic of experiment: the dilations agree, transforms keep
shapes and dtypes, bad input is refused clearly, worker errors read as one line, the GPU decode path (on a CPU)."""
import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, default_collate

from helpers.lessons.data_pipeline import transforms as pl
from helpers.lessons.data_pipeline import experiment as ex, transforms as tf


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
    c = RandomCrop(32)(t)
    assert c.shape == (3, 32, 32) and c.dtype == torch.uint8
    m = pl.RandomMask(0.25, "bool_shift")(c)
    assert m.shape == c.shape and m.dtype == torch.uint8 and ((m == 0) | (m == c)).all()
    y = pl.ConvertColor()(m)
    assert y.shape == c.shape and y.dtype == torch.float32 and pl.Scale()(y).dtype == torch.float32
    assert RandomCrop(32)(pil_image).size == (32, 32)   # crop first: the PIL image, before the tensor
    with pytest.raises(ValueError, match="dilation"):
        pl.RandomMask(0.25, "erode")


def test_color_conversion_matches_the_formula_and_batches():
    x = torch.randint(0, 256, (2, 3, 4, 5), dtype=torch.uint8)
    out = pl.ConvertColor()(x)
    r, g, b = x.float().unbind(1)
    np.testing.assert_allclose(out[:, 0], 0.299 * r + 0.587 * g + 0.114 * b, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(out[:, 1], -0.168736 * r - 0.331264 * g + 0.5 * b + 128, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(pl.ConvertColor()(x[0]), out[0])
    white = torch.full((3, 1, 1), 255, dtype=torch.uint8)
    torch.testing.assert_close(pl.ConvertColor()(white).flatten(), torch.tensor([255.0, 128.0, 128.0]), atol=0.01, rtol=0)


def test_convert_color_copies_its_constants_once_per_device():
    from torch.overrides import TorchFunctionMode

    class Copies(TorchFunctionMode):
        n = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("to", "cuda", "copy_"):
                Copies.n += 1
            return func(*args, **(kwargs or {}))

    x = torch.zeros(2, 3, 4, 4, dtype=torch.uint8, device="meta")   # a non-CPU device, no GPU needed
    pl.ConvertColor()(x)                                              # first batch: copies the constants
    with Copies():
        for _ in range(3):
            out = pl.ConvertColor()(x)
    assert Copies.n == 0, f"{Copies.n} copies of the constants for 3 batches"
    assert out.device.type == "meta" and out.dtype == torch.float32
    assert tf.yuv_constants(torch.device("meta"))[0] is tf.yuv_constants(x.device)[0]


def test_compose_labels_each_transform(pil_image):
    from torch.profiler import profile
    from torchvision.transforms import PILToTensor, RandomCrop

    tf_ = pl.Compose([PILToTensor(), RandomCrop(32), pl.RandomMask(), pl.ConvertColor(), pl.Scale()])
    with profile() as prof:
        tf_(pil_image)
    assert {"PILToTensor", "RandomCrop", "RandomMask", "ConvertColor", "Scale"} <= {e.key for e in prof.key_averages()}


def test_toy_cnn_output_and_size_check():
    assert ex.toy_cnn(32)(torch.rand(2, 3, 32, 32)).shape == (2, 10)
    with pytest.raises(ValueError, match="power of two"):
        ex.toy_cnn(48)
    step = ex.make_trainer(32, "cpu")
    assert step(torch.rand(2, 3, 32, 32), torch.tensor([1, 2])).ndim == 0


def test_sample_images_exist():
    paths = pl.sample_paths()
    assert paths and all(p.stat().st_size > 10_000 for p in paths)
    assert pl.load_image(paths[0]).size == (800, 533)


def test_missing_and_corrupt_images_give_clear_errors(tmp_path):
    with pytest.raises(tf.ImageLoadError, match="does not exist.*make_sample_images"):
        pl.load_image(tmp_path / "nope.jpg")
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 truncated" * 5)
    with pytest.raises(tf.ImageLoadError, match="could not be decoded"):
        pl.load_image(bad)
    with pytest.raises(FileNotFoundError, match="make_sample_images"):
        pl.sample_paths(tmp_path / "empty")


def loader(paths=None, num_workers=1, die_at=None, batch_size=2, length=8):
    from torchvision.transforms import PILToTensor, RandomCrop

    ds = pl.ImageDataset(paths or pl.sample_paths(), length, pl.Compose([RandomCrop(32), PILToTensor()]), die_at=die_at)
    return DataLoader(ds, batch_size=batch_size, num_workers=num_workers, collate_fn=default_collate)


def consume(batches):
    with pl.worker_errors():
        for _ in batches:
            pass


def test_corrupt_image_in_a_worker_gives_a_readable_error(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not a jpeg at all")
    with pytest.raises(RuntimeError, match="worker process 0.*could not be decoded") as info:
        consume(loader([bad]))
    assert "\n" not in str(info.value)


def test_a_failed_workers_loader_is_shut_down_when_the_row_fails(tmp_path):
    """The worker is gone when the error leaves ``worker_errors``, before any garbage collection: the failure's
    frames no longer hold the iterator (left to the collector, its workers each waited out a 5 s timeout)."""
    import gc

    import psutil

    bad = tmp_path / "corrupt.jpg"
    bad.write_bytes(pl.sample_paths()[0].read_bytes()[:2000])
    gc.disable()
    try:
        with pytest.raises(RuntimeError, match="could not be decoded") as info:
            consume(loader([bad]))
        # a loaded machine may still be reaping it: wait up to 3 s, under the 5 s the collector's path took
        _, alive = psutil.wait_procs(psutil.Process().children(), timeout=3)
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        # multiprocessing's own helper (a resource tracker an earlier test started) is not a worker
        alive = [p for p in alive if "resource_tracker" not in " ".join(p.cmdline())]
        shown = [(p.pid, " ".join(p.cmdline())[:160]) for p in alive]
    finally:
        gc.enable()
    assert not alive, f"the failed row left its DataLoader worker running: {shown}"
    assert info.value.__cause__ is None and info.value.__suppress_context__   # one line, no chain shown


def test_dying_worker_is_reported():
    with pytest.raises(RuntimeError, match="worker died"):
        consume(loader(die_at=1))
    with pytest.raises(RuntimeError, match="only kills DataLoader worker"):
        consume(loader(num_workers=0, die_at=1))


@pytest.mark.parametrize("nw,bs,match", [(-1, 4, "negative"), (10_000, 4, "CPU cores"), (0, 0, "at least 1"),
                                         (1.5, 4, "whole number"), (0, True, "whole number")])
def test_bad_num_workers_or_batch_size_refused(nw, bs, match):
    with pytest.raises(ValueError, match=match):
        pl.check_settings("baseline", nw, bs, crop=32, device="cpu")


def test_unknown_variant_and_gpu_decode_on_cpu_refused():
    with pytest.raises(ValueError, match="unknown pipeline variant"):
        pl.check_settings("fastest", 0, 4, crop=32, device="cpu")
    with pytest.raises(ValueError, match="CUDA"):
        pl.check_settings("gpu_decode", 0, 4, crop=32, device="cpu")


def test_shared_memory_check_says_what_to_do(monkeypatch):
    need = tf.shm_needed_mb(4, 256, 256)                       # the article's size, float32, prefetch 2
    assert need == pytest.approx(4 * 2 * 256 * 3 * 256 * 256 * 4 / 2**20) == pytest.approx(8 * 192)
    assert tf.shm_needed_mb(4, 256, 256, bytes_per_value=1) == pytest.approx(need / 4)
    assert tf.shm_needed_mb(4, 256, 256, pinned=False) == pytest.approx(10 * 192)   # the loop's batches stay too
    assert tf.shm_needed_mb(0, 256, 256) == 0
    with pytest.raises(tf.SharedMemoryTooSmall, match="64 MiB free.*--shm-size=2g"):
        tf.check_shm(need, free_mb=64)
    assert tf.check_shm(10, free_mb=64) == 64
    with pytest.raises(tf.SharedMemoryTooSmall) as exc:   # the advice holds what is needed (16 workers: ~6 GiB)
        tf.check_shm(tf.shm_needed_mb(16, 256, 256), free_mb=64)
    assert int(str(exc.value).split("--shm-size=")[1].split("g")[0]) * 1024 >= tf.shm_needed_mb(16, 256, 256)
    monkeypatch.setattr(tf.shutil, "disk_usage", lambda path: type("U", (), {"free": 2**20})())   # 1 MiB free
    with pytest.raises(tf.SharedMemoryTooSmall, match="shm"):
        pl.check_settings("crop_first", 1, 64, crop=64, device="cpu")
    pl.check_settings("crop_first", 0, 64, crop=64, device="cpu")   # no workers: no shared memory needed


@pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")
def test_decode_check_accepts_an_equivalent_decoder_and_refuses_a_wrong_one():
    from torchvision.io import decode_jpeg

    paths = pl.sample_paths()[:2]
    assert pl.check_decode(paths, "cpu")["mean_abs"] <= 3.0            # libjpeg-turbo (torchvision) vs PIL
    with pytest.raises(tf.DecodeMismatch, match="differs from the CPU decode"):
        pl.check_decode(paths, "cpu", decode=lambda datas, dev: [d.flip(0) for d in decode_jpeg(datas, device=dev)])
    with pytest.raises(tf.DecodeMismatch, match="shape"):
        pl.check_decode(paths, "cpu", decode=lambda datas, dev: [d[:, ::2] for d in decode_jpeg(datas, device=dev)])


@pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")
@pytest.mark.parametrize("num_workers", [0, 1])
def test_the_gpu_decode_data_path_runs_on_a_cpu(tmp_path, num_workers):
    """gpu_decode's workers ship JPEG bytes, offsets and masks; decode_jpeg also runs on the CPU, so the path is
    tested here, a greyscale JPEG included (decoded as RGB, like PIL's convert)."""
    grey = tmp_path / "grey.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 64), dtype=np.uint8), "L").save(grey, quality=95)
    for paths, hw in ((pl.sample_paths()[:2], (533, 800)), ([grey], (48, 64))):
        ds = pl.ImageDataset(paths, 4, pl.CropParams(32, hw), bytes=True)
        x, y = next(iter(DataLoader(ds, batch_size=2, num_workers=num_workers, collate_fn=pl.collate_bytes)))
        out = pl.decode_on_device(x, "cpu")
        assert out.shape == (2, 3, 32, 32) and out.dtype == torch.uint8 and y.shape == (2,)


def test_gpu_decode_waits_for_the_callers_stream_before_nvjpeg_writes(monkeypatch):
    import torchvision.io

    order = []

    class Stop(Exception):
        pass

    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: type("S", (), {"synchronize": lambda self: order.append("sync")})())
    monkeypatch.setattr(torchvision.io, "decode_jpeg", lambda *a, **k: (order.append("decode"), (_ for _ in ()).throw(Stop()))[1])
    x = ([torch.zeros(4, dtype=torch.uint8)], torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 8, 8, dtype=torch.bool))
    with pytest.raises(Stop):
        pl.decode_on_device(x, "cuda")
    assert order == ["sync", "decode"]


def test_batch_collate_converts_the_whole_batch():
    batch = [(torch.randint(0, 256, (3, 4, 4), dtype=torch.uint8), torch.tensor(i)) for i in range(3)]
    x, y = pl.collate_batch_transforms(batch)
    ref = torch.stack([pl.Scale()(pl.ConvertColor()(b[0])) for b in batch])
    torch.testing.assert_close(x, ref) and y.tolist() == [0, 1, 2]


# -- the arithmetic of the runs ---------------------------------------------------------------------
def test_mean_comparison_sees_the_stall_that_the_median_hides():
    """4 workers: batches arrive in waves, one long step then three short ones, for 3 full cycles."""
    a, b = ex.summarize([40.0, 1.0, 1.0, 1.0] * 3, 8), ex.summarize([5.0] * 12, 8)
    assert a["step_ms_median"] < b["step_ms_median"]          # the median says the stalled loop is faster...
    assert a["step_ms_mean"] > b["step_ms_mean"]                # ...the mean does not
    assert a["step_ms_mean"] == pytest.approx(10.75) and a["step_ms_max"] == 40.0
    assert a["samples_per_s"] == pytest.approx(8 * 12 / (129 / 1000.0), rel=1e-4) and a["samples_per_s"] < b["samples_per_s"]
    w = ex.summarize([10.0, 10.0], 2, warm_ms=[50.0], waits_ms=[5.0, 0.0])
    assert w["data_wait_share"] == 0.25 and w["first_step_ms"] == 50.0 and w["warmup_ms"] == [50.0]
    with pytest.raises(ValueError, match="no timed steps"):
        ex.summarize([], 2)


def test_cycle_steps_cover_whole_worker_cycles():
    assert ex.cycle_steps(4, 3) == 12
    assert ex.cycle_steps(16, 3, at_least=15) == 48      # 15 steps with 16 workers: not one cycle's wait
    assert ex.cycle_steps(4, 3, at_least=13) == 16       # rounded up to whole cycles
    assert ex.cycle_steps(0, 3, at_least=5) == 5 and ex.cycle_steps(2, 2, at_least=1) == 4


def test_cycle_means_average_whole_worker_cycles():
    assert ex.cycle_means([90.0, 10.0, 80.0, 20.0, 70.0], 2) == [50.0, 50.0]   # the incomplete last cycle is left out
    assert ex.cycle_means([5.0, 6.0], 0) == [5.0, 6.0]                          # 0 workers: a cycle is one step
    assert ex.cycle_means([5.0, 6.0, 7.0], 3) == [6.0]


def test_predicted_throughput_is_the_min_of_workers_and_device():
    # T_batch 100 ms, T_step 20 ms, batch 8: 1 worker -> 80/s, 4 workers -> 320/s, 8 workers -> device bound 400/s
    assert [ex.predicted_samples_per_s(n, 100, 20, 8) for n in (1, 4, 8)] == pytest.approx([80, 320, 400])
    assert ex.predicted_samples_per_s(0, 100, 20, 8) == pytest.approx(8000 / 120)
    with pytest.raises(ValueError):
        ex.predicted_samples_per_s(2, 0, 20, 8)


def test_the_bound_of_a_gpu_decode_pipeline_is_the_ceiling_not_the_cpu_decode_bound():
    assert ex.bound_ms("gpu_decode", 40.0, 96.0) == 40.0
    assert ex.bound_ms("uint8_device", 40.0, 96.0) == 96.0 and ex.bound_ms("crop_first", 120.0, 96.0) == 120.0
    with pytest.raises(ValueError):
        ex.bound_ms("crop_first", 0.0, 96.0)


def test_stand_in_takes_its_time_without_using_the_cpu():
    import time

    s = ex.StandIn(50)
    w0, c0 = time.perf_counter(), time.process_time()
    s(None, None)
    assert time.perf_counter() - w0 >= 0.05 and time.process_time() - c0 < 0.02
    for bad in (0, -1, "10", True, None, float("nan")):
        with pytest.raises(ValueError, match="stand-in"):
            ex.StandIn(bad)


def test_stage_ms_groups_labels_per_sample(monkeypatch):
    totals = {"load_image": 80.0, "RandomMask": 40.0, "ConvertColor": 4.0, "ConvertColor(batch)": 4.0}
    monkeypatch.setattr(ex.profiling, "label_totals", lambda prof, labels: {k: totals.get(k, 0.0) for k in labels})
    st = ex.stage_ms(None, 8)
    assert st["decode JPEG"] == 10.0 and st["mask"] == 5.0 and st["colour"] == 1.0 and st["crop"] == 0.0


def test_gpu_idle_share_reads_a_real_gpu_trace_quietly(tmp_path, capfd):
    # a real A100 training trace (Holistic Trace Analysis' test data, MIT): HTA called directly prints its parse
    # timings into the notebook's output
    import shutil

    from tests.shared_data import gpu_trace

    src = gpu_trace("hta_alexnet.json.gz")
    shutil.copy(src, tmp_path / src.name)
    capfd.readouterr()
    share = ex.gpu_idle_share(tmp_path)
    out, err = capfd.readouterr()
    assert 0.9 < share <= 1.0 and "parse" not in (out + err).lower()


def test_gpu_idle_share_is_none_for_a_cpu_trace(tmp_path):
    import json

    doc = {"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 10, "pid": 1, "tid": 1,
                            "cat": "user_annotation"}]}
    (tmp_path / "t.pt.trace.json").write_text(json.dumps(doc))
    assert ex.gpu_idle_share(tmp_path) is None
