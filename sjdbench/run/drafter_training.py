"""`sjdbench toy train-drafter`: a drafter for any model with hidden states, from the command line's
words to the exported files (the data and the training are `drafter_data.py` and `drafter_train.py`).

The shipped toy drafter lives beside the toy's weights (`sjdbench/models/toy/weights/toy_drafter.*`);
like `toy train`, retraining writes elsewhere (./<model>_drafter) unless --out names the package's
weights folder and --overwrite is given: every run id of a drafter preset on the toy refers to it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from sjdbench.errors import UserError
from sjdbench.run.drafter_train import DrafterTrainConfig, train_drafter

# the shipped toy drafter's recipe (docs/TOY.md, "Drafter"): 256 self-distilled samples, then this many
# steps of 16 sequences (the step count a 30-minute budget gave on the shared machine it was trained on)
SHIPPED_SAMPLES = 256
SHIPPED_STEPS = 196
HELD_OUT = 32
CAPTION_SEED = 2000  # toy-world captions of the training samples (the toy itself trained on seed 0)


def drafter_name(model: str) -> str:
    return f"{model}_drafter"


def train_for_model(
    overrides: list[str],
    out: Path | None = None,
    overwrite: bool = False,
    steps: int | None = None,
    minutes: float | None = None,
    samples: int | None = None,
    prompts_file: Path | None = None,
    seed: int = 0,
    threads: int = 2,
    resume: bool = True,
    device: str = "auto",
    log: Callable[[str], None] = print,
    held_out: int = HELD_OUT,
) -> dict[str, Any]:
    """Build the target from `model=...` words, check where the drafter goes, train it."""
    from sjdbench.config.schema import compose_run
    from sjdbench.models import registry
    from sjdbench.models.toy.model import WEIGHTS_DIR

    stray = [w for w in overrides if not w.lstrip("+~").startswith("model")]
    if stray:
        raise UserError(f"train-drafter takes model=NAME and model.* overrides only, not {stray[0]}")
    config = compose_run(overrides if any(w.startswith("model=") for w in overrides) else ["model=toy", *overrides])
    name, options = config.model.name, dict(config.model.options)
    out = Path(out or drafter_name(name))
    is_package = out.resolve() == WEIGHTS_DIR.resolve()
    if is_package and not overwrite:
        raise UserError(
            f"{out} holds the shipped toy drafter; train into another folder (--out DIR), or pass --overwrite "
            "to replace it"
        )
    work_dir = Path(".cache") / "drafter_train" / name if is_package else out / "train_data"
    if not resume:
        import shutil

        shutil.rmtree(work_dir, ignore_errors=True)
    model = registry.resolve_model(name, options)
    model.verify()
    fingerprint = model.fingerprint()
    adapter = model.build(registry.resolve_device(device))
    n_train = samples or SHIPPED_SAMPLES
    prompts, val_prompts, source = _prompts(prompts_file, n_train, seed, held_out)
    cfg = DrafterTrainConfig(seed=seed, n_train=n_train, n_val=len(val_prompts), threads=threads)
    if minutes is not None:
        cfg = replace(cfg, minutes=minutes)
    else:
        cfg = replace(cfg, steps=steps or SHIPPED_STEPS)
    target = {"model": name, "options": options, "weights": fingerprint, "prompts": source}
    return train_drafter(adapter, prompts, val_prompts, out, drafter_name(name), work_dir, cfg, target, resume, log)


def _prompts(path: Path | None, count: int, seed: int, held_out: int) -> tuple[list[str], list[str], str]:
    """(training captions, held-out captions, where they came from)."""
    if path is not None:
        from sjdbench.data.prompts import read_prompt_file

        texts = read_prompt_file(path)
        if len(texts) < count + held_out:
            raise UserError(
                f"{path} has {len(texts)} prompts; --samples {count} needs {count + held_out} (with the held-out ones)"
            )
        return texts[:count], texts[count : count + held_out], str(path)
    from sjdbench.toyworld.world import render_batch

    _, train = render_batch(CAPTION_SEED + seed, 0, count)
    _, val = render_batch(CAPTION_SEED + seed + 1, 0, held_out)
    return train, val, f"toy-world captions (seed {CAPTION_SEED + seed}; held out: {CAPTION_SEED + seed + 1})"
