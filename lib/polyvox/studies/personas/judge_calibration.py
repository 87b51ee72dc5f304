"""Calibration of a judge model (:mod:`.judge_model`) on held-out pairs: agreement, position bias, length bias.

The held-out pairs are :func:`.judge_data.make_pairs` of the validation or test users (disjoint from the
training pairs by user, prompt and problem: checked again here). Each pair is judged in both orders by
:class:`polyvox.judge.LLMJudge` over the ``transformers`` backend — the template, the greedy decoding,
``max_tokens`` and the parser the judge machinery uses, the user message rendered by the model's chat
template as a server renders it (:func:`polyvox.backends.base.local_prompt`) — so these verdicts are the ones ``polyvox judge
run`` would record from a server of the same model (up to the server's dtype: the backend runs fp32 on
CPU). Measured:

- **agreement with the rubric** (:func:`.judging.rubric_judge`) and **with the ground truth** (the world's
  label, :mod:`.judge_data`): per pair, the judge's two orders folded as ``polyvox judge tally`` folds
  them (A wins only when both orders say so, B likewise, anything else a tie), compared with the rubric's
  (order-blind) verdict and with the truth; also per call (each order on its own). For scale, the
  rubric's own agreement with the truth, and the share of true ties (what a judge that always flips, so
  always folds to a tie, would reach);
- **position bias**: the flip rate — the share of pairs whose verdict changes when A and B swap (the two
  orders name different answers, or one says tie and the other not) — and the share of decisive calls
  that pick the answer shown first (0.5 without bias);
- **length bias**: per call, the length difference in words (A − B), binned; in each bin the share of
  decisive verdicts for A, beside the same share for the ground truth (in this world length goes with
  style, so the truth itself favours one side in some bins: the bias is the judge's rate against the
  truth's), and overall how often a decisive verdict picks the longer answer, judge against truth.

Intervals: Wilson 95 % (:func:`polyvox.metrics.wilson_interval`), inside [0, 1]; the pairs of one user are
not independent, so for the pair-level rates a percentile bootstrap that resamples whole users
(:func:`polyvox.judge.cluster_bootstrap_ci`, also inside [0, 1]) is given beside it. Calls of one pair are
counted as two in the call-level rates (a departure: those Wilson intervals are too narrow).

The record (:class:`Calibration`) is written as ``calibration.json`` beside the model (temporary name, then
rename), naming the model folder as a manifest does (:func:`polyvox.records.portable_path`: never this machine's
absolute path); :meth:`Calibration.frame` gives its rates as a DataFrame. The persona pipeline calibrates its
judge model so (stage judge-model, :mod:`.judging`).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from . import judge_data as D

LENGTH_EDGES = (-15, -5, 0, 1, 5, 15)  # bins of words(A) - words(B): (-inf, -15), [-15, -5), ..., [15, inf)
FILE = "calibration.json"


@dataclass(frozen=True)
class Rate:
    """k of n, with its Wilson 95 % interval; ``user_low``/``user_high``: a bootstrap over users (pair rates)."""

    k: int
    n: int
    rate: float | None
    low: float | None
    high: float | None
    user_low: float | None = None
    user_high: float | None = None


def rate(k: int, n: int, per_item=None, users=None, n_boot: int = 2000) -> Rate:
    from ...judge import cluster_bootstrap_ci
    from ...metrics import wilson_interval

    if n == 0:
        return Rate(0, 0, None, None, None)
    lo, hi = wilson_interval(k, n)
    r = Rate(int(k), int(n), k / n, lo, hi)
    if per_item is not None:
        _, ulo, uhi = cluster_bootstrap_ci(per_item, users, n_boot=n_boot)
        r = replace(r, user_low=ulo, user_high=uhi)
    return r


@dataclass(frozen=True)
class LengthBin:
    lo: float | None  # words(A) - words(B) in [lo, hi); None: unbounded (the record is strict JSON)
    hi: float | None
    calls: int
    verdicts: dict  # A, B, tie, unparseable
    judge_a: Rate  # decisive judge verdicts for A
    truth_a: Rate  # decisive true labels for A


@dataclass
class Calibration:
    model: str
    weights_sha256: str
    split: str
    pairs: int
    users: int
    calls: int
    verdicts: dict  # per call: A, B, tie, unparseable
    truth_labels: dict  # per pair
    agreement_rubric: Rate
    agreement_truth: Rate
    call_agreement_rubric: Rate
    call_agreement_truth: Rate
    rubric_agreement_truth: Rate
    true_tie_share: Rate
    flip_rate: Rate
    first_pick: Rate
    longer_pick: Rate
    longer_pick_truth: Rate
    length_bins: list
    held: dict  # how the held-out pairs were made, their digest, whether the world still makes the training data
    seconds: float
    per_pair: list = field(default_factory=list)  # pair id, user, truth, rubric, both orders' verdicts

    RATES = ("agreement_rubric", "agreement_truth", "call_agreement_rubric", "call_agreement_truth",
             "rubric_agreement_truth", "true_tie_share", "flip_rate", "first_pick", "longer_pick",
             "longer_pick_truth")

    def frame(self):
        """One row per rate: metric, k, n, rate, Wilson low/high, user-bootstrap low/high."""
        import pandas as pd

        return pd.DataFrame([{"metric": m, **asdict(getattr(self, m))} for m in self.RATES])

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, allow_nan=False) + "\n"


def fold(ab: str | None, ba: str | None) -> str | None:
    """Both orders' verdicts (ab: first shown as A) as one verdict for the first answer, as tallies fold them."""
    if ab is None or ba is None:
        return None
    return "A" if (ab, ba) == ("A", "B") else "B" if (ab, ba) == ("B", "A") else "tie"


def judge_verdicts(judge, pairs: list[D.JudgePair], chunk: int = 64, progress: bool = False):
    """[(verdict with first as A, verdict with second as A, raw replies)] from any polyvox judge."""
    from tqdm import tqdm

    calls = [c for p in pairs for c in (p.call(False), p.call(True))]
    raws: list[str] = []
    for i in tqdm(range(0, len(calls), chunk), desc="judge calls", disable=not progress, unit="chunk"):
        raws += judge.ask(calls[i:i + chunk], 0)
    parsed = [judge.parse(r) for r in raws]
    return [(parsed[2 * i], parsed[2 * i + 1], (raws[2 * i], raws[2 * i + 1])) for i in range(len(pairs))]


def measure(pairs: list[D.JudgePair], got: list, n_boot: int = 2000) -> dict:
    """The rates of :class:`Calibration` from held-out pairs and a judge's verdicts on them (both orders)."""
    from .judging import rubric_judge

    rj = rubric_judge()
    rubric = [rj.parse(x) for x in rj.ask([p.call() for p in pairs])]
    users = [p.user for p in pairs]
    folded = [fold(ab, ba) for ab, ba, _ in got]
    ok = [i for i, f in enumerate(folded) if f is not None]
    ok_users = [users[i] for i in ok]

    def pair_rate(hit):  # over pairs with both orders parsed, with the user bootstrap
        x = [float(hit(i)) for i in ok]
        return rate(int(sum(x)), len(x), x, ok_users, n_boot) if x else rate(0, 0)

    calls = [(v, p.truth_shown(s), rubric[i] if not s else D.swap(rubric[i]), p.call(s))
             for i, (p, (ab, ba, _)) in enumerate(zip(pairs, got)) for s, v in ((False, ab), (True, ba))]
    parsed = [c for c in calls if c[0] is not None]
    decisive = [c for c in parsed if c[0] != "tie"]
    words = lambda c: (len(c.first.split()), len(c.second.split()))  # noqa: E731

    def longer(rows, verdict_of):
        rows = [r for r in rows if verdict_of(r) in ("A", "B") and len(set(words(r[3]))) == 2]
        k = sum((verdict_of(r) == "A") == (words(r[3])[0] > words(r[3])[1]) for r in rows)
        return rate(k, len(rows))

    bins, edges = [], (-float("inf"),) + LENGTH_EDGES + (float("inf"),)
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = [c for c in calls if lo <= words(c[3])[0] - words(c[3])[1] < hi]
        counts = {v: sum(c[0] == v for c in inside) for v in D.VERDICTS}
        counts["unparseable"] = sum(c[0] is None for c in inside)
        truth_dec = [c for c in inside if c[1] != "tie"]
        bins.append(LengthBin(lo if lo > -float("inf") else None, hi if hi < float("inf") else None, len(inside),
                              counts, rate(counts["A"], counts["A"] + counts["B"]),
                              rate(sum(c[1] == "A" for c in truth_dec), len(truth_dec))))
    return {
        "pairs": len(pairs), "users": len(set(users)), "calls": len(calls),
        "verdicts": {**{v: sum(c[0] == v for c in calls) for v in D.VERDICTS},
                     "unparseable": sum(c[0] is None for c in calls)},
        "truth_labels": D.label_counts(pairs),
        "agreement_rubric": pair_rate(lambda i: folded[i] == rubric[i]),
        "agreement_truth": pair_rate(lambda i: folded[i] == pairs[i].truth),
        "call_agreement_rubric": rate(sum(c[0] == c[2] for c in parsed), len(parsed)),
        "call_agreement_truth": rate(sum(c[0] == c[1] for c in parsed), len(parsed)),
        "rubric_agreement_truth": rate(sum(r == p.truth for r, p in zip(rubric, pairs)), len(pairs),
                                       [float(r == p.truth) for r, p in zip(rubric, pairs)], users, n_boot),
        "true_tie_share": rate(sum(p.truth == "tie" for p in pairs), len(pairs)),
        "flip_rate": pair_rate(lambda i: got[i][0] != D.swap(got[i][1])),
        "first_pick": rate(sum(c[0] == "A" for c in decisive), len(decisive)),
        "longer_pick": longer(parsed, lambda r: r[0]),
        "longer_pick_truth": longer(calls, lambda r: r[1]),
        "length_bins": bins,
        "per_pair": [{"pair_id": p.pair_id, "user": p.user, "preference": p.preference, "truth": p.truth,
                      "rubric": rubric[i], "ab": got[i][0], "ba": got[i][1], "raw_ab": got[i][2][0][:40],
                      "raw_ba": got[i][2][1][:40]} for i, p in enumerate(pairs)],
    }


def calibrate(model_dir: str | Path, split: str | None = None, batch_size: int = 64, device: str | None = None,
              progress: bool = False, n_boot: int = 2000) -> Calibration:
    """Judge the model's held-out pairs in both orders and write ``calibration.json`` beside it.

    Validate first: the folder must hold a complete judge model; the held-out pairs are remade from its
    settings (``split`` may name the other held-out split) and checked disjoint from its training pairs."""
    import dataclasses

    from ...backends import make_backend
    from ...judge import LLMJudge
    from ...records import portable_path
    from .judge_model import JudgeSettings, data, is_complete, read_manifest

    model_dir = Path(model_dir)
    if not is_complete(model_dir):
        raise ValueError(f"{model_dir}: not a complete judge model folder (no manifest.json of kind 'judge model')")
    manifest = read_manifest(model_dir)
    known = {f.name for f in dataclasses.fields(JudgeSettings)}
    s = JudgeSettings(**{k: v for k, v in manifest["settings"].items() if k in known})
    if split is not None:
        s = dataclasses.replace(s, held_split=split)
    s.check()
    t0 = time.time()
    train_pairs, held = data(s)  # raises unless disjoint
    judge = LLMJudge(make_backend("transformers", str(model_dir), batch_size=batch_size, device=device))
    got = judge_verdicts(judge, held, chunk=batch_size, progress=progress)
    m = measure(held, got, n_boot)
    per_pair = m.pop("per_pair")
    rec = Calibration(
        model=portable_path(model_dir), weights_sha256=manifest["weights_sha256"], split=s.held_split, **m,
        held={"split": s.held_split, "n_users": s.held_n_users, "per_user": s.held_per_user,
              "pairs_per_prompt": s.held_pairs_per_prompt, "seed": s.world_seed, "digest": D.digest(held),
              "train_digest_matches_manifest": D.digest(train_pairs) == manifest["data"]["digest"],
              "judge": judge.identity() | {"model": portable_path(model_dir)}},
        seconds=round(time.time() - t0, 1), per_pair=per_pair)
    tmp = model_dir / (FILE + ".tmp")
    tmp.write_text(rec.to_json(), encoding="utf-8")
    os.replace(tmp, model_dir / FILE)
    return rec


def _pct(r: Rate) -> str:
    if r.rate is None:
        return "n=0"
    users = f", users [{100 * r.user_low:.0f}, {100 * r.user_high:.0f}]" if r.user_low is not None else ""
    return f"{100 * r.rate:5.1f}% [{100 * r.low:.0f}, {100 * r.high:.0f}{']' + users if users else ']'} (n={r.n})"


def summary_lines(rec: Calibration) -> list[str]:
    out = [f"calibration of {rec.model} on {rec.pairs} held-out pairs ({rec.split} users: {rec.users}), "
           f"{rec.calls} calls: {rec.verdicts}"]
    for m in Calibration.RATES:
        out.append(f"  {m:<24} {_pct(getattr(rec, m))}")
    out.append("  length bins (words A - B): judge's share of A among decisive calls vs the truth's")
    for b in rec.length_bins:
        lo, hi = ("-inf" if b.lo is None else b.lo), ("inf" if b.hi is None else b.hi)
        out.append(f"    [{lo:>5}, {hi:>5})  calls {b.calls:>4}  judge {_pct(b.judge_a)}  truth {_pct(b.truth_a)}")
    return out
