"""Evaluators: one class per score, imported lazily so that listing them never loads a backbone.

toy_clip     toy CLIP-Score (offline)                     sjdbench/evaluators/toy.py
toy_fd       Fréchet distance in toy-CLIP feature space    sjdbench/evaluators/toy.py
toy_objects  object accuracy from the oracle object finder sjdbench/evaluators/toy.py
clip_score   CLIP-Score with open_clip                    sjdbench/evaluators/clip_score.py
fid, kid     FID and KID with torchmetrics (Inception)    sjdbench/evaluators/inception.py
hpsv2        HPS v2 (open_clip ViT-H-14, HPS checkpoint)   sjdbench/evaluators/hpsv2.py
precision,   improved precision and recall (k-NN on        sjdbench/evaluators/precision_recall.py
recall       VGG-16 fc2 features)
"""

from __future__ import annotations

import importlib

EVALUATORS = {
    "toy_clip": "sjdbench.eval.evaluators.toy:ToyClipScore",
    "toy_fd": "sjdbench.eval.evaluators.toy:ToyFrechet",
    "toy_objects": "sjdbench.eval.evaluators.toy:ToyObjects",
    "clip_score": "sjdbench.eval.evaluators.clip_score:ClipScore",
    "fid": "sjdbench.eval.evaluators.inception:Fid",
    "kid": "sjdbench.eval.evaluators.inception:Kid",
    "hpsv2": "sjdbench.eval.evaluators.hpsv2:Hpsv2",
    "precision": "sjdbench.eval.evaluators.precision_recall:Precision",
    "recall": "sjdbench.eval.evaluators.precision_recall:Recall",
}
TOY = ("toy_clip", "toy_fd", "toy_objects")
COCO = ("clip_score", "fid", "kid")


def evaluator_class(name: str):
    module, attr = EVALUATORS[name].split(":")
    return getattr(importlib.import_module(module), attr)
