"""Math typesetting without network: MathJax 3 (the SVG build of ``django-static-mathjax``) embedded
in the page by ``assets/mathjax-loader.js``, and :func:`init`, once per notebook."""
from __future__ import annotations

import json

from .markdown import asset


def mathjax_html() -> str:
    """A script that loads MathJax 3 (SVG output) from this environment, for pages without network.

    - Static HTML (the book): MathJax is loaded into the page and typesets it, unless the page has a
      MathJax already or a script that loads one (Sphinx's, deferred, on pages with math).
    - Jupyter typesets an output once, when it renders, with its own MathJax, which cannot typeset what
      the explorer draws later. There the same MathJax runs privately in a hidden frame
      (``window.PolyvoxMathJax``, nothing typeset on its own) and the explorer converts its math with it.
    """
    from importlib.resources import files

    try:
        src = (files("mathjax") / "static" / "mathjax" / "es5" / "tex-svg.js").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise RuntimeError("MathJax is not installed: pip install django-static-mathjax==3.2.2.1 "
                           f"(requirements.lock) ({exc})") from None
    config = {"tex": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]]},
              "options": {"ignoreHtmlClass": "tex2jax_ignore|mathjax_ignore|document",
                          "processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"},
              "svg": {"fontCache": "global"}}
    private = {**config, "svg": {"fontCache": "local"}, "startup": {"typeset": False}}
    # the loader's placeholders, MathJax's own source last (it is never searched for a placeholder)
    script = (asset("mathjax-loader.js").removesuffix("\n").replace("__PV_PRIVATE__", json.dumps(json.dumps(private)))
              .replace("__PV_CONFIG__", json.dumps(config)).replace("__PV_MATHJAX__", src))
    return f"<script>{script}</script>"



def init(connected: bool = False, tables: bool = True) -> None:
    """Once per notebook: MathJax for the explorer and static pages (embedded: no network) and, with
    ``tables``, itables' DataTables for :meth:`Rollouts.show_table` (embedded when not connected)."""
    from IPython.display import HTML, display

    if tables:
        from itables import init_notebook_mode

        init_notebook_mode(all_interactive=False, connected=connected)
    if not connected:
        display(HTML(mathjax_html()))
