"""Engine replicas behind the gateway: live runs on this machine (`live`, `live_kill`,
`replicas`) and the simulator that plans past it (`sim`)."""
