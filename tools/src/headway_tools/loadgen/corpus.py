"""A deterministic corpus of English-like sentences for load and benchmarks, no downloads.

Sentences are drawn from a seeded ``random.Random`` over a fixed list of common
words, each of which is one WordPiece token in the BERT uncased vocabulary (a
comma and the final period are one token each too). A sentence first draws
its length in tokens, uniform in ``[MIN_TOKENS, MAX_TOKENS]`` counting
``[CLS]`` and ``[SEP]``, then spends exactly that budget on words and
occasional commas: the lengths vary enough that padding a batch to its longest
member is visibly costly. The same ``(n, seed)`` always gives the same list on
every machine (``random.Random`` with an integer seed is stable across Python
versions).
"""

from __future__ import annotations

import random

MIN_TOKENS = 13
MAX_TOKENS = 98
_FIXED_TOKENS = 3  # [CLS], [SEP] and the final period
COMMA_PROBABILITY = 0.07
DEFAULT_SEED = 20240611

_WORD_LIST = """
    the a an this that these those some every each many few most other same
    people person child family friend team company city country world school
    house room door window table water food money time year day week night
    morning evening game story book letter paper picture music song word name
    question answer problem reason result idea plan point part side end place
    road street car train plane ship river lake sea mountain tree garden field
    market office bank shop hospital church court police government party state
    history science language nature health power energy service system program
    report study research test price cost value number group area level
    is was are were has had have will would could should can may might must
    make made take took give gave find found tell told ask asked work worked
    call called try tried leave left feel felt bring brought begin began keep
    kept hold held write wrote stand stood hear heard let meet met run ran
    pay paid sit sat speak spoke lie lay lead led grow grew lose lost fall fell
    send sent build built understand understood draw drew break broke spend spent
    cut rise rose drive drove buy bought wear wore choose chose open opened
    new old good bad great small large long short high low young early late
    important public private local national social political economic real
    best better sure free full special easy hard clear recent certain personal
    red blue green white black dark light strong weak happy simple
    and or but so because while after before when where if although since
    until unless though whether as than then also very just only still even
    again never always often sometimes already almost quite rather perhaps
    in on at by for with about against between into through during without
    under over above below from up down out off near across behind around
    he she it we they you i him her them us his their our its my your
"""
WORDS: tuple[str, ...] = tuple(_WORD_LIST.split())


def sentence(rng: random.Random) -> str:
    """One sentence: a capitalised first word, occasional commas, a final period."""
    budget = rng.randint(MIN_TOKENS, MAX_TOKENS) - _FIXED_TOKENS
    parts: list[str] = []
    while budget > 0:
        word = rng.choice(WORDS)
        budget -= 1
        if budget >= 2 and len(parts) > 1 and rng.random() < COMMA_PROBABILITY:
            word += ","
            budget -= 1
        parts.append(word)
    parts[0] = parts[0].capitalize()
    return " ".join(parts) + "."


def sentences(n: int, seed: int = DEFAULT_SEED) -> list[str]:
    """``n`` sentences, the same ones for the same ``(n, seed)``."""
    rng = random.Random(seed)
    return [sentence(rng) for _ in range(n)]
