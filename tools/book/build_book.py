#!/usr/bin/env python3
"""Build the offline HTML edition of the course (`make book`): _book/index.html plus one page per notebook.

Usage (what `make book` runs):

    .venv/bin/python tools/book/build_book.py [--out _book] [--no-execute] [--timeout 600]

Steps:
  1. Fetch the page scripts from the npm registry with `npm pack` (pinned versions, integrity checked):
     @jupyter-widgets/html-manager (renders widgets from saved state), requirejs, mathjax (SVG output, so
     no font files). They are cached in build/book-assets/ and copied into <out>/_static/: a page never
     loads anything from a CDN when it is read.
  2. Execute a COPY of every notebooks/*.ipynb in a fresh kernel with the widget state stored
     (store_widget_state=True) into build/book/; the committed notebooks are not touched.
     With --no-execute the committed notebooks are exported as they are (their saved widget state).
  3. Export each to HTML (nbconvert's lab template through tools/book/book.html.j2: local scripts,
     figures inline as data: URIs, prev/next links) and write an index.html that links them in order,
     with each notebook's first heading as its title.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NOTEBOOKS = ROOT / "notebooks"
ASSET_CACHE = ROOT / "build" / "book-assets"
EXEC_DIR = ROOT / "build" / "book"
CLOSING = ROOT / "docs" / "carry_away.md"  # the closing page

# name@version -> sha512 integrity of the registry tarball (what `npm pack --json` reports).
NPM_PACKAGES = {
    "@jupyter-widgets/html-manager@1.0.15":
        "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
    "requirejs@2.3.8":
        "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
    "mathjax@3.2.2":
        "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
}


def log(msg: str) -> None:
    tqdm.write(f"book: {msg}")  # above the progress bar, if one is showing


def tarball_name(spec: str) -> str:
    """The file name `npm pack` writes for name@version (@scope/name -> scope-name-version.tgz)."""
    name, version = spec.rsplit("@", 1)
    return f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"


def integrity_of(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode("ascii")


def fetch_npm_packages() -> dict[str, Path]:
    """{spec: unpacked package folder}; downloads with `npm pack` only what the cache lacks."""
    ASSET_CACHE.mkdir(parents=True, exist_ok=True)
    missing = [s for s in NPM_PACKAGES if not (ASSET_CACHE / tarball_name(s)).is_file()]
    if missing:
        npm = shutil.which("npm")
        if npm is None:
            sys.exit("book: error: `npm` not found; it fetches the page scripts from the npm registry "
                     "(Debian: apt-get install -y --no-install-recommends npm)")
        log(f"npm pack {' '.join(missing)}")
        subprocess.run([npm, "pack", "--silent", *missing], cwd=ASSET_CACHE, check=True, stdout=subprocess.DEVNULL)
    folders = {}
    for spec, expected in NPM_PACKAGES.items():
        tgz = ASSET_CACHE / tarball_name(spec)
        got = integrity_of(tgz)
        if got != expected:
            tgz.unlink()
            sys.exit(f"book: error: {tgz.name} integrity {got} != pinned {expected} (removed; run again)")
        dest = ASSET_CACHE / tgz.name.removesuffix(".tgz")
        if not (dest / "package" / "package.json").is_file():
            shutil.rmtree(dest, ignore_errors=True)
            with tarfile.open(tgz) as tar:
                tar.extractall(dest, filter="data")
        folders[spec] = dest / "package"
    return folders


def install_static(out: Path, packages: dict[str, Path]) -> None:
    """Copy the scripts a page needs into out/_static (html-manager with its font files, require.js, MathJax)."""
    static = out / "_static"
    shutil.rmtree(static, ignore_errors=True)
    (static / "html-manager").mkdir(parents=True)
    manager = packages["@jupyter-widgets/html-manager@1.0.15"] / "dist"
    for f in manager.iterdir():  # embed-amd.js and the font files it references by relative URL
        if f.name == "embed-amd.js" or f.suffix in {".woff", ".woff2", ".ttf", ".eot", ".svg"}:
            shutil.copy2(f, static / "html-manager" / f.name)
    shutil.copy2(packages["requirejs@2.3.8"] / "require.js", static / "require.js")
    mathjax = packages["mathjax@3.2.2"] / "es5"
    # tex-svg-full draws glyphs as SVG paths (no web fonts); ui/ and a11y/ are components it may load lazily.
    (static / "mathjax").mkdir()
    shutil.copy2(mathjax / "tex-svg-full.js", static / "mathjax" / "tex-svg-full.js")
    for sub in ("ui", "a11y"):
        shutil.copytree(mathjax / sub, static / "mathjax" / sub)
    for spec, folder in packages.items():  # keep the licences beside the code
        lic = folder / "LICENSE"
        if lic.is_file():
            shutil.copy2(lic, static / f"LICENSE.{spec.rsplit('@', 1)[0].lstrip('@').replace('/', '-')}")


def execute(src: Path, dest: Path, timeout: int) -> float:
    """Run a copy of src top to bottom in a fresh kernel, widget state stored; write it to dest. Returns seconds."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(src, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                   record_timing=False, resources={"metadata": {"path": str(src.parent)}}).execute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    return time.perf_counter() - t0


def first_heading(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                m = re.match(r"^#+\s+(.*\S)", line)
                if m:
                    return m.group(1)
    return ""


def opening(nb) -> tuple[str, str]:
    """(the notebook's question: the first paragraph of its opening; what it needs: its "What you'll need" text)."""
    paras = [p.strip() for p in nb.cells[0].source.split("\n\n")] if nb.cells else []
    question = next((p for p in paras if p and not p.startswith(("#", "**", ">", "-"))), "")
    need = next((p for p in paras if p.startswith("**What you'll need")), "")
    return " ".join(question.split()), " ".join(re.sub(r"^\*\*What you'll need:?\*\*:?\s*", "", need).split())


def markdown_html(text: str) -> str:
    """Markdown to HTML with mistune (what nbconvert itself uses); TeX is left for MathJax."""
    import mistune

    return mistune.html(text)


def markdown_inline(text: str) -> str:
    """One paragraph of markdown as inline HTML (no enclosing <p>)."""
    return re.sub(r"^<p>(.*)</p>\s*$", r"\1", markdown_html(text).strip(), flags=re.S)


def write_closing_page(out: Path) -> str:
    """docs/carry_away.md as _book/carry_away.html; returns its title."""
    text = CLOSING.read_text(encoding="utf-8")
    title = text.splitlines()[0].lstrip("# ").strip()
    body = markdown_html(text)
    (out / "carry_away.html").write_text(PAGE.format(title=html.escape(title), body=body), encoding="utf-8")
    return title


def export(nb, name: str, out: Path, nav: dict) -> None:
    from nbconvert import HTMLExporter

    has_state = "application/vnd.jupyter.widget-state+json" in nb.metadata.get("widgets", {})
    shows_widgets = any("application/vnd.jupyter.widget-view+json" in out.get("data", {})
                        for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", []))
    if shows_widgets and not has_state:
        sys.exit(f"book: error: {name} holds no widget state (metadata.widgets); its sliders would be empty")
    exporter = HTMLExporter(
        template_name="lab",
        extra_template_paths=[str(HERE)],
        template_file="book.html.j2",
        require_js_url="_static/require.js",
        widget_renderer_url="_static/html-manager/embed-amd.js",
        mathjax_url="_static/mathjax/tex-svg-full.js",
        embed_images=True,
    )
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": nav["title"]}, "book_nav": nav})
    # Links in prose may point anywhere; what a page LOADS (script src, stylesheet href) must be local.
    loaded = re.findall(r"""<(?:script|link)\b[^>]*\b(?:src|href)=["'](https?://[^"']+)""", body)
    if loaded:
        sys.exit(f"book: error: {name} would load {loaded[:5]} from the network")
    (out / f"{name}.html").write_text(body, encoding="utf-8")


HEAD = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>{title}</title>
<style>
  body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 46em; margin: 3em auto;
         padding: 0 1em; line-height: 1.5; color: #222; }}
  h1 {{ font-size: 1.6em; }}
  ol {{ padding-left: 1.4em; }}
  li {{ margin: 0.8em 0; }}
  .note, .need {{ color: #555; font-size: 0.9em; }}
</style>
<script>window.MathJax = {{tex: {{inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]]}}}};</script>
<script src="_static/mathjax/tex-svg-full.js"></script>
</head>
<body>
"""
PAGE = HEAD + """{body}
<p class="note"><a href="index.html">Back to the course map</a></p>
</body>
</html>
"""
INDEX = HEAD + """<h1>{title}</h1>
<p>An offline edition of the course: the four Acts of the post, a field guide, an audit, a lab, Act V (many
drafts, trees, bending the rules) and Act VI (the best exact verifier). Figures and sliders are
saved with each page; with no kernel behind them, moving a slider does not redraw its figure (run
<code>make lab</code> for that).</p>
<h2>The course map</h2>
<ol class="book-toc">
{items}
</ol>
<p>Then the closing page: <a class="book-closing" href="carry_away.html">{closing}</a>.</p>
<p class="note">Built by <code>make book</code> on {date}; every script is served from <code>_static/</code>.</p>
</body>
</html>
"""
TITLE = "specdec: speculative decoding, taught by running it"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "_book")
    ap.add_argument("--no-execute", action="store_true", help="export the committed notebooks as they are")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = ap.parse_args(argv)
    import nbformat

    t_start = time.perf_counter()
    out: Path = args.out.resolve()
    sources = sorted(NOTEBOOKS.glob("*.ipynb"))
    if not sources:
        sys.exit("book: error: no notebooks/*.ipynb")
    packages = fetch_npm_packages()

    executed = []
    for src in tqdm(sources, desc="book: executing", unit="notebook", disable=args.no_execute):
        if args.no_execute:
            executed.append(src)
            continue
        dest = EXEC_DIR / src.name
        seconds = execute(src, dest, args.timeout)
        log(f"executed {src.name} in {seconds:.1f} s -> {dest.relative_to(ROOT)}")
        executed.append(dest)

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    install_static(out, packages)
    nbs = [nbformat.read(p, as_version=4) for p in executed]
    names = [p.stem for p in executed]
    titles = [first_heading(nb) or name for nb, name in zip(nbs, names)]
    for i, (nb, name) in enumerate(zip(nbs, names)):
        nav = {"title": titles[i],
               "prev": (f"{names[i - 1]}.html", titles[i - 1]) if i > 0 else None,
               "next": (f"{names[i + 1]}.html", titles[i + 1]) if i + 1 < len(nbs) else None}
        export(nb, name, out, nav)
        log(f"wrote {out.name}/{name}.html ({titles[i]})")
    items = []
    for nb, n, t in zip(nbs, names, titles):
        question, need = opening(nb)
        items.append(f'  <li><a href="{n}.html">{html.escape(t)}</a><br>{markdown_inline(question)}'
                     f'<br><span class="need">You need: {markdown_inline(need)}</span></li>')
    closing = write_closing_page(out)
    (out / "index.html").write_text(INDEX.format(title=TITLE, items="\n".join(items), closing=html.escape(closing),
                                                 date=time.strftime("%Y-%m-%d")), encoding="utf-8")
    (out / "book.json").write_text(json.dumps(
        {"pages": [{"file": f"{n}.html", "title": t} for n, t in zip(names, titles)]}, indent=1) + "\n")
    log(f"wrote {out.name}/index.html; open {out / 'index.html'} ({time.perf_counter() - t_start:.1f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
