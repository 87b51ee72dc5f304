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
- Seeds (issue 23, item 4; a run of a scale with ``seeds``, every seed on the same test questions):
  :func:`recorded_seeds` reads every seed, :func:`seed_family` gives each seed's own McNemar family (as above) and
  the family's verdicts across the seeds (:class:`SeedVerdict`): per question each system's mean correctness over
  the seeds, the exact sign-flip test of the paired per-question differences (:func:`.analysis.signflip_test`; with
  one seed it is the exact McNemar test, so nothing changes in kind), Holm across the family, a 95 % crossed
  bootstrap interval over seeds and questions (:func:`.analysis.bootstrap_interval`, inside [−1, 1]), each null's
  MDE (:func:`.analysis.paired_mde`: Connor's formula with ψ = the mean squared per-question difference), whether
  the seeds agree in sign and how many reject alone, and which systems' outcomes are identical in every seed
  (computed: greedy systems on the shared models have no seed variance, and are not averaged as if they had).
  :func:`verdicts_of` / :func:`finding_of` take a run of either layout: unseeded, exactly the family above.
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
# scale -> the recorded run whose seeds sized its test set (the scale's header states the plan; a test recomputes it)
POWER_PILOTS = {"h200-ordered-v2": "data/runs/collab-h200-ordered-v2"}
PLANNED = ("h200-ordered", "h200-ordered-v2")  # the ordered pool's scales; their test size is shown beside the need
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
    seed: int | None = None  # the seed whose records these are (None: an unseeded run)

    def stage(self, name: str) -> Path:
        """The folder of this record's ``pd``, ``rl`` or ``eval`` stage (``seed-<k>/<name>`` in a seeded run);
        ``models`` is the run's own."""
        from .pipeline import PER_SEED

        return self.run_dir / (f"seed-{self.seed}/{name}" if self.seed is not None and name in PER_SEED else name)


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


def recorded(run_dir: str | Path, models_dir: str | Path, seed: int | None = None) -> Recorded:
    """A run's records and scores as the chapter reads them (turns charged by the pipeline's wiring): an unseeded
    run's ``eval/``, or with ``seed`` one seed's ``seed-<k>/eval`` of a seeded run (:func:`recorded_seeds`: all)."""
    run_dir = Path(run_dir)
    seeds = A.seed_evals(run_dir)
    if seed is None and None not in seeds:
        raise ValueError(f"{run_dir}: a seeded run (seeds {', '.join(map(str, seeds))}: seed-<k>/eval); read one "
                         "seed with recorded(..., seed=k), or every seed with recorded_seeds")
    if seed not in seeds:
        raise ValueError(f"{run_dir}: no seed {seed} (seeds: {', '.join(map(str, seeds))})")
    base = run_dir if seed is None else run_dir / f"seed-{seed}"
    runs = A.load(seeds[seed])
    systems = {k: v for k, v in {**runs, **A.derived_systems(runs)}.items() if not k.startswith("sample-")}
    weights = A.cost_weights(models_dir)
    card = base / "pd" / "small" / "card.json"
    pd_full = card.exists() and json.loads(card.read_text()).get("mode", "lora") == "full"
    roles = A.role_models(pd_full, base / "pd")
    sc = A.scores(systems, weights, models=roles)
    projected = {name: A.score(runs[POOL], weights, how, roles[POOL]).set_index("id")
                 for how, name in PROJECTED.items()} if POOL in runs else {}
    ordering, checked_on = ordering_of(run_dir, sc)
    return Recorded(run_dir, runs, systems, weights, roles, pd_full, sc, projected, ordering, checked_on, seed)


def recorded_seeds(run_dir: str | Path, models_dir: str | Path) -> dict[int | None, Recorded]:
    """Every seed's :class:`Recorded`, in seed order (``{None: …}`` for an unseeded run). A seed whose eval stage
    has not run is refused in one line: the chapter reads complete seeds only."""
    seeds = A.seed_evals(run_dir)
    missing = [k for k, d in seeds.items() if not (d / "manifest.json").exists()]
    if missing:
        raise ValueError(f"{run_dir}: no eval records yet for seed(s) {', '.join(map(str, missing))}")
    return {k: recorded(run_dir, models_dir, k) for k in seeds}


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
    mde_holm: float = NAN  # what the pilot's own n detects at α/m

    def sentence(self) -> str:
        v, at = self.pilot, f"{100 * self.power:.0f} % power"
        seeded = isinstance(v, SeedVerdict)
        s = (f"From this run as a pilot (`{v.a}` against `{v.b}`: {v.a_only + v.b_only} of {v.n} pairs "
             f"discordant, ψ = {v.discordance:.4f}), " if not seeded else
             f"From this run's {len(v.seeds)} seeds as a pilot (`{v.a}` against `{v.b}`: {v.a_only + v.b_only} of "
             f"{v.n} questions differ on the mean over seeds, mean squared difference ψ = {v.discordance:.4f}), ")
        if self.reason:
            return s + self.reason
        s += (f"McNemar's test (Connor 1987) needs **{self.n_alpha}** paired test questions to detect a " if not seeded
              else f"the sign-flip test over the seeds' mean per-question differences (Connor's 1987 formula with "
                   f"that ψ) needs **{self.n_alpha}** test questions, each run in {len(v.seeds)} seeds, to detect a ")
        s += (f"{100 * self.effect:.0f}-point accuracy difference with {at} at α = {self.alpha:g}, and "
              f"**{self.n_holm}** at α/m = {self.alpha:g}/{self.m} (Holm's strictest step over this chapter's "
              f"family with `{v.a}` against `{v.b}` a member, as it is once tested). This run has **{v.n}**, which "
              f"detects {100 * self.mde_alpha:.1f} points at α = {self.alpha:g}"
              + (f" and {100 * self.mde_holm:.1f} at α/m" if self.mde_holm == self.mde_holm else ""))
        for scale, n in self.planned.items():
            s += (f"; the `{scale}` scale plans {n}: " + ("enough at both levels" if n >= self.n_holm else
                  "enough at α, not at α/m" if n >= self.n_alpha else "too few at either level"))
        return s + ". The formula counts questions as independent."


def plan_line(scale: str, pw: Power) -> str:
    """How this run's test size was chosen: from a pilot run (:data:`POWER_PILOTS`) or not at all, and what the run
    detects at α/m now that its own discordance is known (which the plan could only estimate)."""
    pilot = POWER_PILOTS.get(scale)
    if pilot is None:
        return f"The `{scale}` scale's test size was not planned from a pilot."
    met = pw.n_holm is not None and pw.pilot.n >= pw.n_holm
    return (f"The `{scale}` scale's test size was planned before the run, from `{pilot}` as the pilot (the scale's "
            f"header gives the plan: {100 * pw.effect:.0f} points at {100 * pw.power:.0f} % power at α/m). "
            + ("With this run's own ψ the plan holds." if met else
               f"With this run's own ψ, α/m needs {pw.n_holm} questions and the run has {pw.pilot.n}: it detects "
               f"{100 * pw.mde_holm:.1f} points there, not {100 * pw.effect:.0f} (short of the plan at Holm's strictest "
               "step, met at α)."
               if pw.n_alpha is not None and pw.pilot.n >= pw.n_alpha else
               f"With this run's own ψ it detects {100 * pw.mde_holm:.1f} points at α/m: short of the plan."))


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
    if isinstance(fam, SeedFamily):  # across seeds: the sign-flip test's n and MDE (Connor's with ψ = mean dᵢ²)
        mde = A.paired_mde(v.n, psi, alpha, power) if v.n else NAN
        mde_m = A.paired_mde(v.n, psi, alpha / m, power) if v.n else NAN
        if not (v.n and 0 < effect * effect <= psi <= 1):
            why = (f"no sample size follows: the pilot's mean squared per-question difference is below the square of "
                   f"the {100 * effect:.0f}-point difference (which could not then occur); a pilot whose systems "
                   "differ on more questions is needed.")
            return Power(v, effect, power, alpha, m, None, None, mde, planned, why, mde_m)
        return Power(v, effect, power, alpha, m, A.paired_n(effect, psi, alpha, power),
                     A.paired_n(effect, psi, alpha / m, power), mde, planned, mde_holm=mde_m)
    mde = A.mcnemar_mde(v.n, psi, alpha, power) if v.n else NAN
    mde_m = A.mcnemar_mde(v.n, psi, alpha / m, power) if v.n else NAN
    if not (v.n and 0 < effect <= psi <= 1):
        why = (f"no sample size follows: the pilot's discordant share is below the {100 * effect:.0f}-point difference "
               "(which could not then occur); a pilot with more discordant questions is needed.")
        return Power(v, effect, power, alpha, m, None, None, mde, planned, why, mde_m)
    return Power(v, effect, power, alpha, m, A.mcnemar_n(effect, psi, alpha, power),
                 A.mcnemar_n(effect, psi, alpha / m, power), mde, planned, mde_holm=mde_m)


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


def best_single(rec: Recorded, fam: SeedFamily | None = None) -> str:
    """The most accurate of the pool's own sizes alone (``solo-small``, ``solo-mid``, ``solo-big``); with a
    :class:`SeedFamily`, by the mean accuracy over its seeds."""
    if isinstance(fam, SeedFamily):
        return max((k for k in A.SOLO[:-1] if k in fam.accuracy), key=lambda k: np.mean(list(fam.accuracy[k].values())))
    return max((k for k in A.SOLO[:-1] if k in rec.sc), key=lambda k: rec.sc[k].correct.mean())


def finding(rec: Recorded, fam: Family, pw: Power, recs: dict | None = None) -> tuple[str, str]:
    """Part III's findings row (claim, detail): the study's question and what the verdicts say, with their
    conditions — the size ordering, Holm across the family, the power, the seeds. ``fam``: the McNemar
    :class:`Family` of an unseeded run, or a seeded run's :class:`SeedFamily` (its verdicts across the seeds;
    ``rec``: the first seed's records, whose size-ordering check every seed shares when the run recorded it)."""
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
    best = best_single(rec, fam)
    seeded = isinstance(fam, SeedFamily)
    unit = f"test questions, each run in {len(fam.seeds)} seeds," if seeded else "paired test questions"
    need = (f"a {100 * pw.effect:.0f}-point pool-vs-single difference needs {pw.n_alpha} {unit} at "
            f"α = {pw.alpha:g} ({pw.n_holm} at α/m) for {100 * pw.power:.0f} % power; this run has {pw.pilot.n}"
            + ((f", short of the {pw.n_holm} (a null here would not rule out 5 points)" if v.word == "not distinguishable"
                else f", short of the {pw.n_holm} at α/m (it detects {100 * pw.mde_holm:.1f} points there)")
               if pw.n_holm is not None and pw.pilot.n < pw.n_holm else "")
            if pw.reason is None else f"power: {pw.reason}")
    # a single model at least as accurate (Holm) and no dearer in both cost views dominates the pool
    tested = [fam.get(POOL, m) for m in A.SOLO if any({v.a, v.b} == {POOL, m} for v in fam.verdicts)]
    dominated = [w.b for w in tested if w.word == "lower" and w.cost_ratio >= 1 and w.full_cost_ratio >= 1]
    arms = "the pool's agents are fine-tuned (protocol distillation, then RL), the single models are the base models"
    if dominated:
        arms += ("; " + ", ".join(f"`{m}`" for m in dominated) + f" alone is more accurate than `{POOL}` (Holm) and "
                 "no dearer in either cost view")
    if recs and all(POOL in r.runs for r in recs.values()):  # how the pool ran, every seed (``recs``: every seed's records)
        by = A.protocol_by_seed({k: r.runs for k, r in recs.items()}, (POOL,))
        if by["big share"].gt(0).any() and by["mid→big voluntary"].sum() == 0:
            arms += "; `big` speaks only after the scheduler's forced hand-offs, never by `mid`'s choice"
        ends = [A.ender_accuracy(r.runs[POOL], r.runs["solo-mid"]) for r in recs.values() if "solo-mid" in r.runs]
        if ends and all(e["questions"] and e["pool_right"] < e["solo_right"] for e in ends):
            arms += ("; on the questions `mid` ends, the fine-tuned `mid` is right less often than base `mid` alone in "
                     "every seed")
    rl = next((v for v in fam.verdicts + fam.refused if {v.a, v.b} == {POOL, "cl-pd"}), None)
    if rl is not None:  # a family without the ablation (a run without cl-pd) says nothing of RL
        rl = fam.get(POOL, "cl-pd")
        arms += (f"; RL against protocol distillation alone (`{POOL}` against `cl-pd`): **{rl.word}**"
                 + (f" ({100 * (rl.acc_a - rl.acc_b):+.1f} points)" if rl.word != "refused" else "")
                 + "; RL's reward is measured on scripted trace states and scores neither the protocol's validity nor "
                 "its actions")
    if seeded:
        k = len(fam.seeds)
        return claim, (f"{head}. Beside it, `{POOL}` against its most accurate single member `{best}`: "
                       f"{fam.get(POOL, best).sentence()}. {arms[0].upper() + arms[1:]}. "
                       f"Holm across the chapter's {fam.m} exact sign-flip tests of "
                       f"the per-question mean correctness over {k} seeds (each seed's own McNemar family beside); "
                       f"{need.rstrip('.')}; {k} seeds of PD, RL and evaluation ({', '.join(map(str, fam.seeds))}) "
                       "on one model "
                       "pool and one test draw")
    return claim, (f"{head}. Beside it, `{POOL}` against its most accurate single member `{best}`: "
                   f"{fam.get(POOL, best).sentence()}. {arms[0].upper() + arms[1:]}. Holm across the chapter's "
                   f"{fam.m} exact McNemar tests; {need}; "
                   "one seed, one test draw")


def verdicts_of(run_dir: str | Path, models_dir: str | Path):
    """What the chapter and the findings row read from a run of either layout: (the first seed's
    :class:`Recorded`, every seed's, the family). Unseeded: the McNemar :class:`Family` of :func:`chapter_family`,
    exactly as before; seeded: the :class:`SeedFamily` across the seeds (:func:`seed_family`)."""
    recs = recorded_seeds(run_dir, models_dir)
    rec = next(iter(recs.values()))
    return rec, recs, (chapter_family(rec) if None in recs else seed_family(recs))


def finding_of(run_dir: str | Path, models_dir: str | Path) -> tuple[str, str]:
    """Part III's findings row from a run of either layout (:func:`verdicts_of`, :func:`power`, :func:`finding`)."""
    rec, recs, fam = verdicts_of(run_dir, models_dir)
    return finding(rec, fam, power(fam), recs)


# --- issue 23, item 4: the verdicts across the seeds of a seeded run ---

DRAWS = 10_000  # crossed-bootstrap draws of an across-seed interval (seeded: the page reprints the same interval)


@dataclass(frozen=True)
class SeedVerdict:
    """One comparison of the chapter's family across the seeds of a seeded run, on the questions every seed
    evaluated. Per question, each system's mean correctness over the seeds; dᵢ = A's − B's. ``p``: the exact
    sign-flip test of the dᵢ (:func:`.analysis.signflip_test`; with one seed, the exact McNemar test), Holm-adjusted
    across the family; ``lo``/``hi``: the 95 % crossed-bootstrap interval of the difference over seeds and
    questions (:func:`.analysis.bootstrap_interval`); a null's ``mde``: :func:`.analysis.paired_mde` at α/m with
    ψ = mean dᵢ². ``a_only``/``b_only``: questions on which A's mean is above B's / below (with one seed, the
    discordant questions). ``per_seed``: the comparison in each seed's own McNemar family (Holm within the seed);
    ``same_a``/``same_b``: whether A's / B's outcomes are identical in every seed (computed)."""

    a: str
    b: str
    n: int
    seeds: tuple
    a_only: int
    b_only: int
    acc_a: float  # mean over seeds and questions
    acc_b: float
    lo: float
    hi: float
    psi: float  # mean squared per-question difference
    cost_ratio: float
    full_cost_ratio: float
    per_seed: tuple  # (Verdict, …) in seed order
    same_a: bool
    same_b: bool
    word: Word = "refused"
    p: float = NAN
    p_holm: float = NAN
    mde: float = NAN
    m: int = 0
    alpha: float = A.ALPHA
    power: float = POWER
    refused: str | None = None

    diff = Verdict.diff
    level = Verdict.level

    @property
    def discordance(self) -> float:
        """ψ, the mean squared per-question difference (the discordant share with one seed)."""
        return self.psi

    def flipped(self) -> SeedVerdict:
        return replace(self, a=self.b, b=self.a, a_only=self.b_only, b_only=self.a_only, acc_a=self.acc_b,
                       acc_b=self.acc_a, lo=0.0 - self.hi, hi=0.0 - self.lo, cost_ratio=1 / self.cost_ratio,
                       full_cost_ratio=1 / self.full_cost_ratio, per_seed=tuple(v.flipped() for v in self.per_seed),
                       same_a=self.same_b, same_b=self.same_a,
                       word={"higher": "lower", "lower": "higher"}.get(self.word, self.word))

    def mde_text(self) -> str:
        at = f"{100 * self.power:.0f} % power at α/m = {self.alpha:g}/{self.m} = {self.level:.4f}"
        if self.psi == 0:
            return f"no question differs between them in any seed, so no difference is detectable ({at})"
        if np.isnan(self.mde):
            return (f"too few differing questions to detect any difference: even {100 * np.sqrt(self.psi):.1f} points "
                    f"(the most their mean squared difference ψ = {self.psi:.4f} allows) falls short of {at}")
        return f"minimum detectable effect {100 * self.mde:.1f} points ({at}; sign-flip test, ψ = {self.psi:.4f})"

    def agreement(self) -> str:
        """Whether every seed's own difference has one sign, and how many seeds reject alone (their own Holm)."""
        k, signs = len(self.per_seed), [np.sign(v.diff) for v in self.per_seed]
        each = ", ".join(f"{100 * v.diff:+.1f}" for v in self.per_seed)
        alone = sum(v.word in ("higher", "lower") for v in self.per_seed)
        if all(s > 0 for s in signs) or all(s < 0 for s in signs):
            head = f"every seed agrees in sign (`{self.a}` {'ahead' if signs[0] > 0 else 'behind'} in all {k})"
        elif all(s == 0 for s in signs):
            head = f"no seed shows a difference (all {k} at 0)"
        else:
            head = (f"the seeds disagree in sign ({sum(s > 0 for s in signs)} ahead, {sum(s < 0 for s in signs)} "
                    f"behind, {sum(s == 0 for s in signs)} level, of {k})")
        tested = all(v.word != "refused" for v in self.per_seed)
        return (f"{head}; per-seed differences {each} points"
                + (f"; significant alone (each seed's Holm-corrected McNemar family) in {alone} of {k}" if tested
                   else ""))

    def constancy(self) -> str:
        same = [s for s, x in ((self.a, self.same_a), (self.b, self.same_b)) if x]
        if not same:
            return ""
        return (" and ".join(f"`{s}`" for s in same) + (" has" if len(same) == 1 else " have")
                + f" the same outcome on every question in all {len(self.seeds)} seeds (no seed variance: "
                + ("its" if len(same) == 1 else "their") + " accuracy is one number, not an average over seeds)")

    def sentence(self) -> str:
        s = (f"{100 * self.diff:+.1f} points over {len(self.seeds)} seeds (95 % crossed-bootstrap interval "
             f"[{100 * self.lo:+.1f}, {100 * self.hi:+.1f}]) at {self.cost_ratio:.2f}× the cost by the study's formula "
             f"({self.full_cost_ratio:.2f}× with prompt tokens); questions `{self.a}` ahead / behind on the mean over "
             f"seeds {self.a_only} / {self.b_only}")
        if self.word == "refused":
            s += f": **refused** ({self.refused})"
        else:
            s += (f", exact sign-flip {A.p_text(self.p)}, Holm-adjusted {A.p_text(self.p_holm)} (family of {self.m}, "
                  f"α = {self.alpha:g}): **{self.word}**"
                  + (f" — {self.mde_text()}" if self.word == "not distinguishable" else "")
                  + (" — on these seeds' trained pools only: the sign-flip test takes questions as its units, and the "
                     "interval over seeds and questions includes 0, so the difference is not shown across training "
                     "runs" if self.word in ("higher", "lower") and self.lo <= 0 <= self.hi else ""))
        s += f"; {self.agreement()}"
        c = self.constancy()
        return s + (f"; {c}" if c else "")


@dataclass(frozen=True)
class SeedFamily:
    """The chapter's family across the seeds: the tested :class:`SeedVerdict` s (Holm across them), the refused
    ones, every seed's own McNemar :class:`Family`, and per system whether its outcomes are identical across seeds."""

    verdicts: tuple[SeedVerdict, ...]
    refused: tuple[SeedVerdict, ...]
    per_seed: dict  # seed → Family
    identical: dict  # system → (correctness identical in every seed, answers identical in every seed)
    accuracy: dict  # system → {seed: accuracy}
    alpha: float = A.ALPHA

    @property
    def m(self) -> int:
        return len(self.verdicts)

    @property
    def seeds(self) -> tuple:
        return tuple(self.per_seed)

    get = Family.get
    members = Family.members

    def table(self) -> pd.DataFrame:
        rows = [{"A": v.a, "B": v.b, "seeds": len(v.seeds), "n": v.n, "A ahead": v.a_only, "B ahead": v.b_only,
                 "acc A": v.acc_a, "acc B": v.acc_b, "accuracy A − B": 100 * v.diff, "95% low": 100 * v.lo,
                 "95% high": 100 * v.hi, "p": v.p, "p (Holm)": v.p_holm, "verdict": v.word,
                 "MDE at α/m (points)": 100 * v.mde,
                 "seeds A ahead": sum(s.diff > 0 for s in v.per_seed),
                 "seeds B ahead": sum(s.diff < 0 for s in v.per_seed),
                 "seeds significant alone": sum(s.word in ("higher", "lower") for s in v.per_seed),
                 "cost ratio A/B": v.cost_ratio, "full cost ratio A/B": v.full_cost_ratio}
                for v in self.verdicts + self.refused]
        return pd.DataFrame(rows)

    def seed_tables(self) -> pd.DataFrame:
        """Every seed's own McNemar family table (:meth:`Family.table`), one block per seed."""
        return pd.concat([f.table().assign(seed=k) for k, f in self.per_seed.items()], ignore_index=True)

    def systems(self) -> pd.DataFrame:
        """Per system: accuracy in each seed, its spread, and whether its outcomes and answers are the same in every
        seed."""
        rows = []
        for s, acc in self.accuracy.items():
            vals = list(acc.values())
            rows.append({"system": s, **{f"seed {k}": a for k, a in acc.items()}, "mean": float(np.mean(vals)),
                         "range (points)": 100 * (max(vals) - min(vals)),
                         "outcomes identical in every seed": self.identical[s][0],
                         "answers identical in every seed": self.identical[s][1]})
        return pd.DataFrame(rows)

    def identical_line(self) -> str:
        same = [s for s, (c, _) in self.identical.items() if c]
        varies = [s for s, (c, _) in self.identical.items() if not c]
        k = len(self.per_seed)
        return ((f"Identical outcome on every question in all {k} seeds (computed from the records, so no seed "
                 "variance to average): " + ", ".join(f"`{s}`" for s in same) if same else
                 f"No system has the same outcomes in all {k} seeds")
                + (". Outcomes that vary between seeds: " + ", ".join(f"`{s}`" for s in varies) if varies else "")
                + ".")


def _table(recs: dict, system: str) -> list[pd.DataFrame]:
    """One system's per-seed score frames (CL ``cl`` projections included) in seed order."""
    return [{**r.sc, **r.projected}[system] for r in recs.values()]


def seed_family(recs: dict, alpha: float = A.ALPHA, power: float = POWER, draws: int = DRAWS) -> SeedFamily:
    """The chapter's family (:func:`chapter_pairs`) across ``recs`` (:func:`recorded_seeds`), with each seed's own
    family (:func:`chapter_family`). ``cl`` against ``solo-large`` is refused unless the size ordering holds in
    every seed (with ``models/validation.json``: one check for all, the models are shared)."""
    seeds = tuple(recs)
    per_seed = {k: chapter_family(r, alpha, power) for k, r in recs.items()}
    first = recs[seeds[0]]
    names = [s for s in {**first.sc, **first.projected} if all(s in {**r.sc, **r.projected} for r in recs.values())]
    frames = {s: _table(recs, s) for s in names}
    identical = {s: (A.identical_across_seeds(f), A.identical_across_seeds(f, "answer")
                     if all("answer" in x for x in f) else None) for s, f in frames.items()}
    accuracy = {s: {k: float(f.correct.mean()) for k, f in zip(seeds, fs)} for s, fs in frames.items()
                if s not in first.projected}
    refused = {}
    failing = [r for r in recs.values() if not r.ordering[0]]
    if POOL in names and SINGLE in names and failing:
        refused[(POOL, SINGLE)] = f"the size ordering fails {failing[0].checked_on}" + (
            f" in seed {failing[0].seed}" if len(seeds) > 1 and len(failing) < len(seeds) else "")
    systems = [s for s in first.systems if s in names]
    pairs = chapter_pairs(systems, [p for p in first.projected if p in names])

    def one(a, b, **extra):
        fa, fb = frames[a], frames[b]
        ids = fa[0].index
        for f in fa + fb:
            ids = ids.intersection(f.index)
        xa = np.array([f.loc[ids].correct.to_numpy(float) for f in fa])
        xb = np.array([f.loc[ids].correct.to_numpy(float) for f in fb])
        d = xa.mean(0) - xb.mean(0)
        lo, hi = A.bootstrap_interval(xa, xb, draws=draws)
        cost = lambda fs, c: np.mean([f.loc[ids][c].mean() for f in fs])  # noqa: E731
        return dict(a=a, b=b, n=len(ids), seeds=seeds, a_only=int((d > 0).sum()), b_only=int((d < 0).sum()),
                    acc_a=float(xa.mean()), acc_b=float(xb.mean()), lo=lo, hi=hi, psi=float(np.mean(d * d)),
                    cost_ratio=cost(fa, "weighted_tokens") / cost(fb, "weighted_tokens"),
                    full_cost_ratio=cost(fa, "full_weighted_tokens") / cost(fb, "full_weighted_tokens"),
                    per_seed=tuple(f.get(a, b) for f in per_seed.values()),
                    same_a=identical[a][0], same_b=identical[b][0], **extra), d

    tested = [one(a, b) for a, b in pairs if (a, b) not in refused]
    ps = [A.signflip_test(d, len(seeds)) for _, d in tested]
    adj, rejected = A.holm(ps, alpha) if tested else (np.array([]), np.array([], bool))
    m, out = len(tested), []
    for (t, d), p, p_holm, r in zip(tested, ps, adj, rejected):
        word = ("higher" if d.mean() > 0 else "lower") if r else "not distinguishable"
        mde = A.paired_mde(t["n"], t["psi"], alpha / m, power) if word == "not distinguishable" else NAN
        out.append(SeedVerdict(**t, word=word, p=p, p_holm=float(p_holm), mde=mde, m=m, alpha=alpha, power=power))
    gone = tuple(SeedVerdict(**one(a, b)[0], m=m, alpha=alpha, power=power, refused=why)
                 for (a, b), why in refused.items())
    return SeedFamily(tuple(out), gone, per_seed, identical, accuracy, alpha)


def seeds_line(recs: dict) -> str:
    """How many seeds the records hold, read from them: each seed's eval record's seed and the test questions."""
    seeds = [k for k in recs if k is not None]
    if not seeds:
        return "One run, unseeded (the recorded layout): one seed of PD, RL and evaluation."
    n = {k: len(next(iter(r.sc.values()))) for k, r in recs.items()}
    return (f"**{len(seeds)} seeds** of PD, RL and evaluation in the records (`seed-<k>/`: "
            + ", ".join(map(str, seeds)) + f"), each evaluated on the same "
            + (f"{n[seeds[0]]} test questions" if len(set(n.values())) == 1 else
               "test set (questions per seed: " + ", ".join(f"{k}: {v}" for k, v in n.items()) + ")")
            + "; the models are trained once and shared.")
