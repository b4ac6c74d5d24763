"""The H100 reference that ships in data/reference/h100: all six notebooks, small, traces gzipped, readable."""
import gzip
import json

from helpers.notebook import reference

from .conftest import GPU, REF_ROOT, h100

NOTEBOOKS = ["01_profiler_basics", "02_data_pipeline", "03_backward_hooks", "04_torch_compile", "05_diagnose",
             "06_distributed"]
MIB = 2**20


def test_every_notebook_has_its_reference_and_it_is_small():
    base = REF_ROOT / GPU
    total = sum(p.stat().st_size for p in base.rglob("*") if p.is_file())
    assert total <= 15 * MIB, f"data/reference/{GPU} is {total / MIB:.1f} MiB (at most 15)"
    for nb in NOTEBOOKS:
        ref = h100(nb)
        # 06 on one GPU runs its CPU fallback (2 gloo ranks) at smoke sizes, and says so
        assert ref.doc.get("scale") == ("smoke" if nb == "06_distributed" else "full") and "H100" in ref.source()
        for t in ref.traces():
            assert t.name.endswith(".gz"), f"{t} is not gzipped"
            assert t.stat().st_size <= 2 * MIB, f"{t} is over 2 MiB gzipped"
            assert isinstance(json.loads(gzip.decompress(t.read_bytes())), dict)


def test_a_row_the_reference_did_not_run_says_so_never_nan():
    import pandas as pd

    ref = h100("02_data_pipeline")   # cut short: its fixes in the loop were skipped for time
    df = pd.DataFrame({"experiment": ["baseline nw=4", "bool_dilation", "a row it never had"], "step_ms_mean": 1.0})
    col = reference.add_column(df, ref, "step_ms_mean").iloc[:, -1].tolist()
    assert isinstance(col[0], float) and col[1:] == [reference.NOT_RUN] * 2


def test_the_reference_note_says_how_it_was_made(capsys):
    reference.note("01_profiler_basics", gpu=GPU, root=REF_ROOT)
    line = capsys.readouterr().out
    assert "H100" in line and "061c00a" in line and "\n" == line[-1] and line.count("\n") == 1
