"""Upstreams with several endpoints (a fleet of engine replicas): which replica holds which
prefix (`block_locator`), how loaded each is (`load`), the pure endpoint picker (`picker`)
that the gateway and `bench/fleet/sim/simulator.py` share, and the live parts around it: endpoint
discovery and health (`endpoints`, `health`), KV events (`kv_subscriber`) and metrics."""
