"""What a personas run of issue 22's form records beside the shipped run's, read for the Part II chapter.

A run of the new form (a scale whose ``distill`` names ``cap`` / ``sweep``, :mod:`.sweep`) has:

- ``cap/cap.json``: the teacher's answer lengths per persona type, the longest type's 99th
  percentile and the cap-hit rates at the scale's ``generate.max_tokens`` (:func:`cap_table`);
- ``sweep/chosen/sweep.jsonl`` and ``chosen.json``: the validation sweep per arm and its pick
  (:func:`sweep_table`, :func:`picks`);
- per head, in its arm-seed's stage record (``heads/<arm>-s<seed>/manifest.json``), ``loss_falls``,
  ``style_rate`` and ``trained`` (:func:`.world.head_trained` at :data:`.steps.TRAINED_AT`), and
  in its step log the gradient norms and the first response token's max p (:func:`recorded_trained`,
  :func:`gradient_evidence`).

:func:`form` says which of these a run has and :func:`missing_line` says, in one computed line, what a
run of the old form (the shipped ``data/runs/personas-h200``) lacks. :func:`refusals` lists the heads
not trained in both arms: the chapter refuses the forward-vs-reverse comparison for them.

Item 4, the judge model (:mod:`.judging`), where a run has it: :func:`model_judge` reads its verdicts
(``judge-by-model/``) as a :class:`RecordedJudge` that :mod:`.analysis` and :mod:`.verdicts` take in place of the
rubric; :func:`calibration` reads its ``calibration.json`` (held-out pairs: agreement with the truth and the rubric,
flip rate, first-shown rate, length bias), shown by :func:`calibration_table` and :func:`length_table`;
:func:`judges` is the stated rule by which it judges or not, :func:`model_judge_line` says so in words, and
:func:`no_model_judge_line` is the one line for a run without it (the shipped ``data/runs/personas-h200``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ... import jsonl
from ...records import read_jsonl
from . import world as pw
from .judging import MODEL_VERDICTS, read_object  # judge-by-model: the judge model's verdicts beside the rubric's judge/

RECORDS = {"cap": "measurement of the generation cap",  # cap/cap.json
           "sweep": "validation sweep",  # sweep/chosen/
           "trained": "per-head trained flags (issue 22's rule) in the heads' stage records",
           "gradients": "per-step gradient norms in the heads' step logs"}


def _manifest(run: Path, arm: str, seed: int) -> dict:
    return json.loads((Path(run) / "heads" / f"{arm}-s{seed}" / "manifest.json").read_text())


def form(run: str | Path, arms, seeds) -> dict[str, bool]:
    """Which of :data:`RECORDS` the run has (``trained`` / ``gradients``: every test head has them)."""
    run = Path(run)
    heads = [(_manifest(run, a, s).get("heads", {}), a, s) for a in arms for s in seeds]
    logs = [run / "heads" / f"{a}-s{s}" / p / "train_log.jsonl" for a in arms for s in seeds for p in pw.POLES]
    return {"cap": (run / "cap" / "cap.json").is_file(),
            "sweep": (run / "sweep" / "chosen" / "chosen.json").is_file(),
            "trained": all(p in h and "trained" in h[p] for h, _, _ in heads for p in pw.POLES),
            "gradients": all(jsonl.exists(f) and "first_token_grad_norm" in (read_jsonl(f)[:1] or [{}])[0] for f in logs)}


def missing_line(run: str | Path, has: dict[str, bool]) -> str | None:
    """One line naming the records of :data:`RECORDS` the run does not have (None: it has them all)."""
    missing = [RECORDS[k] for k, v in has.items() if not v]
    if not missing:
        return None
    # the run is not named: the line reaches the book's intro page, which names studies, not our folders
    return (f"This run has no {'; no '.join(missing)}: those records do not exist for this run "
            f"({len(missing)} of issue 22's {len(RECORDS)} records missing); the views that need them are shown only "
            "for runs that have them, and this run is read as it was recorded.")


def cap_table(run: str | Path) -> tuple[dict, pd.DataFrame]:
    """``cap/cap.json`` and one row per persona type: answers measured, 99th percentile, max, mean, cap-hit rate."""
    c = json.loads((Path(run) / "cap" / "cap.json").read_text())
    rows = [{"type": t, "answers": v["n"], "p99 tokens": v["p99"], "max tokens": v["max"], "mean tokens": v["mean"],
             "cap-hit rate": v["cap_hit_rate"]} for t, v in c["types"].items()]
    return c, pd.DataFrame(rows)


def cap_line(c: dict) -> str:
    """The cap's check in words, from ``cap.json``."""
    fits = c["cap"] >= c["p99"]
    return (f"Teacher answers measured up to {c['ceiling']} tokens: the longest persona type is **{c['longest']}**, "
            f"99th percentile **{c['p99']} tokens**; the generation cap is **{c['cap']} tokens**, "
            f"{'above' if c['cap'] > c['p99'] else 'at' if fits else '**below**'} it. At the cap "
            f"{100 * c['cap_hit_rate']:.2f}% of all measured answers are cut; "
            f"{100 * c['ceiling_hit_rate']:.2f}% reached the measurement's own ceiling.")


SWEEP_KEYS = ("lr", "steps", "temperature", "jsd_beta", "student_sample_fraction")


def sweep_table(run: str | Path) -> pd.DataFrame:
    """One row per arm and sweep point: the recipe, heads trained (of the four poles), mean validation style
    rate, the median first-token gradient norm over its heads, and whether the arm picked it."""
    df = pd.DataFrame(read_jsonl(Path(run) / "sweep" / "chosen" / "sweep.jsonl"))
    df["jsd_beta"] = df["jsd_beta"].astype(object).where(df["jsd_beta"].notna(), "—")
    g = df.groupby(["arm", "point", *SWEEP_KEYS], sort=False, dropna=False)
    out = g.agg(**{"heads trained": ("trained", "sum"), "poles": ("pole", "size"),
                   "mean style rate": ("style_rate", "mean"),
                   "first-token grad norm (median)": ("first_token_grad_norm_median", "median"),
                   "chosen": ("chosen", "first")}).reset_index()
    out["heads trained"] = out["heads trained"].astype(int).astype(str) + " of " + out["poles"].astype(str)
    return out.drop(columns="poles")


def picks(run: str | Path) -> pd.DataFrame:
    """Per arm, the sweep's pick (``chosen.json``): the recipe and its validation result."""
    c = json.loads((Path(run) / "sweep" / "chosen" / "chosen.json").read_text())
    return pd.DataFrame([{"arm": a, **{k: v.get(k) for k in SWEEP_KEYS}, "sweep seed": v["seed"],
                          "heads trained": v["trained"], "mean style rate": v["style_rate"],
                          "validation score": v["validation_score"]} for a, v in c.items()])


def picks_line(p: pd.DataFrame) -> str:
    """The per-arm recipe in words (learning rate, steps, loss temperature), from :func:`picks`."""
    return "; ".join(f"{r['arm']}: lr {r['lr']:g}, {r['steps']} steps, loss temperature {r['temperature']:g}"
                     + (f", JSD β {r['jsd_beta']:g}" if r["jsd_beta"] is not None else "")
                     + f" ({r['heads trained']} of {len(pw.POLES)} sweep heads trained)" for _, r in p.iterrows())


def recorded_trained(run: str | Path, arms, seeds) -> pd.DataFrame:
    """One row per test head from its arm-seed's stage record: first and last loss, whether the loss falls,
    the validation style rate of the selected checkpoint and ``trained`` (issue 22's rule, as recorded)."""
    rows = []
    for arm in arms:
        for seed in seeds:
            h = _manifest(Path(run), arm, seed)["heads"]
            rows += [{"arm": arm, "seed": seed, "head": p, "loss, first step": h[p]["loss_first"],
                      "loss, last step": h[p]["loss_last"], "loss falls": bool(h[p]["loss_falls"]),
                      "validation style rate": h[p]["style_rate"], "trained": bool(h[p]["trained"])}
                     for p in pw.POLES]
    return pd.DataFrame(rows)


def with_recorded(heads: pd.DataFrame, recorded: pd.DataFrame) -> pd.DataFrame:
    """:func:`.analysis.head_training`'s table with ``trained`` taken from the records (not a rule of the chapter's)."""
    flags = recorded.set_index(["arm", "seed", "head"])["trained"]
    out = heads.copy()
    out["trained"] = [bool(flags[(a, s, h)]) for a, s, h in zip(out["arm"], out["seed"], out["head"])]
    return out


def refusals(heads: pd.DataFrame, arms=("forward", "reverse")) -> pd.DataFrame:
    """Per seed and pole whose head did not train in every arm: the arms where it did not (the chapter refuses the
    forward-vs-reverse comparison for it)."""
    rows = []
    for (seed, head), g in heads[heads["arm"].isin(arms)].groupby(["seed", "head"]):
        bad = sorted(g.loc[~g["trained"].astype(bool), "arm"])
        if bad:
            rows.append({"seed": seed, "head": head, "not trained in": ", ".join(bad)})
    return pd.DataFrame(rows, columns=["seed", "head", "not trained in"])


def refusal_line(ref: pd.DataFrame, heads: pd.DataFrame, rule: str = "as recorded") -> str:
    """The refusal in words, computed from :func:`refusals`; ``rule``: how "trained" was decided."""
    pairs = heads.groupby(["seed", "head"]).ngroups
    if len(ref) == 0:
        return f"Every head trained in both arms ({rule}; {pairs} seed-pole pairs): no comparison is refused."
    items = "; ".join(f"`{r['head']}` in seed {r['seed']} (not trained: {r['not trained in']})"
                      for _, r in ref.iterrows())
    return (f"**Forward vs reverse refused** for {len(ref)} of {pairs} seed-pole pairs whose head did not train "
            f"in both arms ({rule}): {items}. Every type that needs such a head (a mix needs all four) is left out of the comparison.")


def gradient_evidence(run: str | Path, arms, seeds) -> pd.DataFrame:
    """Per source (the test heads; each sweep loss temperature) and arm: medians over every logged step of every
    head of the first response token's max p under the student, the gradient norm at that token's logits and
    the LoRA gradient norm (issue 22: reverse KL's gradient vanishes at a near one-hot student)."""
    run = Path(run)
    rows = []

    def add(source, arm, folder):
        for p in pw.POLES:
            f = folder / p / "train_log.jsonl"
            if jsonl.exists(f):  # plain or shipped gzipped
                rows.extend({"source": source, "arm": arm, **r} for r in read_jsonl(f))

    for arm in arms:
        for seed in seeds:
            add("test heads", arm, run / "heads" / f"{arm}-s{seed}")
    if jsonl.exists(run / "sweep" / "chosen" / "sweep.jsonl"):
        rows_ = read_jsonl(run / "sweep" / "chosen" / "sweep.jsonl")
        points = {(r["arm"], r["point"]): r["temperature"] for r in rows_}
        for (arm, i), tau in sorted(points.items()):
            add(f"sweep, loss temperature {tau:g}", arm, run / "sweep" / f"{arm}-{i}")
    df = pd.DataFrame(rows)
    if df.empty or "first_token_grad_norm" not in df:
        return pd.DataFrame()
    g = df.groupby(["source", "arm"], sort=False)
    out = g.agg(**{"steps logged": ("step", "size"), "first-token max p (median)": ("first_token_max_p", "median"),
                   "first-token grad norm (median)": ("first_token_grad_norm", "median"),
                   "LoRA grad norm (median)": ("grad_norm", "median")}).reset_index()
    # step 1: every head starts from the base model, so the mechanism shows before training moves the student
    first = df[df["step"] == df["step"].min()].groupby(["source", "arm"], sort=False)
    step1 = first.agg(**{"step-1 first-token max p (median)": ("first_token_max_p", "median"),
                         "step-1 first-token grad norm (median)": ("first_token_grad_norm", "median")}).reset_index()
    return out.merge(step1, on=["source", "arm"], how="left")


def gradient_line(ev: pd.DataFrame) -> str:
    """The first-token gradient of each arm on the test heads, in words."""
    t = ev[ev["source"] == "test heads"].set_index("arm")
    parts = [f"{a}: max p {r['first-token max p (median)']:.4f}, first-token gradient norm "
             f"{r['first-token grad norm (median)']:.2g}" for a, r in t.iterrows()]
    ratio = ""
    if {"forward", "reverse"} <= set(t.index) and t.loc["reverse", "first-token grad norm (median)"] > 0:
        r = t.loc["forward", "first-token grad norm (median)"] / t.loc["reverse", "first-token grad norm (median)"]
        ratio = f"; forward's is {r:,.0f} × reverse's" if r >= 10 else f"; forward's is {r:.2g} × reverse's"
    line = "Test heads, medians over every logged step — " + "; ".join(parts) + ratio + "."
    if "step-1 first-token grad norm (median)" in ev:  # at step 1 the student is the base model in every head
        first = []
        for source, g in ev.groupby("source", sort=False):
            r = g.set_index("arm")["step-1 first-token grad norm (median)"]
            if {"forward", "reverse"} <= set(r.index) and r["reverse"] > 0:
                first.append(f"{source}: forward {r['forward']:.2g}, reverse {r['reverse']:.2g} "
                             f"({r['forward'] / r['reverse']:,.0f} ×)" if r["forward"] / r["reverse"] >= 10 else
                             f"{source}: forward {r['forward']:.2g}, reverse {r['reverse']:.2g} "
                             f"({r['forward'] / r['reverse']:.2g} ×)")
        if first:
            line += " At step 1, where every head's student is still the base model, the median first-token gradient " \
                    "norm is " + "; ".join(first) + "."
    return line


# ---------------------------------------------------------------- the judge model (issue 22, item 4)

FLIP_MAX = 0.25  # the judge model judges only if its flip rate's 95% Wilson interval lies at or below this
CALIBRATION_ROWS = (  # (calibration.json key, what the chapter calls it)
    ("agreement_truth", "agreement with the ground truth (pairs, both orders folded)"),
    ("agreement_rubric", "agreement with the rubric (pairs, both orders folded)"),
    ("call_agreement_truth", "agreement with the ground truth (per call, each order alone)"),
    ("call_agreement_rubric", "agreement with the rubric (per call, each order alone)"),
    ("rubric_agreement_truth", "the rubric's own agreement with the ground truth (pairs)"),
    ("true_tie_share", "true ties among the pairs (what an always-tie judge agrees on)"),
    ("flip_rate", "flip rate: verdict changes when A and B swap (pairs)"),
    ("first_pick", "first-shown answer picked (decisive calls)"),
    ("longer_pick", "longer answer picked by the judge model (decisive calls)"),
    ("longer_pick_truth", "longer answer picked by the ground truth (decisive labels)"))


class RecordedJudge:
    """A judge as a run recorded its verdicts: the identity its verdicts are keyed by and the run's folder that
    holds them (:attr:`verdicts_folder`, read by :func:`.analysis.outcomes`). It reads; it never judges."""

    name = "recorded"

    def __init__(self, identity: dict, verdicts_folder: str, label: str):
        self._identity, self.verdicts_folder, self.label = dict(identity), verdicts_folder, label

    def identity(self) -> dict:
        return dict(self._identity)

    def ask(self, calls, attempt: int = 0):
        raise RuntimeError(f"{self.label}: a recorded judge reads its verdicts in {self.verdicts_folder}/; "
                           "it makes no calls")

    def parse(self, raw: str) -> str | None:
        from ...judge.judges import parse_verdict

        return parse_verdict(raw)


def model_judge(run: str | Path) -> RecordedJudge | None:
    """The judge model's verdicts of a run (``judge-by-model/``: its complete stage record, whose ``identity``
    keys the verdicts, and its ``tallies.json``) as a :class:`RecordedJudge`; None when the run has none."""
    folder = Path(run) / MODEL_VERDICTS
    rec = read_object(folder / "stage.json")
    if rec.get("status") != "complete" or not isinstance(rec.get("identity"), dict) \
            or not (folder / "tallies.json").is_file():
        return None
    return RecordedJudge(rec["identity"], MODEL_VERDICTS, "judge model")


def model_judge_record(run: str | Path, s: dict) -> str | None:
    """Where and how the judge model's verdicts were made, in words, from ``judge-by-model/stage.json`` (calls
    made, unparseable verdicts, seconds where recorded, commit) and the scale's judge settings (the device; the stage record keeps
    the library versions, not the device); None when the run has no complete record."""
    rec = read_object(Path(run) / MODEL_VERDICTS / "stage.json")
    if rec.get("status") != "complete" or not all(k in rec for k in ("calls_made", "unparseable")):
        return None
    from .judging import judge_settings

    js = judge_settings(s)
    device = js.device if js is not None else "a device the scale does not name"
    commit = str(rec.get("git_commit", "?"))
    took = f" in {float(rec['seconds']):.0f} s" if isinstance(rec.get("seconds"), (int, float)) else ""
    return (f"{int(rec['calls_made']):,} calls, {int(rec['unparseable']):,} of them unparseable,{took} on {device} at commit `{commit[:7]}{'-dirty' if commit.endswith('-dirty') else ''}`")


def model_judge_folder(run: str | Path, s: dict | None = None) -> Path | None:
    """The judge model's folder (``judge-model/<size>-<digest>/``) whose verdicts ``judge-by-model/`` holds: the
    input its stage record names, else the scale's (:func:`.judging.judge_model_folder`); None without either."""
    run = Path(run)
    inputs = read_object(run / MODEL_VERDICTS / "stage.json").get("settings", {}).get("inputs", {})
    named = sorted(k for k in inputs if k.startswith("judge-model/")) if isinstance(inputs, dict) else []
    if named:
        return run / named[0]
    if s is not None and s.get("judge_model") is not None:
        from .judging import judge_model_folder

        return judge_model_folder(run, s)
    return None


def calibration(run: str | Path, s: dict | None = None) -> dict | None:
    """The judge model's ``model/calibration.json`` (:mod:`.judge_calibration`), or None when the run has none."""
    folder = model_judge_folder(run, s)
    if folder is None:
        return None
    from .judge_calibration import FILE

    cal = read_object(folder / "model" / FILE)
    return cal if all(k in cal for k, _ in CALIBRATION_ROWS) else None


def model_judge_form(run: str | Path, s: dict | None = None) -> dict[str, bool]:
    """Whether the run has the judge model's verdicts (``judge-by-model/``), its calibration, and whether that
    calibration is of the model whose verdicts are recorded (the same weights)."""
    j, cal = model_judge(run), calibration(run, s)
    same = bool(j and cal and cal.get("held", {}).get("judge", {}).get("weights_sha256")
                == j.identity().get("weights_sha256"))
    return {"verdicts": j is not None, "calibration": cal is not None, "same model": same}


def no_model_judge_line(run: str | Path, s: dict | None = None) -> str | None:
    """One computed line for a run whose judge model cannot be read beside the rubric (None when it can)."""
    has = model_judge_form(run, s)
    if all(has.values()):
        return None
    if not has["verdicts"]:
        why = (f"no {MODEL_VERDICTS}/ (the judge model's verdicts)"
               + ("" if has["calibration"] else " and no judge-model calibration")
               + ("; its scale has no judge_model section" if s is not None and s.get("judge_model") is None else ""))
        return (f"This run has no model judge: it records {why}, so every verdict on this page is the rubric "
                "judge's.")
    why = ("no calibration of its judge model (judge-model/…/model/calibration.json)" if not has["calibration"] else
           "a calibration of other weights than the judge model whose verdicts it records")
    return (f"This run has the judge model's verdicts ({MODEL_VERDICTS}/) but {why}: the judge model is not "
            "known to judge, its verdicts are not read here, and every verdict on this page is the rubric judge's.")


def _interval(r: dict, lo: str = "low", hi: str = "high") -> str:
    return "" if r.get(lo) is None else f"[{100 * r[lo]:.0f}, {100 * r[hi]:.0f}]"


def calibration_table(cal: dict) -> pd.DataFrame:
    """One row per rate of the calibration (:data:`CALIBRATION_ROWS`): k of n, the rate, its Wilson 95% interval
    and, for the pair rates, the interval of a bootstrap that resamples users."""
    return pd.DataFrame([{"measure": label, "k": cal[m]["k"], "n": cal[m]["n"], "rate": cal[m]["rate"],
                          "95% CI (Wilson)": _interval(cal[m]),
                          "95% CI (users)": _interval(cal[m], "user_low", "user_high")}
                         for m, label in CALIBRATION_ROWS])


def length_table(cal: dict) -> pd.DataFrame:
    """Per bin of the length difference (words of A − words of B) of the calibration's calls: calls, the
    judge model's verdicts, and the share of A among its decisive verdicts beside the ground truth's."""
    rows = []
    for b in cal["length_bins"]:
        lo, hi = (("−∞" if b["lo"] is None else f"{b['lo']:g}".replace("-", "−")),
                  ("∞" if b["hi"] is None else f"{b['hi']:g}".replace("-", "−")))
        v = b["verdicts"]
        rows.append({"words A − B": f"[{lo}, {hi})", "calls": b["calls"],
                     "A / B / tie / unparseable": f"{v['A']} / {v['B']} / {v['tie']} / {v['unparseable']}",
                     "judge: share of A": b["judge_a"]["rate"], "judge n": b["judge_a"]["n"],
                     "truth: share of A": b["truth_a"]["rate"], "truth n": b["truth_a"]["n"]})
    return pd.DataFrame(rows)


def _pct(r: dict) -> str:
    return "n = 0" if r.get("rate") is None else f"{100 * r['rate']:.1f}% {_interval(r)} ({r['k']} of {r['n']})"


def judges(cal: dict, flip_max: float = FLIP_MAX) -> tuple[bool, list[str]]:
    """Whether the judge model judges, by a stated rule on its calibration: its agreement with the ground truth
    lies above the share of true ties (what a judge that always folds to a tie reaches: Wilson lower bound above
    it) and its flip rate is at most ``flip_max`` (Wilson upper bound). Returns (judges, the reasons it fails)."""
    agree, ties, flip = cal["agreement_truth"], cal["true_tie_share"], cal["flip_rate"]
    why = []
    if agree["rate"] is None:
        why.append("no held-out pair has both orders' verdicts parsed")
    elif not agree["low"] > ties["rate"]:
        why.append(f"its agreement with the ground truth, {_pct(agree)}, does not lie above the "
                   f"{100 * ties['rate']:.1f}% of pairs that are true ties (what a judge that always folds to a tie "
                   "reaches)")
    if flip["rate"] is None:
        why.append("its flip rate is not measured (no pair with both orders parsed)")
    elif flip["high"] > flip_max:
        why.append(f"its verdict flips when A and B swap on {_pct(flip)} of pairs, an interval reaching above "
                   f"{100 * flip_max:.0f}%")
    return not why, why


def model_judge_line(cal: dict, flip_max: float = FLIP_MAX, verdicts: bool = True) -> str:
    """The calibration in words and whether the judge model judges (:func:`judges`), every number from ``cal``;
    ``verdicts``: whether the run records the judge model's verdicts (else the line says they are not recorded)."""
    ok, why = judges(cal, flip_max)
    v, r = cal["verdicts"], {m: _pct(cal[m]) for m, _ in CALIBRATION_ROWS}
    head = (f"Calibrated on **{cal['pairs']} held-out pairs** of {cal['users']} {cal['split']} users ({cal['calls']} "
            f"calls, both orders: {v['A']} A, {v['B']} B, {v['tie']} tie, {v['unparseable']} unparseable). "
            f"Agreement with the ground truth {r['agreement_truth']}, with the rubric {r['agreement_rubric']} (the "
            f"rubric's own with the truth: {r['rubric_agreement_truth']}); true ties {r['true_tie_share']}. Position: "
            f"flip rate {r['flip_rate']}; of its decisive calls it picks the answer shown first in {r['first_pick']}. "
            f"Length: it picks the longer answer in {r['longer_pick']} of its decisive calls, the ground truth in "
            f"{r['longer_pick_truth']}. ")
    rule = (f"(rule: the 95% Wilson lower bound of its agreement with the truth above the share of true ties, and "
            f"the Wilson upper bound of its flip rate at most {100 * flip_max:.0f}%)")
    a, rb = cal["agreement_truth"]["rate"], cal["rubric_agreement_truth"]["rate"]
    if a is not None and rb is not None:  # the rule is a floor, not a bar of quality: say how far it is from one
        head += (f"The rule is a floor, not a bar of quality: the judge model disagrees with the ground truth on "
                 f"{100 * (1 - a):.0f}% of these pairs, the rubric on {100 * (1 - rb):.0f}%. ")
    if cal.get("split") == "test":
        head += ("Its held-out pairs are test users' prompts (answered in the world's reference styles, not by the "
                 "heads): the rule's thresholds are fixed in the code, not tuned on them, but the calibration and "
                 "the page's comparisons share those users. ")
    if not verdicts:
        return head + (f"**The judge model {'judges' if ok else 'does not judge'}** {rule}"
                       + ("" if ok else ": " + "; ".join(why)) + ". This run does not record its verdicts on the "
                       "page's comparisons, so nothing below is judged by it.")
    if ok:
        return head + (f"**The judge model judges** {rule}: its verdicts are shown beside the rubric's below; the "
                       "page's conclusions (section 7b) are the rubric's, and the table shows where the two judges' "
                       "verdicts agree.")
    return head + (f"**The judge model does not judge** {rule}: " + "; ".join(why) + ". Its verdicts are shown "
                   "beside the rubric's below but not used for any conclusion.")
