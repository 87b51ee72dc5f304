"""The persona basis (Part II) in miniature: the persona world (:mod:`.world`), tiny-chat
(:mod:`.models`), the router (:mod:`.router`), the systems (:mod:`.systems`) and the staged
pipeline (:mod:`.pipeline`) with its scales in ``configs/personas/*.yaml``.

Importing :mod:`.world` registers the ``personas`` task."""
from . import world as _world  # noqa: F401 - registers the "personas" task
