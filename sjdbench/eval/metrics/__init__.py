"""Set-level image metrics (Fréchet distance; k-nearest-neighbour manifolds for precision and recall;
FID and CLIP-Score build on these)."""
