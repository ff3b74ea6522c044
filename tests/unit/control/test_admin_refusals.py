"""Every registry refusal has its HTTP answer in the admin API's one table."""

import inspect

import pytest

import headway.registry.errors as registry_errors
from headway.control.admin.body import field_message
from headway.control.admin.refusals import refusal

FAULTS = {registry_errors.RegistryError, registry_errors.SchemaTooNew}


def refusals():
    return [
        cls
        for _, cls in inspect.getmembers(registry_errors, inspect.isclass)
        if issubclass(cls, registry_errors.RegistryError) and cls not in FAULTS
    ]


@pytest.mark.parametrize("cls", refusals(), ids=lambda cls: cls.__name__)
def test_every_refusal_is_a_client_error_that_keeps_its_message(cls):
    answer = refusal(cls("the rule it broke"))
    assert answer is not None, f"{cls.__name__} is missing from the table"
    expected = {"Unknown": 404, "Duplicate": 409, "Invalid": 422}
    status = next((s for prefix, s in expected.items() if cls.__name__.startswith(prefix)), None)
    if cls in (registry_errors.UnknownTier, registry_errors.UnknownModelKind):
        status = 422  # a bad value in the body, not a missing thing
    elif cls in (
        registry_errors.RolloutActive,
        registry_errors.LastAdminKey,
        registry_errors.AliasInUse,
    ):
        status = 409
    elif cls is registry_errors.RegistryUnavailable:
        status = 503
    assert (answer.status, answer.message) == (status, "the rule it broke")


@pytest.mark.parametrize("cls", sorted(FAULTS, key=lambda c: c.__name__))
def test_a_fault_is_no_refusal(cls):
    assert refusal(cls("x")) is None


@pytest.mark.parametrize(
    ("msgspec_says", "we_say"),
    [
        ("Expected `float | null`, got `str` - at `$.rate_texts_per_s`",
         "`rate_texts_per_s`: expected a number or null, got a string"),
        ("Object contains unknown field `colour`", "`colour`: unknown field"),
        ("Object contains unknown field `x` - at `$.shadow`", "`shadow.x`: unknown field"),
        ("Object missing required field `name`", "`name`: required"),
        ("Expected `int` >= 1 - at `$.steps[0]`", "`steps[0]`: expected an integer >= 1"),
        ("Expected `object`, got `array`", "expected an object, got an array"),
    ],
)  # fmt: skip
def test_a_validation_message_leads_with_the_field(msgspec_says, we_say):
    assert field_message(msgspec_says) == we_say
