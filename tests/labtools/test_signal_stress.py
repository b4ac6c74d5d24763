"""benchmarks.signal_stress counts only the runs it signalled, apart from those that finished before their signal,
and fails a run that ended through the runner's watchdog or left something behind."""
import json
import signal

from benchmarks import signal_stress as ss

from tests.labtools.test_runner import notebook


def test_leftovers_name_what_a_run_lacks_or_left_behind(tmp_path):
    out = tmp_path / "out"
    for d in (tmp_path / "tmp", out / "a"):
        d.mkdir(parents=True)
    (out / "a" / "run.json").write_text("{}")
    (out / "a.tar.gz").write_text("")
    (out / "a" / "results.json").write_text(json.dumps({"interrupted": True}))
    summary = {"notebooks": [{"notebook": "a", "status": "interrupted"}]}
    assert ss.leftovers(out, summary) == []

    (tmp_path / "tmp" / "tmpk3y.json").write_text("{}")  # a kernel's connection file
    (out / "a" / "results.json").write_text("{}")
    summary = {"abandoned": "SIGTERM: abandoned", "notebooks": [
        {"notebook": "a", "status": "interrupted"}, {"notebook": "b", "status": "failed", "error": "cell 0: boom"}]}
    assert ss.leftovers(out, summary) == [
        "left behind: tmpk3y.json", "ended by the watchdog: SIGTERM: abandoned",
        "a's results.json does not say interrupted", "no run.json for b", "no b.tar.gz for b", "b failed: cell 0: boom"]


def test_a_run_that_ends_before_its_signal_is_not_a_signalled_run(tmp_path):
    nbs = [notebook(tmp_path / "b.ipynb", "print('b ran')\n")]
    t = ss.trial(nbs, tmp_path / "t", 300.0, signal.SIGTERM, 12.0)  # the run ends long before 300 s
    assert (t["signalled"], t["signal"], t["exit"], t["problems"]) == (False, None, 0, []), t


def test_the_report_counts_signalled_runs_apart_from_those_that_finished_first(monkeypatch, capsys):
    def fake(nbs, folder, offset, signum, deadline, group=True):
        name = folder.name
        t = {"exit": 0, "run_s": 5.0, "after_signal_s": None, "signalled": False, "abandoned": False,
             "notebooks_started": ["a"], "statuses": ["ok"], "problems": [], "stderr_tail": []}
        if name == "t0":  # signalled, ended cleanly
            t.update(signalled=True, exit=143, after_signal_s=2.5, statuses=["interrupted"])
        if name == "t2":  # signalled, ended by the watchdog
            t.update(signalled=True, exit=130, after_signal_s=20.4, abandoned=True, problems=["ended by the watchdog"])
        return t  # t1, and the calibration: finished before its signal (or unsignalled)

    monkeypatch.setattr(ss, "trial", fake)
    assert ss.main(["--offsets", "3"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == ("2 runs signalled, 1 of them ended cleanly; 1 finished before their signal; 1 ended by the "
                    "watchdog; 1 failed; the slowest 20.4 s"), last
