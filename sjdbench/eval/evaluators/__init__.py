"""Evaluators: one class per score, registered by one YAML, `conf/evaluator/<name>.yaml`, whose
`_target_` names the class (sjdbench.plugins: the convention decoder parts and models share). A
metric of your own is a class plus a YAML in an SJDBENCH_CONFIG_PATH directory. Classes are imported
when used, so listing evaluators never loads a backbone.

toy_clip     toy CLIP-Score (offline)                     toy.py
toy_fd       Fréchet distance in toy-CLIP feature space    toy.py
toy_objects  object accuracy from the oracle object finder toy.py
clip_score   CLIP-Score with open_clip                    clip_score.py
fid, kid     FID and KID with torchmetrics (Inception)    inception.py
hpsv2        HPS v2 (open_clip ViT-H-14, HPS checkpoint)   hpsv2.py
precision,   improved precision and recall (k-NN on        precision_recall.py
recall       VGG-16 fc2 features)
"""

from __future__ import annotations

from sjdbench import plugins
from sjdbench.errors import UserError
from sjdbench.eval.evaluators.base import SampleMetric, SetMetric

TOY = ("toy_clip", "toy_fd", "toy_objects")  # eval=auto's choice for the toy model
COCO = ("clip_score", "fid", "kid")  # eval=auto's choice for the COCO sets (they have reference images)


def evaluator_names() -> list[str]:
    """Every evaluator a protocol may name: the YAMLs of the evaluator config group."""
    return plugins.names("evaluator")


def check_evaluator(name: str, where: str = "") -> None:
    """One line listing the evaluators when `name` is none (nothing is imported); `where`: the key
    that named it."""
    if plugins.yaml_path("evaluator", name) is None:
        place = f" in {where}" if where else ""
        raise UserError(f"unknown evaluator '{name}'{place}; choose one of: {', '.join(evaluator_names())}")


def evaluator_class(name: str) -> type[SampleMetric] | type[SetMetric]:
    """The class `conf/evaluator/<name>.yaml` names: a per-sample or a set metric
    (eval.evaluators.base) that calls itself `name` (the name its score files carry)."""
    target, found = plugins.find("evaluator", name, "evaluator")
    if not isinstance(found, type) or not issubclass(found, (SampleMetric, SetMetric)):
        raise UserError(
            f"evaluator '{name}': its _target_ {target} is not a SampleMetric or SetMetric class (eval.evaluators.base)"
        )
    if getattr(found, "name", None) != name:
        raise UserError(
            f"evaluator '{name}': {target}.name is {getattr(found, 'name', None)!r}; a class registered as "
            f"'{name}' must set name = '{name}' (its score files carry it)"
        )
    return found
