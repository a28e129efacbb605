"""sjdbench."""
