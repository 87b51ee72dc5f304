"""Which design a world run folder holds, and where each of its records lies.

Two designs have been recorded:

- ``panel-only`` (the first recordings, ``configs/world/h200.yaml``): one RL run per seed,
  ``seed-<k>/panel-rl/`` (tiny-panel: a LoRA on tiny-base, panel format); the thinking arm is
  tiny-think, a separate full fine-tune, evaluated as it is; evaluations in
  ``seed-<k>/eval/cap-<c>/{tiny-panel,tiny-think}/``;
- ``matched`` (issue 21's design, :mod:`.pipeline`): both arms trained from tiny-base by one recipe,
  ``seed-<k>/rl-{panel,think}/``, a ``pilot/``, evaluations in ``seed-<k>/eval/cap-<c>/{panel,think}/``.

The pipeline writes only the matched design and refuses, in one line, to add stages to a folder of the
other (:func:`refuse_other`); the analysis reads both (:func:`of`, :func:`rl_folders`, :func:`eval_folder`),
so the book keeps reading a shipped recording until a new one replaces it.
"""
from __future__ import annotations

from pathlib import Path

PANEL_ONLY, MATCHED = "panel-only", "matched"
SYSTEMS = ("tiny-panel", "tiny-think")  # the analysis's names of the two evaluated systems, in both designs
RL_FOLDERS = {PANEL_ONLY: {"panel": "panel-rl"}, MATCHED: {"panel": "rl-panel", "think": "rl-think"}}
EVAL_NAMES = {PANEL_ONLY: {"tiny-panel": "tiny-panel", "tiny-think": "tiny-think"},
              MATCHED: {"tiny-panel": "panel", "tiny-think": "think"}}


def of(root: str | Path) -> str | None:
    """The design a run folder holds (None: neither, e.g. an empty or a models-only folder)."""
    root = Path(root)
    if (root / "pilot").is_dir() or any(root.glob("seed-*/rl-*")):
        return MATCHED
    if any(root.glob("seed-*/panel-rl")):
        return PANEL_ONLY
    return None


def rl_folders(root: str | Path, seed: int) -> dict[str, Path]:
    """The matched-RL (or panel-RL) folders of one seed, by arm."""
    design = of(root) or MATCHED
    return {arm: Path(root) / f"seed-{seed}" / name for arm, name in RL_FOLDERS[design].items()}


def eval_folder(root: str | Path, seed: int, cap: int, system: str) -> Path:
    """One system's graded evaluation at ``cap`` (``system``: ``tiny-panel`` or ``tiny-think``)."""
    design = of(root) or MATCHED
    return Path(root) / f"seed-{seed}" / "eval" / f"cap-{cap}" / EVAL_NAMES[design][system]


def refuse_other(root: str | Path) -> None:
    """Refuse, in one line, to write the matched design's stages into a folder of the panel-only design."""
    if of(root) == PANEL_ONLY:
        raise ValueError(f"{root}: holds a world run of the earlier panel-only design (seed-<k>/panel-rl/); the "
                         "pipeline now writes the matched design (rl-panel, rl-think, pilot): use a new --out")
