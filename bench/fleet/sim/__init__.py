"""The fleet simulator: simulated replicas and traces behind the gateway's real endpoint
picker (`simulator`), its scenarios and report, and its calibration against live runs."""
