"""Every family states the contracts beside the registry (models/families.py): one train signature, results that
declare RunResult (save + summary), so training/run.py and update_run.py call every family the same way."""

import inspect
import typing

import pytest
from xtag.models.families import FAMILIES, RunResult, TrainInputs, UpdateInputs


def hints(entry) -> dict:
    """The entry's annotations, resolved (the modules use postponed annotations)."""
    return typing.get_type_hints(entry, vars(inspect.getmodule(entry)))


@pytest.mark.parametrize("kind", list(FAMILIES))
def test_each_train_entry_takes_the_one_train_inputs_and_returns_a_run_result(kind):
    entry = FAMILIES[kind].resolve("train")
    (parameter,) = inspect.signature(entry).parameters.values()
    found = hints(entry)
    assert found[parameter.name] is TrainInputs
    results = [t for t in typing.get_args(found["return"]) or (found["return"],) if t is not type(None)]
    assert results and all(RunResult in t.__mro__ for t in results), results


@pytest.mark.parametrize("kind", [k for k, f in FAMILIES.items() if f.update])
def test_each_update_entry_takes_update_inputs_and_returns_a_run_result(kind):
    entry = FAMILIES[kind].resolve("update")
    found = hints(entry)
    first = next(iter(inspect.signature(entry).parameters))
    assert found[first] is UpdateInputs
    result, facts = typing.get_args(found["return"])
    assert RunResult in result.__mro__ and facts is dict
