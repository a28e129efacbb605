"""Does resampling prompts give a trustworthy interval for a paired precision or recall difference?

sjdbench gives precision's paired difference against AR a bootstrap interval and recall's none. This
measures why on Gaussian features, where the truth is known by simulation: a reference set, and
generators A (the reference's distribution) and B (A's latent, scaled by --scale, plus --noise),
paired sample by sample as two decoders are paired prompt by prompt. For each of --experiments fresh
draws of A and B it forms the 95 % percentile interval of the paired difference B - A from --reps
resamples of the sample indices, and counts how often the interval holds the true mean difference
(the mean over --truth independent draws). Resampled sets repeat samples, which shrinks the k-NN
balls of the resampled set: recall's resampled values are then not those of N distinct samples.
"dup" resamples as the bootstrap does; "distinct" keeps each resample's distinct samples only.

    python benchmarks/recall_bootstrap.py                  # 256-d, N = 300, scale 0.6 (spreads differ)
    python benchmarks/recall_bootstrap.py --scale 0.9 --noise 0.3
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from sjdbench.eval.metrics.manifold import knn_radii, on_manifold


def share_inside(queries: np.ndarray, centres: np.ndarray, k: int) -> float:
    q, c = torch.from_numpy(queries), torch.from_numpy(centres)
    return float(on_manifold(q, c, knn_radii(c, k)).double().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--n", type=int, default=300, help="samples per set (reference and each generator)")
    parser.add_argument("--scale", type=float, default=0.6)
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--experiments", type=int, default=30)
    parser.add_argument("--reps", type=int, default=150)
    parser.add_argument("--truth", type=int, default=150)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    reference = rng.standard_normal((args.n, args.dim))

    def draw() -> tuple[np.ndarray, np.ndarray]:
        latent = rng.standard_normal((args.n, args.dim))
        return latent, args.scale * latent + args.noise * rng.standard_normal((args.n, args.dim))

    statistics = {
        "precision": lambda fake: share_inside(fake, reference, args.k),
        "recall": lambda fake: share_inside(reference, fake, args.k),
    }
    for name, statistic in statistics.items():
        truth = np.mean([statistic(b) - statistic(a) for a, b in (draw() for _ in range(args.truth))])
        variants = ("dup", "distinct") if name == "recall" else ("dup",)
        held = dict.fromkeys(variants, 0)
        for _ in range(args.experiments):
            a, b = draw()
            for variant in variants:
                values = []
                for _ in range(args.reps):
                    rows = rng.integers(args.n, size=args.n)
                    rows = np.unique(rows) if variant == "distinct" else rows
                    values.append(statistic(b[rows]) - statistic(a[rows]))
                lo, hi = np.quantile(values, [0.025, 0.975])
                held[variant] += int(lo <= truth <= hi)
        shares = ", ".join(f"{v}: {held[v]} of {args.experiments}" for v in variants)
        print(f"{name}: true mean difference {truth:+.3f}; intervals holding it: {shares}")


if __name__ == "__main__":
    main()
