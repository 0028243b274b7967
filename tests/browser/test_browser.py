"""The notebooks and the report in a real browser: JupyterLab on 127.0.0.1, Debian's chromium via Playwright.

Headless notebook runs (``test_notebooks*.py``) check outputs as data; only a browser shows whether the
widgets draw, the live monitor moves while training runs, the slider moves the Gantt and the figures render.
A JupyterLab server (this interpreter's, so its kernel is this environment's) serves copies of
``01_quickstart``, ``02_csp_explained``, ``03_reproducibility``, ``04_async_corrections``, ``05_scaling``,
``07_context_switching``, ``08_your_own_supernet`` and ``09_trust_your_search`` with small parameters;
Playwright drives chromium (``executable_path``: Playwright's own browser download is not used) to run all
cells of 01, 02 and 08 (the live ones: a monitor, a slider) and to open 03, 04, 05, 07 and 09 (one after another,
in one JupyterLab page) as executed once a session for the headless tests (``tests/helpers/runs.py``: every stored
figure must draw), and checks:

* every notebook: JupyterLab started with ``make lab``'s settings shows no "Jupyter news" pop-up;
* 01: the monitor cell holds one widget view, whose Gantt changes while training runs (two samples of its
  bars differ), and which says what happens while the stage processes start; the status bar says Busy while
  it trains; the verification cell reports REPRODUCIBLE; the report link opens the server's ``/files/`` URL in
  a new tab (not JupyterLab's sandboxed viewer), every figure and the Gantt's bars drawn, no console error;
* 08: Busy while its monitor trains, its figures drawn with the run's bars and line after the run, however late its
  view was made (also after the notebook is saved and the page reloaded), the best subnet shown once, its report
  link as 01's;
* 03 and 04 (and 02, 05, 07): every table row visible and no more than 70 px blank under a table;
* 02: the slider changes the Gantt and the legend stays at step 0, every figure's legend lists every drawn
  trace, every table row fits its figure, no error output;
* 05 and 07: every legend entry present (05's ninth), every table row visible (07's ninth), no ``{k}``;
* the report written by 01, opened from ``file://`` with every network request blocked: every figure renders,
  and the headline (verdict) is on the first screen;
* no browser console errors. Screenshots go to ``out/browser/`` (git-ignored) as test artifacts.

Skipped where chromium is missing (``make test`` installs it: ``make chromium``), unless ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from naspipe.runtime.transport.ports import free_port
from tests.helpers.notebook_runner import PLOTLY_MIME, ROOT, inject_parameters, kernel_env, output_mime_types
from tests.helpers.processes import leftovers
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.slow  # the module's server fixture checks that no process outlives it

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "out" / "browser"
NOTEBOOKS = ROOT / "notebooks"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook in front (JupyterLab may restore other tabs)

if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("chromium is not installed (make chromium installs Debian's)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


def _prepare(root: Path) -> None:
    """Copies of the notebooks with small parameters (runs land under ``root/runs``), outputs cleared."""
    params = {
        "01_quickstart.ipynb": {"STAGES": 2, "SUBNETS": 80, "JITTER_MS": 4.0, "OUT": "runs/quickstart"},
        "02_csp_explained.ipynb": {"SUBNETS": 10, "STEPS": 10},
        # (48: a fair sequence, the default now, trains 24 subnets so fast that the monitor's figures were seen empty
        # twice in three suites on a fresh clone, its views made before plotly's front-end module had loaded)
        "08_your_own_supernet.ipynb": {"SUBNETS": 48, "LAYERS": 3, "BUDGET": 4, "REPEATS": 1},
    }  # the figure notebooks (03, 04, 05, 07, 09) come executed: test_figure_notebooks_in_a_browser
    for name, p in params.items():
        nb = inject_parameters(nbformat.read(NOTEBOOKS / name, as_version=4), p)
        nbformat.write(nb, root / name)
    # the settings `make lab` starts JupyterLab with (its lab-settings target): no news pop-up
    subprocess.run(["make", "-s", "-C", str(ROOT), "lab-settings", f"LAB_SETTINGS={root.parent / '.settings'}"],
                   check=True, timeout=60)
    tracker = root.parent / ".settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"autoStartDefaultKernel": true}')


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A JupyterLab server on 127.0.0.1 with a token, on a free port; always shut down."""
    root = tmp_path_factory.mktemp("lab") / "notebooks"
    root.mkdir()
    _prepare(root)
    port, token = free_port(), secrets.token_hex(16)
    aside = root.parent  # server state and log, outside the notebooks folder
    # the kernels talk over Unix sockets beside their connection files, not TCP ports (a port chosen free can be
    # taken by another test's process before the kernel binds it): a short runtime folder keeps the socket paths
    # within the 107 characters a Unix socket's path may have
    runtime = tempfile.mkdtemp(prefix="lab-")
    env = {**kernel_env(), "JUPYTERLAB_SETTINGS_DIR": str(aside / ".settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(aside / ".workspaces"), "JUPYTER_RUNTIME_DIR": runtime,
           "JUPYTER_CONFIG_DIR": str(aside / ".config")}
    log = open(root.parent / "lab.log", "w")  # noqa: SIM115 - closed below
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False",
             "--ServerApp.port_retries=0", "--KernelManager.transport=ipc",
             "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the figure page opens notebooks by command
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    except BaseException:  # (no server: nothing to stop, but the log and the runtime folder are ours)
        log.close()
        shutil.rmtree(runtime, ignore_errors=True)
        raise
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start: {(aside / 'lab.log').read_text()[-2000:]}") from None
                time.sleep(0.3)
        # a workspace per notebook: JupyterLab restores no tab of an earlier test
        yield f"{base}/lab/workspaces/{{0}}/tree/{{0}}.ipynb?token={token}", root, f"{base}/api/{{}}?token={token}"
    finally:
        proc.terminate()  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()
        shutil.rmtree(runtime, ignore_errors=True)
        wait_until(lambda: not leftovers(), 10, every_s=0.2)
        left = [p for p in leftovers() if p.is_running() and p.status() != "zombie"]
        for p in left:  # a kernel or stage process the server left: ours, ended by its pid
            p.kill()
        assert not left, [p.pid for p in left]


@pytest.fixture(scope="module")
def browser(lab) -> Iterator[object]:  # after the server, so it closes before the server's process check
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def tabs(browser) -> Iterator[object]:
    """One browser profile for the notebooks' tabs, as a reader's: JupyterLab's scripts are fetched and compiled
    once (its HTTP and code caches), not once per notebook. (Each notebook still opens in a workspace of its own.)"""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def figure_page(browser, lab) -> Iterator[tuple[object, Console]]:
    """One JupyterLab page (a profile of its own) in which the figure notebooks open one after another, each test
    closing what the last left open: the application loads and compiles once, not once per notebook (about 3 s of
    chromium's CPU each)."""
    url = lab[0].format("figures").replace("/tree/figures.ipynb", "")  # a workspace of its own, no notebook
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page = ctx.new_page()
        console = Console(page)
        page.set_default_timeout(60_000)
        page.goto(url)
        page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
        page.evaluate("() => window.jupyterapp.restored")  # (a promise: evaluate waits for it)
        page.wait_for_timeout(1000)  # JupyterLab asks about news once the application is restored
        assert page.get_by_text("notified about official Jupyter news").count() == 0, "the news pop-up is shown"
        yield page, console
    finally:
        ctx.close()


@pytest.fixture(autouse=True)
def _pages_end_with_their_test(request) -> Iterator[None]:
    """A test's pages close and the server's kernels end when it ends, passed or failed: a failed test's notebook
    would otherwise go on running beside the next test's (the kernel runs the cells it was sent)."""
    yield
    if "tabs" in request.fixturenames:
        for page in request.getfixturevalue("tabs").pages:
            page.close()
    if "lab" in request.fixturenames:
        _shutdown_kernels(request.getfixturevalue("lab")[2])


# what ipywidgets and anywidget log when their own timeouts run out on a loaded machine (a page reload)
LOAD_TIMEOUTS = ("console: Error: widget model not found", "pageerror: [anywidget] Failed to initialize model.")


class Console:
    """Browser console errors and page errors of one page."""

    def __init__(self, page: object) -> None:
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))


def _open_notebook(tabs: object, url: str) -> tuple[object, Console]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = tabs.new_page()
    console = Console(page)
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=90_000)
    page.wait_for_timeout(1500)
    _accept_kernel(page)
    # the kernel is ready when the toolbar's kernel status says idle
    page.wait_for_function("() => document.querySelector('.jp-Notebook-ExecutionIndicator') !== null"
                           " && document.querySelector('.jp-Notebook-ExecutionIndicator')"
                           ".getAttribute('data-status') === 'idle'", timeout=90_000)
    page.wait_for_timeout(1000)  # JupyterLab asks about news once the application is restored
    assert page.get_by_text("notified about official Jupyter news").count() == 0, "the news pop-up is shown"
    return page, console


def _accept_kernel(page: object) -> None:
    """Answer JupyterLab's "Select Kernel" dialog, if it shows, with the notebook's own kernel."""
    select = page.locator(".jp-Dialog button", has_text=re.compile(r"^Select$"))
    if select.count():
        select.first.click()


def _run_all(page: object) -> None:
    _accept_kernel(page)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click(timeout=30_000)
    item = page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$"))
    try:
        item.click(timeout=15_000)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "run_menu.png"))
        raise


def _wait_done(page: object, timeout_s: float, name: str) -> None:
    """All code cells executed: every input prompt holds a number, none a star (screenshot on a timeout)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(
            """() => { const ps = [...document.querySelectorAll(
                           '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')];
                       return ps.length > 0 && ps.every(p => /\\[\\d+\\]/.test(p.textContent)); }"""):
        if time.monotonic() > deadline:
            page.screenshot(path=str(ARTIFACTS / f"{name}_timeout.png"))
            raise TimeoutError(f"{name}: cells still running after {timeout_s} s")
        _accept_kernel(page)
        page.wait_for_timeout(500)


def _shutdown_kernels(api: str) -> None:
    """End every kernel of the server (REST API): the next notebook starts on an idle machine."""
    with urllib.request.urlopen(api.format("sessions"), timeout=10) as r:
        sessions = json.loads(r.read())
    for sess in sessions:
        req = urllib.request.Request(api.format(f"sessions/{sess['id']}"), method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()


def _cell(page: object, text: str) -> object:
    """The code cell whose source contains ``text``."""
    return page.locator(f"{PANEL} .jp-CodeCell", has=page.locator(".jp-InputArea", has_text=text)).first


def _kernel_status(page: object) -> str:
    """What JupyterLab shows of the kernel: the toolbar indicator's state and the status bar's text."""
    return page.evaluate("""() => {
        const ind = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
        const bar = [...document.querySelectorAll('.jp-StatusBar-TextItem')].map(t => t.textContent)
            .find(t => /Idle|Busy/.test(t)) || '';
        return (ind ? ind.getAttribute('data-status') : '?') + ' | ' + bar; }""")


def _legends_complete(page: object) -> list[str]:
    """Names of drawn traces missing from their figure's legend (plotly omits a legend entry carried by an
    empty trace, so bars drawn by another trace of its group go unexplained)."""
    return page.evaluate("""() => {
        const bad = [];
        for (const el of document.querySelectorAll('.js-plotly-plot')) {
            if (!el._fullLayout || el._fullLayout.showlegend === false) continue;
            const shown = new Set([...el.querySelectorAll('.legend .legendtext')].map(t => t.textContent));
            if (shown.size === 0) continue;
            const drawn = t => t.visible !== false && ((t.x && t.x.length) || (t.y && t.y.length));
            const want = new Set((el.data || []).filter(t => t.name && drawn(t)).map(t => t.name));
            const title = (el._fullLayout.title && el._fullLayout.title.text) || '?';
            for (const n of want) if (!shown.has(n)) bad.push(title + ': ' + n);
        }
        return bad; }""")


def _legends_cut(page: object) -> int:
    """Legends too tall for their figure: plotly hides the entries that do not fit behind a scrollbar."""
    return page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot .legend rect.scrollbar')]
        .filter(r => parseFloat(r.getAttribute('height') || '0') > 0).length""")


def _tables_fit(page: object) -> list[str]:
    """Plotly tables that clip a row (plotly's scrollbar has room to scroll) or leave more than 70 px blank
    under their last row (the figure taller than its rows)."""
    return page.evaluate("""() => [...document.querySelectorAll(
            '.jp-NotebookPanel:not(.lm-mod-hidden) .js-plotly-plot')].filter(el => el.querySelector('.table'))
        .map(el => {
            const title = (el._fullLayout && el._fullLayout.title && el._fullLayout.title.text) || '?';
            const cut = [...el.querySelectorAll('.scrollbar-glyph')].some(g => g.__data__ && g.__data__.scrollbarState
                && g.__data__.scrollbarState.wiggleRoom > 0);
            const bottom = Math.max(...[...el.querySelectorAll('.table .cell-rect')]
                .map(c => c.getBoundingClientRect().bottom));
            const blank = el.querySelector('.main-svg').getBoundingClientRect().bottom - bottom;
            return cut ? title + ': a row cut off' : blank > 70 ? title + `: ${Math.round(blank)} px blank` : '';
        }).filter(t => t)""")


def _changed(read: object, old: str, timeout_s: float = 30) -> str:
    """``read()`` once it differs from ``old`` and has then held still for 0.3 s; the latest read at ``timeout_s``.

    A slider's round trip through the kernel, polled with a deadline, not a fixed sleep; a slider that moves
    nothing still fails. The hold matters: plotly.js redraws in steps (the bars, then the legend), and a read
    taken between them saw the legend gone (CI, 2026-12-07)."""
    deadline = time.monotonic() + timeout_s
    while (now := read()) == old and time.monotonic() < deadline:
        time.sleep(0.05)
    while now != old and time.monotonic() < deadline:
        time.sleep(0.3)
        if (again := read()) == now:
            break
        now = again
    return now


def _slide(page: object, player: object, key: str, want: str | None = None) -> None:
    """Press ``key`` on a schedule player's slider, then wait for the kernel's redraw: its label changes (to match
    ``want``, a regex, when given). The slider's readout moves at once, in the browser: the key is pressed again (up
    to three times) only while it has not, as a focus JupyterLab takes back (after a kernel's status or a dialog)
    sends a key elsewhere; a slow kernel is waited for, not pressed again."""
    handle = player.locator(".widget-slider .noUi-handle, .widget-slider input").first
    readout = player.locator(".widget-readout").first
    label = lambda: " | ".join(player.locator(".widget-label").all_text_contents())  # noqa: E731
    value, old = readout.text_content(), label()
    for _ in range(3):
        handle.focus()
        page.keyboard.press(key)
        if wait_until(lambda: readout.text_content() != value, 5, every_s=0.1):
            break
    else:
        page.screenshot(path=str(ARTIFACTS / f"02_player_{key}_failed.png"))
        raise AssertionError(f"{key} did not reach the slider: {_player(player)}")
    drawn = (lambda: re.search(want, label()) is not None) if want else (lambda: label() != old)
    if not wait_until(drawn, 30, every_s=0.1):
        page.screenshot(path=str(ARTIFACTS / f"02_player_{key}_not_drawn.png"))
        raise AssertionError(f"the kernel did not redraw after {key}: {_player(player)}")


def _player(cell: object) -> dict:
    """What a schedule player shows, for a failure's message: its figures, its slider's label, the focused element,
    its figure's place on the screen, legend entries drawn, and plotly's own view of the traces and the legend."""
    return cell.evaluate("""c => { const el = c.querySelector('.js-plotly-plot');
        const r = el ? el.getBoundingClientRect() : null;
        return {plots: [...c.querySelectorAll('.js-plotly-plot')].map(p => (p.data || []).length + ' traces, '
                           + p.querySelectorAll('.legend .legendtext').length + ' legend entries'),
                label: [...c.querySelectorAll('.widget-label')].map(l => l.textContent).join(' | '),
                focused: document.activeElement && (document.activeElement.tagName + '.'
                                                     + document.activeElement.getAttribute('class')),
                rect: r && [Math.round(r.top), Math.round(r.bottom), window.innerHeight],
                legend_drawn: el ? el.querySelectorAll('.legend .legendtext').length : null,
                showlegend: el && el._fullLayout ? el._fullLayout.showlegend : null,
                traces: el && el._fullData ? el._fullData.map(t => [t.name, t.visible, t.showlegend,
                                                                    t.x && t.x.length]) : null}; }""")


def _prompt(cell: object) -> str:
    """A code cell's input prompt as shown: ``[*]`` queued or running, ``[3]`` done."""
    return cell.locator(".jp-InputPrompt").text_content() or ""


def _open_report(page: object, name: str) -> None:
    """Click the notebook's report link: a new full browser tab (not JupyterLab's sandboxed viewer, where the
    report's scripts are blocked) with every figure drawn, the Gantt's bars among them, and no console error."""
    link = page.locator(f"{PANEL} a[id^='naspipe-report-']").first
    assert "/files/" in link.get_attribute("href")
    with page.context.expect_page(timeout=30_000) as opened:
        link.click()
    tab = opened.value
    errors = Console(tab).errors
    tab.wait_for_function("() => { const d = [...document.querySelectorAll('.plotly-graph-div')];"
                          " return d.length > 0 && d.every(x => x.querySelector('.main-svg')); }", timeout=60_000)
    tab.wait_for_timeout(500)
    tab.screenshot(path=str(ARTIFACTS / f"{name}_report_from_link.png"))
    gantt_bars = tab.evaluate("() => [...document.querySelectorAll('.plotly-graph-div')].filter(d => "
                              "(d.layout && d.layout.title && /gantt|stage|CSP/i.test(JSON.stringify(d.layout.title)))"
                              " || d.querySelector('.barlayer path')).map(d => d.querySelectorAll('.barlayer path')"
                              ".length)")
    assert gantt_bars and max(gantt_bars) > 0, f"{name}: no Gantt bars in the report"
    assert not errors, errors
    tab.close()


@pytest.mark.timeout(480)
def test_quickstart_and_its_report_in_a_browser(browser, tabs, lab):
    url, root, api = lab
    page, console = _open_notebook(tabs, url.format("01_quickstart"))
    _run_all(page)
    monitor = _cell(page, "LiveMonitor(")
    try:
        monitor.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "01_no_monitor.png"), full_page=True)
        raise
    samples, deadline = [], time.monotonic() + 240
    while time.monotonic() < deadline:  # sample the monitor's Gantt while training runs
        label = monitor.locator(".widget-html-content").first.text_content(timeout=5_000) or ""
        bars = monitor.locator(".js-plotly-plot").first.locator(".barlayer path").count()
        samples.append((round(time.monotonic(), 2), bars, label[:60], _kernel_status(page)))
        if "starting" in label and not any("starting" in s[2] for s in samples[:-1]):
            monitor.screenshot(path=str(ARTIFACTS / "01_monitor_starting.png"))
        if bars and len({s[1] for s in samples if s[1]}) >= 2:
            monitor.screenshot(path=str(ARTIFACTS / "01_monitor_running.png"))
            break
        time.sleep(0.25)
    # the kernel's state as JupyterLab shows it while the cell trains: Busy (a control request JupyterLab sends
    # when the widget shows flips it to Idle for a moment, until the monitor announces busy again)
    moved = len({s[1] for s in samples if s[1]}) >= 2
    if not moved:  # (seen once in a full run: both figures drawn with plotly's defaults, no title, no bar)
        monitor.screenshot(path=str(ARTIFACTS / "01_monitor_still.png"))
    assert moved, f"the monitor never moved (time, bars, label, status; last of {len(samples)}): {samples[-5:]}"
    idle = [x for x in samples if "Busy" not in x[3] or x[3].startswith("idle")]
    assert len(idle) <= 5 and "Busy" in samples[-1][3], f"the status bar says Idle while training: {samples}"
    _wait_done(page, 240, "01")
    monitor.screenshot(path=str(ARTIFACTS / "01_monitor_done.png"))
    for i, cell in enumerate(page.locator(f"{PANEL} .jp-CodeCell").all()):  # every output as a user sees it
        if cell.locator(".jp-OutputArea-child").count():
            cell.screenshot(path=str(ARTIFACTS / f"01_cell{i:02d}.png"))
    assert monitor.locator(".jp-OutputArea-child").count() == 1  # one monitor, not two
    assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                        has_text="Traceback").count() == 0
    assert "REPRODUCIBLE: identical" in _cell(page, "result.verify(").locator(".jp-OutputArea").text_content()
    link = page.locator("a[id^='naspipe-report-']").first
    assert "/files/runs/quickstart/csp/report.html" in link.get_attribute("href")
    _open_report(page, "01")
    assert not _legends_complete(page), _legends_complete(page)
    assert not console.errors, console.errors
    page.close()
    _shutdown_kernels(api)

    # the report, offline: from file:// with every network request refused
    report = root / "runs" / "quickstart" / "csp" / "report.html"
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort())
    rpage = ctx.new_page()
    rconsole = Console(rpage)
    rpage.goto(report.as_uri())
    rpage.wait_for_function("() => { const d = [...document.querySelectorAll('.plotly-graph-div')];"
                            " return d.length > 0 && d.every(x => x.querySelector('.main-svg')); }", timeout=60_000)
    rpage.screenshot(path=str(ARTIFACTS / "report_first_screen.png"))
    assert rpage.locator(".headline .verdict").is_visible()
    assert rpage.locator(".headline .verdict").bounding_box()["y"] < 900  # the answer on the first screen
    assert "Identical to the reference" in rpage.locator(".headline .verdict").text_content()
    figs = rpage.evaluate("() => [...document.querySelectorAll('.plotly-graph-div')].map(d => "
                          "d.querySelectorAll('.main-svg path, .main-svg rect').length)")
    assert len(figs) >= 2 and all(n > 0 for n in figs), figs
    rpage.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
    assert not rconsole.errors, rconsole.errors
    ctx.close()


@pytest.mark.timeout(480)
def test_csp_explained_in_a_browser(tabs, lab):
    url, _, api = lab
    page, console = _open_notebook(tabs, url.format("02_csp_explained"))
    _run_all(page)
    _wait_done(page, 240, "02")
    player = _cell(page, "schedule_player(")
    plot = player.locator(".js-plotly-plot").first
    plot.wait_for(timeout=30_000)
    player.scroll_into_view_if_needed()
    bars = lambda: plot.evaluate(  # noqa: E731  (every layer: the bars' and the legend's, drawn apart)
        "el => [...el.querySelectorAll('.main-svg')].map(s => s.innerHTML).join('')")
    legend = plot.locator(".legend .legendtext")
    assert wait_until(lambda: legend.count() >= 2, 30, every_s=0.1), f"no legend at the end: {_player(player)}"
    assert player.locator(".js-plotly-plot").count() == 1, f"the player shows two figures: {_player(player)}"
    before = bars()
    page.screenshot(path=str(ARTIFACTS / "02_player_end.png"))
    _slide(page, player, "Home", want=r"t = 0 units: 0 tasks")  # the slider to step 0: an empty schedule
    player.scroll_into_view_if_needed()
    zero = _changed(bars, before)  # (the kernel redraws it: about 0.1 s under two busy loops)
    if not wait_until(lambda: legend.count() >= 2, 10, every_s=0.1):
        page.screenshot(path=str(ARTIFACTS / "02_player_step0_failed.png"))
        raise AssertionError(f"the legend vanished at step 0: {_player(player)}; console: {console.errors}")
    zero = bars()  # (step 0 as drawn, its legend too)
    _slide(page, player, "ArrowRight")
    one = _changed(bars, zero)
    _slide(page, player, "ArrowRight")
    two = _changed(bars, one)  # (each step awaited: the screenshot shows step 2, not step 1)
    page.screenshot(path=str(ARTIFACTS / "02_player_step2.png"))
    assert before != zero != one != two, "the slider does not move the Gantt"
    for i, cell in enumerate(page.locator(f"{PANEL} .jp-CodeCell").all()):
        if cell.locator(".jp-OutputArea-child").count():
            cell.screenshot(path=str(ARTIFACTS / f"02_cell{i:02d}.png"))
    assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                        has_text="Traceback").count() == 0
    assert not _legends_complete(page), _legends_complete(page)
    assert page.locator(f"{PANEL} .js-plotly-plot .table").count() >= 1 and not _tables_fit(page), _tables_fit(page)
    assert not console.errors, console.errors
    page.close()
    _shutdown_kernels(api)


@pytest.mark.timeout(480)
@pytest.mark.parametrize("name", ["03_reproducibility", "04_async_corrections", "05_scaling",
                                  "07_context_switching", "09_trust_your_search"])
def test_figure_notebooks_in_a_browser(figure_page, lab, executed_notebook, name):
    """The run that tests/notebooks checks as data (executed once a session, its widget state stored), opened in
    JupyterLab as a reader opens a run notebook: every output drawn, every check of the module's docstring."""
    _, root, api = lab
    executed = executed_notebook(name)
    nb = nbformat.read(executed, as_version=4)
    for cell in nb.cells:  # a live widget (09's monitor) cannot be redrawn from a saved run: its text stays
        for out in cell.get("outputs", []):
            out.get("data", {}).pop(WIDGET_MIME, None)
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, root / f"{name}.ipynb")
    plots = output_mime_types(nbformat.read(executed, as_version=4))[PLOTLY_MIME]
    page, console = figure_page
    seen = len(console.errors)
    _close_all(page)  # (what an earlier test left open)
    page.evaluate("async path => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }",
                  f"{name}.ipynb")
    page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=90_000)
    _accept_kernel(page)
    page.wait_for_function(f"() => document.querySelector('{PANEL} .jp-Notebook-ExecutionIndicator')"
                           "?.getAttribute('data-status') === 'idle'", timeout=90_000)  # its kernel ready: no dialog
    _wait_done(page, 30, name[:2])  # every code cell shows its execution count: the whole notebook ran
    for cell in page.locator(f"{PANEL} .jp-CodeCell").all():
        if cell.locator(".jp-OutputArea-child").count():
            cell.scroll_into_view_if_needed()  # JupyterLab draws the outputs of the cells in view
    page.wait_for_function(f"() => [...document.querySelectorAll('{PANEL} .js-plotly-plot')]"
                           f".filter(p => p.querySelector('.main-svg')).length >= {plots}",
                           timeout=60_000)  # every stored plotly figure drawn
    for i, cell in enumerate(page.locator(f"{PANEL} .jp-CodeCell").all()):
        if cell.locator(".jp-OutputArea-child").count():
            cell.screenshot(path=str(ARTIFACTS / f"{name[:2]}_cell{i:02d}.png"))
    outputs = page.locator(f"{PANEL} .jp-OutputArea").all_text_contents()
    assert not any("{k}" in t for t in outputs), "a literal {k} placeholder in the output"
    assert not any("VBox(children=" in t for t in outputs), "a widget shown as its repr (09's monitor)"
    assert page.locator(f"{PANEL} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                        has_text="Traceback").count() == 0
    assert not _legends_complete(page), _legends_complete(page)  # (the page shows this notebook alone)
    assert _legends_cut(page) == 0 and not _tables_fit(page), _tables_fit(page)
    if name != "09_trust_your_search":  # (09 shows a text report and figures, no plotly table)
        assert page.locator(f"{PANEL} .js-plotly-plot .table").count() >= 1
    assert not console.errors[seen:], console.errors[seen:]
    _close_all(page)
    _shutdown_kernels(api)


def _close_all(page: object) -> None:
    """Close every document of the page's JupyterLab without asking to save (opening marks a notebook changed: its
    kernel's metadata), and wait until none is left (JupyterLab's launcher takes the empty main area)."""
    page.evaluate("""() => { for (const w of [...window.jupyterapp.shell.widgets('main')].filter(w => w.context)) {
                                 w.context.model.dirty = false;
                                 w.dispose(); } }""")
    page.wait_for_function("() => ![...window.jupyterapp.shell.widgets('main')].some(w => w.context)",
                           timeout=30_000)


def _assert_drawn(monitor: object, when: str, timeout_s: float = 60) -> None:
    """The monitor's Gantt has bars and its utilisation figure a line, within ``timeout_s`` (a loaded machine draws
    the two figures' views one after the other)."""
    plots, deadline = monitor.locator(".js-plotly-plot"), time.monotonic() + timeout_s
    while True:
        bars = plots.first.locator(".barlayer path").count() if plots.count() else 0
        lines = plots.nth(1).locator(".scatterlayer path.js-line").count() if plots.count() > 1 else 0
        if (bars and lines) or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert plots.count() == 2, f"the monitor shows {plots.count()} figures {when}, not 2"
    assert bars > 0, f"the monitor's Gantt is empty {when}"
    assert lines > 0, f"the monitor's line is empty {when}"


@pytest.mark.timeout(480)
def test_your_own_supernet_and_its_report_in_a_browser(tabs, lab):
    """08: the kernel shows Busy while the stages train (the monitor's cell follows the run), the monitor shows the
    run's figures after it (and after the notebook is saved and the page reloaded), the best subnet is shown once,
    the report link opens a full tab whose Gantt is drawn (it used to open the sandboxed viewer: empty Gantt, blocked
    scripts)."""
    url, _, api = lab
    page, console = _open_notebook(tabs, url.format("08_your_own_supernet"))
    _run_all(page)
    monitor = _cell(page, "LiveMonitor(")
    # the monitor's cell shows the monitor, starts the training and follows it (block=True) until the run ends; the
    # next cell (job.wait()) collects it: the status bar is sampled from the moment the cell before the monitor's is
    # done (its prompt numbered) until the waiting cell is, which spans the whole run. (Not from when the monitor's
    # output shows: on a loaded machine a short run can end before JupyterLab draws it.)
    before, waiting, busy = _cell(page, "naspipe.simulate("), _cell(page, "result = job.wait()"), []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not re.search(r"\[\d+\]", _prompt(waiting)):
        if re.search(r"\[\d+\]", _prompt(before)):
            busy.append(_kernel_status(page))
        time.sleep(0.05)
    idle = [x for x in busy if "Busy" not in x]
    assert busy and len(idle) <= 5, f"the status bar says Idle while the stages train: {busy}"
    monitor.locator(".js-plotly-plot").first.wait_for(timeout=60_000)  # its figure drawn (after the run too)
    _wait_done(page, 300, "08")
    # drawn with the run's bars and line, however late its view was made (a short run here often ends before
    # plotly's front-end module has loaded: the figures were then drawn empty, naspipe.viz.widget_views)
    _assert_drawn(monitor, "after the run")
    for i, cell in enumerate(page.locator(f"{PANEL} .jp-CodeCell").all()):
        if cell.locator(".jp-OutputArea-child").count():
            cell.screenshot(path=str(ARTIFACTS / f"08_cell{i:02d}.png"))
    assert page.locator(f"{PANEL} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                        has_text="Traceback").count() == 0
    search = _cell(page, "search_run(")
    assert search.locator(".jp-OutputArea-child").count() == 1  # the summary, no second copy of the best subnet
    _open_report(page, "08")
    assert not console.errors, console.errors
    # saved and reloaded: JupyterLab makes the monitor's views again, from the widgets' state in the kernel. (On a
    # loaded machine ipywidgets may give up asking the kernel for it within its 4 s, "model not found", and
    # a reload asks again: up to six tries (three were seen to run out once, on a fresh clone's suite); anywidget may
    # say its 2 s to load plotly's module ran out, and the module loads on. Those two console errors of the widget
    # libraries are the only ones allowed here.)
    page.keyboard.press("Control+s")
    page.locator(".jp-mod-dirty").first.wait_for(state="detached", timeout=30_000)
    for _ in range(6):
        page.reload()
        page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=90_000)
        monitor = _cell(page, "LiveMonitor(")
        monitor.scroll_into_view_if_needed()  # (JupyterLab draws only the cells in view)
        shown = monitor.locator(".js-plotly-plot").or_(monitor.get_by_text("model not found")).first
        shown.wait_for(timeout=60_000)
        if not monitor.get_by_text("model not found").count():
            break
    try:
        _assert_drawn(monitor, "after a reload")
    finally:
        monitor.screenshot(path=str(ARTIFACTS / "08_monitor_reloaded.png"))
    others = [e for e in console.errors if not e.startswith(LOAD_TIMEOUTS)]
    assert not others, others
    page.close()
    _shutdown_kernels(api)
