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
"""
from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).parent / "static"


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
    app.connect("builder-inited", _drop_thebe)
    app.connect("builder-inited", _static)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
