"""The offline edition (`make book` -> _book/) in Chromium with the network cut off.

Every request that is not file:// is aborted and recorded; the test fails if any was attempted. Each page
must show its widgets (sliders, dropdowns) rendered from saved state by the local html-manager, its figures
as data:image/png images, and its math typeset by the local MathJax. The index must link every page in
order under each notebook's first heading. If _book/ is missing, the test builds it (`make e2e` builds it
first).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import nbformat
import pytest
from e2e_support import NOTEBOOKS, ROOT, record_timing, save_screenshot, shows_widgets

pytestmark = pytest.mark.e2e

BOOK = ROOT / "_book"
PAGE_TIMEOUT_MS = 60_000


def first_heading(path) -> str:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return ""


@pytest.fixture(scope="module")
def book():
    if not (BOOK / "index.html").is_file():
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "tools" / "book" / "build_book.py")], check=True, cwd=ROOT)
        record_timing("book build (by the test)", time.perf_counter() - t0)
    return BOOK


@pytest.fixture
def offline_page(browser):
    """A page whose every non-file request is aborted; .blocked lists them, .failed lists failed loads."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    blocked: list[str] = []

    def only_files(route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", only_files)
    page = context.new_page()
    page.blocked = blocked
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "blob:", "about:"))
            else blocked.append(r.url))
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    try:
        yield page
    finally:
        context.close()


def test_index_links_every_notebook_in_order(book, offline_page):
    page = offline_page
    page.goto((book / "index.html").as_uri())
    links = page.locator("ol.book-toc a")
    hrefs = links.evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert hrefs == [nb.replace(".ipynb", ".html") for nb in NOTEBOOKS]
    assert links.all_inner_texts() == [first_heading(ROOT / "notebooks" / nb) for nb in NOTEBOOKS]
    for href in hrefs:
        assert (book / href).is_file(), f"index links {href}, which the edition lacks"
    closing = page.locator("a.book-closing")
    assert closing.get_attribute("href") == "carry_away.html" and (book / "carry_away.html").is_file()
    assert not page.blocked, f"the index tried the network: {page.blocked}"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_page_renders_widgets_and_figures_offline(book, offline_page, notebook):
    page = offline_page
    name = notebook.removesuffix(".ipynb")
    t0 = time.perf_counter()
    page.goto((book / f"{name}.html").as_uri())
    widgets = shows_widgets(notebook)
    widget_figures = page.locator('.widget-output img[src^="data:image/png"]')
    if widgets:  # the html-manager replaces each widget-view script with the rendered widget
        controls = page.locator(".widget-slider .noUi-handle, .widget-dropdown select")
        controls.first.wait_for(state="visible", timeout=PAGE_TIMEOUT_MS)
        widget_figures.first.wait_for(state="visible", timeout=PAGE_TIMEOUT_MS)
    if "$" in (ROOT / "notebooks" / notebook).read_text():  # the notebook has math: MathJax typeset it
        page.locator("mjx-container").first.wait_for(state="attached", timeout=PAGE_TIMEOUT_MS)
    else:
        page.wait_for_load_state("load")

    n_sliders = page.locator(".widget-slider .noUi-handle").count()
    n_dropdowns = page.locator(".widget-dropdown select").count()
    figures = page.locator('img[src^="data:image/png"]')
    visible_figures = sum(figures.nth(i).is_visible() for i in range(figures.count()))
    n_widget_scripts = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    n_explorers = page.locator(".widget-vbox:has(.widget-output)").count()
    body = page.locator("body").inner_text()

    if widgets:
        assert n_sliders + n_dropdowns > 0, f"{name}: no slider or dropdown rendered"
        assert n_explorers >= 1 and widget_figures.count() >= n_explorers, f"{name}: a slider view shows no figure"
    n_pngs = (ROOT / "notebooks" / notebook).read_text().count('"image/png"')
    assert visible_figures >= min(2, n_pngs), f"{name}: only {visible_figures} figures visible"
    assert "Error displaying widget" not in body and "interactive(children=" not in body, f"{name}: widget error"
    assert not page.errors, f"{name}: script errors: {page.errors[:3]}"
    assert not page.blocked, f"{name}: requests to the network were attempted: {page.blocked[:5]}"
    assert n_widget_scripts >= n_explorers
    # the title comes from the notebook's first heading, and the page links back to the contents
    assert page.title() == first_heading(ROOT / "notebooks" / notebook)
    assert page.locator('nav.book-nav a[href="index.html"]').first.is_visible()
    record_timing(f"book page {name}.html ({n_sliders} sliders, {n_dropdowns} dropdowns, "
                  f"{visible_figures} figures)", time.perf_counter() - t0)
    if notebook == NOTEBOOKS[0] and n_explorers:
        page.locator(".widget-vbox:has(.widget-output)").first.evaluate(
            "el => el.closest('.jp-Cell').scrollIntoView({block: 'start'})")
        save_screenshot(page, f"book_{name}")


def test_book_manifest_matches_pages(book):
    pages = json.loads((book / "book.json").read_text())["pages"]
    assert [p["file"] for p in pages] == [nb.replace(".ipynb", ".html") for nb in NOTEBOOKS]
    for static in ("_static/require.js", "_static/html-manager/embed-amd.js", "_static/mathjax/tex-svg-full.js"):
        assert (book / static).is_file(), f"{static} missing from the edition"
