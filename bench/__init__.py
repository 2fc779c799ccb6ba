"""The benchmarks (`make bench`, `make bench-broker`, `make bench-nemo-gym`), run as modules from the
repository root: `python -m bench.episodes`."""
