#!/usr/bin/env python3
"""The engine of the weightsync example pair: serves the model at the trainer's newest weights.

  PYTHONPATH=build/python /usr/bin/python3 examples/python/engine.py --versions 30 --address-file /tmp/ws-address
  PYTHONPATH=build/python /usr/bin/python3 examples/python/engine.py --spawn-trainer   # both, one command

weightsync.EngineAdapter pulls each new version from trainer.py into the model; between updates
the engine "serves", evaluating the model on a fixed batch: the loss goes down as the trainer
learns. It exits after version --versions. Ctrl-C stops it.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import weightsync
from trainer import batch, make_model


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--versions", type=int, default=30, help="exit after this version: the trainer's --steps")
    p.add_argument("--address-file", help="where trainer.py writes its host:port")
    p.add_argument("--secret", default=os.environ.get("WEIGHTSYNC_SECRET"), help="default: $WEIGHTSYNC_SECRET")
    p.add_argument("--mode", default="auto", choices=weightsync.engine.MODES, help="EngineAdapter mode")
    p.add_argument("--every-version", action="store_true", help="pull each version in turn, not the newest")
    p.add_argument("--timeout", type=float, default=60, help="seconds to wait for the trainer and each version")
    p.add_argument("--spawn-trainer", action="store_true", help="run trainer.py too (--steps = --versions)")
    args = p.parse_args()
    if not (args.address_file or args.spawn_trainer):
        p.error("give --address-file (as given to trainer.py) or --spawn-trainer")
    torch.set_num_threads(1)
    trainer, deadline = None, time.monotonic() + args.timeout
    if args.spawn_trainer:  # in its own session: Ctrl-C reaches the engine, which then stops it
        tmp = tempfile.TemporaryDirectory(prefix="ws-example-")  # removed at exit
        args.address_file = os.path.join(tmp.name, "address")
        command = [sys.executable, str(Path(__file__).with_name("trainer.py")), "--steps", str(args.versions),
                   "--address-file", args.address_file]
        env = dict(os.environ, **({"WEIGHTSYNC_SECRET": args.secret} if args.secret else {}))
        trainer = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        while not Path(args.address_file).exists():  # trainer.py writes it once it listens
            if time.monotonic() > deadline or (trainer and trainer.poll() is not None):
                sys.exit(f"engine: no trainer address in {args.address_file} (is trainer.py running?)")
            time.sleep(0.05)
        address, model, losses = Path(args.address_file).read_text().strip(), make_model(), {}
        x, y = batch(512, torch.Generator().manual_seed(1234))
        load_weights = lambda weights: model.load_state_dict(dict(weights))  # noqa: E731 (load_weights mode)
        with weightsync.EngineAdapter(address, model, load_weights=load_weights, mode=args.mode,
                                      secret=args.secret) as adapter:
            print(f"engine: {adapter.mode} mode, {adapter.subscriber.transport} from {address}", flush=True)
            while adapter.version < args.versions:
                try:
                    want = adapter.version + 1 if args.every_version else None
                    result = adapter.update_weights(version=want, wait=args.timeout)
                except weightsync.VersionRevoked:  # the trainer moved on: take its newest
                    result = adapter.update_weights(wait=args.timeout)
                if result is None:
                    sys.exit(f"engine: no new version in {args.timeout:g} s")
                with torch.no_grad():  # "serving" between updates
                    losses[result.version] = torch.nn.functional.mse_loss(model(x), y).item()
                pull_ms, load_ms = (adapter.stats()[f"last_{k}_seconds"] * 1e3 for k in ("pull", "load"))
                print(f"engine: version {result.version} loss {losses[result.version]:.4f} "
                      f"(pulled in {pull_ms:.2f} ms, loaded in {load_ms:.2f} ms)", flush=True)
        first, last = min(losses), max(losses)
        print(f"engine: received {len(losses)} versions ({first}..{last}), "
              f"loss {losses[first]:.4f} -> {losses[last]:.4f}", flush=True)
        return 0
    except (weightsync.ReconnectError, weightsync.NotReady) as e:  # the trainer went away, or stalled
        sys.exit(f"engine: stopped: {e}")
    except KeyboardInterrupt:
        print("engine: interrupted", flush=True)
        return 130
    finally:
        if trainer and trainer.poll() is None:
            trainer.terminate()  # trainer.py takes SIGTERM as Ctrl-C
            trainer.wait(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())
