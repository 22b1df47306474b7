"""Hand-run benchmarks of the engine (never run by tests); see bench/README.md."""
