"""Each notebook in a real JupyterLab: run all cells, no error anywhere, every control redraws its view.

`make e2e` runs this (not `make test`). One test per notebook: open it with ?reset, run all cells through
JupyterLab's command registry, wait until every code cell has run and the kernel is idle, look for error
outputs and broken widgets, then move each slider with the keyboard and pick another option in each
dropdown, and check that the figure (or text) under the control changed. A screenshot of the first
explorer is saved per notebook (conftest.save_screenshot).
"""
from __future__ import annotations

import time

import pytest
from e2e_support import NOTEBOOKS, record_timing, save_screenshot, shows_widgets

pytestmark = pytest.mark.e2e

PANEL = ".jp-NotebookPanel:visible"
RUN_TIMEOUT_MS = 600_000   # all cells of one notebook
REDRAW_TIMEOUT_MS = 120_000  # one control change -> new figure (the decoder dropdown samples 60,000 sequences)

# Progress of the current notebook, read from JupyterLab's models (window.jupyterapp, expose_app_in_browser).
PROGRESS_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.sessionContext || !panel.sessionContext.session) return null;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  let run = 0, errors = 0;
  for (const c of cells) {
    if (c.model.executionCount !== null) run += 1;
    for (let i = 0; i < c.model.outputs.length; i++) {
      if (c.model.outputs.get(i).type === 'error') errors += 1;
    }
  }
  const kernel = panel.sessionContext.session.kernel;
  return {code: cells.length, run, errors, status: kernel ? kernel.status : 'none'};
}"""


def view_signature(explorer) -> str:
    """What an explorer currently shows: the src of each image in its output view plus its text."""
    return explorer.evaluate("""el => {
      const out = el.querySelector('.widget-output') || el;
      const imgs = Array.from(out.querySelectorAll('img')).map(i => i.getAttribute('src') || '');
      return imgs.join('|') + '||' + out.innerText;
    }""")


def readout(handle) -> str:
    """The value a slider shows next to its track (aria-valuenow is rounded to one decimal)."""
    return handle.evaluate("""h => {
      const r = h.closest('.widget-slider').querySelector('.widget-readout');
      return r ? (r.value !== undefined && r.value !== '' ? r.value : r.textContent).trim()
               : h.getAttribute('aria-valuetext');
    }""")


def wait_for_change(page, explorer, before: str, what: str, quiet_s: float = 1.0) -> float:
    """Wait until the kernel is idle and the view has stayed the same for quiet_s; it must differ from before.

    Waiting for the view to settle (not just for the first change) matters: three key presses queue three
    redraws, and a control moved next must be judged by its own redraw, not by a late one of the slider.
    """
    t0 = time.perf_counter()
    deadline = t0 + REDRAW_TIMEOUT_MS / 1000
    last, stable_since = view_signature(explorer), time.perf_counter()
    while time.perf_counter() < deadline:
        page.wait_for_timeout(100)
        now = view_signature(explorer)
        if now != last:
            last, stable_since = now, time.perf_counter()
            continue
        idle = page.evaluate(f"() => {{ const p = ({PROGRESS_JS})(); return p && p.status === 'idle'; }}")
        if idle and time.perf_counter() - stable_since >= quiet_s:
            assert now != before, f"{what}: the view did not change"
            assert now.split("||")[0], f"{what}: no figure shown after the change"
            return time.perf_counter() - t0
    raise AssertionError(f"{what}: the view did not settle within {REDRAW_TIMEOUT_MS / 1000:.0f} s")


def assert_no_errors(page, where: str) -> None:
    panel = page.locator(PANEL)
    text = panel.inner_text()
    assert "Error displaying widget" not in text, f"{where}: a widget failed to render"
    assert "interactive(children=" not in text, f"{where}: a widget rendered as text (jupyterlab_widgets missing?)"
    assert "Loading widget..." not in text, f"{where}: a widget never finished loading"
    stderr = panel.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    tracebacks = [t for t in stderr.all_inner_texts() if "Traceback" in t or "Error" in t]
    assert not tracebacks, f"{where}: error output:\n" + "\n---\n".join(t[:2000] for t in tracebacks)


def run_all(page, notebook: str) -> dict:
    page.wait_for_function(f"() => {{ const p = ({PROGRESS_JS})(); return p && p.status === 'idle'; }}",
                           timeout=120_000)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    done = page.wait_for_function(
        f"() => {{ const p = ({PROGRESS_JS})();"
        "  return p && (p.errors > 0 || (p.run === p.code && p.status === 'idle')) ? p : null; }",
        timeout=RUN_TIMEOUT_MS, polling=250)
    progress = done.json_value()
    # the status bar agrees: "Python 3 (ipykernel) | Idle"
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for(timeout=30_000)
    assert progress["errors"] == 0, f"{notebook}: {progress['errors']} cell(s) raised an error"
    assert progress["run"] == progress["code"], f"{notebook}: only {progress['run']}/{progress['code']} cells ran"
    return progress


def exercise_controls(page, notebook: str) -> dict:
    """Move every slider and dropdown of every explorer; each move must redraw that explorer's view."""
    panel = page.locator(PANEL)
    # An explorer: the top-level widget box of one cell output that contains an Output widget.
    explorers = panel.locator(".jp-OutputArea-output > .widget-vbox:has(.widget-output)")
    n_explorers = explorers.count()
    counts = {"explorers": n_explorers, "sliders": 0, "dropdowns": 0, "checkboxes": 0}
    if not shows_widgets(notebook):
        return counts
    assert n_explorers > 0, f"{notebook}: no slider view rendered"
    for e in range(n_explorers):
        explorer = explorers.nth(e)
        explorer.scroll_into_view_if_needed()
        explorer.locator(".widget-output img").first.wait_for(timeout=REDRAW_TIMEOUT_MS)
        handles = explorer.locator(".widget-slider .noUi-handle")
        for i in range(handles.count()):
            handle = handles.nth(i)
            label = f"{notebook} explorer {e} slider {i}"
            before = view_signature(explorer)
            value_before = readout(handle)
            handle.focus()
            for key in ("ArrowRight", "ArrowLeft"):  # ArrowLeft only if the slider already sat at its maximum
                for _ in range(3):
                    handle.press(key)
                    page.wait_for_timeout(150)
                if readout(handle) != value_before:
                    break
            assert readout(handle) != value_before, f"{label}: the arrow keys did not move it ({value_before})"
            label += f" ({value_before} -> {readout(handle)})"
            wait_for_change(page, explorer, before, label)
            counts["sliders"] += 1
        selects = explorer.locator(".widget-dropdown select")
        for i in range(selects.count()):
            select = selects.nth(i)
            label = f"{notebook} explorer {e} dropdown {i}"
            options = select.locator("option").evaluate_all("os => os.map(o => o.value)")
            current = select.input_value()
            other = next(v for v in options if v != current)
            before = view_signature(explorer)
            select.select_option(other)
            wait_for_change(page, explorer, before, label)
            counts["dropdowns"] += 1
        boxes = explorer.locator(".widget-checkbox input[type=checkbox]")
        for i in range(boxes.count()):
            before = view_signature(explorer)
            boxes.nth(i).click()
            wait_for_change(page, explorer, before, f"{notebook} explorer {e} checkbox {i}")
            counts["checkboxes"] += 1
    assert counts["sliders"] + counts["dropdowns"] + counts["checkboxes"] > 0, f"{notebook}: no controls found"
    return counts


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_notebook_runs_and_every_control_redraws(lab, browser, notebook):
    t0 = time.perf_counter()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        page.goto(lab.url(notebook))
        page.locator(PANEL).wait_for(timeout=120_000)
        t_open = time.perf_counter()
        run_all(page, notebook)
        t_run = time.perf_counter()
        if shows_widgets(notebook):  # widgets render a moment after the last output arrives
            page.locator(f"{PANEL} .jp-OutputArea-output > .widget-vbox:has(.widget-output img)").first.wait_for(
                timeout=60_000)
        assert_no_errors(page, f"{notebook} after Run All")
        counts = exercise_controls(page, notebook)
        assert_no_errors(page, f"{notebook} after moving the controls")
        first = page.locator(f"{PANEL} .jp-OutputArea-output > .widget-vbox:has(.widget-output)")
        if first.count():
            first.first.evaluate("el => el.closest('.jp-Cell').scrollIntoView({block: 'start'})")
        page.evaluate("document.activeElement && document.activeElement.blur()")
        save_screenshot(page, f"lab_{notebook.removesuffix('.ipynb')}")
    finally:
        context.close()
        lab.delete_sessions(notebook)  # shut this notebook's kernel down now
    t_end = time.perf_counter()
    record_timing(f"{notebook} (open {t_open - t0:.1f}, run all {t_run - t_open:.1f}, "
                  f"{counts['sliders']} sliders + {counts['dropdowns']} dropdowns {t_end - t_run:.1f})", t_end - t0)
