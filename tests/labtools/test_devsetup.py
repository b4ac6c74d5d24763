"""helpers.devsetup: which Chromium the browser test drives, when it skips or fails, and the lab defaults."""
import json
import os
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from labtools import devsetup
from helpers.notebook import tensorboard as tb

ROOT = Path(__file__).resolve().parents[2]


def _exe(tmp_path, name="chromium"):
    p = tmp_path / name
    p.write_text("#!/bin/sh\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def _no_playwright_browser():
    return None


def _decide(environ, **kw):
    find = kw.pop("find", None) or (lambda e: devsetup.find_chromium(e, system=kw.pop("system", ()),
                                                                      playwright=kw.pop("pw", _no_playwright_browser)))
    return devsetup.browser_decision(environ, playwright_importable=kw.pop("importable", True), find=find)


@pytest.mark.parametrize("environ,required", [
    ({}, False), ({"CI": "true"}, True), ({"CI": "1"}, True), ({"CI": "false"}, False), ({"CI": ""}, False),
    ({"PERF_REQUIRE_BROWSER": "1"}, True), ({"PERF_REQUIRE_BROWSER": "0"}, False),
])
def test_browser_required_under_ci_or_perf_require_browser(environ, required):
    assert devsetup.browser_required(environ) is required


def test_perf_chromium_wins_and_a_missing_one_means_no_browser(tmp_path):
    system = _exe(tmp_path, "system-chromium")
    mine = _exe(tmp_path, "my-chromium")
    found = devsetup.find_chromium({"PERF_CHROMIUM": str(mine)}, system=(str(system),), playwright=lambda: mine)
    assert found.path == mine and found.source == "PERF_CHROMIUM"
    # pointing at a missing path is "no browser": no silent fallback to another one
    assert devsetup.find_chromium({"PERF_CHROMIUM": str(tmp_path / "nope")}, system=(str(system),),
                                  playwright=lambda: mine) is None
    # a file that is not executable is no browser either
    plain = tmp_path / "plain"
    plain.write_text("")
    assert devsetup.find_chromium({"PERF_CHROMIUM": str(plain)}, system=()) is None


def test_system_chromium_then_playwrights_own(tmp_path):
    system = _exe(tmp_path, "chromium")
    own = _exe(tmp_path, "chrome")
    found = devsetup.find_chromium({}, system=(str(tmp_path / "missing"), str(system)), playwright=lambda: own)
    assert found.path == system and found.source == "system"
    found = devsetup.find_chromium({}, system=(str(tmp_path / "missing"),), playwright=lambda: own)
    assert found.source == "playwright" and found.path is None and found.shown == str(own)
    assert devsetup.find_chromium({}, system=(), playwright=_no_playwright_browser) is None


def test_no_browser_skips_with_reason_and_command(tmp_path):
    d = _decide({"PERF_CHROMIUM": str(tmp_path / "nonexistent")})
    assert d.action == "skip"
    assert "\n" not in d.reason and "PERF_CHROMIUM" in d.reason and "nonexistent" in d.reason
    assert "playwright install chromium" in d.reason and "apt-get install chromium" in d.reason
    assert _decide({}).action == "skip"


@pytest.mark.parametrize("gate", [{"CI": "true"}, {"PERF_REQUIRE_BROWSER": "1"}])
def test_no_browser_fails_when_required(tmp_path, gate):
    d = _decide({"PERF_CHROMIUM": str(tmp_path / "nonexistent"), **gate})
    assert d.action == "fail" and "requires it" in d.reason and next(iter(gate)) in d.reason


def test_found_browser_runs_and_missing_playwright_package(tmp_path):
    mine = _exe(tmp_path)
    d = _decide({"PERF_CHROMIUM": str(mine)})
    assert d.action == "run" and d.chromium.path == mine
    assert _decide({"PERF_CHROMIUM": str(mine)}, importable=False).action == "skip"
    assert _decide({"PERF_CHROMIUM": str(mine), "CI": "true"}, importable=False).action == "fail"


def test_setup_does_not_download_when_a_browser_is_there_or_one_is_named(tmp_path, monkeypatch):
    calls = []

    def run(*a, **k):
        calls.append(a)
        raise AssertionError("no download expected")

    monkeypatch.delenv("CI", raising=False)  # CI itself runs with CI=true: the outcome below depends on it
    monkeypatch.delenv("PERF_REQUIRE_BROWSER", raising=False)
    monkeypatch.setenv("PERF_CHROMIUM", str(_exe(tmp_path)))
    assert devsetup.ensure_browser(run=run).action == "run"
    monkeypatch.setenv("PERF_CHROMIUM", str(tmp_path / "nonexistent"))
    assert devsetup.ensure_browser(run=run).action == "skip"
    monkeypatch.setenv("CI", "true")  # the same missing browser under CI: a failure, still no download
    assert devsetup.ensure_browser(run=run).action == "fail"
    assert calls == []


def test_setup_download_that_hangs_is_cut_off(monkeypatch, capsys):
    """No browser anywhere: setup tries Playwright's download, bounded by a timeout, and carries on."""
    monkeypatch.delenv("PERF_CHROMIUM", raising=False)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("PERF_REQUIRE_BROWSER", raising=False)
    none = devsetup.Decision("skip", "browser test skipped: no Chromium")
    monkeypatch.setattr(devsetup, "browser_decision", lambda environ=None: none)
    seen = {}

    def run(cmd, timeout, **k):
        seen.update(cmd=cmd, timeout=timeout)
        raise subprocess.TimeoutExpired(cmd, timeout)

    assert devsetup.ensure_browser(timeout_s=7, run=run) is none
    assert seen["cmd"][1:] == ["-m", "playwright", "install", "chromium"] and seen["timeout"] == 7
    assert "no answer within 7 s" in capsys.readouterr().out


def test_stock_default_asks_about_news():
    """Without the override JupyterLab asks ("none"): the override is what removes the pop-up."""
    schema = Path(sys.prefix) / "share/jupyter/lab/schemas/@jupyterlab/apputils-extension/notification.json"
    assert json.loads(schema.read_text())["properties"]["fetchNews"]["default"] == "none"


def test_install_lab_settings_writes_namespaced_overrides(tmp_path):
    path = devsetup.install_lab_settings(tmp_path)
    assert path == tmp_path / "share/jupyter/lab/settings/overrides.d/pytorch-performance-lab.json"
    data = json.loads(path.read_text())
    assert data["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    devsetup.install_lab_settings(tmp_path)  # idempotent
    assert json.loads(path.read_text()) == data


def test_jupyterlab_serves_the_no_news_default(tmp_path):
    """A real JupyterLab with the installed overrides: the news setting's default is 'never', so no pop-up asks."""
    devsetup.install_lab_settings(tmp_path)
    settings_dir = devsetup.lab_settings_dir(tmp_path).parent
    port, token = tb.free_port(0), "t0ken"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    cmd = [str(Path(sys.executable).with_name("jupyter")), "lab", "--ip", "127.0.0.1", "--port", str(port),
           "--no-browser", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}",
           "--ServerApp.port_retries=0", f"--LabApp.app_settings_dir={settings_dir}",
           f"--LabApp.user_settings_dir={tmp_path / 'user-settings'}",
           f"--LabApp.workspaces_dir={tmp_path / 'ws'}"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    url = f"http://127.0.0.1:{port}/lab/api/settings/@jupyterlab/apputils-extension:notification"
    with open(tmp_path / "lab.log", "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline, data = time.time() + 120, None
            while time.time() < deadline and data is None:
                assert proc.poll() is None, (tmp_path / "lab.log").read_text()[-2000:]
                try:
                    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
                    with urllib.request.urlopen(req, timeout=5) as r:  # noqa: S310 - loopback only
                        data = json.loads(r.read())
                except OSError:
                    time.sleep(1)
            assert data is not None, "JupyterLab did not answer"
            props = data["schema"]["properties"]  # the schema as served: defaults with the overrides applied
            assert props["fetchNews"]["default"] == "false", props["fetchNews"]
            assert props["checkForUpdates"]["default"] is False, props["checkForUpdates"]
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def test_makefile_setup_runs_devsetup():
    mk = (ROOT / "Makefile").read_text()
    assert "-m labtools.devsetup" in mk
