"""A small Sphinx extension for the book (``_config.yml``: ``sphinx.extra_extensions``).

1. The book's table style sheet (``static/polyvox.css``): tables scroll inside their own
   container, numbers right-aligned with tabular figures.
2. Thebe off. Jupyter Book always loads sphinx-thebe, whose ``init_thebe_core`` adds an
   inline ``const THEBE_JS_URL = …`` script with ``app.add_js_file(None, body=…)``. With
   Sphinx 7.4 the HTML builder keeps that script once as added (file name ``None``) and
   once again from the registry when it prepares writing (file name ``""``): the two do not
   compare equal, so every page declares the constant twice and the browser logs
   ``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared``. The book executes
   its chapters at build time and offers no live-code button, so it does not load Thebe.
3. Pages that open offline log no error: MathJax is served from the book itself (the SVG
   build of ``django-static-mathjax``, one file, copied into ``_static/mathjax/``) instead
   of a CDN; a favicon (browsers ask for one); an explicit light colour mode (the theme
   logs "Got invalid theme mode" when none is set).
"""
from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).parent / "static"
MATHJAX = "mathjax/tex-svg.js"  # under _static/


def _mathjax_source() -> Path | None:
    try:
        from importlib.resources import files

        src = Path(str(files("mathjax") / "static" / "mathjax" / "es5" / "tex-svg.js"))
    except (ImportError, ModuleNotFoundError, TypeError):
        return None
    return src if src.is_file() else None


def _config(app, config) -> None:
    if _mathjax_source() is not None and str(config.mathjax_path).startswith(("http://", "https://")):
        config.mathjax_path = MATHJAX
    if not config.html_favicon:
        config.html_favicon = str(STATIC / "favicon.svg")
    context = dict(config.html_context or {})
    context.setdefault("default_mode", "light")  # pydata-sphinx-theme reads it from the context
    config.html_context = context


def _copy_mathjax(app, exception) -> None:
    import shutil

    src = _mathjax_source()
    if exception is None and src is not None and app.builder.format == "html" and app.config.mathjax_path == MATHJAX:
        dest = Path(app.outdir) / "_static" / MATHJAX
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists() or dest.stat().st_size != src.stat().st_size:
            shutil.copyfile(src, dest)


def _drop_thebe(app) -> None:
    for event in ("env-before-read-docs",):
        for listener in list(app.events.listeners.get(event, [])):
            if getattr(listener.handler, "__name__", "") == "init_thebe_core":
                app.disconnect(listener.id)


def _static(app) -> None:
    if app.builder.format == "html":
        app.config.html_static_path.append(str(STATIC))
        app.add_css_file("polyvox.css")


def setup(app):
    app.connect("config-inited", _config)
    app.connect("build-finished", _copy_mathjax)
    app.connect("builder-inited", _drop_thebe)
    app.connect("builder-inited", _static)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
