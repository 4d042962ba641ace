"""A deterministic generator of LongMemEval-shaped data: the embedded default data set.

Each question gets its own multi-session, timestamped history of user/assistant chat in which a few
evidence turns (flagged `has_answer`, as in LongMemEval) sit among filler sessions about everyday topics.
Questions cover all six LongMemEval types, including knowledge updates, temporal reasoning and
multi-session aggregation, plus abstention questions (`_abs` ids) about things never mentioned. Evidence
and questions come in several phrasings, and every history holds a distractor: an unmarked exchange that
shares words with the question but is about someone else or something else (a sister's pet, a friend's
class, a neighbour's gadget), so that a relevance model trained here cannot get by on word overlap.

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
    free = [s for s in range(n_sessions) if s not in spec["evidence"]]
    inserts = dict(spec["evidence"])
    if free:  # no free session when evidence fills every one
        inserts[rng.choice(free)] = spec["distractor"]
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
        evidence = inserts.get(s)
        if evidence:
            at = rng.randrange(0, turns // 2) * 2  # evidence pairs start on a user turn
            filler[at : at + 2] = evidence
            filler = filler[:turns]
        sessions.append(filler)
        session_ids.append(f"answer_{n}_{s}" if s in spec["evidence"] else f"filler_{n}_{s}")
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


def _aside(user: str, assistant: str) -> list[dict]:
    """An exchange that is no evidence (a distractor)."""
    return _pair(user, assistant, mark=False)


def _slots(rng: random.Random, n_sessions: int, k: int) -> list[int]:
    return sorted(rng.sample(range(n_sessions), k))


def _other(rng: random.Random, options: list, *taken):
    return rng.choice([o for o in options if o not in taken])


def _ssu(rng, n_sessions, dates, qdate, abstain):
    animal, name = rng.choice(PETS)
    s = _slots(rng, n_sessions, 1)[0]
    said = rng.choice(
        [
            f"Big news: I adopted a {animal} last weekend and named her {name}. Any tips for the first week?",
            f"We brought home a {animal} from the shelter and I named her {name}. How do I help her settle?",
            f"Say hello to {name}, the {animal} I just adopted! What should I buy for her first?",
        ]
    )
    turn = _pair(
        said,
        f"Congratulations on {name}! Keep the routine calm and predictable for the first few days.",
        mark=not abstain,
    )
    sister_animal, sister_name = _other(rng, PETS, (animal, name))
    distractor = _aside(
        f"My sister adopted a new {sister_animal} too; the name she picked is {sister_name}.",
        f"{sister_name} sounds adorable; two new pets in one family!",
    )
    if abstain:
        other = "parrot" if animal != "parrot" else "hamster"
        return {
            "type": "single-session-user",
            "question": f"What did I name the {other} I adopted?",
            "answer": f"The information provided is not enough. You mentioned adopting a {animal}, "
            f"not a {other}.",
            "evidence": {s: turn},
            "distractor": distractor,
        }
    question = rng.choice(
        [f"What did I name the {animal} I adopted?", f"What is the name of my new {animal}?"]
    )
    return {
        "type": "single-session-user",
        "question": question,
        "answer": name,
        "evidence": {s: turn},
        "distractor": distractor,
    }


def _ssa(rng, n_sessions, dates, qdate, abstain):
    s = _slots(rng, n_sessions, 1)[0]
    if rng.random() < 0.5:
        book, other = rng.sample(BOOKS, 2)
        turn = _pair(
            "Could you suggest a short novel for my book club next month?",
            rng.choice(
                [
                    f"You could try '{book}'. It is short and always sparks a good discussion.",
                    f"I would go with '{book}': a quick read with plenty to talk about.",
                ]
            ),
            gold="assistant",
        )
        return {
            "type": "single-session-assistant",
            "question": rng.choice(
                [
                    "Which novel did you suggest for my book club?",
                    "What book did you recommend when I asked about my book club?",
                ]
            ),
            "answer": book,
            "evidence": {s: turn},
            "distractor": _aside(
                f"A friend in my book club wants to read '{other}' instead.",
                "Maybe the club can vote on it.",
            ),
        }
    (dish, minutes), (other, _) = rng.sample(DISHES, 2)
    turn = _pair(
        "I need a quick weeknight dinner idea.",
        rng.choice(
            [
                f"Try a {dish}; it takes about {minutes} minutes from start to finish.",
                f"How about a {dish}? You can have it on the table in {minutes} minutes.",
            ]
        ),
        gold="assistant",
    )
    return {
        "type": "single-session-assistant",
        "question": rng.choice(
            ["What quick weeknight dinner did you suggest to me?", "Which dinner idea did you give me?"]
        ),
        "answer": dish,
        "evidence": {s: turn},
        "distractor": _aside(
            f"My roommate cooked a {other} for dinner last night.",
            "That sounds like a tasty dinner.",
        ),
    }


def _ssp(rng, n_sessions, dates, qdate, abstain):
    (liked, occasion, disliked), (other, other_occasion, _) = rng.sample(PREFERENCES, 2)
    s = _slots(rng, n_sessions, 1)[0]
    said = rng.choice(
        [
            f"Honestly, I always prefer {liked}; {disliked} are just not for me.",
            f"You should know I love {liked} and would rather skip {disliked}.",
        ]
    )
    turn = _pair(said, "Good to know, I will keep that in mind for future suggestions.")
    return {
        "type": "single-session-preference",
        "question": f"Can you recommend something for {occasion}?",
        "answer": f"The user would prefer suggestions of {liked}. They would not like {disliked}.",
        "evidence": {s: turn},
        "distractor": _aside(
            f"My brother wants me to recommend something for {other_occasion}; he loves {other}.",
            "Then the choice should be easy for him.",
        ),
    }


def _multi_session(rng, n_sessions, dates, qdate, abstain):
    k = rng.choice([2, 3])
    items = rng.sample(GADGETS, k)
    slots = _slots(rng, n_sessions, k)
    phrasings = [
        "I bought a new {item} for the kitchen today.",
        "Just picked up a new {item} for my kitchen.",
        "My kitchen finally has a new {item}; I bought it this morning.",
    ]
    evidence = {
        s: _pair(
            rng.choice(phrasings).format(item=item),
            f"Nice, a {item} is handy. Enjoy it!",
            mark=not abstain,
        )
        for s, item in zip(slots, items, strict=True)
    }
    distractor = _aside(
        f"My neighbour bought a new {_other(rng, GADGETS, *items)} for her kitchen; I am not getting one.",
        "It is easy to get tempted by kitchen gadgets.",
    )
    if abstain:
        return {
            "type": "multi-session",
            "question": "How many houseplants have I bought?",
            "answer": "The information provided is not enough. You mentioned kitchen gadgets, "
            "not houseplants.",
            "evidence": evidence,
            "distractor": distractor,
        }
    return {
        "type": "multi-session",
        "question": rng.choice(
            ["How many new kitchen gadgets have I bought?", "How many kitchen appliances did I buy in total?"]
        ),
        "answer": str(k),
        "evidence": evidence,
        "distractor": distractor,
    }


def _temporal(rng, n_sessions, dates, qdate, abstain):
    activity, other = rng.sample(CLASSES, 2)
    s = _slots(rng, n_sessions - 1, 1)[0]
    said = rng.choice(
        [
            f"I went to my first {activity} class today and loved it!",
            f"Today was my very first {activity} class, and it was so much fun.",
        ]
    )
    turn = _pair(said, f"That's great! {activity.capitalize()} is a wonderful hobby to pick up.")
    days = (qdate.date() - dates[s].date()).days
    return {
        "type": "temporal-reasoning",
        "question": f"How many days ago did I attend my first {activity} class?",
        "answer": f"{days} days ago",
        "evidence": {s: turn},
        "distractor": _aside(
            f"A friend keeps inviting me to her first {other} class next month.",
            "It could be fun to try something new together.",
        ),
    }


def _knowledge_update(rng, n_sessions, dates, qdate, abstain):
    (thing, old, new), (other, cost, _) = rng.sample(SUBSCRIPTIONS, 2)
    first, second = _slots(rng, n_sessions, 2)
    evidence = {
        first: _pair(
            f"My {thing} costs ${old} a month, which feels fair.", "That sounds reasonable.", mark=not abstain
        ),
        second: _pair(
            rng.choice(
                [
                    f"Ugh, they raised my {thing} to ${new} a month starting this week.",
                    f"Heads up: from now on my {thing} is ${new} per month.",
                ]
            ),
            "Price increases are annoying; it may be worth comparing other options.",
            mark=not abstain,
        ),
    }
    distractor = _aside(f"My sister pays ${cost} a month for her {other}.", "Monthly costs add up quickly.")
    if abstain:
        return {
            "type": "knowledge-update",
            "question": "How much does my car insurance cost per month now?",
            "answer": f"The information provided is not enough. You mentioned your {thing}, "
            "not car insurance.",
            "evidence": evidence,
            "distractor": distractor,
        }
    return {
        "type": "knowledge-update",
        "question": f"How much do I pay for my {thing} per month now?",
        "answer": f"${new}",
        "evidence": evidence,
        "distractor": distractor,
    }
