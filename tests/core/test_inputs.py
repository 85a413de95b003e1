"""`hud.core.inputs.loads`: the one scan of the body that spares the per-string checks refuses
exactly what checking every string and key refuses, naming the same field."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hud.core import inputs

# Text with what `text_problem` refuses mixed in: NUL, lone surrogates of both halves, and a
# valid surrogate pair (an astral character), beside any other character.
_TEXT = st.text(
    st.one_of(
        st.characters(),
        st.sampled_from(["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\U0001f600", "\\"]),
    ),
    max_size=8,
)
_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        _TEXT,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)


def _outcome(text: str) -> object:
    try:
        return ("ok", inputs.loads(text))
    except inputs.PayloadError as exc:
        return ("refused", exc.detail, exc.field, exc.code)


def _every_text(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for child in value for text in _every_text(child)]
    if isinstance(value, dict):
        return [text for key, child in value.items() for text in (key, *_every_text(child))]
    return []


@settings(max_examples=400, deadline=None)
@given(value=_VALUES, ascii_only=st.booleans())
def test_the_body_scan_refuses_what_the_string_walk_refuses(value, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only)
    fast = _outcome(text)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(inputs, "_may_hold_bad_text", lambda text: True)
        walked = _outcome(text)
    assert fast == walked
    # And against the definition: a NUL or lone surrogate in any decoded string or key is
    # refused (two escaped halves of a pair decode to one character, which passes).
    bad = [t for t in _every_text(json.loads(text)) if inputs.text_problem(t)]
    if bad:
        assert fast[0] == "refused"
    elif fast[0] == "refused":
        assert "contains" not in fast[1]


@pytest.mark.parametrize(
    ("text", "field", "detail"),
    [
        ('{"a": {"b": "x\\u0000y"}}', "a.b", "a.b contains a NUL character"),
        ('{"a": ["ok", "\\udc00"]}', "a[1]", "a[1] contains a lone surrogate (not valid Unicode)"),
        ('{"a": {"k\\ud800": 1}}', "a", "a key of a contains a lone surrogate (not valid Unicode)"),
        ('{"n": [1, 1e999]}', "n[1]", "n[1] must be a finite number"),
        ('{"n": 9223372036854775808}', "n", "n is outside the 64-bit integer range"),
        ('{"n": ' + "1" * 41 + "}", "n", "n is a number longer than 40 characters"),
        ("[" * 33 + "]" * 33, "[0]" * 32, "[0]" * 32 + " is nested deeper than 32 levels"),
    ],
)
def test_refusals_name_the_field(text, field, detail):
    with pytest.raises(inputs.PayloadError) as refused:
        inputs.loads(text)
    assert (refused.value.field, refused.value.detail) == (field, detail)


def test_a_surrogate_pair_and_an_escaped_backslash_pass():
    assert inputs.loads('{"s": "\\ud83d\\ude00", "t": "\\\\u0000"}') == {
        "s": "\U0001f600",
        "t": "\\u0000",
    }
