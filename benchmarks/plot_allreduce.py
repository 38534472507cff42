#!/usr/bin/env python3
"""plot_allreduce.py: bench_allreduce's PNG, from the CSV it wrote.

    python3 plot_allreduce.py allreduce.csv allreduce.png

One panel per rank count N: bus bandwidth (2(N-1)/N * bytes / time, GB/s) against the
message size, one line per algorithm (ring, recursive doubling, halving-doubling, one-shot,
star, MPI_Allreduce), and auto as a thick dashed line over the one it picked. Where auto's
line sits on the best line, the model chose well; where MPI's line is above auto's, MPI won.
Only the standard library and matplotlib (Debian: python3-matplotlib). bench_allreduce calls
this script itself when given --csv, and says so when matplotlib is missing.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"ring": ("tab:blue", "D"), "recursive_doubling": ("tab:green", "o"),
         "halving_doubling": ("tab:purple", "s"), "one_shot": ("tab:olive", "v"),
         "star": ("tab:red", "^"), "mpi": ("tab:gray", "x")}
SHORT = {"recursive_doubling": "rd", "halving_doubling": "hd", "one_shot": "one-shot"}


def human(nbytes):
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def main(csv_path, png_path):
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot_allreduce.py: {csv_path} has no rows")
    ranks = sorted({int(r["ranks"]) for r in rows})
    fig, axes = plt.subplots(1, len(ranks), figsize=(5.2 * len(ranks), 4.2), squeeze=False)
    for ax, n in zip(axes[0], ranks):
        mine = [r for r in rows if int(r["ranks"]) == n]
        for algo in list(STYLE) + ["auto"]:
            pts = sorted((int(r["bytes"]), float(r["busbw_gbs"])) for r in mine if r["algorithm"] == algo)
            if not pts:
                continue
            xs, ys = zip(*pts)
            if algo == "auto":
                ax.plot(xs, ys, "k--", linewidth=2.5, alpha=0.6, label="auto")
            else:
                color, marker = STYLE[algo]
                ax.plot(xs, ys, color=color, marker=marker, markersize=4, linewidth=1.2,
                        label=SHORT.get(algo, algo))
        sizes = sorted({int(r["bytes"]) for r in mine})
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([human(s) for s in sizes], rotation=45, fontsize=7)
        ax.set_title(f"N = {n}")
        ax.set_xlabel("message size")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("bus bandwidth, GB/s")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle("all-reduce: dplab's algorithms and MPI_Allreduce (bench_allreduce)")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_allreduce.py RESULTS.csv OUT.png")
    main(sys.argv[1], sys.argv[2])
