"""The studies, one package per part of the book. Their tasks register through the
``polyvox.tasks`` entry points (pyproject.toml), found by :func:`polyvox.tasks.discover`.

- :mod:`.panel`: the panel-of-experts study (Part I): protocol and published records.
- :mod:`.personas`: the persona basis (Part II): persona world, heads, router, systems, judge runs.
- :mod:`.collab`: sliced models collaborating (Part III): scheduler, pool, costs, projections.
- :mod:`.world`: the miniature world (Part IV): problems, models, the staged pipeline.

Core modules (records, tasks, grading, backends, runs, cache, train …) never import
from here; an import-linter contract (``make lint-imports``) checks it.
"""
