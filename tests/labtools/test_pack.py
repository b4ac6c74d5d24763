"""labtools.pack: earlier outputs set aside, interrupted results marked, one archive per notebook."""
import gzip
import io
import json
import os
import tarfile
import time

import pytest

from labtools import pack


def test_set_aside_keeps_one_previous(tmp_path):
    assert pack.set_aside(tmp_path, "nb") is None
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "results.json").write_text("1")
    assert pack.set_aside(tmp_path, "nb") == tmp_path / "nb.previous"
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "results.json").write_text("2")
    pack.set_aside(tmp_path, "nb")
    assert (tmp_path / "nb.previous" / "results.json").read_text() == "2" and not (tmp_path / "nb").exists()


def test_mark_interrupted(tmp_path):
    assert not pack.mark_interrupted(tmp_path, "SIGTERM")
    (tmp_path / "results.json").write_text(json.dumps({"notebook": "nb", "experiments": []}))
    assert pack.mark_interrupted(tmp_path, "cell 3: stopped: SIGTERM")
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["interrupted"] is True and doc["interruption"] == "cell 3: stopped: SIGTERM"


def test_pack_keeps_traces_smallest_first_within_the_limit(tmp_path):
    res = tmp_path / "out" / "02_nb"
    res.mkdir(parents=True)
    (res / "results.json").write_text('{"notebook": "02_nb"}\n')
    (res / "fig.png").write_bytes(os.urandom(2000))
    (res / "sub").mkdir()  # sub-folders are not packed
    traces = tmp_path / "runs" / "traces"
    small = traces / "02_nb_a" / "1" / "host.pt.trace.json"
    big = traces / "02_nb_b" / "1" / "host.pt.trace.json.gz"
    small.parent.mkdir(parents=True)
    big.parent.mkdir(parents=True)
    small.write_text(json.dumps({"traceEvents": [{"name": "x", "ph": "X"}] * 100}))
    big.write_bytes(os.urandom(300_000))  # already compressed: counts at its size
    before = time.time()
    found = pack.new_traces(tmp_path / "runs", before - 5)
    assert found == sorted([small, big])
    assert pack.new_traces(tmp_path / "runs", before + 3600) == []
    m = pack.pack(res, tmp_path / "carry" / "02_nb.tar.gz", found, traces, limit=200_000)
    assert m["traces"] == ["02_nb_a/1/host.pt.trace.json"]
    assert m["traces_left_out"] == [{"trace": "02_nb_b/1/host.pt.trace.json.gz", "bytes": 300_000}]
    with tarfile.open(tmp_path / "carry" / "02_nb.tar.gz") as tar:
        names = set(tar.getnames())
        inner = json.load(tar.extractfile("02_nb/pack.json"))
    assert names == {"02_nb/results.json", "02_nb/fig.png", "02_nb/pack.json", "02_nb/traces/02_nb_a/1/host.pt.trace.json"}
    assert inner["traces_left_out"] == m["traces_left_out"]
    assert m["bytes"] < 200_000
    ref, left = pack.unpack(tmp_path / "carry" / "02_nb.tar.gz", tmp_path / "data" / "reference" / "h100")
    assert ref == tmp_path / "data" / "reference" / "h100" / "02_nb" and left == []
    # a reference keeps its traces gzipped (issue 31: 121 MB unpacked as plain JSON)
    assert not (ref / "traces" / "02_nb_a" / "1" / "host.pt.trace.json").exists()
    assert gzip.decompress((ref / "traces" / "02_nb_a" / "1" / "host.pt.trace.json.gz").read_bytes()).decode() \
        == small.read_text()
    # an executed copy (outputs and all) comes out gzipped: no tracked .ipynb carries outputs
    (res / "02_nb.ipynb").write_text('{"cells": []}')
    pack.pack(res, tmp_path / "carry" / "02_nb.tar.gz", found, traces, limit=200_000)
    ref, _ = pack.unpack(tmp_path / "carry" / "02_nb.tar.gz", tmp_path / "ref3")
    assert not (ref / "02_nb.ipynb").exists() and gzip.decompress((ref / "02_nb.ipynb.gz").read_bytes())
    # and leaves out a trace over the limit, saying so in its pack.json
    again, left = pack.unpack(tmp_path / "carry" / "02_nb.tar.gz", tmp_path / "ref2", trace_limit=50)
    assert left and left[0].startswith("02_nb_a/1/host.pt.trace.json (")
    assert not (again / "traces").exists()
    assert json.loads((again / "pack.json").read_text())["unpack_left_out"] == left


def test_unpack_refuses_unsafe_or_mixed_archives(tmp_path):
    for names in (["nb/../../evil"], ["a/x", "b/y"]):
        path = tmp_path / "bad.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for n in names:
                info = tarfile.TarInfo(n)
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
        with pytest.raises(ValueError):
            pack.unpack(path, tmp_path / "dest")
    assert not (tmp_path / "evil").exists()


def test_unpack_command_makes_reference_folders(tmp_path, capsys):
    res = tmp_path / "03_nb"
    res.mkdir()
    (res / "results.json").write_text("{}\n")
    pack.pack(res, tmp_path / "03_nb.tar.gz")
    assert pack.main(["unpack", "--gpu", "h100", "--root", str(tmp_path / "ref"), str(tmp_path / "03_nb.tar.gz")]) == 0
    assert (tmp_path / "ref" / "h100" / "03_nb" / "results.json").read_text() == "{}\n"
    assert pack.main(["unpack", "--gpu", "h100", "--root", str(tmp_path / "ref"), str(tmp_path / "none.tar.gz")]) == 2
    assert "none.tar.gz" in capsys.readouterr().out.splitlines()[-1]
