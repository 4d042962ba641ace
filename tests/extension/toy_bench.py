"""A toy benchmark defined outside lazymem: one loader function returning the shared schema.

Its data config (conf/data/toy.yaml beside this file) declares the loader, the judge and a metric.
"""

from __future__ import annotations

from lazymem.data.schema import Dataset, History, Message, Question

PETS = [("Rex", "dog"), ("Tom", "cat"), ("Kiwi", "parrot"), ("Nemo", "fish")]


def load(n_questions: int = 2) -> Dataset:
    """Histories of a few messages; each question asks for a pet's name stated in one message."""
    histories, questions = {}, []
    for k, (name, animal) in enumerate(PETS[:n_questions]):
        hid = f"toy-{k}"
        texts = ["Hi there!", f"My {animal} is called {name}.", "The weather is nice today.", "Bye!"]
        messages = [
            Message(i, f"s{i // 2}", f"2026-01-0{1 + i // 2}", ("user", "assistant")[i % 2], t, gold=i == 1)
            for i, t in enumerate(texts)
        ]
        histories[hid] = History(hid, messages)
        questions.append(
            Question(f"q{k}", "pet-name", f"What is my {animal} called?", name, hid, gold_idx=(1,))
        )
    return Dataset("toy", histories, questions, {"name": "toy", "path": None})


def exact_match(question: Question, answer: str) -> float:
    """A model-free metric: 1.0 when the reference appears in the answer."""
    return float(question.answer.lower() in answer.lower())


class ExactMatch:
    """The metric as the data config instantiates it (a callable of question and answer)."""

    def __call__(self, question: Question, answer: str) -> float:
        return exact_match(question, answer)
