"""Benchmarks of the caches: speed through a real gateway with Redis (`cache_bench`), the
verifier's forms side by side (`verifier_bench`), what another sentence encoder could add
(`embedder_headroom`)."""
