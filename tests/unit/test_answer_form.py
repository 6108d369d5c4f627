"""answer_form (tasks/reasoning_gym.py): does a response have the form the extraction reads as a final
answer? Hand-written responses; no reasoning-gym needed (the function is pure)."""

import pytest

from noma_prorl_bench.tasks.reasoning_gym import answer_form, extract_answer

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "response, form",
    [
        ("57", 1.0),
        ("The answer is 57.", 1.0),
        ("23 + 34 = **57**", 1.0),  # markup after the number
        ("The sum is 1,234.", 1.0),  # thousands comma
        ("x = -5.5  \n", 1.0),  # negative decimal, trailing space
        ("<answer>12</answer> as asked", 1.0),  # a tag always counts
        ("First add 23 and 34 to get 57, then", 0.0),  # cut mid-reasoning: the last number is not final
        ("57 apples", 0.0),  # words after the number
        ("I cannot compute that.", 0.0),
        ("", 0.0),
    ],
)
def test_numeric_reference_lenient(response, form):
    assert answer_form(response, "57") == form


def test_form_implies_extraction_under_lenient():
    for r in ("57", "The answer is 57.", "<answer>x</answer>", "a\n-3"):
        assert answer_form(r, "7") == 1.0 and extract_answer(r, "7") is not None


def test_tag_mode_needs_the_tag_and_text_reference_any_line():
    assert answer_form("57", "57", mode="tag") == 0.0
    assert answer_form("so <answer>57</answer>", "57", mode="tag") == 1.0
    assert answer_form("olleh", "olleh") == 1.0  # text reference: any non-empty line is read
    assert answer_form("  \n ", "olleh") == 0.0
