"""How loaded each endpoint is, as one gateway can tell: its own requests there exactly, the
other gateways' from the replica's scraped `/metrics`.

`LoadTracker` counts this gateway's requests per endpoint: sent, not yet at their first
token (still to prefill, with the prompt tokens the picker expected the replica to compute),
and finished. A scrape of the replica's running and waiting requests (`observe`) gives the
rest of the fleet's traffic there: whatever the replica runs beyond this gateway's own.
Pure bookkeeping, shared by the live gateway and the fleet simulator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EndpointLoad:
    """One endpoint's load as the picker sees it."""

    in_flight: int = 0  # this gateway's requests there, not finished
    prefilling: int = 0  # of those, the ones without a first token yet
    pending_tokens: int = 0  # their prompt tokens the replica still has to compute
    others_running: int = 0  # other gateways' requests it runs (from its /metrics)
    others_waiting: int = 0  # other gateways' requests queued there
    kv_usage: float = 0.0  # share of its KV blocks held by running requests (0..1)

    @property
    def requests(self) -> int:
        """Every request at the endpoint, whoever sent it."""
        return self.in_flight + self.others_running + self.others_waiting

    @property
    def decoding(self) -> int:
        """Requests past their first token, whoever sent them."""
        return self.in_flight - self.prefilling + self.others_running


@dataclass
class Ticket:
    """One request's place in the tracker, handed back at its first token and its end."""

    endpoint: str
    new_tokens: int
    prefilling: bool = True
    done: bool = False


class LoadTracker:
    """This gateway's requests per endpoint, plus what scrapes say of the others'."""

    def __init__(self) -> None:
        self.loads: dict[str, EndpointLoad] = {}

    def load(self, endpoint: str) -> EndpointLoad:
        found = self.loads.get(endpoint)
        if found is None:
            found = self.loads[endpoint] = EndpointLoad()
        return found

    def sent(self, endpoint: str, new_tokens: int) -> Ticket:
        """A request went to `endpoint`, expected to prefill `new_tokens` there."""
        load = self.load(endpoint)
        load.in_flight += 1
        load.prefilling += 1
        load.pending_tokens += new_tokens
        return Ticket(endpoint, new_tokens)

    def first_token(self, ticket: Ticket) -> None:
        if ticket.prefilling and not ticket.done:
            ticket.prefilling = False
            load = self.load(ticket.endpoint)
            load.prefilling -= 1
            load.pending_tokens -= ticket.new_tokens

    def finished(self, ticket: Ticket) -> None:
        """The request ended (answered, failed or abandoned); idempotent."""
        if ticket.done:
            return
        self.first_token(ticket)
        ticket.done = True
        self.load(ticket.endpoint).in_flight -= 1

    def observe(self, endpoint: str, running: int, waiting: int, kv_usage: float) -> None:
        """A scrape of `endpoint`: the requests it runs and queues beyond this gateway's."""
        load = self.load(endpoint)
        load.others_waiting = max(0, waiting - load.prefilling)
        load.others_running = max(0, running - (load.in_flight - load.prefilling))
        load.kv_usage = kv_usage

    def forget(self, endpoint: str) -> None:
        """Drop what scrapes said (the endpoint left or restarted); own requests stay."""
        load = self.load(endpoint)
        load.others_running = load.others_waiting = 0
        load.kv_usage = 0.0
