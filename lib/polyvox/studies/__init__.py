"""The studies, one package per part of the book; importing this registers their tasks.

- :mod:`.panel`: the panel-of-experts study (Part I): protocol and published records.
- :mod:`.world`: the miniature world (Part IV): problems, models, the staged pipeline.

Core modules (records, tasks, grading, backends, runs, cache, train …) never import
from here; an import-linter contract (``make lint-imports``) checks it.
"""
from .world import problems as _world_problems  # noqa: F401 - registers the "world" task
