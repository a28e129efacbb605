"""sjdbench: the reference benchmark for speculative Jacobi decoding of autoregressive text-to-image
models. The Python API (implemented in sjdbench.api; imported on first use, so `import sjdbench`
stays cheap):

    sjdbench.load_model(name, device="auto", **options) -> model adapter
    sjdbench.build_decoder(preset, **overrides)          -> resolved decoder spec
    sjdbench.decode(model, prompt, decoder, seed=0)      -> .tokens, .image, .stats, .latency_s
    sjdbench.load_runs(results_dir=None, **filters)      -> pandas DataFrame with speedup, CI and N
    sjdbench.load_reference(name)                        -> a published table as a DataFrame
    sjdbench.compare_reference(name, results_dir=None, **filters) -> our runs beside it
"""

from typing import Any

__all__ = ["build_decoder", "compare_reference", "decode", "load_model", "load_reference", "load_runs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from sjdbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'sjdbench' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
