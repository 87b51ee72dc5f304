"""Render executed chapters into the book: hidden parameter cells, correction banners, the corrections page,
a "re-run this chapter" box from each chapter's parameters cell, book tables (CSV written, download link
below, wide tables full-width) and book figures (numbered, captioned, alt text).

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
    "url": (lambda v: isinstance(v, str) and v.startswith(("https://", "http://")), "an http(s) address"),
    "status": (lambda v: v in ("withdrawn", "revised"), "withdrawn or revised"),
}
_REQUIRED = ("date", "chapters", "claimed", "stands", "source")


def load_corrections(root: Path) -> list[dict]:
    """data/corrections.yml, schema-checked (types and known keys) before the book is touched.

    Read within :func:`polyvox.config.load_yaml`'s limits (size, aliases, depth, duplicate keys);
    each entry is then a :class:`polyvox.config.Correction` (a real calendar date, an http(s)
    address with a host …), and every chapter it names must be a chapter of the book's
    ``_toc.yml`` (a banner for a misspelt chapter would silently show nowhere).
    """
    from .. import config

    path = root / "data" / "corrections.yml"
    if not path.exists():
        return []
    try:
        items = config.load_yaml(path)
    except config.ConfigError as exc:
        raise BookError(str(exc)) from None
    items = [] if items is None else items
    if not isinstance(items, list):
        raise BookError(f"{path}: expected a list of corrections, got {type(items).__name__}")
    for i, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise BookError(f"{path}: entry {i} is not a mapping")
        missing = [k for k in _REQUIRED if k not in item]
        if missing:
            raise BookError(f"{path}: entry {i} is missing {', '.join(missing)}")
        unknown = sorted(map(str, set(item) - set(_CORRECTION_FIELDS)))
        if unknown:
            raise BookError(f"{path}: entry {i}: unknown key(s) {', '.join(unknown)}; known: "
                            f"{', '.join(_CORRECTION_FIELDS)}")
        for key, value in item.items():
            ok, what = _CORRECTION_FIELDS[key]
            if not ok(value):
                raise BookError(f"{path}: entry {i}: {key} must be {what}, got {value!r}")
        try:
            config.validate(config.Correction, item, str(path), prefix=f"entry {i}")
        except config.ConfigError as exc:
            raise BookError(str(exc)) from None
        item["date"] = str(item["date"])
    if (root / "_toc.yml").exists():
        from .build import chapters

        entries = {c.toc_entry for c in chapters(root)}
        for i, item in enumerate(items, start=1):
            stray = [c for c in item["chapters"] if c not in entries]
            if stray:
                raise BookError(f"{path}: entry {i}: chapters: {', '.join(stray)} is not a chapter of the book "
                                f"(chapters: {', '.join(sorted(entries)) or 'none'})")
    seen: dict[str, int] = {}
    for i, item in enumerate(items, start=1):
        heading = correction_heading(item)
        if heading in seen:
            raise BookError(f"{path}: entries {seen[heading]} and {i} have the same heading {heading!r}; "
                            "give each a distinct 'what'")
        seen[heading] = i
    return items


def correction_heading(c: dict) -> str:
    """date — study — what (the parts that are given)."""
    return " — ".join(x for x in (str(c["date"]), c.get("study", "").strip(), c.get("what", "").strip()) if x)


def source_markdown(c: dict) -> str:
    return f"[{c['source'].strip()}]({c['url']})" if c.get("url") else c["source"].strip()


def banner_markdown(corrections: list[dict]) -> str:
    parts = []
    for c in corrections:
        parts.append(
            f"```{{admonition}} Correction of {c['date']}" + (f" — {c['what'].strip()}" if c.get("what") else "")
            + "\n:class: warning\n"
            f"**Claimed earlier:** {c['claimed'].strip()}\n\n**What stands:** {c['stands'].strip()}\n\n"
            f"Source: {source_markdown(c)}. All corrections: {{doc}}`/book/corrections`.\n```"
        )
    return "\n\n".join(parts)


ASSETS = Path("_build/.polyvox/assets")  # tables' CSVs and figures' PNGs, per chapter (not in the source tree)


def parameters_of(source: str) -> list[dict]:
    """The parameters cell as [{name, default, meaning}]: each top-level assignment, its value as written,
    its trailing comment as the meaning (continued onto the next comment-only lines)."""
    import ast
    import io
    import tokenize

    tree = ast.parse(source)
    lines = source.splitlines()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    out = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            (node.target if isinstance(node, ast.AnnAssign) else None)
        if not isinstance(target, ast.Name) or node.value is None:
            continue
        default = ast.get_source_segment(source, node.value) or ""
        meaning = comments.get(node.end_lineno, "")
        nxt = node.end_lineno + 1  # comment-only lines right after continue the meaning
        while nxt <= len(lines) and lines[nxt - 1].strip().startswith("#"):
            meaning = (meaning + " " + comments.get(nxt, "")).strip()
            nxt += 1
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, SyntaxError):
            value = default
        out.append({"name": target.id, "default": default, "value": value, "meaning": meaning})
    return out


def _cli_value(value) -> str:
    """A Python default written as ``-p`` reads it (a YAML scalar: null, true, 3, text)."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def rerun_markdown(chapter: str, params: list[dict]) -> str:
    """The "re-run this chapter" box: the command, then each parameter with its default and meaning."""
    from .tables import small_table_html

    slug = chapter.replace("/", "-")
    lines = [f"````{{admonition}} Re-run this chapter", ":class: tip polyvox-rerun", "",
             "With its defaults (the shipped records), into a run folder that keeps the executed notebook and "
             "a manifest (parameters, versions, git commit):", "",
             "```bash", f".venv/bin/polyvox run {chapter} --out runs/{slug}", "```", ""]
    if params:
        example = params[0]
        lines += [f"Any parameter below with `-p name=value` (read as YAML: `true`, `null`, `3`, text), e.g. "
                  f"`-p {example['name']}={_cli_value(example['value'])}`; or inside the book: "
                  f"`.venv/bin/polyvox book build --only {chapter} --params params.yaml`.", "",
                  small_table_html(f"The parameters of {chapter}: name, default and meaning.",
                                   ["parameter", "default", "meaning"],
                                   [[f"`{p['name']}`", f"`{_cli_value(p['value'])}`", p["meaning"] or "—"]
                                    for p in params]), ""]
    else:
        lines.append("This chapter has no parameters.")
    lines += ["````"]
    return "\n".join(lines)


def _download_line(chapter: str, name: str) -> str:
    return f"{{download}}`Download this table (CSV) </{(ASSETS / chapter / name).as_posix()}.csv>`"


def _figure_markdown(chapter: str, meta: dict) -> str:
    path = (ASSETS / chapter / meta["figure"]).as_posix() + ".png"
    label = f"fig-{chapter.replace('/', '-')}-{meta['figure']}"
    alt = meta["alt"].replace("\n", " ")
    return (f"```{{figure}} /{path}\n:name: {label}\n:alt: {alt}\n:width: 100%\n\n{meta['caption']}\n```")


def _book_outputs(cell, chapter: str, root: Path | None) -> None:
    """Tables: CSV written, download link below, full-width when wide. Figures: a numbered MyST figure."""
    import base64

    import nbformat

    from .tables import MIME as TABLE_MIME

    tags = cell.metadata.setdefault("tags", [])
    outputs = []
    for out in cell.get("outputs", []):
        data = out.get("data", {}) if out.get("output_type") in ("display_data", "execute_result") else {}
        meta = out.get("metadata", {}).get("polyvox", {})
        if TABLE_MIME in data:
            table = data.pop(TABLE_MIME)
            if root is not None:
                f = root / ASSETS / chapter / f"{table['name']}.csv"
                f.parent.mkdir(parents=True, exist_ok=True)
                if not f.exists() or f.read_text() != table["csv"]:
                    f.write_text(table["csv"])
            if table.get("wide") and "full-width" not in tags:
                tags.append("full-width")
            outputs.append(out)
            outputs.append(nbformat.v4.new_output("display_data", data={
                "text/markdown": _download_line(chapter, table["name"]), "text/plain": f"{table['name']}.csv"}))
        elif "figure" in meta and "image/png" in data:
            if root is not None:
                f = root / ASSETS / chapter / f"{meta['figure']}.png"
                f.parent.mkdir(parents=True, exist_ok=True)
                png = base64.b64decode(data["image/png"])
                if not f.exists() or f.read_bytes() != png:
                    f.write_bytes(png)
            outputs.append(nbformat.v4.new_output("display_data", data={
                "text/markdown": _figure_markdown(chapter, meta), "text/plain": meta["caption"]}))
        else:
            outputs.append(out)
    cell["outputs"] = outputs


def render(executed: Path, target: Path, corrections: list[dict], chapter: str | None = None,
           root: Path | None = None) -> bool:
    """Write the book copy of an executed notebook; return True if the file changed.

    With ``chapter`` (e.g. "panel/accuracy"): a re-run box from the parameters cell goes under the
    title, and book tables and figures are rendered (their files written under ``root``/``ASSETS``).
    """
    import nbformat

    nb = nbformat.read(str(executed), as_version=4)
    params_source = None
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
        elif "parameters" in tags:
            params_source = cell.source
            if "remove-cell" not in tags:
                tags.append("remove-cell")  # the re-run box lists the parameters with their meaning
        elif cell.cell_type == "code" and not tags:
            tags.append("hide-input")  # the narrative first; the code one click away
        if cell.cell_type == "code" and chapter:
            _book_outputs(cell, chapter, root)
    at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
    if corrections:  # under the title: what the authors withdrew comes first
        banner = nbformat.v4.new_markdown_cell(banner_markdown(corrections))
        banner.metadata["tags"] = ["polyvox-corrections"]
        banner.id = "polyvox-corrections"  # fixed ids: an unchanged render writes the same bytes
        nb.cells.insert(at, banner)
        at += 1
    if chapter:
        box = nbformat.v4.new_markdown_cell(rerun_markdown(chapter, parameters_of(params_source or "")))
        box.metadata["tags"] = ["polyvox-rerun"]
        box.id = "polyvox-rerun"
        nb.cells.insert(at, box)
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
        lines += [f"## {correction_heading(c)}", "",
                  f"- **Claimed earlier:** {c['claimed'].strip()}",
                  f"- **What stands:** {c['stands'].strip()}",
                  f"- **Chapters:** {where}",
                  f"- **Source:** {source_markdown(c)}", ""]
    return "\n".join(lines)
