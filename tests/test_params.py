import pytest

from memlab import Param
from memlab.core.params import resolve_params


def test_parse_and_validate_types():
    assert Param(3, low=1).parse("n", "7") == 7
    assert Param(True).parse("flag", "false") is False
    assert Param((10, 10), low=1).parse("modes", "4,5,6") == (4, 5, 6)
    assert Param(0.5, low=0.0, high=1.0).parse("p", "0.25") == 0.25
    assert Param((1, 2)).validate("modes", [3, 4]) == (3, 4)


@pytest.mark.parametrize("spec,text,match", [
    (Param(2500, low=1, high=10), "0", r"chunk_size=0 is out of range: expected integer in \[1, 10\]"),
    (Param(2500, low=1), "abc", r"chunk_size='abc' is not valid: expected integer"),
    (Param(True), "maybe", r"chunk_size='maybe' is not valid: expected true or false"),
    (Param((2, 2), low=1), "2,0", r"chunk_size=\(2, 0\) is out of range"),
    (Param("a", choices=("a", "b")), "c", r"expected one of 'a', 'b'"),
])
def test_bad_values_name_value_and_range(spec, text, match):
    with pytest.raises(ValueError, match=match):
        spec.parse("chunk_size", text)


def test_bool_is_not_an_int():
    with pytest.raises(ValueError, match="n=True"):
        Param(3, low=1).validate("n", True)


def test_resolve_fills_defaults_and_rejects_unknown():
    specs = {"a": Param(1), "b": Param(2)}
    assert resolve_params(specs, {"b": 5}, owner="x") == {"a": 1, "b": 5}
    with pytest.raises(ValueError, match=r"x has no parameter 'c'; valid parameters: a, b"):
        resolve_params(specs, {"c": 1}, owner="x")


def test_check_steps_is_the_one_divisibility_check():
    from memlab.core.params import check_steps, nearest_steps

    assert check_steps("hidden", 64, 4, rule="is not divisible by heads=4") == 16
    assert check_steps("depth", 26, 6, 2, rule="is not a basic layout 6n+2 (n >= 1)") == 4
    with pytest.raises(ValueError, match=r"^hidden=66 is not divisible by heads=4; nearest valid: 64, 68$"):
        check_steps("hidden", 66, 4, rule="is not divisible by heads=4")
    with pytest.raises(ValueError, match=r"^depth=3 is not 12k\+2 \(k >= 1\); nearest valid: 14, 26$"):
        check_steps("depth", 3, 12, 2, rule="is not 12k+2 (k >= 1)")  # below the smallest: the first two valid
    assert nearest_steps(111, 6, 2) == [110, 116]
