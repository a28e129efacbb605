"""FID and KID with torchmetrics on 2048-d Inception features (the TF 2015-12-05 graph, as
torch-fidelity, pytorch-fid and clean-fid use).

Both sides go through the same named preprocessing (`sjdbench.eval.evaluators.imaging`), are rounded to
uint8 and pass through torchmetrics' `NoTrainInceptionV3` with `antialias` as set. Features are
extracted once per sample and cached beside the run (generated side) or in the sjdbench cache
(reference side, per reference set, preprocessing and extractor), and handed to torchmetrics'
`FrechetInceptionDistance` / `KernelInceptionDistance` through an identity feature module, so the
statistics are torchmetrics' own float64 sums. FID is refused below N = 2048 (the feature
dimension) unless eval.force=true; KID, unbiased, is not.

The Inception weights are never downloaded here: eval.inception.weights, or torch-fidelity's file in
$TORCH_HOME/hub/checkpoints/; missing, they fail at once with one line naming the file and where.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from sjdbench.eval.evaluators.base import Reference, Sample, SetMetric, load_image
from sjdbench.eval.evaluators.clip_score import eval_device
from sjdbench.eval.evaluators.feature_networks import custom_feature_module, local_weights
from sjdbench.eval.evaluators.hashing import file_sha256, files_sha256
from sjdbench.eval.evaluators.imaging import DESCRIPTIONS, for_inception

if TYPE_CHECKING:
    import torch

INCEPTION_FILE = "weights-inception-2015-12-05-6726825d.pth"
INCEPTION_URL = f"https://github.com/toshas/torch-fidelity/releases/download/v0.2.0/{INCEPTION_FILE}"
FEATURES = 2048


def inception_weights(setting: str | None) -> Path:
    """The local Inception weights file; one-line UserError when it is not on this machine."""
    return local_weights(
        setting, "eval.inception.weights", INCEPTION_FILE, INCEPTION_URL, "FID/KID", "Inception", "torch-fidelity's"
    )


@functools.lru_cache(maxsize=2)
def load_extractor(feature: str, weights: str | None, antialias: bool, device: str):
    """(module (N, 3, H, W) uint8 -> (N, D), D, description), built once per process."""
    if feature == "inception":
        from torchmetrics.image.fid import NoTrainInceptionV3

        module = NoTrainInceptionV3(
            name="inception-v3-compat",
            features_list=[str(FEATURES)],
            feature_extractor_weights_path=weights,
            antialias=antialias,
        )
        return module.to(device), FEATURES, "torchmetrics NoTrainInceptionV3 (inception-v3-compat, pool3, 2048-d)"
    return custom_feature_module(feature, "eval.inception.feature", "inception", device)


def _precomputed(dim: int) -> torch.nn.Module:
    """An identity feature module: torchmetrics receives the cached features as its 'images'."""
    import torch

    class Identity(torch.nn.Module):
        num_features = dim

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    return Identity()


class InceptionMetric(SetMetric):
    """Shared by FID and KID: one feature extraction, one cache, one reference."""

    cache_kind = "inception_features"

    def __init__(self, settings, run) -> None:
        super().__init__(settings, run)
        self.inception = settings.inception

    @functools.cached_property
    def weights(self) -> Path | None:
        return inception_weights(self.inception.weights) if self.inception.feature == "inception" else None

    def _extractor(self):
        weights = str(self.weights) if self.weights else None
        return load_extractor(
            self.inception.feature, weights, self.inception.antialias, eval_device(self.settings.device)
        )

    @property
    def feature_dim_of_extractor(self) -> int:
        return self._extractor()[1]

    def measure_protocol(self) -> dict:
        module, dim, description = self._extractor()
        weights_sha = file_sha256(self.weights) if self.weights else getattr(module, "weights_sha256", None)
        return {
            "extractor": description,
            "feature_dim": dim,
            "weights_file": self.weights.name if self.weights else None,
            "weights_sha256": weights_sha,
            "preprocessing": self.inception.preprocess,
            "preprocessing_steps": DESCRIPTIONS[self.inception.preprocess],
            "antialias": self.inception.antialias,
            "quantisation": "uint8 by rounding, the same on both sides",
        }

    def _features(self, images: list[np.ndarray]) -> np.ndarray:
        import torch

        module, _, _ = self._extractor()
        device = next(iter(module.parameters()), torch.zeros(0)).device
        prepared = [for_inception(image, self.inception.preprocess) for image in images]
        out: list[np.ndarray] = [np.empty(0)] * len(prepared)
        by_shape: dict[tuple, list[int]] = {}
        for i, image in enumerate(prepared):  # `raw` keeps sizes: batch images of one size together
            by_shape.setdefault(image.shape, []).append(i)
        for indices in by_shape.values():
            for start in range(0, len(indices), self.inception.batch_size):
                chunk = indices[start : start + self.inception.batch_size]
                batch = (
                    torch.from_numpy(np.stack([prepared[i] for i in chunk])).permute(0, 3, 1, 2).contiguous().to(device)
                )
                with torch.no_grad():
                    features = module(batch).float().cpu().numpy()  # (B, D)
                for i, row in zip(chunk, features):
                    out[i] = row
        return np.stack(out)

    def measure(self, samples: list[Sample]) -> np.ndarray:
        return self._features(self.images(samples))

    def reference(self) -> Reference:
        from sjdbench.eval.evaluators.references import cached_reference, reference_images

        files, selection, folder = reference_images(self.run, self.inception.reference, self.name)
        protocol = {"folder": folder.name, "selection": selection, "n": len(files), "sha256": files_sha256(files)}
        key = {**protocol, **self.measure_protocol()}
        vectors = cached_reference("inception", key, lambda: self._features([load_image(p) for p in files]))
        return Reference(vectors, protocol)


class Fid(InceptionMetric):
    name = "fid"
    metric = "FID (torchmetrics, 2048-d Inception)"
    lower_is_better = True
    feature_dim = FEATURES

    def check(self, n: int) -> None:
        self.feature_dim = self.feature_dim_of_extractor
        super().check(n)

    def distance(self, vectors: np.ndarray, other: np.ndarray) -> tuple[float, dict]:
        import torch
        from torchmetrics.image.fid import FrechetInceptionDistance

        metric = FrechetInceptionDistance(feature=_precomputed(vectors.shape[1]))
        metric.update(torch.from_numpy(np.asarray(other, dtype=np.float64)), real=True)
        metric.update(torch.from_numpy(np.asarray(vectors, dtype=np.float64)), real=False)
        return float(metric.compute()), {}

    def reference_distance(self, reference: np.ndarray) -> Callable[[np.ndarray], float]:
        """FD to a fixed reference with the reference's matrix square root computed once (for the
        bootstrap: one symmetric eigendecomposition per resample, float64)."""
        from sjdbench.eval.metrics.frechet import gaussian_stats, sqrt_psd

        mu_r, cov_r = gaussian_stats(reference)
        root_r, trace_r = sqrt_psd(cov_r), float(np.trace(cov_r))

        def fd(vectors: np.ndarray) -> float:
            mu, cov = gaussian_stats(vectors)
            middle = root_r @ cov @ root_r
            tr_sqrt = np.sqrt(np.clip(np.linalg.eigvalsh((middle + middle.T) / 2), 0.0, None)).sum()
            return float((mu - mu_r) @ (mu - mu_r) + np.trace(cov) + trace_r - 2.0 * tr_sqrt)

        return fd


class Kid(InceptionMetric):
    name = "kid"
    metric = "KID (torchmetrics, 2048-d Inception, cubic polynomial kernel)"
    lower_is_better = True

    def protocol_extras(self) -> dict:
        kid = self.settings.kid
        return {
            "subsets": kid.subsets,
            "subset_size": kid.subset_size,
            "degree": kid.degree,
            "subset_seed": self.settings.stat_seed,
            "subset_size_rule": "min(subset_size, N, N_reference)",
        }

    def _kid(self, vectors: np.ndarray, other: np.ndarray, subsets: int) -> tuple[float, float, int]:
        import torch
        from torchmetrics.image.kid import KernelInceptionDistance

        size = min(self.settings.kid.subset_size, len(vectors), len(other))
        with warnings.catch_warnings():  # "KID keeps all features in memory": they are already in memory
            warnings.simplefilter("ignore", UserWarning)
            metric = KernelInceptionDistance(
                feature=_precomputed(vectors.shape[1]),
                subsets=subsets,
                subset_size=size,
                degree=self.settings.kid.degree,
            )
        metric.update(torch.from_numpy(np.asarray(other, dtype=np.float64)), real=True)
        metric.update(torch.from_numpy(np.asarray(vectors, dtype=np.float64)), real=False)
        with torch.random.fork_rng(devices=[]):  # KID draws its subsets from the global generator
            torch.manual_seed(self.settings.stat_seed)
            mean, std = metric.compute()
        return float(mean), float(std), size

    def distance(self, vectors: np.ndarray, other: np.ndarray) -> tuple[float, dict]:
        mean, std, size = self._kid(vectors, other, self.settings.kid.subsets)
        return mean, {"std_over_subsets": std, "subsets": self.settings.kid.subsets, "subset_size": size}

    def reference_distance(self, reference: np.ndarray) -> Callable[[np.ndarray], float]:
        return lambda vectors: self._kid(vectors, reference, self.settings.kid.bootstrap_subsets)[0]
