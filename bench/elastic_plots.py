"""bench/elastic.py's plots: a pass's real jobs (hosts up, windows' wait) and every ratio's spread."""

from __future__ import annotations

from pathlib import Path

from elastic_jobs import TARGET, WINDOW, windows  # bench/, this script's folder


def draw(results: dict, args, path: Path, phases: bool = True) -> None:
    """The real jobs of a pass: the data hosts up, and the 10-step windows' wait."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for name, r in results.items():
        t0 = r["first"]
        top.step(
            [t - t0 for t, _ in r["hosts"]],
            [n for _, n in r["hosts"]],
            where="post",
            lw=2 if "elastic" in name else 1,
            label=f"{name} ({r['host_s']:.0f} host-s, ${r['usd_per_m']:.2f} per million images)",
        )
        w = windows(r["steps"])
        bottom.plot([t - t0 for t, _ in w], [x for _, x in w], lw=2 if "elastic" in name else 1, label=name)
    if phases:
        for ax in (top, bottom):
            ax.axvline(args.phase_s, color="grey", ls=":", lw=1)
    bottom.axhline(TARGET, color="tab:red", ls="--", lw=1, label=f"target {TARGET:g} %")
    top.set_ylabel("data hosts up")
    bottom.set_ylabel(f"data wait % ({WINDOW} steps)")
    bottom.set_xlabel(
        f"seconds since the first step (heavy chain, then light at {args.phase_s:g} s)"
        if phases
        else "seconds since the first step (epoch 1 writes the cache; the rest read it)"
    )
    top.legend(fontsize=8)
    bottom.legend(fontsize=8)
    top.set_title("elastic data hosts vs fixed sizes" if phases else "elastic data hosts over a cache")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def draw_replay(passes: dict, path: Path, goal: str) -> None:
    """Each ratio's replayed median and 10th-90th percentiles, this run's real value, and the goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    goals = dict(part.split("<=") if "<=" in part else part.split(">=") for part in goal.split(","))
    fig, ax = plt.subplots(figsize=(9, 4))
    names, x = [], 0
    for tag, o in passes.items():
        for ratio in ("cost_ratio", "trainer_ratio"):
            name = f"{ratio}{'' if tag == 'normal' else '_' + tag}"
            mid, lo, hi = o["replay"][ratio]
            ax.errorbar([x], [mid], yerr=[[mid - lo], [hi - mid]], fmt="o", color="tab:blue", capsize=4)
            ax.plot([x], [o["run"][ratio]], "x", color="tab:orange")
            if name in goals:
                ax.plot([x - 0.3, x + 0.3], [float(goals[name])] * 2, color="tab:red", ls="--", lw=1)
            names.append(name)
            x += 1
    ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
    ax.set_ylabel("elastic / cheapest fixed size")
    ax.set_title("replayed median, 10th-90th percentile (blue); this run's real jobs (orange x); goal (red)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
