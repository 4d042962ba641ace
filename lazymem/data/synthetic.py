"""A deterministic generator of LongMemEval-shaped data: the embedded default data set.

Each question gets its own multi-session, timestamped history of user/assistant chat in which a few
evidence turns (flagged `has_answer`, as in LongMemEval) sit among filler sessions about everyday topics.
Questions cover all six LongMemEval types, including knowledge updates, temporal reasoning and
multi-session aggregation, plus abstention questions (`_abs` ids) about things never mentioned.

Records are produced in the official LongMemEval JSON format and read back with the LongMemEval parser,
so the synthetic set exercises exactly the code path of the real benchmark. All text is generated here.
"""

from __future__ import annotations

import hashlib
import json
import random
from datetime import datetime, timedelta

from lazymem.data import longmemeval
from lazymem.data.schema import Dataset

FILLER = {
    "sleep": [
        "Any advice on falling asleep faster?",
        "Keep a fixed bedtime, dim the lights an hour before, and leave your phone outside the bedroom.",
        "Should I avoid coffee in the afternoon?",
        "Yes, caffeine lingers for hours; try to stop drinking it by early afternoon.",
    ],
    "budgeting": [
        "How do I start a simple monthly budget?",
        "List your fixed costs first, then set limits for groceries and fun, and track spending weekly.",
        "Is an app better than a spreadsheet for that?",
        "Either works; pick the one you will actually open every week.",
    ],
    "gardening": [
        "What vegetables are easy for a first balcony garden?",
        "Cherry tomatoes, lettuce and herbs like basil do well in pots with six hours of sun.",
        "How often should I water them?",
        "Check the soil daily and water when the top inch feels dry.",
    ],
    "travel packing": [
        "Can you help me pack light for a four day trip?",
        "Choose one color palette, roll your clothes, and bring a single pair of comfortable shoes.",
        "What about toiletries?",
        "Use small refillable bottles and share items like toothpaste if you travel with someone.",
    ],
    "photography": [
        "How can I take sharper photos with my phone?",
        "Clean the lens, tap to focus, and brace your elbows against your body when you shoot.",
        "Does night mode actually help?",
        "It does in low light, as long as you keep the phone still for the whole exposure.",
    ],
    "language learning": [
        "What is a good daily routine for learning Spanish?",
        "Fifteen minutes of flashcards, a short podcast, and saying a few sentences out loud each day.",
        "Should I focus on grammar first?",
        "Learn grammar alongside real phrases; speaking early keeps you motivated.",
    ],
    "home organization": [
        "My closet is a mess. Where do I start?",
        "Empty one shelf at a time and sort items into keep, donate and discard piles.",
        "How do I keep it tidy afterwards?",
        "Give every item a home and do a five minute reset each Sunday.",
    ],
    "running": [
        "How should I warm up before a run?",
        "Walk briskly for five minutes, then do leg swings and a few easy strides.",
        "Is it fine to run every day?",
        "Beginners do better with rest days between runs so the legs can recover.",
    ],
}

PETS = [("dog", "Biscuit"), ("cat", "Juniper"), ("rabbit", "Clover"), ("puppy", "Pepper")]
INSTRUMENTS = ["cello", "trumpet", "ukulele", "clarinet"]
BOOKS = ["The Quiet Orchard", "Letters from Vesta", "A Map of Small Islands", "The Glassmaker's Winter"]
DISHES = [("lemon garlic shrimp pasta", 20), ("chickpea curry", 25), ("sheet-pan chicken fajitas", 30)]
PREFERENCES = [
    ("vegetarian Thai food", "dinner this Friday", "meat-heavy dishes"),
    ("quiet hiking trails with lake views", "a weekend outing", "crowded city tours"),
    ("board games that take under an hour", "a game night with friends", "long strategy games"),
]
GADGETS = ["air fryer", "blender", "stand mixer", "rice cooker", "espresso machine"]
CLASSES = ["pottery", "salsa dancing", "watercolor painting", "rock climbing"]
SUBSCRIPTIONS = [("gym membership", 40, 55), ("phone plan", 30, 45), ("music streaming plan", 10, 12)]
DATE_FORMAT = longmemeval.DATE_FORMAT


def load(per_type: int = 2, abstention: int = 2, sessions: int = 6, turns: int = 4, seed: int = 0) -> Dataset:
    records = generate(per_type, abstention, sessions, turns, seed)
    blob = json.dumps(records, sort_keys=True).encode()
    name = (
        f"synthetic:per_type={per_type},abstention={abstention},sessions={sessions},turns={turns},seed={seed}"
    )
    ds = longmemeval.parse(records, name, hashlib.sha256(blob).hexdigest())
    ds.name = "synthetic"
    ds.source["name"] = "synthetic"
    return ds


def generate(per_type: int, abstention: int, sessions: int, turns: int, seed: int) -> list[dict]:
    """LongMemEval-format records: `per_type` questions of each type, then `abstention` `_abs` ones."""
    if sessions < 3 or turns < 2 or turns % 2:
        raise ValueError("synthetic data needs sessions >= 3 and an even turns >= 2")
    rng = random.Random(seed)
    makers = [_ssu, _ssa, _ssp, _multi_session, _temporal, _knowledge_update]
    plans = [(make, False) for _ in range(per_type) for make in makers]
    abstainers = [_ssu, _multi_session, _knowledge_update]
    plans += [(abstainers[i % len(abstainers)], True) for i in range(abstention)]
    return [_record(make, abstain, n, rng, sessions, turns) for n, (make, abstain) in enumerate(plans)]


def _record(make, abstain: bool, n: int, rng: random.Random, n_sessions: int, turns: int) -> dict:
    start = datetime(2024, 1, 8, 9, 0) + timedelta(days=rng.randrange(0, 200))
    dates = []
    t = start
    for _ in range(n_sessions):
        dates.append(t.replace(hour=rng.randrange(8, 22), minute=rng.randrange(60)))
        t += timedelta(days=rng.randrange(1, 5))
    question_date = dates[-1] + timedelta(days=rng.randrange(1, 4), hours=1)
    spec = make(rng, n_sessions, dates, question_date, abstain)
    topics = rng.sample(sorted(FILLER), k=len(FILLER))
    sessions, session_ids = [], []
    for s in range(n_sessions):
        filler = [
            {"role": "user" if k % 2 == 0 else "assistant", "content": c}
            for k, c in enumerate(FILLER[topics[s % len(topics)]][:turns])
        ]
        while len(filler) < turns:
            filler += [
                {"role": "user", "content": "Thanks, that helps."},
                {"role": "assistant", "content": "Glad it helps!"},
            ]
        evidence = spec["evidence"].get(s)
        if evidence:
            at = rng.randrange(0, turns // 2) * 2  # evidence pairs start on a user turn
            filler[at : at + 2] = evidence
            filler = filler[:turns]
        sessions.append(filler)
        session_ids.append(f"answer_{n}_{s}" if evidence else f"filler_{n}_{s}")
    qid = f"syn{n:03d}" + ("_abs" if abstain else "")
    return {
        "question_id": qid,
        "question_type": spec["type"],
        "question": spec["question"],
        "answer": spec["answer"],
        "question_date": question_date.strftime(DATE_FORMAT),
        "haystack_dates": [d.strftime(DATE_FORMAT) for d in dates],
        "haystack_session_ids": session_ids,
        "haystack_sessions": sessions,
        "answer_session_ids": [] if abstain else [session_ids[s] for s in sorted(spec["evidence"])],
    }


def _pair(user: str, assistant: str, gold: str = "user", mark: bool = True) -> list[dict]:
    """A user turn and the assistant's reply; `gold` says which one carries the evidence."""
    u = {"role": "user", "content": user}
    a = {"role": "assistant", "content": assistant}
    if mark:
        (u if gold == "user" else a)["has_answer"] = True
    return [u, a]


def _slots(rng: random.Random, n_sessions: int, k: int) -> list[int]:
    return sorted(rng.sample(range(n_sessions), k))


def _ssu(rng, n_sessions, dates, qdate, abstain):
    animal, name = rng.choice(PETS)
    s = _slots(rng, n_sessions, 1)[0]
    turn = _pair(
        f"Big news: I adopted a {animal} last weekend and named her {name}. Any tips for the first week?",
        f"Congratulations on {name}! Keep the routine calm and predictable for the first few days.",
        mark=not abstain,
    )
    if abstain:
        other = "parrot" if animal != "parrot" else "hamster"
        return {
            "type": "single-session-user",
            "question": f"What did I name the {other} I adopted?",
            "answer": f"The information provided is not enough. You mentioned adopting a {animal}, "
            f"not a {other}.",
            "evidence": {s: turn},
        }
    return {
        "type": "single-session-user",
        "question": f"What did I name the {animal} I adopted?",
        "answer": name,
        "evidence": {s: turn},
    }


def _ssa(rng, n_sessions, dates, qdate, abstain):
    s = _slots(rng, n_sessions, 1)[0]
    if rng.random() < 0.5:
        book = rng.choice(BOOKS)
        turn = _pair(
            "Could you suggest a short novel for my book club next month?",
            f"You could try '{book}'. It is short and always sparks a good discussion.",
            gold="assistant",
        )
        return {
            "type": "single-session-assistant",
            "question": "Which novel did you suggest for my book club?",
            "answer": book,
            "evidence": {s: turn},
        }
    dish, minutes = rng.choice(DISHES)
    turn = _pair(
        "I need a quick weeknight dinner idea.",
        f"Try a {dish}; it takes about {minutes} minutes from start to finish.",
        gold="assistant",
    )
    return {
        "type": "single-session-assistant",
        "question": "What quick weeknight dinner did you suggest to me?",
        "answer": dish,
        "evidence": {s: turn},
    }


def _ssp(rng, n_sessions, dates, qdate, abstain):
    liked, occasion, disliked = rng.choice(PREFERENCES)
    s = _slots(rng, n_sessions, 1)[0]
    turn = _pair(
        f"Honestly, I always prefer {liked}; {disliked} are just not for me.",
        "Good to know, I will keep that in mind for future suggestions.",
    )
    return {
        "type": "single-session-preference",
        "question": f"Can you recommend something for {occasion}?",
        "answer": f"The user would prefer suggestions of {liked}. They would not like {disliked}.",
        "evidence": {s: turn},
    }


def _multi_session(rng, n_sessions, dates, qdate, abstain):
    k = rng.choice([2, 3])
    items = rng.sample(GADGETS, k)
    slots = _slots(rng, n_sessions, k)
    evidence = {
        s: _pair(
            f"I bought a new {item} for the kitchen today.",
            f"Nice, a {item} is handy. Enjoy it!",
            mark=not abstain,
        )
        for s, item in zip(slots, items, strict=True)
    }
    if abstain:
        return {
            "type": "multi-session",
            "question": "How many houseplants have I bought?",
            "answer": "The information provided is not enough. You mentioned kitchen gadgets, "
            "not houseplants.",
            "evidence": evidence,
        }
    return {
        "type": "multi-session",
        "question": "How many new kitchen gadgets have I bought?",
        "answer": str(k),
        "evidence": evidence,
    }


def _temporal(rng, n_sessions, dates, qdate, abstain):
    activity = rng.choice(CLASSES)
    s = _slots(rng, n_sessions - 1, 1)[0]
    turn = _pair(
        f"I went to my first {activity} class today and loved it!",
        f"That's great! {activity.capitalize()} is a wonderful hobby to pick up.",
    )
    days = (qdate.date() - dates[s].date()).days
    return {
        "type": "temporal-reasoning",
        "question": f"How many days ago did I attend my first {activity} class?",
        "answer": f"{days} days ago",
        "evidence": {s: turn},
    }


def _knowledge_update(rng, n_sessions, dates, qdate, abstain):
    thing, old, new = rng.choice(SUBSCRIPTIONS)
    first, second = _slots(rng, n_sessions, 2)
    evidence = {
        first: _pair(
            f"My {thing} costs ${old} a month, which feels fair.", "That sounds reasonable.", mark=not abstain
        ),
        second: _pair(
            f"Ugh, they raised my {thing} to ${new} a month starting this week.",
            "Price increases are annoying; it may be worth comparing other options.",
            mark=not abstain,
        ),
    }
    if abstain:
        return {
            "type": "knowledge-update",
            "question": "How much does my car insurance cost per month now?",
            "answer": f"The information provided is not enough. You mentioned your {thing}, "
            "not car insurance.",
            "evidence": evidence,
        }
    return {
        "type": "knowledge-update",
        "question": f"How much do I pay for my {thing} per month now?",
        "answer": f"${new}",
        "evidence": evidence,
    }
