"""Rebuild the README's study results (between the ``<!-- study results -->`` markers) from each claim's
committed ``results.md`` in ``docs/study/runs``, with links to its plots.

Run it after ``mosaic study CLAIM --summary-only --out docs/study/runs``:

    python scripts/study_readme.py
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = Path("docs/study/runs")
CLAIMS = ("compaction", "fork", "budgets", "recovery")
PLOTS = (("curves.png", "curves"), ("pass_at_t.png", "Pass@(1,T)"),
         ("credit-mosaic.png", "Mosaic's credit against broadcast's"))
START, END = "<!-- study results -->", "<!-- /study results -->"


def block() -> str:
    parts = []
    for claim in CLAIMS:
        md = (ROOT / RUNS / claim / "results.md").read_text().strip()
        md = re.sub(r"^## ", "### ", md, flags=re.M)
        links = [f"![{claim}: {label}]({(RUNS / claim / name).as_posix()})" for name, label in PLOTS
                 if (ROOT / RUNS / claim / name).is_file()]
        parts.append(md + ("\n\n" + "\n".join(links) if links else ""))
    return "\n\n".join(parts)


def main() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n\n{block()}\n\n{END}{tail}")


if __name__ == "__main__":
    main()
