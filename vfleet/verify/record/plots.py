"""What the boot-verify and A/B reports share: matplotlib on the Agg backend (optional), the markdown
lines that show the plots or say why there are none, and number formatting."""

from __future__ import annotations

from typing import Any


def pyplot() -> tuple[Any | None, str | None]:
    """(matplotlib.pyplot on the Agg backend, None), or (None, why not)."""
    try:
        import matplotlib  # noqa: PLC0415
    except ImportError:
        return None, "matplotlib is not installed: pip install 'vfleet[report]'"

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt, None


def plot_lines(plots: list[str], missing: str | None, what: str = "plots") -> list[str]:
    """The end of a markdown report: each plot as an image, or why there are none."""
    lines: list[str] = []
    for p in plots:
        lines += ["", f"![{p}]({p})"]
    if missing:
        lines += ["", f"(no {what}: {missing})"]
    return lines


def fmt(v: Any, spec: str = ".1f") -> str:
    if v is None:
        return "–"
    if isinstance(v, int | float):
        return format(v, spec)
    return str(v)
