#!/usr/bin/env python3
"""The time-to-all model of docs/scaling.md: calibrate it on a
`weightsync-bench fanout` JSON, print how well it fits the measured rows, and
project 7B, 70B and 1T models on 100/200/400 Gbit/s links.

Usage: scripts/scaling-model.py FANOUT_JSON [--hop-from CHAIN_JSON] [--generators N ...]

Calibration:
  eta = N S / (T_flat L)        from FANOUT_JSON's flat row at its largest size:
                                the fraction of the link one pull stream reaches
                                (flat: the trainer's egress carries N copies)
  h   = (T_chain - S/(eta L) - N c/(eta L)) / N   from the chain row of
                                CHAIN_JSON (default FANOUT_JSON): per-hop start
                                latency of a pipelined relay. Take it from a run
                                whose CPU was not saturated (docs/perf/fanout.md).
L is iperf3's measured rate between two hosts of the same bed, in the same run;
c the run's relay chunk (config.relay_chunk, 0: the library's 4 MiB).
"""
import argparse
import json
import math
import sys


def depth(n, k):
    """Least d with k + k^2 + ... + k^d >= n (a k-ary heap under the source)."""
    d, total, level = 0, 0, 1
    while total < n:
        level *= k
        total += level
        d += 1
    return d


def model(topology, s, n, link, eta, c, h):
    rate = eta * link
    if topology == "flat":
        return n * s / rate
    if topology == "chain":  # pipelined
        return s / rate + n * (c / rate + h)
    if topology == "chain-sf":  # store and forward
        return n * s / rate
    if topology.startswith("tree"):
        k = int(topology[4:].split("-")[0])
        d = depth(n, k)
        if topology.endswith("-sf"):
            return d * k * s / rate
        return k * s / rate + d * (k * c / rate + h)
    raise ValueError(topology)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fanout_json")
    parser.add_argument("--generators", type=int, nargs="+", default=[8, 128, 1024])
    parser.add_argument("--hop-from", help="the fanout JSON whose chain row calibrates h")
    parser.add_argument("--chunk-mib", type=float, default=4.0, help="the chunk of the projections")
    parser.add_argument("--nic-efficiency", type=float, default=0.9,
                        help="fraction of a NIC's nominal rate its own benchmark reaches (ib_read_bw, iperf3): "
                             "the projections' L is this times 100/200/400 Gbit/s")
    parser.add_argument("--pipelined", choices=["yes", "no"], default="yes",
                        help="whether the measured chain/tree rows came from pipelined relays")
    args = parser.parse_args()
    def load(path):
        report = json.load(open(path))
        link = report["iperf3"]["bytes_per_s"]
        n = report["config"]["subscribers"]
        chunk = report["config"].get("relay_chunk", 0) or 4 * 2**20
        rows = {(r["topology"], r["size"]): r["time_to_all_s"]
                for r in report["rows"] if r.get("time_to_all_s", -1) > 0}
        return link, n, chunk, rows

    link, n, c_run, rows = load(args.fanout_json)
    c = args.chunk_mib * 2**20
    s = max(size for (_, size) in rows)
    if ("flat", s) not in rows:
        sys.exit("scaling-model: the JSON has no flat row at its largest size; run the bench with --topologies flat,...")
    eta = n * s / (rows[("flat", s)] * link)
    h = 0.0
    hop_path = args.hop_from or args.fanout_json
    hop_link, hop_n, hop_c, hop_rows = load(hop_path)
    chains = [(size, t) for (topology, size), t in hop_rows.items() if topology == "chain"]
    if chains and args.pipelined == "yes":
        size, t = max(chains)
        h = max(0.0, (t - size / (eta * hop_link) - hop_n * hop_c / (eta * hop_link)) / hop_n)
    sf = "" if args.pipelined == "yes" else "-sf"
    print(f"# Calibration ({args.fanout_json})\n")
    print(f"L = {link * 8 / 1e9:.3f} Gbit/s (iperf3), N = {n}, S = {s / 2**20:.0f} MiB, relay chunk {c_run / 2**20:g} MiB")
    print(f"eta = {eta:.3f} (flat row), h = {h * 1e3:.2f} ms (chain row of {hop_path})\n")
    print("| size | topology | measured s | model s | model / measured |")
    print("|---|---|---|---|---|")
    for (topology, size), measured in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if topology.startswith("baseline"):
            continue
        name = topology if topology == "flat" else topology + sf
        predicted = model(name, size, n, link, eta, c_run, h)
        print(f"| {size / 2**20:.0f} MiB | {topology} | {measured:.3f} | {predicted:.3f} | {predicted / measured:.2f} |")

    print(f"\n# Projections (one source holding the whole version; L = {args.nic_efficiency:g} x nominal; "
          f"eta and h as calibrated; c = {args.chunk_mib:g} MiB)\n")
    models = [("7B, bf16", 7e9 * 2), ("70B, bf16", 70e9 * 2), ("1T, fp8", 1e12 * 1)]
    links = [100, 200, 400]
    for generators in args.generators:
        print(f"\nN = {generators} generator hosts:\n")
        print("| model | S | link | flat | tree2 | chain | chain / (S/L) |")
        print("|---|---|---|---|---|---|---|")
        for name, size in models:
            for gbit in links:
                rate = args.nic_efficiency * gbit * 1e9 / 8
                flat = model("flat", size, generators, rate, eta, c, h)
                tree = model("tree2", size, generators, rate, eta, c, h)
                chain = model("chain", size, generators, rate, eta, c, h)
                print(f"| {name} | {size / 1e9:.0f} GB | {gbit} Gbit/s | {flat:.1f} s | {tree:.1f} s | "
                      f"{chain:.2f} s | {chain / (size / rate):.2f} |")


if __name__ == "__main__":
    main()
