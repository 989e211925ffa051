#!/usr/bin/env python3
"""Renders a results page from one device run: kiln's report, the peers' reports, the host-cost
measurements and the exact command. Usage:
  render.py KILN_JSON PEERS_JSON HOST1_JSON HOST2_JSON COMMAND_FILE > h100.md
  render.py KILN_JSON PEERS_JSON COMMAND_FILE > h100.md      (no host-cost section)
"""
import json
import sys


def fmt(v, p=4):
    return "-" if v is None else f"{v:.{p}f}"


def rounds_note(kiln, peers):
    """The sentence naming the cases measured in more than one round, if any."""
    reports = [kiln] + peers
    most = max((c.get("rounds", 1) for r in reports for c in r["cases"]), default=1)
    if most < 2:
        return ""
    ops = sorted({c["op"] for c in kiln["cases"] if c.get("rounds", 1) > 1})
    return (f" The {', '.join(ops)} cases ran in {most} rounds, kiln and every peer alike, taking turns; "
            "each side's time is its faster round's median (bench/results/merge.py).")


def main():
    kiln = json.load(open(sys.argv[1]))
    peers = json.load(open(sys.argv[2]))
    hosts = [json.load(open(p)) for p in sys.argv[3:-1]]
    command = open(sys.argv[-1]).read().strip()
    bw = kiln["copy_gbs"]
    out = []
    out.append(f"# kiln on {kiln['device_name']}\n")
    out.append(f"Commit measured: `{kiln['commit']}`. Copy roofline measured in the same run: "
               f"{bw:.0f} GB/s (kiln), {peers[0]['copy_gbs']:.0f} GB/s (torch `copy_`).\n")
    out.append("Median device time over many runs, CUDA events, L2 flushed before each run (its persisting "
               "lines reset to normal, then a write of four times its size); bytes "
               "and FLOPs are the fewest the op must move and do. Ratio = best peer time / kiln "
               "time (above 1: kiln is faster). % of same-size copy = time of a device-to-device copy "
               "of the case's bytes (half read, half written), timed the same way in the same run, "
               "over kiln's time: short transfers do not reach the large copy's bandwidth. A case "
               "whose output disagrees with its reference gets no time." + rounds_note(kiln, peers) + "\n")
    out.append("| case | kiln ms | " + " | ".join(f"{p['implementation']} ms" for p in peers) +
               " | best peer | ratio | kiln GB/s | % of copy roofline | % of same-size copy | kiln TFLOP/s | rel. error | status |")
    out.append("|---" * (len(peers) + 10) + "|")
    for c in kiln["cases"]:
        times = {}
        cells = []
        for p in peers:
            pc = next((x for x in p["cases"] if x["id"] == c["id"]), None)
            t = pc and pc.get("median_ms")
            if t is not None:
                times[p["implementation"]] = t
            cells.append(fmt(t) + ("" if not pc or pc["status"] == "ok" else f" ({pc['status']})"))
        ms = c.get("median_ms")
        best = min(times.items(), key=lambda kv: kv[1]) if times else None
        ratio = fmt(best[1] / ms, 3) if best and ms else "-"
        gbs = c["bytes"] / (ms * 1e-3) / 1e9 if ms else None
        tf = c["flops"] / (ms * 1e-3) / 1e12 if ms and c["flops"] else None
        pct = 100 * gbs / bw if gbs else None
        same = 100 * c["copy_ms"] / ms if ms and c.get("copy_ms") else None
        err = "-" if c.get("error") is None else f"{c['error']:.1e}"
        status = c["status"] + (f": {c['note']}" if c["status"] != "ok" and c.get("note") else "")
        out.append(f"| `{c['id']}` | {fmt(ms)} | " + " | ".join(cells) +
                   f" | {best[0] if best else '-'} | {ratio} | {fmt(gbs, 0)} | {fmt(pct, 1)} | {fmt(same, 1)} | {fmt(tf, 2)} | {err} | {status} |")
    if hosts:
        out.extend(host_section(hosts))
    out.append("\n## Command\n")
    out.append("```sh\n" + command + "\n```\n")
    print("\n".join(out))


def host_section(hosts):
    out = []
    out.append("\n## Host cost (one tiny cached `MetalKernel` call)\n")
    out.append("| run | cached call, µs (queued) | with the final wait | calls | cold NVRTC compile, ms | first call of a fixed kernel, ms | bare cuLaunchKernel, µs | bare launch with the largest KilnArgs block (1376 B), µs | empty kernel through kiln's launch path (one-node graph, 368 B), µs |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for i, h in enumerate(hosts, 1):
        out.append(f"| {i} | {h['cached_call_us']:.2f} | {h['cached_call_with_sync_us']:.2f} | {h['calls']} | "
                   f"{h['cold_compile_ms']:.1f} | {h['first_call_fixed_ms']:.2f} | {fmt(h.get('bare_launch_us'), 2)} | "
                   f"{fmt(h.get('bare_launch_kiln_args_us'), 2)} | {fmt(h.get('graph_launch_us'), 2)} |")
    out.append("\nRun 2 starts with the disk cache that run 1 filled, so its first call of the fixed kernel "
               "is a disk-cache hit (lowering, translation unit, cubin read, module load).\n")
    return out


if __name__ == "__main__":
    main()
