"""One figure style for the whole book, and the few plot shapes the chapters share."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

# system -> colour, fixed across chapters so a reader learns them once
COLOURS = {"panel": "#c2410c", "thinking": "#1d4ed8", "tiny-panel": "#c2410c", "tiny-think": "#1d4ed8",
           "gap": "#6b7280"}


def style() -> None:
    plt.rcParams.update({
        "figure.figsize": (7.0, 3.8), "figure.dpi": 110, "savefig.dpi": 110,
        "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
        "grid.alpha": 0.25, "font.size": 10, "axes.titlesize": 11, "legend.frameon": False,
    })


def colour(system: str) -> str:
    return COLOURS.get(system, "#374151")


def passk_curves(ax, ks, curves: dict[str, np.ndarray], title: str = "") -> None:
    """pass@k against k for several systems on one axis."""
    for name, ys in curves.items():
        ax.plot(ks, ys, marker="o", ms=3, label=name, color=colour(name))
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("pass@k")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.legend()


def band(ax, x, mean, lo, hi, label: str, system: str) -> None:
    """A line with a shaded interval."""
    ax.plot(x, mean, marker="o", ms=3, color=colour(system), label=label)
    ax.fill_between(x, lo, hi, color=colour(system), alpha=0.15, linewidth=0)
