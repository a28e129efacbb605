"""The toy model's evaluators, fully offline: toy CLIP-Score, a Fréchet distance in toy-CLIP
feature space against renders of the same captions, and object accuracy from the oracle object
finder. They make the whole speed-versus-quality study runnable on a laptop.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import cast

import numpy as np

from sjdbench.eval.evaluators.base import Reference, Refused, Sample, SampleMetric, SetMetric
from sjdbench.eval.evaluators.hashing import file_sha256

CHUNK = 256  # images per batch through the toy CLIP


def _weights_dir(run) -> Path:
    from sjdbench.toyworld.clip import WEIGHTS_DIR

    return Path(run.config.model.options.get("weights_dir") or WEIGHTS_DIR)


def toy_clip_protocol(run) -> dict:
    from sjdbench.toyworld.clip import CLIP_FILE, CLIP_META, CONTEXT_LENGTH, MEAN, STD

    folder = _weights_dir(run)
    if not (folder / CLIP_META).exists():
        raise Refused(f"the toy CLIP is not in {folder}; run `sjdbench toy train-clip --out {folder}`")
    return {
        "backbone": "toy CLIP (open_clip CLIP, custom config)",
        "weights_file": CLIP_FILE,
        "weights_sha256": file_sha256(folder / CLIP_FILE),
        "config_sha256": file_sha256(folder / CLIP_META),
        "preprocessing": f"64x64 uint8 RGB / 255, normalised with mean {MEAN.tolist()} and std {STD.tolist()}",
        "text": f"open_clip BPE mapped to the toy grammar's vocabulary, {CONTEXT_LENGTH} tokens",
    }


def _check_toy_images(images: list[np.ndarray], name: str) -> None:
    if images and images[0].shape != (64, 64, 3):
        raise Refused(f"{name} reads 64x64 toy images; this run's are {images[0].shape[:2]} (use a real evaluator)")


class ToyClipScore(SampleMetric):
    """Per sample 100 * max(cos(image, caption), 0) under the toy CLIP."""

    name = "toy_clip"
    metric = "toy CLIP-Score (100 * max(cos, 0))"
    cache_kind = "toy_clip_score"

    def measure_protocol(self) -> dict:
        return {**toy_clip_protocol(self.run), "score": "100 * max(cos, 0) per sample, mean over samples"}

    def measure(self, samples: list[Sample]) -> np.ndarray:
        from sjdbench.toyworld.clip import load_toy_clip

        clip = load_toy_clip(_weights_dir(self.run))
        images = self.images(samples)
        _check_toy_images(images, self.name)
        scores = [
            clip.clip_score(np.stack(images[i : i + CHUNK]), [s.text for s in samples[i : i + CHUNK]])
            for i in range(0, len(samples), CHUNK)
        ]
        return np.concatenate(scores).astype(np.float64)[:, None]

    def extra(self, vectors: np.ndarray) -> dict:
        from sjdbench.toyworld.clip import CONTEXT_LENGTH, load_toy_clip

        clip = load_toy_clip(_weights_dir(self.run))
        lengths = [len(clip.bpe.encode(s.text)) + 2 for s in self.run.samples]  # + start and end tokens
        return {"truncated_prompts": int(sum(n > CONTEXT_LENGTH for n in lengths)), "context_length": CONTEXT_LENGTH}


class ToyFrechet(SetMetric):
    """Fréchet distance between the run's toy-CLIP image features and renders of the same captions."""

    name = "toy_fd"
    metric = "toy FD (Fréchet distance, toy-CLIP image features)"
    lower_is_better = True
    cache_kind = "toy_clip_features"
    embedding_dim = 64
    # Not refused below N = 64 (unlike FID below 2048): the toy FD is read against the AR-vs-AR noise
    # floor at the same N, a two-sample comparison that stays valid when both covariances are
    # rank-deficient; its absolute value at small N is bias and the score says so.

    def measure_protocol(self) -> dict:
        return {**toy_clip_protocol(self.run), "features": "L2-normalised toy-CLIP image embeddings (64-d)"}

    def measure(self, samples: list[Sample]) -> np.ndarray:
        from sjdbench.toyworld.clip import load_toy_clip

        images = self.images(samples)
        _check_toy_images(images, self.name)
        return load_toy_clip(_weights_dir(self.run)).image_features(np.stack(images)).double().numpy()

    def reference(self) -> Reference:
        from sjdbench.eval.evaluators.references import cached_reference
        from sjdbench.eval.evaluators.toy_scenes import NotAToyCaption, reference_renders
        from sjdbench.toyworld.clip import load_toy_clip

        captions = sorted({s.prompt_id: s.text for s in self.run.samples}.items())
        k, seed = self.settings.toy.renders_per_caption, self.settings.toy.reference_seed
        texts = [text for _, text in captions]
        captions_sha = hashlib.sha256("\n".join(texts).encode()).hexdigest()
        protocol = {
            "reference": "renders of the scored captions drawn from the toy world given each caption "
            "(relational cells from their posterior, background and lighting from the world's sampler)",
            "renders_per_caption": k,
            "seed": seed,
            "n": len(texts) * k,
            "captions_sha256": captions_sha,
        }

        def compute() -> np.ndarray:
            try:
                renders = reference_renders(texts, k, seed)
            except NotAToyCaption as error:
                raise Refused(f"toy_fd needs toy-world captions for its reference renders: {error}") from None
            return load_toy_clip(_weights_dir(self.run)).image_features(renders).double().numpy()

        key = {**protocol, **self.measure_protocol()}
        return Reference(cached_reference("toy_fd", key, compute), protocol)

    def distance(self, vectors: np.ndarray, other: np.ndarray) -> tuple[float, dict]:
        from sjdbench.eval.metrics.frechet import frechet_distance

        extra = {}
        if min(len(vectors), len(other)) <= self.embedding_dim:
            extra["small_n"] = (
                f"N = {len(vectors)} is not above the {self.embedding_dim} feature dimensions: the value "
                "is dominated by small-N bias; read it only against the noise floor at the same N"
            )
        return frechet_distance(vectors, other), extra


# per-object counts measured per image: objects, present, shape, colour, absolute-position objects, cell
OBJECT_FIELDS = ("objects", "present", "shape", "colour", "positioned", "cell")


def _nearest_cell(centre: tuple[float, float]) -> tuple[int, int]:
    from sjdbench.toyworld.world import CELL_CENTRES

    centres = np.asarray(CELL_CENTRES)
    return int(np.abs(centres - centre[0]).argmin()), int(np.abs(centres - centre[1]).argmin())


def object_counts(image: np.ndarray, caption: str) -> np.ndarray:
    """Counts over the caption's objects (OBJECT_FIELDS) for one image.

    present: a region of the object's colour exists; shape: some object-coloured region (any colour
    but the background's) has the object's shape; colour: the region of the object's colour has the
    object's shape (shape and colour bound on one object); cell: for objects captioned with an
    absolute position, the region of its colour lies in that cell of the 3x3 layout.
    """
    from sjdbench.eval.evaluators.toy_scenes import parse_caption
    from sjdbench.toyworld.objects import find_object
    from sjdbench.toyworld.world import COLOURS

    parsed = parse_caption(caption)
    found = {c: find_object(image, c) for c in COLOURS if c != parsed.background_colour}
    shapes_drawn = {f.shape for f in found.values() if f.present}
    counts = np.zeros(len(OBJECT_FIELDS))
    for obj in parsed.objects:
        mine = found[obj.colour]
        counts += [
            1,
            mine.present,
            obj.shape in shapes_drawn,
            mine.present and mine.shape == obj.shape,
            obj.cell is not None,
            # a present object's centre is its best template's (the finder sets both together)
            obj.cell is not None and mine.present and _nearest_cell(cast(tuple[float, float], mine.centre)) == obj.cell,
        ]
    return counts


class ToyObjects(SampleMetric):
    """Object accuracy from the oracle object finder: are the captioned objects drawn, in their
    colour, with their shape, in their cell? A compositional score in the spirit of GenEval."""

    name = "toy_objects"
    metric = "object accuracy (captioned shape drawn in the captioned colour)"
    cache_kind = "toy_objects"

    def measure_protocol(self) -> dict:
        from sjdbench.toyworld import objects

        return {
            "finder": "sjdbench.toyworld.objects.find_object (colour regions matched to the world's shape masks)",
            "finder_sha256": file_sha256(Path(objects.__file__)),
            "headline": "objects whose colour region has the captioned shape / objects (pooled over the run)",
        }

    def measure(self, samples: list[Sample]) -> np.ndarray:
        from sjdbench.eval.evaluators.toy_scenes import NotAToyCaption

        images = self.images(samples)
        _check_toy_images(images, self.name)
        try:
            return np.stack([object_counts(image, s.text) for image, s in zip(images, samples)])
        except NotAToyCaption as error:
            raise Refused(f"toy_objects needs toy-world captions: {error}") from None

    def sample_values(self, vectors: np.ndarray) -> np.ndarray:
        return vectors[:, 3] / vectors[:, 0]

    def aggregate(self, vectors: np.ndarray) -> float:
        return float(vectors[:, 3].sum() / vectors[:, 0].sum())

    def extra(self, vectors: np.ndarray) -> dict:
        rates = self.rates(vectors)
        ceiling = self.rates(self.ceiling())
        return {
            **rates,
            "ceiling_on_renders": ceiling,
            "definitions": {
                "present": "a region of the object's colour exists",
                "shape": "some object-coloured region has the object's shape",
                "colour": "the region of the object's colour has the object's shape (the headline)",
                "cell": "the region of the object's colour lies in the captioned cell (absolutely placed objects)",
                "all_objects": "images whose every object counts under colour (and cell when placed absolutely)",
            },
        }

    @staticmethod
    def rates(vectors: np.ndarray) -> dict:
        objects, positioned = vectors[:, 0].sum(), vectors[:, 4].sum()
        return {
            "present": float(vectors[:, 1].sum() / objects),
            "shape": float(vectors[:, 2].sum() / objects),
            "colour": float(vectors[:, 3].sum() / objects),
            "cell": float(vectors[:, 5].sum() / positioned) if positioned else None,
            "all_objects": float(np.mean((vectors[:, 3] == vectors[:, 0]) & (vectors[:, 5] == vectors[:, 4]))),
            "n_objects": int(objects),
            "n_positioned": int(positioned),
        }

    def ceiling(self) -> np.ndarray:
        """The same counts on one render of each scored caption: what a perfect toy model would get."""
        from sjdbench.eval.evaluators.references import cached_reference
        from sjdbench.eval.evaluators.toy_scenes import reference_renders

        captions = sorted({s.prompt_id: s.text for s in self.run.samples}.items())
        texts = [t for _, t in captions]
        seed = self.settings.toy.reference_seed
        key = {
            "captions_sha256": hashlib.sha256("\n".join(texts).encode()).hexdigest(),
            "seed": seed,
            **self.measure_protocol(),
        }

        def compute() -> np.ndarray:
            return np.stack([object_counts(image, t) for image, t in zip(reference_renders(texts, 1, seed), texts)])

        return cached_reference("toy_objects_ceiling", key, compute)
