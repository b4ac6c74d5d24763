"""helpers.pipeline: the dilations agree, transforms keep shapes/dtypes, bad input is refused clearly."""
import numpy as np
import pytest
import torch
from PIL import Image

from helpers import pipeline as pl


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


def test_dying_worker_is_reported():
    with pytest.raises(RuntimeError, match="worker died"):
        pl.run_variant("crop_first", 1, 2, 2, warmup=0, crop=32, die_at=1, max_workers=1)


@pytest.mark.parametrize("variant", pl.CPU_VARIANTS)
def test_variants_give_batches_of_the_same_shape_and_dtype(variant):
    x, y = pl.first_batch(variant, batch_size=3, crop=32)
    assert x.shape == (3, 3, 32, 32) and x.dtype == torch.float32
    assert y.shape == (3,) and y.dtype == torch.int64
    assert float(x.min()) >= -1.0 and float(x.max()) <= 1.5  # YUV / 255 with the (0, 128, 128) offset


def test_run_variant_metrics():
    m = pl.run_variant("uint8_device", 0, 2, 2, warmup=1, crop=32)
    assert m["steps_timed"] == 2 and len(m["warmup_ms"]) == 1
    assert m["samples_per_s"] > 0 and 0 <= m["data_wait_share"] <= 1
    assert m["x_shape"] == [2, 3, 32, 32]


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
