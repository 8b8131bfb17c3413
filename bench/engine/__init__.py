"""Benchmarks of the bundled engine alone: against Hugging Face transformers and llama.cpp's
`llama-server` (`engine_bench`), its kernels, attention, prefill and int8 weights."""
