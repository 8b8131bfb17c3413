"""The engine's compiled CPU kernels (the .cpp files here); engine/kernels/build.py builds,
verifies and loads them, docs/internals.md says what each one replaces."""
