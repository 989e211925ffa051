#!/usr/bin/env python3
"""Merges benchmark rounds: reports of the same implementation from several runs on one machine
(`kiln bench --json`, one report; `bench/peers.py --out`, a list of reports) become one, keeping
for every case the round with the shortest median among those whose output passed its check
(a round whose output was wrong is kept instead: a good round never hides a wrong one).
Every implementation is merged by the same rule, so the comparison stays fair while a single
slow round of either side (a clock dip, a recompilation) no longer decides a ratio. A merged
case records how many rounds measured it in `rounds`. Usage:
  merge.py OUT ROUND1 ROUND2 [...]
A case that only some rounds measured keeps the rounds that did; cases keep the first round's
order, and cases or implementations new in later rounds follow.
"""
import json
import sys


def as_list(doc):
    return doc if isinstance(doc, list) else [doc]


def better(a, b):
    """The entry to keep of two measurements of one case: an output that disagreed with its
    reference in any round stands (a wrong result is never hidden by a good round); else the
    shortest median of the rounds that timed the case; else (no round timed it) the first."""
    def key(e):
        if e.get("status") == "wrong":
            return (0, 0.0)
        if e.get("status") == "ok" and e.get("median_ms") is not None:
            return (1, e["median_ms"])
        return (2, 0.0)
    return a if key(a) <= key(b) else b


def merge(rounds):
    impls = {}
    order = []
    for doc in rounds:
        for rep in as_list(doc):
            name = rep.get("implementation", "kiln")
            if name not in impls:
                impls[name] = dict(rep, cases=[])
                order.append(name)
            merged = impls[name]
            # The same-size copies and the roofline are measured in every round: the faster one
            # stands, as for the cases.
            merged["copy_gbs"] = max(merged.get("copy_gbs") or 0.0, rep.get("copy_gbs") or 0.0)
            index = {c["id"]: i for i, c in enumerate(merged["cases"])}
            for case in rep["cases"]:
                if case["id"] not in index:
                    merged["cases"].append(dict(case, rounds=1))
                    continue
                old = merged["cases"][index[case["id"]]]
                kept = dict(better(old, case), rounds=old.get("rounds", 1) + 1)
                if old.get("copy_ms") and case.get("copy_ms"):
                    kept["copy_ms"] = min(old["copy_ms"], case["copy_ms"])
                merged["cases"][index[case["id"]]] = kept
    return [impls[n] for n in order]


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: merge.py OUT ROUND1 [ROUND2 ...]")
    rounds = [json.load(open(p)) for p in sys.argv[2:]]
    merged = merge(rounds)
    out = merged if isinstance(rounds[0], list) else merged[0]
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
