"""The soak's PNG: RSS of each process and Redis memory over the run (matplotlib, from the dev extra)."""

from __future__ import annotations

from pathlib import Path

from reach.errors import ReachError
from reach.tooling.soak.growth import Kind
from reach.tooling.soak.runner import Report

ROLE_COLOURS = {"router": "tab:blue", "agent steady": "tab:green", "agent churned": "tab:gray",
                "agent canary": "tab:orange", "broker JVM": "tab:brown", "redis-server": "tab:red"}


class NoPlotter(ReachError):
    """matplotlib is not installed."""


def plot(report: Report, path: Path) -> Path:
    """Two panels over minutes since the start: RSS (MiB) per process, Redis used memory (MiB)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # a file, never a window
        import matplotlib.pyplot as plt
    except ImportError:
        raise NoPlotter("--plot needs matplotlib: `pip install matplotlib` (make setup installs it with the dev "
                        "extra)") from None
    series = report.series()
    fig, (rss, mem) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    shown: set[str] = set()
    for (kind, label), points in sorted(series.items()):
        if kind is Kind.RSS:
            role = label.split(" pid ")[0]  # one colour and one legend entry per role: the churned ones are many
            rss.plot([t / 60 for t, _ in points], [v for _, v in points], marker=".", color=ROLE_COLOURS.get(role),
                     label=None if role in shown else role)
            shown.add(role)
        elif kind is Kind.REDIS_MEMORY:
            mem.plot([t / 60 for t, _ in points], [v for _, v in points], marker=".", label=label, color="tab:red")
    s = report.settings
    rss.set_title(f"reach soak: {s.minutes:g} min at {s.rate:g} req/s, a sample every {s.interval_s:g} s")
    rss.set_ylabel("RSS (MiB)")
    rss.legend(fontsize="x-small", ncol=2)
    mem.set_ylabel("Redis used memory (MiB)")
    mem.set_xlabel("minutes since the start")
    for ax in (rss, mem):
        ax.axvline(s.minutes / 2, color="grey", linestyle=":", linewidth=1)  # the last half starts here
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
