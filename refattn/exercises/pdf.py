"""Printed documents for a course: the problem set of a handout and the instructor's answer key, as PDF.

Both are Markdown with LaTeX mathematics (the statements' and derivations'
``$...$``), turned into one HTML page by Python-Markdown with
``pymdownx.arithmatex`` (the book's extensions), typeset by MathJax 3 from the
``django-static-mathjax`` wheel (offline), and printed by headless Chromium
(the book's printer; ``REFATTN_CHROMIUM`` names it, else ``chromium`` on
``PATH``). :func:`check_tools` says, in one line naming the option, what is
missing before any work; :func:`render` returns the PDF's bytes, which the
export writes whole or not at all.

    pip install ".[docs]"        # Python-Markdown, pymdown-extensions, MathJax
    apt-get install chromium     # or REFATTN_CHROMIUM=/path/to/chrome
"""

from __future__ import annotations

import html
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["find_chromium", "check_tools", "render", "PRINT_TIMEOUT_S"]

#: Seconds Chromium has to load, typeset and print one document.
PRINT_TIMEOUT_S = 180

_CSS = """
@page { size: A4; margin: 18mm 16mm 18mm 16mm; }
body { font-family: "DejaVu Serif", Georgia, serif; font-size: 11pt; line-height: 1.45; color: #111; }
h1 { font-size: 20pt; margin: 0 0 4mm 0; }
h2 { font-size: 15pt; margin: 7mm 0 2mm 0; }
h3 { font-size: 12.5pt; }
code, pre { font-family: "DejaVu Sans Mono", monospace; font-size: 9.5pt; }
pre { background: #f4f4f4; padding: 2mm 3mm; white-space: pre-wrap; break-inside: avoid; }
table { border-collapse: collapse; margin: 3mm 0; }
th, td { border: 1px solid #999; padding: 1mm 2.5mm; text-align: left; }
.header { border-bottom: 2px solid #333; margin-bottom: 5mm; padding-bottom: 2mm; }
.header p { margin: 1mm 0; }
.problem { break-before: page; }
.labels { color: #333; font-style: italic; }
.written { border: 1px solid #666; min-height: 95mm; margin-top: 4mm; padding: 2mm 3mm; break-inside: avoid; }
.written p { color: #555; margin: 0; }
.answer { break-before: page; }
.credit { color: #444; font-size: 9pt; border-top: 1px solid #999; margin-top: 6mm; padding-top: 1mm; }
"""


def find_chromium():
    """The Chromium to print with: ``REFATTN_CHROMIUM``, else ``chromium`` (or ``chromium-browser``,
    ``google-chrome``) on ``PATH``; ``None`` where there is none."""
    named = os.environ.get("REFATTN_CHROMIUM")
    if named:
        return named if os.path.isfile(named) and os.access(named, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def check_tools(option):
    """Raise ``ValueError`` (one line naming ``option`` and everything missing) unless every tool a PDF
    needs is here."""
    missing = [name for name, module in (("Python-Markdown", "markdown"), ("pymdown-extensions", "pymdownx"),
                                         ("MathJax (django-static-mathjax)", "mathjax"))
               if importlib.util.find_spec(module) is None]
    fixes = ["pip install 'refattn[docs]' (or '.[docs]' in a clone)"] if missing else []
    if find_chromium() is None:
        missing.append("Chromium, which prints it")
        fixes.append("apt-get install chromium (or name a Chromium or Chrome with REFATTN_CHROMIUM)")
    if missing:
        raise ValueError(f"{option}: the PDF needs {', '.join(missing)}: {', then '.join(fixes)}, and run the "
                         f"command again")


def _html(markdown_text, title):
    import markdown  # noqa: PLC0415
    import mathjax  # noqa: PLC0415  (the django-static-mathjax wheel)

    body = markdown.markdown(markdown_text, extensions=["tables", "attr_list", "md_in_html", "pymdownx.superfences",
                                                        "pymdownx.arithmatex"],  # the book's (mkdocs.yml)
                             extension_configs={"pymdownx.arithmatex": {"generic": True, "smart_dollar": False}})
    script = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5" / "tex-svg-full.js"
    config = ("window.MathJax = {tex: {inlineMath: [['\\\\(', '\\\\)']], displayMath: [['\\\\[', '\\\\]']], "
              "processEscapes: true}, options: {ignoreHtmlClass: '.*|', processHtmlClass: 'arithmatex'}, "
              "svg: {fontCache: 'global'}};")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style><script>{config}</script><script src='{script.as_uri()}'></script>"
            f"</head><body>{body}</body></html>")


def render(markdown_text, *, title, option) -> bytes:
    """``markdown_text`` printed as a PDF, its bytes; ``option`` names the command-line option in a
    failure's one line."""
    check_tools(option)
    with tempfile.TemporaryDirectory(prefix="refattn-pdf-") as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(_html(markdown_text, title), encoding="utf-8")
        out = Path(tmp) / "out.pdf"
        r = subprocess.run([find_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                            f"--user-data-dir={Path(tmp) / 'profile'}", "--no-pdf-header-footer",
                            "--virtual-time-budget=30000", f"--print-to-pdf={out}", page.as_uri()],
                           capture_output=True, text=True, timeout=PRINT_TIMEOUT_S, check=False)
        if r.returncode != 0 or not out.is_file() or out.read_bytes()[:5] != b"%PDF-":
            last = ((r.stderr or r.stdout).strip().splitlines() or ["no output"])[-1][:200]
            raise ValueError(f"{option}: Chromium could not print the PDF (exit {r.returncode}: {last})")
        return out.read_bytes()
