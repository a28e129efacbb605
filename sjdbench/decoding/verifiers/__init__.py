"""Verification rules, one per file; registered by `conf/decoder/verifier/<name>.yaml`.

All rules are vectorised over the window; the loop takes the accepted prefix with a cumulative
product of the flags (no Python loop per slot).
"""
