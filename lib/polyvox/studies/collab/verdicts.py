"""Part III's verdicts, typed (issue 23): one set of functions that the chapter (``notebooks/collab/miniature``)
and the findings summary (:mod:`polyvox.book.findings`) both call, so the page and the summary cannot disagree.

- :func:`recorded`: a run's records, per-question scores under both cost views, ``cl`` scored by its first
  tentative and by its confirmed answers, and the size-ordering check (:func:`ordering_of`).
- :func:`chapter_family`: every paired comparison the chapter states, as one family (:func:`chapter_pairs`):
  ``cl`` against each other system, ``solo-large`` against each smaller single model, and ``cl``'s first tentative
  answers against its confirmed ones. Each is an exact McNemar test (:func:`.analysis.paired`), Holm-adjusted
  across the family (:func:`.analysis.holm`); a :class:`Verdict`'s word comes from its adjusted p, and a null
  carries its minimum detectable effect at α/m (:func:`.analysis.mcnemar_mde`): p < α/m is rejected by Holm
  whatever the other tests give. ``cl`` against ``solo-large`` is refused, and is no member of the family,
  unless the size ordering holds (:func:`.analysis.pool_vs_single`): a refused comparison is not tested.
- :func:`power`: paired test questions needed to detect an :data:`EFFECT` difference between the pool and the
  single large model with :data:`POWER`, discordance from the recorded run as a pilot (:func:`.analysis.mcnemar_n`,
  Connor 1987), at α and at α/m, beside the run's own test size and the planned scales' (:data:`PLANNED`).
- :func:`cost_views`: both cost views per system (:mod:`.cost`: the study's formula, and with prompt tokens)
  and each view's Pareto frontier.
- :func:`finding`: Part III's findings row, its words computed from the verdicts with their conditions.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from . import analysis as A
from . import cost as costs

EFFECT = 0.05  # the pool-vs-single accuracy difference a powered run must detect (issue 23: 5 points)
POWER = 0.8
POOL, SINGLE = "cl", "solo-large"
PROJECTED = {"first": "cl (first tentative answer)", "final": "cl (confirmed answer)"}  # one test of the family
VIEW_WORDS = {"study": "by the study's formula", "full": "with prompt tokens"}  # :data:`.cost.VIEWS` in prose
PLANNED = ("h200-ordered",)  # scales configured for the powered run; their test size is shown beside the need
Word = Literal["higher", "lower", "not distinguishable", "refused"]
NAN = float("nan")


@dataclass(frozen=True)
class Verdict:
    """One paired comparison of the family: A against B on their shared questions. ``word`` is ``higher`` /
    ``lower`` (A's accuracy, rejected by Holm), ``not distinguishable`` or ``refused`` (not tested: ``refused``
    says why; the counts are shown, no p). ``mde``: for a null, the smallest |difference| its n and discordance
    detect with ``power`` at α/m (nan where none can)."""

    a: str
    b: str
    n: int
    a_only: int
    b_only: int
    acc_a: float
    acc_b: float
    cost_ratio: float  # mean cost A / B by the study's formula
    full_cost_ratio: float  # the same with prompt tokens
    word: Word = "refused"
    p: float = NAN  # exact McNemar, before correction
    p_holm: float = NAN
    mde: float = NAN
    m: int = 0  # the family's size
    alpha: float = A.ALPHA
    power: float = POWER
    refused: str | None = None

    @property
    def diff(self) -> float:
        return self.acc_a - self.acc_b

    @property
    def discordance(self) -> float:
        return (self.a_only + self.b_only) / self.n if self.n else NAN

    @property
    def level(self) -> float:
        """α/m: the level of the family's minimum detectable effects."""
        return self.alpha / self.m if self.m else self.alpha

    def flipped(self) -> Verdict:
        """B against A: the same test read the other way."""
        return replace(self, a=self.b, b=self.a, a_only=self.b_only, b_only=self.a_only, acc_a=self.acc_b,
                       acc_b=self.acc_a, cost_ratio=1 / self.cost_ratio, full_cost_ratio=1 / self.full_cost_ratio,
                       word={"higher": "lower", "lower": "higher"}.get(self.word, self.word))

    def mde_text(self) -> str:
        at = f"{100 * self.power:.0f} % power at α/m = {self.alpha:g}/{self.m} = {self.level:.4f}"
        if self.a_only + self.b_only == 0:
            return f"no discordant questions, so no difference is detectable ({at})"
        if np.isnan(self.mde):
            return (f"too few discordant questions to detect any difference: even {100 * self.discordance:.1f} points "
                    f"(all {self.a_only + self.b_only} discordant questions one way, the most this discordance allows) "
                    f"falls short of {at}")
        return f"minimum detectable effect {100 * self.mde:.1f} points ({at})"

    def sentence(self) -> str:
        """Difference, both cost ratios, discordant questions, p before and after Holm, the word, a null's MDE."""
        s = (f"{100 * self.diff:+.1f} points at {self.cost_ratio:.2f}× the cost by the study's formula "
             f"({self.full_cost_ratio:.2f}× with prompt tokens); discordant questions {self.a_only} / {self.b_only}")
        if self.word == "refused":
            return s + f": **refused** ({self.refused})"
        s += (f", exact McNemar {A.p_text(self.p)}, Holm-adjusted {A.p_text(self.p_holm)} (family of {self.m}, "
              f"α = {self.alpha:g}): **{self.word}**")
        return s + (f" — {self.mde_text()}" if self.word == "not distinguishable" else "")


@dataclass(frozen=True)
class Family:
    """The chapter's McNemar family: the tested verdicts (Holm across them) and the refused comparisons."""

    verdicts: tuple[Verdict, ...]
    refused: tuple[Verdict, ...] = ()
    alpha: float = A.ALPHA

    @property
    def m(self) -> int:
        return len(self.verdicts)

    def get(self, a: str, b: str) -> Verdict:
        for v in self.verdicts + self.refused:
            if (v.a, v.b) == (a, b):
                return v
            if (v.b, v.a) == (a, b):
                return v.flipped()
        raise KeyError(f"{a} against {b} is not in the chapter's family")

    def members(self) -> str:
        """Which comparisons make the family, grouped by A, with the refused ones named."""
        groups: dict[str, list[str]] = {}
        for v in self.verdicts:
            groups.setdefault(v.a, []).append(v.b)
        text = f"{self.m} tests: " + "; ".join(f"`{a}` against " + ", ".join(f"`{b}`" for b in bs)
                                               for a, bs in groups.items())
        if self.refused:
            text += ". Refused, so not tested and no member: " + ", ".join(f"`{v.a}` against `{v.b}`"
                                                                           for v in self.refused)
        return text

    def table(self) -> pd.DataFrame:
        rows = [{"A": v.a, "B": v.b, "n": v.n, "only A right": v.a_only, "only B right": v.b_only, "acc A": v.acc_a,
                 "acc B": v.acc_b, "accuracy A − B": 100 * v.diff, "p": v.p, "p (Holm)": v.p_holm, "verdict": v.word,
                 "MDE at α/m (points)": 100 * v.mde, "cost ratio A/B": v.cost_ratio,
                 "full cost ratio A/B": v.full_cost_ratio}
                for v in self.verdicts + self.refused]
        return pd.DataFrame(rows)


@dataclass(frozen=True)
class Recorded:
    run_dir: Path
    runs: dict
    systems: dict
    weights: dict
    roles: dict
    pd_full: bool
    sc: dict  # system → per-question scores (CL systems under the main projection), indexed by id
    projected: dict  # PROJECTED's names → cl's per-question scores under that projection
    ordering: tuple[bool, str]
    checked_on: str


def ordering_of(run_dir: str | Path, sc: dict) -> tuple[tuple[bool, str], str]:
    """The size-ordering check: the models stage's validation check when the run recorded one
    (``models/validation.json``), else :func:`.analysis.ordering_check` on the test set's solo records.
    Returns ((holds, line), where it was checked)."""
    val_file = Path(run_dir) / "models" / "validation.json"
    if val_file.exists():
        val = json.loads(val_file.read_text())
        return (bool(val["ordering_ok"]), val["ordering"]), \
            f"on the validation split ({val['questions']} questions, `models/{val_file.name}`)"
    n = len(sc["solo-small"]) if "solo-small" in sc else 0
    return A.ordering_check({k: sc[k] for k in A.SOLO if k in sc}), \
        f"on the {n} test questions' solo records (this run recorded no validation check)"


def recorded(run_dir: str | Path, models_dir: str | Path) -> Recorded:
    """A run's records and scores as the chapter reads them (turns charged by the pipeline's wiring)."""
    run_dir = Path(run_dir)
    seeds = A.seed_evals(run_dir)
    if None not in seeds:  # the chapter reads one unseeded run; reading every seed comes with the seeded records
        raise ValueError(f"{run_dir}: a seeded run (seeds {', '.join(map(str, seeds))}: seed-<k>/eval); the chapter "
                         "reads an unseeded run's eval/ — list the seeds with analysis.seed_evals")
    runs = A.load(run_dir / "eval")
    systems = {k: v for k, v in {**runs, **A.derived_systems(runs)}.items() if not k.startswith("sample-")}
    weights = A.cost_weights(models_dir)
    card = run_dir / "pd" / "small" / "card.json"
    pd_full = card.exists() and json.loads(card.read_text()).get("mode", "lora") == "full"
    roles = A.role_models(pd_full, run_dir / "pd")
    sc = A.scores(systems, weights, models=roles)
    projected = {name: A.score(runs[POOL], weights, how, roles[POOL]).set_index("id")
                 for how, name in PROJECTED.items()} if POOL in runs else {}
    ordering, checked_on = ordering_of(run_dir, sc)
    return Recorded(run_dir, runs, systems, weights, roles, pd_full, sc, projected, ordering, checked_on)


def chapter_pairs(systems, projected=PROJECTED.values()) -> list[tuple[str, str]]:
    """The comparisons the chapter states, in its order: ``cl`` against every other system, ``solo-large``
    against each smaller single model, and ``cl``'s first tentative against its confirmed answers."""
    systems = list(systems)
    pairs = [(POOL, b) for b in systems if b != POOL] if POOL in systems else []
    pairs += [(SINGLE, m) for m in A.SOLO[:-1] if m in systems] if SINGLE in systems else []
    return pairs + ([tuple(projected)] if len(list(projected)) == 2 else [])


def _pair(sc: dict, a: str, b: str, alpha: float) -> dict:
    t = A.paired(sc, a, b, alpha)
    ids = sc[a].index.intersection(sc[b].index)
    full = sc[a].loc[ids].full_weighted_tokens.mean() / sc[b].loc[ids].full_weighted_tokens.mean()
    return {"a": a, "b": b, "n": t["n"], "a_only": t["a_only"], "b_only": t["b_only"], "acc_a": t["acc A"],
            "acc_b": t["acc B"], "cost_ratio": t["cost ratio A/B"], "full_cost_ratio": full, "p": t["p"]}


def family(sc: dict, pairs, refused: dict | None = None, alpha: float = A.ALPHA, power: float = POWER) -> Family:
    """``pairs`` (A, B) of ``sc``'s frames as one Holm family at ``alpha``; ``refused``: (A, B) → why it is not
    tested (shown with its counts, outside the family)."""
    refused = refused or {}
    tested = [_pair(sc, a, b, alpha) for a, b in pairs if (a, b) not in refused]
    adj, rejected = A.holm([t["p"] for t in tested], alpha) if tested else (np.array([]), np.array([], bool))
    m, out = len(tested), []
    for t, p_holm, r in zip(tested, adj, rejected):
        word = ("higher" if t["a_only"] > t["b_only"] else "lower") if r else "not distinguishable"
        mde = A.mcnemar_mde(t["n"], (t["a_only"] + t["b_only"]) / t["n"], alpha / m, power) \
            if word == "not distinguishable" and t["n"] else NAN
        out.append(Verdict(**t, word=word, p_holm=float(p_holm), mde=mde, m=m, alpha=alpha, power=power))
    gone = tuple(Verdict(**{**_pair(sc, a, b, alpha), "p": NAN}, m=m, alpha=alpha, power=power, refused=why)
                 for (a, b), why in refused.items() if a in sc and b in sc)
    return Family(tuple(out), gone, alpha)


def chapter_family(rec: Recorded, alpha: float = A.ALPHA, power: float = POWER) -> Family:
    """The chapter's family (:func:`chapter_pairs`), ``cl`` against ``solo-large`` refused unless the size
    ordering holds (:func:`.analysis.pool_vs_single`'s rule)."""
    sc = {**rec.sc, **rec.projected}
    refused = {}
    if POOL in sc and SINGLE in sc:
        why = A.pool_vs_single(sc, rec.ordering, POOL, SINGLE, alpha)["refused"]
        if why is not None:
            refused[(POOL, SINGLE)] = f"the size ordering fails {rec.checked_on}"
    return family(sc, chapter_pairs(rec.systems, rec.projected), refused, alpha, power)


@dataclass(frozen=True)
class Power:
    """Test questions needed for the pool-vs-single difference ``effect`` with ``power`` (pilot: the recorded run)."""

    pilot: Verdict
    effect: float
    power: float
    alpha: float
    m: int
    n_alpha: int | None  # needed at α
    n_holm: int | None  # needed at α/m
    mde_alpha: float  # what the pilot's own n detects at α
    planned: dict  # scale → its test questions (configs)
    reason: str | None = None  # why no n (the pilot's discordance below the effect)

    def sentence(self) -> str:
        v, at = self.pilot, f"{100 * self.power:.0f} % power"
        s = (f"From this run as a pilot (`{v.a}` against `{v.b}`: {v.a_only + v.b_only} of {v.n} pairs "
             f"discordant, ψ = {v.discordance:.4f}), ")
        if self.reason:
            return s + self.reason
        s += (f"McNemar's test (Connor 1987) needs **{self.n_alpha}** paired test questions to detect a "
              f"{100 * self.effect:.0f}-point accuracy difference with {at} at α = {self.alpha:g}, and "
              f"**{self.n_holm}** at α/m = {self.alpha:g}/{self.m} (Holm's strictest step over this chapter's "
              f"family with `{v.a}` against `{v.b}` a member, as it is once tested). This run has **{v.n}**, which "
              f"detects {100 * self.mde_alpha:.1f} points at "
              f"α = {self.alpha:g}")
        for scale, n in self.planned.items():
            s += (f"; the `{scale}` scale plans {n}: " + ("enough at both levels" if n >= self.n_holm else
                  "enough at α, not at α/m" if n >= self.n_alpha else "too few at either level"))
        return s + ". The formula counts questions as independent."


def planned_sizes(scales=PLANNED) -> dict[str, int]:
    """Test questions of each configured scale (``configs/collab/<scale>.yaml``), counted from the set it draws
    (:func:`.pipeline.n_test`: a scale that splits by the underlying problem takes fewer than its caps)."""
    from .pipeline import load_scale, n_test

    out = {}
    for name in scales:
        try:
            s = load_scale(name)
        except (FileNotFoundError, ValueError):
            continue
        out[name] = n_test(s)
    return out


def power(fam: Family, effect: float = EFFECT, power: float = POWER, scales=PLANNED) -> Power:
    """:class:`Power` for ``cl`` against ``solo-large`` from ``fam``'s counts (refused or not: a pilot's
    discordance is a count, not a verdict); α/m over the family that test belongs to (a refused one joins it)."""
    v, alpha = fam.get(POOL, SINGLE), fam.alpha
    m = max(fam.m + any((r.a, r.b) == (POOL, SINGLE) for r in fam.refused), 1)  # the family once it is tested
    psi, planned = v.discordance, planned_sizes(scales)
    mde = A.mcnemar_mde(v.n, psi, alpha, power) if v.n else NAN
    if not (v.n and 0 < effect <= psi <= 1):
        why = (f"no sample size follows: the pilot's discordant share is below the {100 * effect:.0f}-point difference "
               "(which could not then occur); a pilot with more discordant questions is needed.")
        return Power(v, effect, power, alpha, m, None, None, mde, planned, why)
    return Power(v, effect, power, alpha, m, A.mcnemar_n(effect, psi, alpha, power),
                 A.mcnemar_n(effect, psi, alpha / m, power), mde, planned)


def cost_views(allq: pd.DataFrame) -> pd.DataFrame:
    """Per system (rows of :func:`.analysis.summary` for one task): accuracy, both cost views' mean weighted
    tokens per question, their ratio, and whether the system is on each view's Pareto frontier."""
    t = allq.reset_index(drop=True)
    out = t[["system", "n", "accuracy", "lo", "hi"]].assign(
        **{view: t[costs.cost_column(view)].to_numpy() for view in costs.VIEWS})
    out["full / study"] = out.full / out.study
    for view in costs.VIEWS:
        out[f"frontier ({view})"] = costs.pareto(t.assign(weighted_tokens=t[costs.cost_column(view)])).to_numpy()
    return out


def best_single(rec: Recorded) -> str:
    """The most accurate of the pool's own sizes alone (``solo-small``, ``solo-mid``, ``solo-big``)."""
    return max((k for k in A.SOLO[:-1] if k in rec.sc), key=lambda k: rec.sc[k].correct.mean())


def finding(rec: Recorded, fam: Family, pw: Power) -> tuple[str, str]:
    """Part III's findings row (claim, detail): the study's question and what the verdicts say, with their
    conditions — the size ordering, Holm across the family, the power, the seed."""
    claim = ("Does a pool of sliced models beat one larger model at lower cost? (the study's question, asked of "
             "the miniature)")
    v = fam.get(POOL, SINGLE)
    if v.word == "refused":
        head = (f"**refused**: the size-ordering check fails {rec.checked_on} — {rec.ordering[1]}; without a single "
                f"model stronger than the pool's members, `{POOL}` against `{SINGLE}` is not tested")
    else:
        says = {"higher": "the pool scores higher", "lower": "the pool scores lower",
                "not distinguishable": "no difference distinguishable"}[v.word]
        head = f"**{says}** (size ordering holds {rec.checked_on}): `{POOL}` against `{SINGLE}`: {v.sentence()}"
    best = best_single(rec)
    need = (f"a {100 * pw.effect:.0f}-point pool-vs-single difference needs {pw.n_alpha} paired test questions at "
            f"α = {pw.alpha:g} ({pw.n_holm} at α/m) for {100 * pw.power:.0f} % power; this run has {pw.pilot.n}"
            if pw.reason is None else f"power: {pw.reason}")
    return claim, (f"{head}. Beside it, `{POOL}` against its most accurate single member `{best}`: "
                   f"{fam.get(POOL, best).sentence()}. Holm across the chapter's {fam.m} exact McNemar tests; {need}; "
                   "one seed, one test draw")
