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


# field -> (type check, what it must be); "study" and "what" are optional
_CORRECTION_FIELDS = {
    "date": (lambda v: hasattr(v, "isoformat") or (isinstance(v, str) and v.strip()), "a date (YYYY-MM-DD)"),
    "chapters": (lambda v: isinstance(v, list) and all(isinstance(c, str) for c in v), "a list of toc entries"),
    "claimed": (lambda v: isinstance(v, str) and v.strip(), "text"),
    "stands": (lambda v: isinstance(v, str) and v.strip(), "text"),
    "source": (lambda v: isinstance(v, str) and v.strip(), "text"),
    "study": (lambda v: isinstance(v, str), "text"),
    "what": (lambda v: isinstance(v, str), "text"),
}
_REQUIRED = ("date", "chapters", "claimed", "stands", "source")


def load_corrections(root: Path) -> list[dict]:
    """data/corrections.yml, schema-checked (types and known keys) before the book is touched."""
    path = root / "data" / "corrections.yml"
    if not path.exists():
        return []
    try:
        items = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    except yaml.YAMLError as exc:
        raise BookError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(items, list):
        raise BookError(f"{path}: expected a list of corrections, got {type(items).__name__}")
    for i, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise BookError(f"{path}: entry {i} is not a mapping")
        missing = [k for k in _REQUIRED if k not in item]
        if missing:
            raise BookError(f"{path}: entry {i} is missing {', '.join(missing)}")
        unknown = sorted(set(item) - set(_CORRECTION_FIELDS))
        if unknown:
            raise BookError(f"{path}: entry {i}: unknown key(s) {', '.join(unknown)}; known: "
                            f"{', '.join(_CORRECTION_FIELDS)}")
        for key, value in item.items():
            ok, what = _CORRECTION_FIELDS[key]
            if not ok(value):
                raise BookError(f"{path}: entry {i}: {key} must be {what}, got {value!r}")
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
