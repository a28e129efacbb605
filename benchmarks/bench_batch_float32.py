"""How often float32 batching changes a sample, and why: each sample decoded alone and in a batch of B,
in float32 and in float64, on the toy; for every sample whose tokens differ, the first random decision
that came out differently and how close it was to a tie in each decode.

    python benchmarks/bench_batch_float32.py                  # sjd, sjd_pp, sjd_pac, pjd, ar; 16 prompts
    python benchmarks/bench_batch_float32.py --decoders sjd --prompts 32 --batch 8

In float32 a batched forward's logits differ from the unbatched ones in the last bits (the matmul is
blocked by the number of rows), so a decision whose two sides are that close can go either way. Every
decision the loop makes with a uniform u is recorded per sample, in order, with its margin: for an
acceptance test (the exact verifier) |p(d) - u q(d)|, for a draw from a distribution the distance of
u * total to the nearest CDF boundary, and for PJD's keep test, which needs no uniform,
|p(d) - threshold q(d)|. Up to the first differing decision both decodes drew the same
numbers, so the decision lists align; the first difference is a numerical tie when its margin is of
the order of the logits' float32 noise (about 1e-6 here) in both decodes. float64 batched decodes equal
the unbatched ones token for token (tests/test_batching.py), which this run also counts.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout without installing

import sjdbench.decoding.loop as loop  # noqa: E402
import sjdbench.decoding.proposals.coupled as coupled  # noqa: E402
import sjdbench.decoding.proposals.resample as resample  # noqa: E402
import sjdbench.decoding.proposals.reuse as reuse  # noqa: E402
import sjdbench.decoding.topologies.tree as tree  # noqa: E402
from sjdbench.config import (
    build_preset,  # noqa: E402
    compose_run,  # noqa: E402
)
from sjdbench.data.prompts import load_prompts  # noqa: E402
from sjdbench.decoding.loop import Request, jacobi_decode_batch  # noqa: E402
from sjdbench.decoding.randomness import Draws  # noqa: E402
from sjdbench.decoding.verifiers.exact import ExactVerifier  # noqa: E402
from sjdbench.models.toy.model import build_toy_adapter  # noqa: E402

DECISIONS: dict[int, list[tuple[str, int, float]]] = defaultdict(list)  # id(generator) -> decisions in order
_last: dict[str, object] = {}


def _rows_of(draws: Draws) -> list[int]:
    return [id(g) for g, count in zip(draws.generators, draws.counts) for _ in range(count)]


_uniform = Draws.uniform


def uniform(self: Draws, *tail: int) -> torch.Tensor:
    values = _uniform(self, *tail)
    _last.update(owners=_rows_of(self), u=values.reshape(values.shape[0], -1)[:, 0])
    return values


_accept = ExactVerifier.accept


def accept(self, p, q, drafts, u):
    passed = _accept(self, p, q, drafts, u)
    p_d = p.gather(-1, drafts[:, None]).squeeze(-1).double()
    q_d = q.gather(-1, drafts[:, None]).squeeze(-1).double()
    margins = (p_d - u.double() * q_d).abs().tolist()
    for owner, ok, margin in zip(_last["owners"], passed.tolist(), margins):
        DECISIONS[owner].append(("accept", int(ok), margin))
    return passed


_sample = loop.sample


def sample(probs: torch.Tensor, draws: Draws) -> torch.Tensor:
    drawn = _sample(probs, draws)
    cdf = probs.double().cumsum(-1)
    target = _last["u"].double() * cdf[:, -1]
    below = torch.where(drawn > 0, cdf.gather(-1, (drawn - 1).clamp_min(0)[:, None]).squeeze(-1), 0.0)
    above = cdf.gather(-1, drawn[:, None]).squeeze(-1)
    margins = torch.minimum(target - below, above - target).abs() / cdf[:, -1]
    for owner, token, margin in zip(_last["owners"], drawn.tolist(), margins.tolist()):
        DECISIONS[owner].append(("draw", int(token), margin))
    return drawn


_propose_reuse = reuse.ReuseProposal.propose


def propose_reuse(self, p, carried, ctx):
    """PJD's keep test, min(1, p/q) > threshold, is a decision without a uniform: recorded too, with
    its margin |p(d) - threshold q(d)|, before the draws the proposal makes."""
    p_d = p.gather(-1, carried.drafts[:, None]).squeeze(-1).double()
    q_d = carried.refs.gather(-1, carried.drafts[:, None]).squeeze(-1).double()
    margins = (p_d - self.config.threshold * q_d).abs().tolist()
    keep = ((p_d > self.config.threshold * q_d) & carried.has_old).tolist()
    for owner, has_old, kept, margin in zip(_rows_of(ctx.draws), carried.has_old.tolist(), keep, margins):
        if has_old:
            DECISIONS[owner].append(("keep", int(kept), margin))
    return _propose_reuse(self, p, carried, ctx)


def install() -> None:
    Draws.uniform = uniform
    ExactVerifier.accept = accept
    reuse.ReuseProposal.propose = propose_reuse
    for module in (loop, resample, coupled, reuse, tree):
        module.sample = sample


def decode(adapter, prompts, decoder, batch: int) -> dict[int, tuple[list[int], list]]:
    """key -> (tokens, decisions) of every prompt, `batch` at a time."""
    generators = [torch.Generator().manual_seed(1000 + i) for i in range(len(prompts))]
    requests = [Request(p.text, g, key=i) for i, (p, g) in enumerate(zip(prompts, generators))]
    DECISIONS.clear()
    out = {}
    for request, result in jacobi_decode_batch(adapter, requests, decoder, adapter.default_sampling, batch):
        out[request.key] = (result.tokens.tolist(), list(DECISIONS[id(request.generator)]))
    return out


def first_difference(a: list, b: list) -> tuple[int, tuple, tuple] | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x[:2] != y[:2]:
            return i, x, y
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decoders", nargs="+", default=["ar", "sjd", "sjd_pp", "sjd_pac", "pjd"])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    install()
    prompts, _ = load_prompts(compose_run(["data=toy", f"data.limit={args.prompts}"]).data)
    adapters = {"float32": build_toy_adapter(), "float64": build_toy_adapter(dtype="fp64")}
    print(f"# toy, {len(prompts)} held-out captions, B = {args.batch} against B = 1, W = 16")
    print(f"{'decoder':<10}{'dtype':>8}{'differ':>8}  first difference: decision #, kind, margin alone / batched")
    for name in args.decoders:
        for dtype, adapter in adapters.items():
            decoder = build_preset(name, adapter, *([] if name == "ar" else ["decoder.window=16"]))
            alone = decode(adapter, prompts, decoder, 1)
            batched = decode(adapter, prompts, decoder, args.batch)
            differ = [k for k in alone if alone[k][0] != batched[k][0]]
            print(f"{name:<10}{dtype:>8}{len(differ):>5}/{len(prompts):<3}", end="")
            notes = []
            for key in differ:
                found = first_difference(alone[key][1], batched[key][1])
                if found is None:
                    notes.append(f"prompt {key}: no differing decision recorded")
                    continue
                index, a, b = found
                notes.append(f"prompt {key}: #{index} {a[0]}, {a[2]:.1e} / {b[2]:.1e}")
            print("  " + ("; ".join(notes) if notes else "-"))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
