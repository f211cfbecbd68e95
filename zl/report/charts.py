"""matplotlib charts for the HTML report: each function takes the result dict (views.py)
and returns a Figure; `to_svg` inlines it, `save_png` writes it for --png.

matplotlib is imported lazily: only --html / --png need it, and a missing install is a
`MissingMatplotlib` (batch_summary exit 2 with the pip command), never a traceback.
"""

from __future__ import annotations

import io
from typing import Dict, List, Optional

from zl.report.views import shape_label, size_of

PIP_HINT = "python3 -m pip install matplotlib"
# Every name a page gives its charts (<name>.png under --png): what a report owns in that folder.
CHART_NAMES = ("ab_speedup", "rounds_speedup", "rounds_latency", "telemetry", "screen_hist",
               "batch_hist")
COL_A, COL_B, COL_UP, COL_DOWN, COL_FLAG = "#4c72b0", "#dd8452", "#2a9d5c", "#c0392b", "#8e44ad"


class MissingMatplotlib(RuntimeError):
    """--html / --png without matplotlib installed."""


def _plt():
    try:
        import matplotlib
    except ImportError:
        raise MissingMatplotlib(f"--html/--png need matplotlib, which is not installed: {PIP_HINT}") from None
    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt
    # Text stays text in the SVG: smaller pages, and a shape name can be searched for.
    # Labels are data (shape strings, operator names): `$...$` in one is mathtext to
    # matplotlib, which draws it as a formula or stops the page with a parse error.
    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
                         "axes.spines.right": False, "svg.hashsalt": "zl_bench",
                         "text.parse_math": False, "text.usetex": False})
    return plt


def to_svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    _plt().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: inlined in HTML


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _band(ax, band: Optional[List[float]], horizontal: bool, label: str) -> None:
    if band:
        lo, hi = min(band), max(band)
        (ax.axvspan if horizontal else ax.axhspan)(lo, hi, color="#999999", alpha=0.25, lw=0, label=label)
    (ax.axvline if horizontal else ax.axhline)(0, color="black", lw=0.8)


def ordered(items: List[Dict]) -> List[Dict]:
    """Grouped by dtype, small to large within a group (the page's table uses it too)."""
    return sorted(items, key=lambda p: (p["dtype"], size_of(p["size_detail"]), p["size_detail"],
                                        p.get("occurrence") or 0))


def speedup_bars(items: List[Dict], value: str, band: Optional[List[float]], title: str,
                 err: Optional[tuple] = None, band_label: str = "A/A noise band"):
    """Horizontal bars, one per shape, dtype groups separated; flagged shapes hatched."""
    plt = _plt()
    items = ordered(items)
    n = len(items)
    fig, ax = plt.subplots(figsize=(9, max(1.8, 0.32 * n + 1.2)))
    ys, labels, dtype_rows, y = [], [], [], 0
    prev = None
    for p in items:
        if p["dtype"] != prev:
            if prev is not None:
                y += 1  # a gap between dtype groups
            dtype_rows.append((y, p["dtype"]))
            prev = p["dtype"]
        ys.append(y)
        labels.append(shape_label(p))
        y += 1
    vals = [p[value] for p in items]
    colors = [COL_UP if v > 0 else COL_DOWN for v in vals]
    bars = ax.barh(ys, vals, color=colors, height=0.7)
    for b, p in zip(bars, items):
        if p.get("flags"):
            b.set_hatch("///")
            b.set_edgecolor(COL_FLAG)
    if err:
        lo_key, hi_key = err
        ax.errorbar(vals, ys, xerr=[[v - p[lo_key] for v, p in zip(vals, items)],
                                    [p[hi_key] - v for v, p in zip(vals, items)]],
                    fmt="none", ecolor="black", elinewidth=0.8, capsize=2, label="per-round range")
    _band(ax, band, True, band_label)
    ax.set_yticks(ys, labels)
    for gy, dt in dtype_rows:
        ax.annotate(dt, xy=(0, gy), xycoords=("axes fraction", "data"), xytext=(-4, 9),
                    textcoords="offset points", ha="right", fontsize=8, fontweight="bold", color="#444")
    ax.invert_yaxis()
    ax.set_xlabel("speedup % (before/after - 1; positive = after is faster)")
    ax.set_title(title, loc="left")
    if band or err:
        ax.legend(loc="best", fontsize=8, framealpha=0.8)
    return fig


def rounds_latency(shapes: List[Dict], rounds: List[int]):
    """Small multiples: per shape, side A and side B latency per round (drift shows)."""
    plt = _plt()
    shapes = ordered(shapes)
    cols = min(4, max(1, len(shapes)))
    nrows = -(-len(shapes) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(2.6 * cols, 2.0 * nrows + 0.4), squeeze=False)
    for ax, s in zip(axes.flat, shapes):
        ax.plot(rounds, s["a"], "o-", color=COL_A, label="A (before)", ms=3)
        ax.plot(rounds, s["b"], "s-", color=COL_B, label="B (after)", ms=3)
        ax.set_title(f"{s['dtype'].replace('torch.', '')} {shape_label(s)}", fontsize=7, loc="left")
        ax.set_xticks(rounds)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(shapes):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, frameon=False)
    fig.supxlabel("round", fontsize=8)
    fig.supylabel("gems latency (ms)", fontsize=8)
    fig.tight_layout()
    return fig


def telemetry(tel: Dict):
    plt = _plt()
    rows = tel["rows"]
    xs = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(9, 2.6))
    ax.plot(xs, [r["sm_clock_mhz"] for r in rows], color=COL_A, lw=1, label="SM clock (MHz)")
    ax.set_ylabel("SM clock (MHz)")
    ax2 = ax.twinx()
    ax2.plot(xs, [r["temp_c"] for r in rows], color=COL_DOWN, lw=1, label="temperature (C)")
    ax2.set_ylabel("temperature (C)")
    ax.set_xlabel(f"sample ({rows[0]['timestamp']} .. {rows[-1]['timestamp']})" if rows else "sample")
    ax.set_title("telemetry over the campaign (telemetry.tsv)", loc="left")
    fig.legend(loc="upper right", fontsize=8, frameon=False)
    return fig


def histogram(values: List[float], xlabel: str, title: str, band: Optional[List[float]] = None,
              zero: float = 0.0, band_label: str = "A/A noise band"):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.hist(values, bins=min(20, max(3, len(values))), color=COL_A, edgecolor="white")
    if band:
        ax.axvspan(min(band), max(band), color="#999999", alpha=0.25, lw=0, label=band_label)
        ax.legend(fontsize=8, frameon=False)
    ax.axvline(zero, color="black", lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("operators")
    from matplotlib.ticker import MaxNLocator
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, loc="left")
    return fig
