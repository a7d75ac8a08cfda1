#!/usr/bin/env python3
"""What the vLLM backend's staging costs per update (docs/python_engines.md, "Cost").

One process, one publisher (loopback, --transport), a model of --size bytes in
--layers decoder layers (float32). Per version, interleaved in one run, each of three
engines installs it and the wall time of its worker call is noted:

- ``direct`` (the baseline): EngineAdapter in direct mode, the pull straight into the
  parameters (no staging: a failed pull would leave them undefined);
- ``in_place``: the vLLM backend, pull into staging then one copy per tensor into the
  parameters (start + update_weights + finish);
- ``checkpoint``: the vLLM backend, pull into staging then load_weights once per layer
  (a loader copying by name, as vLLM's default weight loader does).

The first --warmup versions are not counted; medians and min/max of the rest.
Every engine's parameters are checked against the trainer's after the last version.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/vllm_backend_cost.py --size 64MiB --runs 9
"""

import argparse
import json
import statistics
import sys
import time


def parse_size(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * factor)
    return int(text)


def build_model(torch, size, layers):
    nn = torch.nn
    per_layer = size // (layers * 4 * 4)  # 4 float32 tensors per layer
    side = max(1, int(per_layer ** 0.5))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            for name in ("q", "k", "v", "o"):
                self.register_parameter(name, nn.Parameter(torch.zeros(side, side), requires_grad=False))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(layers))

        @torch.no_grad()
        def load_weights(self, weights):
            params = dict(self.named_parameters())
            for name, tensor in weights:
                params[name].copy_(tensor)

    return Model()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="64MiB")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--transport", default="shm")
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch
    import weightsync
    from weightsync.vllm_backend import WeightsyncWeightTransferEngine

    trainer = build_model(torch, parse_size(args.size), args.layers)
    pub = weightsync.Publisher(weightsync.Layout.from_state_dict(trainer.state_dict()), bind="127.0.0.1", slots=3)
    engines = {}
    direct_model = build_model(torch, parse_size(args.size), args.layers)
    engines["direct"] = (direct_model, weightsync.EngineAdapter(pub.address, direct_model, mode="direct",
                                                                transport=args.transport))

    class Cfg:
        parallel_config = None
        model_config = None

    class Dev:
        type = "cpu"

    for mode in ("in_place", "checkpoint"):
        model = build_model(torch, parse_size(args.size), args.layers)
        eng = WeightsyncWeightTransferEngine(object(), Cfg(), Dev(), model)
        eng.init_transfer_engine(eng.parse_init_info({"address": pub.address, "mode": mode,
                                                      "transport": args.transport}))
        engines[mode] = (model, eng)

    times = {name: [] for name in engines}
    total = args.warmup + args.runs
    for version in range(1, total + 1):
        with torch.no_grad():
            for p in trainer.parameters():
                p.normal_()
        pub.publish(trainer.state_dict(), version)
        order = list(engines) if version % 2 else list(reversed(list(engines)))  # drift hits all
        for name in order:
            model, eng = engines[name]
            t0 = time.perf_counter()
            if name == "direct":
                eng.update_weights(version=version)
            else:
                eng.start_weight_update()
                eng.update_weights({"version": version})
                eng.finish_weight_update()
            if version > args.warmup:
                times[name].append(time.perf_counter() - t0)
    want = trainer.state_dict()
    for name, (model, eng) in engines.items():
        for n, t in model.state_dict().items():
            assert torch.equal(t, want[n]), (name, n)
    out = {"size_bytes": pub.layout.payload_bytes, "tensors": len(pub.layout), "layers": args.layers,
           "transport": args.transport, "runs": args.runs,
           "ms": {name: {"median": statistics.median(v) * 1e3, "min": min(v) * 1e3, "max": max(v) * 1e3}
                  for name, v in times.items()}}
    base = out["ms"]["direct"]["median"]
    for name, row in out["ms"].items():
        print(f"{name:10s} median {row['median']:8.2f} ms  (min {row['min']:.2f}, max {row['max']:.2f})  "
              f"x{row['median'] / base:.2f} of direct", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    for name, (model, eng) in engines.items():
        (eng.close if name == "direct" else eng.shutdown)()
    pub.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
