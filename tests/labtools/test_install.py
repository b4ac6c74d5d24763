"""labtools.install (``make setup``'s install): pip's settings carried over to uv, and pip's route when uv fails.
No real install here (make test's own set-up is that test): a recording runner stands in for the subprocesses."""
import subprocess
from pathlib import Path

from labtools import install

ROOT = Path(__file__).resolve().parents[2]

# what `pip config list` prints on this project's CI machines (a cap on torch, local indexes, a wheel folder)
PIP_CONFIG = """:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
"""


def test_pip_settings_are_read_variables_first_without_repeats():
    cfg = install.parse_pip_config(PIP_CONFIG + "global.index-url='https://files.example/simple'\n"
                                   ":env:.index-url=\"https://mirror.example/simple\"\nnot a setting\n")
    assert cfg["find-links"] == ["/opt/wheels"]
    assert cfg["extra-index-url"] == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    assert cfg["constraint"] == ["/etc/xdg/pip/constraints.txt"]
    assert cfg["index-url"] == ["https://mirror.example/simple", "https://files.example/simple"]
    assert install.parse_pip_config("") == {}


def test_the_uv_command_carries_pips_indexes_cap_and_wheels():
    cfg = install.parse_pip_config(PIP_CONFIG + "global.index-url='https://a/simple'\n:env:.index-url='https://b/s'\n")
    cmd = install.uv_command("uv", "/v/bin/python", cfg, "constraints.txt", install.SPEC)
    assert cmd[:3] == ["uv", "pip", "install"] and cmd[-4:] == ["-e", "./doctor[full]", "-e", ".[lab,test]"]
    pairs = list(zip(cmd, cmd[1:]))
    assert ("--python", "/v/bin/python") in pairs and "--compile-bytecode" in cmd
    assert ("--index-strategy", "unsafe-best-match") in pairs   # pip's rule: the best version over every index
    assert ("--constraint", "constraints.txt") in pairs and ("--constraint", "/etc/xdg/pip/constraints.txt") in pairs
    assert ("--extra-index-url", "file:///opt/pypi/simple") in pairs
    assert ("--extra-index-url", "file:///opt/pypi-more/simple") in pairs
    assert ("--find-links", "/opt/wheels") in pairs
    assert cmd.count("--index-url") == 1 and ("--index-url", "https://b/s") in pairs   # the variable's, as pip does
    assert "--cert" not in cmd and "180" not in cmd   # pip's own settings stay pip's


def test_uvs_cache_lies_beside_the_venv_unless_set(tmp_path):
    cert = tmp_path / "ca.crt"
    cert.write_text("x")
    env = install.uv_env({"cert": [str(tmp_path / "missing.crt"), str(cert)]}, {"PATH": "/bin"})
    assert env["UV_CACHE_DIR"] == str(ROOT / "build" / "uv-cache") and env["SSL_CERT_FILE"] == str(cert)
    env = install.uv_env({"cert": [str(cert)]}, {"UV_CACHE_DIR": "/c", "SSL_CERT_FILE": "/mine"})
    assert env["UV_CACHE_DIR"] == "/c" and env["SSL_CERT_FILE"] == "/mine"


class Recorder:
    """Stands in for subprocess.run: records each command, answers from ``fail`` (a word in the command -> rc)."""

    def __init__(self, fail=None):
        self.calls, self.fail = [], fail or {}

    def __call__(self, cmd, **kw):
        self.calls.append(list(cmd))
        rc = next((rc for word, rc in self.fail.items() if word in cmd), 0)
        out = PIP_CONFIG if cmd[-2:] == ["config", "list"] else ""
        return subprocess.CompletedProcess(cmd, rc, out, "ERROR: no such thing\n" if rc else "")


def test_uv_route_installs_uv_then_the_pinned_set(capsys):
    run = Recorder()
    assert install.main(["--python", "/v/bin/python"], run=run) == 0
    assert run.calls[0] == ["/v/bin/python", "-m", "pip", "install", "--quiet", f"uv=={install.UV_VERSION}"]
    assert run.calls[-1][:3] == ["/v/bin/uv", "pip", "install"] and len(run.calls) == 3
    assert capsys.readouterr().err == ""


def test_when_uv_cannot_be_had_or_fails_pip_installs_and_says_why(capsys):
    for fail, why in ((f"uv=={install.UV_VERSION}", "could not be installed"), ("/v/bin/uv", "uv pip install failed")):
        run = Recorder({fail: 1})
        assert install.main(["--python", "/v/bin/python"], run=run) == 0
        err = capsys.readouterr().err
        assert why in err and "no such thing" in err and "installing with pip instead" in err
        assert run.calls[-2] == ["/v/bin/python", "-m", "pip", "install", "-q", "--upgrade", "pip"]
        assert run.calls[-1] == ["/v/bin/python", "-m", "pip", "install", "-q", "-c", "constraints.txt",
                                 "-e", "./doctor[full]", "-e", ".[lab,test]"]
    run = Recorder({"constraints.txt": 1})   # pip's route failing is the install failing
    assert install.main(["--python", "/v/bin/python", "--pip-only"], run=run) == 1 and len(run.calls) == 2


def test_make_setup_uses_it_online_and_pip_offline():
    mk = (ROOT / "Makefile").read_text()
    assert "-m labtools.install --python $(BIN)/python" in mk and "--no-index --find-links $(WHEELS)" in mk
