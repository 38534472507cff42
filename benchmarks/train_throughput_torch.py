#!/usr/bin/env python3
"""train_throughput_torch.py: PyTorch's side of bench_train_throughput (train_throughput.cpp).

The same two models (the MLP 784-256-128-10 and the LeNet-style CNN of models/lenet.h,
layer for layer), the same batches (the first --limit Fashion-MNIST training images, in order,
normalised as dplab does; --data synthetic: 8 random batches), the tutorials' recipes (SGD
momentum 0.9, lr 0.1 for the MLP, 0.05 for the CNN, batch 64) and the same step
(zero_grad(set_to_none) -> forward -> cross_entropy -> backward -> step), timed the same way:
warm-up, then whole steps until --min-time has passed, split into forward / backward / optimizer.
Every row runs in a fresh Python process with OMP_NUM_THREADS (and MKL_NUM_THREADS) set to
its thread count, as a user's run would, and prints which BLAS PyTorch loaded: with the
reference BLAS (libblas3) its linear layers are several times slower than with OpenBLAS
(apt-get install libopenblas0-openmp) and any comparison flatters dplab, so it warns.
Run: python3 benchmarks/train_throughput_torch.py [--threads 1,all] [--csv torch.csv]
     [--dplab-csv dplab.csv]   # adds the column dplab samples/s / PyTorch samples/s
Paired rounds, for a noisy machine: --dplab-bin build/benchmarks/bench_train_throughput
--rounds 5 runs dplab (that binary, one model and thread count at a time) and PyTorch on
the same model and thread count, straight after each other, five times over (dplab first in
odd rounds, PyTorch first in even ones), and prints each pair's ratio and the median and
range per row. Two runs seconds apart see the same machine;
a whole table of one framework and then one of the other may not.
--omp-wait-policy passive gives both frameworks' processes OMP_WAIT_POLICY=passive: on a machine
whose cores are busy with other work, threads that spin while they wait for a descheduled
partner make every two-thread figure (of either framework) a measure of the load, not of the
code; passive waiting sleeps instead. Leave it unset on a quiet machine (the default spins).
--warm-machine SECONDS first keeps every core busy for that long (matrix products in this
process, which measures nothing itself), for machines that speed up under sustained load.
On this project's Zen 4 VM it was not enough: the machine switched between two speeds
(dplab's two-thread CNN: 7.7k and 9.6k samples/s, same binary) during the rounds too.
PyTorch runs with the malloc settings dplab makes for itself (cpu_backend.cpp), given to
glibc through its environment variables; --glibc-defaults runs it without them. Without
them every step maps its large buffers afresh and page-faults them in, which on this
project's VM made PyTorch's CNN swing 3x from run to run.
"""
import argparse
import csv
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_mlp():
    # models/mlp.h: Sequential(Linear, ReLU, Linear, ReLU, Linear) after flattening.
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


class LeNet(nn.Module):
    # models/lenet.h: conv 5x5 1->16 pad 2, relu, pool 2, conv 5x5 16->32 pad 2, relu,
    # pool 2, flatten, fc 1568->10.
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


MODELS = {"mlp": make_mlp, "cnn": LeNet}

# dplab's mallopt calls (framework/backend/cpu/cpu_backend.cpp) as glibc environment variables
# (read at start-up only, so each row's process gets them): keep blocks up to 32 MiB on the
# heap, never trim it, one arena.
DPLAB_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                "MALLOC_ARENA_MAX": "1"}


# The tutorials' learning rates (02: MLP 0.1, 03: CNN 0.05); --lr overrides both.
RECIPE_LR = {"mlp": 0.1, "cnn": 0.05}
# datasets/fashion_mnist.h: pixels / 255, then (x - mean) / std.
FASHION_MEAN, FASHION_STD = 0.2860, 0.3530
FASHION_DIRS = [os.environ.get("DPLAB_DATA", ""), os.path.join(os.environ.get("DPLAB_DATA", ""), "fashion-mnist"),
                "data/fashion-mnist", "/usr/share/datasets/fashion-mnist"]


def read_idx(name):
    """The IDX file `name` (.gz or plain) from the places dplab looks: its payload as bytes."""
    for d in FASHION_DIRS:
        for path in (os.path.join(d, name + ".gz"), os.path.join(d, name)):
            if d and os.path.exists(path):
                opener = gzip.open if path.endswith(".gz") else open
                with opener(path, "rb") as f:
                    raw = f.read()
                ndim = raw[3]
                return raw[4 + 4 * ndim:]
    sys.exit(f"Fashion-MNIST file {name} not found in {[d for d in FASHION_DIRS if d]} "
             "(apt-get install dataset-fashion-mnist, or --data synthetic)")


def fashion_mnist_batches(batch, limit):
    """The first `limit` training images in order, as whole batches (bench_train_throughput's)."""
    images = read_idx("train-images-idx3-ubyte")[:limit * 784]
    labels = read_idx("train-labels-idx1-ubyte")[:limit]
    n = len(labels) // batch
    x = torch.frombuffer(bytearray(images), dtype=torch.uint8)[:n * batch * 784].float()
    x = ((x / 255.0 - FASHION_MEAN) / FASHION_STD).reshape(n, batch, 1, 28, 28)
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8)[:n * batch].long().reshape(n, batch)
    return [x[i].clone() for i in range(n)], [y[i].clone() for i in range(n)]


def synthetic_batches(batch):
    gen = torch.Generator().manual_seed(1234)
    xs = [torch.randn(batch, 1, 28, 28, generator=gen) for _ in range(8)]
    ys = [torch.randint(0, 10, (batch,), generator=gen) for _ in range(8)]
    return xs, ys


def loaded_blas():
    """The BLAS library files this process has mapped (after a matmul has run)."""
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            base = os.path.basename(path).lower()
            if "blas" in base or "mkl" in base:
                paths.add(os.path.realpath(path))
    return sorted(paths)


def blas_verdict(paths):
    """('openblas' | 'mkl' | 'reference' | 'none', warning or '')."""
    joined = " ".join(paths).lower()
    if "openblas" in joined:
        return "openblas", ""
    if "mkl" in joined:
        return "mkl", ""
    if paths:
        return "reference", ("WARNING: PyTorch runs on the reference BLAS (" + ", ".join(paths) +
                             "): its linear layers are several times slower than with OpenBLAS, so "
                             "ratios flatter dplab. apt-get install libopenblas0-openmp")
    return "none", "WARNING: no BLAS library is mapped; PyTorch may run its own generic kernels"


def cpu_info():
    """The CPU's model name and the vector extensions, from /proc/cpuinfo (as dplab's CSV)."""
    model, flags = "unknown", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and model == "unknown":
                model = value.strip().replace(",", " ")
            if key == "flags" and not flags:
                flags = set(value.split())
    want = ["avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16",
            "avx512_fp16", "amx_tile"]
    return model, "+".join(w for w in want if w in flags) or "none"


def run(name, threads, batch, warmup, min_time, lr, momentum, data="fashion-mnist", limit=12800):
    """One row, in this process (the child of run_row)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = MODELS[name]()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    xs, ys = synthetic_batches(batch) if data == "synthetic" else fashion_mnist_batches(batch, limit)
    steps, total, fwd, bwd, stp = 0, 0.0, 0.0, 0.0, 0.0
    i = 0
    while True:
        k = i % len(xs)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xs[k]), ys[k])
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        i += 1
        if i <= warmup:
            continue
        steps += 1
        fwd += t1 - t0
        bwd += t2 - t1
        stp += t3 - t2
        total += t3 - t0
        if total >= min_time and steps >= 5:
            break
    blas, _ = blas_verdict(loaded_blas())
    return dict(framework="pytorch", model=name, threads=threads, batch=batch, steps=steps,
                ms_per_step=1e3 * total / steps, forward_ms=1e3 * fwd / steps,
                backward_ms=1e3 * bwd / steps, step_ms=1e3 * stp / steps,
                samples_per_s=steps * batch / total, data=data, lr=lr, momentum=momentum,
                blas=blas, torch_threads=torch.get_num_threads())


def row_lr(a, name):
    return a.lr if a.lr > 0 else RECIPE_LR[name]


def run_row(a, name, threads):
    """One row in a fresh Python process with OMP_NUM_THREADS = threads (and dplab's malloc
    settings, unless --glibc-defaults): a new interpreter, as a user's run would be."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if a.omp_wait_policy:
        env["OMP_WAIT_POLICY"] = a.omp_wait_policy
    if not a.glibc_defaults:
        env.update(DPLAB_MALLOC)
    args = [sys.executable, os.path.abspath(__file__), "--child-row", name, str(threads),
            "--batch-size", str(a.batch_size), "--warmup", str(a.warmup), "--min-time",
            str(a.min_time), "--lr", str(row_lr(a, name)), "--momentum", str(a.momentum),
            "--data", a.data, "--limit", str(a.limit)]
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_dplab(binary, name, threads, a):
    """dplab's samples/s for one model and thread count: one row of bench_train_throughput."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.csv")
        subprocess.run([binary, "--models", name, "--threads", str(threads), "--csv", out,
                        "--batch-size", str(a.batch_size), "--min-time", str(a.min_time),
                        "--warmup", str(a.warmup), "--lr", str(row_lr(a, name)),
                        "--momentum", str(a.momentum), "--data", a.data, "--limit", str(a.limit)],
                       check=True, stdout=subprocess.DEVNULL,
                       env={**os.environ, "OMP_NUM_THREADS": str(threads),
                            **({"OMP_WAIT_POLICY": a.omp_wait_policy} if a.omp_wait_policy else {})})
        with open(out) as f:
            rows = [r for r in csv.DictReader(f) if r["device"].startswith("cpu")]
    return float(rows[0]["samples_per_s"])


def warm_machine(seconds):
    """Every core busy for `seconds`: matrix products on all threads, results discarded."""
    torch.set_num_threads(os.cpu_count() or 1)
    x = torch.randn(512, 512)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        x = torch.tanh(x @ x)
    print(f"machine warmed for {seconds:g} s (all cores busy) before the first row", flush=True)


def paired_rounds(a, threads, names):
    """dplab and PyTorch on the same row, a.rounds times; the ratio's median and range.
    The order alternates (dplab first in odd rounds, PyTorch first in even ones): a machine
    that speeds up or slows down over a round then favours each side equally often."""
    print(f"{'round':>5} {'model':<6} {'threads':>7} {'dplab samples/s':>16} "
          f"{'torch samples/s':>16} {'dplab/torch':>12}")
    ratios, rows = {}, []
    for k in range(1, a.rounds + 1):
        for t in threads:
            for name in names:
                if k % 2 == 1:
                    ours = run_dplab(a.dplab_bin, name, t, a)
                    theirs = run_row(a, name, t)
                else:
                    theirs = run_row(a, name, t)
                    ours = run_dplab(a.dplab_bin, name, t, a)
                ratio = ours / theirs["samples_per_s"]
                ratios.setdefault((name, t), []).append(ratio)
                print(f"{k:>5} {name:<6} {t:>7} {ours:>16.1f} {theirs['samples_per_s']:>16.1f} "
                      f"{ratio:>12.2f}", flush=True)
                cpu, ext = cpu_info()
                rows.append(dict(round=k, model=name, threads=t, dplab_samples_per_s=ours,
                                 torch_samples_per_s=theirs["samples_per_s"], ratio=ratio,
                                 data=a.data, lr=row_lr(a, name), blas=theirs["blas"], cpu=cpu,
                                 vector_extensions=ext, omp_wait_policy=a.omp_wait_policy or "unset"))
    print(f"\n{'model':<6} {'threads':>7} {'rounds':>6} {'median dplab/torch':>19} {'range':>14}")
    for (name, t), r in ratios.items():
        print(f"{name:<6} {t:>7} {len(r):>6} {statistics.median(r):>19.2f} "
              f"{min(r):>6.2f}-{max(r):.2f}")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-time", type=float, default=3.0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", default="1,all")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--lr", type=float, default=0.0,
                   help="SGD lr for both models (default: the tutorials', MLP 0.1, CNN 0.05)")
    p.add_argument("--data", default="fashion-mnist", choices=["fashion-mnist", "synthetic"])
    p.add_argument("--limit", type=int, default=12800, help="Fashion-MNIST images to cycle through")
    p.add_argument("--child-row", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--csv", default="")
    p.add_argument("--dplab-csv", default="", help="bench_train_throughput's --csv, for ratios")
    p.add_argument("--glibc-defaults", action="store_true",
                   help="leave glibc's malloc as it is instead of dplab's settings")
    p.add_argument("--dplab-bin", default="",
                   help="bench_train_throughput: run it and PyTorch in paired rounds")
    p.add_argument("--rounds", type=int, default=3, help="paired rounds (with --dplab-bin)")
    p.add_argument("--warm-machine", type=float, default=0.0, metavar="SECONDS",
                   help="keep every core busy this long before the first row (default 0)")
    p.add_argument("--omp-wait-policy", default="", choices=["", "active", "passive"],
                   help="OMP_WAIT_POLICY for both frameworks' processes (default: unset)")
    a = p.parse_args()
    if a.dplab_bin and not os.access(a.dplab_bin, os.X_OK):
        p.error(f"--dplab-bin {a.dplab_bin}: not an executable file (build it: "
                "ninja -C build benchmarks/bench_train_throughput)")
    if a.rounds < 1:
        p.error(f"--rounds must be at least 1, got {a.rounds}")
    if a.warm_machine < 0:
        p.error(f"--warm-machine must be >= 0 seconds, got {a.warm_machine}")
    if a.child_row:  # one row, in the fresh process run_row started: print it as JSON
        name, t = a.child_row[0], int(a.child_row[1])
        print(json.dumps(run(name, t, a.batch_size, a.warmup, a.min_time, a.lr, a.momentum,
                             a.data, a.limit)))
        return

    every = os.cpu_count() or 1
    threads = [every if t == "all" else int(t) for t in a.threads.split(",") if t]
    names = [m for m in ("mlp", "cnn") if m in a.models.split(",")]
    ref = {}
    if a.dplab_csv:
        with open(a.dplab_csv) as f:
            for r in csv.DictReader(f):
                if r.get("device", "cpu").startswith("cpu"):  # GPU rows have no PyTorch twin here
                    ref[(r["model"], int(r["threads"]))] = float(r["samples_per_s"])

    # Which BLAS this PyTorch loads, shown once (every row's process reports its own too).
    torch.randn(64, 784) @ torch.randn(784, 256)
    blas_paths = loaded_blas()
    blas, warning = blas_verdict(blas_paths)
    model, ext = cpu_info()
    lr = f"{a.lr}" if a.lr > 0 else "0.1 MLP / 0.05 CNN (the tutorials')"
    data = "8 synthetic batches" if a.data == "synthetic" else f"Fashion-MNIST, the first {a.limit} images"
    print(f"PyTorch {torch.__version__} training throughput: batch {a.batch_size}, SGD momentum "
          f"{a.momentum}, lr {lr}, data: {data}\nCPU: {model} ({ext}); BLAS: {blas} "
          f"({', '.join(blas_paths) or 'none mapped'}); malloc: "
          f"{'glibc defaults' if a.glibc_defaults else 'dplab settings'}; one process per row "
          "with OMP_NUM_THREADS set" +
          (f"; OMP_WAIT_POLICY={a.omp_wait_policy} for both" if a.omp_wait_policy else ""))
    if warning:
        print(warning, file=sys.stderr)
        print(warning)
    if a.warm_machine > 0:
        warm_machine(a.warm_machine)
    if a.dplab_bin:
        rows = paired_rounds(a, threads, names)
    else:
        rows = table(a, threads, names, ref)
    if a.csv:
        write_csv(a.csv, rows)


def write_csv(path, rows):
    """rows (dicts with the same keys) as a CSV file, the first row's keys as the header."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")


def table(a, threads, names, ref):
    """PyTorch alone, one row per model and thread count (ratios from dplab's CSV if given)."""
    print(f"{'model':<6} {'threads':>7} {'steps':>7} {'ms/step':>10} {'fwd ms':>9} {'bwd ms':>9} "
          f"{'step ms':>9} {'samples/s':>12}" + (f" {'dplab/torch':>12}" if ref else ""))
    rows = []
    for t in threads:
        for name in names:
            r = run_row(a, name, t)
            r["malloc"] = "glibc" if a.glibc_defaults else "dplab"
            r["cpu"], r["vector_extensions"] = cpu_info()
            line = (f"{name:<6} {t:>7} {r['steps']:>7} {r['ms_per_step']:>10.3f} "
                    f"{r['forward_ms']:>9.3f} {r['backward_ms']:>9.3f} {r['step_ms']:>9.3f} "
                    f"{r['samples_per_s']:>12.1f}")
            if (name, t) in ref:
                line += f" {ref[(name, t)] / r['samples_per_s']:>12.2f}"
            print(line, flush=True)
            rows.append(r)
    return rows


if __name__ == "__main__":
    main()
