#!/usr/bin/env python3
"""One line per demo report, for issue 38's goals (docs/h200/paths.sh).

    python3 docs/h200/paths_summary.py NAME=DIR/report.json ...

Quality runs (with --compare): frames below 40 dB; the same without the first
frame of each abrupt view change or cut (the goal's exception) and the lowest
PSNR apart from those; the lowest first frame; the slowest refill after a
change (frames to a mip deficit below 0.1, and to 40 dB). Timing runs: GPU
median and p99 over frames 10.. (the first frames after idle run at idle
clocks), frames over budget.
"""
import json
import statistics
import sys


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def line(name, path):
    try:
        r = json.load(open(path))
    except Exception as e:  # a run that failed: say so, do not stop the others
        return f"{name}: no report ({e})"
    frames = r.get("frames", [])
    st = r.get("streaming") or {}
    out = [f"{name}: lookahead={st.get('lookahead')}"]
    over = sum(1 for f in frames if f.get("texture_bytes", 0) > f.get("texture_budget", 1 << 62))
    out.append(f"over budget {over}")
    psnr = [(f["frame"], f["psnr_db"]) for f in frames if f.get("psnr_db") is not None]
    events = st.get("view_changes") or []
    first = {e["frame"] for e in events}
    if psnr:
        below = [(k, p) for k, p in psnr if p < 40.0]
        rest = [(k, p) for k, p in psnr if k not in first]
        firsts = [(k, p) for k, p in psnr if k in first]
        out.append(f"min {min(p for _, p in psnr):.1f} dB, {len(below)} < 40")
        out.append(f"apart from first frames: min {min(p for _, p in rest):.1f}, "
                   f"{sum(1 for _, p in rest if p < 40.0)} < 40")
        if firsts:
            k, p = min(firsts, key=lambda kp: kp[1])
            out.append(f"worst first frame {p:.1f} (frame {k})")
        worst = sorted(psnr, key=lambda kp: kp[1])[:5]
        out.append("worst " + " ".join(f"{k}:{p:.1f}" for k, p in worst))
    if events:
        rf = [e.get("refill_frames") for e in events]
        r40 = [e.get("refill_40_db_frames") for e in events if "refill_40_db_frames" in e]
        kinds = {}
        for e in events:
            kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
        out.append(f"changes {kinds}")
        out.append("refill frames max " + ("never" if None in rf else str(max(rf))))
        if r40:
            out.append("to 40 dB max " + ("never" if None in r40 else str(max(r40))))
    gpu = [f["gpu_total_ms"] for f in frames[10:]]
    if gpu and not psnr:
        out.append(f"GPU median {statistics.median(gpu):.2f} p99 {pct(gpu, 0.99):.2f} ms")
        wall = [f["wall_ms"] for f in frames[10:]]
        out.append(f"wall median {statistics.median(wall):.2f}")
    return " | ".join(out)


for arg in sys.argv[1:]:
    name, _, path = arg.partition("=")
    print(line(name, path))
