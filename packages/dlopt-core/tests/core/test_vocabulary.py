"""``TextEnum.lookup`` and ``TextEnum.coerce``: a word read as its member, a wrong word
refused with the choices, wherever dlopt reads one (workloads, serving traits, providers'
declarations)."""

from __future__ import annotations

import pytest
import torch

from dlopt.errors import WorkloadError
from dlopt.plugin import Role, ServingTraits, TextEnum, WorkloadCase, WorkloadProfile
from dlopt.vocabulary import Concurrency, GradMode


class Colour(TextEnum):
    RED = "red"
    BLUE = "blue"


class Paint(TextEnum):
    RED = "red"


def test_a_member_its_text_or_a_member_of_the_same_text_name_the_member() -> None:
    assert Colour.lookup(Colour.RED) is Colour.RED
    assert Colour.lookup("blue") is Colour.BLUE
    assert Colour.lookup(Paint.RED) is Colour.RED
    assert Colour.lookup("green") is None and Colour.lookup(["red"]) is None


def test_coerce_refuses_a_wrong_word_with_the_choices_and_the_error_asked_for() -> None:
    assert Colour.coerce("red", "colour") is Colour.RED
    with pytest.raises(ValueError, match=r"^colour 'green'; use one of red, blue$"):
        Colour.coerce("green", "colour")
    with pytest.raises(KeyError, match=r"use one of red, blue \(any paint will do\)"):
        Colour.coerce(3, "colour", error=KeyError, hint=" (any paint will do)")


def test_a_workload_names_its_grad_mode_with_a_word_or_refuses_it() -> None:
    cases = (WorkloadCase("one", args=(torch.ones(1),)),)
    assert WorkloadProfile(cases=cases, grad_mode="no_grad").grad_mode is GradMode.NO_GRAD
    with pytest.raises(WorkloadError, match=r"grad_mode 'training'; use one of inference_mode"):
        WorkloadProfile(cases=cases, grad_mode="training")


def test_serving_traits_read_their_concurrency_as_a_word() -> None:
    assert ServingTraits(concurrency="per_thread").concurrency is Concurrency.PER_THREAD
    with pytest.raises(ValueError, match=r"ServingTraits.concurrency 'many'; use one of"):
        ServingTraits(concurrency="many")


def test_a_provider_declaring_a_role_that_is_none_of_the_three_is_told_the_choices() -> None:
    class Odd:
        name = "odd"
        role = "leader"

    assert Role.of(type("Plain", (), {"name": "plain", "role": "native"})()) is Role.NATIVE
    with pytest.raises(TypeError, match=r"provider 'odd' declares role 'leader'; use one of"):
        Role.of(Odd())
