"""Studies of one question each: the gateway's own overhead, the dashboard's cost, overload
and the long soak, the prompt transforms."""
