#!/usr/bin/env bash
# netns_test.sh DPLAB_COMPARE: `dplab-compare --links netns:1gbit` (root only, else 77).
# A short star and ring run at N = 3 (at N = 2 both move S bytes per rank, so a mix-up of the
# two would pass): results.csv has an emulated and a real-link row per mode, the bytes each
# rank sent per step equal the textbook formulas on both kinds of link, the emulated row's
# error against its real twin is the one its step times give, report.md sets both side by
# side, calibration.csv carries the namespace links' fit, no namespace is left behind,
# neither after the run nor after a SIGTERM in the middle of one, and another user is told
# that it needs root.
# Read next: benchmarks/compare/netns_links.h.
set -u
exe=$1

[[ $(id -u) -eq 0 ]] || { echo "SKIP: --links netns needs root (network namespaces)"; exit 77; }
probe=cmpt$$
ip netns add "$probe" 2>/dev/null || { echo "SKIP: cannot create network namespaces here"; exit 77; }
ip netns del "$probe"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^cmp[0-9]+-' | sort; }
before=$(namespaces)
fail() { echo "FAIL: $*"; exit 1; }

# 200 s: a hang guard, well inside meson's timeout (360 s) with the runs below, so the log's
# tail is still printed
DPLAB_NUM_THREADS=1 DPLAB_PROGRESS=off timeout 200 "$exe" --links netns:1gbit --modes star,ring \
  --ns 3 --steps 5 --warmup 1 --global-batch 48 --train-limit 240 --test-limit 200 \
  --bucket-cap-mb 0.25 --no-plots --out "$out/run" >"$out/log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || { tail -30 "$out/log"; fail "dplab-compare exited $rc"; }
[[ "$(namespaces)" == "$before" ]] || fail "namespaces left behind: $(namespaces)"

python3 - "$out/run" <<'EOF' || exit 1
import csv, math, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/results.csv")))
def fail(msg):
    print("FAIL:", msg); sys.exit(1)
kinds = sorted((r["mode"], r["N"], r["link"]) for r in rows)
want = [("ring", "3", "emulated"), ("ring", "3", "netns"), ("star", "3", "emulated"), ("star", "3", "netns")]
if kinds != want: fail(f"rows {kinds}, expected {want}")
mib = 1 << 20
for r in rows:
    what = f"{r['mode']} N=3 {r['link']}"
    if float(r["link_gbps"]) != 1.0: fail(f"{what}: link_gbps {r['link_gbps']}, expected 1")
    S, n = 4 * int(r["params"]), 3
    if r["mode"] == "ring": dev0 = other = 2 * (n - 1) / n * S
    else: dev0, other = (n - 1) * S, S
    for col, f in (("master_weight_sent_mib", dev0), ("other_weight_sent_mib", other),
                   ("master_weight_recv_mib", dev0), ("other_weight_recv_mib", other)):
        got = float(r[col]) * mib
        if abs(got - f) > 0.01 * f: fail(f"{what}: {col} {got:.0f} bytes/step, formula {f:.0f}")
    if not float(r["predicted_step_ms"]) > 0: fail(f"{what}: no prediction")
    # the kernel's count on rank 0's link: the payload plus TCP/IP's headers (a few %), plus
    # gloo's few control messages; none on an emulated link
    wire = float(r["master_wire_sent_mib"]) * mib
    if r["link"] == "emulated":
        if r["master_wire_sent_mib"] != "nan": fail(f"{what}: wire bytes on an emulated link")
    elif not dev0 <= wire <= 1.15 * dev0 + 64 * 1024:
        fail(f"{what}: rank 0's link carried {wire:.0f} bytes/step, payload {dev0:.0f}")
    # no step is shorter than rank 0's bytes take on a 1 Gbit/s link, emulated or real (the
    # workers emulate the rate the parent reports)
    if float(r["step_ms"]) < 0.9 * 1e3 * dev0 / 1.25e8:
        fail(f"{what}: a step of {r['step_ms']} ms moves {dev0:.0f} bytes through a 1 Gbit/s link")
for mode in ("ring", "star"):
    emu = next(r for r in rows if r["mode"] == mode and r["link"] == "emulated")
    real = next(r for r in rows if r["mode"] == mode and r["link"] == "netns")
    err = 100 * (float(emu["step_ms"]) - float(real["step_ms"])) / float(real["step_ms"])
    if abs(float(emu["emulated_vs_real_pct"]) - err) > 0.05:
        fail(f"{mode}: emulated_vs_real_pct {emu['emulated_vs_real_pct']}, step times give {err:.2f}")
    if real["emulated_vs_real_pct"] != "nan": fail(f"{mode}: the real row has an error of its own")
    if emu["test_accuracy"] != real["test_accuracy"]:
        fail(f"{mode}: accuracy {emu['test_accuracy']} emulated, {real['test_accuracy']} real: "
             "the same arithmetic must give the same model")
report = open(f"{out}/report.md").read()
if "## Emulated and real links side by side" not in report: fail("report.md has no side-by-side section")
for needle in ("emulated step ms", "real step ms", "| star | 3 |", "| ring | 3 |", "netns:1gbit"):
    if needle not in report: fail(f"report.md lacks '{needle}'")
cal = [l for l in open(f"{out}/calibration.csv") if l.startswith("inter,")]
if len(cal) != 1 or "network namespaces" not in cal[0]: fail(f"calibration.csv: {cal}")
_, alpha, gbps, _ = cal[0].split(",", 3)
if not (float(alpha) > 0 and 0.3 < float(gbps) < 20): fail(f"calibration: alpha {alpha} us, {gbps} Gbit/s")
print("results.csv, report.md and calibration.csv check out")
EOF

# As another user: a clear refusal, before anything is built.
if command -v runuser >/dev/null && runuser -u nobody -- true 2>/dev/null; then
  chmod 711 "$out" && mkdir -p "$out/nobody" && chmod 777 "$out/nobody"  # nobody may pass, not list
  msg=$(runuser -u nobody -- "$exe" --links netns:1gbit --modes ring --ns 2 --no-plots \
    --out "$out/nobody/o" 2>&1)
  rc=$?
  [[ $rc -eq 1 && $msg == *"--links netns needs root"*"runs as uid"* ]] ||
    fail "as nobody: exit $rc, expected 1 and 'needs root': $msg"
  [[ "$(namespaces)" == "$before" ]] || fail "the refused run left namespaces: $(namespaces)"
fi

# SIGTERM in the middle of a run: the bed goes, the ranks go, the exit says the signal.
DPLAB_NUM_THREADS=1 DPLAB_PROGRESS=off "$exe" --links netns:1gbit --modes ring --ns 2 \
  --steps 400 --global-batch 48 --train-limit 240 --test-limit 200 --no-plots \
  --no-projection --out "$out/killed" >"$out/log2" 2>&1 &
pid=$!
for _ in $(seq 200); do
  ip netns list 2>/dev/null | grep -q "^cmp${pid}-n1" && pgrep -f -- "--worker-netns cmp${pid}" >/dev/null && break
  sleep 0.1
done
ip netns list | grep -q "^cmp${pid}-n1" || { kill -KILL $pid; fail "the bed never came up"; }
kill -TERM $pid
wait $pid
rc=$?
[[ $rc -eq 143 ]] || fail "after SIGTERM dplab-compare exited $rc, expected 143"
[[ "$(namespaces)" == "$before" ]] || fail "SIGTERM left namespaces behind: $(namespaces)"
for _ in $(seq 100); do
  pgrep -f -- "--worker-netns cmp${pid}" >/dev/null || break
  sleep 0.1
done
! pgrep -f -- "--worker-netns cmp${pid}" >/dev/null || fail "ranks of the killed run still run"
echo "PASS"
