"""run_tables.band_stability on records written here: membership kept across two draws, the all-equal shares
expected from each draw, and an empty first band (nan, never a division warning or a verdict)."""
import json
import warnings

import numpy as np
import pandas as pd

from polyvox.studies.world import run_tables as T

G = 4


def _draw(root, arm, counts):
    d = root / "bands-redraw" / arm
    d.mkdir(parents=True, exist_ok=True)
    (d / "per_problem.jsonl").write_text("".join(json.dumps({"uid": u, "n_correct": c}) + "\n" for u, c in counts.items()))


def _climb(share):
    log = pd.DataFrame({"step": [1, 2, 6], "frac_groups_all_equal": [share, share, 0.0]})  # step 6 is not early
    return {"logs": {a: {0: log} for a in T.ARMS}, "collapsed": {}}


def test_membership_and_expected_all_equal_shares(tmp_path):
    first = {"a": 1, "b": 2, "c": 4, "d": 0}  # band (0 < n < G): a, b
    _draw(tmp_path, "panel", {"a": 4, "b": 2, "c": 3, "d": 0})  # a leaves the band, c enters it
    _draw(tmp_path, "think", first)
    bands = {a: pd.DataFrame({"uid": list(first), "n_correct": list(first.values())}) for a in T.ARMS}
    out = T.band_stability(tmp_path, bands, G, _climb(0.5), [0])
    p = out.loc["panel"]
    assert (p["band, first draw"], p["band, redraw"], p["in both"]) == (2, 2, 1)
    assert p["first band kept"] == 0.5
    assert p["mean p, first draw"] == (0.25 + 0.5) / 2 and p["mean p, redraw (same problems)"] == (1.0 + 0.5) / 2
    assert np.isclose(p["all-equal groups expected (first draw)"], ((0.25**4 + 0.75**4) + (0.5**4 + 0.5**4)) / 2)
    assert np.isclose(p["all-equal groups expected (in both draws, redraw)"], 0.5**4 + 0.5**4)  # b alone, at 2/4
    assert p["all-equal groups in RL steps 1–5"] == 0.5
    assert out.loc["thinking", "first band kept"] == 1.0


def test_an_empty_first_band_gives_nan_without_a_warning(tmp_path):
    solved = {"a": 4, "b": 0}
    for a in T.ARMS:
        _draw(tmp_path, a, solved)
    bands = {a: pd.DataFrame({"uid": list(solved), "n_correct": list(solved.values())}) for a in T.ARMS}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = T.band_stability(tmp_path, bands, G, _climb(1.0), [0])
    assert (out["band, first draw"] == 0).all() and out["first band kept"].isna().all()


def test_no_second_draw_is_none(tmp_path):
    assert T.band_stability(tmp_path, {}, G, _climb(1.0), [0]) is None
