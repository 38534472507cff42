#!/usr/bin/env python3
"""plot_results.py: the PNGs of dplab-compare, from the CSVs it wrote into OUT_DIR.

    python3 plot_results.py results/

  throughput.png   samples/s and scaling efficiency vs N, one line per mode (ps: S = 1 and S = N)
  memory.png       peak memory of every device / rank of every run, stacked: parameters,
                   gradients, optimizer state, activations, other transient buffers: the DP
                   master's excess, DDP's equal replicas, ZeRO's 1/N optimizer state
  traffic.png      MiB sent and received per step by every device / rank
  step_split.png   compute / communication / waiting per step, one bar per run
  projection.png   alpha-beta projection to N = 1024: step time and efficiency, ring vs star
Only the standard library and matplotlib (Debian: python3-matplotlib). dplab-compare calls
this script itself and skips the plots, saying so, when matplotlib is missing.
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

MODE_STYLE = {"single": ("k", "o"), "dp": ("tab:orange", "s"), "star": ("tab:red", "^"), "ring": ("tab:blue", "D"),
              "zero1": ("tab:green", "v"), "zero2": ("tab:olive", "P"),
              "ps S=1": ("tab:purple", "x"), "ps S=N": ("tab:cyan", "*"),
              "ps S=1 sep": ("tab:pink", "x"), "ps S=N sep": ("tab:brown", "*")}


def line_of(row):
    """The throughput line a run belongs to: its mode, or for mode ps (runs ps-s<S>[-sep]) the
    family S = 1 or S = N across N, so that one line joins ps-s2 at N = 2 and ps-s4 at N = 4."""
    mode = row["mode"]
    if not mode.startswith("ps-s"):
        return mode
    servers = row.get("servers", "")
    family = "ps S=1" if servers == "1" else "ps S=N" if servers == row["N"] else mode
    return family + (" sep" if mode.endswith("-sep") else "")


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def f(row, key):
    try:
        return float(row[key])
    except (KeyError, ValueError):
        return float("nan")


def plot_throughput(rows, out):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in MODE_STYLE:
        pts = sorted((int(r["N"]), f(r, "samples_per_s"), f(r, "efficiency")) for r in rows if line_of(r) == mode)
        if not pts:
            continue
        colour, marker = MODE_STYLE[mode]
        ns = [p[0] for p in pts]
        ax1.plot(ns, [p[1] for p in pts], color=colour, marker=marker, label=mode)
        ax2.plot(ns, [100 * p[2] for p in pts], color=colour, marker=marker, label=mode)
    ax1.set(xlabel="N devices", ylabel="samples / s", title="throughput")
    ax2.set(xlabel="N devices", ylabel="scaling efficiency %", title="speed-up / N")
    ax2.axhline(100, color="grey", lw=0.5)
    all_ns = sorted({int(r["N"]) for r in rows})
    for ax in (ax1, ax2):
        ax.set_xticks(all_ns)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=110)
    plt.close(fig)


def run_keys(dev_rows):
    """(mode, N) of every run, in the order per_device.csv lists them."""
    runs = []
    for r in dev_rows:
        key = (r["mode"], int(r["N"]))
        if key not in runs:
            runs.append(key)
    return runs


def device_bars(ax, dev_rows, draw):
    """One slot per device of every run, grouped under the run's label: draw(x, row, first)
    draws that device's bars at x (first: the very first device, which labels the legend)."""
    runs = run_keys(dev_rows)
    x, ticks, labels = 0, [], []
    for mode, n in runs:
        devs = [r for r in dev_rows if r["mode"] == mode and int(r["N"]) == n]
        start = x
        for d in devs:
            draw(x, d, (mode, n, d["device"]) == (runs[0][0], runs[0][1], "0"))
            x += 1
        ticks.append((start + x - 1) / 2)
        labels.append(f"{mode}\nN={n}")
        x += 0.7
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=8)


def save(fig, ax, out, name, legend_size=None):
    ax.legend(fontsize=legend_size)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)


def per_run_bars(dev_rows, out, name, series, ylabel, title):
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(run_keys(dev_rows)) + 2), 4))

    def draw(x, d, first):
        width = 0.8 / len(series)
        for k, (key, colour, label) in enumerate(series):
            ax.bar(x + k * width, f(d, key), width=width, color=colour, label=label if first else None)

    device_bars(ax, dev_rows, draw)
    ax.set(ylabel=ylabel, title=title)
    save(fig, ax, out, name)


def plot_split(rows, out):
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(rows) + 2), 4))
    labels = [f"{r['mode']}\nN={r['N']}" for r in rows]
    xs = range(len(rows))
    compute = [f(r, "compute_ms") for r in rows]
    wait = [f(r, "wait_ms") for r in rows]
    comm = [f(r, "comm_ms") for r in rows]
    ax.bar(xs, compute, color="tab:green", label="compute")
    ax.bar(xs, wait, bottom=compute, color="tab:red", label="waiting")
    ax.scatter(xs, comm, color="tab:blue", marker="_", s=400, zorder=3, label="communication (overlaps compute in DDP)")
    ax.plot(xs, [f(r, "step_ms") for r in rows], "k.", label="step (median; the bars are means)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set(ylabel="ms per step", title="where a step's time goes")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "step_split.png"), dpi=110)
    plt.close(fig)


def plot_projection(rows, measured, out):
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    fig, axes = plt.subplots(2, len(models), figsize=(4.2 * len(models), 7), squeeze=False)
    for j, model in enumerate(models):
        for pattern, colour in (("ring", "tab:blue"), ("star", "tab:red")):
            for overlap, style in (("1", "-"), ("0", "--")):
                pts = [r for r in rows if r["model"] == model and r["pattern"] == pattern and r["overlap"] == overlap]
                ns = [int(r["N"]) for r in pts]
                label = f"{pattern}, {'overlap' if overlap == '1' else 'no overlap'}"
                axes[0][j].plot(ns, [f(r, "step_ms") for r in pts], style, color=colour, label=label)
                axes[1][j].plot(ns, [100 * f(r, "efficiency") for r in pts], style, color=colour, label=label)
        if j == 0:  # the measured DDP steps beside the model's curves
            for mode, colour in (("ring", "tab:blue"), ("star", "tab:red")):
                pts = [(int(r["N"]), f(r, "step_ms")) for r in measured if r["mode"] == mode]
                if pts:
                    axes[0][j].scatter(*zip(*pts), color=colour, marker="x", s=60, label=f"{mode} measured (strong: G/N per device)", zorder=3)
        params = float(next(r for r in rows if r["model"] == model)["params"])
        axes[0][j].set(xscale="log", yscale="log", title=f"{model} ({params / 1e6:.2f}M params)",
                       xlabel="N", ylabel="step ms")
        axes[1][j].set(xscale="log", xlabel="N", ylabel="efficiency %", ylim=(0, 105))
        for ax in (axes[0][j], axes[1][j]):
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
    fig.suptitle("alpha-beta projection (weak scaling, measured alpha and beta)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "projection.png"), dpi=110)
    plt.close(fig)


MEMORY_PARTS = [("param_bytes", "tab:blue", "parameters"), ("grad_bytes", "tab:orange", "gradients"),
                ("optim_state_bytes", "tab:green", "optimizer state"), ("activation_bytes", "tab:red", "activations")]


def plot_memory(dev_rows, out):
    """One bar per device of every run, stacked by what holds the bytes at the peak."""
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(dev_rows) + 2), 4))

    def draw(x, d, first):
        bottom = 0.0
        for key, colour, label in MEMORY_PARTS:
            mib = f(d, key) / 2**20
            ax.bar(x, mib, bottom=bottom, width=0.8, color=colour, label=label if first else None)
            bottom += mib
        # the rest of the peak: backward's and communication's transient buffers
        other = max(0.0, f(d, "peak_mib") - bottom)
        ax.bar(x, other, bottom=bottom, width=0.8, color="lightgrey", label="other (transient)" if first else None)

    device_bars(ax, dev_rows, draw)
    ax.set(ylabel="MiB at the peak", title="memory per device / rank")
    save(fig, ax, out, "memory.png", legend_size=7)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "results"
    rows = read_csv(os.path.join(out, "results.csv"))
    dev_rows = read_csv(os.path.join(out, "per_device.csv"))
    if not rows:
        sys.exit(f"plot_results.py: no {os.path.join(out, 'results.csv')}: run dplab-compare first")
    plot_throughput(rows, out)
    plot_memory(dev_rows, out)
    per_run_bars(dev_rows, out, "traffic.png",
                 [("sent_mib_per_step", "tab:blue", "sent"), ("recv_mib_per_step", "tab:orange", "received")],
                 "MiB per step", "traffic per device / rank")
    plot_split(rows, out)
    proj = read_csv(os.path.join(out, "projection.csv"))
    if proj:
        plot_projection(proj, rows, out)


if __name__ == "__main__":
    main()
