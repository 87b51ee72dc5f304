"""Part III's sentence helpers (polyvox.studies.collab.analysis) and the findings summary's overview."""
import pandas as pd
import pytest

from polyvox.studies.collab import analysis as A


def test_p_text_never_prints_zero():
    assert A.p_text(0.0) == "p < 0.001" and A.p_text(0.0004) == "p < 0.001" and A.p_text(0.0123) == "p = 0.012"


def test_paired_sentence():
    sc = {"a": pd.DataFrame({"correct": [True, True, False, True], "weighted_tokens": [2.0] * 4}, index=list("wxyz")),
          "b": pd.DataFrame({"correct": [False, True, False, False], "weighted_tokens": [1.0] * 4}, index=list("wxyz"))}
    s = A.paired_sentence(sc, "a", "b")
    assert s.startswith("+50.0 points at 2.00× the cost; discordant questions 2 / 0, exact McNemar p = 0.500")


@pytest.mark.slow  # reads the session's book build (conftest.built_book)
def test_the_findings_overview_names_the_studies_as_published_with_numbers_from_records(built_book):
    """The summary the session's book build computed from every part's records (``book.build.write_findings``:
    ``findings_markdown(findings(root))`` on the build's copy of the records), read rather than computed a second
    time (82 s on this machine, 63 s of it Part IV's tests and prompt check); computed here only when that build
    wrote none (a chapter failed)."""
    from polyvox.book import findings as F
    from polyvox.book.build import FINDINGS

    dest, _, _ = built_book
    text = (dest / FINDINGS).read_text() if (dest / FINDINGS).exists() else F.findings_markdown(F.findings(dest))
    assert text.startswith("The book studies three published systems:") and "## What was found" in text
    for link in ("https://github.com/scasella/multi-model", "https://huggingface.co/datasets/andre930/persona-basis-run21-test-eval",
                 "https://huggingface.co/SJTUFreshman/collaborativelearning", "https://github.com/SJTUFreshman/tmp_x7k9p4r2d8m5c"):
        assert link in text, link
    from polyvox.studies.world import analysis as W

    n_seeds = len(W.seeds(dest / "data/runs/world"))  # the shipped world run's seeds (the build's copy), from its records
    assert "rank-32 LoRA" in text and "4.9-million-parameter" in text and f"{n_seeds} RL seeds" in text
    assert "seed 00" not in text.lower() and "../shared" not in text and "t-interval" not in text
    # no finding 'not computed': the closing line counts every status that occurs ("In all: 7 reproduced, …")
    [counts] = [line for line in text.splitlines() if line.startswith("In all: ")]
    assert "p = 0.000" not in text and "not computed" not in counts, counts


def test_label_points_keeps_labels_of_clustered_points_apart():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from polyvox.book import plots

    # the collab chart's hard case: two pairs of points almost on top of each other, with error bars
    xs = np.array([11.09, 10.95, 16.25, 17.0, 16.66, 15.0, 2.0, 93.9])
    ys = np.array([0.246, 0.2375, 0.475, 0.467, 0.383, 0.346, 0.508, 0.021])
    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    ax.errorbar(xs, ys, yerr=0.06, fmt="o")
    ax.set_xscale("log")
    names = ["cl", "cl-pd", "vote", "cascade", "solo-large", "homo", "solo-small", "cl-base"]
    naive = [ax.annotate(n, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8) for n, x, y in zip(names, xs, ys)]
    assert plots.labels_overlap(fig)  # what the chart did before
    for t in naive:
        t.remove()
    texts = plots.label_points(ax, xs, ys, names, lows=ys - 0.06, highs=ys + 0.06)
    assert [t.get_text() for t in texts if t.get_text()] and sorted(t.get_text() for t in texts) == sorted(names)
    assert plots.labels_overlap(fig) == []
    plt.close(fig)
