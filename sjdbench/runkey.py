"""The pairing key: what two runs must share for their samples to be compared prompt by prompt, and
the id of the AR run with those facts (the baseline every speedup divides by).

Torch-free and free of sjdbench imports, so both the config layer (which computes run ids) and the
results layer (which pairs stored runs) read the key from one place below them. The run id of any
decoder is `sjdbench.config.identity.run_id`; the AR run's id is computed here from AR's decoder
identity (W = 1 and whether it is greedy: nothing else of a decoder matters without drafts), and a
test holds the two equal.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

SAMPLING_KEYS = ("cfg_scale", "temperature", "top_k", "top_p")  # the sampling overrides a run id hashes


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class SampleFacts:
    """Everything besides the decoder that determines a run's samples (so AR's samples entirely).

    weights: the fingerprint of the model's weight files, so a retrained model never resumes (and
    mixes into) the results of the previous one; None for models without files (debug). sampling:
    the overrides (None = the model's default), as the run id has always hashed them.
    """

    model: str
    options: Mapping[str, Any] = field(hash=False)
    data: str
    prompts_sha: str
    sampling: Mapping[str, Any] = field(hash=False)
    seed: int
    samples_per_prompt: int
    device: str  # the device type: cpu, cuda, mps
    weights: str | None = None
    batch_size: int = 1  # samples decoded in lockstep: its latencies and throughput are its own

    @classmethod
    def stored(
        cls, config: Mapping[str, Any], env: Mapping[str, Any], summary: Mapping[str, Any]
    ) -> SampleFacts | None:
        """The facts of a stored run, from its config.yaml, env.json and summary.json as written (no
        config is re-composed, so stores of other versions read); None when the files lack them."""
        model = config.get("model") or {}
        name = model.get("name") or summary.get("model")
        sha = env.get("prompts_sha")
        if not name or not sha:
            return None
        sampling = config.get("sampling") or {}
        return cls(
            str(name),
            dict(model.get("options") or {}),
            str((config.get("data") or {}).get("name") or summary.get("data")),
            str(sha),
            {key: sampling.get(key) for key in SAMPLING_KEYS},
            int(config.get("seed", summary.get("seed", 0))),
            int(config.get("samples_per_prompt", 1)),
            str(env.get("device") or summary.get("device") or "cpu").split(":")[0],
            env.get("weights"),
            int(config.get("batch_size") or 1),
        )

    def fields(self) -> dict[str, Any]:
        """The hashed fields of a run id, without its decoder."""
        fields: dict[str, Any] = {
            # the builder's arguments: options, with the top-level model keys that are set folded in
            "model": {"name": self.model, "options": dict(self.options)},
            "data": {"name": self.data, "prompts_sha": self.prompts_sha},
            "sampling": {key: self.sampling.get(key) for key in SAMPLING_KEYS},
            "seed": self.seed,
            "samples_per_prompt": self.samples_per_prompt,
            "device": self.device,
        }
        if self.weights is not None:
            fields["weights"] = self.weights
        if self.batch_size != 1:  # runs decoded one at a time keep the ids they always had
            fields["batch_size"] = self.batch_size
        return fields


def ar_identity(greedy: bool = False) -> dict[str, Any]:
    """The decoder identity of AR (W = 1): only whether it takes the argmax matters."""
    return {"window": 1, "greedy": greedy}


def hashed_run_id(facts: SampleFacts, family: str, decoder_identity: Mapping[str, Any]) -> str:
    """`<model>-<family>-<12 hex>`: the hash of the facts and the decoder's identity."""
    fields = {**facts.fields(), "decoder": dict(decoder_identity)}
    digest = hashlib.sha256(canonical_json(fields).encode()).hexdigest()
    return f"{facts.model}-{family}-{digest[:12]}"


def ar_run_id(facts: SampleFacts, seed_offset: int = 0, greedy: bool = False) -> str:
    """The id of the AR run with these facts (at seed + seed_offset): the run `sjdbench run
    decoder=ar` with the same settings gets, and the baseline a sweep adds."""
    return hashed_run_id(dataclasses.replace(facts, seed=facts.seed + seed_offset), "ar", ar_identity(greedy))
