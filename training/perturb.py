"""Perturbations that keep a question's answer, or change it by one small edit.

Each one teaches a phenomenon the verifier must read in any wording: fillers, typos,
reordered clauses and synonyms leave the answer as it is; a negation or antonym, another
number, date or unit, a look-alike identifier, an added constraint or a related item
changes it. All take a `random.Random` so the generated set is reproducible.
"""

from __future__ import annotations

import random
import re

PREFIXES = ["hi, ", "hey there! ", "quick question: ", "sorry to bother you, but ", "hello, ",
            "I was wondering, ", "um, ", "can you help? ", "just curious, ", "good morning! ",
            "one more thing: ", "please tell me: "]
SUFFIXES = [" thanks!", " thank you", " cheers", " any idea?", " please", " asap", " :)",
            " thanks in advance", " if you know"]
SYNONYMS = [("buy", "purchase"), ("fix", "repair"), ("start", "begin"), ("big", "large"),
            ("quick", "fast"), ("children", "kids"), ("film", "movie"), ("price", "cost"),
            ("remove", "delete"), ("pick", "choose"), ("need", "require"), ("get", "obtain"),
            ("help", "assist"), ("show", "display"), ("end", "finish"), ("shop", "store"),
            ("car", "vehicle"), ("phone", "mobile"), ("holiday", "vacation"), ("doctor", "physician"),
            ("near", "close to"), ("often", "frequently"), ("usual", "typical"), ("trip", "journey"),
            ("make", "create"), ("check", "verify"), ("tell", "inform"), ("answer", "reply")]
ANTONYM_VERBS = [("enable", "disable"), ("turn on", "turn off"), ("show", "hide"),
                 ("lock", "unlock"), ("allow", "block"), ("increase", "decrease"),
                 ("subscribe to", "unsubscribe from"), ("mute", "unmute"), ("encrypt", "decrypt"),
                 ("install", "uninstall"), ("add", "remove"), ("follow", "unfollow"),
                 ("archive", "unarchive"), ("pin", "unpin"), ("start", "stop"), ("open", "close"),
                 ("upload", "download"), ("import", "export"), ("connect", "disconnect"),
                 ("zoom in on", "zoom out of"), ("expand", "collapse"), ("freeze", "unfreeze")]
OBJECTS = ["notifications", "the sidebar", "two-step login", "cookies", "my account",
           "the microphone", "sharing", "the firewall", "comments", "the keyboard", "my profile",
           "the plugin", "this channel", "the printer", "the folder", "auto-play", "my card",
           "location access", "the extension", "the spreadsheet", "the calendar", "the widget"]
ANTONYM_ADJ = [("safe", "dangerous"), ("good", "bad"), ("cheap", "expensive"),
               ("allowed", "forbidden"), ("legal", "illegal"), ("healthy", "unhealthy"),
               ("open", "closed"), ("easy", "hard"), ("common", "rare"), ("better", "worse"),
               ("hot", "cold"), ("early", "late"), ("busy", "quiet"), ("wet", "dry")]
ANTONYM_NOUNS = [("advantages", "disadvantages"), ("benefits", "risks"), ("pros", "cons"),
                 ("strengths", "weaknesses"), ("best", "worst"), ("most", "least"),
                 ("highest", "lowest"), ("first", "last"), ("before", "after"), ("arrivals", "departures"),
                 ("income", "expenses"), ("buyers", "sellers"), ("winners", "losers")]
CONSTRAINTS = ["in one sentence", "as a table", "as a bulleted list", "in JSON", "with sources",
               "citing peer-reviewed studies", "for a five-year-old", "for experts", "in French",
               "in Spanish", "in under 50 words", "step by step with code", "as a haiku",
               "without any jargon", "with three examples", "for someone on a budget",
               "for a vegetarian", "in winter", "at night", "for beginners", "in detail with diagrams",
               "and compare it with the alternatives", "and give the history too",
               "without using the internet", "for a small business", "in British English spelling"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
UNITS = [("kg", "lb"), ("km", "miles"), ("litres", "gallons"), ("cm", "inches"),
         ("hours", "minutes"), ("days", "weeks"), ("°C", "°F"), ("mg", "g"), ("euros", "dollars"),
         ("GB", "MB"), ("months", "years")]
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven",
                8: "eight", 9: "nine", 10: "ten", 12: "twelve", 20: "twenty", 30: "thirty"}
_LEADING_CLAUSE = re.compile(
    r"^(how|what|where|when|which|why|can|should|is|do|does)\b(.*?) "
    r"((?:in|on|for|during|after|before|with|at|when|if|while) [^,?]+)\?$", re.I)


def with_filler(q: str, rnd: random.Random) -> str:
    """The question with a greeting or a sign-off around it."""
    if rnd.random() < 0.6:
        q = rnd.choice(PREFIXES) + q[0].lower() + q[1:]
    if rnd.random() < 0.6 or not q.lower().startswith(tuple(p.strip() for p in PREFIXES)):
        q = q + rnd.choice(SUFFIXES)
    return q


def with_typos(q: str, rnd: random.Random, n: int = 1) -> str:
    """One or two letters dropped, doubled, swapped or replaced in words of 4+ letters
    (never in a word holding a digit, which may be an identifier)."""
    words = q.split(" ")
    spots = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha()]
    for i in rnd.sample(spots, min(n, len(spots))):
        w, j = words[i], rnd.randrange(1, len(words[i]) - 1)
        edit = rnd.choice(("drop", "double", "swap", "near"))
        if edit == "drop":
            w = w[:j] + w[j + 1:]
        elif edit == "double":
            w = w[:j] + w[j] + w[j:]
        elif edit == "swap":
            w = w[:j - 1] + w[j] + w[j - 1] + w[j + 1:]
        else:
            w = w[:j] + rnd.choice("aeiourstnl") + w[j + 1:]
        words[i] = w
    out = " ".join(words)
    return out.lower().rstrip("?") if rnd.random() < 0.3 else out


def reordered(q: str) -> str | None:
    """A trailing clause moved to the front ("How do I X in Y?" -> "In Y, how do I X?")."""
    m = _LEADING_CLAUSE.match(q)
    if not m:
        return None
    head, rest, clause = m.groups()
    return f"{clause[0].upper()}{clause[1:]}, {head.lower()}{rest}?"


def with_synonym(q: str, rnd: random.Random) -> str | None:
    """One word swapped for a synonym, either way round; None when no listed word is in q."""
    found = [(a, b) for x, y in SYNONYMS for a, b in ((x, y), (y, x))
             if re.search(rf"\b{re.escape(a)}\b", q)]
    if not found:
        return None
    a, b = rnd.choice(found)
    return re.sub(rf"\b{re.escape(a)}\b", b, q, count=1)


def lookalike(ident: str, rnd: random.Random) -> str:
    """An identifier one character away: a digit changed, two adjacent characters swapped,
    a letter changed or added."""
    chars = list(ident)
    digits = [i for i, c in enumerate(chars) if c.isdigit()]
    choice = rnd.random()
    if digits and choice < 0.45:
        i = rnd.choice(digits)
        chars[i] = rnd.choice([d for d in "0123456789" if d != chars[i]])
    elif choice < 0.65 and len(chars) > 2:
        i = rnd.randrange(len(chars) - 1)
        if chars[i] != chars[i + 1]:
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
        else:
            chars.insert(i, "x")
    elif choice < 0.85:
        letters = [i for i, c in enumerate(chars) if c.isalpha()]
        i = rnd.choice(letters or [0])
        pool = "ABCDEFGHKLMNPRSTX" if chars[i].isupper() else "abcdeilmnoprstu"
        chars[i] = rnd.choice([c for c in pool if c != chars[i]])
    else:
        i = rnd.randrange(1, len(chars) + 1)
        chars.insert(i, rnd.choice("s2xn") if chars[i - 1].islower() else rnd.choice("2SX"))
    out = "".join(chars)
    return out if out != ident else ident + "2"


def with_constraint(q: str, rnd: random.Random) -> str:
    """The request narrowed by a format, length, audience, source, language or scope."""
    return q.rstrip("?.!") + " " + rnd.choice(CONSTRAINTS) + ("?" if q.endswith("?") else ".")


def spelled(n: int) -> str:
    """A small number as a word where one is known."""
    return NUMBER_WORDS.get(n, str(n))
