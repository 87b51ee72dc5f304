"""One figure style for the whole book, and the few plot shapes the chapters share.

Every chapter figure goes through ``show_figure(fig, name, caption, alt)``: it checks the
figure (every panel has a y label), saves it as a 150-dpi PNG and displays it with its
name, caption and alt text in the output's metadata. The book's render step turns that
output into a numbered MyST ``figure`` with the caption below and the alt text on the
image (``render.py``); in a live notebook the image shows as usual.

Style rules: ``style()`` sets sizes and fonts; ``legend_outside``
puts a legend beside or below the axes, never on the data; ``integer_ticks`` keeps a
count axis (k of pass@k, steps, problems) on whole numbers.
"""
from __future__ import annotations

import base64
import io
import re

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

DPI = 150
MIME_META = "polyvox"  # output metadata key: {"figure": name, "caption": ..., "alt": ...}

# system -> colour, fixed across chapters so a reader learns them once
COLOURS = {"panel": "#c2410c", "thinking": "#1d4ed8", "tiny-panel": "#c2410c", "tiny-think": "#1d4ed8",
           "gap": "#6b7280"}


def style() -> None:
    plt.rcParams.update({
        "figure.figsize": (7.0, 3.8), "figure.dpi": DPI, "savefig.dpi": DPI,
        "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
        "grid.alpha": 0.25, "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10,
        "legend.frameon": False, "legend.fontsize": 9, "xtick.labelsize": 9, "ytick.labelsize": 9,
    })


def colour(system: str) -> str:
    return COLOURS.get(system, "#374151")


def integer_ticks(ax, axis: str = "x") -> None:
    """Whole-number ticks on a count axis (no 2.5 or 7.5 for k)."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(MaxNLocator(integer=True))


def legend_outside(fig_or_ax, where: str = "right", **kwargs):
    """One legend outside the data: beside the axes (``right``) or below the figure (``bottom``).

    Given a figure, the handles of all its axes are merged (each label once).
    """
    if hasattr(fig_or_ax, "axes") and not hasattr(fig_or_ax, "plot"):
        fig, axes = fig_or_ax, fig_or_ax.axes
    else:
        fig, axes = fig_or_ax.figure, [fig_or_ax]
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if not handles:
        return None
    if fig.get_layout_engine() is None or type(fig.get_layout_engine()).__name__ != "ConstrainedLayoutEngine":
        fig.set_layout_engine("constrained")  # "outside" legends need it; the axes shrink to make room
    if where == "bottom":
        return fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4), **kwargs)
    return fig.legend(handles, labels, loc="outside right upper", **kwargs)


def passk_curves(ax, ks, curves: dict[str, np.ndarray], title: str = "") -> None:
    """pass@k against k for several systems on one axis (legend: ``legend_outside``)."""
    for name, ys in curves.items():
        ax.plot(ks, ys, marker="o", ms=3, label=name, color=colour(name))
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("pass@k")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    integer_ticks(ax, "x")


def band(ax, x, mean, lo, hi, label: str, system: str) -> None:
    """A line with a shaded interval."""
    ax.plot(x, mean, marker="o", ms=3, color=colour(system), label=label)
    ax.fill_between(x, lo, hi, color=colour(system), alpha=0.15, linewidth=0)


def seed_lines(ax, curves: dict, colour: str, label: str):
    """One thin line per seed (``curves``: seed -> Series indexed by step) and their mean, thick, on the
    steps all seeds share; returns the mean."""
    import pandas as pd

    for c in curves.values():
        ax.plot(c.index, c.to_numpy(), color=colour, lw=0.8, alpha=0.5)
    mean = pd.concat(curves, axis=1).dropna().mean(axis=1)
    ax.plot(mean.index, mean.to_numpy(), color=colour, lw=2.5, marker="o", ms=3, label=f"{label} (mean of {len(curves)})")
    return mean


def label_points(ax, xs, ys, labels, fontsize: float = 8, pad_px: float = 2.0, lows=None, highs=None,
                 avoid=()) -> list:
    """Labels beside scatter points, placed so that no two overlap and none covers a point or an error bar.

    Each label tries positions around its point (right, left, above, below, then further out) and
    takes the first whose box, measured after drawing, overlaps no label placed before, no other
    point, no vertical error bar (``lows``/``highs``: the bars' ends, in data units) and no line in
    ``avoid`` (Line2D artists, such as a frontier drawn through the points); a label set
    away from its point gets a thin leader line. Returns the text artists.
    """
    from matplotlib.transforms import Bbox

    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    fig = ax.figure
    fig.canvas.draw()  # settle the layout first: positions are measured in display pixels
    renderer = fig.canvas.get_renderer()
    pts = ax.transData.transform(np.c_[xs, ys])  # display pixels
    offsets = [(6, 0, "left", "center"), (-6, 0, "right", "center"), (0, 7, "center", "bottom"),
               (0, -7, "center", "top")]
    offsets += [(dx * k, dy * k, ha, va) for k in (2, 3, 4, 5) for dx, dy, ha, va in
                ((6, 8, "left", "bottom"), (6, -8, "left", "top"), (-6, 8, "right", "bottom"), (-6, -8, "right", "top"),
                 (0, 9, "center", "bottom"), (0, -9, "center", "top"))]
    bars = []
    if lows is not None and highs is not None:
        for x, lo, hi in zip(xs, np.asarray(lows, float), np.asarray(highs, float)):
            (x0, y0), (_, y1) = ax.transData.transform([(x, lo), (x, hi)])
            bars.append(Bbox([[x0 - 3, y0], [x0 + 3, y1]]))
    for line in avoid:  # a line as a chain of small boxes along its drawn path
        path = line.get_transform().transform(line.get_path().vertices)
        for (x0, y0), (x1, y1) in zip(path[:-1], path[1:]):
            steps = max(1, int(np.hypot(x1 - x0, y1 - y0) // 3))
            for f in np.linspace(0, 1, steps + 1):
                x, y = x0 + f * (x1 - x0), y0 + f * (y1 - y0)
                bars.append(Bbox([[x - 1, y - 1], [x + 1, y + 1]]))
    placed, texts = [], []
    order = np.argsort(-pts[:, 1])
    for i in order:
        choice = None
        for dx, dy, ha, va in offsets:
            t = ax.annotate(labels[i], (xs[i], ys[i]), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                            fontsize=fontsize)
            box = t.get_window_extent(renderer).expanded(1, 1).padded(pad_px)
            hits_label = any(box.overlaps(b) for b in placed)
            hits_point = any(box.contains(*pts[j]) for j in range(len(xs)) if j != i) or \
                any(box.overlaps(b) for b in bars)
            inside = ax.bbox.contains(box.x0, box.y0) and ax.bbox.contains(box.x1, box.y1)
            if not hits_label and not hits_point and inside:
                choice = (t, box, abs(dx) > 6 or abs(dy) > 9)
                break
            t.remove()
        if choice is None:  # nowhere free: the last candidate, with a leader, rather than no label
            dx, dy, ha, va = offsets[-1]
            t = ax.annotate(labels[i], (xs[i], ys[i]), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                            fontsize=fontsize)
            choice = (t, t.get_window_extent(renderer).padded(pad_px), True)
        t, box, far = choice
        if far:
            ax.annotate("", (xs[i], ys[i]), xytext=t.get_position(), textcoords="offset points",
                        arrowprops=dict(arrowstyle="-", lw=0.5, color="#6b7280", shrinkA=0, shrinkB=3))
        placed.append(box)
        texts.append(t)
    return texts


def labels_overlap(fig) -> list[tuple[str, str]]:
    """Pairs of text labels (annotations) of a figure's axes whose drawn boxes overlap: empty for a
    readable figure (used by the tests and available to any chapter)."""
    renderer = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        texts = [t for t in ax.texts if t.get_text().strip()]
        boxes = [t.get_window_extent(renderer) for t in texts]
        for a in range(len(texts)):
            for b in range(a + 1, len(texts)):
                if boxes[a].overlaps(boxes[b]):
                    out.append((texts[a].get_text(), texts[b].get_text()))
    return out


class FigureError(ValueError):
    pass


def check_figure(fig) -> None:
    """Every data panel has a y label; panels sharing a y axis with a labelled one borrow its label."""
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>" and ax.has_data()]
    for i, ax in enumerate(panels, start=1):
        if ax.get_ylabel().strip():
            continue
        shared = [o for o in ax.get_shared_y_axes().get_siblings(ax) if o is not ax and o.get_ylabel().strip()]
        if shared:
            ax.set_ylabel(shared[0].get_ylabel())
            continue
        raise FigureError(f"panel {i} of {len(panels)} ({ax.get_title() or 'untitled'!r}) has no y label")


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise FigureError(f"figure name {name!r} has no letters or digits")
    return slug


def figure_bundle(fig, name: str, caption: str, alt: str) -> tuple[dict, dict]:
    """(data, metadata) of the display output ``show_figure`` emits: a PNG at ``DPI``."""
    if not caption.strip() or not alt.strip():
        raise FigureError(f"figure {name!r}: caption and alt text are required")
    check_figure(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    png = base64.b64encode(buf.getvalue()).decode()
    meta = {MIME_META: {"figure": _slug(name), "caption": caption.strip(), "alt": " ".join(alt.split())}}
    return {"image/png": png, "text/plain": f"Figure: {caption.strip()}"}, meta


def show_figure(fig, name: str, caption: str, alt: str) -> None:
    """Display ``fig`` as a numbered book figure (150-dpi PNG, caption, alt text), then close it."""
    from IPython.display import display

    data, metadata = figure_bundle(fig, name, caption, alt)
    plt.close(fig)
    display(data, raw=True, metadata=metadata)
