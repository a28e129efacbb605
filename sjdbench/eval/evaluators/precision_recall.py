"""Improved precision and recall (Kynkäänniemi et al., NeurIPS 2019) on VGG-16 fc2 features, against
the reference images of the protocol (those FID is computed against).

Two set metrics from one feature extraction (sjdbench.eval.metrics.manifold holds the definition):
`precision`, the share of the run's images on the reference images' k-NN manifold, and `recall`, the
share of reference images on the run's manifold; k = 3 as in the paper. The features are those of
LANTERN's evaluation (torchvision VGG-16, fc2 before its ReLU, images squashed to 224 x 224 by PIL's
bilinear filter; sjdbench.eval.evaluators.vgg16), or any feature module given as <module>:<factory>.

Statistics. With the reference fixed, precision is a mean over the run's images of "inside some
reference ball", so resampling prompts gives its paired CI against AR as for any per-sample mean.
Recall's balls are built from the run's own images: a resample repeats images, a repeated image is
its own nearest neighbour, and the balls of the resampled set shrink, so resampled recalls are not
draws of the recall of N distinct images (benchmarks/recall_bootstrap.py: on Gaussian features, one
generator at 0.6 times the other's spread, the 95 % intervals held the true difference in 12 of 30
experiments, precision's in 30 of 30). Recall therefore has no interval; its
yardstick is the noise floor, as for FID's value. Both need k + 1 images on each side (a k-th
neighbour) and both depend on N and on the reference's size: compare them at equal N against the
same reference, which the AR baseline and the noise floor always are.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import numpy as np

from sjdbench.eval.evaluators.base import Reference, Refused, Sample, SetMetric, load_image
from sjdbench.eval.evaluators.clip_score import eval_device
from sjdbench.eval.evaluators.feature_networks import custom_feature_module
from sjdbench.eval.evaluators.hashing import file_sha256, files_sha256
from sjdbench.eval.evaluators.imaging import for_vgg16

PREPROCESSING = (
    "no crop; PIL bilinear to 224x224 (uint8); /255, ImageNet mean and std (torchvision ToTensor, Normalize)"
)
RULE = "inside when distance <= the ball's radius, the distance to its centre's k-th nearest neighbour (Euclidean)"


@functools.lru_cache(maxsize=2)
def load_feature_network(feature: str, weights: str | None, device: str):
    """(module (N, 3, 224, 224) uint8 -> (N, D), D, description), built once per process."""
    if feature == "vgg16":
        from sjdbench.eval.evaluators.vgg16 import FC2_FEATURES, load_vgg16_fc2

        assert weights is not None  # resolved by the evaluator before loading
        module = load_vgg16_fc2(Path(weights), device)
        return module, FC2_FEATURES, "torchvision VGG-16, fc2 before its ReLU (4096-d)"
    return custom_feature_module(feature, "eval.precision_recall.feature", "vgg16", device)


class ManifoldMetric(SetMetric):
    """Shared by precision and recall: one feature extraction, one cache, one reference."""

    cache_kind = "manifold_features"

    def __init__(self, settings, run) -> None:
        super().__init__(settings, run)
        self.pr = settings.precision_recall
        self._radii: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(features) -> (features, radii)

    @functools.cached_property
    def weights(self) -> Path | None:
        from sjdbench.eval.evaluators.vgg16 import vgg16_weights

        return vgg16_weights(self.pr.weights) if self.pr.feature == "vgg16" else None

    @property
    def device(self) -> str:
        return eval_device(self.settings.device)

    def _network(self):
        return load_feature_network(self.pr.feature, str(self.weights) if self.weights else None, self.device)

    def measure_protocol(self) -> dict:
        module, dim, description = self._network()
        return {
            "extractor": description,
            "feature_dim": dim,
            "weights_file": self.weights.name if self.weights else None,
            "weights_sha256": file_sha256(self.weights) if self.weights else getattr(module, "weights_sha256", None),
            "preprocessing": PREPROCESSING,
        }

    def protocol_extras(self) -> dict:
        return {
            "k": self.pr.k,
            "rule": RULE,
            "definition": "Kynkäänniemi et al. 2019 (improved precision and recall)",
            "min_n": f"k + 1 = {self.pr.k + 1} images on each side",
        }

    def check(self, n: int) -> None:
        if n < self.pr.k + 1:  # whatever eval.force says: without k other images there is no radius
            raise Refused(
                f"{self.name} refused: run {self.run.run_id} holds {n} samples; a k = {self.pr.k} manifold needs "
                f"at least {self.pr.k + 1} (a k-th nearest neighbour); score a larger run or lower "
                "eval.precision_recall.k"
            )

    def measure(self, samples: list[Sample]) -> np.ndarray:
        return self._features(self.images(samples))

    def _features(self, images: list[np.ndarray]) -> np.ndarray:
        import torch

        module, _, _ = self._network()
        device = next(iter(module.parameters()), torch.zeros(0, device=self.device)).device
        out = []
        for start in range(0, len(images), self.pr.batch_size):
            batch = np.stack([for_vgg16(image) for image in images[start : start + self.pr.batch_size]])
            pixels = torch.from_numpy(batch).permute(0, 3, 1, 2).contiguous().to(device)  # (B, 3, 224, 224) uint8
            with torch.no_grad():
                out.append(module(pixels).float().cpu().numpy())  # (B, D)
        return np.concatenate(out)

    def reference(self) -> Reference:
        from sjdbench.eval.evaluators.references import cached_reference, reference_images

        files, selection, folder = reference_images(self.run, self.settings.inception.reference, self.name)
        if len(files) < self.pr.k + 1:
            raise Refused(
                f"{self.name} refused: {len(files)} reference images in {folder}; a k = {self.pr.k} manifold needs "
                f"at least {self.pr.k + 1}"
            )
        protocol = {"folder": folder.name, "selection": selection, "n": len(files), "sha256": files_sha256(files)}
        key = {**protocol, **self.measure_protocol()}
        vectors = cached_reference("manifold", key, lambda: self._features([load_image(p) for p in files]))
        return Reference(vectors, protocol)

    # ------------------------------------------------------------ the manifolds

    def _tensor(self, features: np.ndarray):
        import torch

        return torch.from_numpy(np.asarray(features, dtype=np.float64)).to(self.device)

    def _radii_of(self, features: np.ndarray) -> np.ndarray:
        """k-NN radii of a feature set, computed once per array (the reference is used many times)."""
        from sjdbench.eval.metrics.manifold import knn_radii

        held = self._radii.get(id(features))
        if held is None or held[0] is not features:
            held = (features, knn_radii(self._tensor(features), self.pr.k).cpu().numpy())
            self._radii[id(features)] = held
        return held[1]

    def inside(self, queries: np.ndarray, centres: np.ndarray) -> np.ndarray:
        """(Q,) bool: which queries lie on the k-NN manifold of the centres."""
        from sjdbench.eval.metrics.manifold import on_manifold

        radii = self._tensor(self._radii_of(centres))
        return on_manifold(self._tensor(queries), self._tensor(centres), radii).cpu().numpy()


class Precision(ManifoldMetric):
    name = "precision"
    metric = "precision (k-NN, Kynkäänniemi et al.)"

    def distance(self, vectors: np.ndarray, other: np.ndarray) -> tuple[float, dict]:
        return float(self.inside(vectors, other).mean()), {"k": self.pr.k}

    def resampled(
        self, vectors: np.ndarray, reference: np.ndarray, to_reference: Callable[[np.ndarray], float]
    ) -> Callable[[np.ndarray], float]:
        inside = self.inside(vectors, reference).astype(np.float64)  # (N,) once; a resample is a mean of rows
        return lambda rows: float(inside[rows].mean())

    def bootstrap_reps(self) -> int | None:
        return self.pr.bootstrap


class Recall(ManifoldMetric):
    name = "recall"
    metric = "recall (k-NN, Kynkäänniemi et al.)"

    def distance(self, vectors: np.ndarray, other: np.ndarray) -> tuple[float, dict]:
        return float(self.inside(other, vectors).mean()), {"k": self.pr.k}

    def protocol_extras(self) -> dict:
        return {
            **super().protocol_extras(),
            "paired_ci": "none: resampled sets repeat images, which shrinks the run's k-NN balls; read the "
            "difference against the noise floor",
        }

    def bootstrap_reps(self) -> int | None:
        return 0  # resampled sets repeat images, which shrinks their balls: no interval (module docstring)
