"""What each task needs of its model (engine/tasks/contracts.py) is checked when the pipeline is built:
every pipeline, built around a model that lacks one member of its contract, stops there with a
ContractError naming the model, the contract and the member, nested ones (config.n_mels) too.
The models are stand-ins holding exactly the contract's members: the real ones meet their
contracts in every test that builds a real pipeline."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import pytest

from engine import registry
from engine.errors import ContractError
from engine.site.checkpoint import Checkpoint
from engine.tasks import contracts, module_for
from tests.text.test_tokenizer_errors import TINY

TASKS = ("digit-classification", "image-classification", "object-detection", "pose-estimation",
         "sentence-embedding", "text-generation", "speech-recognition")


class Stand:
    """An object with the given attributes, nothing else."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)


def stand_in(contract, without: str | None = None):
    """An object meeting `contract` (methods that do nothing, configs of small ints, a metadata
    mapping), less the member `without` ("config.n_mels": a member of a member)."""
    attributes = {}
    for name, kind in contracts.members(contract).items():
        inner = without.split(".", 1)[1] if without and without.startswith(name + ".") else None
        if name == without:
            continue
        if kind is None:
            attributes[name] = lambda *args, **kwargs: None
        elif getattr(kind, "_is_protocol", False):
            attributes[name] = stand_in(kind, inner)
        elif kind is int:
            attributes[name] = 8
        else:
            attributes[name] = {} if kind is Mapping else kind()
    return Stand(**attributes)


def all_members(contract, prefix: str = "") -> list[str]:
    out = []
    for name, kind in contracts.members(contract).items():
        out.append(prefix + name)
        if getattr(kind, "_is_protocol", False):
            out += all_members(kind, f"{prefix}{name}.")
    return out


def pipeline_around(task: str, model):
    """The task's pipeline class built on its registry entry, whose `load` gives `model`."""
    entry = registry.for_task(task)

    def load(tensors, device=None, **kwargs):
        return model
    load.__module__ = entry.load.__module__            # the entry's model file stays its module
    entry = dataclasses.replace(entry, load=load)
    files = {"config.json": b"{}"}                       # what a detector's load reads beside the weights
    if task == "sentence-embedding":                   # read before the model is built
        files = {"tokenizer.json": json.dumps(TINY).encode(), "config.json": b'{"max_position_embeddings": 512}'}
    cls = module_for(entry.pipeline).PIPELINE
    return cls(entry, device="numpy", weights=Checkpoint({}, files))


@pytest.mark.parametrize("task", TASKS)
def test_a_model_lacking_a_member_of_its_contract_is_refused_naming_it(task):
    contract = module_for(registry.for_task(task).pipeline).PIPELINE.MODEL
    assert contract is not contracts.Model                 # every task names its own
    names = all_members(contract)
    assert not contracts.missing(stand_in(contract), contract)
    for name in names:
        with pytest.raises(ContractError) as caught:
            pipeline_around(task, stand_in(contract, without=name))
        message = str(caught.value)
        assert f"missing {name}" in message and contract.__name__ in message, message
        assert registry.for_task(task).name in message and task in message, message


def test_a_method_that_is_not_callable_is_named():
    model = stand_in(contracts.CausalLM)
    model.new_cache = 3
    assert contracts.missing(model, contracts.CausalLM) == ["new_cache (not callable)"]
    with pytest.raises(ContractError, match=r"missing new_cache \(not callable\)"):
        pipeline_around("text-generation", model)
