#!/usr/bin/env python3
"""The trainer of the weightsync example pair: trains a tiny model, publishes every step.

  PYTHONPATH=build/python /usr/bin/python3 examples/python/trainer.py --steps 30 --address-file /tmp/ws-address

Fits y = sin(2x) with a small MLP and publishes the weights after every
optimizer step as the next version (1, 2, ...); engine.py, given the same
--address-file, serves the model at the newest version. Ctrl-C stops it.
"""
import argparse
import os
import signal
import socket
import time

import torch
import weightsync


def make_model() -> torch.nn.Module:
    """The model both halves use: 1 -> 64 -> 64 -> 1."""
    nn = torch.nn
    return nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))


def batch(n: int, generator: torch.Generator):
    """n examples of the task: x in [-2, 2], y = sin(2x)."""
    x = torch.rand(n, 1, generator=generator) * 4 - 2
    return x, torch.sin(2 * x)


def wait_for_subscribers(pub: weightsync.Publisher, count: int, timeout: float) -> None:
    """Returns once `count` subscribers have authenticated (connections past the
    handshake); exits with a message after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while count > 0:
        stats = pub.stats()
        if stats["connections_active"] - stats["handshakes_active"] >= count:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"trainer: {count} subscriber(s) did not connect within {timeout:g} s "
                             "(is engine.py running with the same --address-file and secret?)")
        time.sleep(0.02)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30, help="training steps: one version each (default 30)")
    p.add_argument("--step-seconds", type=float, default=0.2, help="least time a step takes (default 0.2)")
    p.add_argument("--address-file", help="write the publisher's host:port here (removed at exit)")
    p.add_argument("--bind", default="127.0.0.1", help="listen address; not loopback: needs a secret")
    p.add_argument("--secret", default=os.environ.get("WEIGHTSYNC_SECRET"), help="default: $WEIGHTSYNC_SECRET")
    p.add_argument("--linger", type=float, default=30, help="seconds to serve after the last step (default 30)")
    p.add_argument("--wait-for-subscribers", type=int, default=0, metavar="N",
                   help="before the first step, wait (up to 60 s) until N subscribers have authenticated, "
                        "so that they see every version (default 0: start at once)")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop on SIGTERM as on Ctrl-C
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, data = make_model(), torch.Generator().manual_seed(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    layout = weightsync.Layout.from_state_dict(model.state_dict())
    with weightsync.Publisher(layout, bind=args.bind, secret=args.secret) as pub:
        try:
            if args.address_file:  # written whole or not at all: the engine polls for it
                with open(args.address_file + ".tmp", "w") as f:  # this host's name if bound to all
                    f.write(pub.address.replace("0.0.0.0:", socket.getfqdn() + ":", 1) + "\n")
                os.replace(args.address_file + ".tmp", args.address_file)
            print(f"trainer: {len(layout)} tensors, {layout.payload_bytes} bytes, at {pub.address}", flush=True)
            wait_for_subscribers(pub, args.wait_for_subscribers, timeout=60.0)
            for step in range(1, args.steps + 1):
                started = time.monotonic()
                x, y = batch(256, data)
                loss = torch.nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                result = pub.publish(model.state_dict(), version=step)
                print(f"trainer: step {step} loss {loss.item():.4f}, "
                      f"published in {result.seconds * 1e3:.2f} ms", flush=True)
                time.sleep(max(0.0, args.step_seconds - (time.monotonic() - started)))
            print(f"trainer: done; serving version {pub.latest_version} for {args.linger:g} s", flush=True)
            time.sleep(args.linger)
        except KeyboardInterrupt:
            print(f"trainer: stopped after publishing {pub.latest_version} of {args.steps} versions", flush=True)
            return 0 if pub.latest_version == args.steps else 130
        finally:
            if args.address_file and os.path.exists(args.address_file):
                os.remove(args.address_file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
