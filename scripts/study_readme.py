"""Rebuild docs/study.md's per-claim tables (between the ``<!-- study results -->`` markers) from each claim's
committed ``results.md`` in ``results/study/runs``, with links to its plots.

Run it after ``mosaic study CLAIM --summary-only --out runs/study`` and copying each claim's ``results.json``,
``results.md`` and plots to ``results/study/runs/CLAIM/``:

    python scripts/study_readme.py
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = Path("results/study/runs")
PAGE = Path("docs/study.md")
CLAIMS = ("compaction", "fork", "budgets", "recovery")
PLOTS = (("curves.png", "curves"), ("pass_at_t.png", "Pass@(1,T)"),
         ("credit-mosaic.png", "Mosaic's credit against broadcast's"))
START, END = "<!-- study results -->", "<!-- /study results -->"


def block() -> str:
    """Each claim's ``results.md`` under a third-level heading, then its plots, linked from the page's folder."""
    parts = []
    for claim in CLAIMS:
        md = (ROOT / RUNS / claim / "results.md").read_text().strip()
        md = re.sub(r"^## ", "### ", md, flags=re.M)
        links = [f"![{claim}: {label}](../{(RUNS / claim / name).as_posix()})" for name, label in PLOTS
                 if (ROOT / RUNS / claim / name).is_file()]
        parts.append(md + ("\n\n" + "\n".join(links) if links else ""))
    return "\n\n".join(parts)


def main() -> None:
    page = ROOT / PAGE
    text = page.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{START}\n\n{block()}\n\n{END}{tail}")


if __name__ == "__main__":
    main()
