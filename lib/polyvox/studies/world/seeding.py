"""The models stage of a world run done by copying models already trained with the scale's models settings (the
shipped ones) instead of training them again: ``polyvox world run --models-from MODELS RECORD``.

:func:`models_source_problems` says, one line each, why a source is not this scale's models stage (its stage record's
models settings differ, a model is missing, a card's size or steps differ); :func:`seed_models` copies them (each
model under a temporary name, renamed when whole) and returns the record's ``seeded_from`` (the commit, time and
library versions of the run that trained them, through any earlier copies), so the run says where its models came from.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from ...records import RecordError, read_manifest

MODELS = ("tiny-base", "tiny-think")
CARD_FIELDS = {"hidden": "hidden", "layers": "layers"}  # card field -> models section field (the card's vocab is the trained size)


def models_source_problems(s: dict, source: str | Path, record: str | Path) -> list[str]:
    """Why the trained models in ``source`` (``tiny-base/``, ``tiny-think/``), recorded by the models stage whose
    folder is ``record``, are not this scale's models stage: one line each (empty when they are: the record's
    models settings equal the scale's, and each model's card agrees)."""
    source, record = Path(source), Path(record)
    try:
        rec = read_manifest(record)
    except (RecordError, ValueError) as exc:
        return [f"{record}: {exc}"]
    if rec.get("stage") != "models" or rec.get("status") != "complete":
        return [f"{record}: not a complete models stage record (stage {rec.get('stage')!r}, status {rec.get('status')!r})"]
    theirs = (rec.get("settings") or {}).get("models")
    if theirs != s["models"]:
        diff = sorted(k for k in set(theirs or {}) | set(s["models"]) if (theirs or {}).get(k) != s["models"].get(k))
        return [f"{record}: recorded with other models settings than scale {s['name']!r} ({', '.join(diff)})"]
    out = []
    for m in MODELS:
        card_path = source / m / "card.json"
        if not (source / m / "model.safetensors").is_file() or not card_path.is_file():
            out.append(f"{source / m}: no model.safetensors and card.json")
            continue
        card = json.loads(card_path.read_text())
        steps = s["models"]["base_steps" if m == "tiny-base" else "think_steps"]
        bad = [f"{k} {card.get(k)} ≠ {s['models'][v]}" for k, v in CARD_FIELDS.items() if card.get(k) != s["models"][v]]
        bad += [f"steps {card.get('steps')} ≠ {steps}"] if card.get("steps") != steps else []
        if bad:
            out.append(f"{card_path}: not this scale's model ({'; '.join(bad)})")
    return out


def seed_models(out: Path, s: dict, source: str | Path, record: str | Path) -> dict:
    """The models stage done by copying models already trained with this scale's models settings (the shipped
    ones) instead of training them again; the stage record says where they came from (``seeded_from``)."""
    problems = models_source_problems(s, source, record)
    if problems:
        raise ValueError(problems[0])
    rec = read_manifest(Path(record))
    for m in MODELS:
        tmp = out / "models" / f"{m}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        shutil.copytree(Path(source) / m, tmp)
        tmp.rename(out / "models" / m)
    # A record that was itself seeded names the run that trained the models: carry that one's commit, time and
    # versions (the copy's own commit says nothing about the code that trained them).
    trained = rec.get("seeded_from") or rec
    return {"seeded_from": {"models": str(source), "record": str(record), "git_commit": trained.get("git_commit"),
                            "finished": trained.get("finished"), "versions": trained.get("versions")}}
