"""The second KV tier at the engine's edges: `headstart engine`'s flags and their bad values,
and the `headstart_engine_kv_tier_*` series on `/metrics`."""

from __future__ import annotations

import re

import pytest

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.serving.metrics import EngineMetrics
from engine.serving.server import engine_config, main, parse_args


def test_the_flags_fill_the_config(tmp_path):
    config = engine_config(parse_args(["--kv-offload-mb", "256",
                                       "--kv-offload-dir", str(tmp_path / "tier")]))
    assert (config.kv_offload_mb, config.kv_offload_dir) == (256, str(tmp_path / "tier"))
    assert engine_config(parse_args([])).kv_offload_mb == 0


def test_an_unwritable_dir_stops_the_engine_with_an_error_naming_it(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as stop:
        main(["--kv-offload-mb", "64", "--kv-offload-dir", str(blocker / "tier")])
    assert re.fullmatch(r"headstart engine: error: kv_offload_dir .*/file/tier: cannot write "
                        r"there: Not a directory", str(stop.value.code))
    with pytest.raises(SystemExit) as stop:
        main(["--kv-offload-dir", str(tmp_path)])
    assert "kv_offload_dir needs kv_offload_mb" in str(stop.value.code)


def test_metrics_show_the_tier(smollm_bf16, tmp_path):
    engine = AsyncEngine(EngineConfig(num_kv_blocks=32, kv_offload_mb=8,
                                      kv_offload_dir=str(tmp_path)), loaded=tuple(smollm_bf16))
    text = EngineMetrics(engine).render()[0].decode()
    capacity = 8 * 1024 * 1024 // (30 * 2 * 16 * 3 * 64 * 2)
    assert f"headstart_engine_kv_tier_capacity_blocks {capacity}.0" in text
    for line in ("headstart_engine_kv_tier_blocks 0.0",
                 "headstart_engine_kv_tier_offloaded_blocks_total 0.0",
                 "headstart_engine_kv_tier_reloaded_blocks_total 0.0",
                 'headstart_engine_kv_tier_bytes_total{direction="offload"} 0.0',
                 'headstart_engine_kv_tier_bytes_total{direction="reload"} 0.0'):
        assert line in text
    plain = AsyncEngine(EngineConfig(num_kv_blocks=32), loaded=tuple(smollm_bf16))
    assert "kv_tier" not in EngineMetrics(plain).render()[0].decode()
