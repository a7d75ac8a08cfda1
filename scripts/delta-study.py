#!/usr/bin/env python3
"""How much of an RL version changes, and how small it compresses (issue 18, step 1).

  delta-study.py record --run DIR --out VERSIONS_DIR [--versions 40] [--timeout 900]
  delta-study.py analyze VERSIONS_DIR [--json OUT]

record: attaches a weightsync Subscriber to the trainer of a running
scripts/rl-run.sh (DIR/address.json, DIR/secret) and saves every version it
publishes as VERSIONS_DIR/vNNNN.bin (the packed fp32 image), pulling with
wait so no version is skipped while the trainer is slower than a pull.

analyze: for each pair of consecutive versions, the fraction of elements
bit-identical in fp32 and after rounding both to bf16 (round to nearest
even, as torch does), and the compressed size of one version over the plain
image and over the XOR with the previous version, in fp32 and bf16, with the
bytes as they are or byte-transposed (byte k of every element together),
with zstd (levels 1, 3, 9) and lz4; medians over all pairs, with
compression speed. Needs torch, zstandard and lz4 (python3-zstandard,
python3-lz4).
"""

import argparse
import glob
import json
import os
import statistics
import sys
import time


def record(args) -> int:
    import weightsync

    with open(os.path.join(args.run, "address.json")) as f:
        address = json.load(f)["weights"]
    secret_file = os.path.join(args.run, "secret")
    secret = open(secret_file).read().strip() if os.path.exists(secret_file) else None
    os.makedirs(args.out, exist_ok=True)
    sub = weightsync.Subscriber(address, secret=secret, name="delta-study")
    buffer = bytearray(sub.layout.total_bytes)
    binding = sub.bind(buffer)
    print(f"record: {len(sub.layout)} tensors, {sub.layout.payload_bytes} bytes, over {sub.transport}", flush=True)
    saved, end = [], time.monotonic() + args.timeout
    while len(saved) < args.versions and time.monotonic() < end:
        result = sub.pull(binding, wait=min(30.0, max(0.0, end - time.monotonic())))
        if result is None:
            continue
        with open(os.path.join(args.out, f"v{result.version:04d}.bin"), "wb") as f:
            f.write(buffer)
        saved.append(result.version)
        print(f"record: version {result.version} ({len(saved)}/{args.versions})", flush=True)
    sub.close()
    missing = sorted(set(range(saved[0], saved[-1] + 1)) - set(saved)) if saved else []
    print(f"record: saved {len(saved)} versions {saved[:1]}..{saved[-1:]}, missing {missing}", flush=True)
    return 0 if len(saved) >= args.versions else 1


def transpose(raw: bytes, width: int) -> bytes:
    import numpy as np

    a = np.frombuffer(raw, dtype=np.uint8).reshape(-1, width)
    return a.T.copy().tobytes()


def analyze(args) -> int:
    import lz4.frame
    import numpy as np
    import torch
    import zstandard

    files = sorted(glob.glob(os.path.join(args.dir, "v*.bin")))
    if len(files) < 2:
        print("analyze: need at least two versions", file=sys.stderr)
        return 2
    versions = [np.fromfile(f, dtype=np.uint32) for f in files]
    bf16 = [torch.from_numpy(v.view(np.float32)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            for v in versions]
    codecs = {f"zstd-{level}": zstandard.ZstdCompressor(level=level).compress for level in (1, 3, 9)}
    codecs["lz4"] = lambda b: lz4.frame.compress(b, compression_level=0)
    rows = {}  # (image, dtype, layout, codec) -> [ratio...], speed
    unchanged_fp32, unchanged_bf16 = [], []
    n = versions[0].size
    for i in range(1, len(versions)):
        unchanged_fp32.append(float(np.count_nonzero(versions[i] == versions[i - 1])) / n)
        unchanged_bf16.append(float(np.count_nonzero(bf16[i] == bf16[i - 1])) / n)
        images = {
            ("plain", "fp32"): (versions[i].tobytes(), 4),
            ("plain", "bf16"): (bf16[i].tobytes(), 2),
            ("xor-prev", "fp32"): ((versions[i] ^ versions[i - 1]).tobytes(), 4),
            ("xor-prev", "bf16"): ((bf16[i] ^ bf16[i - 1]).tobytes(), 2),
        }
        for (image, dtype), (raw, width) in images.items():
            for layout in ("as-is", "transposed"):
                data = raw if layout == "as-is" else transpose(raw, width)
                for name, compress in codecs.items():
                    t0 = time.perf_counter()
                    out = compress(data)
                    seconds = time.perf_counter() - t0
                    key = (image, dtype, layout, name)
                    rows.setdefault(key, {"bytes": [], "mbps": []})
                    rows[key]["bytes"].append(len(out))
                    rows[key]["mbps"].append(len(data) / seconds / 1e6)
        print(f"analyze: pair {i}/{len(versions) - 1}", file=sys.stderr, flush=True)
    fp32_bytes = n * 4
    report = {
        "versions": len(versions), "pairs": len(versions) - 1, "elements": n, "fp32_bytes": fp32_bytes,
        "unchanged_fp32_median": statistics.median(unchanged_fp32),
        "unchanged_bf16_median": statistics.median(unchanged_bf16),
        "unchanged_fp32": unchanged_fp32, "unchanged_bf16": unchanged_bf16,
        "rows": [{"image": k[0], "dtype": k[1], "layout": k[2], "codec": k[3],
                  "bytes_median": statistics.median(v["bytes"]),
                  "of_fp32_image": statistics.median(v["bytes"]) / fp32_bytes,
                  "compress_mb_per_s_median": statistics.median(v["mbps"])} for k, v in rows.items()],
    }
    print(f"{len(versions)} versions, {n} elements ({fp32_bytes} bytes fp32); medians over {len(versions) - 1} pairs")
    print(f"unchanged from the previous version: fp32 {report['unchanged_fp32_median']:.4f}, "
          f"bf16 {report['unchanged_bf16_median']:.4f}")
    print(f"{'image':<9} {'dtype':<5} {'bytes':<11} {'codec':<7} {'size':>10} {'of fp32':>8} {'MB/s':>8}")
    for r in sorted(report["rows"], key=lambda r: r["bytes_median"]):
        print(f"{r['image']:<9} {r['dtype']:<5} {r['layout']:<11} {r['codec']:<7} {int(r['bytes_median']):>10} "
              f"{r['of_fp32_image']:>8.4f} {r['compress_mb_per_s_median']:>8.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="save every version a running rl-run.sh trainer publishes")
    r.add_argument("--run", required=True, help="the rl-run.sh --out folder (address.json, secret)")
    r.add_argument("--out", required=True, help="folder for vNNNN.bin")
    r.add_argument("--versions", type=int, default=40)
    r.add_argument("--timeout", type=float, default=900, help="seconds in all (default 900)")
    a = sub.add_parser("analyze", help="unchanged fractions and compressed sizes")
    a.add_argument("dir")
    a.add_argument("--json", help="write the report here")
    args = p.parse_args()
    return record(args) if args.cmd == "record" else analyze(args)


if __name__ == "__main__":
    sys.exit(main())
