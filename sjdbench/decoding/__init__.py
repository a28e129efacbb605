"""Decoding: one loop (loop.py) and its composable parts (proposal x verifier x init x topology)."""
