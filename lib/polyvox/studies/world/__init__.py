"""The miniature world (Part IV): problems (:mod:`.problems`), tiny models (:mod:`.models`),
and the staged pipeline (:mod:`.pipeline`) with its scales in ``configs/world/*.yaml``."""
