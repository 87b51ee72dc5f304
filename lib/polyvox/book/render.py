"""Render executed chapters into the book: hidden parameter cells, correction banners, the corrections page.

Rendering is cheap and never re-executes, so a new correction in
``data/corrections.yml`` shows without recomputing anything; files are rewritten
only when their bytes change, so Sphinx's incremental build stays incremental.
"""
from __future__ import annotations

from pathlib import Path

import yaml


class BookError(RuntimeError):
    pass


def load_corrections(root: Path) -> list[dict]:
    path = root / "data" / "corrections.yml"
    if not path.exists():
        return []
    items = yaml.safe_load(path.read_text()) or []
    required = ("date", "chapters", "claimed", "stands", "source")
    for i, item in enumerate(items):
        missing = [k for k in required if k not in item]
        if missing:
            raise BookError(f"{path}: entry {i + 1} is missing {', '.join(missing)}")
        item["date"] = str(item["date"])
    return items


def banner_markdown(corrections: list[dict]) -> str:
    parts = []
    for c in corrections:
        parts.append(
            f"```{{admonition}} Correction of {c['date']}\n:class: warning\n"
            f"**Claimed earlier:** {c['claimed'].strip()}\n\n**What stands:** {c['stands'].strip()}\n\n"
            f"Source: {c['source']}. All corrections: {{doc}}`/book/corrections`.\n```"
        )
    return "\n\n".join(parts)


def render(executed: Path, target: Path, corrections: list[dict]) -> bool:
    """Write the book copy of an executed notebook; return True if the file changed."""
    import nbformat

    nb = nbformat.read(str(executed), as_version=4)
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
        elif "parameters" in tags and "hide-cell" not in tags:
            tags.append("hide-cell")
        elif cell.cell_type == "code" and not tags:
            tags.append("hide-input")  # the narrative first; the code one click away
    if corrections:
        banner = nbformat.v4.new_markdown_cell(banner_markdown(corrections))
        banner.metadata["tags"] = ["polyvox-corrections"]
        nb.cells.insert(1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0, banner)
    text = nbformat.writes(nb)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and target.read_text() == text:
        return False
    target.write_text(text)
    return True


def corrections_page(corrections: list[dict]) -> str:
    lines = ["# Corrections", "",
             "Dated corrections to claims in the studies this book reproduces, read from",
             "`data/corrections.yml`. Each also appears as a banner at the top of the chapters it",
             "concerns. The numbers in the chapters are recomputed from records; these entries",
             "record how their *readings* changed.", ""]
    for c in sorted(corrections, key=lambda c: c["date"], reverse=True):
        where = ", ".join(f"{{doc}}`/{ch}`" for ch in c["chapters"]) or "no chapter (not used in this book)"
        lines += [f"## {c['date']} — {c.get('study', '')}".rstrip(" —"), "",
                  f"- **Claimed earlier:** {c['claimed'].strip()}",
                  f"- **What stands:** {c['stands'].strip()}",
                  f"- **Chapters:** {where}",
                  f"- **Source:** {c['source']}", ""]
    return "\n".join(lines)
