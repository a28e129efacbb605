"""`sjdbench report`: the paper's tables and figures from the results store (see build.py)."""
