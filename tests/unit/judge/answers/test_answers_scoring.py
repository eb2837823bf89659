"""normalized-match-v1 (vfleet.verify.answers.scoring) on the forms a small instruct model answers in."""

from __future__ import annotations

import pytest

from vfleet.verify.answers.questions import Item
from vfleet.verify.answers.scoring import first_sentence, normalize, score

TWELVE = Item("t-1", "arithmetic", "What is 7 plus 5?", "12", ("twelve",))
PARIS = Item("t-2", "capital", "What is the capital of France?", "Paris")
MEXICO = Item("t-3", "capital", "What is the capital of Mexico?", "Mexico City")
COLD = Item("t-4", "opposite", "What is the opposite of 'hot'?", "cold")
THOUSAND = Item("t-5", "conversion", "How many grams are in a kilogram?", "1000")
EVEREST = Item("t-6", "fact", "What is the tallest mountain in the world?", "Everest", ("Mount Everest",))
BOGOTA = Item("t-7", "capital", "What is the capital of Colombia?", "Bogota")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Twenty-one", ("21",)),
        ("one hundred and twenty minutes", ("120", "minutes")),
        ("a hundred", ("100",)),
        ("two thousand three hundred and five", ("2305",)),
        ("one two three", ("1", "2", "3")),
        ("twenty zero", ("20", "0")),
        ("It weighs 1,000 grams.", ("it", "weighs", "1000", "grams")),
        ("3.50 and 3.0 and 007", ("3.5", "and", "3", "and", "7")),
        ("The Capital is São Paulo!", ("capital", "is", "sao", "paulo")),
        ("It isn't an apple", ("it", "isnt", "apple")),
        ("**Paris**", ("paris",)),
        ("", ()),
    ],
)
def test_normalize(text: str, words: tuple[str, ...]) -> None:
    assert normalize(text) == words


@pytest.mark.parametrize(
    ("line", "sentence"),
    [
        ("Paris. It is in France.", "Paris."),
        ("It takes 2.5 hours. Then more.", "It takes 2.5 hours."),
        ("Mt. Everest is tallest. Yes.", "Mt. Everest is tallest."),
        ("Is it 12? Yes", "Is it 12?"),
        ("no end", "no end"),
    ],
)
def test_first_sentence(line: str, sentence: str) -> None:
    assert first_sentence(line) == sentence


@pytest.mark.parametrize(
    ("item", "response", "right"),
    [
        (TWELVE, "12", True),
        (TWELVE, "Twelve.", True),
        (TWELVE, "7 plus 5 is 12.", True),
        (TWELVE, "7 + 5 = 12", True),
        (TWELVE, "\n\n  The answer is **12**.\nMore text 13", True),
        (TWELVE, "The answer is 12. Or maybe 13.", True),
        (TWELVE, "120", False),
        (TWELVE, "12 or 13", False),
        (TWELVE, "It is not 12.", False),
        (TWELVE, "Answer:\n12", False),
        (TWELVE, "", False),
        (PARIS, "Paris", True),
        (PARIS, "The capital of France is Paris.", True),
        (PARIS, "paris, of course", True),
        (PARIS, "Parisian", False),
        (PARIS, "Lyon. Paris is the largest city.", False),
        (PARIS, "It is not Paris.", False),
        (MEXICO, "Mexico City", True),
        (MEXICO, "The capital of Mexico is Mexico City.", True),
        (MEXICO, "Mexico", False),
        (MEXICO, "What is the capital of Mexico?", False),
        (COLD, "The opposite of hot is cold.", True),
        (COLD, "cold", True),
        (COLD, "It's not cold", False),
        (COLD, "coldness", False),
        (THOUSAND, "There are 1,000 grams in a kilogram.", True),
        (THOUSAND, "one thousand", True),
        (THOUSAND, "1000.0", True),
        (THOUSAND, "100", False),
        (EVEREST, "Mt. Everest", True),
        (EVEREST, "Mount Everest.", True),
        (EVEREST, "K2. Everest is second.", False),
        (BOGOTA, "Bogotá", True),
    ],
)
def test_score(item: Item, response: str, right: bool) -> None:
    assert score(item, response) is right


def test_an_answer_that_is_an_article_normalizes_to_nothing() -> None:
    """Why the set refuses such an item (test_answers_set): 'a' as an answer would match nothing."""
    item = Item("t-8", "word", "What is the first letter of 'apple'?", "a")
    assert normalize(item.answer) == ()
    assert not score(item, "a")
