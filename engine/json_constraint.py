"""JSON mode (`response_format: {"type": "json_object"}`): only tokens that keep the answer a
prefix of one JSON object may be sampled, and once the object is closed the answer ends.

`JsonPrefix` reads bytes with a small pushdown automaton (containers on a stack, one mode
for what may come next) and says whether they can still begin a valid JSON object.
`JsonConstraint` applies it to tokens: the sampler asks `allows(token)` of its pick, and of
the next best picks until one fits (`engine/sampler.py`), so the common case costs one
check. Plain Python, no torch. Bytes, not characters: a byte-level token may hold part of a
UTF-8 character, which is fine inside a string and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence

_WHITESPACE = frozenset(b" \t\n\r")
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = frozenset(b'"\\/bfnrtu')
_LITERALS = {ord("t"): b"rue", ord("f"): b"alse", ord("n"): b"ull"}
MAX_BLANK_RUN = 24  # whitespace bytes in a row outside strings: a model can loop on them

# modes: what the next byte may be
_START, _VALUE, _KEY_OR_CLOSE, _KEY, _COLON, _AFTER, _ITEM_OR_CLOSE = range(7)
_STRING, _ESCAPE, _UNICODE, _LITERAL, _DONE = range(7, 12)
_NUMBER = 12  # then `number` holds its part: sign, zero, int, dot, frac, e, esign, exp
_NUMBER_ENDS = frozenset({"zero", "int", "frac", "exp"})


class JsonPrefix:
    """Bytes fed so far form a prefix of a JSON object (`feed` says False the moment they
    cannot); `complete` once the object is closed."""

    __slots__ = ("stack", "mode", "key", "pending", "number", "blank")

    def __init__(self) -> None:
        self.stack: list[int] = []  # b"{" or b"[" of the open containers
        self.mode = _START
        self.key = False  # the open string is an object key
        self.pending = b""  # the rest of a literal, or hex digits left in a \\u escape
        self.number = ""
        self.blank = 0

    @property
    def complete(self) -> bool:
        return self.mode == _DONE

    def copy(self) -> JsonPrefix:
        other = JsonPrefix.__new__(JsonPrefix)
        other.stack, other.mode, other.key = self.stack.copy(), self.mode, self.key
        other.pending, other.number, other.blank = self.pending, self.number, self.blank
        return other

    def feed_all(self, data: bytes) -> bool:
        return all(self.feed(b) for b in data)

    def feed(self, b: int) -> bool:
        mode = self.mode
        if mode == _STRING:
            if b == 0x22:  # "
                self.mode = _COLON if self.key else _AFTER
            elif b == 0x5C:  # backslash
                self.mode = _ESCAPE
            elif b < 0x20:
                return False  # control characters must be escaped
            return True
        if mode == _ESCAPE:
            if b not in _ESCAPES:
                return False
            self.mode, self.pending = (_UNICODE, b"xxxx") if b == ord("u") else (_STRING, b"")
            return True
        if mode == _UNICODE:
            if b not in _HEX:
                return False
            self.pending = self.pending[1:]
            if not self.pending:
                self.mode = _STRING
            return True
        if mode == _LITERAL:
            if b != self.pending[0]:
                return False
            self.pending = self.pending[1:]
            if not self.pending:
                self.mode = _AFTER
            return True
        if mode == _NUMBER:
            if self._number(b):
                return True
            if self.number not in _NUMBER_ENDS:
                return False
            self.mode = _AFTER  # the byte ends the number; read it as what follows one
            mode = _AFTER
        if b in _WHITESPACE:
            self.blank += 1
            return mode != _DONE and self.blank <= MAX_BLANK_RUN
        self.blank = 0
        if mode == _START:
            return self._open(b) if b == ord("{") else False
        if mode in (_VALUE, _ITEM_OR_CLOSE):
            if mode == _ITEM_OR_CLOSE and b == ord("]"):
                return self._close(b)
            return self._value(b)
        if mode in (_KEY_OR_CLOSE, _KEY):
            if mode == _KEY_OR_CLOSE and b == ord("}"):
                return self._close(b)
            if b != 0x22:
                return False
            self.mode, self.key = _STRING, True
            return True
        if mode == _COLON:
            if b != ord(":"):
                return False
            self.mode = _VALUE
            return True
        if mode == _AFTER:
            top = self.stack[-1]
            if b == ord(","):
                self.mode = _KEY if top == ord("{") else _VALUE
                return True
            if b == (ord("}") if top == ord("{") else ord("]")):
                return self._close(b)
            return False
        return False  # _DONE: nothing may follow

    def _value(self, b: int) -> bool:
        if b in (ord("{"), ord("[")):
            return self._open(b)
        if b == 0x22:
            self.mode, self.key = _STRING, False
        elif b in _LITERALS:
            self.mode, self.pending = _LITERAL, _LITERALS[b]
        elif b == ord("-"):
            self.mode, self.number = _NUMBER, "sign"
        elif b in _DIGITS:
            self.mode, self.number = _NUMBER, "zero" if b == ord("0") else "int"
        else:
            return False
        return True

    def _number(self, b: int) -> bool:
        """Advance the number by `b`; False when `b` cannot continue it."""
        part, digit = self.number, b in _DIGITS
        if part == "sign" and digit:
            self.number = "zero" if b == ord("0") else "int"
        elif part in ("int", "frac", "exp") and digit:
            pass
        elif part in ("zero", "int") and b == ord("."):
            self.number = "dot"
        elif part in ("dot", "frac") and digit:
            self.number = "frac"
        elif part in ("zero", "int", "frac") and b in (ord("e"), ord("E")):
            self.number = "e"
        elif part == "e" and b in (ord("+"), ord("-")):
            self.number = "esign"
        elif part in ("e", "esign") and digit:
            self.number = "exp"
        else:
            return False
        return True

    def _open(self, b: int) -> bool:
        self.stack.append(b)
        self.mode = _KEY_OR_CLOSE if b == ord("{") else _ITEM_OR_CLOSE
        return True

    def _close(self, b: int) -> bool:
        self.stack.pop()
        self.mode = _AFTER if self.stack else _DONE
        return True


class JsonConstraint:
    """JSON mode for one sequence: which tokens may come next, given those so far."""

    def __init__(self, token_bytes: Sequence[bytes | None], eos_ids: list[int]) -> None:
        self.token_bytes = token_bytes  # None for tokens that are never part of JSON text
        self.eos_ids = eos_ids
        self.prefix = JsonPrefix()
        self._allowed: tuple[int, JsonPrefix] | None = None  # the last yes, and its state after

    def _bytes(self, token_id: int) -> bytes | None:
        return self.token_bytes[token_id] if token_id < len(self.token_bytes) else None

    @property
    def complete(self) -> bool:
        return self.prefix.complete

    def allows(self, token_id: int) -> bool:
        if token_id in self.eos_ids:
            return self.prefix.complete
        raw = self._bytes(token_id)
        if not raw:
            return False
        trial = self.prefix.copy()
        if not trial.feed_all(raw):
            return False
        self._allowed = (token_id, trial)  # `advance` takes it rather than reading it again
        return True

    def first_allowed(self, candidates: list[int]) -> int | None:
        """The first of `candidates` (best first) that may come next, the end of text once the
        object is closed; None when none fits."""
        if self.prefix.complete:
            return self.eos_ids[0]
        for token_id in candidates:
            if token_id not in self.eos_ids and self.allows(token_id):
                return token_id
        return None

    def advance(self, token_id: int) -> None:
        """Take in the token that was sampled (one `allows` said yes to)."""
        allowed, self._allowed = self._allowed, None
        if allowed is not None and allowed[0] == token_id:
            self.prefix = allowed[1]
            return
        raw = self._bytes(token_id)
        if raw and token_id not in self.eos_ids:
            self.prefix.feed_all(raw)
