"""The results store and what is read from it: runs, summaries, AR pairing and speedups, selection."""
