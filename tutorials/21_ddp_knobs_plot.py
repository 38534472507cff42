#!/usr/bin/env python3
"""21_ddp_knobs_plot.py: bucket_sweep.png from the bucket_sweep.csv tutorial 21 wrote.

    python3 tutorials/21_ddp_knobs_plot.py results/21_ddp_knobs

Step time against bucket_cap_mb (log scale), the number of buckets written beside each
point. Only the standard library and matplotlib (Debian: python3-matplotlib); exits 1
without matplotlib, and the tutorial then says there is no plot.
"""
import csv
import os
import sys

try:
    import matplotlib
except ImportError:
    sys.exit(1)
matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def main(out_dir):
    with open(os.path.join(out_dir, "bucket_sweep.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    caps = [float(r["bucket_cap_mb"]) for r in rows]
    ms = [float(r["step_ms"]) for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(caps, ms, "o-", color="tab:blue")
    for c, m, r in zip(caps, ms, rows):
        ax.annotate(f'{r["buckets"]} buckets', (c, m), textcoords="offset points", xytext=(4, 6), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("bucket_cap_mb")
    ax.set_ylabel("step time, best of 3 medians (ms)")
    ax.set_title("DDP step time vs bucket size (LeNet-style CNN, emulated links)")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "bucket_sweep.png"), dpi=120)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/21_ddp_knobs")
