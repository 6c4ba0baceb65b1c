#!/usr/bin/env python3
"""A small PyTorch Conv2d training loop for people who have an RDNA1/RDNA2 GPU.

Run it under rmcp:

    rmcp run --stats -- python3 examples/train.py --steps 200

It prints the device, runs forward and backward passes for N steps on synthetic data fed
through pinned host memory (PyTorch allocates pinned memory with hipHostMalloc, flags 0:
coherent, exactly the allocations rmcp rewrites), checks that every loss is finite, that
the loss went down and that a pinned round trip comes back bit for bit, and reports
success (exit 0) or failure (exit 1). Exit 2: no PyTorch for ROCm or no GPU.

It needs PyTorch built for ROCm and a GPU, so it is not run in CI (only its syntax and its
no-PyTorch message are checked there).
"""

import argparse
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    p.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    p.add_argument("--size", type=int, default=64, help="image side in pixels (default 64)")
    p.add_argument("--device", default="cuda:0", help="torch device (default cuda:0)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    return p.parse_args()


def main():
    args = parse_args()
    try:
        import torch
        from torch import nn
    except ImportError:
        print("train.py: PyTorch is not installed; install PyTorch for ROCm", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None) is None:
        print(
            "train.py: no ROCm GPU visible to PyTorch (torch %s, HIP %s)"
            % (torch.__version__, getattr(torch.version, "hip", None)),
            file=sys.stderr,
        )
        return 2

    device = torch.device(args.device)
    props = torch.cuda.get_device_properties(device)
    preload = os.environ.get("LD_PRELOAD", "")
    print("torch %s, HIP %s" % (torch.__version__, torch.version.hip))
    print(
        "device %s: %s, %s, %d MiB"
        % (
            device,
            props.name,
            getattr(props, "gcnArchName", "?"),
            props.total_memory // (1024 * 1024),
        )
    )
    print("HSA_OVERRIDE_GFX_VERSION=%s" % os.environ.get("HSA_OVERRIDE_GFX_VERSION", "(unset)"))
    print("rmcp shim preloaded: %s" % ("yes" if "librmcp_shim.so" in preload else "no"))

    torch.manual_seed(args.seed)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    # A fixed synthetic data set whose labels depend on the input, so the loss can fall.
    n = args.batch * 8
    gen = torch.Generator().manual_seed(args.seed)
    images = torch.randn(n, 3, args.size, args.size, generator=gen)
    labels = (images.mean(dim=(1, 2, 3)) * 40).long().clamp(-5, 4) + 5
    images = images.pin_memory()
    labels = labels.pin_memory()

    losses = []
    start = time.time()
    for step in range(args.steps):
        i = (step * args.batch) % n
        x = images[i : i + args.batch].to(device, non_blocking=True)
        y = labels[i : i + args.batch].to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        value = loss.item()
        losses.append(value)
        if value != value or value in (float("inf"), float("-inf")):
            print("FAILED: loss is not finite at step %d: %r" % (step, value))
            return 1
        if step % max(1, args.steps // 10) == 0 or step == args.steps - 1:
            print("step %4d  loss %.4f" % (step, value))
    torch.cuda.synchronize(device)
    elapsed = time.time() - start

    # Pinned round trip: host -> device -> pinned host must be exact.
    back = torch.empty_like(images[: args.batch]).pin_memory()
    back.copy_(images[: args.batch].to(device, non_blocking=True), non_blocking=True)
    torch.cuda.synchronize(device)
    if not torch.equal(back, images[: args.batch]):
        print("FAILED: pinned host memory round trip differs")
        return 1

    k = max(1, len(losses) // 10)
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    print("%d steps in %.1f s; mean loss %.4f -> %.4f" % (args.steps, elapsed, first, last))
    if args.steps >= 20 and not last < first:
        print("FAILED: the loss did not go down")
        return 1
    print("SUCCESS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
