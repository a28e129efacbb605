"""Set-level image metrics (Fréchet distance; FID and CLIP-Score build on these)."""
