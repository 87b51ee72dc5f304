"""Part III: sliced models collaborating by hand-offs, in miniature.

- :mod:`.protocol`: the turn format, its parser and the state prompt;
- :mod:`.scheduler`: the scheduler (hand off / confirm and stop, t_max, retry then forced
  hand-off) and the resumable trajectory run;
- :mod:`.cost`: parameter-weighted output tokens and calls, recomputed from trajectories;
- :mod:`.projections`: which answer of a trajectory is scored (final, first, last, vote, the study's rule);
- :mod:`.judge`: the programmatic step judge and the pyramid reward;
- :mod:`.qa`: the generated multi-hop QA task; :mod:`.traces`: coordination traces;
- :mod:`.models`, :mod:`.pipeline`: the pool, its training stages and evaluation (scales in configs/collab/).
"""
