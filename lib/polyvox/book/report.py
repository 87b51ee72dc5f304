"""Helpers for chapters: reported-vs-recomputed tables and prose built from values."""
from __future__ import annotations

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

PRINT_DECIMALS = 4  # "zero difference at print precision" means |diff| < 0.5e-4


def beside(recomputed: pd.DataFrame, published: pd.DataFrame, on: list[str], columns: list[str]) -> pd.DataFrame:
    """Join recomputed and published values; add a difference column per value column."""
    merged = recomputed[on + columns].merge(published[on + columns], on=on, suffixes=(" (recomputed)", " (published)"))
    for c in columns:
        merged[f"{c} Δ"] = merged[f"{c} (recomputed)"] - merged[f"{c} (published)"]
    order = on + [f"{c}{s}" for c in columns for s in (" (recomputed)", " (published)", " Δ")]
    return merged[order]


def max_abs_diff(table: pd.DataFrame) -> float:
    cols = [c for c in table.columns if str(c).endswith(" Δ")]
    return float(np.nanmax(np.abs(table[cols].to_numpy(dtype=float)))) if cols else float("nan")


def agreement(table: pd.DataFrame) -> str:
    """One phrase saying how far recomputed and published values are apart."""
    d = max_abs_diff(table)
    verdict = "zero at print precision" if d < 0.5 * 10 ** -PRINT_DECIMALS else "**NOT zero at print precision**"
    return f"largest absolute difference {d:.1e} ({verdict}, {PRINT_DECIMALS} decimals)"


def md(text: str) -> None:
    display(Markdown(text))


def pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def p_text(p: float, name: str = "p") -> str:
    """A p value as prose writes it: ``p < 0.001`` below 0.001, else three decimals (``p = 0.012``)."""
    if p != p:  # nan
        return f"{name} not computed"
    return f"{name} < 0.001" if p < 0.001 else f"{name} = {p:.3f}"
