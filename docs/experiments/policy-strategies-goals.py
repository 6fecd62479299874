#!/usr/bin/env python3
"""Issue 37's goals per strategy from `bench --out` JSON rows.

usage: policy-strategies-goals.py PEERS.json [OURS.json ...]

PEERS.json holds the peers' rows (and ours' for its strategy); each further
file adds ours' rows of another strategy (`--allocators ours --strategy S`).
Prints, per strategy, how many traces meet each goal and the worst trace.
"""
import json
import sys


def cl(r):
    return r["committed_to_live_ratio"]


def main(paths):
    peers, ours = {}, {}
    for path in paths:
        for r in json.load(open(path)):
            if r["allocator"] == "ours":
                ours.setdefault(r.get("strategy") or "balanced", {})[r["trace"]] = r
            elif path == paths[0]:
                peers.setdefault(r["trace"], []).append(r)
    print("| strategy | traces | not dominated by a peer | wall <= best peer | wall <= 2x best peer "
          "| c/l <= best peer | c/l <= 1.1x best peer | c/l <= 1.3 | own <= best peer / 2 | failures |")
    print("| --- | ---: | --- | --- | --- | --- | --- | --- | --- | ---: |")
    for strategy, rows in ours.items():
        n, counts, worst, failures = 0, {}, {}, 0

        def count(key, ok, trace, value):
            counts[key] = counts.get(key, 0) + bool(ok)
            if key not in worst or value > worst[key][1]:
                worst[key] = (trace, value)

        for trace, o in rows.items():
            ps = peers.get(trace)
            if not ps:
                continue
            n += 1
            best_wall = min(p["wall_ms"] for p in ps)
            best_cl = min(cl(p) for p in ps)
            best_own = min(p["alloc_free_own_ns_median"] for p in ps)
            dom = [p for p in ps if cl(p) < cl(o) and p["wall_ms"] < o["wall_ms"]]
            count("dom", not dom, trace, max([o["wall_ms"] / p["wall_ms"] for p in dom], default=0.0))
            count("wall", o["wall_ms"] <= best_wall, trace, o["wall_ms"] / best_wall)
            count("wall2", o["wall_ms"] <= 2 * best_wall, trace, o["wall_ms"] / best_wall)
            count("clpeer", cl(o) <= best_cl, trace, cl(o) / best_cl)
            count("cl11", cl(o) <= 1.1 * best_cl, trace, cl(o) / best_cl)
            count("cl13", cl(o) <= 1.3, trace, cl(o))
            count("own", 2 * o["alloc_free_own_ns_median"] <= best_own, trace,
                  o["alloc_free_own_ns_median"] / best_own)
            failures += o["failures"]

        def cell(key):
            t, v = worst.get(key, ("-", 0.0))
            return f"{counts.get(key, 0)} (worst {t}: {v:.2f})"

        print(f"| {strategy} | {n} | {cell('dom')} | {cell('wall')} | {cell('wall2')} | {cell('clpeer')} "
              f"| {cell('cl11')} | {cell('cl13')} | {cell('own')} | {failures:.0f} |")
    fails = {}
    for ps in peers.values():
        for p in ps:
            fails[p["allocator"]] = fails.get(p["allocator"], 0) + p["failures"]
    print("peers' failed allocations:", fails)


if __name__ == "__main__":
    main(sys.argv[1:])
