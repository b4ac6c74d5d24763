"""The JupyterLab experience in a real browser: Playwright drives Chromium.

``test_saved_outputs_fit_the_view_in_a_real_browser`` opens the executed copies that ``make test``'s first phase
writes (``$PERF_EXECUTED_NOTEBOOKS``, as tests/notebooks/test_executed_notebooks.py reads them; skipped without it)
of every notebook, one after another in one JupyterLab and one Chromium, as a newcomer sees them (1400x900, the file
browser open), trusted so that its saved widget panels are drawn from their widget state, lets the saved outputs
render and fails when a cell shows an error, a picture the markdown above promises is not shown (06's straggler
timelines once drew nothing), a panel label is cut with "…", the table a panel shows after a run is wider than the
panel (04's: its run function's returned table over the run's own results.json, put in the drawn panel), a table
cell's text runs over the next column, or an output area scrolls sideways (``scrollWidth`` > ``clientWidth``: a table or a text wider than the view), naming the
notebook, the cell, its widths and the start of its text (each detector first proves itself on a planted case); the
first screen and each overflowing cell are kept as screenshots in
test-artifacts/browser_e2e/<notebook>/ (with ``PERF_SCREENSHOTS=1`` also every table and picture output).

Starts JupyterLab on a free 127.0.0.1 port with a token (smoke scale, smaller: ``BROWSER_SIZES``, results
and runs in a temporary folder), opens notebook 02, runs all cells from the Run menu, then uses the widget
panel as a reader would (changes num_workers, clicks Run, sees a new row in the results table),
checks that the inline TensorBoard frame loads, serves the notebook's own folder (``tb.notebook_logdir``) and lists
its rows' runs under their own names, uncut ("baseline-0"), and not another notebook's (a run of 01 seeded in the
runs folder). Screenshots go to test-artifacts/ (git-ignored).
Every server it started (JupyterLab, its kernels, their TensorBoards) is stopped, also on failure.

Drives the Chromium that ``helpers.devsetup.find_chromium`` finds: ``$PERF_CHROMIUM``, Debian's
``/usr/bin/chromium`` or Playwright's own (``make setup`` fetches it where the download works). Without
one the test is skipped with the reason and the command that enables it; under ``CI=true`` or
``PERF_REQUIRE_BROWSER=1`` it fails instead, so CI keeps proving the real-browser path.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from labtools import devsetup
from helpers.notebook import tensorboard as tb
from test_executed_notebooks import PROMISE   # tests/notebooks is on sys.path (pytest's rootdir-less import)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
ARTIFACTS = ROOT / "test-artifacts" / "browser_e2e"
NOTEBOOK = "02_data_pipeline.ipynb"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# The waits below end on a condition; their only limit is on no progress (nothing newly drawn, no cell newly run for
# so long), never on the total, which load can stretch at will (pytest's own timeout bounds a test).
RUN_ALL_STALL_S = 300
# Notebook 02 in the browser runs for its JupyterLab experience (cells, panel, TensorBoard), not for its numbers: nbmake
# has executed it at smoke scale before this test (make test's first phase). Fewer rounds, cycles, steps and sweep
# points, and batches of 4 crops of 64 px ($PERF_SIZES, helpers.notebook.env.params) make its cells run in 28 s (on a
# quiet 2-core machine, nbclient), against 60-66 s at smoke scale; every cell still runs.
BROWSER_SIZES = {"rounds": 2, "cycles": 1, "sweep_workers": [0, 2], "pipe_steps": 4, "dilation_repeats": 3,
                 "decode_repeats": 3, "crop": 64, "batch_size": 4, "steps": 4, "ceiling_steps": 4, "sweep_steps": 4,
                 "profile_steps": 2, "profile_cycles": 1, "dataset_size": 32}
PANEL_RUN_STALL_S = 300
RENDER_STALL_S = 120

# JupyterLab settings for this test only (a temporary user-settings folder): never save the
# notebook (its outputs must not land in the repository), render every cell (no windowing, so
# every prompt is in the page) and fetch no news (the machine is offline).
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                          "checkForUpdates": False},
}


EXECUTED_ENV = "PERF_EXECUTED_NOTEBOOKS"
FIT_VIEWPORT = {"width": 1400, "height": 900}

# every output area of the notebook that scrolls sideways: its cell (index in the notebook), widths and text
_OVERFLOWS_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].flatMap((cell, i) =>
  [...cell.querySelectorAll('.jp-OutputArea-output')]
    .filter(o => o.scrollWidth > o.clientWidth + 1)
    .map(o => ({cell: i, scroll: o.scrollWidth, client: o.clientWidth,
                mime: o.getAttribute('data-mime-type') || '',
                code: ((cell.querySelector('.jp-InputArea-editor') || {}).innerText || '').split('\\n')[0].slice(0, 80),
                text: (o.innerText || '').trim().slice(0, 100)})))"""


def _require_browser():
    """The Chromium to drive; skips on a plain machine without one, fails under CI / PERF_REQUIRE_BROWSER=1."""
    decision = devsetup.browser_decision()
    if decision.action == "skip":
        pytest.skip(decision.reason)
    if decision.action == "fail":
        pytest.fail(decision.reason, pytrace=False)
    print(decision.reason)
    return decision.chromium


def _notebook() -> Path:
    nb = NOTEBOOKS / NOTEBOOK
    assert nb.exists(), f"{nb} is missing"
    return nb


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Lab:
    """A JupyterLab server on 127.0.0.1 with a random token, and its REST API."""

    def __init__(self, tmp: Path, root: Path = NOTEBOOKS, extra: tuple[str, ...] = (), sizes: dict | None = None):
        self.port = tb.free_port(0)
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        settings = tmp / "lab-settings"
        for rel, value in LAB_SETTINGS.items():
            (settings / rel).parent.mkdir(parents=True, exist_ok=True)
            (settings / rel).write_text(json.dumps(value))
        env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # plots inline, as for a reader
        env.update(PERF_SCALE="smoke", PERF_RESULTS_DIR=str(tmp / "results"), PERF_RUNS_DIR=str(tmp / "runs"),
                   JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"), JUPYTER_RUNTIME_DIR=str(tmp / "jupyter-runtime"),
                   JUPYTER_DATA_DIR=str(tmp / "jupyter-data"),   # its notebook signatures (``_trust``) too
                   PYTHONUNBUFFERED="1")
        if sizes:  # helpers.notebook.env.params: these sizes instead of the scale's own
            env["PERF_SIZES"] = json.dumps(sizes)
        self.runs_dir = tmp / "runs"
        self.log = open(tmp / "jupyterlab.log", "w")  # noqa: SIM115 - closed in stop()
        cmd = [str(Path(sys.executable).with_name("jupyter")), "lab", "--ip", "127.0.0.1",
               "--port", str(self.port), "--no-browser", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
               f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={tmp / 'lab-workspaces'}",
               "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly",
               # as `make lab`: kernels get CurveZMQ keys (no "running over TCP without encryption" warning)
               "--MappingKernelManager.transport_encryption=auto", *extra]
        if os.geteuid() == 0:  # CI runs as root
            cmd.append("--allow-root")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(self.url + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - loopback only
            body = r.read()
        return json.loads(body) if body else None

    def wait_ready(self, timeout_s: float = 180):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}; see {self.log.name}")
            try:
                self.api("/api/status")
                return
            except (urllib.error.URLError, OSError):
                time.sleep(1)
        raise TimeoutError(f"JupyterLab did not answer on {self.url} within {timeout_s} s")

    def descendants(self) -> list:
        import psutil

        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> list[str]:
        """Shut kernels down politely, then the server; kill whatever it started that is left."""
        import psutil

        leftovers = []
        procs = self.descendants()
        try:
            for s in self.api("/api/sessions"):
                self.api(f"/api/sessions/{s['id']}", method="DELETE")
        except Exception:  # noqa: BLE001 - the server may already be gone
            pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        procs += _tensorboards_serving(self.runs_dir)
        alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for p in alive:
            leftovers.append(f"{p.pid} {' '.join(p.cmdline()[:3])}")
            p.terminate()
        _, still = psutil.wait_procs(alive, timeout=15)
        for p in still:
            p.kill()
        self.log.close()
        return leftovers


def _seed_other_run(runs_dir: Path) -> str:
    """A scalar run of another notebook (01) in ``runs_dir``; returns its name as TensorBoard lists it."""
    from torch.utils.tensorboard import SummaryWriter

    name = "01_profiler_basics/seeded_by_the_browser_test"
    with SummaryWriter(str(runs_dir / name)) as w:
        w.add_scalar("step_ms", 1.0, 0)
    return name


def _tensorboards_serving(logdir: Path) -> list:
    """TensorBoard processes whose logdir is inside ``logdir`` (ours alone: it is a fresh temporary folder)."""
    import psutil
    from tensorboard import manager

    found = []
    for info in manager.get_all():
        if str(logdir) in info.logdir:
            try:
                found.append(psutil.Process(info.pid))
            except psutil.NoSuchProcess:
                pass
    return found


def _shot(page_or_locator, name: str):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page_or_locator.screenshot(path=str(ARTIFACTS / name))


@contextlib.contextmanager
def _shot_on_failure(page, name: str):
    """A screenshot of the page (test-artifacts/browser_e2e/<name>) when the block fails, then the failure."""
    try:
        yield
    except BaseException:
        try:
            _shot(page, name)
        except Exception:  # noqa: BLE001 - the failure itself matters more than its picture
            pass
        raise


def _prompts(page) -> list[str]:
    return page.eval_on_selector_all(".jp-Notebook .jp-CodeCell .jp-InputPrompt",
                                     "els => els.map(e => e.textContent.trim())")


def _run_all_and_wait(page, n_code: int):
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    quiet = 0

    def finished() -> bool:
        nonlocal quiet
        prompts = _prompts(page)
        busy = any("*" in p for p in prompts)
        numbered = sum(bool(re.search(r"\[\d+\]", p)) for p in prompts)
        quiet = quiet + 1 if (not busy and numbered) else 0
        return quiet >= 3

    _wait(finished, lambda: _prompts(page), RUN_ALL_STALL_S, "Run All Cells: no cell finished",
          lambda: f"prompts: {_prompts(page)}", poll_s=2)
    prompts = _prompts(page)
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                          has_text="Traceback")
    if errors.count():
        raise AssertionError("a cell raised:\n" + errors.first.inner_text()[-3000:])
    assert len(prompts) == n_code and all(re.search(r"\[\d+\]", p) for p in prompts), \
        f"not every code cell ran: {prompts}"


def _panel(page):
    """The widget panel that has a num_workers control and a Run button (the innermost such box)."""
    run_button = page.locator("button.jupyter-button", has_text=re.compile(r"^\s*Run\s*$"))
    return (page.locator(".jupyter-widgets.widget-vbox")
            .filter(has=page.get_by_text("num_workers", exact=False))
            .filter(has=run_button).last), run_button


def _set_num_workers(panel, value: int) -> None:
    ctl = panel.locator(".widget-inline-hbox").filter(has_text="num_workers").last
    if ctl.locator("select").count():
        ctl.locator("select").select_option(label=str(value))
    elif ctl.locator("input").count():
        box = ctl.locator("input").first
        box.fill(str(value))
        box.press("Enter")
        box.press("Tab")
    elif ctl.locator(".widget-readout").count():  # a slider: type into its editable readout
        readout = ctl.locator(".widget-readout")
        readout.click()
        readout.press("Control+A")
        readout.type(str(value))
        readout.press("Enter")
    else:
        raise AssertionError("the num_workers control is neither a dropdown, a text box nor a slider: "
                             + ctl.inner_html()[:500])


def _num_workers(panel) -> int | None:
    ctl = panel.locator(".widget-inline-hbox").filter(has_text="num_workers").last
    for sel, get in (("select", "e => e.options[e.selectedIndex].text"), ("input", "e => e.value"),
                     (".widget-readout", "e => e.textContent")):
        if ctl.locator(sel).count():
            text = ctl.locator(sel).first.evaluate(get).strip()
            return int(text) if text.lstrip("-").isdigit() else None
    return None


def _row_labels(panel) -> list[str]:
    """The index labels of the results table in the panel's output (it may show only its last rows)."""
    return [t.strip() for t in panel.locator(".widget-output table tbody tr th").all_inner_texts()]


def _click_run_and_wait_for_row(panel, before: list[str]) -> list[str]:
    """Click Run; return the table's row labels once a row that was not there before appears."""
    button = panel.locator("button.jupyter-button", has_text=re.compile(r"^\s*Run\s*$"))
    button.click()
    found: list[str] = []

    def new_row() -> bool:
        said = " ".join(panel.locator(".widget-html").all_inner_texts())
        if "Refused" in said or "Failed" in said:
            raise AssertionError(f"the panel refused or failed: {said}")
        found[:] = _row_labels(panel)
        return bool(set(found) - set(before)) and button.is_enabled()

    _wait(new_row, lambda: panel.inner_text(), PANEL_RUN_STALL_S, "no new row in the results table", poll_s=1)
    return found


def _open_file_browser(page):
    """The left sidebar's file browser open, as a newcomer has it (JupyterLab opens it on a fresh workspace)."""
    browser = page.locator(".jp-FileBrowser").first
    if not browser.is_visible():
        page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id='filebrowser']").first.click()
    browser.wait_for(state="visible")


def _shoot_outputs(page, stem: str) -> int:
    """A screenshot of each table and picture output (test-artifacts/browser_e2e/<stem>/cellNN_outK.png)."""
    n = 0
    cells = page.locator(".jp-Notebook .jp-Cell")
    for i in range(cells.count()):
        outs = cells.nth(i).locator(".jp-OutputArea-output")
        for k in range(outs.count()):
            out = outs.nth(k)
            if out.locator("table, img").count():
                try:
                    _shot(out, f"{stem}/cell{i:02d}_out{k}.png")
                    n += 1
                except Exception:  # noqa: BLE001 - a picture missed is not a failure of the notebook
                    pass
    return n


def _executed_copies(dest: Path) -> list[Path]:
    """Copies, in ``dest``, of the executed notebooks in ``$PERF_EXECUTED_NOTEBOOKS`` (as
    tests/notebooks/test_executed_notebooks.py finds them); skips without it, fails on a missing or unexecuted one."""
    raw = os.environ.get(EXECUTED_ENV, "").strip()
    if not raw:
        pytest.skip(f"no executed notebooks to open: `make test` sets ${EXECUTED_ENV} (or set it to a "
                    "`make run` results folder)")
    base = Path(raw)
    dest.mkdir(parents=True)
    copies = []
    for src in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        found = [p for p in (base / src.name, base / src.stem / src.name) if p.exists()]
        if not found:
            pytest.fail(f"no executed copy of {src.stem} in {base} (${EXECUTED_ENV})", pytrace=False)
        nb = json.loads(found[0].read_text())
        if not any(c.get("execution_count") for c in nb["cells"] if c["cell_type"] == "code"):
            pytest.fail(f"{found[0]} was not executed (no execution counts)", pytrace=False)
        copies.append(dest / src.name)
        copies[-1].write_bytes(found[0].read_bytes())
    assert copies, f"no notebooks in {NOTEBOOKS}"
    return copies


def _trust(copies: list[Path], tmp: Path) -> None:
    """Sign ``copies`` in the Lab's signature store (``$JUPYTER_DATA_DIR`` = tmp/jupyter-data): JupyterLab draws a
    trusted notebook's saved widget panels from its widget state, as a reader who ran it sees them (untrusted, they
    show as text: "VBox(children=...)")."""
    import nbformat
    from nbformat.sign import NotebookNotary

    (tmp / "jupyter-data").mkdir(exist_ok=True)
    notary = NotebookNotary(data_dir=str(tmp / "jupyter-data"))
    for nb in copies:
        notary.sign(nbformat.read(str(nb), as_version=4))


def _open_and_render(page, name: str, n_code: int):
    """Open ``name`` as the only notebook in the main area and wait until its saved outputs have laid out."""
    # started here, waited for below: a page.evaluate that awaits the open itself once failed with Playwright's
    # "Resulting promise was garbage collected" (the page's promise lost before it settled), not with an answer
    page.evaluate("(path) => { if (window.perfNotebook) window.perfNotebook.dispose(); window.perfReady = false;"
                  " window.jupyterapp.commands.execute('docmanager:open', {path})"
                  ".then(w => { window.perfNotebook = w; return w.context.ready; })"
                  ".then(() => { window.perfReady = true; }); }", name)
    page.wait_for_function("() => window.perfReady === true", timeout=RENDER_STALL_S * 1000)
    looks: list = [None, 0]   # the last look, and how many in a row were the same

    def laid_out() -> bool:   # the same cells, outputs and loaded pictures in three looks in a row
        now = page.evaluate(_RENDERED_JS)
        looks[1] = looks[1] + 1 if now == looks[0] and now[0] == n_code and now[2] else 0
        looks[0] = now
        return looks[1] >= 3

    _wait(laid_out, lambda: looks[0], RENDER_STALL_S, f"{name}: the saved outputs stopped rendering", poll_s=0.5)


# (code cells shown, output areas, every picture loaded) of the notebook in the page
_RENDERED_JS = """() => [document.querySelectorAll('.jp-Notebook .jp-CodeCell').length,
  document.querySelectorAll('.jp-Notebook .jp-OutputArea-output').length,
  [...document.querySelectorAll('.jp-Notebook img')].every(i => i.complete)]"""


# widget labels cut short ("num_work…"): a label whose text is wider than its box
_CUT_LABELS_JS = """() => [...document.querySelectorAll('.jp-Notebook .widget-label, .jp-Notebook .widget-label-basic')]
  .filter(l => l.offsetParent && l.scrollWidth > l.clientWidth + 1)
  .map(l => ({text: (l.textContent || '').trim(), scroll: l.scrollWidth, client: l.clientWidth}))"""


def _cut_labels(page) -> list[str]:
    """The cut labels; first proves the detector sees a planted one (ipywidgets' own label style, 40 px wide)."""
    found = page.evaluate(_CUT_LABELS_JS)
    page.evaluate("() => { const l = document.createElement('label'); l.className = 'widget-label';"
                  " l.id = 'perf-cut-probe'; l.textContent = 'num_workers of the probe';"
                  " Object.assign(l.style, {display: 'block', width: '40px', overflow: 'hidden',"
                  " whiteSpace: 'nowrap', textOverflow: 'ellipsis'});"
                  " document.querySelector('.jp-Notebook .jp-OutputArea-output').appendChild(l); }")
    seen = page.evaluate(_CUT_LABELS_JS)
    page.evaluate("() => document.getElementById('perf-cut-probe').remove()")
    assert len(seen) == len(found) + 1, "the cut-label detector missed a planted 40 px label"
    return [f"label {c['text']!r}: {c['scroll']} px of text in {c['client']} px" for c in found]


# per cell of the notebook in the page: how many pictures its output shows, loaded and drawn (an <img> with a size,
# or an <svg> with content)
_PICTURES_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].map(cell =>
  [...cell.querySelectorAll('.jp-OutputArea-output img')].filter(i => i.complete && i.naturalWidth > 0).length +
  [...cell.querySelectorAll('.jp-OutputArea-output svg')].filter(s => s.getBoundingClientRect().width > 20).length)"""


# table cells whose content runs past their right edge into the next column (04's "## Call CompiledFxGraph f…##", one
# unbreakable word, overprinted the `calls` column)
_OVERPRINTS_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].flatMap((cell, i) =>
  [...cell.querySelectorAll('.jp-OutputArea-output td, .jp-OutputArea-output th')]
    .filter(td => td.offsetParent && td.scrollWidth > td.clientWidth + 1)
    .map(td => ({cell: i, scroll: td.scrollWidth, client: td.clientWidth,
                 text: (td.innerText || '').trim().slice(0, 80)})))"""


def _overprints(page) -> list[str]:
    """Table cells that overprint their neighbour; first proves the detector sees a planted one (a 600 px word)."""
    found = page.evaluate(_OVERPRINTS_JS)
    planted = page.evaluate(
        "() => { const o = document.querySelector('.jp-Notebook .jp-OutputArea-output'); const t ="
        " document.createElement('table'); t.id = 'perf-overprint-probe'; t.style.tableLayout = 'fixed';"
        " t.style.width = '200px'; t.innerHTML = '<tr><td><div style=\"width: 600px\">probe</div></td><td>1</td></tr>';"
        " o.appendChild(t); return 1; }")
    seen = page.evaluate(_OVERPRINTS_JS)
    page.evaluate("() => document.getElementById('perf-overprint-probe').remove()")
    assert planted and len(seen) == len(found) + 1, "the overprint detector missed a planted 600 px cell"
    return [f"cell {c['cell']}: a table cell's text runs {c['scroll']} px in its {c['client']} px "
            f"(over the next column): {c['text']!r}" for c in found]


def _results_doc(stem: str) -> dict | None:
    """The run's results.json beside its executed copy: ``make test``'s (``<base>/../results/<stem>/``) or a
    ``make run`` folder's (``<base>/<stem>/``); None when neither is there."""
    base = Path(os.environ.get(EXECUTED_ENV, "."))
    for path in (base / stem / "results.json", base.parent / "results" / stem / "results.json"):
        if path.exists():
            return json.loads(path.read_text())
    return None


def _panel_table_html(cells: list[dict], doc: dict) -> str | None:
    """The table a panel shows after a run, as HTML, where the notebook's own cell defines the panel's run function
    (04): the expression it returns for display, evaluated over the run's results (``doc``) with the newest row it
    can show standing for the panel's own row (list names the function fills, e.g. ``PANEL_ROWS``). None where the
    panel's run function lives in the helpers (its table is the lessons' tests' business) or nothing evaluates."""
    import ast

    from helpers.notebook.results import Results

    from IPython.core.inputtransformer2 import TransformerManager

    to_python = TransformerManager().transform_cell   # magics (%tensorboard, %%writefile) as get_ipython() calls
    trees = [ast.parse(to_python("".join(c["source"]))) for c in cells if c["cell_type"] == "code"]
    calls = [n for t in trees for n in ast.walk(t) if isinstance(n, ast.Call) and n.args
             and getattr(n.func, "attr", getattr(n.func, "id", None)) == "run_panel"
             and isinstance(n.args[0], ast.Name)]
    defs = {n.name: n for t in trees for n in ast.walk(t) if isinstance(n, ast.FunctionDef)}
    fn = defs.get(calls[0].args[0].id) if calls else None
    returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None] if fn else []
    if not returns:
        return None
    expr = ast.Expression(returns[-1])
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    ns: dict = {}
    for t in trees:   # the imports that bind a name the expression uses (``cl``)
        for node in t.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and {(a.asname or a.name).split(".")[0]
                                                                     for a in node.names} & names:
                # the notebook's own import lines
                exec(compile(ast.Module([node], []), "<notebook imports>", "exec"), ns)  # noqa: S102
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    holders = set(re.findall(r"^(\w+)\s*=\s*[\w.]*Results\(", source, re.M)) & names
    results = Results(doc.get("notebook", "nb"), doc.get("scale", "smoke"), root=Path("/nonexistent"), autosave=False)
    results.experiments = list(doc.get("experiments", []))
    ns.update({h: results for h in holders})
    rows = [n for n in names - set(ns) if n.isupper()]
    code = compile(expr, "<panel's return>", "eval")
    for row in [r for r in reversed(results.experiments) if r.get("status") == "ok"][:20]:
        try:
            out = eval(code, {**ns, **{r: [row["name"]] for r in rows}})  # noqa: S307 - the notebook's own expression
        except Exception:  # noqa: BLE001 - a row this table does not show: try an older one
            continue
        return out._repr_html_() if hasattr(out, "_repr_html_") else None
    return None


_INJECT_PANEL_JS = """(html) => { const cell = [...document.querySelectorAll('.jp-Notebook .jp-Cell')].filter(c =>
    c.querySelector('.widget-output') &&
    [...c.querySelectorAll('button')].some(b => b.innerText.trim() === 'Run')).pop();
  if (!cell) return -1; const d = document.createElement('div'); d.id = 'perf-panel-table'; d.innerHTML = html;
  d.className = 'jp-OutputArea-output jp-RenderedHTMLCommon jp-RenderedHTML';   // as the Output widget shows it
  d.setAttribute('data-mime-type', 'text/html');
  [...cell.querySelectorAll('.widget-output')].pop().appendChild(d);
  return [...document.querySelectorAll('.jp-Notebook .jp-Cell')].indexOf(cell); }"""


def _panel_overflow_after_a_run(page, cells: list[dict], stem: str) -> list[str]:
    """Whether the panel's output, holding the table it shows after a run (``_panel_table_html``), scrolls sideways
    (04's 1296 px table in a 964 px area)."""
    doc = _results_doc(stem)
    html = _panel_table_html(cells, doc) if doc else None
    if not html:
        return []
    try:   # the whole panel drawn (its Run button and output), not only its first labels: slow on a busy machine
        page.wait_for_function("() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].some(c =>"
                               " c.querySelector('.widget-output') && [...c.querySelectorAll('button')]"
                               ".some(b => b.innerText.trim() === 'Run'))", timeout=60_000)
    except Exception:  # noqa: BLE001 - said below as the finding
        pass
    where = page.evaluate(_INJECT_PANEL_JS, html)
    if where < 0:
        return ["the panel's run function is in the notebook but no panel with a Run button was drawn in 60 s"]
    page.wait_for_timeout(300)
    wide = [o for o in page.evaluate(_OVERFLOWS_JS) if o["cell"] == where]
    page.evaluate("() => document.getElementById('perf-panel-table').remove()")
    return [f"cell {o['cell']}: the panel's table after a run: {o['scroll']} px of content in {o['client']} px"
            for o in wide]


def _promised_pictures_missing(page, cells: list[dict]) -> list[str]:
    """The code cells right under a markdown cell that promises a picture (``PROMISE``: "drawn", "the chart below",
    ...) that show none in the page (06's straggler timelines: figures pyplot did not track drew nothing)."""
    shown = page.evaluate(_PICTURES_JS)
    assert len(shown) == len(cells), f"the page shows {len(shown)} cells, the notebook has {len(cells)}"
    found = []
    for i, c in enumerate(cells):
        prev = cells[i - 1] if i else None
        if c["cell_type"] != "code" or not prev or prev["cell_type"] != "markdown":
            continue
        m = PROMISE.search("".join(prev["source"]))
        if m and not shown[i]:
            found.append(f"cell {i}: the markdown above promises {m.group(0)!r}; no picture is shown")
    return found


def _wait_for_saved_widgets(page, nb: dict) -> int:
    """With saved widget state (nbclient stores it), wait until JupyterLab has drawn the panels from it; returns the
    widget labels shown. Its limit is on nothing newly drawn in the notebook for ``RENDER_STALL_S`` (under the unit
    phase's load 07's panel once took over 120 s and another run over 240 s; alone it takes seconds)."""
    state = nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    if not any(m.get("state", {}).get("description") for m in state.get("state", {}).values()):
        return 0
    _wait(lambda: page.locator(".jp-Notebook .widget-label").count() > 0, lambda: page.evaluate(_DRAWN_JS),
          RENDER_STALL_S, "the saved widget panels were not drawn", poll_s=0.5)
    time.sleep(1)   # the rest of the panel
    return page.locator(".jp-Notebook .widget-label").count()


# what is drawn: the page's elements, the notebook's widget views and output areas (a change is progress)
_DRAWN_JS = """() => [document.querySelectorAll('*').length,
  document.querySelectorAll('.jp-Notebook .jupyter-widgets').length,
  document.querySelectorAll('.jp-Notebook .jp-OutputArea-output').length]"""


def _wait(done, progress, stall_s: float, what: str, detail=lambda: "", poll_s: float = 1.0) -> None:
    """Poll ``done()`` until true. Fails only when ``progress()`` (a snapshot of what is drawn) has not changed for
    ``stall_s`` seconds: a loaded machine may take as long as it needs while something is still being drawn."""
    last, since = object(), time.monotonic()
    while not done():
        now = progress()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > stall_s:
            raise AssertionError(f"{what}: nothing changed for {stall_s:g} s {detail()}".rstrip())
        time.sleep(poll_s)


def _overflows_and_planted(page) -> list[dict]:
    """The output areas that scroll sideways; first proves that the detector sees a planted 3000 px output."""
    overflows = page.evaluate(_OVERFLOWS_JS)
    planted = page.evaluate(
        "() => { const outs = [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')]"
        "  .filter(o => o.scrollWidth <= o.clientWidth + 1);"   # one that does not scroll yet
        " const o = outs[outs.length - 1]; const d = document.createElement('div');"
        " d.id = 'perf-wide-probe'; d.style.width = '3000px'; d.textContent = 'probe'; o.appendChild(d);"
        " return outs.length; }")
    seen = page.evaluate(_OVERFLOWS_JS)
    page.evaluate("() => document.getElementById('perf-wide-probe').remove()")
    assert planted and len(seen) == len(overflows) + 1, "the overflow detector missed a 3000 px output"
    return overflows


def test_saved_outputs_fit_the_view_in_a_real_browser(tmp_path):
    chromium = _require_browser()
    from playwright.sync_api import sync_playwright

    copies = _executed_copies(tmp_path / "executed")
    _trust(copies, tmp_path)
    shas = {nb: _sha(nb) for nb in copies}
    t0 = time.time()
    lab = Lab(tmp_path, root=tmp_path / "executed", extra=("--LabApp.expose_app_in_browser=True",))
    problems: list[str] = []
    try:
        lab.wait_ready()
        with sync_playwright() as pw:
            exe = str(chromium.path) if chromium.path else None
            ctx = pw.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"), executable_path=exe, headless=True, args=CHROMIUM_ARGS,
                viewport=FIT_VIEWPORT)
            ctx.set_default_timeout(180_000)
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            try:
                with _shot_on_failure(page, "failure_lab.png"):
                    page.goto(f"{lab.url}/lab?token={lab.token}")
                    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands"
                                           ".hasCommand('filebrowser:activate')")
                    page.evaluate("async () => { await window.jupyterapp.restored;"
                                  " await window.jupyterapp.commands.execute('filebrowser:activate'); }")
                    page.locator(".jp-FileBrowser").first.wait_for(state="visible")
                for nb in copies:
                    with _shot_on_failure(page, f"{nb.stem}/failure.png"):
                        n_code = sum(c["cell_type"] == "code" for c in json.loads(nb.read_text())["cells"])
                        _open_and_render(page, nb.name, n_code)
                        assert page.locator(".jp-FileBrowser").first.is_visible(), "the file browser closed"
                        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                                              has_text="Traceback")
                        if errors.count():
                            problems.append(f"{nb.name}: a cell shows an error:\n{errors.first.inner_text()[-2000:]}")
                        cells = json.loads(nb.read_text())["cells"]
                        problems += [f"{nb.name} {m}" for m in _promised_pictures_missing(page, cells)]
                        if _wait_for_saved_widgets(page, json.loads(nb.read_text())):
                            problems += [f"{nb.name}: {c}" for c in _cut_labels(page)]
                            problems += [f"{nb.name} {m}" for m in _panel_overflow_after_a_run(page, cells, nb.stem)]
                        problems += [f"{nb.name} {m}" for m in _overprints(page)]
                        overflows = _overflows_and_planted(page)
                        page.locator(".jp-Notebook .jp-Cell").first.scroll_into_view_if_needed()
                        _shot(page, f"{nb.stem}/00_first_screen.png")
                        if os.environ.get("PERF_SCREENSHOTS"):  # every table and picture: slow, on demand
                            print(f"{nb.name}: {_shoot_outputs(page, nb.stem)} table/picture outputs in "
                                  f"{ARTIFACTS / nb.stem}, {time.time() - t0:.0f} s")
                        for o in overflows[:10]:
                            try:
                                _shot(page.locator(".jp-Notebook .jp-Cell").nth(o["cell"]),
                                      f"{nb.stem}/overflow_cell{o['cell']:02d}.png")
                            except Exception:  # noqa: BLE001
                                pass
                        problems += [f"{nb.name} cell {o['cell']} ({o['code']!r}): {o['scroll']} px of content in "
                                     f"{o['client']} px [{o['mime']}] {o['text']!r}" for o in overflows]
                    for s in lab.api("/api/sessions"):   # its kernel is not needed to show saved outputs
                        lab.api(f"/api/sessions/{s['id']}", method="DELETE")
            finally:
                ctx.close()
    finally:
        lab.stop()
        print(f"browser test wall time ({len(copies)} notebooks): {time.time() - t0:.0f} s")
    assert {nb: _sha(nb) for nb in copies} == shas, "the browser session modified a notebook"
    assert not problems, ("errors, or output areas that scroll sideways at 1400x900 with the file browser open:\n"
                          + "\n".join(problems))


def test_jupyterlab_notebook_widgets_and_tensorboard_in_a_real_browser(tmp_path):
    chromium = _require_browser()
    from playwright.sync_api import sync_playwright

    nb = _notebook()
    n_code = sum(c["cell_type"] == "code" for c in json.loads(nb.read_text())["cells"])
    before_sha = _sha(nb)
    before_files = set(os.listdir(NOTEBOOKS))
    t0 = time.time()
    lab = Lab(tmp_path, sizes=BROWSER_SIZES if nb.name == NOTEBOOK else None)
    other = _seed_other_run(lab.runs_dir)   # another notebook's run in the logdir: the frame must not list it
    leftovers: list[str] = []
    try:
        lab.wait_ready()
        with sync_playwright() as pw:
            exe = str(chromium.path) if chromium.path else None  # None: Playwright's own browser
            ctx = pw.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"), executable_path=exe, headless=True, args=CHROMIUM_ARGS,
                viewport={"width": 1400, "height": 1000})
            ctx.set_default_timeout(180_000)
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            try:
                with _shot_on_failure(page, "failure.png"):
                    page.goto(f"{lab.url}/lab/tree/{nb.name}?token={lab.token}")
                    page.locator(".jp-Notebook .jp-CodeCell").first.wait_for()
                    def states() -> list[str]:
                        return [s["kernel"]["execution_state"] for s in lab.api("/api/sessions")]

                    _wait(lambda: "idle" in states(), states, 180, "the notebook's kernel did not start")  # before Run All

                    _run_all_and_wait(page, n_code)
                    print(f"Run All Cells finished after {time.time() - t0:.0f} s")
                    page.locator(".jp-Notebook .jp-Cell").first.scroll_into_view_if_needed()
                    _shot(page, "01_notebook_after_run_all.png")

                    # --- the widget panel, used as a reader would --------------------------------------
                    cut = _cut_labels(page)
                    assert not cut, "widget labels cut short (helpers/notebook/panels.py sizes them):\n" + "\n".join(cut)
                    panel, button = _panel(page)
                    if nb.name == NOTEBOOK:
                        panel.scroll_into_view_if_needed()
                        assert panel.is_visible(), "the widget panel did not render"
                        first = _num_workers(panel)
                        value = 1 if first != 1 else 0
                        _set_num_workers(panel, value)
                        assert _num_workers(panel) == value, "num_workers did not take the new value"
                        _shot(panel, "02_panel_num_workers_changed.png")
                        rows = _click_run_and_wait_for_row(panel, _row_labels(panel))
                        value2 = 0 if value != 0 else 2
                        _set_num_workers(panel, value2)
                        rows2 = _click_run_and_wait_for_row(panel, rows)
                        new = [r for r in rows2 if r not in rows]
                        assert len(new) == 1, f"one click should add one row: {rows} -> {rows2}"
                        assert rows2[-1] == new[0], f"the new row should come last: {rows2}"
                        # the reader's rows and the baseline, not rows the notebook refused (issue 43)
                        shown = panel.locator(".widget-output table").last.inner_text()
                        assert "failed" not in shown, f"the panel's table shows rows it did not run: {shown!r}"
                        if all(r.isdigit() for r in rows + rows2):
                            assert int(new[0]) == max(int(r) for r in rows) + 1, f"{rows} -> {rows2}"
                        print(f"panel: num_workers {first} -> {value} -> {value2}; table rows {rows} -> {rows2}")
                        wide = page.evaluate(_OVERFLOWS_JS)   # the panel's table after two runs included
                        assert not wide, "output areas that scroll sideways after the panel ran:\n" + "\n".join(
                            f"cell {o['cell']} ({o['code']!r}): {o['scroll']} px in {o['client']} px {o['text']!r}"
                            for o in wide)
                        panel.scroll_into_view_if_needed()
                        _shot(panel, "03_panel_after_two_runs.png")
                    else:  # fallback notebook 01: its panel has no num_workers; its Run button must still work
                        assert button.count() >= 1, "no widget panel rendered"

                    # --- inline TensorBoard --------------------------------------------------------------
                    frame_el = page.locator("iframe[id^='tensorboard-frame-']").last
                    frame_el.scroll_into_view_if_needed()
                    page.wait_for_function(
                        "() => { const f = [...document.querySelectorAll(\"iframe[id^='tensorboard-frame-']\")]"
                        ".pop(); return f && f.src && f.src.startsWith('http'); }")
                    src = frame_el.get_attribute("src")
                    port = int(re.search(r":(\d+)/", src).group(1))
                    assert page.get_by_text("TensorBoard answered at").count() >= 1, "tb.inline did not say it answered"
                    # 02 logs into a folder of its own runs alone (tb.notebook_logdir) and serves it: the run names
                    # are its rows' own ("baseline-0"), never "02_data_pipeline/baseline-0", which TensorBoard's run
                    # columns cut to "02_data_pipeline"; another notebook's run (seeded beside it) is not served
                    stem = nb.stem
                    own = lab.runs_dir / f"tensorboard_{stem.split('_', 1)[0]}"
                    assert tb.served_logdir(port) == str(own), (
                        f"the frame serves {tb.served_logdir(port)}, not {stem}'s own folder {own}")
                    runs = tb.scalar_runs(port)
                    assert {"ceiling-0", "baseline-0"} <= set(runs), f"TensorBoard lists not {stem}'s rows: {runs}"
                    assert not [r for r in runs if "/" in r or r.startswith(stem)], f"run names not the rows': {runs}"
                    assert other not in runs and not [r for r in runs if r.startswith("01_")], runs
                    frame = page.frame_locator("iframe[id^='tensorboard-frame-']").last
                    frame.get_by_text("baseline-0", exact=True).first.wait_for(timeout=120_000)   # whole, uncut
                    assert not frame.get_by_text(stem, exact=False).count(), f"the frame shows names with {stem}"
                    assert not frame.get_by_text(other, exact=False).count(), f"the frame lists {other}"
                    time.sleep(2)  # let the charts draw before the picture
                    _shot(frame_el, "04_tensorboard_inline.png")

                    print(f"TensorBoard port {port}: {len(runs)} scalar runs of {stem}'s own: {runs[:6]} ...")
            finally:
                ctx.close()
    finally:
        leftovers = lab.stop()
        print(f"browser test wall time: {time.time() - t0:.0f} s")
    assert _sha(nb) == before_sha, f"{nb.name} was modified by the browser session"
    assert set(os.listdir(NOTEBOOKS)) <= before_files | {".ipynb_checkpoints"}, \
        f"new files in notebooks/: {set(os.listdir(NOTEBOOKS)) - before_files}"
    assert not [p for p in leftovers if "tensorboard" in p], \
        f"TensorBoard outlived its kernel (helpers.notebook.tensorboard.stop_started should stop it): {leftovers}"
